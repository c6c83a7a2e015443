#!/usr/bin/env python3
"""Parameter-server example job: sync-SGD linear regression over TCP, standard library only.

The same script is both roles, chosen by TRAINING_ROLE exactly as a Paddle PS job is:

* PSERVER: owns a contiguous slice (shard) of the dense parameter vector [w_0..w_15, b]; its shard
  index is the position of POD_IP:PADDLE_PORT in PADDLE_PSERVERS_IP_PORT_LIST. It listens on
  POD_IP:PADDLE_PORT and serves pull/push/done over length-prefixed JSON frames. A push blocks until
  all PADDLE_TRAINERS_NUM trainers pushed that step; then the averaged gradient is applied. When every
  trainer has said "done" the server prints a final line and exits 0.
* TRAINER: waits for all servers (Paddle's "server not ready" loop), then each step pulls every shard,
  computes the MSE gradient on its own synthetic batch and pushes each slice back to its owner.

Env read: TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM, POD_IP, PADDLE_PORT;
trainers also PADDLE_TRAINER_ID and, if set, PADDLE_TRAINER_ENDPOINTS (entry PADDLE_TRAINER_ID must be
POD_IP:PADDLE_PORT). Knobs: FLEET_EXAMPLE_STEPS (50), FLEET_EXAMPLE_LOG_EVERY (10),
FLEET_EXAMPLE_RETRY_SECONDS (3), FLEET_EXAMPLE_TIMEOUT_SECONDS (60).
Missing/invalid env exits 2; a broken connection to a server exits 1.
Model, env parsing and logging helpers are shared with the collective example: ../common/fleet_example.py.
"""
import json, os, random, socket, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import fleet_example as fx  # noqa: E402  (examples/common/fleet_example.py)



class ProtocolError(Exception):
    pass


def send_msg(sock, obj):
    fx.send_frame(sock, json.dumps(obj).encode())


def recv_msg(sock):
    """Next frame as a dict; None on clean EOF (peer closed between frames)."""
    head = fx.recv_exact(sock, 4)
    if head is None:
        return None
    if len(head) < 4:
        raise ProtocolError("connection closed inside a frame header")
    n = int.from_bytes(head, "big")
    if n > fx.MAX_FRAME:
        raise ProtocolError(f"frame of {n} bytes exceeds the {fx.MAX_FRAME}-byte limit")
    body = fx.recv_exact(sock, n) if n else b""
    if body is None or len(body) < n:
        raise ProtocolError("connection closed inside a frame")
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed JSON frame: {e}")
    if not isinstance(msg, dict):
        raise ProtocolError("frame is not a JSON object")
    return msg


def shard_bounds(n_params, n_servers):
    """Contiguous split like numpy.array_split: the first (n % s) shards get one extra element."""
    q, r = divmod(n_params, n_servers)
    starts = [k * q + min(k, r) for k in range(n_servers + 1)]
    return list(zip(starts, starts[1:]))


# ----------------------------------------------------------------------------- server
class Shard:
    def __init__(self, n_params, n_trainers):
        self.params, self.n_trainers = [0.0] * n_params, n_trainers
        self.step = 0          # updates applied so far
        self.pending = {}      # trainer_id -> gradient for step self.step + 1
        self.done = set()
        self.cond = threading.Condition()
        self.all_done = threading.Event()

    def _tid(self, msg):
        tid = msg.get("trainer_id")
        if not isinstance(tid, int) or not 0 <= tid < self.n_trainers:
            raise ProtocolError(f"bad trainer_id {tid!r}")
        return tid

    def handle(self, msg):
        op = msg.get("op")
        if op == "pull":
            with self.cond:
                return {"params": list(self.params), "step": self.step}  # a copy: sent after unlock
        if op == "push":
            tid, step, grad = self._tid(msg), msg.get("step"), msg.get("grad")
            if not isinstance(grad, list) or len(grad) != len(self.params) or \
                    not all(isinstance(g, (int, float)) for g in grad):
                raise ProtocolError(f"gradient must be {len(self.params)} numbers")
            with self.cond:
                if step != self.step + 1 or tid in self.pending:
                    raise ProtocolError(f"trainer {tid} pushed step {step!r}, server is at step {self.step}")
                self.pending[tid] = grad
                if len(self.pending) == self.n_trainers:
                    # Sum in trainer-id order so the result never depends on arrival order.
                    grads = [self.pending[t] for t in sorted(self.pending)]
                    for j in range(len(self.params)):
                        self.params[j] -= fx.LR * sum(g[j] for g in grads) / self.n_trainers
                    self.pending.clear()
                    self.step += 1
                    self.cond.notify_all()
                while self.step < step:  # sync SGD: answer only once this step is applied
                    self.cond.wait()
            return {"ok": True, "step": step}
        if op == "done":
            tid = self._tid(msg)
            with self.cond:
                self.done.add(tid)
                finished = len(self.done) == self.n_trainers
            return {"ok": True, "_finished": finished}
        raise ProtocolError(f"unknown op {op!r}")


def serve_conn(conn, addr, shard):
    with conn:
        try:
            while True:
                msg = recv_msg(conn)
                if msg is None:
                    return  # clean close, e.g. a trainer's readiness probe
                reply = shard.handle(msg)
                finished = reply.pop("_finished", False)
                send_msg(conn, reply)
                if finished:
                    shard.all_done.set()
        except ProtocolError as e:
            fx.log(f"closing connection from {addr[0]}:{addr[1]}: {e}")
        except OSError as e:
            fx.log(f"connection from {addr[0]}:{addr[1]} lost: {e}")
        except Exception as e:  # never let one bad client take the server down
            fx.log(f"closing connection from {addr[0]}:{addr[1]}: internal error {e!r}")


