#!/usr/bin/env python3
"""The Fleet quick start in parameter-server mode, on the FleetJob runtime (fleet_runtime.ps).

The seeds' quick start trains an MLP (fc-tanh, fc-tanh, fc-softmax, cross-entropy) on synthetic data
with fleet.init / is_server / init_server / run_server / init_worker / stop_worker. This is that
script with the parameter server of runtime/ps (C++, gRPC) behind the same calls, and the model in
plain Python (no Paddle, no numpy), so it runs anywhere fleetrun does:

  build/launcher/fleetrun --server_num=2 --worker_num=2 examples/ps_mlp/train.py --mode sync
  build/launcher/fleetrun --server_num=2 --worker_num=2 examples/ps_mlp/train.py --mode async
  build/launcher/fleetrun --server_num=2 --worker_num=2 examples/ps_mlp/train.py --mode geo --k_steps 10

The model: 32 dense features plus one categorical feature (one of 100 ids) whose 8-float embedding
lives in a sparse table (rows created on first pull), concatenated into fc(40 -> 32, tanh),
fc(32 -> 32, tanh), fc(32 -> 2, softmax). The MLP's weights are one dense table. Both tables are
sharded over the servers; the servers apply Adam (dense) and Adagrad (sparse) in sync and async mode;
geo mode is SGD on the trainers with deltas merged every k steps (as Paddle's geo mode).
Data: features uniform in [0, 1) as the seeds' gen_data, but the label is a fixed rule of the
features and the id (seed 0) instead of a coin flip, so that the loss can fall; trainer i draws its
batches from seed 1000 + i. The seeds use hid_dim 128 and batch 128; in pure Python that is a second
per step, so the defaults are 32 and 32 (--hid_dim / --batch_size change them).

Paddle's step lines ("worker_index: 0, step11, train_loss: ..."), then "worker_index: i, final
train_loss: x": the loss of the final (merged) model on a fixed evaluation batch (seed 999), the same
on every trainer.

Options: --mode sync|async|geo (sync), --k_steps (10, geo), --steps (200), --log_every (10),
--hid_dim (32), --batch_size (32), --model_dir DIR (servers load a checkpoint), --save_dir DIR
(trainer 0 saves one at the end). The module is looked up on PYTHONPATH, then in build/runtime/python
of this checkout (override with FLEET_RUNTIME_PYTHONPATH). It is built for /usr/bin/python3; any
CPython of the same minor version (3.11 here) loads it.
Exit codes: 0 success, 2 invalid env or arguments or missing module, 1 a server failed or timed out.
"""
import argparse, math, operator, os, random, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from common import fleet_example as fx  # noqa: E402  (examples/common/fleet_example.py)

FEATURES, IDS, EMB, CLASSES = 32, 100, 8, 2
DENSE_TABLE, SPARSE_TABLE = 0, 1
EVAL_SEED, EVAL_BATCH = 999, 256
log, die = fx.log, fx.die


# ----------------------------------------------------------------------------- data
def truth():
    rng = random.Random(0)
    weights = [rng.uniform(-1, 1) for _ in range(FEATURES)]
    id_effect = [rng.uniform(-1.5, 1.5) for _ in range(IDS)]
    return weights, id_effect


def make_batch(rng, rule, n):
    weights, id_effect = rule
    xs, ids, ys = [], [], []
    for _ in range(n):
        x = [rng.random() for _ in range(FEATURES)]
        i = rng.randrange(IDS)
        score = sum(w * (v - 0.5) for w, v in zip(weights, x)) + id_effect[i]
        xs.append(x)
        ids.append(i)
        ys.append(1 if score > 0 else 0)
    return xs, ids, ys


def features(xs, emb):
    """The MLP's input: the dense features centred (x - 0.5), then the sample's embedding row."""
    return [[v - 0.5 for v in x] + list(emb[k * EMB:(k + 1) * EMB]) for k, x in enumerate(xs)]


