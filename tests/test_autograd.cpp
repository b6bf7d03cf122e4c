// SPDX-License-Identifier: MIT
// Tape autograd, fake tensors, the custom_op / register_fake / register_autograd flow,
// gradcheck and opcheck, and the tutorial's pitfalls with their exact messages.
#include <doctest/doctest.h>

#include <cmath>
#include <thread>

#include "minitensor.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

// The tutorial's kernel, by hand on the CPU: reads through strides, so a transposed
// or sliced input gives the right answer (the tutorial's .contiguous() pitfall).
Tensor silu_cpu(const Tensor& x) {
  Tensor out = empty(x.sizes(), {.dtype = x.dtype()});
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      Tensor xc = x.contiguous();
      const T* in = xc.template data_ptr<T>();
      T* o = out.template data_ptr<T>();
      for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] / (T(1) + std::exp(-in[i]));
    } else {
      MT_ERROR("[triton_demo::silu] supports float32 and float64, got {}", x.dtype());
    }
  });
  return out;
}

Tensor silu_backward_formula(AutogradContext& ctx, const Tensor& grad) {
  Tensor x = ctx.saved()[0];
  Tensor s = sigmoid(x);
  return mul(grad, mul(s, add(mul(x, sub(ones_like(s), s)), 1.0)));
}

void silu_setup(AutogradContext& ctx, const Tensor& x, const Tensor&) {
  ctx.save_for_backward({x});
}

auto make_silu() {
  auto op = custom_op("triton_demo::silu", silu_cpu);
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  op.register_autograd(silu_backward_formula, silu_setup);
  return op;
}

std::vector<double> reference_silu(const std::vector<double>& x) {
  std::vector<double> y;
  for (double v : x) y.push_back(v / (1 + std::exp(-v)));
  return y;
}

}  // namespace

TEST_CASE(
    "the tutorial's flow: custom_op, register_fake, register_autograd, check, gradcheck, opcheck") {
  auto silu = make_silu();
  CHECK(silu.schema().str() == "triton_demo::silu(Tensor _0) -> Tensor");
  manual_seed(0);
  Tensor x = randn({4, 5});
  x.requires_grad_();
  Tensor y = silu(x);
  CHECK(max_abs_diff(y, from_vector<double>(reference_silu(x.to_vector<double>()), {4, 5})) < 1e-5);
  CHECK(max_abs_diff(y, mt::silu(x)) < 1e-5);

  backward(sum(y));
  Tensor x2 = x.detach().clone();
  x2.requires_grad_();
  backward(sum(mt::silu(x2)));
  CHECK(max_abs_diff(x.grad(), x2.grad()) < 1e-5);

  Tensor xd = randn({3, 2}, {.dtype = DType::Float64, .requires_grad = true});
  GradcheckResult gc = gradcheck([&](const std::vector<Tensor>& in) { return silu(in[0]); }, {xd});
  CHECK_MESSAGE(gc.ok, gc.message);

  OpCheckReport report = opcheck(silu.handle(), {Stack{randn({3, 4})}, Stack{randn({5})}});
  CHECK_MESSAGE(report.ok(), report.str());
  CHECK(report.tests.size() == 5);
}

