// SPDX-License-Identifier: MIT
// User dispatch modes: counting, replacing, nesting, under Autograd, Fake and mt::compile,
// errors and misuse, rules, FlopCounterMode and DebugMode.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "dispatcher/library.h"
#include "dispatcher/mode.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

// Records each op it sees, then runs it.
struct CountingMode : DispatchMode {
  std::string tag;
  std::vector<std::string>* log;
  CountingMode(std::string t, std::vector<std::string>* l) : tag(std::move(t)), log(l) {}
  void dispatch(const OperatorHandle& op, Stack& stack) override {
    log->push_back(tag + ":" + op.name().str());
    redispatch(op, stack);
  }
  std::string name() const override { return "CountingMode(" + tag + ")"; }
};

// Replaces mt::exp by x * 0 (an op call of its own); runs every other op.
struct NoExpMode : DispatchMode {
  void dispatch(const OperatorHandle& op, Stack& stack) override {
    if (op.name().str() == "mt::exp") {
      Tensor x = stack[0].to_tensor();
      stack.clear();
      stack.emplace_back(mul(x, 0.0));
      return;
    }
    redispatch(op, stack);
  }
};

struct ThrowingMode : DispatchMode {
  void dispatch(const OperatorHandle&, Stack&) override { throw std::runtime_error("boom"); }
  std::string name() const override { return "ThrowingMode"; }
};

int64_t count(const std::vector<std::string>& log, const std::string& what) {
  return std::count(log.begin(), log.end(), what);
}

}  // namespace

TEST_CASE("modes: a mode that counts sees each call once and leaves its result unchanged") {
  std::vector<std::string> log;
  CountingMode counter("c", &log);
  Tensor x = from_vector<float>({1, 2, 3});
  Tensor y;
  CHECK(local_dispatch_keys().included.has(DispatchKey::Mode) == false);
  {
    ModeGuard guard(counter);
    CHECK(local_dispatch_keys().included.has(DispatchKey::Mode));
    CHECK(active_modes() == std::vector<std::string>{"CountingMode(c)"});
    y = add(mul(x, 2.0), x);
  }
  CHECK(local_dispatch_keys().included.has(DispatchKey::Mode) == false);
  CHECK(active_modes().empty());
  CHECK(y.to_vector<float>() == std::vector<float>{3, 6, 9});
  CHECK(log == std::vector<std::string>{"c:mt::mul.Scalar", "c:mt::add"});
  (void)add(x, x);  // after the guard: not seen
  CHECK(log.size() == 2);
}

TEST_CASE("modes: a mode that replaces an op; a rule for one op under one mode type") {
  NoExpMode mode;
  Tensor x = from_vector<float>({1, 2});
  {
    ModeGuard guard(mode);
    CHECK(exp(x).to_vector<float>() == std::vector<float>{0, 0});
    CHECK(neg(x).to_vector<float>() == std::vector<float>{-1, -2});
    ModeRule rule = register_dispatch_mode_rule<NoExpMode>(
        "mt::neg", [](NoExpMode&, const OperatorHandle&, Stack& stack) {
          Tensor in = stack[0].to_tensor();
          stack.clear();
          stack.emplace_back(full_like(in, 7));
        });
    CHECK(neg(x).to_vector<float>() == std::vector<float>{7, 7});
    rule.reset();
    CHECK(neg(x).to_vector<float>() == std::vector<float>{-1, -2});
  }
  CHECK(exp(x).to_vector<float>()[0] == doctest::Approx(2.7182817));
  CHECK(error_of([] {
          (void)register_dispatch_mode_rule<NoExpMode>(
              "mt::nope_op", [](NoExpMode&, const OperatorHandle&, Stack&) {});
        }).starts_with("[dispatcher] no operator named 'mt::nope_op' is registered"));
}

