#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds fuzz_schema with clang++ (libFuzzer, ASan, UBSan) into a scratch directory and
# fuzzes for a bounded time from the seed corpus; a finding fails. Used by the meson test
# 'fuzz_schema (60 s)' when -Dfuzz=true and clang++ is installed, whatever compiler the
# build itself uses. By hand: tests/fuzz/run_fuzzer.sh SECONDS [WORK_DIR]
set -euo pipefail
seconds=${1:-60}
work=${2:-$(mktemp -d)}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here="$root/tests/fuzz"
mkdir -p "$work/new"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -include "$here/source_location_compat.h" -I "$root")
fmt_flags=$(pkg-config --cflags --libs fmt)
# shellcheck disable=SC2086
${CLANGXX:-clang++} "${flags[@]}" "$here/fuzz_schema.cpp" "$root/runtime/error.cpp" \
  "$root/dispatcher/schema.cpp" $fmt_flags -o "$work/fuzz_schema"
# New inputs go into $work/new (the first folder); the seeds stay as they are.
"$work/fuzz_schema" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
  "$work/new" "$here/corpus/schema"