TEST_CASE("pitfall 1: without register_fake, fake tensors get a message saying how to add one") {
  auto op = custom_op("triton_demo::silu_nofake", silu_cpu);
  std::string msg;
  try {
    op(fake_empty({8}));
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(
      msg.starts_with("[triton_demo::silu_nofake] 'triton_demo::silu_nofake' has no Fake "
                      "kernel; register one with register_fake"));
  OpCheckReport r = opcheck(op.handle(), {Stack{randn({3})}});
  CHECK_FALSE(r.ok());
  CHECK_FALSE(r.find("test_faketensor")->passed);
}

TEST_CASE(
    "pitfall 2: a namespace written with an underscore is refused with the namespace::op form") {
  CHECK_THROWS_WITH_AS(custom_op("triton_demo_silu", silu_cpu),
                       "[schema] invalid operator name 'triton_demo_silu' (it has no namespace); "
                       "operator names have the form 'namespace::op_name' (for example "
                       "'triton_demo::silu'), where both parts are identifiers (letters, digits, "
                       "underscores, not starting with a digit); did you mean 'triton_demo::silu'?",
                       Error);
  CHECK_THROWS_AS(custom_op("triton-demo::silu", silu_cpu), Error);
  CHECK_THROWS_AS(call<Tensor>("triton_demo_silu", zeros({1})), Error);
}

TEST_CASE("pitfall 3: non-contiguous inputs (transposed, sliced) give correct results") {
  auto silu = make_silu();
  Tensor base = randn({6, 8}, {.dtype = DType::Float64});
  Tensor t = base.t();
  Tensor s = base.slice(1, 1, 8, 3);
  CHECK_FALSE(t.is_contiguous());
  CHECK_FALSE(s.is_contiguous());
  for (const Tensor& v : {t, s}) {
    Tensor want = from_vector<double>(reference_silu(v.to_vector<double>()), v.sizes());
    CHECK(max_abs_diff(silu(v), want) < 1e-12);
    CHECK(max_abs_diff(mt::silu(v), want) < 1e-12);
  }
}

TEST_CASE("pitfall 4: a wrong backward formula runs, and gradcheck catches it") {
  auto op = custom_op("triton_demo::silu_wrong", silu_cpu);
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        return mul(g, sigmoid(ctx.saved()[0]));
      },  // forgot the x*s*(1-s) term
      silu_setup);
  Tensor x = from_vector<double>({0.5, -1.0, 2.0});
  x.requires_grad_();
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
  CHECK_FALSE(r.ok);
  CHECK(
      r.message.starts_with("[gradcheck] Jacobian mismatch for output 0 with respect to input 0"));
  OpCheckReport report = opcheck(op.handle(), {Stack{from_vector<float>({0.5f, -1.0f})}});
  CHECK_FALSE(report.find("test_gradcheck")->passed);
  CHECK(report.find("test_autograd_registration")->passed);
}

TEST_CASE("pitfall 5: a kernel called without registration is not an op") {
  CHECK_THROWS_WITH_AS(
      call<Tensor>("triton_demo::never_registered", zeros({1})),
      "[dispatcher] no operator named 'triton_demo::never_registered' is "
      "registered; define it with mt::custom_op(\"triton_demo::never_registered\", "
      "fn) or MT_LIBRARY (run `minitensor ops` to list the ops)",
      Error);
}

TEST_CASE("a kernel without autograd: its gradient is an error at backward naming the op") {
  auto op = custom_op("triton_demo::silu_noautograd", silu_cpu);
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  Tensor x = ones({3}, {.requires_grad = true});
  Tensor y = op(x);
  CHECK(y.requires_grad());
  CHECK_THROWS_WITH_AS(backward(sum(y)),
                       "[backward] 'triton_demo::silu_noautograd' has no autograd formula, but an "
                       "input of it requires grad, so its gradient is unknown. Register one with "
                       "register_autograd(backward, setup_context) on the custom op (or an "
                       "MT_LIBRARY_IMPL(ns, Autograd, m) kernel)",
                       Error);
  OpCheckReport r = opcheck(op.handle(), {Stack{randn({2})}});
  CHECK_FALSE(r.find("test_autograd_registration")->passed);
}

