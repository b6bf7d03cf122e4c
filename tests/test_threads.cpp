// SPDX-License-Identifier: MIT
// Threads: every public call path of the dispatcher and autograd while other threads
// register and drop ops (issues #16 and #23). This file uses only the runtime, the
// dispatcher and autograd, with ops of its own, so that CI can also build it with
// ThreadSanitizer against those three layers alone (tests/meson.build, 'threads (tsan)'),
// without a sanitized build of the whole library. MT_STRESS_SECONDS=10 runs the stress
// test for at least that long (default: 300 rounds of registrations).
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "dispatcher/library.h"
#include "runtime/tensor.h"
#include "runtime/view.h"

using namespace mt;

#ifdef MT_TESTS_CORE_ONLY
// The ThreadSanitizer build of this file links the runtime, dispatcher and autograd only:
// the library's initialization there installs the Autograd and Trace fallbacks and no
// built-in op (Note [Library initialization]).
namespace mt::detail {
void install_autograd_fallback();
void install_trace_fallback();
void initialize_library() {
  install_autograd_fallback();
  install_trace_fallback();
}
}  // namespace mt::detail

// The Tensor methods the three layers call that the kernels layer defines (as ops there),
// as plain runtime code: enough for this file, which uses CPU tensors only.
namespace mt {
namespace {
Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = empty(t.sizes(), {.dtype = dtype, .device = t.device()});
  detail::copy_impl(out, t);
  return out;
}
}  // namespace
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : converted(*this, dtype()); }
Tensor Tensor::clone() const { return converted(*this, dtype()); }
Tensor Tensor::to(DType t) const { return t == dtype() ? *this : converted(*this, t); }
Tensor Tensor::to(Device d) const {
  MT_CHECK(d == device(), "[to] the core-only test build copies no tensor between devices");
  return *this;
}
Tensor Tensor::view(const Shape& shape) const { return detail::view_of(*this, shape); }
Tensor Tensor::select(int64_t dim, int64_t index) const {
  return detail::select_of(*this, dim, index);
}
const Tensor& Tensor::fill_(double value) const {
  detail::fill_impl(*this, value);
  return *this;
}
}  // namespace mt
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

// The op that is defined and dropped, as a user's Library: its kernel returns 3s.
std::unique_ptr<Library> define_dyn() {
  auto l = std::make_unique<Library>(Library::Kind::Def, "test_threads_dyn");
  l->def("op(Tensor x) -> Tensor");
  l->impl("op", DispatchKey::CPU, [](const Tensor& x) { return full_like(x, 3); });
  return l;
}

}  // namespace

// Every public call path while one thread defines and drops ops (Note [Schema
// publication] and Note [Dispatch table publication] in dispatcher/dispatcher.cpp): a
// typed handle of a stable op whose CPU kernel is overridden and restored, by-name calls,
// boxed calls and typed calls through handles that outlive their op, dump, the Trace
// key's fallback, MT_TRACE=dispatch logging, and forward and backward of a custom op with
// an autograd formula. Each call returns the right value or a clear mt::Error naming the
// op. tools/dev.sh test --tsan and CI's 'threads (tsan)' run it under ThreadSanitizer.
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
  const std::initializer_list<std::string_view> dyn_errors = {
      "[test_threads_dyn::op] ", "[dispatcher] no operator named 'test_threads_dyn::op'"};

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
      for (std::string_view op :
           {"test_threads::op ", "test_threads::twice ", "test_threads_dyn::op ", "mt::"})
        ok = ok || (l.starts_with(kind) && l.substr(kind.size()).starts_with(op));
    if (!ok && bad_trace_lines.fetch_add(1) == 0) first_bad_line = l;
  });

  std::atomic<bool> stop{false};
  const char* names[] = {"typed", "by name", "boxed",   "dropped handle",
                         "dump",  "trace",   "autograd"};
  std::array<Outcomes, 7> out;
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
      [&] {  // forward and backward on this thread's own tape
        out[6].run(
            [&] {
              Tensor x = full({3}, 1.5, {.requires_grad = true});
              Tensor y = twice(x);
              backward(y, ones_like(y));
              return all_equal(y, 3, 3) && x.grad().defined() && all_equal(x.grad(), 3, 2);
            },
            {});
      },
  };
  std::vector<std::thread> threads;
  for (auto& caller : callers) {
    threads.emplace_back([&] {
      while (!stop.load()) caller();
    });
  }
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
  MESSAGE(rounds, " rounds of registrations, ", total() - before, " calls during them");
  CHECK(trace_lines.load() > 0);
  CHECK_MESSAGE(bad_trace_lines.load() == 0, "the first: ", first_bad_line);
  // dyn is dropped now: its old handles say so, by every path.
  const std::string dropped = "[test_threads_dyn::op] this op was dropped";
  CHECK(error_text([&] { dyn_typed(zeros({1})); }).starts_with(dropped));
  Stack s{zeros({1})};
  CHECK(error_text([&] { dyn.call_boxed(&s); }).starts_with(dropped));
  CHECK(error_text([&] { dyn.typed<Tensor(const Tensor&)>(); }).starts_with(dropped));
  CHECK(error_text([&] { dyn.schema(); }).starts_with(dropped));
  CHECK(error_text([&] {
          call<Tensor>("test_threads_dyn::op", zeros({1}));
        }).starts_with("[dispatcher] no operator named 'test_threads_dyn::op' is registered"));
}
