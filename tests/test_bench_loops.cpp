// SPDX-License-Identifier: MIT
// The host-cost comparison's timing loops (tools/bench/host_loop.h), which
// tools/bench/bench_libtorch.cpp --interleaved uses to put minitensor beside libtorch: the paired
// form must report g / f, not f / g, alternate which side goes first, and size each loop to
// the time asked. The loops run on a made-up clock that each timed call advances by its
// own cost, so every figure here is exact and the machine's load cannot move it.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "tools/bench/host_loop.h"

namespace {
// A clock that only the calls below move; each reading is logged as '|', so the log shows
// the loops: "|ffff|" is a loop of f.
struct BenchTestClock {
  using rep = int64_t;
  using period = std::nano;
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<BenchTestClock>;
  static constexpr bool is_steady = true;
  static inline int64_t ns = 0;
  static inline std::string log;
  static time_point now() {
    log += '|';
    return time_point(duration(ns));
  }
};

// The callable of each loop in BenchTestClock::log, in order ("fg" for a loop of f, then g).
std::string bench_test_loops() {
  std::string out;
  const std::string& l = BenchTestClock::log;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] != '|' && (i == 0 || l[i - 1] == '|')) out += l[i];
  return out;
}
}  // namespace

TEST_CASE("host_loop: ns_per_call_paired reports g over f, and alternates which goes first") {
  auto f = [] {
    BenchTestClock::ns += 20000;  // 20 us a call
    BenchTestClock::log += 'f';
  };
  auto g = [] {
    BenchTestClock::ns += 40000;  // 40 us a call
    BenchTestClock::log += 'g';
  };
  for (bool f_first : {true, false}) {
    CAPTURE(f_first);
    BenchTestClock::log.clear();
    mt::bench::PairedNs p = mt::bench::ns_per_call_paired<BenchTestClock>(f, g, 5, 2.0, f_first);
    CHECK(p.f == 20000);
    CHECK(p.g == 40000);
    CHECK(p.ratio == 2.0);
    // calls_for sizes f's loop (16 calls, then 64) and g's, then the five pairs alternate
    CHECK(bench_test_loops() == (f_first ? "ffgg"
                                           "fg"
                                           "gf"
                                           "fg"
                                           "gf"
                                           "fg"
                                         : "ffgg"
                                           "gf"
                                           "fg"
                                           "gf"
                                           "fg"
                                           "gf"));
    mt::bench::PairedNs q = mt::bench::ns_per_call_paired<BenchTestClock>(g, f, 5, 2.0, f_first);
    CHECK(q.ratio == 0.5);
  }
}

TEST_CASE("host_loop: calls_for sizes a loop to the time asked, from a loop of at least 1 ms") {
  int64_t calls = 0;
  auto f = [&] {
    BenchTestClock::ns += 50000;  // 50 us a call
    ++calls;
  };
  CHECK(mt::bench::calls_for<BenchTestClock>(f, 5e6) == 100);  // 5 ms of 50 us calls
  CHECK(calls == 16 + 64);  // 16 calls (0.8 ms) were too short a loop; 64 (3.2 ms) were not
  calls = 0;
  auto tiny = [&] {
    BenchTestClock::ns += 10;  // 10 ns a call
    ++calls;
  };
  CHECK(mt::bench::calls_for<BenchTestClock>(tiny, 1e6) == 100000);
  CHECK(calls == 16 + 64 + 256 + 1024 + 4096 + 16384 + 65536 + 262144);  // until 2.6 ms
  // the median of the loops: ns_per_call over five loops of a call whose cost changes
  int64_t cost = 0;
  auto varying = [&] { BenchTestClock::ns += (cost += 100); };
  CHECK(mt::bench::ns_per_call<BenchTestClock>(varying, 1) == 300);  // 100..500: the median
  // and with the real clock, a call of nothing still needs many calls for 1 ms
  CHECK(mt::bench::calls_for([] {}, 1e6) > 1000);
}
