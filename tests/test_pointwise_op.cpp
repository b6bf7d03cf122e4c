// SPDX-License-Identifier: MIT
// One op, one unit: symbolic derivatives of pointwise expressions, the elementwise rows'
// expressions against their CPU functors and their own derivatives, and mt::pointwise_op.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "kernels/compile/compile.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/elementwise_rows.h"
#include "kernels/jit/derive.h"
#include "kernels/ops/pointwise_eval.h"
#include "minitensor.h"
#include "tests/helpers.h"

using namespace mt;
namespace ex = mt::jit::expr;

namespace {

// Evaluates output k of p at one point in float64.
double eval_at(const ex::Program& p, std::vector<double> in, std::vector<double> sc, size_t k = 0) {
  std::vector<const double*> ip;
  for (double& v : in) ip.push_back(&v);
  std::vector<double> out(p.outputs.size());
  std::vector<double*> op;
  for (double& v : out) op.push_back(&v);
  std::vector<double> scratch;
  ex::eval_chunk<double>(p, ip.data(), op.data(), sc.data(), 1, scratch);
  return out[k];
}

ex::Program parse1(const char* body, std::vector<std::string> in,
                   std::vector<std::string> sc = {}) {
  return ex::parse("t", body, std::move(in), std::move(sc), {"out"}, false);
}

bool close(double a, double b, double tol = 1e-9) {
  return std::abs(a - b) <= tol * (1 + std::abs(b)) || (std::isnan(a) && std::isnan(b));
}

}  // namespace

