// SPDX-License-Identifier: MIT
// The dispatch explainer: explain_dispatch's structure, its text, MT_TRACE=dispatch:why.
#include <doctest/doctest.h>

#include "dispatcher/dispatcher.h"
#include "dispatcher/library.h"
#include "dispatcher/mode.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

struct WhyCapture {
  std::vector<std::string> lines;
  WhyCapture() {
    Dispatcher::singleton().set_log_sink([this](std::string_view l) { lines.emplace_back(l); });
    Dispatcher::singleton().set_trace_dispatch(true);
    Dispatcher::singleton().set_trace_why(true);
  }
  ~WhyCapture() {
    Dispatcher::singleton().set_trace_why(false);
    Dispatcher::singleton().set_trace_dispatch(false);
    Dispatcher::singleton().set_log_sink(nullptr);
  }
};

Tensor twice(const Tensor& x) { return mul(x, 2.0); }

std::string loc(int line) { return fmt::format("tests/test_explain.cpp:{}", line); }

}  // namespace

TEST_CASE("explain: a requires-grad argument brings Autograd, whose kernel wins") {
  Tensor x = randn({2, 3}, {.requires_grad = true});
  Tensor y = randn({2, 3});
  DispatchExplanation w = explain_dispatch("mt::mul", Stack{x, y});
  CHECK(w.op == "mt::mul");
  CHECK_FALSE(w.redispatch);
  REQUIRE(w.arguments.size() == 2);
  CHECK(w.arguments[0].name == "self");
  CHECK(w.arguments[0].keys == DispatchKeySet{DispatchKey::Autograd, DispatchKey::CPU});
  CHECK(w.arguments[0].sources == std::vector<KeySource>{{DispatchKey::CPU, "device cpu"},
                                                         {DispatchKey::Autograd, "requires_grad"}});
  CHECK(w.arguments[1].keys == DispatchKeySet(DispatchKey::CPU));
  CHECK(w.included.empty());
  CHECK(w.excluded.empty());
  CHECK(w.computed == DispatchKeySet{DispatchKey::Autograd, DispatchKey::CPU});
  REQUIRE(w.winner.has_value());
  CHECK(*w.winner == DispatchKey::Autograd);
  CHECK(w.entry == "kernel");
  CHECK(w.registered_at.starts_with("kernels/ops/"));
  CHECK(w.str().find("  Autograd  kernel      [" + w.registered_at + "]  <- runs\n") !=
        std::string::npos);
}

TEST_CASE("explain: a fake argument brings Fake, above the backends") {
  Tensor f = fake_empty({4});
  DispatchExplanation w = explain_dispatch("mt::exp", Stack{f});
  REQUIRE(w.arguments.size() == 1);
  CHECK(w.arguments[0].sources == std::vector<KeySource>{{DispatchKey::Fake, "fake"}});
  CHECK(w.computed == DispatchKeySet(DispatchKey::Fake));
  CHECK_FALSE(w.cpu_default);
  REQUIRE(w.winner.has_value());
  CHECK(*w.winner == DispatchKey::Fake);
  CHECK(w.entry == "kernel");
}

TEST_CASE("explain: a guard-excluded key is shown with the guard, and does not win") {
  Tensor x = randn({3}, {.requires_grad = true});
  NoGradGuard no_grad;
  DispatchExplanation w = explain_dispatch("mt::exp", Stack{x});
  CHECK(w.from_arguments == DispatchKeySet{DispatchKey::Autograd, DispatchKey::CPU});
  CHECK(w.excluded == DispatchKeySet(DispatchKey::Autograd));
  CHECK(w.excluded_by == std::vector<KeySource>{{DispatchKey::Autograd,
                                                 "NoGradGuard, or an Autograd kernel running the "
                                                 "op below itself"}});
  CHECK(w.computed == DispatchKeySet(DispatchKey::CPU));
  REQUIRE(w.winner.has_value());
  CHECK(*w.winner == DispatchKey::CPU);
}

TEST_CASE("explain: a fallthrough is skipped, and the step says so") {
  Library lib(Library::Kind::Def, "test_explain_ft");
  lib.def("op(Tensor x) -> Tensor");
  const int cpu_line = __LINE__ + 1;
  lib.impl("op", DispatchKey::CPU, twice);
  const int ft_line = __LINE__ + 1;
  lib.impl("op", DispatchKey::Autograd, fallthrough());
  Tensor x = randn({2}, {.requires_grad = true});
  DispatchExplanation w = explain_dispatch("test_explain_ft::op", Stack{x});
  REQUIRE(w.steps.size() == 2);
  CHECK(w.steps[0].key == DispatchKey::Autograd);
  CHECK(w.steps[0].entry == "fallthrough");
  CHECK(w.steps[0].registered_at == loc(ft_line));
  CHECK(w.steps[1].key == DispatchKey::CPU);
  CHECK(w.steps[1].entry == "kernel");
  CHECK(*w.winner == DispatchKey::CPU);
  CHECK(w.registered_at == loc(cpu_line));
  CHECK(w.str().find(fmt::format("  Autograd  fallthrough [{}]  (skipped)\n", loc(ft_line))) !=
        std::string::npos);
}

