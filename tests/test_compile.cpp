// SPDX-License-Identifier: MIT
// mt::compile: capture through fake tensors, the printed graph, pointwise fusion and
// replay, compared with eager execution (bitwise where nothing is fused).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/elementwise_rows.h"
#include "kernels/jit/nvrtc.h"
#include "kernels/ops/pointwise_eval.h"
#include "minitensor.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

using Tensors = std::vector<Tensor>;

// Same sizes, dtype and bytes.
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.numel() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

Tensors clones(const Tensors& ts) {
  Tensors out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

// Runs fn eagerly and compiled (twice: the second call replays the cached plan), each on
// fresh copies of the inputs, and checks outputs and inputs (for in-place ops) bitwise.
void check_replay(const char* what, const GraphFn& fn, const Tensors& inputs) {
  CAPTURE(what);
  Tensors eager_in = clones(inputs);
  Tensors eager = fn(eager_in);
  Compiled c = mt::compile(fn);
  for (int round = 0; round < 2; ++round) {
    Tensors in = clones(inputs);
    Tensors out = c(in);
    REQUIRE(out.size() == eager.size());
    for (size_t i = 0; i < out.size(); ++i) CHECK(bitwise_equal(out[i], eager[i]));
    for (size_t i = 0; i < in.size(); ++i) CHECK(bitwise_equal(in[i], eager_in[i]));
  }
  CHECK(c.compile_count() == 1);
}

Tensors one(Tensor t) { return {std::move(t)}; }

// A small MLP training step with the parameters as inputs: forward, mse_loss, backward,
// SGD in place, grads cleared. inputs: x, target, w1, b1, w2, b2.
Tensors train_step(const Tensors& in) {
  const Tensor &x = in[0], &target = in[1];
  const Tensors params(in.begin() + 2, in.end());
  Tensor h = mt::silu(mt::add(mt::matmul(x, params[0]), params[1]));
  Tensor loss = mt::mse_loss(mt::add(mt::matmul(h, params[2]), params[3]), target);
  mt::backward(loss);
  {
    NoGradGuard no_grad;
    for (const Tensor& p : params) mt::sub_(p, p.grad(), 0.05);
  }
  mt::zero_grad(params);
  return {loss};
}

Tensors mlp_inputs() {
  manual_seed(7);
  return {randn({16, 8}),
          randn({16, 4}),
          mt::mul(randn({8, 32}), 0.3).requires_grad_(),
          zeros({32}).requires_grad_(),
          mt::mul(randn({32, 4}), 0.2).requires_grad_(),
          zeros({4}).requires_grad_()};
}

Tensors params_copy(const Tensors& in) {
  Tensors out;
  for (size_t i = 0; i < in.size(); ++i)
    out.push_back(i < 2 ? in[i] : in[i].detach().clone().requires_grad_());
  return out;
}

}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("capture: the graph of a small function, one line a node") {
    auto fn = [](const Tensors& in) {
      Tensor y = mt::relu(mt::matmul(in[0], in[1]) + in[2]);
      return Tensors{mt::sum(y, {1}), y.t()};
    };
    Graph g =
        capture(fn, {randn({4, 3}), randn({3, 2}), randn({2})}, {.input_names = {"x", "w", "b"}});
    CHECK(g.str() ==
          "graph(x: float32[4, 3], w: float32[3, 2], b: float32[2]):\n"
          "  matmul: float32[4, 2] = mt::matmul(x, w)\n"
          "  add: float32[4, 2] = mt::add(matmul, b, alpha=1)\n"
          "  relu: float32[4, 2] = mt::relu(add)\n"
          "  sum: float32[4] = mt::sum(relu, [1], False)\n"
          "  transpose: float32[2, 4] = mt::transpose(relu, 0, 1)\n"
          "  return (sum, transpose)\n");
    // the transpose is a view of relu: it shares relu's memory
    const GraphValue& t = g.values[size_t(g.outputs[1])];
    CHECK(g.values[size_t(t.alias_root)].name == "relu");
    CHECK(t.strides == Shape{1, 2});
  }

  TEST_CASE("capture: dot is a well-formed digraph with an edge per tensor argument") {
    auto fn = [](const Tensors& in) { return one(mt::sigmoid(in[0]) * in[0]); };
    Graph g = capture(fn, {randn({5})}, {.input_names = {"x"}});
    CHECK(g.dot() ==
          "digraph graph_ {\n"
          "  rankdir=TB;\n"
          "  node [fontname=\"monospace\"];\n"
          "  v0 [shape=ellipse, label=\"x: float32[5]\"];\n"
          "  n0 [shape=box, label=\"sigmoid = mt::sigmoid\"];\n"
          "  v0 -> n0;\n"
          "  n1 [shape=box, label=\"mul = mt::mul\"];\n"
          "  n0 -> n1;\n"
          "  v0 -> n1;\n"
          "  out [shape=doublecircle, label=\"return\"];\n"
          "  n1 -> out;\n"
          "}\n");
  }

  TEST_CASE("capture: an op without a fake kernel fails with the tutorial's pitfall message") {
    auto op = custom_op("test_compile::no_fake", [](const Tensor& x) { return x.clone(); });
    auto fn = [&](const Tensors& in) { return one(op(mt::exp(in[0]))); };
    const std::string err = error_of([&] { capture(fn, {randn({3})}); });
    CHECK(err.starts_with(
        "[compile] capturing runs every op on fake tensors to lay out the graph before anything "
        "runs, so each op needs a Fake kernel (in 'test_compile::no_fake'):\n"
        "[test_compile::no_fake] 'test_compile::no_fake' has no Fake kernel; register one with "
        "register_fake (or m.impl(\"no_fake\", ...) in MT_LIBRARY_IMPL(test_compile, Fake, m)), so "
        "that it can run "
        "on fake tensors."));
    // and with the fake kernel registered, the capture works
    op.register_fake([](const Tensor& x) { return empty_like(x); });
    CHECK(capture(fn, {randn({3})}).nodes.size() == 2);
  }

  TEST_CASE("capture: reading a value, or a fake tensor from outside, is a clear error") {
    const std::string err = error_of([] {
      capture([](const Tensors& in) { return one(in[0] * mt::sum(in[0]).item<float>()); },
              {randn({3})});
    });
    CHECK(
        err.starts_with("[compile] the function read a tensor's values while it was captured: "
                        "capture runs it on fake tensors, which have shapes but no values."));
    Tensor outside = fake_empty({3});
    CHECK(error_of([&] {
            capture([&](const Tensors& in) { return one(in[0] + outside); }, {randn({3})});
          })
              .starts_with("[compile] argument 1 of 'mt::add' is a fake tensor that the function "
                           "did not get as an input and that no op or factory made while it was "
                           "captured"));
    CHECK(error_of([] {
            capture([](const Tensors& in) { return one(in[0] + randn({3})); }, {randn({3})});
          }) ==
          "[compile] argument 1 of 'mt::add' was made by mt::randn while the function was "
          "captured; its values (random draws, ranges) cannot be part of the graph. Make it "
          "outside the function and pass it as an input");
    Tensor param = randn({3}).requires_grad_();
    CHECK(error_of([&] {
            capture([&](const Tensors& in) { return one(in[0] * param); }, {randn({3})});
          }) ==
          "[compile] 'mt::mul' got a real tensor that requires grad and is not an input of the "
          "captured function (a parameter it closes over); pass it as an input, so that its "
          "gradient and updates reach it");
    CHECK(error_of([] {
            capture([](const Tensors& in) { return one(in[0] + 1.0); }, {Tensor()});
          }) == "[compile] input 0 is an undefined Tensor");
  }

  TEST_CASE("capture: constants, factories, in-place ops and Tensor[] arguments") {
    Tensor c = randn({3});
    auto scale_all = custom_op("test_compile::scale_all_",
                               [](const std::vector<Tensor>& xs, double s) {
                                 for (const Tensor& x : xs) mt::mul_(x, s);
                               },
                               {.mutates_args = {"_0"}});
    scale_all.register_fake([](const std::vector<Tensor>&, double) {});
    auto fn = [&](const Tensors& in) {
      Tensor z = mt::zeros({3});
      mt::add_(z, in[0] * c);
      scale_all({z, in[1]}, 2.0);
      return one(z + 1.0);
    };
    Graph g = capture(fn, {randn({3}), randn({3})}, {.input_names = {"a", "b"}});
    CHECK(g.str() ==
          "graph(a: float32[3], b: float32[3]):\n"
          "  c: float32[3] = constant\n"
          "  mul: float32[3] = mt::mul(a, c)\n"
          "  full: float32[3] = full([3], 0, float32)\n"
          "  mt::add_(full, mul, alpha=1)  # writes full\n"
          "  test_compile::scale_all_([full, b], 2)  # writes full, b\n"
          "  add: float32[3] = mt::add.Scalar(full, 1)\n"
          "  return (add)\n");
    check_replay("constants, factories, in place, Tensor[]", fn, {randn({3}), randn({3})});
    Compiled compiled = mt::compile(fn);
    compiled(randn({3}), randn({3}));
    // a Tensor[] argument is called boxed; the common signatures unboxed
    CHECK(compiled.plan_str() ==
          "kernel   mt::mul -> mul\n"
          "alloc    full -> full\n"
          "kernel   mt::add_ -> full\n"
          "boxed    test_compile::scale_all_\n"
          "kernel   mt::add.Scalar -> add\n");
  }

  TEST_CASE("replay: every elementwise row gives the eager bits") {
    manual_seed(3);
    Tensor pos = mt::add(rand({4, 5}), 0.5), any = randn({4, 5}), row = randn({5});
    for (const ew::Row& r : ew::kRows) {
      if (r.name == "mse_loss") continue;  // a loss: mse_loss below
      const std::string name = fmt::format(
          "mt::{}{}", r.name, r.arity == ew::Arity::Scalar && r.name != "pow" ? ".Scalar" : "");
      auto op = dispatcher().find_or_throw(name);
      const Tensor x = r.positive() ? pos : any;
      GraphFn fn;
      if (r.arity == ew::Arity::Unary)
        fn = [op](const Tensors& in) {
          Stack s{in[0]};
          op.call_boxed(&s);
          return one(s[0].to_tensor());
        };
      else if (r.arity == ew::Arity::Scalar)
        fn = [op](const Tensors& in) {
          Stack s{in[0], 1.5};
          op.call_boxed(&s);
          return one(s[0].to_tensor());
        };
      else
        fn = [op](const Tensors& in) {
          Stack s{in[0], in[1]};
          if (op.schema().arguments.size() > 2) s.emplace_back(0.5);  // alpha: add, sub
          op.call_boxed(&s);
          return one(s[0].to_tensor());
        };
      check_replay(name.c_str(), fn, {x, row});
    }
    check_replay("int64 add", [](const Tensors& in) { return one(in[0] + in[1]); },
                 {arange(6, {.dtype = DType::Int64}), arange(6, {.dtype = DType::Int64})});
    check_replay("cast",
                 [](const Tensors& in) { return one(mt::sigmoid(in[0].to(DType::Float64))); },
                 {any});
    check_replay("silu_backward",
                 [](const Tensors& in) { return one(mt::silu_backward(in[0], in[1])); },
                 {any, pos});
  }

  TEST_CASE("replay: reductions, matmul, softmax, losses give the eager bits") {
    manual_seed(4);
    Tensor x = randn({6, 7}), y = randn({6, 7}), w = randn({7, 3});
    check_replay("sum",
                 [](const Tensors& in) {
                   return Tensors{mt::sum(in[0]), mt::sum(in[0], {0}, true)};
                 },
                 {x});
    check_replay("mean", [](const Tensors& in) { return Tensors{mt::mean(in[0], {1})}; }, {x});
    check_replay("max",
                 [](const Tensors& in) {
                   auto [v, i] = mt::max(in[0], 1);
                   return Tensors{mt::max(in[0]), v, i};
                 },
                 {x});
    check_replay("sum_to",
                 [](const Tensors& in) {
                   return one(mt::sum_to(in[0], Shape{1, 7}));
                 },
                 {x});
    check_replay("matmul", [](const Tensors& in) { return one(mt::matmul(in[0], in[1])); }, {x, w});
    check_replay("softmax",
                 [](const Tensors& in) {
                   return Tensors{mt::softmax(in[0], 1), mt::log_softmax(in[0], 0)};
                 },
                 {x});
    check_replay("mse_loss", [](const Tensors& in) { return one(mt::mse_loss(in[0], in[1])); },
                 {x, y});
  }

  TEST_CASE("replay: views and in-place ops keep eager's aliasing") {
    manual_seed(5);
    Tensor x = randn({4, 6}), y = randn({6});
    check_replay("views",
                 [](const Tensors& in) {
                   Tensor a = in[0].transpose(0, 1).contiguous().view({3, 8});
                   Tensor b = in[0].slice(1, 1, 5).select(0, 2).unsqueeze(0).expand({3, 4});
                   return Tensors{a.permute({1, 0}).reshape({24}), b * 2.0, in[0].flatten()};
                 },
                 {x});
    check_replay("in place through a view",
                 [](const Tensors& in) {
                   Tensor row = in[0].select(0, 1);
                   mt::add_(row, in[1], 2.0);  // writes row 1 of in[0]
                   mt::mul_(in[0], 0.5);
                   Tensor copy = in[0].clone();
                   in[0].fill_(3.0);
                   return Tensors{copy, in[0] + 1.0};
                 },
                 {x, y});
  }

  TEST_CASE("replay: a captured training step trains exactly like eager") {
    Tensors eager = mlp_inputs();
    Tensors comp = params_copy(eager);
    Compiled step = mt::compile(train_step);
    for (int i = 0; i < 5; ++i) {
      CAPTURE(i);
      Tensor le = train_step(eager)[0];
      Tensor lc = step(comp)[0];
      CHECK(bitwise_equal(le.detach(), lc));
      for (size_t p = 2; p < eager.size(); ++p) {
        CHECK(bitwise_equal(eager[p].detach(), comp[p].detach()));
        CHECK(!comp[p].grad().defined());
      }
    }
    CHECK(step.compile_count() == 1);
    // the clones capture adds in place of eager's stolen gradients are not run
    CHECK(step.plan_str().find("mt::clone") == std::string::npos);
    CHECK(step.graph_str().find("mt::clone(") != std::string::npos);
    // forward, the engine's backward calls, and the four updates are one graph
    const std::string s = step.graph_str();
    CHECK(s.find("mt::silu_backward(") != std::string::npos);
    CHECK(s.find("mt::sub_(w1") == std::string::npos);  // names: x0..x5 by default
    CHECK(s.find("mt::sub_(x2, ") != std::string::npos);
    CHECK(s.find("# writes x5") != std::string::npos);
  }

  TEST_CASE("replay: a transpose feeding a matmul is a view in the plan, never a copy") {
    Compiled step = mt::compile(train_step);
    Tensors in = mlp_inputs();
    step(in);
    // the backward's three transposes (w2, h, x) reach matmul as views: the matmul kernels
    // take transposed strides (cuBLAS's op flags on CUDA), so the plan copies nothing
    const std::string plan = step.plan_str();
    size_t transposes = 0;
    for (size_t at = plan.find("kernel   mt::transpose"); at != std::string::npos;
         at = plan.find("kernel   mt::transpose", at + 1))
      ++transposes;
    CHECK(transposes == 3);
    for (const char* copy : {"mt::contiguous", "mt::clone", "mt::copy_", "mt::to."})
      CHECK_MESSAGE(plan.find(copy) == std::string::npos, copy);
  }

  TEST_CASE("replay: gradients accumulate into .grad like eager when the step keeps them") {
    auto step = [](const Tensors& in) {
      Tensor loss = mt::sum(mt::tanh(in[0] * in[1]));
      mt::backward(loss);
      return one(loss);
    };
    manual_seed(6);
    Tensor w = randn({5}).requires_grad_(), x = randn({5});
    Tensor wc = w.detach().clone().requires_grad_();
    Compiled c = mt::compile(step);
    for (int i = 0; i < 3; ++i) {
      step({w, x});
      c({wc, x});
      CHECK(bitwise_equal(w.grad(), wc.grad()));
    }
    CHECK(c.compile_count() == 2);  // .grad undefined on the first call, defined after
  }

  TEST_CASE("compile: a change of guard recompiles, the same guard reuses the plan") {
    Compiled c = mt::compile([](const Tensors& in) { return one(mt::exp(in[0]) + 1.0); });
    c(randn({3}));
    c(randn({3}));
    CHECK(c.compile_count() == 1);
    c(randn({4}));                             // sizes
    c(randn({3}, {.dtype = DType::Float64}));  // dtype
    c(randn({3}).requires_grad_());            // requires_grad
    c(randn({3, 2}).select(1, 0));             // strides
    {
      NoGradGuard no_grad;  // grad mode
      c(randn({3}));
    }
    CHECK(c.compile_count() == 6);
    c(randn({4}));
    c(randn({3}));
    CHECK(c.compile_count() == 6);
  }

  TEST_CASE(
      "replay: guards checked in place, an output returned twice, slots freed after an error") {
    // Note [Replay's fixed cost]: the last plan's guard is compared as it is worked out; two
    // guards in turn find their plans again, storage sharing between inputs is part of it.
    Compiled c = mt::compile([](const Tensors& in) { return one(in[0] * in[1]); });
    Tensor x = randn({3}), y = randn({3}), z = randn({4});
    for (int round = 0; round < 2; ++round) {
      CHECK(bitwise_equal(c(x, y)[0], x * y));
      CHECK(bitwise_equal(c(z, z)[0], z * z));
    }
    CHECK(c.compile_count() == 2);
    c(x, x);  // shares storage: another guard than (x, y)
    CHECK(c.compile_count() == 3);
    c(x, y);
    CHECK(c.compile_count() == 3);

    // an output moved out of its slot is still every output that names it
    Compiled twice = mt::compile([](const Tensors& in) {
      Tensor e = mt::exp(in[0]);
      return Tensors{e, e, in[0], e + 1.0};
    });
    for (int round = 0; round < 2; ++round) {
      Tensors out = twice(x);
      REQUIRE(out.size() == 4);
      CHECK(bitwise_equal(out[0], mt::exp(x)));
      CHECK(out[1].is_same(out[0]));
      CHECK(out[2].is_same(x));
      CHECK(bitwise_equal(out[3], mt::exp(x) + 1.0));
    }

    // Note [Replay's fixed cost]: on the CPU inputs and constants are read in place, not
    // copied into slots; returned, they are the caller's tensor and the closed-over one, and
    // the plan holds no input between calls (the first plan runs in run_unboxed, the second,
    // with a .grad to set, through run_steps)
    const Tensor k = randn({3});
    Compiled consts = mt::compile([&](const Tensors& in) {
      return Tensors{k, in[0] * k, in[0], mt::exp(k)};
    });
    const Tensor v = randn({3}, {.requires_grad = true});
    Compiled trains = mt::compile([&](const Tensors& in) {
      Tensor loss = mt::sum(in[0] * k);
      mt::backward(loss);
      return Tensors{loss, in[0]};
    });
    for (int round = 0; round < 2; ++round) {
      Tensors out = consts(x);
      REQUIRE(out.size() == 4);
      CHECK(out[0].is_same(k));
      CHECK(bitwise_equal(out[1], x * k));
      CHECK(out[2].is_same(x));
      CHECK(bitwise_equal(out[3], mt::exp(k)));
      v.set_grad(Tensor());
      Tensors t = trains(v);
      CHECK(t[1].is_same(v));
      CHECK(bitwise_equal(v.grad(), k));
    }
    CHECK(x.impl_ptr().use_count() == 1);
    CHECK(consts.compile_count() == 1);

    // a kernel that throws: the error comes out, the plan keeps no tensor of that call, and
    // the next call gives eager's values
    static bool fail = false;
    auto flaky = custom_op("test_compile::flaky", [](const Tensor& t) {
      MT_CHECK(!fail, "[test_compile::flaky] told to fail; unset the flag");
      return t.clone();
    });
    flaky.register_fake([](const Tensor& t) { return empty_like(t); });
    Compiled f = mt::compile([&](const Tensors& in) { return one(flaky(mt::exp(in[0])) * 2.0); });
    Tensor w = randn({5});
    f(w);
    fail = true;
    CHECK(error_of([&] { f(w); }) == "[test_compile::flaky] told to fail; unset the flag");
    fail = false;
    CHECK(w.impl_ptr().use_count() == 1);  // no slot of the plan holds the input
    CHECK(bitwise_equal(f(w)[0], mt::exp(w) * 2.0));
    CHECK(f.compile_count() == 1);
  }

  TEST_CASE("compile: threads calling one compiled function at once get one thread's results") {
    // The compiled function's lock (Note [Replay's fixed cost]): four threads on one plan,
    // so that callers wait for each other, each result bitwise the single-threaded one.
    Compiled f = mt::compile([](const Tensors& in) { return one(mt::exp(in[0]) * 2.0); });
    manual_seed(9);
    const Tensor x = randn({4096}), y = randn({3000});
    const Tensor want_x = f(x)[0].clone(), want_y = f(y)[0].clone();
    std::atomic<int> wrong{0}, calls{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 3000; ++i) {
          const bool odd = (i + t) % 2 == 1;
          const Tensor r = f(odd ? y : x)[0];
          if (!bitwise_equal(r, odd ? want_y : want_x)) ++wrong;
          ++calls;
        }
      });
    for (std::thread& t : threads) t.join();
    CHECK(calls.load() == 12000);
    CHECK(wrong.load() == 0);
    CHECK(f.compile_count() == 2);  // one plan a shape, each made once
  }

  TEST_CASE("compile: MT_COMPILE=0 runs the function eagerly") {
    ::setenv("MT_COMPILE", "0", 1);
    int calls = 0;
    Compiled c = mt::compile([&](const Tensors& in) {
      ++calls;
      return one(mt::exp(in[0]));
    });
    ::unsetenv("MT_COMPILE");
    Tensor x = randn({3});
    CHECK(bitwise_equal(c(x)[0], mt::exp(x)));
    c(x);
    CHECK(calls == 2);
    CHECK(c.compile_count() == 0);
  }

  TEST_CASE("fusion: a chain of four pointwise ops is one group; a value used twice breaks it") {
    auto chain = [](const Tensors& in) {
      return one(mt::sigmoid(mt::mul(mt::exp(in[0]), 2.0) + in[1]) * in[0]);
    };
    Graph g = capture(chain, {randn({4, 3}), randn({3})});
    auto groups = fusion_groups(g);
    REQUIRE(groups.size() == 1);
    CHECK(groups[0].nodes.size() == 5);
    CHECK(groups[0].name == "fused_exp_mul_add_sigmoid_mul");
    CHECK(groups[0].inputs.size() == 2);
    CHECK(groups[0].body ==
          "t0 = exp(i0);\nt1 = t0 * s0;\nt2 = t1 + i1;\nt3 = sigmoid(t2);\nt4 = t3 * i0;\nreturn "
          "t4;");
    CHECK(groups[0].scalars == std::vector<double>{2.0});

    auto twice = [](const Tensors& in) {
      Tensor e = mt::exp(in[0]);
      Tensor a = mt::tanh(mt::neg(e));
      return one(mt::sigmoid(a + e));  // e is read by neg and by add
    };
    auto g2 = fusion_groups(capture(twice, {randn({8})}));
    REQUIRE(g2.size() == 1);
    CHECK(g2[0].name == "fused_neg_tanh_add_sigmoid");
    // a returned value stays outside groups; the sum that alone reads a root joins its
    // group (Note [Reduction fusion])
    auto split = [](const Tensors& in) {
      Tensor a = mt::exp(in[0]) * 3.0;
      return Tensors{a, mt::sum(mt::relu(a) - 1.0)};
    };
    auto g3 = fusion_groups(capture(split, {randn({8})}));
    REQUIRE(g3.size() == 2);
    CHECK(g3[0].name == "fused_exp_mul");
    CHECK(g3[1].name == "fused_relu_sub_sum");
  }

  TEST_CASE("fusion: an op folder's elementwise op fuses through the formula its folder gives") {
    // kernels/ops/silu/silu.cpp gives mt::silu_backward's; kernels/compile knows no op by name.
    auto fn = [](const Tensors& in) { return one(mt::exp(mt::silu_backward(in[0] * 2.0, in[1]))); };
    auto groups = fusion_groups(capture(fn, {randn({4, 3}), randn({4, 3})}));
    CHECK(ops::pointwise_formula("mt::silu_backward") != nullptr);
    REQUIRE(groups.size() == 1);
    CHECK(groups[0].name == "fused_mul_silu_backward_exp");
    CHECK(groups[0].nodes.size() == 3);
  }

  TEST_CASE("fusion: in-place writes between a group's nodes keep the group apart") {
    auto fn = [](const Tensors& in) {
      Tensor e = mt::exp(in[0]);
      mt::mul_(in[0], 2.0);                // writes in[0] after exp read it
      return one(mt::sigmoid(e) * in[0]);  // reads the new in[0]
    };
    Graph g = capture(fn, {randn({4})});
    for (const FusionGroup& fg : fusion_groups(g))
      for (int n : fg.nodes) CHECK(g.nodes[size_t(n)].op_name() != "mt::exp");
    check_replay("write between", fn, {randn({4})});
  }

  TEST_CASE("fusion: the fused expressions evaluated on CPU match eager within float tolerance") {
    manual_seed(8);
    auto fn = [](const Tensors& in) {
      Tensor h = mt::silu(mt::add(in[0], in[1], 0.5));
      Tensor g = mt::gelu(mt::tanh(h) * mt::sqrt(mt::abs(in[0]) + 1.0));
      return Tensors{
          mt::sum(mt::relu(g - 0.1) / 3.0 + mt::pow(mt::sigmoid(h), 2.0)),
          mt::neg(mt::silu_backward(mt::exp(in[0]) - mt::log(mt::abs(in[1]) + 2.0), in[0]))};
    };
    Tensors in = {randn({64, 33}), randn({33})};
    Compiled c = mt::compile(fn, {.fuse = true});
    Tensors eager = fn(in), fused = c(in);
    CHECK(c.num_fusion_groups() >= 2);
    for (size_t i = 0; i < eager.size(); ++i) CHECK(max_diff(eager[i], fused[i]) < 1e-4);
    // float64 gets double math
    Tensors in64 = {in[0].to(DType::Float64), in[1].to(DType::Float64)};
    Tensors e64 = fn(in64), f64 = c(in64);
    for (size_t i = 0; i < e64.size(); ++i) CHECK(max_diff(e64[i], f64[i]) < 1e-10);
    // the training step fused on CPU: its backward's seed (a one-element full) joins a group
    Tensors eager_in = mlp_inputs(), fused_in = params_copy(eager_in);
    Compiled step = mt::compile(train_step, {.fuse = true});
    for (int i = 0; i < 3; ++i) {
      train_step(eager_in);
      step(fused_in);
    }
    CHECK(step.num_fusion_groups() >= 1);
    CHECK(step.plan_str().find("fused_full_mul_sub_mul") != std::string::npos);
    for (size_t p = 2; p < eager_in.size(); ++p) CHECK(max_diff(eager_in[p], fused_in[p]) < 1e-5);
  }

  TEST_CASE("fusion on CPU: a prepared group gives the pointwise builder's bits at every size") {
    // Note [Prepared CPU groups]: contiguous inputs of one shape and dtype; the default plan
    // fuses such a group at any size. sigmoid(x * c) and exp(x * c) are one loop each (Note
    // [Tile evaluation]), the same bits as the product and the call as loops of their own.
    auto fn = [](const Tensors& in) {
      Tensor t = mt::sigmoid(in[0] * 0.75) * in[1];
      return one(mt::exp(t * 0.5) - in[0]);
    };
    manual_seed(21);
    const int saved = mt::num_threads();
    for (int threads : {1, 2}) {
      mt::set_num_threads(threads);
      for (int64_t n : {1, 7, 8, 9, 255, 1023, 1024, 1025, 4097, 40000}) {
        CAPTURE(threads);
        CAPTURE(n);
        const Tensors in = {randn({n}), randn({n})};
        Compiled c = mt::compile(fn);
        const Tensor out = c(in)[0];
        CHECK(c.plan_str() == "fused    fused_mul_sigmoid_mul_mul_exp_sub -> sub\n");
        const Graph g = capture(fn, in);
        const std::vector<FusionGroup> groups = fusion_groups(g);
        REQUIRE(groups.size() == 1);
        REQUIRE(groups[0].inputs == std::vector<int>{g.inputs[0], g.inputs[1]});
        const Tensor builder = groups[0].kernel().call(in, groups[0].scalars)[0];
        CHECK(bitwise_equal(out, builder));
        CHECK(bitwise_equal(c(in)[0], builder));  // the second call replays the plan
        // each op here rounds as its eager loop does: the eager bits too
        CHECK(bitwise_equal(out, fn(in)[0]));
      }
    }
    mt::set_num_threads(saved);
  }

  TEST_CASE("fusion on CPU: inputs unlike the prepared ones recompile or fall back, and match") {
    auto fn = [](const Tensors& in) { return one(mt::sigmoid(in[0] * 2.0) * in[1] + 1.0); };
    manual_seed(22);
    Compiled c = mt::compile(fn);
    const Tensor x = randn({3, 5}), y = randn({3, 5});
    CHECK(bitwise_equal(c(x, y)[0], fn({x, y})[0]));
    CHECK(c.plan_str() == "fused    fused_mul_sigmoid_mul_add -> add\n");
    // a guard miss compiles again: dtype, sizes, a non-contiguous view, requires_grad
    const Tensor x64 = x.to(DType::Float64), y64 = y.to(DType::Float64);
    CHECK(max_diff(c(x64, y64)[0], fn({x64, y64})[0]) < 1e-12);
    CHECK(c.plan_str() == "fused    fused_mul_sigmoid_mul_add -> add\n");
    const Tensor x4 = randn({4, 5}), y4 = randn({4, 5});
    CHECK(bitwise_equal(c(x4, y4)[0], fn({x4, y4})[0]));
    const Tensor xt = randn({5, 3}).t();  // [3, 5], strides (1, 3)
    CHECK(!xt.is_contiguous());
    CHECK(bitwise_equal(c(xt, y)[0], fn({xt, y})[0]));
    CHECK(c.plan_str() ==
          "kernel   mt::mul.Scalar -> mul\nkernel   mt::sigmoid -> sigmoid\n"
          "kernel   mt::mul -> mul_1\nkernel   mt::add.Scalar -> add\n");
    const Tensor xg = x.detach().clone().requires_grad_();
    CHECK(bitwise_equal(c(xg, y)[0].detach(), fn({x, y})[0]));
    const Tensor row = randn({5});  // broadcast: not prepared, and small: op calls
    CHECK(bitwise_equal(c(x, row)[0], fn({x, row})[0]));
    CHECK(c.compile_count() == 6);
    CHECK(bitwise_equal(c(x, y)[0], fn({x, y})[0]));  // the first plan again
    CHECK(c.compile_count() == 6);

    // an intermediate whose kernel makes another layout than its fake kernel said: the
    // prepared group sees it at run time and calls the pointwise builder instead
    auto transposed = custom_op("test_compile::transposed_copy",
                                [](const Tensor& t) { return t.t().contiguous().t(); });
    transposed.register_fake([](const Tensor& t) { return empty_like(t); });
    auto odd = [&](const Tensors& in) { return one(mt::sigmoid(transposed(in[0]) * 2.0) + 1.0); };
    Compiled o = mt::compile(odd);
    for (int round = 0; round < 2; ++round) {
      const Tensor out = o(x)[0];
      CHECK(out.sizes() == x.sizes());
      CHECK(bitwise_equal(out.contiguous(), (mt::sigmoid(x * 2.0) + 1.0)));
    }
    CHECK(o.plan_str() ==
          "kernel   test_compile::transposed_copy -> transposed_copy\n"
          "fused    fused_mul_sigmoid_add -> add\n");
  }

  TEST_CASE("fusion: the generated CUDA source compiles to CUBIN for sm_80 and sm_90" *
            doctest::skip(no_nvrtc())) {
    auto fn = [](const Tensors& in) { return one(in[0] * mt::sigmoid(in[0])); };
    auto groups = fusion_groups(capture(fn, {fake_empty({1 << 10}, {.device = Device("cuda:0")})}));
    REQUIRE(groups.size() == 1);
    jit::Pointwise k = groups[0].kernel();
    CHECK(k.cuda_source().find("struct pw_fused_sigmoid_mul {") != std::string::npos);
    for (int arch : {80, 90}) {
      CAPTURE(arch);
      const auto r = jit::compile(k.cuda_source(), "fused_sigmoid_mul.cu", k.name_expressions(),
                                  jit::default_options(), arch);
      CHECK(r.is_cubin());
      CHECK(r.lowered_names.size() == k.name_expressions().size());
    }
    // the MLP step's groups compile too
    Tensors in = mlp_inputs();
    Tensors cuda_fakes;
    for (const Tensor& t : in) {
      Tensor f = fake_empty(t.sizes(), {.device = Device("cuda:0")});
      if (t.requires_grad()) f.requires_grad_();
      cuda_fakes.push_back(f);
    }
    for (const FusionGroup& fg : fusion_groups(capture(train_step, cuda_fakes))) {
      jit::Pointwise pk = fg.kernel();
      CAPTURE(fg.body);
      CHECK(jit::compile(pk.cuda_source(), fg.name + ".cu", pk.name_expressions(),
                         jit::default_options(), 90)
                .is_cubin());
    }
  }

  TEST_CASE("compile on CUDA: results match eager, the training step bitwise" *
            doctest::skip(no_gpu())) {
    const Device dev("cuda:0");
    Tensor x = randn({1 << 16}).to(dev);
    Compiled silu = mt::compile([](const Tensors& in) { return one(in[0] * mt::sigmoid(in[0])); });
    for (int i = 0; i < 3; ++i) CHECK(max_diff(silu(x)[0], mt::silu(x)) < 1e-5);
    CHECK(silu.num_fusion_groups() == 1);

    Tensors eager = mlp_inputs(), comp;
    for (Tensor& t : eager) t = t.requires_grad() ? t.detach().to(dev).requires_grad_() : t.to(dev);
    comp = params_copy(eager);
    Compiled step = mt::compile(train_step, {.fuse = false});
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      Tensor le = train_step(eager)[0];
      Tensor lc = step(comp)[0].clone();
      CHECK(bitwise_equal(le.detach(), lc));
      for (size_t p = 2; p < eager.size(); ++p)
        CHECK(bitwise_equal(eager[p].detach(), comp[p].detach()));
    }
    Compiled fused = mt::compile(train_step);
    Tensors comp2 = params_copy(eager);
    for (int i = 0; i < 4; ++i) {
      train_step(eager);
      fused(comp2);
    }
    for (size_t p = 2; p < eager.size(); ++p) CHECK(max_diff(eager[p], comp2[p]) < 1e-4);
  }

  TEST_CASE("compile on CUDA: the training step's graph copies nothing for its transposes" *
            doctest::skip(no_gpu())) {
    std::vector<std::string> lines;
    dispatcher().set_log_sink([&](std::string_view l) { lines.emplace_back(l); });
    ::setenv("MT_LOG", "compile", 1);
    Compiled step = mt::compile(train_step, {.name = "mlp step"});
    ::unsetenv("MT_LOG");
    Tensors in = mlp_inputs();
    for (Tensor& t : in) t = t.requires_grad() ? t.detach().to(kGpu).requires_grad_() : t.to(kGpu);
    for (int i = 0; i < 3; ++i) step(in);  // warm-up, capture, replay
    dispatcher().set_log_sink(nullptr);
    std::string graph;
    for (const std::string& l : lines)
      if (l.find("captured a CUDA graph of") != std::string::npos) graph = l;
    REQUIRE_MESSAGE(!graph.empty(), "no CUDA graph was captured");
    MESSAGE(graph);  // the node count and the nodes by kind, for the record
    // 5 matmuls through cuBLAS, the rest the plan's own kernels: no memcpy node, and no copy
    // kernel (a transpose copied contiguous would be one)
    CHECK(graph.find("memcpy") == std::string::npos);
    CHECK(graph.find("copy") == std::string::npos);
  }
}