TEST_CASE("backward: a fresh leaf gradient becomes .grad without a copy, shared ones are copied") {
  Tensor x = from_vector<float>({1, 2, 3}).requires_grad_();
  backward(sum(mul(x, 3.0)));  // mul.Scalar's backward makes a fresh g * 3: stolen
  Tensor g1 = x.grad();
  CHECK(g1.to_vector<float>() == std::vector<float>{3, 3, 3});
  // The next backward accumulates into a new tensor: the first .grad handle keeps its values.
  backward(sum(mul(x, 3.0)));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 6, 6});
  CHECK(g1.to_vector<float>() == std::vector<float>{3, 3, 3});

  // The caller's grad_output is never stolen: changing it later leaves .grad alone.
  Tensor y = from_vector<float>({1, 2}).requires_grad_();
  Tensor go = from_vector<float>({5, 7});
  backward(y, go);
  CHECK(y.grad().storage() != go.storage());
  go.fill_(0);
  CHECK(y.grad().to_vector<float>() == std::vector<float>{5, 7});

  // add's backward hands the same gradient to both inputs: it must not be stolen for one.
  Tensor z = from_vector<float>({1, 1}).requires_grad_();
  Tensor w = from_vector<float>({2, 2}).requires_grad_();
  backward(sum(add(z, w)));
  CHECK(z.grad().storage() != w.grad().storage());
  z.grad().fill_(9);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("custom_op: declared mutations bump versions; undeclared aliasing is refused") {
  auto scale_ = custom_op("triton_demo::scale_",
                          [](const Tensor& x, double a) {
                            auto p = x.data_ptr<float>();
                            for (int64_t i = 0; i < x.numel(); ++i) p[i] *= float(a);
                          },
                          {.mutates_args = {"_0"}});
  CHECK(scale_.schema().str() == "triton_demo::scale_(Tensor(a0!) _0, float _1) -> ()");
  Tensor x = ones({2});
  uint32_t v = x.version();
  scale_(x, 3.0);
  CHECK(x.version() == v + 1);
  CHECK(x.to_vector<float>() == std::vector<float>{3, 3});
  CHECK(opcheck(scale_.handle(), {Stack{ones({2}), 2.0}}).find("test_schema")->passed);

  auto sneaky = custom_op("triton_demo::sneaky", [](const Tensor& x) {
    x.data_ptr<float>()[0] = 42;  // writes its input without declaring it
    return x.clone();
  });
  sneaky.register_fake([](const Tensor& x) { return empty_like(x); });
  OpCheckReport r = opcheck(sneaky.handle(), {Stack{ones({2})}});
  CHECK_FALSE(r.find("test_schema")->passed);
  CHECK(r.find("test_schema")->message.find("does not declare it mutated") != std::string::npos);

  auto alias = custom_op("triton_demo::alias", [](const Tensor& x) { return x.view({-1}); });
  CHECK_THROWS_WITH_AS(
      alias(ones({2, 2})),
      "[custom_op] 'triton_demo::alias' returned a tensor that shares memory with "
      "its input 0 (output 0), but the schema triton_demo::alias(Tensor _0) -> "
      "Tensor declares no alias. Return a fresh tensor (for example x.clone()), or "
      "declare the alias with Tensor(a) in an explicit schema",
      Error);
  auto bump = custom_op("triton_demo::bump_", [](const Tensor& x) { return x.clone(); },
                        {.mutates_args = {"_0"}});
  auto register_on_mutating = [&] {
    bump.register_autograd([](AutogradContext&, const Tensor& g) { return g; },
                           [](AutogradContext&, const Tensor&, const Tensor&) {});
  };
  CHECK_THROWS_WITH_AS(
      register_on_mutating(),
      "[register_autograd] 'triton_demo::bump_' mutates its inputs "
      "(triton_demo::bump_(Tensor(a0!) _0) -> Tensor); autograd formulas can only "
      "be registered for functional ops: return a new tensor instead of writing to "
      "an input",
      Error);
}

TEST_CASE("opcheck catches a fake kernel of the wrong shape") {
  auto op = custom_op("triton_demo::silu_badfake", silu_cpu);
  op.register_fake([](const Tensor& x) { return empty({x.numel() + 1}); });
  op.register_autograd(silu_backward_formula, silu_setup);
  OpCheckReport r = opcheck(op.handle(), {Stack{randn({3})}});
  CHECK_FALSE(r.find("test_faketensor")->passed);
  CHECK(r.find("test_faketensor")->message ==
        "sample 0: fake output 0 has shape [4] but the real output has [3]");
}

