#!/usr/bin/env python3
"""Elastic data-parallel example: checkpoints and resumes, so that it survives fleetrun's restarts.

In an elastic job (fleetrun --elastic_server ... --np MIN:MAX, or an elastic FleetJob) every change
of the job's nodes stops this script on every node and starts it again with new PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM and PADDLE_TRAINER_ENDPOINTS. What it does so that the training carries on:
  - every FLEET_EXAMPLE_CHECKPOINT_EVERY steps rank 0 saves a checkpoint (weights, the optimizer's
    momentum, the step and the position in the data stream) to FLEET_EXAMPLE_CHECKPOINT_DIR,
    atomically: written to a temporary file, synced, then renamed; the newest two are kept;
  - at start every rank loads the newest checkpoint there is and logs "resumed from step S"; rank
    0's state is then broadcast, so that all ranks hold the same state even if they saw different
    files (an old generation's rank 0 may still have been saving); with no checkpoint it starts at
    step 0 from rank 0's random weights;
  - in a FleetJob with spec.checkpoint.beforeStop, a pod told to stop (suspend, preemption,
    eviction, scale-in) asks first (sdk/python/fleet_checkpoint.py): rank 0 saves a checkpoint at
    once and answers with its step, the other ranks answer at once (rank 0's checkpoint is the
    job's), and the resumed run logs the step FLEET_CHECKPOINT_STEP names;
  - the data is one deterministic stream (sample i comes from seed 1000000 + i) read GLOBAL_BATCH
    samples per step, whatever the number of ranks; rank r of n takes every n-th sample of the
    step's batch from the r-th. The gradient sums are all-reduced and divided by GLOBAL_BATCH, so
    a step does the same update on 1, 2 or 4 ranks, and a run that was interrupted and resumed on
    another number of ranks ends with the same loss as one that was not (to rounding: about 1e-12
    relative; tests/launcher/fleetrun_elastic_test.cc requires 1e-6).

The model, the evaluation and the progress lines are those of examples/collective_gloo/train.py
(linear regression, 16 features); the optimizer is SGD with momentum, so there is optimizer state.
The communication is the runtime's C++ collectives through the Python module fleet_runtime.

Run: fleetrun --elastic_server=ETCD --job_id=j --np=2:4 --host=THIS_NODE examples/elastic/train.py
     (with FLEET_EXAMPLE_CHECKPOINT_DIR on storage every node mounts)

Knobs: FLEET_EXAMPLE_CHECKPOINT_DIR (unset: no checkpoints, every start is step 0),
FLEET_EXAMPLE_CHECKPOINT_EVERY (10), FLEET_EXAMPLE_STEP_SECONDS (0: extra seconds per step, standing
for real work), and those of examples/collective_gloo/train.py.
Exit codes: 0 success, 2 invalid env or missing module, 1 a peer failed or timed out (after the loss
of a node: fleetrun then restarts it once the job's nodes have changed).
"""
import array, json, os, random, re, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from common import fleet_example as fx  # noqa: E402  (examples/common/fleet_example.py)

GLOBAL_BATCH = 96        # samples per step over all ranks, the same for every number of ranks
MOMENTUM = 0.5
DATA_SEED = 1000000      # sample i of the data stream is drawn from Random(DATA_SEED + i)
KEEP = 2                 # checkpoints kept (the older one for a reader that opened it just before a save)
CHECKPOINT = re.compile(r"ckpt-(\d{8})\.json")


# ----------------------------------------------------------------------------- data
def shard(truth, position, rank, size):
    """This rank's part of the global batch that starts at sample `position` of the stream."""
    xs, ys = [], []
    for i in range(position + rank, position + GLOBAL_BATCH, size):
        x, y = fx.make_batch(random.Random(DATA_SEED + i), truth, 1)
        xs += x
        ys += y
    return xs, ys


# ----------------------------------------------------------------------------- checkpoints
def checkpoints(directory):
    """Checkpoint file names in `directory`, oldest first."""
    return sorted(n for n in os.listdir(directory) if CHECKPOINT.fullmatch(n))


def load_newest(directory):
    """The newest readable checkpoint's state, or None."""
    for name in reversed(checkpoints(directory)):
        try:
            with open(os.path.join(directory, name)) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            fx.log(f"skipping checkpoint {name}: {e}")
    return None


