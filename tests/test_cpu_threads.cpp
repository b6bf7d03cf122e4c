// SPDX-License-Identifier: MIT
// The CPU kernels' thread pool (Note [The CPU thread pool] in kernels/cpu/thread_pool.cpp):
// every range covered once, exceptions from any thread carried out as mt::Error, nested
// and concurrent callers, a forked child without the pool's threads, the thread count
// from the environment, and out of memory inside a parallel loop.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "runtime/error.h"
#include "tests/child.h"
#include "tests/scoped_env.h"

#ifndef MT_TESTS_CORE_ONLY
#include "kernels/jit/pointwise.h"
#include "minitensor.h"
#endif

using namespace mt;

namespace {

struct Threads {
  int saved = cpu::num_threads();
  explicit Threads(int n) { cpu::set_num_threads(n); }
  ~Threads() { cpu::set_num_threads(saved); }
};

std::string pool_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not an mt::Error";
  }
  return "no exception";
}

// Whether parallel_for(n, grain) called f exactly once on every index.
bool covers_once(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  cpu::parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
  });
  for (const auto& h : hits)
    if (h.load() != 1) return false;
  return true;
}

}  // namespace

TEST_SUITE("cpu threads") {
  TEST_CASE("cpu threads: parallel_for covers every index once, on any thread count") {
    for (int t : {1, 2, 3, 5}) {
      Threads th(t);
      CAPTURE(t);
      CHECK(covers_once(1, 1));
      CHECK(covers_once(1000, 1));
      CHECK(covers_once(100003, 4096));
      CHECK(covers_once(1 << 20, 32768));
    }
  }

  TEST_CASE("cpu threads: an exception in a loop, on any thread, comes out as an mt::Error") {
    Threads th(2);
    const int64_t n = 1 << 20;
    // Every piece of the second half throws: on a pool thread, whenever one joins.
    CHECK(pool_error_of([&] {
            cpu::parallel_for(n, 1024, [&](int64_t, int64_t e) {
              if (e > n / 2) throw std::bad_alloc();
            });
          }) ==
          "[cpu] out of memory inside a CPU kernel's loop (std::bad_alloc); free memory or "
          "use smaller tensors");
    CHECK(pool_error_of([&] {
            cpu::parallel_for(n, 1024, [&](int64_t, int64_t e) {
              if (e > n / 2) throw std::runtime_error("boom");
            });
          }) == "[cpu] a CPU kernel's loop threw boom");
    CHECK(pool_error_of([&] {
            cpu::parallel_for(n, 1024, [&](int64_t, int64_t e) {
              if (e > n / 2) throw 42;
            });
          }) == "[cpu] a CPU kernel's loop threw an exception that is not a std::exception");
    // An mt::Error comes out as it is; on one thread (below the grain) too.
    CHECK(pool_error_of([&] {
            cpu::parallel_for(n, 1024, [&](int64_t, int64_t e) {
              MT_CHECK(e <= n / 2, "[test_op] piece at {} failed", e > n / 2 ? 1 : 0);
            });
          }) == "[test_op] piece at 1 failed");
    CHECK(pool_error_of([&] {
            cpu::parallel_for(10, 1024, [](int64_t, int64_t) { throw std::bad_alloc(); });
          }) ==
          "[cpu] out of memory inside a CPU kernel's loop (std::bad_alloc); free memory or "
          "use smaller tensors");
    // The pool is still usable after a failed loop.
    CHECK(covers_once(1 << 20, 1024));
  }

  TEST_CASE("cpu threads: a loop inside a loop's piece runs, on its caller's thread") {
    Threads th(2);
    std::atomic<int64_t> total{0};
    cpu::parallel_for(64, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        cpu::parallel_for(4096, 64, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    });
    CHECK(total.load() == 64 * 4096);
  }

  TEST_CASE("cpu threads: callers on several threads at once each get their whole loop") {
    Threads th(2);
    std::atomic<int> good{0};
    std::vector<std::thread> callers;
    for (int k = 0; k < 4; ++k)
      callers.emplace_back([&] {
        bool ok = true;
        for (int r = 0; r < 50; ++r) ok = ok && covers_once(20000 + r, 512);
        good.fetch_add(ok);
      });
    for (auto& c : callers) c.join();
    CHECK(good.load() == 4);
  }

  TEST_CASE("cpu threads: a forked child, without the pool's threads, still runs its loops") {
    Threads th(2);
    REQUIRE(covers_once(1 << 20, 1024));  // the pool's threads exist in this process
    CHECK(in_child([] { return covers_once(1 << 20, 1024) && covers_once(1 << 16, 64); }) == 0);
  }

  TEST_CASE("cpu threads: loops stay on the caller for a while after threads did not pay") {
    using cpu::detail::next_backoff;
    constexpr int64_t ms = 1'000'000;
    // The caller ran 4 of 8 chunks in 1 ms: one thread alone would have taken about 2 ms.
    CHECK(next_backoff(0, 1 * ms, 1 * ms, 4, 8) == 0);      // twice as fast: no pause
    CHECK(next_backoff(8, 1 * ms, 1 * ms, 4, 8) == 4);      // a probe that pays halves it
    CHECK(next_backoff(1, 1 * ms, 1 * ms, 4, 8) == 0);      // ... down to none
    CHECK(next_backoff(0, 2 * ms, 1 * ms, 4, 8) == 1);      // no faster: the next loop alone
    CHECK(next_backoff(1, 9 * ms, 1 * ms, 4, 8) == 2);      // doubling
    CHECK(next_backoff(256, 9 * ms, 1 * ms, 4, 8) == 256);  // at most 256 loops
    CHECK(next_backoff(4, 1900'000, 1500'000, 6, 8) == 4);  // 5% faster: kept
    // Faster than the pace, but the caller waited 0.6 ms for a worker after 1 ms of work.
    CHECK(next_backoff(0, 1600'000, 1 * ms, 4, 8) == 1);
    CHECK(next_backoff(4, 9 * ms, 0, 0, 8) == 4);  // the caller ran no chunk
  }

  TEST_CASE(
      "cpu threads: the count comes from MT_NUM_THREADS, then OMP_NUM_THREADS, at most the CPUs") {
    ScopedEnv mt_env("MT_NUM_THREADS"), omp_env("OMP_NUM_THREADS");
    mt_env.set(nullptr);
    omp_env.set(nullptr);
    const int cpus = cpu::detail::threads_from_environment();
    CHECK(cpus >= 1);
    omp_env.set("1,1");
    CHECK(cpu::detail::threads_from_environment() == 1);
    mt_env.set("1");
    omp_env.set("3");
    CHECK(cpu::detail::threads_from_environment() == 1);
    mt_env.set("100000");
    CHECK(cpu::detail::threads_from_environment() == cpus);
    mt_env.set("99999999999999999999999");
    CHECK(cpu::detail::threads_from_environment() == cpus);
    for (const char* bad : {"", "0", "-2", "two", "2x"}) {
      CAPTURE(bad);
      mt_env.set(bad);
      omp_env.set(nullptr);
      CHECK(cpu::detail::threads_from_environment() == cpus);
    }
  }

  TEST_CASE("cpu threads: set_num_threads refuses more threads than the library runs") {
    const int saved = cpu::num_threads();
    CHECK(pool_error_of([] { cpu::set_num_threads(1025); }) ==
          "[set_num_threads] 1025 threads is more than the 1024 this library runs");
    CHECK(cpu::num_threads() == saved);
    cpu::set_num_threads(1024);  // allowed; the pool starts threads only when a loop asks
    CHECK(cpu::num_threads() == 1024);
    cpu::set_num_threads(saved);
  }

#ifndef MT_TESTS_CORE_ONLY
  TEST_CASE("cpu threads: a matmul cut into blocks on the pool matches one thread") {
    // Rows split (m >= n) and columns split (n > m), with a transposed operand each.
    for (auto mkn : {std::tuple{512, 300, 64}, std::tuple{40, 300, 600}}) {
      auto [m, k, n] = mkn;
      CAPTURE(std::get<0>(mkn));  // not m: clang 15 does not let CAPTURE's lambda take a binding
      Tensor a = randn({m, k}), b = randn({n, k}).t();
      Tensor o1 = empty({m, n}), o2 = empty({m, n});
      {
        Threads th(1);
        cpu::matmul(a, b, o1);
      }
      {
        Threads th(2);
        cpu::matmul(a, b, o2);
      }
      CHECK(max(abs(sub(o1, o2))).item<float>() < 1e-4f);
    }
  }

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // The pointwise builder's CPU evaluation allocates its tile buffers (4 KiB for each value
  // alive at once) inside the parallel loop; with a 16 MiB address-space margin, those of an
  // expression with 100000 values alive together (400 MB) do not fit, even where earlier
  // cases left freed memory in the heap. Before the loop went through cpu::parallel_for,
  // std::bad_alloc left an OpenMP region and the process was terminated (SIGABRT). Not under ASan
  // or TSan, whose shadow memory needs the address space.
  TEST_CASE("cpu threads: out of memory inside the pointwise builder's CPU loop is an mt::Error") {
    std::string body, sum = "x";
    for (int i = 0; i < 100000; ++i) {
      body += fmt::format("t{} = x * {}.5;\n", i, i);
      sum += fmt::format(" + t{}", i);
    }
    body += sum;
    const jit::Pointwise big = jit::pointwise("many_nodes", body);
    Tensor x = randn({1 << 16});
    Threads th(2);
    REQUIRE(covers_once(1 << 20, 1024));  // the pool's threads start before the limit
    const int rc = in_child(
        [&] {
          struct rlimit lim;
          REQUIRE(::getrlimit(RLIMIT_AS, &lim) == 0);
          long pages = 0, resident = 0;
          FILE* f = std::fopen("/proc/self/statm", "r");
          REQUIRE(f != nullptr);
          REQUIRE(std::fscanf(f, "%ld %ld", &pages, &resident) == 2);
          std::fclose(f);
          lim.rlim_cur = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(16) << 20);
          REQUIRE(::setrlimit(RLIMIT_AS, &lim) == 0);
          const std::string e = pool_error_of([&] { big(x); });
          return e ==
                 "[cpu] out of memory inside a CPU kernel's loop (std::bad_alloc); free memory or "
                 "use smaller tensors";
        },
        60);
    CHECK(rc == 0);
  }
#endif
#endif
}
