#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# minitensor's developer entry point; `tools/dev.sh --help` lists the commands.
# Set-up installs the Debian packages that are missing (with sudo when not root),
# configures the build directory when needed and builds what the command needs.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

usage() {
  cat <<'EOF_USAGE'
usage: tools/dev.sh COMMAND [OPTION]

commands:
  demo                      set up, build the library, tools/minitensor and the two
                            examples, run the demo and the examples
  test [--sanitize|--tsan]  set up, build, run the test suites: unit, ops, gpu and
                            integration (and slow with CI=true or MT_TEST_SLOW=1)
  build [--sanitize|--tsan] [--tests]
                            set up and build everything (--tests: only what `test` runs)
  deps                      install the missing Debian packages only
  help                      print this text (also -h, --help)

options:
  --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan)
  --tsan      ThreadSanitizer build (build-tsan); `test` runs the threaded doctest
              cases only (MT_TSAN_TESTS: a doctest -tc filter to run others)

environment:
  MT_JOBS        parallel jobs for ninja and meson test (default: the number of CPUs)
  MT_UNITY       1: a unity build, MT_UNITY_SIZE (16) .cpp files a compile (CI's default)
  MT_TSAN_TESTS  the doctest cases `test --tsan` runs
  MT_TEST_SLOW   1: `test` runs suite slow too (the CUBIN compiles of every kernel, the
                 timed fuzz runs); CI=true does, but for the --sanitize build
  MT_ASAN_DIR    the --sanitize build's directory (default build-asan; CI puts it outside
                 the source tree)
  MT_UBSAN_FULL  1: the --sanitize build keeps UBSan's null and alignment checks in every
                 layer (default: kernels/ only; set at configure)
  NO_COLOR       set: no colour in dev.sh's own messages (none goes to pipes or logs anyway)
  CI=true        configure with -Dwerror=true, and the plain build with -Dfuzz=true (the
                 schema fuzzer runs 60 s from its seeds where clang++ is installed) and
                 -Dtsan_tests=true (tests/test_threads.cpp under ThreadSanitizer)

A first build shows ninja's progress; its full output goes to BUILDDIR.build.log.
tools/scripts/build_time.py measures a cold build's CPU time a step (docs/building.md).
ccache, when installed, makes rebuilds of unchanged files quick.
EOF_USAGE
}

cmd=${1:-}
shift || true
case "$cmd" in
  -h | --help | help) usage; exit 0 ;;
esac
sanitize=0
tsan=0
tests_only=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    --tests) tests_only=1 ;;
    --tsan) tsan=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "dev.sh: unknown option '$a' (tools/dev.sh --help lists them)" >&2; exit 2 ;;
  esac
done

jobs=${MT_JOBS:-$(nproc 2>/dev/null || echo 2)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "dev.sh: MT_JOBS must be a positive number, not '$jobs'" >&2; exit 2; }

# Bold only on a terminal, and not with NO_COLOR (https://no-color.org).
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  say() { printf '\033[1m[dev.sh]\033[0m %s\n' "$*"; }
else
  say() { printf '[dev.sh] %s\n' "$*"; }
fi

packages=(meson ninja-build g++ pkg-config python3 libfmt-dev doctest-dev libopenblas-dev libcli11-dev nlohmann-json3-dev cmake)
# CI's second build compiles with clang 15, the compiler floor (tools/scripts/ci_nocuda.sh);
# its format test runs clang-format 14 (tools/lint/format.py).
[ "${CI:-}" = true ] && packages+=(clang-15 clang-format-14)

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

# ninja with its output in $log: on a terminal its [n/N] status line (one line, rewritten),
# otherwise a count every 30 seconds; on failure the end of the log.
run_ninja() {
  local dir=$1 log=$2
  shift 2
  local tty=0 cols=80
  if [ -t 1 ]; then
    tty=1
    cols=$(tput cols 2>/dev/null || echo 80)
  fi
  local start=$SECONDS rc
  set +e
  NINJA_STATUS='[%f/%t] ' ninja -C "$dir" -j "$jobs" "$@" 2>&1 | {
    last=$SECONDS
    while IFS= read -r line; do
      printf '%s\n' "$line" >&3
      [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\  ]] || continue
      if [ $tty -eq 1 ]; then
        printf '\r\033[K%s' "${line:0:$((cols - 1))}"
      elif [ $((SECONDS - last)) -ge 30 ]; then
        say "building $dir: ${BASH_REMATCH[1]}/${BASH_REMATCH[2]} steps done"
        last=$SECONDS
      fi
    done
    [ $tty -eq 0 ] || printf '\r\033[K'
  } 3>"$log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    say "building $dir failed (ninja exit status $rc; full output: $log)"
    exit 1
  fi
  say "built $dir in $((SECONDS - start)) s"
}

