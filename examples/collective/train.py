#!/usr/bin/env python3
"""Collective (data-parallel) example job: linear regression with a TCP ring all-reduce, stdlib only.

Every rank starts from the same weights, trains on its own synthetic data shard and, each step,
all-reduces (sum, then average) its gradient with the other ranks over TCP, so all ranks apply the
same update and stay bit-identical. Rank r listens on PADDLE_CURRENT_ENDPOINT and connects to rank
r+1's endpoint, forming a ring. With one rank there is no networking at all.

Env read: PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT
(which must be entry PADDLE_TRAINER_ID of the list); optional PADDLE_TRAINING_ROLE (must be TRAINER if
set) and FLAGS_selected_gpus (only reported: this example computes on CPU). Knobs: FLEET_EXAMPLE_STEPS
(50), FLEET_EXAMPLE_LOG_EVERY (10), FLEET_EXAMPLE_RETRY_SECONDS (3, the longest wait between connect
attempts), FLEET_EXAMPLE_TIMEOUT_SECONDS (60, per socket operation while training).
Invalid env exits 2; a dead or silent peer exits 1.
"""
import os, random, signal, socket, struct, sys, time

DIM, BATCH, LR, EVAL_SEED = 16, 32, 0.1, 999
MAX_FRAME = 16 << 20     # refuse frames over 16 MiB
SETUP_TIMEOUT = 900      # how long to wait for peers to come up (Paddle's NCCL-id exchange uses 900 s)


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


def split_ep(ep):
    host, port = ep.rsplit(":", 1)
    return host, int(port)


# Frame: 4-byte big-endian length, then (origin rank, step) as two int32 and the float64 payload.
def send_vec(sock, origin, step, vec):
    body = struct.pack(f"!ii{len(vec)}d", origin, step, *vec)
    sock.sendall(struct.pack("!I", len(body)) + body)


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_vec(sock):
    """(origin, step, floats), or None if the peer closed the connection."""
    head = recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = struct.unpack("!I", head)
    if n > MAX_FRAME or n < 8 or (n - 8) % 8:
        raise ValueError(f"bad frame length {n}")
    body = recv_exact(sock, n)
    if body is None:
        return None
    origin, step = struct.unpack_from("!ii", body)
    return origin, step, list(struct.unpack_from(f"!{(n - 8) // 8}d", body, 8))