TEST_SUITE("pointwise_op") {
  TEST_CASE("derivative: softplus' derivative is the sigmoid, names and shape of the program") {
    const ex::Program p = parse1("log1p(exp(x))", {"x"});
    const ex::Program d = ex::derivative("t", p);
    CHECK(d.inputs == std::vector<std::string>{"x", "grad"});
    CHECK(d.outputs == std::vector<std::string>{"grad_x"});
    for (double x : {-3.0, -0.5, 0.0, 0.7, 4.0})
      CHECK(close(eval_at(d, {x, 2.0}, {}), 2.0 / (1 + std::exp(-x))));
    // The text parses back to the same values.
    const ex::Program again = ex::parse("t", d.body, d.inputs, {}, d.outputs, false);
    CHECK(close(eval_at(again, {0.3, 1.5}, {}), eval_at(d, {0.3, 1.5}, {})));
  }

  TEST_CASE("derivative: every construct against central differences, twice") {
    const char* bodies[] = {
        "x * y + x / y - y",
        "exp(x) * sin(y)",
        "sqrt(x) + rsqrt(y)",
        "tanh(x * y) + cos(x)",
        "abs(x - y) + erf(x)",
        "expm1(x) + log(y)",
        "sigmoid(x) * relu(y - 0.5)",
        "max(x, y) + min(x, 2 * y)",
        "pow(x, y) + pow(y, 3)",
        "x > y ? x * x : -y",
        "t = x * y; t * t - sign(x) * t",
        "-(-x) * 1 + 0 * y",
    };
    for (const char* body : bodies) {
      CAPTURE(body);
      const ex::Program p = parse1(body, {"x", "y"});
      const ex::Program d = ex::derivative("t", p);
      const ex::Program dd = ex::derivative("t", d);  // second order: of grad_x and grad_y
      for (auto [x, y] : {std::pair{0.8, 1.3}, std::pair{1.7, 0.6}, std::pair{2.2, 1.9}}) {
        const double h = 1e-6;
        const double dx = (eval_at(p, {x + h, y}, {}) - eval_at(p, {x - h, y}, {})) / (2 * h);
        const double dy = (eval_at(p, {x, y + h}, {}) - eval_at(p, {x, y - h}, {})) / (2 * h);
        CHECK(close(eval_at(d, {x, y, 1.0}, {}, 0), dx, 1e-6));
        CHECK(close(eval_at(d, {x, y, 1.0}, {}, 1), dy, 1e-6));
        // d/dx of grad_x (seeded 1, 0): the second derivative in x
        const double dxx =
            (eval_at(d, {x + h, y, 1.0}, {}, 0) - eval_at(d, {x - h, y, 1.0}, {}, 0)) / (2 * h);
        CHECK(close(eval_at(dd, {x, y, 1.0, 1.0, 0.0}, {}, 0), dxx, 1e-5));
      }
    }
  }

  TEST_CASE("derivative: scalars are not differentiated; an input nobody reads gets zero") {
    const ex::Program p =
        ex::parse("t", "pow(x, s) * beta", {"x", "y"}, {"s", "beta"}, {"out"}, false);
    const ex::Program d = ex::derivative("t", p);
    CHECK(close(eval_at(d, {2.0, 5.0, 1.0}, {3.0, 0.5}, 0), 0.5 * 3 * 4));
    CHECK(eval_at(d, {2.0, 5.0, 1.0}, {3.0, 0.5}, 1) == 0);
    // pow's exponent 0: exactly 0, not 0 * x^-1 (NaN at x = 0)
    CHECK(eval_at(d, {0.0, 1.0, 1.0}, {0.0, 1.0}, 0) == 0);
  }

  TEST_CASE("derivative: floor and ceil are an error with a caret, naming the fix") {
    const ex::Program p = parse1("x * 2 + floor(x)", {"x"});
    CHECK_THROWS_WITH_AS(ex::derivative("app::step", p),
                         "[app::step] floor() has no derivative to differentiate through (it is "
                         "flat almost everywhere); give the backward yourself "
                         "(PointwiseOpOptions::backward) or make the op non-differentiable "
                         "(.differentiable = false)\n  x * 2 + floor(x)\n          ^",
                         mt::Error);
    // floor of something that depends on no input is a constant: fine
    const ex::Program q = ex::parse("t", "x * floor(s)", {"x"}, {"s"}, {"out"}, false);
    CHECK(close(eval_at(ex::derivative("t", q), {3.0, 1.0}, {2.5}), 2.0));
  }

  TEST_CASE("rows: each forward expression computes the row's CPU functor") {
    int checked = 0;
    for (const ew::Row& r : ew::kRows) {
      if (!r.f64) continue;
      CAPTURE(r.name);
      const ex::Program& p = ops::row_forward(r.fn);
      for (double x : {0.3, 1.7, 2.9}) {
        const double xs = r.positive() ? x : x - 1.5, y = 0.9,
                     s = r.arity == ew::Arity::Unary ? 0 : 1.25;
        std::vector<double> in = {xs};
        if (r.arity == ew::Arity::Binary) in.push_back(y);
        std::vector<double> sc;
        if (r.arity != ew::Arity::Unary) sc.push_back(s);
        CHECK(close(eval_at(p, in, sc), r.f64(xs, y, s), 1e-12));
      }
      ++checked;
    }
    CHECK(checked == ew::kNumFns);
  }

  TEST_CASE("rows: each written backward agrees with the derivative of its forward") {
    for (const ew::Row& r : ew::kRows) {
      CAPTURE(r.name);
      const ex::Program& fwd = ops::row_forward(r.fn);
      const ex::Program& bwd = ops::row_backward(r.fn);
      // the derivative's inputs: x[, y], grad; the row's backward: x[, y], g
      const ex::Program d = ex::derivative(r.name, fwd);
      for (double x : {0.4, 1.3, 2.6}) {
        const double xs = r.positive() ? x : x - 1.1, y = 0.7, s = 1.5, g = 0.75;
        std::vector<double> in = {xs};
        if (r.arity == ew::Arity::Binary) in.push_back(y);
        in.push_back(g);
        std::vector<double> sc;
        if (r.arity != ew::Arity::Unary) sc.push_back(s);
        for (size_t k = 0; k < bwd.outputs.size(); ++k)
          CHECK(close(eval_at(bwd, in, sc, k), eval_at(d, in, sc, k), 1e-12));
      }
    }
  }

  TEST_CASE("rows: every elementwise op fuses under compile from its row, no list to edit") {
    for (const ew::Row& r : ew::kRows) {
      const std::string name = ew::op_name(r);
      if (name.empty()) continue;
      CAPTURE(name);
      auto f = ops::pointwise_formula(name);
      REQUIRE(f != nullptr);
      CHECK(f->tensors == r.tensor_operands());
      CHECK(f->program.inputs.size() == size_t(r.tensor_operands()));
    }
    CHECK(ops::pointwise_formula("mt::matmul") == nullptr);
  }

  TEST_CASE("pointwise_op: softplus from one line: values, schema, derived backward, gradcheck") {
    auto softplus = pointwise_op("pw_test::softplus", "log1p(exp(x))");
    CHECK(softplus.schema() == "pw_test::softplus(Tensor x) -> Tensor");
    CHECK(softplus.backward_body() == "_t1 = exp(x);\ngrad_x = (grad / (1 + _t1)) * _t1;\n");
    Tensor x = from_vector(std::vector<double>{-2.0, 0.0, 3.0});
    Tensor y = softplus(x);
    CHECK(close(y.select(0, 0).item<double>(), std::log1p(std::exp(-2.0))));
    // through the dispatcher by name, like any op
    Tensor z = call<Tensor>("pw_test::softplus", x);
    CHECK(max_diff(y, z) == 0);
    Tensor a = randn({4, 3}, {.dtype = DType::Float64}).requires_grad_();
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return softplus(in[0]); }, {a}));
    CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return softplus(in[0]); }, {a}));
  }

  TEST_CASE("pointwise_op: two inputs broadcast, a scalar, float32 and a written backward") {
    auto lerp =
        pointwise_op("pw_test::lerp", "x + w * (y - x)", {.inputs = {"x", "y"}, .scalars = {"w"}});
    CHECK(lerp.schema() == "pw_test::lerp(Tensor x, Tensor y, float w) -> Tensor");
    Tensor x = randn({3, 1}, {.dtype = DType::Float64}).requires_grad_();
    Tensor y = randn({4}, {.dtype = DType::Float64}).requires_grad_();
    Tensor out = lerp(x, y, 0.25);
    CHECK(out.sizes() == Shape{3, 4});
    CHECK(max_diff(out, x + (y - x) * 0.25) < 1e-12);
    CHECK(
        gradcheck([&](const std::vector<Tensor>& in) { return lerp(in[0], in[1], 0.25); }, {x, y}));
    Tensor f = randn({5}).requires_grad_();
    Tensor gf = mt::grad({sum(lerp(f, f, 0.5))}, {f})[0];
    CHECK(gf.dtype() == DType::Float32);
    CHECK(max_diff(gf, ones_like(f)) < 1e-6);

    // a straight-through floor: the forward has no derivative, the written backward is used
    auto step = pointwise_op("pw_test::step", "floor(x)", {.backward = {"grad"}});
    Tensor s = from_vector(std::vector<float>{0.5f, 1.5f}).requires_grad_();
    CHECK(max_diff(mt::grad({sum(step(s))}, {s})[0], ones_like(s)) == 0);
    CHECK_THROWS_WITH_AS(pointwise_op("pw_test::step2", "floor(x)", {.backward = {"grad", "grad"}}),
                         "[pw_test::step2] PointwiseOpOptions::backward has 2 expressions, but the "
                         "op has 1 input (x); give one gradient expression per input",
                         mt::Error);
  }

  TEST_CASE("pointwise_op: bad expressions and calls are errors naming the op") {
    CHECK_THROWS_WITH_AS(pointwise_op("pw_test::bad", "foo(x)"),
                         doctest::Contains("unknown function 'foo'"), mt::Error);
    CHECK_THROWS_WITH_AS(pointwise_op("pw_test::bad", "pow(x)"),
                         doctest::Contains("pow takes 2 arguments, got 1"), mt::Error);
    CHECK_THROWS_WITH_AS(pointwise_op("pw_test::bad", "ceil(x) * x"),
                         doctest::Contains("[pw_test::bad] ceil() has no derivative"), mt::Error);
    CHECK_NOTHROW(pointwise_op("pw_test::flat", "ceil(x) * x", {.differentiable = false}));
    auto flat = pointwise_op("pw_test::flat", "ceil(x) * x", {.differentiable = false});
    Tensor x = randn({2}).requires_grad_();
    CHECK_THROWS_WITH_AS(flat(x),
                         "[pw_test::flat] was defined with .differentiable = false, but its input "
                         "'x' requires grad; detach it (x.detach()), or define the op with a "
                         "backward",
                         mt::Error);
    CHECK(flat(x.detach()).sizes() == x.sizes());
    auto two = pointwise_op("pw_test::two", "x * y");
    CHECK_THROWS_WITH_AS(two(x), "[pw_test::two] takes 2 tensors (x, y), got 1", mt::Error);
    CHECK_THROWS_WITH_AS(pointwise_op("bad name", "x"), doctest::Contains("bad name"), mt::Error);
  }

  TEST_CASE("pointwise_op: fake in, fake out; dropped handle removes the op and its formula") {
    {
      auto sq = pointwise_op("pw_test::sq", "x * x");
      FakeMode fake;
      Tensor f = empty({1 << 20, 64});
      Tensor out = sq(f);
      CHECK(out.is_fake());
      CHECK(out.sizes() == Shape{1 << 20, 64});
      CHECK(ops::pointwise_formula("pw_test::sq") != nullptr);
    }
    CHECK(ops::pointwise_formula("pw_test::sq") == nullptr);
    CHECK_FALSE(dispatcher().find("pw_test::sq").has_value());
  }

  TEST_CASE("pointwise_op: mt::compile fuses it with the built-in ops around it") {
    auto softplus = pointwise_op("pw_test::softplus2", "log1p(exp(x))");
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{mt::tanh(softplus(mt::mul(in[0], 2.0)))};
    };
    Tensor x = randn({64});
    Graph g = capture(fn, {x});
    auto groups = fusion_groups(g);
    REQUIRE(groups.size() == 1);
    CHECK(groups[0].name == "fused_mul_softplus2_tanh");
    CHECK(groups[0].body == "t0 = i0 * s0;\nt1 = log1p(exp(t0));\nt2 = tanh(t1);\nreturn t2;");
    // Note [CPU fusion]: by default a CPU group the plan can prepare (contiguous inputs)
    // fuses at any size, another one (a strided input) from 4096 elements up
    Compiled c = mt::compile(fn);
    CHECK(max_diff(c({x})[0], fn({x})[0]) < 1e-6);
    CHECK(c.num_fusion_groups() == 1);
    Tensor strided = randn({16, 4}).t();
    CHECK(max_diff(c({strided})[0], fn({strided})[0]) < 1e-6);
    CHECK(c.num_fusion_groups() == 0);
    Tensor big = randn({128, 64}).t();
    CHECK(max_diff(c({big})[0], fn({big})[0]) < 1e-6);
    CHECK(c.num_fusion_groups() == 1);
    Compiled forced = mt::compile(fn, {.fuse = true});
    CHECK(max_diff(forced({x})[0], fn({x})[0]) < 1e-6);
    CHECK(forced.num_fusion_groups() == 1);
    Compiled never = mt::compile(fn, {.fuse = false});
    CHECK(max_diff(never({big})[0], fn({big})[0]) == 0);
    CHECK(never.num_fusion_groups() == 0);
  }

  TEST_CASE("pointwise_op: a failed second definition leaves the first one's fusion formula") {
    auto sq = pointwise_op("pw_test::sq2", "x * x");
    CHECK_THROWS_AS(pointwise_op("pw_test::sq2", "x * x * x"), mt::Error);
    CHECK(ops::pointwise_formula("pw_test::sq2") != nullptr);
    // pow's exponent: zero gradient at base 0 for a non-negative exponent, not 0 * log(0)
    auto pw = pointwise_op("pw_test::pow2", "pow(x, y)", {.inputs = {"x", "y"}});
    Tensor b = from_vector(std::vector<double>{0.0, 2.0}).requires_grad_();
    Tensor e = from_vector(std::vector<double>{2.0, 3.0}).requires_grad_();
    auto g = mt::grad({sum(pw(b, e))}, {b, e});
    CHECK(g[1].select(0, 0).item<double>() == 0.0);
    CHECK(close(g[1].select(0, 1).item<double>(), 8.0 * std::log(2.0)));
  }
}

