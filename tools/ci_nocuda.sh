#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI's -Dcuda=disabled check: configure build-nocuda (no tests, no examples), build only
# the library and the minitensor command (-Werror under CI=true), and check that doctor
# says the option turned CUDA off. Prints one line, "nocuda: OK" or what failed; exit 0/1.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=build-nocuda
# -O0, no debug info: this build checks what the configuration compiles and says, not
# speed; it costs about 40% less CPU than -O2 (-O2-only warnings show in the plain build).
opts=(-Dcuda=disabled -Dtests=false -Dexamples=false -Doptimization=0 -Ddebug=false)
[ "${CI:-}" = "true" ] && opts+=(-Dwerror=true)
start=$SECONDS
if [ ! -f "$dir/build.ninja" ]; then
  flock "$(pwd)/.dev.sh.setup.lock" meson setup "$dir" "${opts[@]}" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; echo "nocuda: FAILED (meson setup)"; exit 1; }
fi
ninja -C "$dir" -j "${MT_JOBS:-$(nproc 2>/dev/null || echo 2)}" tools/minitensor >"$dir.build.log" 2>&1 ||
  { tail -n 60 "$dir.build.log"; echo "nocuda: FAILED (build; $dir.build.log)"; exit 1; }
out=$("$dir/tools/minitensor" doctor 2>&1)
line=$(grep '^cuda backend' <<<"$out")
if [[ $line != *"configured with -Dcuda=disabled"* ]]; then
  echo "$out"
  echo "nocuda: FAILED (doctor does not say -Dcuda=disabled turned CUDA off)"
  exit 1
fi
echo "nocuda: OK ($line; $(grep '^nvrtc' <<<"$out"); $((SECONDS - start)) s)"
