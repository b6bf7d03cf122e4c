#!/usr/bin/env bash
# minitensor's developer entry point.
#   tools/dev.sh demo              set up, build, run the demo
#   tools/dev.sh test [--sanitize] set up, build, run every test (ASan+UBSan build with --sanitize)
#   tools/dev.sh build [--sanitize]
#   tools/dev.sh test --tsan       ThreadSanitizer build (build-tsan), runs the threaded doctest
#                                  cases only (MT_TSAN_TESTS: a doctest -tc filter to run others)
# Set-up installs the Debian packages that are missing (with sudo when not root),
# configures the build directory when needed and builds.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

cmd=${1:-}
shift || true
sanitize=0
tsan=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    --tsan) tsan=1 ;;
    *) echo "dev.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[dev.sh]\033[0m %s\n' "$*"; }

packages=(meson ninja-build g++ pkg-config python3 libfmt-dev doctest-dev libopenblas-dev libcli11-dev nlohmann-json3-dev)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return
  fi
  say "installing missing Debian packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

configure() {
  local dir=$1
  shift
  local opts=("$@")
  [ "${CI:-}" = "true" ] && opts+=(-Dwerror=true)
  if [ ! -f "$dir/build.ninja" ]; then
    say "configuring $dir: meson setup ${opts[*]}"
    meson setup "$dir" "${opts[@]}" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; exit 1; }
  fi
  say "building $dir ${ninja_targets[*]}"
  ninja -C "$dir" "${ninja_targets[@]}" >"$dir.build.log" 2>&1 || { tail -n 60 "$dir.build.log"; exit 1; }
}

builddir=build
build_opts=()
ninja_targets=()
if [ $sanitize -eq 1 ]; then
  builddir=build-asan
  # -O1, as the ASan docs advise: every check stays, and the build (CI's longest step)
  # takes about a third less time than at -O2.
  build_opts=(-Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1)
fi
if [ $tsan -eq 1 ]; then
  [ $sanitize -eq 0 ] || { echo "dev.sh: --tsan and --sanitize are separate builds; pick one" >&2; exit 2; }
  builddir=build-tsan
  # MT_NO_ISA_CLONES: the CPU kernels' target_clones resolvers (ifuncs) run while the
  # loader relocates libminitensor, before the TSan runtime is up; instrumented, they crash.
  build_opts=(-Db_sanitize=thread -Db_lundef=false -Dcpp_args=-DMT_NO_ISA_CLONES)
  ninja_targets=(tests/mt_tests)
fi
# The doctest cases that run threads of their own: dispatch during registration, a tape
# per thread, the JIT cache and the CUDA allocator under concurrent use. The CPU kernels'
# OpenMP cases are left out (libgomp is not instrumented: TSan reports false races there).
tsan_tests=${MT_TSAN_TESTS:-'*other threads dispatch*,*tape per thread*,*threads asking for one key*,*threads allocate and free*'}

case "$cmd" in
  build)
    install_missing
    configure "$builddir" "${build_opts[@]}"
    ;;
  test)
    install_missing
    configure "$builddir" "${build_opts[@]}"
    if [ $tsan -eq 1 ]; then
      # OMP_NUM_THREADS=1: the kernels' OpenMP regions stay on the calling thread.
      export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
      export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1}
      say "running the threaded doctest cases under ThreadSanitizer: -tc='$tsan_tests' (OMP_NUM_THREADS=$OMP_NUM_THREADS)"
      set +e
      "$builddir/tests/mt_tests" --no-intro "-tc=$tsan_tests" 2>&1 | tee "$builddir/tsan.log"
      rc=${PIPESTATUS[0]}
      set -e
      reports=$(grep -c '^WARNING: ThreadSanitizer' "$builddir/tsan.log" || true)
      echo "ThreadSanitizer: $reports report(s); mt_tests exit status $rc (log: $builddir/tsan.log)"
      [ $rc -eq 0 ] && [ "$reports" -eq 0 ]
      exit
    fi
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    say "running the doctest suites ($builddir/tests/mt_tests)"
    set +e
    "$builddir/tests/mt_tests" --no-intro 2>&1 | tee "$builddir/doctest.log"
    rc=${PIPESTATUS[0]}
    say "running the other tests (meson test --suite extra)"
    meson test -C "$builddir" --suite extra --print-errorlogs 2>&1 | tee "$builddir/extra.log"
    set -e
    line=$(grep -E '^\[doctest\] test cases:' "$builddir/doctest.log" | tail -n 1)
    dp=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$line")
    df=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$line")
    ds=$(sed -E 's/.*\| *([0-9]+) skipped.*/\1/' <<<"$line")
    [ -n "$line" ] || { dp=0; df=1; ds=0; }   # the runner died before its summary
    ep=$(grep -E '^Ok: ' "$builddir/extra.log" | awk '{print $2}' | tail -n 1)
    ef=$(grep -E '^Fail: ' "$builddir/extra.log" | awk '{print $2}' | tail -n 1)
    es=$(grep -E '^Skipped: ' "$builddir/extra.log" | awk '{print $2}' | tail -n 1)
    passed=$((dp + ${ep:-0})); failed=$((df + ${ef:-0})); skipped=$((ds + ${es:-0}))
    if [ $rc -ne 0 ] && [ $failed -eq 0 ]; then failed=1; fi
    echo "$passed $failed $skipped" >"$builddir/summary.txt"
    echo "$passed passed, $failed failed, $skipped skipped"
    [ $failed -eq 0 ]
    ;;
  demo)
    install_missing
    configure "$builddir" "${build_opts[@]}"
    say "running $builddir/tools/minitensor demo"
    "$builddir/tools/minitensor" demo
    for e in "$builddir"/examples/silu_custom_op "$builddir"/examples/mlp_train; do
      say "running $e"
      "$e"
    done
    ;;
  *)
    echo "usage: tools/dev.sh demo | test [--sanitize | --tsan] | build [--sanitize | --tsan]" >&2
    exit 2
    ;;
esac