TEST_CASE("modes: nested modes run innermost first; the outer one sees what the inner one calls") {
  std::vector<std::string> log;
  CountingMode outer("outer", &log), inner("inner", &log);
  NoExpMode no_exp;
  Tensor x = from_vector<float>({1, 2});
  {
    ModeGuard a(outer);
    ModeGuard b(inner);
    CHECK(active_modes() == std::vector<std::string>{"CountingMode(outer)", "CountingMode(inner)"});
    (void)add(x, x);
  }
  CHECK(log == std::vector<std::string>{"inner:mt::add", "outer:mt::add"});
  log.clear();
  {
    ModeGuard a(outer);
    ModeGuard b(no_exp);  // replaces exp by x * 0: the outer mode sees that call instead
    CHECK(exp(x).to_vector<float>() == std::vector<float>{0, 0});
  }
  CHECK(log == std::vector<std::string>{"outer:mt::mul.Scalar"});
}

TEST_CASE("modes: under Autograd a mode sees each forward op once and the backward's ops") {
  std::vector<std::string> log;
  CountingMode counter("c", &log);
  Tensor x = from_vector<float>({1, 2, 3}).requires_grad_();
  {
    ModeGuard guard(counter);
    Tensor y = sum(mul(x, x));
    CHECK(log == std::vector<std::string>{"c:mt::mul", "c:mt::sum"});
    log.clear();
    backward(y);
  }
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(count(log, "c:mt::mul") >= 2);  // mul's backward: g * x twice
  CHECK_FALSE(log.empty());
}

TEST_CASE("modes: with fake tensors the mode sees the call and the Fake kernel runs") {
  std::vector<std::string> log;
  CountingMode counter("c", &log);
  Tensor f = fake_empty({2, 3});
  ModeGuard guard(counter);
  Tensor y = exp(f);
  CHECK(y.is_fake());
  CHECK(y.sizes() == Shape{2, 3});
  CHECK(log == std::vector<std::string>{"c:mt::exp"});
}

TEST_CASE("modes: mt::capture refuses a mode; a compiled function runs eagerly under one") {
  std::vector<std::string> log;
  CountingMode counter("c", &log);
  GraphFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(exp(in[0]), 2.0)};
  };
  Compiled c = mt::compile(fn);
  Tensor x = from_vector<float>({0, 1});
  const std::vector<float> eager = fn({x})[0].to_vector<float>();
  CHECK(c({x})[0].to_vector<float>() == eager);  // compiled (outside the mode)
  ModeGuard guard(counter);
  CHECK(c({x})[0].to_vector<float>() == eager);
  CHECK(log == std::vector<std::string>{"c:mt::exp", "c:mt::mul.Scalar"});
  CHECK(error_of([&] { (void)capture(fn, {x}); }) ==
        "[compile] mt::capture was called under the dispatch mode 'CountingMode(c)'; a mode may "
        "change what ops compute and a replay does not reach it, so capture outside the "
        "ModeGuard (a compiled function called under a mode runs eagerly instead)");
}

TEST_CASE("modes: a mode that throws: the error names the mode and the op; the stack is restored") {
  std::vector<std::string> log;
  CountingMode outer("outer", &log);
  ThrowingMode thrower;
  Tensor x = from_vector<float>({1});
  ModeGuard a(outer);
  {
    ModeGuard b(thrower);
    CHECK(error_of([&] { (void)exp(x); }) ==
          "[mode] the dispatch mode 'ThrowingMode' failed while handling 'mt::exp': boom");
    CHECK(active_modes() == std::vector<std::string>{"CountingMode(outer)", "ThrowingMode"});
  }
  CHECK(active_modes() == std::vector<std::string>{"CountingMode(outer)"});
  // A kernel's own error passes through a mode unchanged.
  const std::string plain = "[add] shapes [2] and [3] cannot be broadcast";
  const std::string err = error_of([] { (void)add(zeros({2}), zeros({3})); });
  CHECK(err.starts_with("[add]"));
  CHECK(err.find("[mode]") == std::string::npos);
}

