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
Model, env parsing and logging helpers are shared with the PS example: ../common/fleet_example.py.
"""
import os, random, socket, struct, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import fleet_example as fx  # noqa: E402  (examples/common/fleet_example.py)

SETUP_TIMEOUT = 900  # how long to wait for peers to come up (Paddle's NCCL-id exchange uses 900 s)


# Frame: 4-byte big-endian length, then (origin rank, step) as two int32 and the float64 payload.
def send_vec(sock, origin, step, vec):
    fx.send_frame(sock, struct.pack(f"!ii{len(vec)}d", origin, step, *vec))


def recv_vec(sock):
    """(origin, step, floats), or None if the peer closed the connection."""
    head = fx.recv_exact(sock, 4)
    if head is None or len(head) < 4:
        return None
    (n,) = struct.unpack("!I", head)
    if n > fx.MAX_FRAME or n < 8 or (n - 8) % 8:
        raise ValueError(f"bad frame length {n}")
    body = fx.recv_exact(sock, n)
    if body is None or len(body) < n:
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
            srv.bind(fx.split_ep(endpoints[rank]))
        except OSError as e:
            fx.die(f"cannot listen on {endpoints[rank]}: {e}", 1)
        srv.listen(16)
        deadline, wait = time.time() + SETUP_TIMEOUT, 0.1
        while True:
            try:
                self.right_sock = socket.create_connection(fx.split_ep(endpoints[right]), timeout=2)
                send_vec(self.right_sock, rank, -1, [])  # hello: tells the acceptor who we are
                break
            except OSError:
                if time.time() > deadline:
                    fx.die(f"peer rank {right} ({endpoints[right]}) never came up, giving up", 1)
                fx.log(f"peer not ready, wait {wait:g} sec to retry...")
                fx.log(f"not ready endpoints:{[endpoints[right]]}")
                time.sleep(wait)
                wait = min(wait * 2, retry_s)  # exponential backoff, capped
        srv.settimeout(max(1.0, deadline - time.time()))
        while True:  # accept until our real left neighbour shows up; ignore probes and strangers
            try:
                conn, addr = srv.accept()
            except socket.timeout:
                fx.die(f"peer rank {left} ({endpoints[left]}) never connected, giving up", 1)
            conn.settimeout(timeout)
            try:
                hello = recv_vec(conn)
            except (OSError, ValueError):
                hello = None
            if hello and hello[0] == left and hello[1] == -1:
                self.left_sock = conn
                break
            fx.log(f"ignoring connection from {addr[0]}:{addr[1]} (not rank {left})")
            conn.close()
        srv.close()
        self.right_sock.settimeout(timeout)  # bounded waits from now on: a dead peer must not hang us
        fx.log(f"ring ready: rank {left} -> rank {rank} -> rank {right}")

    def allreduce_mean(self, step, vec):
        """Ring all-gather of every rank's vector, then a sum in rank order (identical on all ranks)."""
        got, cur = {self.rank: vec}, (self.rank, vec)
        for _ in range(self.n - 1):
            # Send-then-receive on every rank: fine for these small frames (the kernel buffers them);
            # large tensors would need a sender thread or a reduce-scatter to avoid deadlock.
            try:
                send_vec(self.right_sock, cur[0], step, cur[1])
            except OSError as e:
                fx.die(f"rank {self.rank}: sending to peer rank {self.right} ({self.eps[self.right]}) "
                       f"failed at step {step}: {e}", 1)
            try:
                msg = recv_vec(self.left_sock)
            except socket.timeout:
                fx.die(f"rank {self.rank}: timed out waiting for peer rank {self.left} "
                       f"({self.eps[self.left]}) at step {step}", 1)
            except (OSError, ValueError) as e:
                fx.die(f"rank {self.rank}: receiving from peer rank {self.left} ({self.eps[self.left]}) "
                       f"failed at step {step}: {e}", 1)
            if msg is None:
                fx.die(f"rank {self.rank}: peer rank {self.left} ({self.eps[self.left]}) closed the "
                       f"connection at step {step}, aborting", 1)
            origin, s, v = msg
            if s != step or not 0 <= origin < self.n or origin in got or len(v) != len(vec):
                fx.die(f"rank {self.rank}: out-of-sync frame from rank {origin} "
                       f"(step {s}, expected {step})", 1)
            got[origin], cur = v, (origin, v)  # keep it and forward it to the right next round
        return [sum(got[r][j] for r in range(self.n)) / self.n for j in range(len(vec))]


def main():
    fx.exit_on_sigterm()
    role = os.environ.get("PADDLE_TRAINING_ROLE")
    if role and role != "TRAINER":
        fx.die(f"PADDLE_TRAINING_ROLE must be TRAINER in collective mode, but get {role}")
    rank, n = fx.env_num("PADDLE_TRAINER_ID", lo=0), fx.env_num("PADDLE_TRAINERS_NUM", lo=1)
    raw_endpoints = fx.env("PADDLE_TRAINER_ENDPOINTS")
    current = fx.env("PADDLE_CURRENT_ENDPOINT")
    endpoints = fx.endpoint_list("PADDLE_TRAINER_ENDPOINTS", raw_endpoints)
    if len(endpoints) != n:
        fx.die(f"PADDLE_TRAINERS_NUM is {n} but PADDLE_TRAINER_ENDPOINTS has {len(endpoints)} endpoints")
    if current not in endpoints:
        fx.die(f"'{current}' is not in list")
    if rank >= n or endpoints[rank] != current:
        fx.die(f"PADDLE_CURRENT_ENDPOINT {current} is not entry {rank} (PADDLE_TRAINER_ID) of "
               f"PADDLE_TRAINER_ENDPOINTS {endpoints}")
    steps, log_every, retry_s, timeout = fx.knobs(retry_lo=0.1)
    gpus = os.environ.get("FLAGS_selected_gpus", "")
    fx.log(f"Run on CPU (FLAGS_selected_gpus={gpus} ignored: this example has no GPU code)" if gpus
           else "Run on CPU")
    fx.log(f"rank {rank}/{n}, endpoint {current}")

    ring = Ring(rank, endpoints, retry_s, timeout) if n > 1 else None
    truth, params, rng = fx.true_params(), [0.0] * (fx.DIM + 1), random.Random(1000 + rank)
    progress = fx.StepLog(rank, steps, log_every)
    for step in range(1, steps + 1):
        loss, grad = fx.loss_and_grad(params, *fx.make_batch(rng, truth, fx.BATCH))
        # The loss rides along with the gradient, so the logged loss is the mean over all ranks.
        *grad, loss = ring.allreduce_mean(step, grad + [loss]) if ring else grad + [loss]
        params = [p - fx.LR * g for p, g in zip(params, grad)]
        progress.step(step, loss)
    progress.final(fx.eval_loss(params, truth))  # identical weights on every rank: identical output


if __name__ == "__main__":
    main()
