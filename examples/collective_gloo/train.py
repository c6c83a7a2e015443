#!/usr/bin/env python3
"""Data-parallel example on the FleetJob runtime: gradients all-reduced through fleet_runtime (Gloo).

The same synthetic linear regression as examples/collective/train.py, but the communication is the
runtime's C++ collectives (runtime/collective, bound to Python as the module fleet_runtime) instead
of a hand-written TCP ring:
  - the Communicator is set up from the Paddle launcher env alone (PADDLE_TRAINER_ID,
    PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT, PADDLE_DISTRI_BACKEND);
    rank 0 serves the rendezvous on its endpoint;
  - every rank starts from its own random weights and takes rank 0's (broadcast), as Paddle's
    DataParallel does;
  - each step every rank computes the gradient on its own data shard and all-reduces it (avg), with
    the loss riding along, so all ranks apply the same update;
  - at the end the ranks all-gather their weights and check that they are identical.

Run: build/launcher/fleetrun --nproc_per_node=4 examples/collective_gloo/train.py
The module is looked up on PYTHONPATH, then in build/runtime/python of this checkout (override with
FLEET_RUNTIME_PYTHONPATH). It is built for /usr/bin/python3; any CPython of the same minor version
loads it.

Knobs: FLEET_EXAMPLE_STEPS (50), FLEET_EXAMPLE_LOG_EVERY (10), FLEET_EXAMPLE_TIMEOUT_SECONDS (60,
per operation: how long a dead or silent peer is tolerated), FLEET_EXAMPLE_RENDEZVOUS_SECONDS (900,
how long ranks wait for each other at start, as Paddle does).
Exit codes: 0 success, 2 invalid env or missing module, 1 a peer failed or timed out.
"""
import array, os, random, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from common import fleet_example as fx  # noqa: E402  (examples/common/fleet_example.py)


def main():
    fx.exit_on_sigterm()
    fr = fx.import_fleet_runtime()
    steps, log_every, _, timeout = fx.knobs(retry_lo=0)
    rendezvous = fx.env_num("FLEET_EXAMPLE_RENDEZVOUS_SECONDS", 900, 1, float)
    comm, collective = fx.communicator(fr, rendezvous, timeout)
    rank, size = comm.rank, comm.size

    # Own random start, then rank 0's weights everywhere.
    init = random.Random(100 + rank)
    params = array.array("d", [init.gauss(0, 1) for _ in range(fx.DIM + 1)])
    collective("broadcast", comm.broadcast, params, root=0)

    truth, rng = fx.true_params(), random.Random(1000 + rank)
    progress = fx.PaddleStepLog(rank, steps, log_every)
    for step in range(1, steps + 1):
        loss, grad = fx.loss_and_grad(list(params), *fx.make_batch(rng, truth, fx.BATCH))
        buf = array.array("d", grad + [loss])  # the loss rides along: the logged loss is the mean over ranks
        collective(f"all_reduce at step {step}", comm.all_reduce, buf, op="avg")
        for j in range(len(params)):
            params[j] -= fx.LR * buf[j]
        progress.step(step, buf[-1])

    fx.finish(comm, collective, params, truth)


if __name__ == "__main__":
    main()
