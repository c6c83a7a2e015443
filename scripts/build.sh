#!/usr/bin/env bash
# Configures and builds FleetJob into ./build (or $FLEET_BUILD_DIR). Warnings are errors.
# Extra arguments go to cmake's configure step, e.g. -DFLEET_WITH_NCCL=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLEET_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -DFLEET_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
