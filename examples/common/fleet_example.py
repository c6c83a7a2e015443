"""Helpers shared by the example jobs examples/ps/train.py and examples/collective/train.py.

Both jobs train the same synthetic linear regression model, read the Paddle launcher env the same
way and print the same Paddle-style progress lines, so those pieces live here once: the constants,
logging and exit helpers, env parsing, socket helpers, the model (truth, batches, loss and gradient,
evaluation) and the step log. Standard library only. Each train.py puts examples/ on sys.path and
imports this module as `fx`.
"""
import array, os, random, signal, struct, sys, time

DIM, BATCH, LR, EVAL_SEED = 16, 32, 0.1, 999  # features, batch size, learning rate, eval batch seed
MAX_FRAME = 16 << 20  # refuse frames over 16 MiB: a garbage length must not make us allocate GiBs


# ----------------------------------------------------------------------------- process and env
def log(*a):
    print(*a, flush=True)


def die(msg, code=2):
    """Print msg and exit: 2 = bad environment (the default), 1 = runtime failure."""
    log(msg)
    sys.exit(code)


def exit_on_sigterm():
    # SystemExit unwinds the main thread promptly even inside accept()/recv(); worker threads are daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


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


def knobs(retry_lo):
    """(steps, log_every, retry_s, timeout) from the FLEET_EXAMPLE_* variables."""
    return (env_num("FLEET_EXAMPLE_STEPS", 50, lo=1),
            env_num("FLEET_EXAMPLE_LOG_EVERY", 10, lo=1),
            env_num("FLEET_EXAMPLE_RETRY_SECONDS", 3, retry_lo, float),
            env_num("FLEET_EXAMPLE_TIMEOUT_SECONDS", 60, 1, float))


def endpoint_list(name, value=None):
    """Comma-separated ip:port list from env var `name` (or from `value`, already read from it)."""
    eps = [e.strip() for e in (env(name) if value is None else value).split(",") if e.strip()]
    for ep in eps:
        if ":" not in ep or not ep.rsplit(":", 1)[1].isdigit():
            die(f"bad endpoint {ep!r} in {name}, expected ip:port")
    return eps


def split_ep(ep):
    host, port = ep.rsplit(":", 1)
    return host, int(port)


# ----------------------------------------------------------------------------- sockets
# Both wire formats are a 4-byte big-endian length followed by that many bytes of body.
def send_frame(sock, body):
    sock.sendall(struct.pack("!I", len(body)) + body)


