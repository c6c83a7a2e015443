# syntax=docker/dockerfile:1
# FleetJob's images, from one multi-stage build (docs/install.md):
#
#   docker build --target operator -t fleetjob/operator:0.1.0 .
#   docker build --target sidecar  -t fleetjob/sidecar:0.1.0 .
#   docker build --target tools    -t fleetjob/tools:0.1.0 .
#   docker build --target etcd     -t fleetjob/etcd:0.1.0 .
#   docker build --target tools --build-arg FLAVOR=cuda -t fleetjob/tools:0.1.0-cuda12.4 .
#
# scripts/images.sh builds them with podman, by default from the binaries a host build already made
# (BUILD=prebuilt: the build-prebuilt stage below, from a context the script stages) and with
# --release from source (BUILD=source, the default here). buildah 1.28 (podman 4.3) does not take
# a FROM's ARG from its default below: pass --build-arg FLAVOR=... and --build-arg BUILD=... there.
#
# The builder is Debian 12 running the same scripts as the README and CI (scripts/build.sh, which
# runs scripts/setup.sh), without the test suites. The runtime images are debian:12-slim with only
# the shared libraries the binaries link (tests/chart/test_dockerfile.py checks them against the
# build's binaries), run as the non-root user 65532, and write nothing to their root filesystem.
#
# FLAVOR=cpu|cuda selects the base of the builder and of the tools image: cuda adds NVIDIA's
# Debian 12 repository, builds with FLEET_WITH_NCCL=ON and ships the CUDA runtime and NCCL.
# The operator and sidecar images never need CUDA.

ARG FLAVOR=cpu
ARG BUILD=source
ARG DEBIAN=debian:12
ARG DEBIAN_SLIM=debian:12-slim
ARG CUDA_VERSION=12.4
ARG CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64

# ---- bases ----------------------------------------------------------------------------------------

FROM ${DEBIAN} AS builder-cpu