TEST_SUITE("tile evaluator") {
  TEST_CASE("tile evaluator: every row's forward, float and double, every tail length") {
    // Note [Tile evaluation]: per-node loops over a tile, constants filled once, outputs
    // written in place; each length from 1 to past a tile, against the row's float64 functor.
    for (const ew::Row& r : ew::kRows) {
      if (!r.f64) continue;
      CAPTURE(r.name);
      const ex::Program& p = ops::row_forward(r.fn);
      const double s = 0.75;
      const int64_t n = ex::kChunk + 3;
      std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)),
          want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        x[size_t(i)] = r.positive() ? 0.1 + 0.01 * double(i % 97) : -2.0 + 0.037 * double(i % 113);
        y[size_t(i)] = 0.5 + 0.013 * double(i % 89);
        want[size_t(i)] = r.f64(x[size_t(i)], y[size_t(i)], s);
      }
      std::vector<float> xf(x.begin(), x.end()), yf(y.begin(), y.end());
      const double sd[] = {s};
      const float sf[] = {float(s)};
      ex::TileEvaluator<double> ed(p, sd);
      ex::TileEvaluator<float> ef(p, sf);
      for (int64_t len :
           {int64_t(1), int64_t(7), int64_t(16), int64_t(255), ex::kChunk - 1, ex::kChunk}) {
        std::vector<double> od(static_cast<size_t>(len));
        std::vector<float> of(static_cast<size_t>(len));
        const double* ind[] = {x.data(), y.data()};
        const float* inf[] = {xf.data(), yf.data()};
        double* outd[] = {od.data()};
        float* outf[] = {of.data()};
        ed.run(ind, outd, len);
        ef.run(inf, outf, len);
        for (int64_t i = 0; i < len; ++i) {
          CHECK(close(od[size_t(i)], want[size_t(i)], 1e-12));
          CHECK(close(double(of[size_t(i)]), want[size_t(i)], 2e-6));
        }
      }
    }
  }

  TEST_CASE("tile evaluator: shared temporaries, two outputs, an output that is an input") {
    const ex::Program p = ex::parse("t", "t = x * y; a = t + 1; b = t * t; c = x;", {"x", "y"}, {},
                                    {"a", "b", "c"}, false);
    std::vector<float> x = {1, 2, 3, 4, 5}, y = {2, 2, 2, 2, 2}, a(5), b(5), c(5);
    const float* in[] = {x.data(), y.data()};
    float* out[] = {a.data(), b.data(), c.data()};
    ex::TileEvaluator<float> ev(p, nullptr);
    ev.run(in, out, 5);
    for (size_t i = 0; i < 5; ++i) {
      CHECK(a[i] == x[i] * 2 + 1);
      CHECK(b[i] == x[i] * 2 * x[i] * 2);
      CHECK(c[i] == x[i]);
    }
  }

  // Every exponent's edges (both signs, three mantissas), subnormals, zeros, exp's overflow and
  // underflow edges, +-inf and NaN: the inputs of the exp loops' bitwise cases below.
  std::vector<float> exp_edge_floats() {
    std::vector<float> xs;
    for (int e = -149; e <= 128; ++e)
      for (float m : {1.0f, 1.3f, 1.999f})
        xs.push_back(std::ldexp(m, e)), xs.push_back(-std::ldexp(m, e));
    for (float v : {0.0f, -0.0f, 88.7f, -88.7f, 103.9f, -103.9f, INFINITY, -INFINITY, NAN, -NAN})
      xs.push_back(v);
    return xs;
  }

  // Note [Tile evaluation]'s schedule: the cases below would pass with one buffer a node
  // too; num_buffers() shows the sharing, the values show it changed nothing.
  TEST_CASE("tile evaluator: exp(-x) runs as one loop, bitwise the exp of the negation") {
    const std::vector<float> xs = exp_edge_floats();
    const auto n = int64_t(xs.size());
    std::vector<float> neg(xs.size()), want(xs.size()), got(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) neg[i] = -xs[i];
    const ex::Program fused = parse1("exp(-x)", {"x"});
    const ex::Program plain = parse1("exp(t)", {"t"});
    const cpu::VecIsa had = cpu::set_vec_exp_isa(cpu::VecIsa::Avx512);
    for (cpu::VecIsa isa : {cpu::VecIsa::Avx512, cpu::VecIsa::Avx2, cpu::VecIsa::Portable}) {
      if (int(isa) > int(cpu::vec_exp_widest())) continue;  // not on this CPU
      cpu::set_vec_exp_isa(isa);
      CAPTURE(int(isa));
      cpu::exp_f32_loop(want.data(), neg.data(), n);
      cpu::exp_neg_f32_loop(got.data(), xs.data(), n);
      CHECK(std::memcmp(got.data(), want.data(), xs.size() * sizeof(float)) == 0);
      ex::TileEvaluator<float> ef(fused, nullptr), ep(plain, nullptr);
      CHECK(ef.num_buffers() == 0);  // no pass for -x: the exp reads x, writes the output
      for (int64_t at = 0; at < n; at += ex::kChunk) {
        const int64_t len = std::min(ex::kChunk, n - at);
        const float* in_f[] = {xs.data() + at};
        const float* in_p[] = {neg.data() + at};
        float* out_f[] = {got.data() + at};
        float* out_p[] = {want.data() + at};
        ef.run(in_f, out_f, len);
        ep.run(in_p, out_p, len);
      }
      CHECK(std::memcmp(got.data(), want.data(), xs.size() * sizeof(float)) == 0);
    }
    cpu::set_vec_exp_isa(had);
    // float64, and a negation something else reads too (then it is a node of its own)
    const ex::Program both =
        ex::parse("t", "t = -x; a = exp(t); b = t * 2;", {"x"}, {}, {"a", "b"}, false);
    ex::TileEvaluator<double> ed(both, nullptr);
    CHECK(ed.num_buffers() == 1);
    const double x[] = {-1.5, 0.0, 2.25, 700.0};
    double a[4], b[4];
    const double* in[] = {x};
    double* out[] = {a, b};
    ed.run(in, out, 4);
    for (size_t i = 0; i < 4; ++i) {
      CHECK(a[i] == std::exp(-x[i]));
      CHECK(b[i] == -x[i] * 2);
    }
  }

  TEST_CASE("tile evaluator: x / (c + exp(-x)) runs as one loop, bitwise its three loops") {
    // Note [Tile evaluation]: the SiLU users write, fused; against the same nodes with the
    // exp also an output, which keeps them three loops. Every exponent's edges, subnormals,
    // zeros, +-inf and NaN, each tail length below a tile, c a literal and a scalar.
    const std::vector<float> xs = exp_edge_floats();
    const auto n = int64_t(xs.size());
    const ex::Program lit = parse1("x / (1.0f + expf(-x))", {"x"});
    const ex::Program three =
        ex::parse("t", "t = expf(-x); e = t; y = x / (1.0f + t);", {"x"}, {}, {"y", "e"}, false);
    const ex::Program scal = ex::parse("t", "x / (s + exp(-x))", {"x"}, {"s"}, {"out"}, false);
    const float s[] = {0.5f};
    const cpu::VecIsa had = cpu::set_vec_exp_isa(cpu::VecIsa::Avx512);
    for (cpu::VecIsa isa : {cpu::VecIsa::Avx512, cpu::VecIsa::Avx2, cpu::VecIsa::Portable}) {
      if (int(isa) > int(cpu::vec_exp_widest())) continue;  // not on this CPU
      cpu::set_vec_exp_isa(isa);
      CAPTURE(int(isa));
      ex::TileEvaluator<float> ef(lit, nullptr), ep(three, nullptr), es(scal, s);
      CHECK(ef.num_buffers() == 0);  // one loop: x in, the output written
      CHECK(es.num_buffers() == 0);
      CHECK(ep.num_buffers() == 2);  // e kept for its output, the add's own
      std::vector<float> got(xs.size()), want(xs.size()), e(xs.size()), sc(xs.size());
      for (int64_t len : {int64_t(1), int64_t(15), int64_t(17), int64_t(63), int64_t(65),
                          int64_t(255), ex::kChunk - 1, ex::kChunk}) {
        CAPTURE(len);
        for (int64_t at = 0; at < n; at += len) {
          const int64_t m = std::min(len, n - at);
          const float* in[] = {xs.data() + at};
          float* out_f[] = {got.data() + at};
          float* out_p[] = {want.data() + at, e.data() + at};
          float* out_s[] = {sc.data() + at};
          ef.run(in, out_f, m);
          ep.run(in, out_p, m);
          es.run(in, out_s, m);
        }
        size_t same = 0;
        for (size_t i = 0; i < xs.size(); ++i) {
          const float ws = xs[i] / (0.5f + e[i]);  // the scalar's three loops, one element
          same += std::isnan(want[i]) ? std::isnan(got[i]) && std::isnan(sc[i]) && std::isnan(ws)
                                      : std::memcmp(&got[i], &want[i], sizeof(float)) == 0 &&
                                            std::memcmp(&sc[i], &ws, sizeof(float)) == 0;
        }
        CHECK(same == xs.size());
      }
    }
    cpu::set_vec_exp_isa(had);
    // float64 keeps its nodes' loops
    ex::TileEvaluator<double> ed(lit, nullptr);
    CHECK(ed.num_buffers() == 1);
    const double x[] = {-1.5, 0.0, 2.25, -700.0};
    double y[4];
    const double* in[] = {x};
    double* out[] = {y};
    ed.run(in, out, 4);
    for (size_t i = 0; i < 4; ++i) CHECK(y[i] == x[i] / (1.0 + std::exp(-x[i])));
  }

  TEST_CASE("tile evaluator: sigmoid(x * c) and exp(c * x) run as one loop, bitwise two loops") {
    // Note [Tile evaluation]: the product folded into the call's loop; against the same nodes
    // with the product also an output, which keeps them two loops. c a literal and a scalar.
    const std::vector<float> xs = exp_edge_floats();
    const auto n = int64_t(xs.size());
    const float s[] = {-1.25f};
    struct Form {
      const char* fused;
      const char* apart;
      bool scalar;
    };
    const Form forms[] = {
        {"sigmoid(x * 0.75)", "p = x * 0.75; q = p; y = sigmoid(p);", false},
        {"exp(s * x)", "p = s * x; q = p; y = exp(p);", true},
        {"sigmoid(x * s)", "p = x * s; q = p; y = sigmoid(p);", true},
    };
    const cpu::VecIsa had = cpu::set_vec_exp_isa(cpu::VecIsa::Avx512);
    for (const Form& f : forms) {
      CAPTURE(f.fused);
      const std::vector<std::string> scalars =
          f.scalar ? std::vector<std::string>{"s"} : std::vector<std::string>{};
      const ex::Program fused = ex::parse("t", f.fused, {"x"}, scalars, {"out"}, false);
      const ex::Program apart = ex::parse("t", f.apart, {"x"}, scalars, {"y", "q"}, false);
      for (cpu::VecIsa isa : {cpu::VecIsa::Avx512, cpu::VecIsa::Avx2, cpu::VecIsa::Portable}) {
        if (int(isa) > int(cpu::vec_exp_widest())) continue;  // not on this CPU
        cpu::set_vec_exp_isa(isa);
        CAPTURE(int(isa));
        ex::TileEvaluator<float> ef(fused, s), ea(apart, s);
        CHECK(ef.num_buffers() == 0);  // one loop: x in, the output written
        std::vector<float> got(xs.size()), want(xs.size()), q(xs.size());
        for (int64_t len : {int64_t(1), int64_t(15), int64_t(17), int64_t(255), ex::kChunk}) {
          CAPTURE(len);
          for (int64_t at = 0; at < n; at += len) {
            const int64_t m = std::min(len, n - at);
            const float* in[] = {xs.data() + at};
            float* out_f[] = {got.data() + at};
            float* out_a[] = {want.data() + at, q.data() + at};
            ef.run(in, out_f, m);
            ea.run(in, out_a, m);
          }
          size_t same = 0;
          for (size_t i = 0; i < xs.size(); ++i)
            same += std::isnan(want[i]) ? std::isnan(got[i])
                                        : std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
          CHECK(same == xs.size());
        }
      }
    }
    cpu::set_vec_exp_isa(had);
    // float64 keeps its nodes' loops
    const ex::Program lit = parse1("sigmoid(x * 0.75)", {"x"});
    ex::TileEvaluator<double> ed(lit, nullptr);
    CHECK(ed.num_buffers() == 1);
    const double x[] = {-1.5, 0.0, 2.25, -700.0};
    double y[4];
    const double* in[] = {x};
    double* out[] = {y};
    ed.run(in, out, 4);
    for (size_t i = 0; i < 4; ++i) CHECK(y[i] == 1.0 / (1.0 + std::exp(-(x[i] * 0.75))));
  }

  TEST_CASE("tile evaluator: a chain of any length runs in one buffer, over many tiles") {
    // 40 statements reassigning one temporary: 40 nodes alive one after another
    std::string body = "t = x;\n";
    for (int i = 0; i < 40; ++i) body += i % 2 ? "t = sigmoid(t) * y;\n" : "t = t * 1.0001 + y;\n";
    body += "out = t - x;";
    const ex::Program p = ex::parse("chain", body, {"x", "y"}, {}, {"out"}, false);
    ex::TileEvaluator<float> ev(p, nullptr);
    CHECK(ev.num_buffers() == 1);  // each step writes over the value it reads last
    const int64_t n = 3 * ex::kChunk + 5;
    std::vector<float> x(static_cast<size_t>(n)), y(x.size()), got(x.size());
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = 0.01f * float(i % 301) - 1.5f;
      y[size_t(i)] = 0.5f + 0.001f * float(i % 7);
    }
    for (int64_t at = 0; at < n; at += ex::kChunk) {  // one evaluator, tile after tile
      const float* in[] = {x.data() + at, y.data() + at};
      float* out[] = {got.data() + at};
      ev.run(in, out, std::min(ex::kChunk, n - at));
    }
    for (int64_t i = 0; i < n; ++i) {  // the same nodes one element at a time, in float
      float t = x[size_t(i)];
      for (int k = 0; k < 40; ++k) {
        const float yi = y[size_t(i)];
        if (k % 2) {
          const float sg = 1.0f / (1.0f + std::exp(-t));
          t = sg * yi;
        } else {
          const float m = t * 1.0001f;
          t = m + yi;
        }
      }
      CHECK(close(double(got[size_t(i)]), double(t - x[size_t(i)]), 1e-5));
    }
  }

  TEST_CASE(
      "tile evaluator: uniform nodes once, a scalar on either side, uniform branches and "
      "outputs, nodes no output needs") {
    const ex::Program p = ex::parse(
        "t",
        "k = exp(s) * -2.0; dead = log(x); a = k - x; b = x / k; c = x > 0 ? s : -1.0; d = s * 3;",
        {"x"}, {"s"}, {"a", "b", "c", "d"}, false);
    for (double s : {0.5, -1.25}) {
      CAPTURE(s);
      const double sd[] = {s};
      const float sf[] = {float(s)};
      ex::TileEvaluator<double> ed(p, sd);
      ex::TileEvaluator<float> ef(p, sf);
      CHECK(ed.num_buffers() == 3);  // ?:'s condition and its uniform branches (filled once)
      const std::vector<double> x = {-2.0, -0.0, 0.0, 0.75, 3.0};
      const std::vector<float> xf(x.begin(), x.end());
      std::vector<double> a(5), b(5), c(5), d(5);
      std::vector<float> af(5), bf(5), cf(5), df(5);
      const double* ind[] = {x.data()};
      double* outd[] = {a.data(), b.data(), c.data(), d.data()};
      const float* inf[] = {xf.data()};
      float* outf[] = {af.data(), bf.data(), cf.data(), df.data()};
      for (int tile = 0; tile < 2; ++tile) {  // the filled branches outlive a tile
        ed.run(ind, outd, 5);
        ef.run(inf, outf, 5);
      }
      const double k = std::exp(s) * -2.0;
      const float kf = std::exp(float(s)) * -2.0f;
      for (size_t i = 0; i < 5; ++i) {
        CHECK(a[i] == k - x[i]);
        CHECK(b[i] == x[i] / k);
        CHECK(c[i] == (x[i] > 0 ? s : -1.0));
        CHECK(d[i] == s * 3);
        CHECK(close(double(af[i]), double(kf - xf[i]), 1e-6));
        CHECK(close(double(bf[i]), double(xf[i] / kf), 1e-6));
        CHECK(cf[i] == (xf[i] > 0 ? float(s) : -1.0f));
        CHECK(df[i] == float(s) * 3);
      }
    }
  }

  TEST_CASE("tile evaluator: jit::pointwise on several threads gives one thread's values") {
    const jit::Pointwise f = jit::pointwise("tile_threads", "x / (1.0f + expf(-x)) + y * 0.5");
    const Tensor x = randn({(1 << 18) + 77}), y = randn({(1 << 18) + 77});
    const int threads = cpu::num_threads();
    cpu::set_num_threads(1);
    const Tensor one = f(x, y);
    cpu::set_num_threads(2);
    const Tensor two = f(x, y);
    cpu::set_num_threads(threads);
    CHECK(max_diff(one, two) == 0);
    CHECK(max_diff(one, mt::silu(x) + y * 0.5) < 1e-5);
  }
}
