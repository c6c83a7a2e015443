#!/usr/bin/env bash
# Builds FleetJob's images with podman, without an image registry (docs/install.md, "Building the
# images with podman"): localhost/fleetjob/operator, localhost/fleetjob/sidecar, localhost/fleetjob/tools and localhost/fleetjob/etcd,
# tagged with the project's version (CMakeLists.txt; the chart's appVersion).
#
#   scripts/images.sh                 from the binaries the test build compiled ($FLEET_BUILD_DIR)
#   scripts/images.sh --release       the full multi-stage build from source (compiles everything)
#   scripts/images.sh --save DIR      also podman save each image to DIR/NAME-VERSION.tar
#
# Both ways build the one Dockerfile: its `build` stage is `build-source` (scripts/build.sh inside
# the builder) or `build-prebuilt` (the files a host build made, staged into a small context), and
# the runtime stages are the same instructions. The bases localhost/debian:12 and
# localhost/debian:12-slim are made with mmdebstrap from this machine's apt sources and cached.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$root/scripts/containers.conf}

usage() {
  cat <<EOF
Usage: scripts/images.sh [--release] [--flavor cpu|cuda] [--tag TAG] [--save DIR]
                         [--build-arg NAME=VALUE]... [operator|sidecar|tools|etcd]...

Builds localhost/fleetjob/{operator,sidecar,tools,etcd}:TAG (the images named, default all four) with
podman from ./Dockerfile, then checks that each runs as uid 65532 with a read-only root file
system and no capabilities, and that its programs answer --help.

  (default)        from the binaries a CMake build already made: \$FLEET_BUILD_DIR (default
                   ./build; scripts/build.sh makes it). The build must not link CUDA/NCCL for
                   the cpu flavour (configure it with -DFLEET_WITH_NCCL=OFF).
  --release        the full build from source inside the builder image (scripts/build.sh;
                   4 min on 2 idle cores, much longer on busy ones).
  --flavor F       cpu (default) or cuda. cuda builds only the tools image, tagged
                   TAG-cuda\$CUDA_VERSION (12.4), and needs NVIDIA's Debian 12 repository:
                   --build-arg CUDA_REPO=<a reachable mirror of it> where the default
                   (developer.download.nvidia.com) is not reachable.
  --tag TAG        the images' tag (default: the project's version, $version).
  --save DIR       podman save each image to DIR/NAME-TAG.tar (docker-archive), for
                   'ctr -n k8s.io images import', 'kind load image-archive' or 'docker load'.
  --build-arg A=V  passed to podman build (e.g. CUDA_REPO, CUDA_VERSION).
  -h, --help       this text.

Environment: FLEET_BUILD_DIR (./build), FLEET_CACHE_DIR (~/.cache/fleetjob; the base images'
tarballs go to its images/), CONTAINERS_CONF (default scripts/containers.conf).
EOF
}

version=$(sed -n 's/^project(fleetjob VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[[ -n $version ]] || { echo "images: no 'project(fleetjob VERSION x.y.z)' in CMakeLists.txt" >&2; exit 1; }

release=0 flavor=cpu tag=$version save_dir="" build_args=() targets=()
need() { [[ $# -ge 2 && -n $2 ]] || { echo "images: $1 needs a value (--help)" >&2; exit 2; }; }
while (($#)); do
  case $1 in
    --release) release=1 ;;
    --flavor) need "$@"; flavor=$2; shift ;;
    --flavor=*) flavor=${1#*=} ;;
    --tag) need "$@"; tag=$2; shift ;;
    --tag=*) tag=${1#*=} ;;
    --save) need "$@"; save_dir=$2; shift ;;
    --save=*) save_dir=${1#*=} ;;
    --build-arg) need "$@"; build_args+=("$2"); shift ;;
    --build-arg=*) build_args+=("${1#*=}") ;;
    -h|--help) usage; exit 0 ;;
    operator|sidecar|tools|etcd) targets+=("$1") ;;
    *) echo "images: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $flavor == cpu || $flavor == cuda ]] || { echo "images: --flavor is cpu or cuda, not '$flavor'" >&2; exit 2; }
