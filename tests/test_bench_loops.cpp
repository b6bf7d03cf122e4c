// SPDX-License-Identifier: MIT
// The host-cost comparison's timing loops (tools/bench/host_loop.h), which
// tools/bench_libtorch.cpp --interleaved uses to put minitensor beside libtorch: the paired
// form must report g / f, not f / g, and neither side's position in a pair may bias it.
// The calls spin until a wall-clock deadline, so their time is set by the clock, not by the
// CPU's speed or load: a call preempted mid-spin ends as soon as it runs again after its
// deadline, one long call in one loop, which the median over the pairs drops.
#include <doctest/doctest.h>

#include <chrono>

#include "tools/bench/host_loop.h"

namespace {
void spin(std::chrono::microseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}
}  // namespace

TEST_CASE("host_loop: ns_per_call_paired reports g over f, whichever goes first") {
  auto f = [] { spin(std::chrono::microseconds(20)); };
  auto g = [] { spin(std::chrono::microseconds(40)); };
  for (bool f_first : {true, false}) {
    CAPTURE(f_first);
    mt::bench::PairedNs p = mt::bench::ns_per_call_paired(f, g, 9, 2.0, f_first);
    CHECK(p.ratio == doctest::Approx(2.0).epsilon(0.15));
    CHECK(p.f == doctest::Approx(20000).epsilon(0.25));
    CHECK(p.g == doctest::Approx(40000).epsilon(0.25));
    mt::bench::PairedNs q = mt::bench::ns_per_call_paired(g, f, 9, 2.0, f_first);
    CHECK(q.ratio == doctest::Approx(0.5).epsilon(0.15));
  }
}

TEST_CASE("host_loop: calls_for sizes a loop to about the time asked") {
  auto f = [] { spin(std::chrono::microseconds(50)); };
  int64_t n = mt::bench::calls_for(f, 5e6);  // 5 ms of 50 us calls
  // Fewer when the spins are preempted (under 80 in a loaded CI run of the sanitizer build);
  // never more than the time asked allows.
  CHECK(n >= 50);
  CHECK(n <= 110);
  CHECK(mt::bench::calls_for([] {}, 1e6) > 1000);  // a call of nothing: many calls
}