TEST_CASE("explain: a missing kernel is explained, and the call is the usual error") {
  Library lib(Library::Kind::Def, "test_explain_miss");
  lib.def("op(Tensor x) -> Tensor");
  lib.impl("op", DispatchKey::CPU, twice);
  Tensor f = fake_empty({2});
  DispatchExplanation w = explain_dispatch("test_explain_miss::op", Stack{f});
  CHECK_FALSE(w.winner.has_value());
  CHECK(w.entry == "missing");
  REQUIRE(w.steps.size() == 1);
  CHECK(w.steps[0].key == DispatchKey::Fake);
  CHECK(w.str().find("  Fake      missing: no kernel and no fallback; the call is an error\n") !=
        std::string::npos);
}

TEST_CASE("explain: an op with no kernel at all; dispatch:why then the call's clear error") {
  Library lib(Library::Kind::Def, "test_explain_none");
  lib.def("op(Tensor x) -> Tensor");
  Tensor x = randn({2});
  DispatchExplanation w = explain_dispatch("test_explain_none::op", Stack{x});
  CHECK(w.cpu_default == false);
  CHECK(w.computed == DispatchKeySet(DispatchKey::CPU));
  CHECK_FALSE(w.winner.has_value());
  {
    WhyCapture capture;
    const std::string err = error_of([&] { (void)call<Tensor>("test_explain_none::op", x); });
    CHECK(
        err.starts_with("[test_explain_none::op] Could not run 'test_explain_none::op' with "
                        "arguments from the 'CPU' backend."));
    REQUIRE(!capture.lines.empty());
    CHECK(capture.lines[0].starts_with("why test_explain_none::op (a call)\n"));
    CHECK(capture.lines[0].find("  CPU       missing: no kernel and no fallback; the call is an "
                                "error") != std::string::npos);
  }
  // An op that takes no tensor: CPU is added, and the explanation says why.
  lib.def("nothing(int n) -> Tensor");
  DispatchExplanation n = explain_dispatch("test_explain_none::nothing", Stack{int64_t(3)});
  CHECK(n.cpu_default);
  CHECK(n.str().find("computed: {CPU}  (CPU added: no argument names a backend)") !=
        std::string::npos);
}

TEST_CASE("explain: bad use is a clear error") {
  CHECK(error_of([] {
          (void)explain_dispatch("mt::nope_not_an_op", Stack{});
        }).starts_with("[dispatcher] no operator named 'mt::nope_not_an_op' is registered"));
  CHECK(error_of([] {
          (void)explain_dispatch("mt::exp", Stack{randn({1}), randn({1})});
        }) ==
        "[explain] 'mt::exp' takes 1 arguments but 2 were given; the schema is "
        "mt::exp(Tensor self) -> Tensor");
}

TEST_CASE("MT_TRACE=dispatch:why: each call and redispatch prints its explanation") {
  Tensor x = randn({2}, {.requires_grad = true});
  WhyCapture capture;
  (void)exp(x);
  // The call (Autograd wins), then the Autograd kernel's redispatch below itself.
  std::vector<std::string> whys;
  for (const std::string& l : capture.lines)
    if (l.starts_with("why ")) whys.push_back(l);
  REQUIRE(whys.size() >= 2);
  CHECK(
      whys[0].starts_with("why mt::exp (a call)\n  argument self = Tensor[2] float32 cpu: "
                          "{Autograd, CPU}  (CPU from device cpu; Autograd from requires_grad)\n"));
  CHECK(whys[1].starts_with("why mt::exp (a redispatch: keys from the kernel above)\n"));
  CHECK(whys[1].find("thread-local excluded: {Autograd}  (Autograd from NoGradGuard, or an "
                     "Autograd kernel running the op below itself)") != std::string::npos);
  CHECK(whys[1].find("<- runs") != std::string::npos);
}

namespace {
struct PassMode : DispatchMode {
  void dispatch(const OperatorHandle& op, Stack& stack) override { redispatch(op, stack); }
  std::string name() const override { return "PassMode"; }
};
}  // namespace

TEST_CASE("explain: a key a guard includes: under a ModeGuard the Mode fallback wins") {
  PassMode mode;
  ModeGuard guard(mode);
  DispatchExplanation w = explain_dispatch("mt::exp", Stack{randn({2})});
  CHECK(w.included == DispatchKeySet(DispatchKey::Mode));
  CHECK(w.included_by == std::vector<KeySource>{
                             {DispatchKey::Mode, "ModeGuard (modes, innermost last: 'PassMode')"}});
  CHECK(w.computed == DispatchKeySet{DispatchKey::Mode, DispatchKey::CPU});
  REQUIRE(w.winner.has_value());
  CHECK(*w.winner == DispatchKey::Mode);
  CHECK(w.entry == "fallback");
  CHECK(w.registered_at.starts_with("dispatcher/mode.cpp:"));
}