if ((${#targets[@]} == 0)); then
  targets=(operator sidecar tools etcd)
  [[ $flavor == cuda ]] && targets=(tools)
fi
if [[ $flavor == cuda && " ${targets[*]} " != " tools " ]]; then
  echo "images: only the tools image has a cuda flavour (the operator and sidecar: --flavor cpu)" >&2; exit 2
fi
for a in "${build_args[@]}"; do
  [[ $a == *=* ]] || { echo "images: --build-arg wants NAME=VALUE, not '$a'" >&2; exit 2; }
  [[ $a != FLAVOR=* && $a != BUILD=* && $a != DEBIAN=* && $a != DEBIAN_SLIM=* ]] \
    || { echo "images: the script sets ${a%%=*} itself (--flavor, --release)" >&2; exit 2; }
done
for tool in podman mmdebstrap; do
  command -v $tool >/dev/null || { echo "images: $tool is missing: run scripts/setup.sh" >&2; exit 1; }
done

build_dir=${FLEET_BUILD_DIR:-$root/build}
cache=${FLEET_CACHE_DIR:-${HOME:?set HOME or FLEET_CACHE_DIR}/.cache/fleetjob}/images
# The value of a Dockerfile ARG: --build-arg, else its default in the Dockerfile.
arg() {
  local a value
  value=$(sed -n "s/^ARG $1=//p" "$root/Dockerfile" | head -n1)
  for a in "${build_args[@]}"; do [[ $a == "$1="* ]] && value=${a#*=}; done
  echo "$value"
}

# Each step's time, printed at the end.
steps=()
step_start=0
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
start() { step_start=$(now_ms); echo "== images: $*"; }
done_step() {
  local ms=$(($(now_ms) - step_start))
  steps+=("$(printf '%5d.%d s  %s' $((ms / 1000)) $((ms % 1000 / 100)) "$*")")
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fleet-images.XXXXXX")
finish() {
  rm -rf "$tmp" "$cache"/*."$$".tmp.tar
  ((${#steps[@]} == 0)) || { echo "steps:"; printf '  %s\n' "${steps[@]}"; }
}
trap finish EXIT

# ---- the CUDA flavour needs NVIDIA's repository: say so at once instead of failing in a build -----
if [[ $flavor == cuda ]] && command -v curl >/dev/null; then   # (without curl: the build's own fails in 30 s)
  cuda_repo=$(arg CUDA_REPO)
  if ! curl -fsSI --connect-timeout 15 --max-time 30 -o /dev/null "$cuda_repo/cuda-keyring_1.1-1_all.deb"; then
    cat >&2 <<EOF
images: the cuda flavour installs CUDA and NCCL from NVIDIA's Debian 12 repository, and
  $cuda_repo/cuda-keyring_1.1-1_all.deb
is not reachable from here. Pass a reachable mirror of that repository:
  scripts/images.sh --flavor cuda --build-arg CUDA_REPO=<a mirror of NVIDIA's debian12/x86_64 repository>
(Debian 12's own non-free section has no NCCL.) The operator and sidecar images need no CUDA:
build them with the cpu flavour.
EOF
    exit 1
  fi
fi

# ---- base images: Debian 12 from this machine's apt sources, no registry --------------------------
# mmdebstrap --variant=minbase (apt, dpkg, bash, coreutils ...) with merged /usr, and Debian's
# Docker image apt settings (debuerreotype's: no package cache kept, no translations, no
# suggested packages kept by autoremove). The -slim variant excludes man pages, docs (but their
# copyright files) and translations, for these and every later package, as debian:12-slim does.
mkdir -p "$tmp/apt"
cat >"$tmp/apt/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$tmp/apt/docker-no-languages"
echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$tmp/apt/docker-autoremove-suggests"
sources=""
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  [[ -s $f ]] && { sources=$f; break; }
done
base_image() {   # base_image NAME(debian:12 or debian:12-slim) [mmdebstrap options]
  local name=$1 image=localhost/$1 tar
  shift
  tar=$cache/${name/:/-}.tar
  if podman image exists "$image"; then
    echo "images: $image exists (podman rmi it, and remove $tar, to make it anew)"
    return
  fi
  if [[ ! -s $tar ]]; then
    [[ -n $sources ]] || { echo "images: no /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list to build $image from" >&2; exit 1; }
    start "mmdebstrap $image from $sources"
    mkdir -p "$cache"
    # The apt clean-up is ours (--skip=cleanup/apt): mmdebstrap's runs apt again after the
    # customize hooks, which would read docker-clean (apt would keep its 70 MB of caches and run
    # the Post-Invoke commands outside the chroot).
    # shellcheck disable=SC2016 # $1 is the hook's argument, the chroot
    mmdebstrap --quiet --format=tar --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --skip=cleanup/apt \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb' \
      --customize-hook="copy-in $tmp/apt/docker-clean $tmp/apt/docker-no-languages $tmp/apt/docker-autoremove-suggests /etc/apt/apt.conf.d" \
      "$@" bookworm "$tar.$$.tmp.tar" "$sources" >"$tmp/mmdebstrap.log" 2>&1 \
      || { tail -n 40 "$tmp/mmdebstrap.log" >&2; echo "images: mmdebstrap failed (above)" >&2; exit 1; }
    mv -f "$tar.$$.tmp.tar" "$tar"   # whole or not at all, also with two runs at once
    done_step "mmdebstrap $image ($(du -m "$tar" | cut -f1) MB)"
  fi
  start "podman import $tar as $image"
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$tar" "$image" >/dev/null
  done_step "podman import $image"
}
base_image debian:12
base_image debian:12-slim \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/groff/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*'

# ---- the build context ---------------------------------------------------------------------------
if ((release)); then
  build=source context=$root
else
  # The files the Dockerfile's build-prebuilt stage copies (its COPY sources, as they lie in the
  # repository: build/... for the build directory), stripped of debug info as build-source does.
  build=prebuilt context=$tmp/context
  prebuilt=$(sed -n '/^FROM .* AS build-prebuilt$/,/^FROM /{/^COPY /p}' "$root/Dockerfile" | awk '{print $2}')
  [[ -n $prebuilt ]] || { echo "images: the Dockerfile has no build-prebuilt stage with COPY lines" >&2; exit 1; }
  mkdir -p "$context"
  # A build that found CUDA and NCCL (FLEET_WITH_NCCL=AUTO on a machine with the CUDA toolkit)
  # links them into the collective runtime (the Python module); cpu images cannot run such a
  # binary. Those targets alone are built again without NCCL, in $build_dir/cpu-images (once;
  # incremental after), and staged from there. Every CMake target is named as its file.
  cpu_dir=$build_dir/cpu-images cpu_targets=()
  declare -A from_cpu=()
  if [[ $flavor == cpu ]]; then
    for src in $prebuilt; do
      [[ $src == build/* ]] || continue
      # shellcheck disable=SC2206 # the source may be a glob (the Python module's ABI suffix)
      for f in "$build_dir"/${src#build/}; do
        [[ -f $f ]] && ldd "$f" | grep -qE 'lib(nccl|cudart)' || continue
        from_cpu[${f#"$build_dir"/}]=1
        name=$(basename "$f")
        cpu_targets+=("$([[ $name == fleet_runtime* ]] && echo fleet_runtime_python || echo "$name")")
      done
    done
  fi
  if ((${#cpu_targets[@]})); then
    start "build ${cpu_targets[*]} without NCCL in $cpu_dir ($build_dir links CUDA/NCCL)"
    cmake -S "$root" -B "$cpu_dir" -DFLEET_WITH_NCCL=OFF -DFLEET_BUILD_TESTS=OFF -DFLEET_WERROR=ON >/dev/null
    cmake --build "$cpu_dir" -j"$(nproc)" --target "${cpu_targets[@]}" >/dev/null
    done_step "build ${cpu_targets[*]} without NCCL"
  fi
  start "stage the binaries of $build_dir"
  for src in $prebuilt; do
    if [[ $src == build/* ]]; then
      files=()
      # shellcheck disable=SC2206 # the source may be a glob (the Python module's ABI suffix)
      for f in "$build_dir"/${src#build/}; do [[ -f $f ]] && files+=("$f"); done
      ((${#files[@]})) || { echo "images: $build_dir/${src#build/} is not built: run scripts/build.sh (or set FLEET_BUILD_DIR)" >&2; exit 1; }
      for f in "${files[@]}"; do
        rel=${f#"$build_dir"/}
        dest=$context/build/$rel
        mkdir -p "$(dirname "$dest")"
        [[ -n ${from_cpu[$rel]:-} ]] && f=$cpu_dir/$rel
        if [[ $(head -c4 "$f") == $'\x7fELF' ]]; then strip --strip-debug -o "$dest" "$f"; else cp "$f" "$dest"; fi
      done
    else
      mkdir -p "$context/$(dirname "$src")"
      cp -a "$root/$src" "$context/$src"
      find "$context/$src" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
    fi
  done
  # Every library an image's binaries link must come from a Debian package (the runtime stages
  # install those; the cuda flavour's base adds CUDA's and NCCL's). A build that found CUDA and
  # NCCL (FLEET_WITH_NCCL=AUTO) links them from elsewhere: its binaries cannot run in cpu images.
  linked=()   # "TARGET FILE LIBRARY" for each library each binary of each image links
  for target in "${targets[@]}"; do
    # shellcheck disable=SC2013 # the COPY sources are words without spaces
    for src in $(sed -n "/^FROM .* AS $target\$/,/^FROM /{s|^COPY --from=build /src/\(build/[^ ]*\) .*|\1|p}" "$root/Dockerfile"); do
      for f in "$context"/$src; do
        while read -r lib; do
          [[ $flavor == cuda && $lib =~ lib(nccl|cuda|cudart) ]] || linked+=("$target ${f#"$context"/build/} $lib")
        done < <(ldd "$f" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\([^ ]*\) => not found.*/\1(not-found)/p')
      done
    done
  done
  # What dpkg installed, under any of a library's names (/lib or /usr/lib, or behind the link).
  owned=$(for l in "${linked[@]}"; do l=${l##* }; echo "$l"; realpath -q "$l"; echo "/usr${l#/usr}"; echo "${l#/usr}"; done \
            | sort -u | xargs -r dpkg -S 2>/dev/null | sed -n 's/^.*: \(\/.*\)$/\1/p' || true)
  foreign=()
  for l in "${linked[@]}"; do
    lib=${l##* } found=0
    for p in "$lib" "$(realpath -q "$lib")" "/usr${lib#/usr}" "${lib#/usr}"; do
      grep -qxF -- "$p" <<<"$owned" && { found=1; break; }
    done
    ((found)) || foreign+=("${l%% *}: $(cut -d' ' -f2 <<<"$l") links $lib")
  done
  if ((${#foreign[@]})); then
    printf 'images: %s\n' "${foreign[@]}" >&2
    cat >&2 <<EOF
images: these libraries come from no Debian package, so the $flavor images cannot run these
  binaries of $build_dir. A build that found CUDA and NCCL (FLEET_WITH_NCCL=AUTO) links them:
  make the images from a build configured with -DFLEET_WITH_NCCL=OFF (FLEET_BUILD_DIR=<it>), or
  from source with --release. The other images can be made from this build: name them
  (scripts/images.sh operator sidecar).
EOF
    exit 1
  fi
  done_step "stage the binaries ($(du -sm "$context" | cut -f1) MB)"
fi

# ---- the images ----------------------------------------------------------------------------------
image_name() {   # image_name TARGET
  if [[ $flavor == cuda ]]; then echo "localhost/fleetjob/$1:$tag-cuda$(arg CUDA_VERSION)"; else echo "localhost/fleetjob/$1:$tag"; fi
}
for target in "${targets[@]}"; do
  image=$(image_name "$target")
  start "podman build $image (build-$build)"
  # buildah 1.28 does not take a FROM's ARG from the Dockerfile's default: every one is passed.
  podman build --pull=never --file "$root/Dockerfile" --target "$target" --tag "$image" \
    --build-arg BUILD="$build" --build-arg FLAVOR="$flavor" \
    --build-arg DEBIAN=localhost/debian:12 --build-arg DEBIAN_SLIM=localhost/debian:12-slim \
    "${build_args[@]/#/--build-arg=}" "$context"
  done_step "podman build $image"
done

# ---- checks: non-root, read-only, no capabilities, and every program starts -----------------------
start "check the images"
failed=0
check() {   # check IMAGE WHAT [podman run options and command]
  local image=$1 what=$2 out
  shift 2
  if out=$(podman run --rm --read-only --read-only-tmpfs=false --cap-drop=ALL \
             --security-opt=no-new-privileges --network=none "$@" 2>&1 </dev/null); then
    echo "images: ok  $image: $what"
  else
    echo "images: FAILED  $image: $what"$'\n'"$out" | head -n 20 >&2
    failed=1
  fi
}
for target in "${targets[@]}"; do
  image=$(image_name "$target")
  uid=$(podman run --rm --read-only --read-only-tmpfs=false --cap-drop=ALL --security-opt=no-new-privileges \
          --network=none --entrypoint id "$image" -u 2>&1 </dev/null || true)
  if [[ $uid == 65532 ]]; then echo "images: ok  $image: runs as uid 65532"; else
    echo "images: FAILED  $image: runs as uid '$uid', not 65532" >&2; failed=1; fi
  case $target in
    operator) check "$image" "fleet-operator --help" "$image" --help ;;
    sidecar)
      check "$image" "fleet-sidecar --help" "$image" --help
      check "$image" "fleet-ps-server --help" --entrypoint /usr/local/bin/fleet-ps-server "$image" --help ;;
    tools)
      check "$image" "fleetrun --help" "$image" fleetrun --help
      check "$image" "fleetctl --help" "$image" fleetctl --help
      check "$image" "python3 -c 'import fleet_runtime'" "$image" python3 -c "import fleet_runtime" ;;
    etcd) check "$image" "etcd --version" "$image" --version ;;
  esac
done
done_step "check the images"
((failed == 0)) || { echo "images: some check failed (above)" >&2; exit 1; }

# ---- save ----------------------------------------------------------------------------------------
if [[ -n $save_dir ]]; then
  mkdir -p "$save_dir"
  for target in "${targets[@]}"; do
    image=$(image_name "$target")
    out=$save_dir/$target-${image##*:}.tar
    start "podman save $image to $out"
    rm -f "$out.$$.tmp"
    podman save --quiet --format docker-archive -o "$out.$$.tmp" "$image"
    mv -f "$out.$$.tmp" "$out"
    done_step "podman save $out"
  done
fi

echo
echo "images (build-$build, flavor $flavor):"
for target in "${targets[@]}"; do
  image=$(image_name "$target")
  printf '  %-45s %6.1f MB\n' "$image" "$(podman image inspect --format '{{.Size}}' "$image" | awk '{print $1 / 1e6}')"
done