configure() {
  local dir=$1
  shift
  local opts=("$@")
  [ "${CI:-}" = "true" ] && opts+=(-Dwerror=true)
  [ "${CI:-}" = "true" ] && [ "$dir" = build ] && opts+=(-Dfuzz=true -Dtsan_tests=true)
  # MT_UNITY=1 (CI's default): a unity build, up to MT_UNITY_SIZE (16) .cpp files of one
  # target a compile (Note [One static library a layer] in meson.build: a layer's files
  # only). CI builds the library three times from nothing (plain, sanitizers, no CUDA), and
  # the tests, examples and probes once or twice; the files of a compile share one parse of
  # the headers and one copy of their inline functions. Meson's default of 4 files left
  # most of that repeated: runtime/'s 4 unity files took 23.8 CPU s at -O2, the same
  # sources as one 13.5 s; autograd/'s 3, 36.0 s against 21.4 (2026-12-07, on the 2-core
  # VM). Elsewhere the default is a file a compile, which incremental builds want.
  case "${MT_UNITY:-${CI:-}}" in 1 | true) opts+=(--unity on "-Dunity_size=${MT_UNITY_SIZE:-16}") ;; esac
  if [ ! -f "$dir/build.ninja" ]; then
    say "configuring $dir: meson setup ${opts[*]}"
    # One setup at a time (flock): Meson's cmake module runs `cmake --system-information` in
    # a scratch folder of the source root, and two setups at once (CI configures the
    # sanitizer build beside the plain one) collide there.
    flock "$root/.dev.sh.setup.lock" meson setup "$dir" "${opts[@]}" >"$dir.setup.log" 2>&1 ||
      { cat "$dir.setup.log"; exit 1; }
  fi
  say "building $dir ${ninja_targets[*]} (-j $jobs; output in $dir.build.log)"
  run_ninja "$dir" "$dir.build.log" "${ninja_targets[@]}"
}

