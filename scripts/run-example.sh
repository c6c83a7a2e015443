#!/usr/bin/env bash
# The main job without a cluster: builds fleetrun and runs the parameter-server example
# (2 servers, 2 trainers, real TCP traffic) on this machine. Logs go to ./log (or $1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLEET_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
log_dir=${1:-log}
exec "$build/launcher/fleetrun" --server_num=2 --worker_num=2 --log_dir="$log_dir" \
  "$root/examples/ps/train.py"