TEST_CASE("autograd: a tensor used twice sums both contributions") {
  Tensor x = from_vector<double>({1, 2, 3});
  x.requires_grad_();
  backward(sum(mul(x, x)));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  backward(sum(x));  // leaves accumulate
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 5, 7});
  zero_grad({x});
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: grad() with unused inputs, non-scalar outputs, and no grad anywhere") {
  Tensor a = ones({2}, {.requires_grad = true});
  Tensor b = ones({2}, {.requires_grad = true});
  Tensor y = mul(a, 3.0);
  CHECK_THROWS_WITH_AS(grad({sum(y)}, {a, b}, {}, {.retain_graph = true}),
                       "[grad] input 1 was not used to compute the outputs, so it has no gradient; "
                       "pass allow_unused=true to get an undefined Tensor for it instead",
                       Error);
  auto g = grad({sum(y)}, {a, b}, {}, {.retain_graph = true, .allow_unused = true});
  CHECK(g[0].to_vector<float>() == std::vector<float>{3, 3});
  CHECK_FALSE(g[1].defined());
  CHECK_FALSE(a.grad().defined());  // grad() leaves .grad alone
  CHECK_THROWS_WITH_AS(backward(y),
                       "[backward] grad can be created implicitly only for scalar outputs, but "
                       "this output has shape [2]; pass grad_output (for example "
                       "mt::ones_like(out)) or reduce it first (mt::sum)",
                       Error);
  backward(y, from_vector<float>({1, 2}));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{3, 6});
  CHECK_THROWS_AS(backward(sum(ones({2}))), Error);
}

TEST_CASE("autograd: a second backward over freed entries says so; retain_graph keeps them") {
  Tensor x = ones({2}, {.requires_grad = true});
  Tensor loss = sum(mul(x, x));
  backward(loss, {}, /*retain_graph=*/true);
  backward(loss);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 4});
  std::string msg;
  try {
    backward(loss);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(
      msg.starts_with("[backward] trying to go backward through the graph a second time: the "
                      "tape entry of 'mt::"));
  CHECK(msg.find("Pass retain_graph=true") != std::string::npos);
}

TEST_CASE("autograd: an in-place change to a saved tensor is caught by its version counter") {
  Tensor x = from_vector<float>({1, 2}, {2});
  x.requires_grad_();
  Tensor h = mul(x, 2.0);
  Tensor y = mt::silu(h);  // saves h
  {
    NoGradGuard no_grad;
    add_(h, ones({2}));  // changes h after silu saved it
  }
  CHECK_THROWS_WITH_AS(backward(sum(y)),
                       "[backward] a tensor that 'mt::silu' saved for backward was modified by an "
                       "in-place operation: it was at version 0 when saved and is at version 1 "
                       "now. The gradient needs the old values; use an out-of-place op instead, or "
                       ".clone() the tensor before changing it in place",
                       Error);
}

