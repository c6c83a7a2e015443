#!/usr/bin/env bash
# The C++ unit and end-to-end suites under AddressSanitizer + UndefinedBehaviorSanitizer (and
# LeakSanitizer, part of ASan), in a build tree of their own:
#
#   scripts/sanitize.sh                  clang (Debian's clang 14), into ./build-sanitize-clang
#   scripts/sanitize.sh --compiler gcc   gcc, into ./build-sanitize-gcc
#   scripts/sanitize.sh -R REGEX         only the ctest tests matching REGEX
#
# CI runs it for clang after scripts/test.sh (.ci/run). Any finding fails the test that hit it:
# UBSan does not recover, ASan and LSan stop the process. Known findings in libraries we do not
# build are suppressed in scripts/sanitizers/, each with its reason. NCCL is off (the GPU paths
# need a GPU and CUDA's own tools), and so are the suites of Python and packaging (labels
# containers, packaging, controlplane; the Python binding's suites): they test no C++ of ours that
# the C++ suites do not. Suites that drive our binaries from Python (fleetctl's) do run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
compiler=clang regex=""
while (($#)); do
  case $1 in
    --compiler) compiler=${2:?--compiler needs clang or gcc}; shift ;;
    --compiler=*) compiler=${1#*=} ;;
    -R) regex=${2:?-R needs a regex}; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "sanitize: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
case $compiler in
  clang) cc=clang cxx=clang++ packages=(clang libclang-rt-14-dev) ;;
  gcc) cc=gcc cxx=g++ packages=() ;;
  *) echo "sanitize: --compiler must be clang or gcc" >&2; exit 2 ;;
esac
build=${FLEET_SANITIZE_BUILD_DIR:-$root/build-sanitize-$compiler}

FLEET_SETUP_CONTAINERS=0 "$root/scripts/setup.sh" "${packages[@]}"

launcher=()   # ccache where installed, as scripts/build.sh
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$root
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
CC=$cc CXX=$cxx cmake -S "$root" -B "$build" -DFLEET_WERROR=ON -DFLEET_SANITIZE=address,undefined \
  -DFLEET_WITH_NCCL=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"

supp=$root/scripts/sanitizers
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp
export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
suites() {
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600 -LE 'containers|packaging|controlplane' "$@"
}
# Not the Python binding's own suites: CPython is not built with the sanitizers, and it cannot load
# an extension that needs their runtime (undefined __asan_*/__ubsan_* symbols); the binding's C++
# underneath is what the C++ suites test here.
python='^(collective_python_binding|PsPythonBinding)$'
# The Rest client's TLS tests run apart, with lsan-rest-tls.supp added: OpenSSL's per-thread state
# on cpprestsdk's never-joined threads (that file says why it is not ours). -R runs only the
# others.
rest_tls='TlsTest\..*/Rest'
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
suites -E "$python|$rest_tls" ${regex:+-R "$regex"}
if [[ -z $regex ]]; then
  cat "$supp/lsan.supp" "$supp/lsan-rest-tls.supp" >"$build/lsan-rest-tls.supp"
  LSAN_OPTIONS=suppressions=$build/lsan-rest-tls.supp:print_suppressions=0 suites -R "$rest_tls"
fi