TEST_CASE(
    "modes: guards destroyed out of order or on another thread are clear errors, no stuck mode") {
  std::vector<std::string> log;
  CountingMode m1("m1", &log), m2("m2", &log), m3("m3", &log);
  std::vector<std::string> sink;
  struct SinkGuard {
    explicit SinkGuard(std::vector<std::string>* s) {
      Dispatcher::singleton().set_log_sink([s](std::string_view l) { s->emplace_back(l); });
    }
    ~SinkGuard() { Dispatcher::singleton().set_log_sink(nullptr); }
  } sink_guard(&sink);
  {
    auto a = std::make_unique<ModeGuard>(m1);
    auto b = std::make_unique<ModeGuard>(m2);
    a.reset();  // out of order: m1 leaves the stack, the error waits
    CHECK(active_modes() == std::vector<std::string>{"CountingMode(m2)"});
    const std::string want =
        "[mode] the ModeGuard of mode 'CountingMode(m1)' was destroyed before the guard of mode "
        "'CountingMode(m2)' pushed after it; destroy ModeGuards on the thread that made them, "
        "innermost first (make them locals of nested scopes); the mode was taken off the stack";
    REQUIRE(sink.size() == 1);
    CHECK(sink[0] == want);
    CHECK(error_of([&] { ModeGuard c(m3); }) == want);
    CHECK(error_of([] { check_mode_stack(); }) == "(no error)");  // thrown once
    b.reset();
    CHECK(active_modes().empty());
  }
  {
    auto g = std::make_unique<ModeGuard>(m1);
    std::thread([&] { g.reset(); }).join();  // destroyed on another thread
    CHECK(error_of([] { check_mode_stack(); }) ==
          "[mode] the ModeGuard of mode 'CountingMode(m1)' was destroyed on another thread; "
          "destroy ModeGuards on the thread that made them, innermost first (make them locals of "
          "nested scopes); the mode was taken off the stack");
    CHECK(active_modes().empty());
    CHECK_FALSE(local_dispatch_keys().included.has(DispatchKey::Mode));
  }
}

TEST_CASE("modes: are thread-local") {
  std::vector<std::string> log;
  CountingMode counter("c", &log);
  ModeGuard guard(counter);
  std::thread([] { (void)add(zeros({2}), zeros({2})); }).join();
  CHECK(log.empty());
}

TEST_CASE("FlopCounterMode: the 64/32/64 MLP step's FLOPs, counted by hand") {
  // y = silu(x W1 + b1) W2 + b2 with x [64, 32], W1 [32, 64], W2 [64, 4]; mse_loss; backward.
  Tensor x = randn({64, 32}), target = randn({64, 4});
  Tensor w1 = randn({32, 64}).requires_grad_(), b1 = zeros({64}).requires_grad_();
  Tensor w2 = randn({64, 4}).requires_grad_(), b2 = zeros({4}).requires_grad_();
  FlopCounterMode flops;
  {
    ModeGuard guard(flops);
    Tensor h, loss;
    {
      FlopCounterMode::Scope s(flops, "forward");
      h = silu(add(matmul(x, w1), b1));
      loss = mse_loss(add(matmul(h, w2), b2), target);
    }
    FlopCounterMode::Scope s(flops, "backward");
    backward(loss);
  }
  using Counts = std::map<std::string, int64_t>;
  // Forward: matmuls 2*64*32*64 (x W1) + 2*64*64*4 (h W2); one FLOP an output element for
  // add (64*64 and 64*4) and silu (64*64); mse_loss has no formula.
  const Counts fwd = {{"mt::matmul", 2 * 64 * 32 * 64 + 2 * 64 * 64 * 4},
                      {"mt::add", 64 * 64 + 64 * 4},
                      {"mt::silu", 64 * 64}};
  CHECK(flops.by_op("forward") == fwd);
  // Backward: matmuls h^T g [64,64]x[64,4] and g W2^T [64,4]x[4,64], then x^T g1
  // [32,64]x[64,64] for W1 (x does not require grad, so no g1 W1^T); silu_backward 64*64;
  // mse_loss's formula 2 (y - t) / n * g: g * (2/n) on the scalar (1), y - t (64*4), their
  // product (64*4). The bias gradients' sum_to, the transposes and reshapes have no formula.
  const Counts bwd = {{"mt::matmul", 2 * 64 * 64 * 4 + 2 * 64 * 4 * 64 + 2 * 32 * 64 * 64},
                      {"mt::silu_backward", 64 * 64},
                      {"mt::mul.Scalar", 1},
                      {"mt::sub", 64 * 4},
                      {"mt::mul", 64 * 4}};
  CHECK(flops.by_op("backward") == bwd);
  // The whole step, written out: 294,912 + 4,352 + 4,096 forward, 327,680 + 4,096 + 1 + 256
  // + 256 backward.
  CHECK(flops.total() == 635649);
  CHECK(flops.uncounted() ==
        Counts{{"mt::mse_loss", 1}, {"mt::reshape", 2}, {"mt::sum_to", 2}, {"mt::transpose", 3}});
  const std::string table = flops.table();
  CHECK(table.find("Global                   (total)                         635,649\n") !=
        std::string::npos);
  CHECK(table.find("no formula (0 FLOPs): mt::mse_loss (1x), mt::reshape (2x), mt::sum_to (2x), "
                   "mt::transpose (3x)") != std::string::npos);
}

