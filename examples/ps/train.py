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

Env read: TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM; servers also POD_IP and
PADDLE_PORT; trainers also PADDLE_TRAINER_ID. Knobs: FLEET_EXAMPLE_STEPS (50),
FLEET_EXAMPLE_LOG_EVERY (10), FLEET_EXAMPLE_RETRY_SECONDS (3), FLEET_EXAMPLE_TIMEOUT_SECONDS (60).
Missing/invalid env exits 2; a broken connection to a server exits 1.
"""
import json, os, random, signal, socket, struct, sys, threading, time

DIM, BATCH, LR, EVAL_SEED = 16, 32, 0.1, 999
MAX_FRAME = 16 << 20  # refuse frames over 16 MiB: a garbage length must not make us allocate GiBs


def log(*a):
    print(*a, flush=True)


def die(msg, code=2):
    log(msg)
    sys.exit(code)


def env(name, default=None):
    v = os.environ.get(name, default)
    if v is None or v == "":
        die(f"Can not find {name}, please check your environment.")
    return v


def env_num(name, default=None, lo=None, typ=int):
    v = env(name, None if default is None else str(default))
    try:
        n = typ(v)
    except ValueError:
        die(f"{name} must be a number, but get {v!r}, please check your environment.")
    if lo is not None and n < lo:
        die(f"{name} must be >= {lo}, but get {n}, please check your environment.")
    return n


class ProtocolError(Exception):
    pass


def send_msg(sock, obj):
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None if not buf else bytes(buf)  # caller decides whether a short read is an error
        buf += chunk
    return bytes(buf)


def recv_msg(sock):
    """Next frame as a dict; None on clean EOF (peer closed between frames)."""
    head = recv_exact(sock, 4)
    if head is None:
        return None
    if len(head) < 4:
        raise ProtocolError("connection closed inside a frame header")
    (n,) = struct.unpack("!I", head)
    if n > MAX_FRAME:
        raise ProtocolError(f"frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
    body = recv_exact(sock, n) if n else b""
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


def true_params():
    rng = random.Random(0)
    return [rng.gauss(0, 1) for _ in range(DIM)] + [rng.gauss(0, 1)]  # weights then bias


def make_batch(rng, truth, n):
    xs = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(n)]
    ys = [sum(w * x for w, x in zip(truth, xi)) + truth[DIM] + 0.01 * rng.gauss(0, 1) for xi in xs]
    return xs, ys


def loss_and_grad(p, xs, ys):
    """Mean squared error of y ~ w.x + b and its gradient w.r.t. [w, b]."""
    grad, loss = [0.0] * (DIM + 1), 0.0
    for xi, y in zip(xs, ys):
        err = sum(w * x for w, x in zip(p, xi)) + p[DIM] - y
        loss += err * err
        for j, x in enumerate(xi):
            grad[j] += 2 * err * x
        grad[DIM] += 2 * err
    n = len(xs)
    return loss / n, [g / n for g in grad]


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
                        self.params[j] -= LR * sum(g[j] for g in grads) / self.n_trainers
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
            log(f"closing connection from {addr[0]}:{addr[1]}: {e}")
        except OSError as e:
            log(f"connection from {addr[0]}:{addr[1]} lost: {e}")
        except Exception as e:  # never let one bad client take the server down
            log(f"closing connection from {addr[0]}:{addr[1]}: internal error {e!r}")


def run_server(endpoints, n_trainers):
    ip, port = env("POD_IP"), env_num("PADDLE_PORT", lo=1)
    me = f"{ip}:{port}"
    if me not in endpoints:
        die(f"'{me}' is not in list")
    index = endpoints.index(me)
    lo, hi = shard_bounds(DIM + 1, len(endpoints))[index]
    shard = Shard(hi - lo, n_trainers)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((ip, port))
    except OSError as e:
        die(f"pserver cannot listen on {me}: {e}", 1)
    srv.listen(128)
    srv.settimeout(0.5)  # wake up regularly to notice that all trainers are done
    log(f"pserver_index: {index}, listening on {me}, shard params[{lo}:{hi}], trainers: {n_trainers}")
    while not shard.all_done.is_set():
        try:
            conn, addr = srv.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        threading.Thread(target=serve_conn, args=(conn, addr, shard), daemon=True).start()
    log(f"pserver_index: {index}, all {n_trainers} trainers done after {shard.step} steps, "
        f"shard params[{lo}:{hi}] = {[round(p, 4) for p in shard.params]}, exit")


# ----------------------------------------------------------------------------- trainer
def split_ep(ep):
    host, port = ep.rsplit(":", 1)
    return host, int(port)


def wait_for_servers(endpoints, retry_s):
    while True:
        not_ready = []
        for ep in endpoints:
            try:
                socket.create_connection(split_ep(ep), timeout=2).close()
            except OSError:
                not_ready.append(ep)
        if not not_ready:
            return
        log(f"server not ready, wait {retry_s:g} sec to retry...")
        log(f"not ready endpoints:{not_ready}")
        time.sleep(retry_s)


def call(sock, ep, obj=None):
    try:
        if obj is not None:
            send_msg(sock, obj)
        reply = recv_msg(sock)
    except socket.timeout:
        die(f"timed out waiting for pserver {ep} (is another trainer dead or stuck?)", 1)
    except (OSError, ProtocolError) as e:
        die(f"lost connection to pserver {ep}: {e}", 1)
    if reply is None:
        die(f"pserver {ep} closed the connection", 1)
    return reply


def run_trainer(endpoints, n_trainers):
    tid = env_num("PADDLE_TRAINER_ID", lo=0)
    if tid >= n_trainers:
        die(f"PADDLE_TRAINER_ID {tid} must be < PADDLE_TRAINERS_NUM {n_trainers}")
    steps = env_num("FLEET_EXAMPLE_STEPS", 50, lo=1)
    log_every = env_num("FLEET_EXAMPLE_LOG_EVERY", 10, lo=1)
    retry_s = env_num("FLEET_EXAMPLE_RETRY_SECONDS", 3, 0, float)
    timeout = env_num("FLEET_EXAMPLE_TIMEOUT_SECONDS", 60, 1, float)
    wait_for_servers(endpoints, retry_s)
    try:
        socks = [socket.create_connection(split_ep(ep), timeout=timeout) for ep in endpoints]
    except OSError as e:
        die(f"cannot connect to the pservers: {e}", 1)
    bounds = shard_bounds(DIM + 1, len(endpoints))
    truth, rng = true_params(), random.Random(1000 + tid)

    def pull():
        for s in socks:
            send_msg(s, {"op": "pull"})
        return [p for s, ep in zip(socks, endpoints) for p in call(s, ep)["params"]]

    start = last_t = time.time()
    last_step = 0
    for step in range(1, steps + 1):
        params = pull()
        loss, grad = loss_and_grad(params, *make_batch(rng, truth, BATCH))
        for s, (lo, hi) in zip(socks, bounds):  # send every slice first, then wait for the barrier
            send_msg(s, {"op": "push", "trainer_id": tid, "step": step, "grad": grad[lo:hi]})
        for s, ep in zip(socks, endpoints):
            call(s, ep)
        if (step - 1) % log_every == 0 or step == steps:
            # step per second: average over the whole run so far;
            # speed: samples/s of this trainer over the steps since the previous log line.
            now = time.time()
            total, interval = now - start, now - last_t
            log(f"worker_index: {tid}, step {step}, train_loss: {loss:.6f}, total time cost = {total:.6f}, "
                f"step per second: {step / total:.6f}, speed: {(step - last_step) * BATCH / interval:.6f}")
            last_t, last_step = now, step
    # Final loss on a fixed evaluation batch (same seed everywhere, so all trainers print the same value).
    final, _ = loss_and_grad(pull(), *make_batch(random.Random(EVAL_SEED), truth, 256))
    log(f"worker_index: {tid}, final train_loss: {final:.6f}")
    for s, ep in zip(socks, endpoints):
        call(s, ep, {"op": "done", "trainer_id": tid})
        s.close()


def main():
    # SystemExit unwinds the main thread promptly even inside accept()/recv(); worker threads are daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    role = env("TRAINING_ROLE")
    if role not in ("PSERVER", "TRAINER"):
        die(f"TRAINING_ROLE must be PSERVER or TRAINER, but get {role}, please check your environment.")
    endpoints = [e.strip() for e in env("PADDLE_PSERVERS_IP_PORT_LIST").split(",") if e.strip()]
    if not endpoints:
        die("Can not find PADDLE_PSERVERS_IP_PORT_LIST, please check your environment.")
    for ep in endpoints:
        if ":" not in ep or not ep.rsplit(":", 1)[1].isdigit():
            die(f"bad endpoint {ep!r} in PADDLE_PSERVERS_IP_PORT_LIST, expected ip:port")
    n_trainers = env_num("PADDLE_TRAINERS_NUM", lo=1)
    (run_server if role == "PSERVER" else run_trainer)(endpoints, n_trainers)


if __name__ == "__main__":
    main()