TEST_CASE("autograd: in-place ops on tensors that need grad are refused while recording") {
  Tensor w = ones({2}, {.requires_grad = true});
  std::string msg;
  try {
    add_(w, ones({2}));
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(
      msg.starts_with("[autograd] 'mt::add_' modifies its inputs in place, and one of them "
                      "requires grad"));
  NoGradGuard no_grad;  // an optimizer step
  add_(w, ones({2}), -0.5);
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
}

TEST_CASE("grad mode: no_grad records nothing; enable_grad turns it back on") {
  Tensor x = ones({2}, {.requires_grad = true});
  {
    NoGradGuard g;
    CHECK_FALSE(grad_enabled());
    Tensor y = mul(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    {
      EnableGradGuard e;
      CHECK(grad_enabled());
      CHECK(mul(x, 2.0).requires_grad());
    }
  }
  CHECK(grad_enabled());
  Tensor d = mul(x, 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
}

TEST_CASE("autograd: create_graph gives higher-order gradients") {
  Tensor x = from_vector<double>({2.0});
  x.requires_grad_();
  Tensor y = mul(mul(x, x), x);  // x^3
  auto g1 = grad({y}, {x}, {}, {.create_graph = true});
  CHECK(g1[0].item<double>() == doctest::Approx(12.0));  // 3x^2
  auto g2 = grad({g1[0]}, {x}, {}, {.create_graph = true});
  CHECK(g2[0].item<double>() == doctest::Approx(12.0));  // 6x
  auto g3 = grad({g2[0]}, {x});
  CHECK(g3[0].item<double>() == doctest::Approx(6.0));
  Tensor z = from_vector<double>({0.3, -1.2});
  z.requires_grad_();
  GradcheckResult r =
      gradgradcheck([](const std::vector<Tensor>& in) { return mt::silu(in[0]); }, {z});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("autograd: independent graphs on one tape, and one tape per thread") {
  Tensor a = ones({1}, {.requires_grad = true});
  Tensor b = ones({1}, {.requires_grad = true});
  Tensor la = sum(mul(a, 3.0));
  Tensor lb = sum(mul(b, 5.0));
  backward(lb);
  CHECK_FALSE(a.grad().defined());
  backward(la);
  CHECK(a.grad().item<float>() == 3);
  CHECK(b.grad().item<float>() == 5);
  std::vector<float> results(2);
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; ++t) {
    ts.emplace_back([t, &results] {
      for (int i = 0; i < 50; ++i) {
        Tensor x = full({2}, double(t + 1), {.requires_grad = true});
        backward(sum(mul(x, x)));
        results[size_t(t)] = x.grad().to_vector<float>()[0];
      }
    });
  }
  for (auto& th : ts) th.join();
  CHECK(results[0] == 2);
  CHECK(results[1] == 4);
}

TEST_CASE("dump_tape: the entries as text and as a Graphviz graph") {
  Tensor x = ones({2}, {.requires_grad = true});
  Tensor y = mul(x, 2.0);
  Tensor z = sum(mt::silu(y));
  std::string text = mt::dump_tape();
  CHECK(text.find("mt::mul.Scalar(leaf [2] float32) -> ([2] float32)") != std::string::npos);
  CHECK(text.find("mt::silu(#0.0) -> ([2] float32) saved=1\n") != std::string::npos);
  std::string dot = mt::dump_tape_dot();
  CHECK(dot.starts_with("digraph tape {"));
  CHECK(dot.find("label=\"leaf [2] float32\"") != std::string::npos);
  CHECK(dot.find("->") != std::string::npos);
  backward(z);  // frees the saved tensors: no more saved=
  text = mt::dump_tape();
  CHECK(text.find("mt::silu(#0.0) -> ([2] float32) [released]\n") != std::string::npos);
}

TEST_CASE("trace_fake: shapes of every call without computing, on a fake cuda:0 too") {
  Tensor x = zeros({4, 3}, {.requires_grad = true});
  CallTrace t = trace_fake(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{sum(mt::silu(mul(in[0], 2.0)))};
      },
      {x});
  REQUIRE(t.calls.size() >= 3);
  CHECK(t.calls[0].op == "mt::mul.Scalar");
  CHECK(t.calls[0].args[0] == "Tensor[4, 3] float32 cpu fake");
  CHECK(t.calls[0].results[0] == "Tensor[4, 3] float32 cpu fake");
  CHECK(
      t.str().find("mt::silu(Tensor[4, 3] float32 cpu fake) -> (Tensor[4, 3] float32 cpu fake)") !=
      std::string::npos);
  Tensor fake_gpu;
  {
    FakeMode f;
    fake_gpu = empty({2, 2}, {.device = Device("cuda:0")});
  }
  CallTrace g =
      trace_fake([](const std::vector<Tensor>& in) { return std::vector<Tensor>{mt::silu(in[0])}; },
                 {fake_gpu});
  CHECK(g.calls.at(0).results.at(0) == "Tensor[2, 2] float32 cuda:0 fake");
}

TEST_CASE("autograd: .grad owns contiguous memory, and saved outputs keep their gradient path") {
  Tensor x = from_vector<float>({1, 2, 3});
  x.requires_grad_();
  backward(sum(x));  // sum's gradient is an expanded view of one value
  CHECK(x.grad().is_contiguous());
  {
    NoGradGuard no_grad;
    mul_(x.grad(), 2.0);  // clipping in place works
  }
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  // an op whose backward uses its saved output: double backward must flow through it
  auto op = custom_op("triton_demo::exp_saving_output", [](const Tensor& t) { return mt::exp(t); });
  op.register_fake([](const Tensor& t) { return empty_like(t); });
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) { return mul(g, ctx.saved()[0]); },
      [](AutogradContext& ctx, const Tensor&, const Tensor& out) { ctx.save_for_backward({out}); });
  Tensor z = from_vector<double>({0.2, -0.7});
  z.requires_grad_();
  GradcheckResult r =
      gradgradcheck([&](const std::vector<Tensor>& in) { return mul(op(in[0]), op(in[0])); }, {z});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("autograd: a leaf's fresh gradient from a custom op becomes .grad without a copy") {
  static const void* made = nullptr;
  auto op = custom_op("triton_demo::twice_stolen", [](const Tensor& t) { return mul(t, 2.0); });
  op.register_autograd(
      [](AutogradContext&, const Tensor& g) {
        Tensor r = mul(g, 2.0);
        made = r.data_ptr();
        return r;
      },
      [](AutogradContext&, const Tensor&, const Tensor&) {});
  Tensor x = randn({1000});
  x.requires_grad_();
  backward(sum(op(x)));
  CHECK(x.grad().data_ptr() == made);  // the backward's own tensor, not a clone of it
  CHECK(x.grad().to_vector<float>() == std::vector<float>(1000, 2.0f));
}

namespace {
int g_prune_backward_calls = 0;  // how often prune_test::twice's backward ran
}  // namespace

TEST_CASE("grad runs only the nodes on a path to its inputs, and leaves the others usable") {
  auto op = custom_op("prune_test::twice", [](const Tensor& x) { return mul(x, 2.0); });
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  op.register_autograd(
      [](AutogradContext&, const Tensor& g) {
        ++g_prune_backward_calls;
        return mul(g, 2.0);
      },
      [](AutogradContext&, const Tensor&, const Tensor&) {});
  Tensor a = randn({3}).requires_grad_(), b = randn({3}).requires_grad_();
  auto forward = [&] { return sum(mul(op(a), b)); };
  g_prune_backward_calls = 0;
  // d/db needs mul's node only: twice's backward (a's side) is not run
  std::vector<Tensor> gb = grad({forward()}, {b});
  CHECK(g_prune_backward_calls == 0);
  CHECK(max_diff(gb[0], mul(a, 2.0).detach()) == 0.0);
  // d/da goes through it, once
  std::vector<Tensor> ga = grad({forward()}, {a});
  CHECK(g_prune_backward_calls == 1);
  CHECK(max_diff(ga[0], mul(b, 2.0).detach()) == 0.0);
  // the gradient of an intermediate stops there: what lies beyond it is not run
  Tensor t = op(a);
  std::vector<Tensor> gt = grad({sum(mul(t, b))}, {t});
  CHECK(g_prune_backward_calls == 1);
  CHECK(max_diff(gt[0], b.detach()) == 0.0);
  // a node grad did not run keeps what it saved: backward through it still works
  Tensor z = op(a);
  (void)grad({sum(mul(z, b))}, {b}, {}, {.retain_graph = false});
  CHECK(g_prune_backward_calls == 1);
  CHECK_NOTHROW(backward(sum(z)));  // z's node, which grad left alone
  CHECK(g_prune_backward_calls == 2);
  // backward (not grad) still fills every leaf's .grad
  zero_grad({a, b});
  backward(forward());
  CHECK(g_prune_backward_calls == 3);
  CHECK(a.grad().defined());
  CHECK(b.grad().defined());
}
