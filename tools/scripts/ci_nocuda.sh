#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI's second build of the library, which checks three things at once:
#  - minitensor as a Meson subproject: examples/embed (the parent project of
#    docs/embedding.md) pulls it in with -Dminitensor:cuda=disabled and builds its app against
#    dependency('minitensor'); the app runs and prints its OK line; `meson install` of the
#    parent (into a DESTDIR) installs nothing but what the parent asked for; and the default
#    subproject mode (a second, configure-only setup: no compile) declares no tests, tools or
#    examples and would install only the shared library;
#  - -Dcuda=disabled: the library and the minitensor command build under -Werror (CI=true)
#    and `doctor` says the option turned CUDA off (the parent asks for the command with
#    -Dminitensor:tools=true, so it is built here, installed, and counted as asked for);
#  - clang: where clang++-15 (the compiler floor, docs/building.md) or a newer clang++ is
#    installed and CXX is unset, this build uses it, so CI compiles the library, the command
#    and a consumer with clang as well as with GCC (its other builds); under CI=true it must
#    (tools/dev.sh deps installs clang-15 there). CXX=g++ keeps GCC;
#  - a build directory outside the source tree: the parent and its build live in $MT_NOCUDA_DIR
#    (default: a folder under $TMPDIR named for this checkout; kept, so a second run is
#    incremental), and `minitensor dump mt::gelu` must still name kernels/ops/unary.cpp.
# Prints one line, "nocuda: OK (...)" or what failed; exit 0/1.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
if [ -z "${CXX:-}" ]; then
  for c in clang++-15 clang++-16 clang++-17 clang++-18 clang++-19; do
    command -v "$c" >/dev/null && { export CXX=$c; break; }
  done