def own_endpoint():
    """(POD_IP, PADDLE_PORT, "ip:port"): every PS process, server or trainer, must have both."""
    ip, port = fx.env("POD_IP"), fx.env_num("PADDLE_PORT", lo=1)
    return ip, port, f"{ip}:{port}"


def run_server(endpoints, n_trainers):
    ip, port, me = own_endpoint()
    if me not in endpoints:
        fx.die(f"'{me}' is not in list")
    index = endpoints.index(me)
    lo, hi = shard_bounds(fx.DIM + 1, len(endpoints))[index]
    shard = Shard(hi - lo, n_trainers)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((ip, port))
    except OSError as e:
        fx.die(f"pserver cannot listen on {me}: {e}", 1)
    srv.listen(128)
    srv.settimeout(0.5)  # wake up regularly to notice that all trainers are done
    fx.log(f"pserver_index: {index}, listening on {me}, shard params[{lo}:{hi}], trainers: {n_trainers}")
    while not shard.all_done.is_set():
        try:
            conn, addr = srv.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        threading.Thread(target=serve_conn, args=(conn, addr, shard), daemon=True).start()
    fx.log(f"pserver_index: {index}, all {n_trainers} trainers done after {shard.step} steps, "
           f"shard params[{lo}:{hi}] = {[round(p, 4) for p in shard.params]}, exit")


# ----------------------------------------------------------------------------- trainer
def wait_for_servers(endpoints, retry_s):
    while True:
        not_ready = []
        for ep in endpoints:
            try:
                socket.create_connection(fx.split_ep(ep), timeout=2).close()
            except OSError:
                not_ready.append(ep)
        if not not_ready:
            return
        fx.log(f"server not ready, wait {retry_s:g} sec to retry...")
        fx.log(f"not ready endpoints:{not_ready}")
        time.sleep(retry_s)


def call(sock, ep, obj=None):
    try:
        if obj is not None:
            send_msg(sock, obj)
        reply = recv_msg(sock)
    except socket.timeout:
        fx.die(f"timed out waiting for pserver {ep} (is another trainer dead or stuck?)", 1)
    except (OSError, ProtocolError) as e:
        fx.die(f"lost connection to pserver {ep}: {e}", 1)
    if reply is None:
        fx.die(f"pserver {ep} closed the connection", 1)
    return reply


def run_trainer(endpoints, n_trainers):
    tid = fx.env_num("PADDLE_TRAINER_ID", lo=0)
    if tid >= n_trainers:
        fx.die(f"PADDLE_TRAINER_ID {tid} must be < PADDLE_TRAINERS_NUM {n_trainers}")
    # Paddle 2.2 requires a trainer's own endpoint too; 2.0/2.1 take PADDLE_TRAINER_ENDPOINTS[id] as it.
    _, _, me = own_endpoint()
    if os.environ.get("PADDLE_TRAINER_ENDPOINTS"):
        trainer_eps = fx.endpoint_list("PADDLE_TRAINER_ENDPOINTS")
        if tid >= len(trainer_eps):
            fx.die(f"PADDLE_TRAINER_ID {tid} is out of range of PADDLE_TRAINER_ENDPOINTS {trainer_eps}, "
                   f"please check your environment.")
        if trainer_eps[tid] != me:
            fx.die(f"POD_IP:PADDLE_PORT {me} is not entry {tid} (PADDLE_TRAINER_ID) of "
                   f"PADDLE_TRAINER_ENDPOINTS {trainer_eps}, please check your environment.")
    steps, log_every, retry_s, timeout = fx.knobs(retry_lo=0)
    wait_for_servers(endpoints, retry_s)
    try:
        socks = [socket.create_connection(fx.split_ep(ep), timeout=timeout) for ep in endpoints]
    except OSError as e:
        fx.die(f"cannot connect to the pservers: {e}", 1)
    bounds = shard_bounds(fx.DIM + 1, len(endpoints))
    truth, rng = fx.true_params(), random.Random(1000 + tid)

    def pull():
        for s in socks:
            send_msg(s, {"op": "pull"})
        return [p for s, ep in zip(socks, endpoints) for p in call(s, ep)["params"]]

    progress = fx.StepLog(tid, steps, log_every)
    for step in range(1, steps + 1):
        params = pull()
        loss, grad = fx.loss_and_grad(params, *fx.make_batch(rng, truth, fx.BATCH))
        for s, (lo, hi) in zip(socks, bounds):  # send every slice first, then wait for the barrier
            send_msg(s, {"op": "push", "trainer_id": tid, "step": step, "grad": grad[lo:hi]})
        for s, ep in zip(socks, endpoints):
            call(s, ep)
        progress.step(step, loss)
    progress.final(fx.eval_loss(pull(), truth))  # all trainers hold the same weights: same value
    for s, ep in zip(socks, endpoints):
        call(s, ep, {"op": "done", "trainer_id": tid})
        s.close()


def main():
    fx.exit_on_sigterm()
    role = fx.env("TRAINING_ROLE")
    if role not in ("PSERVER", "TRAINER"):
        fx.die(f"TRAINING_ROLE must be PSERVER or TRAINER, but get {role}, please check your environment.")
    endpoints = fx.endpoint_list("PADDLE_PSERVERS_IP_PORT_LIST")
    if not endpoints:
        fx.die("Can not find PADDLE_PSERVERS_IP_PORT_LIST, please check your environment.")
    n_trainers = fx.env_num("PADDLE_TRAINERS_NUM", lo=1)
    (run_server if role == "PSERVER" else run_trainer)(endpoints, n_trainers)


if __name__ == "__main__":
    main()
