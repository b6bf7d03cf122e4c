// SPDX-License-Identifier: MIT
// Threads: every public call path of the dispatcher and autograd while other threads
// register and drop ops (issues #16 and #23), and the JIT kernel cache and the autotuner
// used by many threads at once. This file uses only the runtime, the dispatcher, autograd,
// the kernel cache with NVRTC and the autotuner (kernels/jit: cache, nvrtc, sha256,
// autotune), with ops of its own, so that CI can also build it with ThreadSanitizer against
// those sources alone (tests/meson.build, 'threads (tsan)'), without a sanitized build of
// the whole library.
// MT_STRESS_SECONDS=10 runs the stress test for at least that long (default: 300 rounds
// of registrations).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/custom_op.h"
#include "autograd/gradcheck.h"
#include "autograd/trace.h"
#include "dispatcher/library.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/kernel.h"
#include "runtime/tensor.h"

using namespace mt;

#ifdef MT_TESTS_CORE_ONLY
// The ThreadSanitizer build of this file links the runtime, dispatcher and autograd only
// (with the kernel cache's sources), which need nothing of the kernels layer but the one
// hook (tools/lint/check_layers.py --link): its stand-in here installs the Autograd and Trace
// fallbacks and no built-in op (Note [Library initialization]).
namespace mt::detail {
void install_autograd_fallback();
void install_trace_fallback();
void initialize_library() {
  install_autograd_fallback();
  install_trace_fallback();
}
}  // namespace mt::detail
#endif

namespace {

// What one kind of caller saw: right results, clear errors, anything else.
struct Outcomes {
  std::atomic<int64_t> ok{0}, clear{0}, bad{0};
  std::mutex mutex;
  std::string first_bad;  // the first wrong result or unclear error, for the failure message

