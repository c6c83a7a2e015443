#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest + GoogleTest).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLEET_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 300