def save(directory, state):
    """Writes the state as ckpt-<step>.json: a reader sees the whole file or none (rename is atomic)."""
    path = os.path.join(directory, f"ckpt-{state['step']:08d}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(state, f)  # floats as repr: they read back bit for bit
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash of the node
    finally:
        os.close(dir_fd)
    for old in checkpoints(directory)[:-KEEP]:
        os.remove(os.path.join(directory, old))


def stop_requests():
    """fleet_checkpoint (sdk/python) when the pod may be asked to checkpoint before it stops (the
    operator sets FLEET_CHECKPOINT_DIR: spec.checkpoint.beforeStop), else None. On the tools image's
    PYTHONPATH, and in sdk/python of a checkout."""
    if not os.environ.get("FLEET_CHECKPOINT_DIR"):
        return None
    try:
        import fleet_checkpoint
    except ImportError:
        sys.path.append(os.path.join(HERE, "..", "..", "sdk", "python"))
        try:
            import fleet_checkpoint
        except ImportError:
            return None
    return fleet_checkpoint


# ----------------------------------------------------------------------------- training
def main():
    fx.exit_on_sigterm()
    fr = fx.import_fleet_runtime()
    steps, log_every, _, timeout = fx.knobs(retry_lo=0)
    rendezvous = fx.env_num("FLEET_EXAMPLE_RENDEZVOUS_SECONDS", 900, 1, float)
    every = fx.env_num("FLEET_EXAMPLE_CHECKPOINT_EVERY", 10, lo=1)
    step_seconds = fx.env_num("FLEET_EXAMPLE_STEP_SECONDS", 0, 0, float)
    directory = os.environ.get("FLEET_EXAMPLE_CHECKPOINT_DIR", "")
    if directory:
        os.makedirs(directory, exist_ok=True)
    comm, collective = fx.communicator(fr, rendezvous, timeout)
    rank, size = comm.rank, comm.size

    # The state: [step, data position] + weights + momentum. Rank 0's goes to every rank.
    n = fx.DIM + 1
    loaded = load_newest(directory) if directory else None
    if loaded:
        state = array.array("d", [loaded["step"], loaded["data_position"]] + loaded["params"] + loaded["momentum"])
    else:
        init = random.Random(100 + rank)
        state = array.array("d", [0, 0] + [init.gauss(0, 1) for _ in range(n)] + [0.0] * n)
    collective("broadcast", comm.broadcast, state, root=0)
    start, position = int(state[0]), int(state[1])
    params, velocity = state[2:2 + n], state[2 + n:]
    if start:
        fx.log(f"rank {rank}: resumed from step {start} (data position {position}) with {size} ranks")
    else:
        fx.log(f"rank {rank}: no checkpoint; starting at step 0")
    stops = stop_requests()
    if stops and stops.resume_step() is not None:
        fx.log(f"rank {rank}: the job's last checkpoint before stop was step {stops.resume_step()}")

    truth = fx.true_params()
    progress = fx.PaddleStepLog(rank, steps, log_every)
    for step in range(start + 1, steps + 1):
        xs, ys = shard(truth, position, rank, size)
        loss, grad = fx.loss_and_grad(list(params), xs, ys) if xs else (0.0, [0.0] * n)
        # Sums, not means: the ranks' shards differ in size when GLOBAL_BATCH is not a multiple of size.
        # The last element says whether this rank's sidecar asks for a checkpoint: summed, every rank
        # learns that some rank was asked at the same step, so all of them answer with that one step.
        asked_here = bool(directory and stops and stops.requested())
        buf = array.array("d", [g * len(xs) for g in grad] + [loss * len(xs), 1.0 if asked_here else 0.0])
        collective(f"all_reduce at step {step}", comm.all_reduce, buf, op="sum")
        for j in range(n):
            velocity[j] = MOMENTUM * velocity[j] + buf[j] / GLOBAL_BATCH
            params[j] -= fx.LR * velocity[j]
        position += GLOBAL_BATCH
        progress.step(step, buf[n] / GLOBAL_BATCH)
        if step_seconds:
            time.sleep(step_seconds)
        asked = buf[n + 1] > 0
        if directory and rank == 0 and (step % every == 0 or asked):
            save(directory, {"step": step, "data_position": position, "params": list(params),
                             "momentum": list(velocity), "world_size": size})
            fx.log(f"rank 0: checkpoint saved at step {step}" + (" (asked before the pod stops)" if asked else ""))
        if asked:
            # Every rank answers only once rank 0's checkpoint of this step is on disk: a rank that
            # answered first could have the step recorded that a killed rank 0 never saved.
            collective(f"checkpoint barrier at step {step}", comm.all_reduce, array.array("d", [0.0]), op="sum")
            if stops.requested():
                stops.saved(step)

    fx.finish(comm, collective, params, truth, precision=".9g")


if __name__ == "__main__":
    main()