  void wrong(std::string what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (bad.fetch_add(1) == 0) first_bad = std::move(what);
  }
  // Runs fn (true: the right result); an mt::Error is clear when it starts with one of
  // `prefixes`, the op's name in brackets or the lookup's own.
  template <typename F>
  void run(F&& fn, std::initializer_list<std::string_view> prefixes) {
    try {
      if (fn()) {
        ok.fetch_add(1);
      } else {
        wrong("a wrong result");
      }
    } catch (const Error& e) {
      const std::string_view m = e.what();
      bool known = false;
      for (std::string_view p : prefixes) known = known || m.starts_with(p);
      if (known) {
        clear.fetch_add(1);
      } else {
        wrong(std::string("an unexpected error: ") + e.what());
      }
    } catch (const std::exception& e) {
      wrong(std::string("a non-mt::Error exception: ") + e.what());
    }
  }
};

bool all_equal(const Tensor& y, int64_t n, float v) {
  if (y.numel() != n) return false;
  for (float f : y.contiguous().to_vector<float>())
    if (f != v) return false;
  return true;
}

std::string error_text(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The ops that are defined and dropped, as a user's Library: test_threads_dyn::op returns
// 3s, test_threads_dyn2::op (which a second thread defines and drops) 5s.
std::unique_ptr<Library> define_dyn(const char* ns = "test_threads_dyn", double value = 3) {
  auto l = std::make_unique<Library>(Library::Kind::Def, ns);
  l->def("op(Tensor x) -> Tensor");
  l->impl("op", DispatchKey::CPU, [value](const Tensor& x) { return full_like(x, value); });
  return l;
}

}  // namespace

// Every public call path on nine threads while two others define and drop ops (Note
// [Schema publication] and Note [Dispatch table publication] in dispatcher/dispatcher.cpp):
// a typed handle of a stable op whose CPU kernel is overridden and restored, by-name calls,
// boxed calls and typed calls through handles that outlive their op, dump, the Trace
// key's fallback, MT_TRACE=dispatch logging, and forward and backward of a custom op with
// an autograd formula. Each call returns the right value or a clear mt::Error naming the
// op. tools/dev.sh test --tsan and CI's 'threads (tsan)' run it under ThreadSanitizer, the
// ASan build of mt_tests under AddressSanitizer.
TEST_CASE("registering and deregistering while other threads dispatch is safe") {
  Library lib(Library::Kind::Def, "test_threads");
  lib.def("op(Tensor x) -> Tensor");
  lib.impl("op", DispatchKey::CPU, [](const Tensor& x) { return x; });
  auto op = dispatcher().find_or_throw("test_threads::op").typed<Tensor(const Tensor&)>();
  // y = 2 x, with its backward 2 g
  auto scale2 = [](const Tensor& x) {
    Tensor y = empty_like(x);
    Tensor c = x.contiguous();
    for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = 2 * c.data_ptr<float>()[i];
    return y;
  };
  auto twice = custom_op("test_threads::twice", scale2);
  twice.register_autograd([=](AutogradContext&, const Tensor& g) { return scale2(g); },
                          [](AutogradContext&, const Tensor&, const Tensor&) {});

  auto dyn_lib = define_dyn();
  const OperatorHandle dyn = dispatcher().find_or_throw("test_threads_dyn::op");
  auto dyn_typed = dyn.typed<Tensor(const Tensor&)>();
  dyn_lib.reset();  // the handles now outlive their op; the loop below brings it back
  // While dyn is absent or half-registered, the clear errors a call may see.
  // (a lookup by name of a dropped op says where it was defined)
  const std::initializer_list<std::string_view> dyn_errors = {
      "[test_threads_dyn::op] ", "[dispatcher] no operator named 'test_threads_dyn::op'",
      "[dispatcher] 'test_threads_dyn::op' was defined at "};
  const std::initializer_list<std::string_view> dyn2_errors = {
      "[test_threads_dyn2::op] ", "[dispatcher] no operator named 'test_threads_dyn2::op'",
      "[dispatcher] 'test_threads_dyn2::op' was defined at "};

  // MT_TRACE=dispatch logging, on for the whole loop: every line is a call or redispatch
  // of these ops, or of a built-in one the library calls (mt::add in the full library's
  // backward). The sink is called under the dispatcher's log mutex.
  std::atomic<int64_t> trace_lines{0}, bad_trace_lines{0};
  std::string first_bad_line;
  Dispatcher& d = Dispatcher::singleton();
  d.set_log_sink([&](std::string_view l) {
    trace_lines.fetch_add(1);
    while (l.starts_with(" ")) l.remove_prefix(1);
    bool ok = false;
    for (std::string_view kind : {"[call] ", "[redispatch] "})
      for (std::string_view op : {"test_threads::op ", "test_threads::twice ",
                                  "test_threads_dyn::op ", "test_threads_dyn2::op ", "mt::"})
        ok = ok || (l.starts_with(kind) && l.substr(kind.size()).starts_with(op));
    if (!ok && bad_trace_lines.fetch_add(1) == 0) first_bad_line = l;
  });

  // forward and backward of twice on the calling thread's own tape (one per thread)
  auto autograd_round = [&](Outcomes& o, double v) {
    o.run(
        [&] {
          Tensor x = full({3}, v, {.requires_grad = true});
          Tensor y = twice(x);
          backward(y, ones_like(y));
          return all_equal(y, 3, float(2 * v)) && x.grad().defined() && all_equal(x.grad(), 3, 2);
        },
        {});
  };
  std::atomic<bool> stop{false};
  const char* names[] = {"typed",
                         "by name",
                         "boxed",
                         "dropped handle",
                         "dump",
                         "trace",
                         "autograd",
                         "by name, traced, of dyn2",
                         "autograd, another tape"};
  std::array<Outcomes, 9> out;
  std::vector<std::function<void()>> callers = {
      [&] {  // a typed handle of the stable op: its own kernel (x) or the override (7s)
        Tensor x = zeros({1});
        out[0].run(
            [&] {
              Tensor y = op(x);
              return y.is_same(x) || all_equal(y, 1, 7);
            },
            {});
      },
      [&] {  // by name: looked up on every call
        Tensor x = zeros({2});
        out[1].run([&] { return all_equal(call<Tensor>("test_threads_dyn::op", x), 2, 3); },
                   dyn_errors);
      },
      [&] {  // boxed, through the handle found before the op was first dropped
        out[2].run(
            [&] {
              Stack s{zeros({2})};
              dyn.call_boxed(&s);
              return s.size() == 1 && all_equal(s[0].to_tensor(), 2, 3);
            },
            dyn_errors);
      },
      [&] {  // the typed handle of the dropped op
        Tensor x = zeros({2});
        out[3].run([&] { return all_equal(dyn_typed(x), 2, 3); }, dyn_errors);
      },
      [&] {  // dump: the entry stays, with or without its schema
        out[4].run(
            [&] {
              const std::string s = dispatcher().dump("test_threads_dyn::op");
              return s.starts_with("name: test_threads_dyn::op\nschema: (none)\n") ||
                     s.starts_with(
                         "name: test_threads_dyn::op\nschema: test_threads_dyn::op(Tensor "
                         "x) -> Tensor\n  registered at tests/test_threads.cpp:");
            },
            {});
      },
      [&] {  // the Trace key's fallback, which reads the schema
        Tensor x = zeros({2});
        CallTrace trace;
        out[5].run(
            [&] {
              TraceCallsGuard guard(&trace);
              return all_equal(dyn_typed(x), 2, 3);
            },
            dyn_errors);
        for (const TracedCall& c : trace.calls)
          if (c.op != "test_threads_dyn::op") out[5].wrong("a traced call of " + c.op);
      },
      [&] { autograd_round(out[6], 1.5); },
      [&] {  // by name, traced, the op the second registering thread defines and drops
        Tensor x = zeros({4});
        CallTrace trace;
        out[7].run(
            [&] {
              TraceCallsGuard guard(&trace);
              return all_equal(call<Tensor>("test_threads_dyn2::op", x), 4, 5);
            },
            dyn2_errors);
        for (const TracedCall& c : trace.calls)
          if (c.op != "test_threads_dyn2::op") out[7].wrong("a traced call of " + c.op);
      },
      [&] { autograd_round(out[8], -4); },
  };
  std::vector<std::thread> threads;
  for (auto& caller : callers) {
    threads.emplace_back([&] {
      while (!stop.load()) caller();
    });
  }
  // The second registering thread: defines and drops test_threads_dyn2 until the end.
  std::atomic<int64_t> rounds2{0};
  threads.emplace_back([&] {
    while (!stop.load()) {
      auto l = define_dyn("test_threads_dyn2", 5);
      std::this_thread::yield();
      rounds2.fetch_add(1);
    }
  });
  d.set_trace_dispatch(true);
  auto total = [&] {
    int64_t n = 0;
    for (auto& o : out) n += o.ok.load() + o.clear.load() + o.bad.load();
    return n;
  };
  while (total() == 0) std::this_thread::yield();  // the calling threads are running
  const int64_t before = total();
  const char* env = std::getenv("MT_STRESS_SECONDS");
  const auto start = std::chrono::steady_clock::now();
  const auto at_least = start + std::chrono::seconds(env ? std::atoi(env) : 0);
  const auto deadline = std::max(at_least, start + std::chrono::seconds(20));
  // At least 300 rounds (and MT_STRESS_SECONDS), and until every caller has seen a right
  // result and many calls ran during the registrations (or 20 s passed).
  auto every_caller_ran = [&] {
    for (auto& o : out)
      if (o.ok.load() == 0) return false;
    return total() > before + 1000;
  };
  int rounds = 0;
  for (; rounds < 300 || std::chrono::steady_clock::now() < at_least ||
         (!every_caller_ran() && std::chrono::steady_clock::now() < deadline);
       ++rounds) {
    Library over(Library::Kind::Impl, "test_threads", DispatchKey::CPU);
    over.impl("op", [](const Tensor& x) { return full_like(x, 7); });
    auto l = define_dyn();
    std::this_thread::yield();
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  d.set_trace_dispatch(false);
  d.set_log_sink(nullptr);
  for (size_t i = 0; i < out.size(); ++i) {
    INFO(names[i], ": ", out[i].ok.load(), " right, ", out[i].clear.load(), " clear errors, ",
         out[i].bad.load(), " wrong; the first wrong: ", out[i].first_bad);
    CHECK(out[i].bad.load() == 0);
    CHECK(out[i].ok.load() > 0);
  }
  MESSAGE(rounds, " and ", rounds2.load(), " rounds of registrations on two threads, ",
          total() - before, " calls during them");
  CHECK(rounds2.load() > 0);
  CHECK(trace_lines.load() > 0);
  CHECK_MESSAGE(bad_trace_lines.load() == 0, "the first: ", first_bad_line);
  // dyn is dropped now: its old handles say so, by every path.
  const std::string dropped = "[test_threads_dyn::op] this op was dropped";
  CHECK(error_text([&] { dyn_typed(zeros({1})); }).starts_with(dropped));
  Stack s{zeros({1})};
  CHECK(error_text([&] { dyn.call_boxed(&s); }).starts_with(dropped));
  CHECK(error_text([&] { dyn.typed<Tensor(const Tensor&)>(); }).starts_with(dropped));
  CHECK(error_text([&] { dyn.schema(); }).starts_with(dropped));
  for (const char* name : {"test_threads_dyn::op", "test_threads_dyn2::op"})
    CHECK(error_text([&] { call<Tensor>(name, zeros({1})); })
              .starts_with(std::string("[dispatcher] '") + name +
                           "' was defined at tests/test_threads.cpp:"));
}

// ---- the JIT kernel cache (kernels/jit/cache.cpp) used by many threads at once ----

namespace {

// A one-line kernel; each tag gives another source (another key) and another constant in
// the binary, so a result loaded under the wrong key would differ from the others' one.
jit::CompileRequest threads_kernel(int tag, int arch) {
  return {.source = "template <typename T>\n__global__ void k(T* p) { p[threadIdx.x] = T(" +
                    std::to_string(tag) + "); }\n",
          .name = "threads.cu",
          .name_expressions = {"k<float>"},
          .arch = arch,
          .headers = {}};
}

// A fresh directory under /tmp, removed with what is in it.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "mt_test_threads_XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("jit cache: threads asking for one key at once compile it once" *
          doctest::skip(!jit::nvrtc_available())) {
  ScratchDir dir;
  jit::KernelCache cache({.dir = dir.path, .warn = false});
  const jit::CompileRequest req = threads_kernel(20, 90);
  std::vector<std::shared_ptr<const jit::CompileResult>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = cache.get(req); });
  for (auto& t : threads) t.join();
  CHECK(cache.stats().misses == 1);
  CHECK(cache.stats().memory_hits == 7);
  for (const auto& g : got) CHECK(g == got[0]);
  REQUIRE(got[0]);
  CHECK(got[0]->target == "sm_90");
}

