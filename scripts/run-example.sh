#!/usr/bin/env bash
# The main job without a cluster: builds what it needs (fleetrun and the fleet_runtime Python
# module, not the tests) and runs the Fleet quick start in
# parameter-server mode (examples/ps_mlp: an MLP on synthetic data, sync mode) through fleetrun on
# this machine: 2 fleet-ps servers (C++, gRPC) and 2 trainers using the fleet_runtime Python
# module. Logs go to ./log (or $1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLEET_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" --target fleetrun --target fleet_runtime_python
log_dir=${1:-log}
export FLEET_RUNTIME_PYTHONPATH=${FLEET_RUNTIME_PYTHONPATH:-$build/runtime/python}
exec "$build/launcher/fleetrun" --server_num=2 --worker_num=2 --log_dir="$log_dir" \
  "$root/examples/ps_mlp/train.py" --mode sync
