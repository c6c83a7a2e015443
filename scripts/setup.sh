#!/usr/bin/env bash
# Installs what FleetJob needs to build and test on Debian 12, from Debian's packages only.
# Idempotent: packages already present are not touched, and apt-get update runs only when needed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config                    # toolchain
  libgtest-dev libgmock-dev                           # tests
  libcpprest-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev   # the Kubernetes client
  prometheus-cpp-dev libcivetweb-dev                  # metrics and the binaries' HTTP endpoints
  prometheus                                          # promtool and a real server scraping our metrics in tests
  libgloo-dev openmpi-bin libopenmpi-dev              # CPU collectives (Gloo), and MPI as their baseline
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc   # the parameter server's RPC
  pybind11-dev python3-dev                            # the runtime's Python binding (Fleet API)
  python3 python3-kubernetes                          # example jobs; a real client for the test API server
  procps iproute2                                     # ps/kill/ip for the launcher's tests
)
# kubectl drives the test API server as a real client. Debian's kubernetes-client provides it,
# unless some other kubectl is installed already (its package would conflict).
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