FROM ${DEBIAN} AS builder-cuda
ARG CUDA_VERSION
ARG CUDA_REPO
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates curl \
 && curl -fsSL --connect-timeout 30 -o /tmp/cuda-keyring.deb "${CUDA_REPO}/cuda-keyring_1.1-1_all.deb" \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
 && apt-get update -qq \
 && v=$(echo "${CUDA_VERSION}" | tr . -) \
 && apt-get install -y -qq --no-install-recommends "cuda-nvcc-$v" "cuda-cudart-dev-$v" libnccl-dev \
 && rm -rf /var/lib/apt/lists/*
ENV CUDAToolkit_ROOT=/usr/local/cuda-${CUDA_VERSION}

FROM ${DEBIAN_SLIM} AS runtime-cpu

FROM ${DEBIAN_SLIM} AS runtime-cuda
ARG CUDA_VERSION
ARG CUDA_REPO
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates curl \
 && curl -fsSL --connect-timeout 30 -o /tmp/cuda-keyring.deb "${CUDA_REPO}/cuda-keyring_1.1-1_all.deb" \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
 && apt-get update -qq \
 && v=$(echo "${CUDA_VERSION}" | tr . -) \
 && apt-get install -y -qq --no-install-recommends "cuda-cudart-$v" libnccl2 \
 && apt-get purge -y -qq curl && apt-get autoremove -y -qq && rm -rf /var/lib/apt/lists/*

# ---- the build: what CI runs ---------------------------------------------------------------------

FROM builder-${FLAVOR} AS build-source
ARG FLAVOR
WORKDIR /src
COPY . .
# scripts/build.sh = scripts/setup.sh (Debian packages) + CMake with warnings as errors, the build
# type CI uses; the images get the binaries without debug info. No test suites here (CI runs
# them), hence no Helm and no podman either (FLEET_SETUP_HELM=0, FLEET_SETUP_CONTAINERS=0).
RUN FLEET_SETUP_HELM=0 FLEET_SETUP_CONTAINERS=0 ./scripts/build.sh -DFLEET_BUILD_TESTS=OFF \
      -DFLEET_WITH_NCCL=$([ "${FLAVOR}" = cuda ] && echo ON || echo OFF) \
 && strip --strip-debug build/operator/fleet-operator build/sidecar/fleet-sidecar build/launcher/fleetrun \
      build/cli/fleetctl build/runtime/ps/fleet-ps-server build/runtime/python/fleet_runtime*.so

# ---- or the files of a build made outside (scripts/images.sh) -----------------------------------
# Exactly what the runtime stages copy from the build, at the same paths. The context is not the
# repository (.dockerignore excludes build/) but one scripts/images.sh stages: these files from its
# FLEET_BUILD_DIR, stripped like above, and examples/.
FROM scratch AS build-prebuilt
COPY build/operator/fleet-operator /src/build/operator/fleet-operator
COPY build/sidecar/fleet-sidecar /src/build/sidecar/fleet-sidecar
COPY build/runtime/ps/fleet-ps-server /src/build/runtime/ps/fleet-ps-server
COPY build/launcher/fleetrun /src/build/launcher/fleetrun
COPY build/cli/fleetctl /src/build/cli/fleetctl
COPY build/runtime/python/fleet_runtime*.so /src/build/runtime/python/
COPY build/runtime/python/sitecustomize.py /src/build/runtime/python/sitecustomize.py
COPY examples /src/examples
COPY sdk/python/fleet_metrics.py /src/sdk/python/fleet_metrics.py
COPY sdk/python/fleet_checkpoint.py /src/sdk/python/fleet_checkpoint.py

FROM build-${BUILD} AS build

# ---- runtime images ------------------------------------------------------------------------------

# What fleet::kube and fleet::httpd link: cpprestsdk, yaml-cpp, OpenSSL, prometheus-cpp, CivetWeb;
# and RE2, with which the operator checks a job's log patterns as its sidecars will read them.
FROM ${DEBIAN_SLIM} AS kube-runtime
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libcpprest2.10 libyaml-cpp0.7 libssl3 libprometheus-cpp-core1.0 libcivetweb1 libbrotli1 zlib1g libre2-9 \
      libstdc++6 libgcc-s1 ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# fleet-operator: Deployment charts/fleetjob. /metrics on 8080, /healthz and /readyz on 8081.
FROM kube-runtime AS operator
COPY --from=build /src/build/operator/fleet-operator /usr/local/bin/fleet-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/fleet-operator"]

# fleet-sidecar: the operator injects it into every FleetJob pod with args only (gate ...), so the
# entrypoint is the binary (spec.sidecar.image, default fleetjob/sidecar:<version>). It also ships
# fleet-ps-server, which the operator runs (command fleet-ps-server) in the server pods of jobs with
# spec.runtime fleet; gRPC and protobuf are for it. RE2 is for both (the sidecar runs its users'
# regular expressions on it).
# The sidecar's API client is fleet::kube_lite (Boost.Beast, header-only, on mbedTLS): no cpprestsdk,
# no OpenSSL in fleet-sidecar. libssl3 is fleet-ps-server's (gRPC).
FROM ${DEBIAN_SLIM} AS sidecar
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libyaml-cpp0.7 libmbedtls14 libmbedx509-1 libmbedcrypto7 libssl3 libprometheus-cpp-core1.0 libcivetweb1 \
      libstdc++6 libgcc-s1 ca-certificates \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libre2-9 libc-ares2 zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/sidecar/fleet-sidecar /usr/local/bin/fleet-sidecar
COPY --from=build /src/build/runtime/ps/fleet-ps-server /usr/local/bin/fleet-ps-server
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fleet-sidecar"]

# etcd: the rendezvous store of elastic jobs (fleetrun --elastic_server, docs/fleetrun.md), Debian's
# etcd-server, for clusters without an etcd of their own: the chart's etcd.enabled runs it. The
# chart gives the data directory (a volume) and the addresses; the image holds no state.
FROM ${DEBIAN_SLIM} AS etcd
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends etcd-server \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 fleet && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent fleet
USER 65532:65532
EXPOSE 2379 2380
ENTRYPOINT ["/usr/bin/etcd"]

# tools: fleetrun (Paddle's launcher), fleetctl, Python 3 with the fleet_runtime module (collectives
# and the parameter-server client: the trainers of spec.runtime fleet), and the examples under
# /opt/fleetjob/examples (examples/k8s/ps.yaml runs /opt/fleetjob/examples/ps/train.py from it).
# With a read-only root filesystem mount an emptyDir on /home/fleet for fleetrun's log/ directory.
FROM runtime-${FLAVOR} AS tools
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      python3 libcpprest2.10 libyaml-cpp0.7 libssl3 libbrotli1 zlib1g libstdc++6 libgcc-s1 ca-certificates \
      libmbedtls14 libmbedx509-1 libmbedcrypto7 libcivetweb1 libprometheus-cpp-core1.0 \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libre2-9 libc-ares2 \
      libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 fleet && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/fleet fleet
COPY --from=build /src/build/launcher/fleetrun /usr/local/bin/fleetrun
COPY --from=build /src/build/cli/fleetctl /usr/local/bin/fleetctl
COPY --from=build /src/build/runtime/python/fleet_runtime*.so /opt/fleetjob/python/
# The env loader (lists too long for the env, docs/env-contract.md), first on PYTHONPATH; and a .pth
# that finds fleet_runtime also where the operator's PYTHONPATH (its mounted loader) replaces this one.
COPY --from=build /src/build/runtime/python/sitecustomize.py /opt/fleetjob/python/sitecustomize.py
RUN echo /opt/fleetjob/python > /usr/lib/python3/dist-packages/fleetjob.pth
COPY --from=build /src/examples /opt/fleetjob/examples
# The push API's Python helper (docs/sidecar.md): the examples report every step through it.
COPY --from=build /src/sdk/python/fleet_metrics.py /opt/fleetjob/python/fleet_metrics.py
# Checkpoint before stop's Python helper (docs/sidecar.md): examples/elastic/train.py uses it.
COPY --from=build /src/sdk/python/fleet_checkpoint.py /opt/fleetjob/python/fleet_checkpoint.py
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/home/fleet PYTHONPATH=/opt/fleetjob/python
WORKDIR /home/fleet
USER 65532:65532
CMD ["fleetrun", "--help"]