builddir=build
# -g1: line tables only (backtraces and sanitizer reports keep file:line, gdb has no
# variables): the build's compile time falls by about a third against -g.
debug_args='-g1'
build_opts=("-Dcpp_args=$debug_args")
ninja_targets=()
if [ $sanitize -eq 1 ]; then
  # MT_ASAN_DIR puts it elsewhere: CI builds it outside the source tree, so the whole suite
  # (file paths in tests and docs checks, -fmacro-prefix-map) is checked out of tree too.
  builddir=${MT_ASAN_DIR:-build-asan}
  # -O0: every check stays, and the build, CI's longest step, is its critical path. On CI's
  # kind of machine (2 cores, nothing cached) -Og built in 377 s against 556 at -O1, with the
  # suite 119 s against 112 (2026-12-06); -O0 cuts the compile further (one kernels/ops
  # unity file with these flags: 76.5 CPU s at -Og, 49.9 at -O0), and the test programs
  # were at -O0 already.
  build_opts+=(-Db_sanitize=address,undefined -Db_lundef=false -Doptimization=0)
  # UBSan's null and alignment checks instrument every pointer use and took 40% of this
  # build's compile time (dispatcher/dispatcher.cpp: 21.6 s user with them, 12.6 s without;
  # ASan alone 12.7): they stay on in kernels/, where typed loads from raw storage happen
  # (meson.build turns them back on for that layer), and are off elsewhere, where a null
  # dereference still stops the test at ASan's fault handler. MT_UBSAN_FULL=1 keeps them
  # everywhere (set at configure).
  [ "${MT_UBSAN_FULL:-0}" = 1 ] || build_opts=("-Dcpp_args=$debug_args -fno-sanitize=null,alignment" "${build_opts[@]:1}")
  # Its own prefix inside it: its embedding tests then install there for real (the plain
  # build's install into a DESTDIR), so CI tests both kinds of install (tests/embed).
  case $builddir in /*) prefix=$builddir/prefix ;; *) prefix=$(pwd -P)/$builddir/prefix ;; esac
  build_opts+=("--prefix=$prefix")
fi
if [ $tsan -eq 1 ]; then
  [ $sanitize -eq 0 ] || { echo "dev.sh: --tsan and --sanitize are separate builds; pick one" >&2; exit 2; }
  builddir=build-tsan
  # MT_NO_ISA_CLONES: the CPU kernels' target_clones resolvers (ifuncs) run while the
  # loader relocates libminitensor, before the TSan runtime is up; instrumented, they crash.
  build_opts=(-Db_sanitize=thread -Db_lundef=false "-Dcpp_args=$debug_args -DMT_NO_ISA_CLONES")
fi
# What each command builds: `test` what the tests need (meson-test-prereq: the benches stay
# out), `demo` the library, the minitensor command and the two examples it runs.
case "$cmd" in
  test) ninja_targets=(meson-test-prereq) ;;
  build) [ $tests_only -eq 0 ] || ninja_targets=(meson-test-prereq) ;;
  demo) ninja_targets=(tools/minitensor examples/silu_custom_op examples/mlp_train) ;;
esac
[ $tsan -eq 0 ] || ninja_targets=(tests/mt_tests)
# The doctest cases that run threads of their own: dispatch during registration, a tape
# per thread, the JIT cache and the CUDA allocator under concurrent use. The CPU kernels'
# OpenMP cases are left out (libgomp is not instrumented: TSan reports false races there).
tsan_tests=${MT_TSAN_TESTS:-'*other threads dispatch*,*tape per thread*,*threads asking for one key*,*threads compiling, loading*,*threads tuning the same keys*,*threads allocate and free*'}

case "$cmd" in
  deps)
    install_missing
    ;;
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
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    # Note [Test levels] in tests/meson.build: every suite but slow, and slow too under CI=true
    # or MT_TEST_SLOW=1; the doctest cases run as one meson test a level, beside the others.
    # The sanitizer build runs slow only with MT_TEST_SLOW=1, not under CI=true: the level is
    # NVRTC compiling every kernel to CUBIN (NVRTC is not instrumented, so the plain build's run
    # of it checks the same thing) and the timed fuzz runs (the plain build's).
    slow_default=${CI:-}
    [ $sanitize -eq 0 ] || slow_default=
    suites=(--suite unit --suite ops --suite gpu --suite integration)
    case "${MT_TEST_SLOW:-$slow_default}" in 1 | true) suites+=(--suite slow) ;; esac
    say "running meson test ${suites[*]}"
    set +e
    meson test -C "$builddir" "${suites[@]}" --print-errorlogs --num-processes "$jobs" 2>&1 | tee "$builddir/tests.log"
    rc=${PIPESTATUS[0]}
    set -e
    # N passed, failed, skipped: a doctest level counts its cases, any other test counts one.
    # doctest counts the cases its filters leave out as skipped, so the cases not run are the
    # program's cases (any level's passed + failed + skipped) less those run in every level.
    read -r passed failed skipped < <(python3 - "$builddir/meson-logs/testlog.json" <<'PY'
import json, re, sys
p = f = s = 0
cases, ran = None, 0
try:
    tests = [json.loads(line) for line in open(sys.argv[1])]
except OSError:
    tests = []
for t in tests:
    ok = t["result"] in ("OK", "EXPECTEDFAIL")
    m = re.findall(r"\[doctest\] test cases: *(\d+) \| *(\d+) passed \| *(\d+) failed \| *(\d+) skipped",
                   t.get("stdout") or "")
    if re.search(r"/ doctest \w+$", t["name"]) and m:
        run, tp, tf, ts = map(int, m[-1])  # doctest: "test cases: RUN | P passed | F failed | S skipped"
        cases, ran = run + ts, ran + run
        p, f = p + tp, f + tf + (not ok and tf == 0)  # a runner that died after its summary
    elif ok:
        p += 1
    elif t["result"] == "SKIP":
        s += 1
    else:
        f += 1
s += (cases - ran) if cases is not None else 0
print(p, f, s) if tests else print(0, 1, 0)
PY
    )
    if [ $rc -ne 0 ] && [ "${failed:-0}" -eq 0 ]; then failed=1; fi
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
  "")
    usage >&2
    exit 2
    ;;
  *)
    echo "dev.sh: unknown command '$cmd'" >&2
    usage >&2
    exit 2
    ;;
esac