// Eight threads on one cache object and its directory: four ask for keys they share and
// one of their own (for sm_80 and sm_90), one of them dropping the memory level every
// round so that the others load from disk while it compiles and stores again; one stores
// and loads a shared key over and over; one lists the directory; one shrinks and restores
// the size bound, evicting files the others are reading. Each result must be a CUBIN for
// the arch asked with the one binary of its key; the counters, the event record, the
// MT_LOG=jit lines and the shared events.log must add up to the calls made.
TEST_CASE("jit cache: threads compiling, loading, storing, listing and evicting at once" *
          doctest::skip(!jit::nvrtc_available())) {
  ScratchDir dir;
  jit::KernelCache cache({.dir = dir.path, .warn = false, .log = true, .event_log = true});
  cache.record_history(true, 1 << 20);
  std::atomic<int64_t> log_lines{0}, bad_log_lines{0};
  Dispatcher::singleton().set_log_sink([&](std::string_view l) {
    const bool ok = l.starts_with("[jit] compile ") || l.starts_with("[jit] disk hit ") ||
                    l.starts_with("[jit] memory hit ");
    (ok ? log_lines : bad_log_lines).fetch_add(1);
  });

  std::vector<jit::CompileRequest> shared;
  for (int tag : {1, 2})
    for (int arch : {80, 90}) shared.push_back(threads_kernel(tag, arch));
  constexpr int kGetters = 4, kRounds = 6;
  std::mutex mutex;
  std::map<std::string, std::string> binary_of;  // key -> the first binary seen for it
  std::vector<std::string> wrong;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(mutex);
    wrong.push_back(std::move(what));
  };
  // A right result: a CUBIN for the arch asked, holding k<float>, the same binary for one key.
  auto check = [&](const jit::CompileRequest& r, const jit::CompileResult& res) {
    const std::string key = jit::cache_key(r);
    if (res.target != "sm_" + std::to_string(r.arch) || !res.is_cubin() ||
        res.lowered_names.size() != 1 ||
        res.binary.find(res.lowered_name("k<float>") + '\0') == std::string::npos)
      return fail("a result that is not the CUBIN asked for, key " + key);
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, first] = binary_of.emplace(key, res.binary);
    if (!first && it->second != res.binary) wrong.push_back("two binaries for key " + key);
  };
  std::atomic<int64_t> gets{0};
  std::atomic<int> getters_left{kGetters};
  std::vector<std::thread> threads;
  for (int g = 0; g < kGetters; ++g)
    threads.emplace_back([&, g] {
      try {
        std::vector<jit::CompileRequest> reqs = shared;
        reqs.push_back(threads_kernel(100 + g, g % 2 ? 80 : 90));
        for (int round = 0; round < kRounds; ++round) {
          if (g == 0) cache.clear_memory();
          for (const auto& r : reqs) {
            check(r, *cache.get(r));
            gets.fetch_add(1);
          }
        }
      } catch (const std::exception& e) {
        fail(std::string("get threw: ") + e.what());
      }
      getters_left.fetch_sub(1);
    });
  // Runs body while the getters run, at most `times` times (the writers and the evicter
  // stay under the size at which events.log is rotated, so that it keeps every line).
  auto while_getters_run = [&](int times, auto body) {
    return [&, times, body] {
      try {
        for (int i = 0; i < times && getters_left.load() > 0; ++i) body();
      } catch (const std::exception& e) {
        fail(std::string("threw: ") + e.what());
      }
    };
  };
  threads.emplace_back(while_getters_run(100, [&] {  // store and load one shared key
    const auto res = cache.get(shared[0]);
    gets.fetch_add(1);
    const std::string key = jit::cache_key(shared[0]);
    if (!cache.store(key, *res, &shared[0])) fail("a store failed");
    const auto loaded = cache.load(key, &shared[0]);  // may be evicted, never another kernel
    if (loaded) check(shared[0], *loaded);
  }));
  threads.emplace_back(while_getters_run(1000, [&] {  // list: every file whole, or evicted
    for (const auto& e : cache.list())
      if (!e.valid && e.problem != "missing")
        fail("a listed entry is invalid: " + e.path + ": " + e.problem);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }));
  threads.emplace_back(while_getters_run(40, [&] {  // evict everything, then bound nothing
    cache.set_max_bytes(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    cache.set_max_bytes(uint64_t(256) << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }));
  std::atomic<uint64_t> last_total{0};
  threads.emplace_back(while_getters_run(100000, [&] {  // the counters only grow
    const jit::CacheStats s = cache.stats();
    const uint64_t n = s.memory_hits + s.disk_hits + s.misses;
    if (n < last_total.exchange(n)) fail("the counters went back");
    (void)cache.history();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }));
  for (auto& t : threads) t.join();
  Dispatcher::singleton().set_log_sink(nullptr);

  CHECK_MESSAGE(wrong.size() == 0, "the first wrong: ", wrong.empty() ? "" : wrong.front());
  CHECK(binary_of.size() == shared.size() + kGetters);
  std::map<std::string, int> binaries;  // distinct sources give distinct binaries
  for (const auto& [key, bin] : binary_of) binaries[bin] += 1;
  CHECK(binaries.size() == binary_of.size());
  const jit::CacheStats s = cache.stats();
  MESSAGE(gets.load(), " gets: ", s.memory_hits, " from memory, ", s.disk_hits, " from disk, ",
          s.misses, " compiled; ", s.disk_writes, " writes, ", s.evictions, " evictions");
  CHECK(s.memory_hits + s.disk_hits + s.misses == uint64_t(gets.load()));
  CHECK(s.misses >= binary_of.size());
  CHECK(s.corrupt_files == 0);
  CHECK(s.write_failures == 0);
  CHECK(log_lines.load() == gets.load());
  CHECK(bad_log_lines.load() == 0);
  int64_t recorded = 0, compiles = 0;
  for (const auto& e : cache.history()) {
    recorded += e.kind == jit::CacheEvent::Kind::MemoryHit ||
                e.kind == jit::CacheEvent::Kind::DiskHit ||
                e.kind == jit::CacheEvent::Kind::Compile;
    compiles += e.kind == jit::CacheEvent::Kind::Compile;
  }
  CHECK(recorded == gets.load());
  CHECK(uint64_t(compiles) == s.misses);
  int64_t logged_compiles = 0;  // every process's disk events, appended by eight threads
  for (const auto& e : cache.disk_log())
    logged_compiles += e.kind == jit::CacheEvent::Kind::Compile;
  CHECK(logged_compiles == compiles);
  for (const auto& e : cache.list()) CHECK_MESSAGE(e.valid, e.path, ": ", e.problem);
  for (const auto& f : std::filesystem::directory_iterator(dir.path))
    CHECK_MESSAGE(!f.path().filename().string().starts_with(".tmp-"), f.path());
}

// Two autotuners on one file (two processes), eight threads calling four keys of three
// candidates at once, with a timing that sleeps so the tunings overlap: each tuner times a
// key once (or reads it from the file the other wrote), every call runs that key's fastest
// candidate, and the file read by a third tuner gives every winner without timing.
TEST_CASE("autotune: threads tuning the same keys at once time each key once and agree") {
  ScratchDir dir;
  const std::string file = dir.path + "/autotune.tsv";
  static constexpr int kKeys = 4, kCandidates = 3, kReps = 3, kRounds = 25;
  struct Counts {
    std::atomic<int> timed[kKeys][kCandidates] = {};
    std::atomic<int> ran[kKeys][kCandidates] = {};
  };
  Counts counts[3];
  thread_local int current = -1;
  auto timing = [&](int t) {
    return jit::TuneTiming{.device_tag = [](int) { return std::string("sm_90 Threads GPU"); },
                           .time_ms =
                               [&counts, t](int, const std::function<void()>& run, int reps) {
                                 std::vector<double> ms;
                                 for (int r = 0; r < reps; ++r) {
                                   run();
                                   std::this_thread::sleep_for(std::chrono::microseconds(200));
                                   const int key = current / kCandidates, c = current % kCandidates;
                                   counts[t].timed[key][c] += 1;
                                   // Candidate key % 3 is the fastest of key `key`.
                                   ms.push_back(c == key % kCandidates ? 1.0 : 2.0 + c);
                                 }
                                 return ms;
                               },
                           .busy = [](int) { return false; }};
  };
  auto candidates = [&](int t, int key) {
    std::vector<jit::TuneCandidate> c;
    for (int i = 0; i < kCandidates; ++i)
      c.push_back({fmt::format("variant={}", i), [&counts, t, key, i] {
                     current = key * kCandidates + i;
                     counts[t].ran[key][i] += 1;
                   }});
    return c;
  };
  jit::Autotuner a({.file = file, .warmup = 1, .reps = kReps}, timing(0));
  jit::Autotuner b({.file = file, .warmup = 1, .reps = kReps}, timing(1));
  std::atomic<int> wrong{0}, calls{0}, choice_reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      jit::Autotuner& tuner = t < 6 ? a : b;
      for (int round = 0; round < kRounds; ++round)
        for (int k = 0; k < kKeys; ++k) {
          const int key = (k + t) % kKeys;
          const size_t got =
              tuner.run(fmt::format("threads op S{}", key), candidates(t < 6 ? 0 : 1, key));
          calls += 1;
          if (got != size_t(key % kCandidates)) wrong += 1;
          if (auto c = tuner.choice(fmt::format("threads op S{}", key)); c) {
            choice_reads += 1;
            if (c->index != size_t(key % kCandidates)) wrong += 1;
          }
        }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
  CHECK(calls.load() == 8 * kRounds * kKeys);
  CHECK(choice_reads.load() == calls.load());
  for (int t = 0; t < 2; ++t) {
    const jit::AutotuneStats s = (t == 0 ? a : b).stats();
    CAPTURE(t);
    CHECK(s.tunings + s.disk_hits == uint64_t(kKeys));
    for (int key = 0; key < kKeys; ++key)
      for (int c = 0; c < kCandidates; ++c) {
        // Timed once (kReps calls) or not at all (read from the other tuner's line).
        const int timed = counts[t].timed[key][c].load();
        CHECK((timed == 0 || timed == kReps));
      }
  }
  jit::Autotuner reader({.file = file}, timing(2));
  for (int key = 0; key < kKeys; ++key) {
    CHECK(reader.run(fmt::format("threads op S{}", key), candidates(2, key)) ==
          size_t(key % kCandidates));
    CHECK(reader.choice(fmt::format("threads op S{}", key))->source ==
          jit::TuneChoice::Source::Disk);
  }
  CHECK(reader.stats().timed_runs == 0);
}
