#!/usr/bin/env bash
# Configures and builds FleetJob into ./build (or $FLEET_BUILD_DIR). Warnings are errors.
#   scripts/build.sh                       everything
#   scripts/build.sh --target fleetrun     only that target and what it needs (repeatable)
# Other arguments go to cmake's configure step, e.g. -DFLEET_WITH_NCCL=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLEET_BUILD_DIR:-$root/build}
configure=() targets=()
while (($#)); do
  case $1 in
    --target) targets+=(--target "${2:?--target needs a target name}"); shift ;;
    --target=*) targets+=(--target "${1#*=}") ;;
    *) configure+=("$1") ;;
  esac
  shift
done
"$root/scripts/setup.sh"
# Where ccache is installed, what did not change comes from its cache, whichever checkout built it
# (paths are taken relative to this one).
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$root
  configure=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "${configure[@]}")
fi
cmake -S "$root" -B "$build" -DFLEET_WERROR=ON "${configure[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