# ----------------------------------------------------------------------------- model
class MLP:
    """fc(in -> hid, tanh), fc(hid -> hid, tanh), fc(hid -> 2, softmax) over one flat parameter vector.

    Weights are stored by output unit (row j of layer l holds the weights into unit j), so a unit's
    pre-activation is one dot product.
    """

    def __init__(self, hid):
        self.shapes = [(FEATURES + EMB, hid), (hid, hid), (hid, CLASSES)]
        self.offsets, n = [], 0
        for fan_in, fan_out in self.shapes:
            self.offsets.append(n)            # weights: fan_out rows of fan_in
            n += fan_in * fan_out + fan_out   # then the biases
        self.size = n

    def initial(self, seed):
        rng, p = random.Random(seed), []
        for fan_in, fan_out in self.shapes:  # Xavier uniform, zero biases
            r = math.sqrt(6.0 / (fan_in + fan_out))
            p += [rng.uniform(-r, r) for _ in range(fan_in * fan_out)] + [0.0] * fan_out
        return p

    def layers(self, p):
        out = []
        for (fan_in, fan_out), o in zip(self.shapes, self.offsets):
            rows = [p[o + j * fan_in:o + (j + 1) * fan_in] for j in range(fan_out)]
            out.append((rows, p[o + fan_in * fan_out:o + fan_in * fan_out + fan_out]))
        return out

    def loss(self, p, inputs, ys, grad=True):
        """Mean cross-entropy; with grad, also d/dparams (flat) and d/dinputs (per sample)."""
        mul, layers, n = operator.mul, self.layers(p), len(inputs)
        acts = [inputs]
        for l, (rows, bias) in enumerate(layers):
            z = [[b + sum(map(mul, a, w)) for w, b in zip(rows, bias)] for a in acts[-1]]
            acts.append([[math.tanh(v) for v in zs] for zs in z] if l < len(layers) - 1 else z)
        total, delta = 0.0, []
        for logits, y in zip(acts[-1], ys):
            m = max(logits)
            e = [math.exp(v - m) for v in logits]
            s = sum(e)
            total -= math.log(e[y] / s)
            delta.append([(ei / s - (1.0 if k == y else 0.0)) / n for k, ei in enumerate(e)])
        if not grad:
            return total / n
        g = [0.0] * self.size
        for l in range(len(layers) - 1, -1, -1):
            rows, _ = layers[l]
            (fan_in, fan_out), o = self.shapes[l], self.offsets[l]
            a_t = list(zip(*acts[l]))      # fan_in columns over the batch
            d_t = list(zip(*delta))        # fan_out columns over the batch
            for j in range(fan_out):
                g[o + j * fan_in:o + (j + 1) * fan_in] = [sum(map(mul, d_t[j], col)) for col in a_t]
                g[o + fan_in * fan_out + j] = sum(d_t[j])
            cols = list(zip(*rows))        # fan_in columns of the weights
            back = [[sum(map(mul, d, c)) for c in cols] for d in delta]
            if l > 0:
                delta = [[b * (1.0 - a * a) for b, a in zip(bs, acs)] for bs, acs in zip(back, acts[l])]
            else:
                delta = back
        return total / n, g, delta


def parse_args():
    ap = argparse.ArgumentParser(description="Fleet quick start (MLP) in parameter-server mode")
    ap.add_argument("--mode", choices=["sync", "async", "geo"], default="sync")
    ap.add_argument("--k_steps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--log_every", type=int, default=10)
    ap.add_argument("--hid_dim", type=int, default=32)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--model_dir", default=None)
    ap.add_argument("--save_dir", default=None)
    args = ap.parse_args()
    if min(args.k_steps, args.steps, args.log_every, args.hid_dim, args.batch_size) < 1:
        ap.error("--k_steps, --steps, --log_every, --hid_dim and --batch_size must be >= 1")
    return args


def main():
    args = parse_args()
    fr = fx.import_fleet_runtime()
    fleet = fr.ps

    strategy = fleet.DistributedStrategy()
    strategy.a_sync = args.mode != "sync"
    if args.mode == "geo":
        strategy.a_sync_configs = {"k_steps": args.k_steps}
    try:
        fleet.init(strategy=strategy)
    except ValueError as e:
        die(str(e))

    model = MLP(args.hid_dim)
    if args.mode == "geo":  # Paddle's geo mode takes SGD only
        fleet.add_dense_table(DENSE_TABLE, model.initial(seed=1), optimizer="sgd", learning_rate=0.1)
        fleet.add_sparse_table(SPARSE_TABLE, EMB, optimizer="sgd", learning_rate=1.0, init_range=0.1, seed=7)
    else:
        fleet.add_dense_table(DENSE_TABLE, model.initial(seed=1), optimizer="adam", learning_rate=0.01)
        fleet.add_sparse_table(SPARSE_TABLE, EMB, optimizer="adagrad", learning_rate=0.1, init_range=0.1, seed=7)

    try:
        if fleet.is_server():
            fleet.init_server(args.model_dir)
            fleet.run_server()
            return
        fleet.init_worker()
        index = fleet.worker_index()
        rule, rng = truth(), random.Random(1000 + index)
        progress = fx.PaddleStepLog(index, args.steps, args.log_every, args.batch_size)
        for step in range(1, args.steps + 1):
            params = fleet.pull_dense(DENSE_TABLE)
            xs, ids, ys = make_batch(rng, rule, args.batch_size)
            emb = fleet.pull_sparse(SPARSE_TABLE, ids)
            inputs = features(xs, emb)
            loss, grad, d_inputs = model.loss(params, inputs, ys)
            fleet.push_dense(DENSE_TABLE, grad)
            fleet.push_sparse(SPARSE_TABLE, ids, [v for d in d_inputs for v in d[FEATURES:]])
            progress.step(step, loss)
        # Every trainer's last updates in (geo: deltas sent), then all evaluate the merged model.
        fleet.flush()
        fleet.barrier()
        xs, ids, ys = make_batch(random.Random(EVAL_SEED), rule, EVAL_BATCH)
        emb = fleet.pull_sparse(SPARSE_TABLE, ids)
        inputs = features(xs, emb)
        log(f"worker_index: {index}, final train_loss: {model.loss(fleet.pull_dense(DENSE_TABLE), inputs, ys, grad=False):.6f}")
        if args.save_dir and index == 0:
            fleet.save_persistables(args.save_dir)
            log(f"worker_index: {index}, saved the model to {args.save_dir}")
        fleet.barrier()  # nobody stops before the save is done
        fleet.stop_worker()
    except fr.Error as e:
        die(f"fleet_runtime.ps failed: {e}", 1)


if __name__ == "__main__":
    main()