class Ring:
    def __init__(self, rank, endpoints, retry_s, timeout):
        self.rank, self.n, self.eps = rank, len(endpoints), endpoints
        self.left, self.right = left, right = (rank - 1) % self.n, (rank + 1) % self.n
        # Listen before connecting: our left neighbour's connect then succeeds as soon as we are up,
        # and sits in the backlog until we accept it, so the ring forms in any start order.
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(split_ep(endpoints[rank]))
        except OSError as e:
            die(f"cannot listen on {endpoints[rank]}: {e}", 1)
        srv.listen(16)
        deadline, wait = time.time() + SETUP_TIMEOUT, 0.1
        while True:
            try:
                self.right_sock = socket.create_connection(split_ep(endpoints[right]), timeout=2)
                send_vec(self.right_sock, rank, -1, [])  # hello: tells the acceptor who we are
                break
            except OSError:
                if time.time() > deadline:
                    die(f"peer rank {right} ({endpoints[right]}) never came up, giving up", 1)
                log(f"peer not ready, wait {wait:g} sec to retry...")
                log(f"not ready endpoints:{[endpoints[right]]}")
                time.sleep(wait)
                wait = min(wait * 2, retry_s)  # exponential backoff, capped
        srv.settimeout(max(1.0, deadline - time.time()))
        while True:  # accept until our real left neighbour shows up; ignore probes and strangers
            try:
                conn, addr = srv.accept()
            except socket.timeout:
                die(f"peer rank {left} ({endpoints[left]}) never connected, giving up", 1)
            conn.settimeout(timeout)
            try:
                hello = recv_vec(conn)
            except (OSError, ValueError):
                hello = None
            if hello and hello[0] == left and hello[1] == -1:
                self.left_sock = conn
                break
            log(f"ignoring connection from {addr[0]}:{addr[1]} (not rank {left})")
            conn.close()
        srv.close()
        self.right_sock.settimeout(timeout)  # bounded waits from now on: a dead peer must not hang us
        log(f"ring ready: rank {left} -> rank {rank} -> rank {right}")

    def allreduce_mean(self, step, vec):
        """Ring all-gather of every rank's vector, then a sum in rank order (identical on all ranks)."""
        got, cur = {self.rank: vec}, (self.rank, vec)
        for _ in range(self.n - 1):
            # Send-then-receive on every rank: fine for these small frames (the kernel buffers them);
            # large tensors would need a sender thread or a reduce-scatter to avoid deadlock.
            try:
                send_vec(self.right_sock, cur[0], step, cur[1])
            except OSError as e:
                die(f"rank {self.rank}: sending to peer rank {self.right} ({self.eps[self.right]}) "
                    f"failed at step {step}: {e}", 1)
            try:
                msg = recv_vec(self.left_sock)
            except socket.timeout:
                die(f"rank {self.rank}: timed out waiting for peer rank {self.left} ({self.eps[self.left]}) "
                    f"at step {step}", 1)
            except (OSError, ValueError) as e:
                die(f"rank {self.rank}: receiving from peer rank {self.left} ({self.eps[self.left]}) "
                    f"failed at step {step}: {e}", 1)
            if msg is None:
                die(f"rank {self.rank}: peer rank {self.left} ({self.eps[self.left]}) closed the "
                    f"connection at step {step}, aborting", 1)
            origin, s, v = msg
            if s != step or not 0 <= origin < self.n or origin in got or len(v) != len(vec):
                die(f"rank {self.rank}: out-of-sync frame from rank {origin} (step {s}, expected {step})", 1)
            got[origin], cur = v, (origin, v)  # keep it and forward it to the right next round
        return [sum(got[r][j] for r in range(self.n)) / self.n for j in range(len(vec))]


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


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    role = os.environ.get("PADDLE_TRAINING_ROLE")
    if role and role != "TRAINER":
        die(f"PADDLE_TRAINING_ROLE must be TRAINER in collective mode, but get {role}")
    rank, n = env_num("PADDLE_TRAINER_ID", lo=0), env_num("PADDLE_TRAINERS_NUM", lo=1)
    endpoints = [e.strip() for e in env("PADDLE_TRAINER_ENDPOINTS").split(",") if e.strip()]
    current = env("PADDLE_CURRENT_ENDPOINT")
    for ep in endpoints:
        if ":" not in ep or not ep.rsplit(":", 1)[1].isdigit():
            die(f"bad endpoint {ep!r} in PADDLE_TRAINER_ENDPOINTS, expected ip:port")
    if len(endpoints) != n:
        die(f"PADDLE_TRAINERS_NUM is {n} but PADDLE_TRAINER_ENDPOINTS has {len(endpoints)} endpoints")
    if current not in endpoints:
        die(f"'{current}' is not in list")
    if rank >= n or endpoints[rank] != current:
        die(f"PADDLE_CURRENT_ENDPOINT {current} is not entry {rank} (PADDLE_TRAINER_ID) of "
            f"PADDLE_TRAINER_ENDPOINTS {endpoints}")
    steps = env_num("FLEET_EXAMPLE_STEPS", 50, lo=1)
    log_every = env_num("FLEET_EXAMPLE_LOG_EVERY", 10, lo=1)
    retry_s = env_num("FLEET_EXAMPLE_RETRY_SECONDS", 3, 0.1, float)
    timeout = env_num("FLEET_EXAMPLE_TIMEOUT_SECONDS", 60, 1, float)
    gpus = os.environ.get("FLAGS_selected_gpus", "")
    log(f"Run on CPU (FLAGS_selected_gpus={gpus} ignored: this example has no GPU code)" if gpus
        else "Run on CPU")
    log(f"rank {rank}/{n}, endpoint {current}")

    ring = Ring(rank, endpoints, retry_s, timeout) if n > 1 else None
    truth, params, rng = true_params(), [0.0] * (DIM + 1), random.Random(1000 + rank)
    start = last_t = time.time()
    last_step = 0
    for step in range(1, steps + 1):
        loss, grad = loss_and_grad(params, *make_batch(rng, truth, BATCH))
        # The loss rides along with the gradient, so the logged loss is the mean over all ranks.
        *grad, loss = ring.allreduce_mean(step, grad + [loss]) if ring else grad + [loss]
        params = [p - LR * g for p, g in zip(params, grad)]
        if (step - 1) % log_every == 0 or step == steps:
            # step per second: average over the whole run so far;
            # speed: samples/s of this rank over the steps since the previous log line.
            now = time.time()
            total, interval = now - start, now - last_t
            log(f"worker_index: {rank}, step {step}, train_loss: {loss:.6f}, total time cost = {total:.6f}, "
                f"step per second: {step / total:.6f}, speed: {(step - last_step) * BATCH / interval:.6f}")
            last_t, last_step = now, step
    # Fixed evaluation batch, same seed on every rank: identical weights give identical output.
    final, _ = loss_and_grad(params, *make_batch(random.Random(EVAL_SEED), truth, 256))
    log(f"worker_index: {rank}, final train_loss: {final:.6f}")


if __name__ == "__main__":
    main()