def recv_exact(sock, n):
    """n bytes; fewer if the peer closed mid-way (the caller decides if that is an error), None if none."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None if not buf else bytes(buf)
        buf += chunk
    return bytes(buf)


# ----------------------------------------------------------------------------- model
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


def eval_loss(params, truth):
    """Loss on a fixed evaluation batch (same seed everywhere: identical weights give identical output)."""
    return loss_and_grad(params, *make_batch(random.Random(EVAL_SEED), truth, 256))[0]


# ----------------------------------------------------------------------------- progress log
def metrics_reporter():
    """fleet_metrics.report when the script runs in a FleetJob pod (the operator sets
    FLEET_METRICS_ENDPOINT: the pod's sidecar), else None. fleet_metrics is on the tools image's
    PYTHONPATH, and in sdk/python of a checkout. Every step goes to the sidecar, which puts it in
    the job's status.progress (kubectl get fj, fleetctl top); the log lines stay for people."""
    if not os.environ.get("FLEET_METRICS_ENDPOINT"):
        return None
    try:
        import fleet_metrics
    except ImportError:
        sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
        try:
            import fleet_metrics
        except ImportError:
            return None
    return fleet_metrics.report


class StepLog:
    """Paddle-style progress lines for steps 1, 1+k, 1+2k, ... and the last step; the clock starts now.

    step per second: average over the whole run so far;
    speed: samples/s of this process over the steps since the previous log line.
    """

    def __init__(self, index, steps, log_every):
        self.index, self.steps, self.log_every = index, steps, log_every
        self.start = self.last_t = time.time()
        self.last_step = 0
        self.report = metrics_reporter()

    def step(self, step, loss):
        if self.report:
            self.report(step=step, loss=loss, samples=BATCH, total_steps=self.steps)
        if (step - 1) % self.log_every and step != self.steps:
            return
        now = time.time()
        total, interval = now - self.start, now - self.last_t
        speed = (step - self.last_step) * BATCH / interval
        log(f"worker_index: {self.index}, step {step}, train_loss: {loss:.6f}, "
            f"total time cost = {total:.6f}, step per second: {step / total:.6f}, speed: {speed:.6f}")
        self.last_t, self.last_step = now, step

    def final(self, loss):
        log(f"worker_index: {self.index}, final train_loss: {loss:.6f}")


# ----------------------------------------------------------------------------- fleet_runtime examples
# Shared by examples/collective_gloo/train.py and examples/ps_mlp/train.py, which run on the
# runtime's Python module.
def import_fleet_runtime():
    """The fleet_runtime module: from PYTHONPATH, else build/runtime/python of this checkout
    (override with FLEET_RUNTIME_PYTHONPATH); exits 2 when it cannot be imported."""
    try:
        import fleet_runtime
        return fleet_runtime
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("FLEET_RUNTIME_PYTHONPATH") or os.path.join(here, "..", "..", "build", "runtime", "python")
    sys.path.insert(0, os.path.abspath(build))
    try:
        import fleet_runtime
        return fleet_runtime
    except ImportError as e:
        die(f"cannot import fleet_runtime ({e}). Build it with `cmake --build build --target fleet_runtime_python` "
            f"and put build/runtime/python on PYTHONPATH; it is built for /usr/bin/python3 "
            f"(this is {sys.executable}, Python {sys.version_info.major}.{sys.version_info.minor})")


class PaddleStepLog:
    """Paddle's fleet progress line ("step%d", no space) for steps 1, 1+k, 1+2k, ... and the last.

    step per second: average over the run so far; speed: this process's samples/s since the last line.
    """

    def __init__(self, index, steps, log_every, batch=BATCH):
        self.index, self.steps, self.log_every, self.batch = index, steps, log_every, batch
        self.start = self.last_t = time.time()
        self.last_step = 0
        self.report = metrics_reporter()

    def step(self, step, loss):
        if self.report:
            self.report(step=step, loss=loss, samples=self.batch, total_steps=self.steps)
        if (step - 1) % self.log_every and step != self.steps:
            return
        now = time.time()
        total, interval = now - self.start, max(now - self.last_t, 1e-9)
        speed = (step - self.last_step) * self.batch / interval
        log(f"worker_index: {self.index}, step{step}, train_loss: {loss:.6f}, total time cost = {total:.6f}, "
            f"step per second: {step / max(total, 1e-9):.6f}, speed: {speed:.6f}")
        self.last_t, self.last_step = now, step


def communicator(fr, rendezvous, timeout):
    """(comm, collective): a fleet_runtime Communicator from the Paddle env (exit 2 for a bad env, 1
    when the rendezvous fails; its rank is logged), and collective(what, call, *args) that runs one of its operations and
    exits 1 naming it and the rank when it fails (a peer died or timed out)."""
    try:
        comm = fr.Communicator(rendezvous_timeout=rendezvous, timeout=timeout)
    except fr.Error as e:
        die(str(e), 2 if str(e).startswith("invalid Paddle collective env") else 1)

    def collective(what, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except fr.Error as e:
            die(f"rank {comm.rank}: {what} failed: {e}", 1)
    log(f"rank {comm.rank}/{comm.size}, backend {comm.backend}, endpoint {os.environ.get('PADDLE_CURRENT_ENDPOINT', '-')}")
    return comm, collective


def finish(comm, collective, params, truth, precision=".6f"):
    """The end of a data-parallel run: checks that every rank holds the same parameters, logs the
    final loss on the evaluation batch and closes the communicator."""
    rank, size, n = comm.rank, comm.size, len(params)
    gathered = array.array("d", bytes(8 * n * size))
    collective("all_gather", comm.all_gather, params, gathered)
    if any(gathered[r * n:(r + 1) * n] != params for r in range(size)):
        die(f"rank {rank}: the ranks' parameters differ after training", 1)
    log(f"parameters identical on all {size} ranks")
    collective("barrier", comm.barrier)
    log(f"worker_index: {rank}, final train_loss: {eval_loss(list(params), truth):{precision}}")
    comm.close()
