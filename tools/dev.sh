#!/usr/bin/env bash
# minitensor's developer entry point.
#   tools/dev.sh demo              set up, build, run the demo
#   tools/dev.sh test [--sanitize] set up, build, run every test (ASan+UBSan build with --sanitize)
#   tools/dev.sh build [--sanitize]
# Set-up installs the Debian packages that are missing (with sudo when not root),
# configures the build directory when needed and builds.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

cmd=${1:-}
shift || true
sanitize=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    *) echo "dev.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[dev.sh]\033[0m %s\n' "$*"; }

packages=(meson ninja-build g++ pkg-config python3 libfmt-dev doctest-dev libopenblas-dev libcli11-dev)

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
  say "building $dir"
  ninja -C "$dir" >"$dir.build.log" 2>&1 || { tail -n 60 "$dir.build.log"; exit 1; }
}

builddir=build
build_opts=()
if [ $sanitize -eq 1 ]; then
  builddir=build-asan
  build_opts=(-Db_sanitize=address,undefined -Db_lundef=false)
fi

case "$cmd" in
  build)
    install_missing
    configure "$builddir" "${build_opts[@]}"
    ;;
  test)
    install_missing
    configure "$builddir" "${build_opts[@]}"
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
    echo "usage: tools/dev.sh demo | test [--sanitize] | build [--sanitize]" >&2
    exit 2
    ;;
esac