fi
cxx=$(basename "${CXX:-c++}")
# one build directory a compiler: meson keeps the compiler it was configured with
work=${MT_NOCUDA_DIR:-${TMPDIR:-/tmp}/minitensor-nocuda-$(printf '%s' "$root" | cksum | cut -d' ' -f1)-$cxx}
case "$work/" in "$root"/*) echo "nocuda: FAILED (MT_NOCUDA_DIR=$work is inside the source tree)"; exit 1 ;; esac
parent=$work/parent build=$work/build default=$work/build-default log=$root/build-nocuda
fail() { echo "nocuda: FAILED ($*)"; exit 1; }
start=$SECONDS
[ "${CI:-}" = true ] && [[ $cxx != clang* ]] &&
  fail "CI builds this with clang 15 or newer; none found (tools/dev.sh deps installs clang-15 when CI=true)"
mkdir -p "$parent/subprojects" || fail "cannot create $parent"
# The parent: a copy of examples/embed (rewritten only when it changed, so a second run does
# not reconfigure) with subprojects/minitensor a link to this checkout.
for f in meson.build main.cpp; do
  cmp -s "examples/embed/$f" "$parent/$f" || cp "examples/embed/$f" "$parent/$f" || fail "copying $f"
done
[ "$(readlink "$parent/subprojects/minitensor")" = "$root" ] || ln -sfn "$root" "$parent/subprojects/minitensor"

# -O0, no debug info: this build checks what the configuration compiles and says, not
# speed; it costs about 40% less CPU than -O2 (-O2-only warnings show in the plain build).
opts=(--force-fallback-for=minitensor -Dminitensor:cuda=disabled -Doptimization=0 -Ddebug=false)
[ "${CI:-}" = "true" ] && opts+=(-Dwerror=true)
# a unity build, as tools/dev.sh makes CI's (MT_UNITY): at -O0 most of a compile is parsing
case "${MT_UNITY:-${CI:-}}" in 1 | true) opts+=(--unity on "-Dunity_size=${MT_UNITY_SIZE:-16}") ;; esac
setup() {  # setup DIR [OPTION...]: configure DIR once (one setup at a time: tools/dev.sh)
  local dir=$1
  shift
  [ -f "$dir/build.ninja" ] && return 0
  flock "$root/.dev.sh.setup.lock" meson setup "$dir" "$parent" "${opts[@]}" "$@" >"$log.setup.log" 2>&1 ||
    { cat "$log.setup.log"; fail "meson setup $dir"; }
}
setup "$build" -Dminitensor:tools=true
exe=$build/subprojects/minitensor/tools/minitensor
ninja -C "$build" -j "${MT_JOBS:-$(nproc 2>/dev/null || echo 2)}" embed_app subprojects/minitensor/tools/minitensor \
  >"$log.build.log" 2>&1 || { tail -n 60 "$log.build.log"; fail "build; $log.build.log"; }

# 1. The app, built against the subproject's dependency.
app=$("$build/embed_app" 2>&1) || { echo "$app"; fail "embed_app exited with an error"; }
[[ $app == "embed: "*": OK" ]] || { echo "$app"; fail "embed_app did not print its OK line"; }

# 2. doctor says the option turned CUDA off.
out=$("$exe" doctor 2>&1)
line=$(grep '^cuda backend' <<<"$out")
[[ $line == *"configured with -Dcuda=disabled"* ]] ||
  { echo "$out"; fail "doctor does not say -Dcuda=disabled turned CUDA off"; }

# 3. Locations name files from the source root although the build is outside it.
dump=$("$exe" dump mt::gelu 2>&1)
grep -Eq '^  CPU +kernel +\[kernels/ops/unary\.cpp:[0-9]+\]$' <<<"$dump" ||
  { echo "$dump"; fail "dump mt::gelu does not name kernels/ops/unary.cpp:LINE (out-of-tree build)"; }

# The build with tools declares no tests or examples (the tools' own meson tests aside).
targets_of() {  # "NAME MESON.BUILD" for each target DIR's build declares
  meson introspect "$1" --targets | python3 -c '
import json, sys
for t in json.load(sys.stdin): print(t["name"], t["defined_in"])'
}
extra=$(targets_of "$build" | grep -E '/subprojects/minitensor/(tests|examples)/')
[ -z "$extra" ] || fail "the subproject declares $(tr '\n' ' ' <<<"$extra")"

# 4. What the parent's install puts down: the command it asked for and the library that
#    command needs; no headers, pkg-config or CMake files, examples, benches or tests.
rm -rf "$work/destdir"
meson install -C "$build" --no-rebuild --quiet --destdir "$work/destdir" >"$log.install.log" 2>&1 ||
  { cat "$log.install.log"; fail "meson install"; }
installed=$(cd "$work/destdir" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort)
unasked=$(grep -Ev '(^|/)bin/minitensor$|(^|/)lib[^/]*/([^/]*/)?libminitensor\.so(\.[0-9]+)*$' <<<"$installed")
[ -z "$unasked" ] || { echo "$installed"; fail "the subproject installed what the parent did not ask for: $(tr '\n' ' ' <<<"$unasked")"; }
grep -q 'libminitensor\.so\.' <<<"$installed" && grep -q 'bin/minitensor$' <<<"$installed" ||
  { echo "$installed"; fail "the install lacks the library or the command"; }

# 5. The default subproject mode, configured only: no tests, tools or examples, and an
#    install of the shared library alone.
setup "$default"
targets=$(targets_of "$default")
extra=$(grep -E '/subprojects/minitensor/(tests|tools|examples)/' <<<"$targets")
[ -z "$extra" ] || { echo "$targets"; fail "the default subproject mode declares $(tr '\n' ' ' <<<"$extra")"; }
grep -q '^minitensor ' <<<"$targets" && grep -q '^embed_app ' <<<"$targets" ||
  { echo "$targets"; fail "the default subproject mode lacks the library or the app"; }
tests=$(meson introspect "$default" --tests | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
[ "$tests" = 0 ] || fail "the default subproject mode declares $tests tests"
would=$(meson introspect "$default" --installed | python3 -c '
import json, sys
for p in json.load(sys.stdin).values(): print(p)')
unasked=$(grep -Ev '/libminitensor\.so(\.[0-9]+)*$' <<<"$would")
[ -z "$unasked" ] || fail "the default subproject mode would install $(tr '\n' ' ' <<<"$unasked")"

echo "nocuda: OK ($cxx $("${CXX:-c++}" -dumpversion 2>/dev/null || echo '?'); subproject of examples/embed in $work, outside the tree: app OK;" \
  "$line; $(grep '^nvrtc' <<<"$out"); dump names kernels/ops/unary.cpp;" \
  "installs $(wc -l <<<"$installed") files (bin/minitensor, libminitensor.so*); default mode" \
  "declares $(wc -l <<<"$targets") targets, 0 tests, installs $(wc -l <<<"$would") files; $((SECONDS - start)) s)"