TEST_CASE("FlopCounterMode: an attention-like op registers its formula") {
  Library lib(Library::Kind::Def, "test_flops");
  lib.def("attn(Tensor q, Tensor k, Tensor v) -> Tensor");
  lib.impl("attn", DispatchKey::CPU, [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return matmul(softmax(matmul(q, k.transpose(0, 1)), -1), v);
  });
  // q, k, v [s, d]: q k^T is 2*s*s*d, p v is 2*s*s*d (softmax not counted here).
  register_flop_formula("test_flops::attn", [](const Stack& args, const Stack&) {
    const Tensor& q = args[0].to_tensor();
    return 4 * q.size(0) * q.size(0) * q.size(1);
  });
  FlopCounterMode flops;
  Tensor q = randn({8, 16}), k = randn({8, 16}), v = randn({8, 16});
  {
    ModeGuard guard(flops);
    (void)call<Tensor>("test_flops::attn", q, k, v);
  }
  CHECK(flops.by_op().at("test_flops::attn") == 4 * 8 * 8 * 16);
  CHECK(flops.total() == 4 * 8 * 8 * 16);  // the kernel's own matmuls run below the mode
}

TEST_CASE("DebugMode: one line per op with shapes, dtypes and a content hash") {
  Tensor a = from_vector<float>({1, 2, 3}), b = from_vector<float>({1, 2, 3});
  DebugMode debug;
  {
    ModeGuard guard(debug);
    (void)add(a, b);
    (void)mul(a, 3.0);
  }
  REQUIRE(debug.lines().size() == 2);
  const std::string h = content_hash(a);
  CHECK(h.size() == 16);
  CHECK(content_hash(b) == h);                              // same values, same hash
  CHECK(content_hash(from_vector<float>({1, 2, 4})) != h);  // one value differs
  CHECK(content_hash(a.to(DType::Float64)) != h);           // same values, other bytes
  CHECK(debug.lines()[0] == fmt::format("mt::add(self=float32[3] cpu #{0}, other=float32[3] cpu "
                                        "#{0}, alpha=1) -> float32[3] cpu #{1}",
                                        h, content_hash(from_vector<float>({2, 4, 6}))));
  CHECK(debug.lines()[1].starts_with(
      fmt::format("mt::mul.Scalar(self=float32[3] cpu #{}, other=3) -> ", h)));
  // A strided view hashes its values, not its storage.
  Tensor m = from_vector<float>({1, 2, 3, 4}).view({2, 2});
  CHECK(content_hash(m.transpose(0, 1)) == content_hash(from_vector<float>({1, 3, 2, 4})));
  CHECK(content_hash(fake_empty({2})) == "fake");
}
