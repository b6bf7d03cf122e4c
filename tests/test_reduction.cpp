// SPDX-License-Identifier: MIT
// The reduction builder (mt::jit::reduction) and mt::reduction_op: values against the
// built-in ops on the CPU for every floating dtype and every dims/keepdim shape class,
// broadcasting, strided inputs, empty tensors and tails; fake outputs; every error; every
// generated CUDA kernel compiled to CUBIN; the op's derived backward under gradcheck.
// Cases marked "(gpu)" run on cuda:0 and are skipped where there is none.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "helpers.h"
#include "kernels/jit/nvrtc.h"
#include "minitensor.h"

using namespace mt;

namespace {

constexpr DType kFloats[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// How close a dtype's result is expected to be (16-bit outputs round once).
double tolerance(DType t) {
  return t == DType::Float64   ? 1e-10
         : t == DType::Float32 ? 1e-5
         : t == DType::Float16 ? 2e-3
                               : 1.6e-2;
}

// |a - b| <= tol * (1 + |b|) everywhere, in float64 (equal infinities and NaN against NaN
// match); same shape.
bool near(const Tensor& a, const Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) return false;
  const std::vector<double> va = a.cpu().to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> vb = b.cpu().to(DType::Float64).contiguous().to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i]) || std::isinf(vb[i])) {
      if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
    } else if (!(std::abs(va[i] - vb[i]) <= tol * (1 + std::abs(vb[i])))) {
      return false;
    }
  }
  return true;
}

// Reference of a reduce op in float64: x's reduced dims moved last, each row folded.
Tensor fold_reference(const Tensor& x, std::vector<int64_t> dims, bool keepdim,
                      double (*f)(double, double), double init) {
  const Tensor x64 = x.to(DType::Float64);
  const std::vector<int64_t> wrapped = jit::reduction_dims("ref", x.sizes(), dims);
  const Shape out_shape = jit::reduction_shape(x.sizes(), wrapped, keepdim);
  Shape perm;
  auto red = [&](int64_t d) {
    return wrapped.empty() || std::find(wrapped.begin(), wrapped.end(), d) != wrapped.end();
  };
  int64_t len = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!red(d)) perm.push_back(d);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (red(d)) perm.push_back(d), len *= x.size(d);
  const std::vector<double> v = x64.permute(perm).contiguous().to_vector<double>();
  int64_t rows = 1;
  for (int64_t d = 0; d < int64_t(out_shape.size()); ++d) rows *= out_shape[size_t(d)];
  std::vector<double> out(size_t(rows), init);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < len; ++i) out[size_t(r)] = f(out[size_t(r)], v[size_t(r * len + i)]);
  return from_vector(out, out_shape, {.dtype = DType::Float64});
}

double fmax_nan(double a, double b) { return std::isnan(a) || a > b ? a : b; }
double fmin_nan(double a, double b) { return std::isnan(a) || a < b ? a : b; }
double times(double a, double b) { return a * b; }

}  // namespace

TEST_SUITE("reduction") {
  TEST_CASE(
      "reduction: sum of squares, mean, L2 norm, max, min and prod against mt:: ops, "
      "every floating dtype") {
    const auto sumsq = jit::reduction({.name = "sumsq", .map = "x * x"});
    const auto mean_ = jit::reduction({.name = "mean_", .map = "x", .post = "acc / n"});
    const auto l2 = jit::reduction({.name = "l2", .map = "x * x", .post = "sqrt(acc)"});
    const auto mx = jit::reduction({.name = "mx", .map = "x", .reduce = "max"});
    const auto mn = jit::reduction({.name = "mn", .map = "x", .reduce = "min"});
    const auto pr = jit::reduction({.name = "pr", .map = "1 + x / 8", .reduce = "prod"});
    for (DType t : kFloats) {
      CAPTURE(t);
      const Tensor x = randn({6, 37}).to(t);
      const Tensor x64 = x.to(DType::Float64);
      const double tol = tolerance(t);
      CHECK(sumsq(x).dtype() == t);
      CHECK(sumsq(x).sizes() == Shape{});
      CHECK(near(sumsq(x), sum(x64 * x64), tol));
      CHECK(near(mean_(x), mean(x64), tol));
      CHECK(near(l2(x), sqrt(sum(x64 * x64)), tol));
      CHECK(near(mx(x), max(x64), tol));
      CHECK(near(mn(x), -max(-x64), tol));
      CHECK(near(pr(x), fold_reference(x64 / 8 + 1, {}, false, times, 1), tol));
      const int64_t dim1[] = {1};
      CHECK(near(sumsq.call({&x, 1}, dim1), sum(x64 * x64, {1}), tol));
      CHECK(near(mx.call({&x, 1}, dim1, true), std::get<0>(max(x64, 1, true)), tol));
    }
    // integer inputs reduce in float32
    const Tensor i = from_vector(std::vector<int64_t>{1, 2, 3});
    CHECK(sumsq(i).dtype() == DType::Float32);
    CHECK(sumsq(i).item<double>() == 14);
  }

  TEST_CASE("reduction: every dims/keepdim shape class, tails and long rows, against mt::sum") {
    const auto sumsq = jit::reduction({.name = "sumsq", .map = "x * x"});
    const auto mx = jit::reduction({.name = "mx", .map = "x", .reduce = "max"});
    const auto mn = jit::reduction({.name = "mn", .map = "x", .reduce = "min"});
    const std::vector<std::vector<int64_t>> dim_sets = {{},     {0},     {1},    {2},      {-1},
                                                        {0, 2}, {1, -1}, {0, 1}, {0, 1, 2}};
    // short rows (several a tile), rows of one tile, rows of several tiles with a tail
    for (const Shape& s : {Shape{3, 4, 5}, Shape{2, 3, 1023}, Shape{2, 1, 2500}, Shape{5, 1, 1}}) {
      const Tensor x = randn(s, {.dtype = DType::Float64});
      for (const auto& dims : dim_sets)
        for (bool keepdim : {false, true}) {
          CAPTURE(s);
          CAPTURE(fmt::format("{}", fmt::join(dims, ",")));
          CAPTURE(keepdim);
          const Tensor got = sumsq.call({&x, 1}, dims, keepdim);
          CHECK(got.sizes() == sum(x, dims, keepdim).sizes());
          CHECK(near(got, sum(x * x, dims, keepdim), 1e-12));
          CHECK(near(mx.call({&x, 1}, dims, keepdim),
                     fold_reference(x, dims, keepdim, fmax_nan, -INFINITY), 0));
          CHECK(near(mn.call({&x, 1}, dims, keepdim),
                     fold_reference(x, dims, keepdim, fmin_nan, INFINITY), 0));
        }
    }
    // a 0-d input: no dims, or dim 0 / -1, reduce its one element
    const Tensor s = from_vector(std::vector<double>{3.0}).reshape({});
    const int64_t d0[] = {-1};
    CHECK(sumsq(s).item<double>() == 9);
    CHECK(sumsq.call({&s, 1}, d0, true).sizes() == Shape{});
    // columns read in place (dim 0 of a matrix): many rows a run, a tile of a long row a
    // run, past the blocks of 128 rows
    for (const Shape& s2 : {Shape{300, 7}, Shape{130, 1100}, Shape{3, 260, 2, 5}}) {
      CAPTURE(s2);
      const Tensor x = randn(s2, {.dtype = DType::Float64});
      const int64_t d0[] = {0}, d1[] = {1};
      CHECK(near(sumsq.call({&x, 1}, d0), sum(x * x, {0}), 1e-12));
      CHECK(near(mx.call({&x, 1}, d1, true), fold_reference(x, {1}, true, fmax_nan, -INFINITY), 0));
    }
    // lengths around the tile and the blocked order's eight lanes
    for (int64_t n : {1, 7, 8, 9, 1023, 1024, 1025, 4097}) {
      CAPTURE(n);
      const Tensor x = randn({n}, {.dtype = DType::Float64});
      CHECK(near(sumsq(x), sum(x * x), 1e-12));
      CHECK(near(mx(x), max(x), 0));
    }
  }

  TEST_CASE("reduction: a float32 sum accumulates in a blocked, pairwise order") {
    // 2^22 values of 0.1f: a plain float running sum ends near 2^22 * 0.1 * (1 +- 5%); the
    // blocked and pairwise order keeps the error near a float's rounding
    const Tensor x = full({int64_t(1) << 22}, 0.1);
    const auto s = jit::reduction({.name = "s", .map = "x"});
    const double exact = double(0.1f) * double(int64_t(1) << 22);
    CHECK(std::abs(s(x).item<double>() - exact) / exact < 1e-6);
  }

  TEST_CASE("reduction: inputs broadcast, strided views, NaN in max and min") {
    const auto dot = jit::reduction({.name = "dot", .map = "x * y"});
    const Tensor x = randn({3, 1}, {.dtype = DType::Float64});
    const Tensor y = randn({4}, {.dtype = DType::Float64});
    const Tensor xy[] = {x, y};
    const int64_t d0[] = {0};
    CHECK(dot.call(xy, d0).sizes() == Shape{4});
    CHECK(near(dot.call(xy, d0), sum(x * y, {0}), 1e-12));
    CHECK(near(dot(x, y), sum(x * y), 1e-12));
    // float32 and float64 promote to float64
    const Tensor xf = x.to(DType::Float32);
    CHECK(dot(xf, y).dtype() == DType::Float64);
    // a transposed view, a strided slice and an expanded view read in place
    const Tensor m = randn({5, 8}, {.dtype = DType::Float64});
    const auto sumsq = jit::reduction({.name = "sumsq", .map = "x * x"});
    const Tensor views[] = {m.t(), m.slice(1, 0, 8, 3), m.select(1, 2).unsqueeze(1).expand({5, 6})};
    for (const Tensor& v : views) {
      const int64_t d1[] = {1};
      CHECK(near(sumsq.call({&v, 1}, d1), sum(v * v, {1}), 1e-12));
    }
    // max and min propagate NaN, as mt::max does
    const Tensor n = from_vector(std::vector<float>{1, NAN, 3, 2}, {2, 2});
    const auto mx = jit::reduction({.name = "mx", .map = "x", .reduce = "max"});
    const auto mn = jit::reduction({.name = "mn", .map = "x", .reduce = "min"});
    const int64_t d1[] = {1};
    const std::vector<float> by_row = mx.call({&n, 1}, d1).to_vector<float>();
    CHECK(std::isnan(by_row[0]));
    CHECK(by_row[1] == 3);
    CHECK(std::isnan(mn(n).item<double>()));
  }

  TEST_CASE("reduction: empty tensors give post(identity) with n = 0, an identity can be given") {
    const Tensor e = randn({0, 3});
    const int64_t d0[] = {0}, d1[] = {1};
    const auto s = jit::reduction({.name = "s", .map = "x"});
    CHECK(s.call({&e, 1}, d0).sizes() == Shape{3});
    CHECK(max_diff(s.call({&e, 1}, d0), zeros({3})) == 0);
    CHECK(s.call({&e, 1}, d1).sizes() == Shape{0});
    CHECK(s(e).item<double>() == 0);
    const auto mean_ = jit::reduction({.name = "mean_", .map = "x", .post = "acc / n"});
    CHECK(std::isnan(mean_(e).item<double>()));
    const auto pr = jit::reduction({.name = "pr", .map = "x", .reduce = "prod"});
    CHECK(pr(e).item<double>() == 1);
    const auto mx = jit::reduction({.name = "mx", .map = "x", .reduce = "max"});
    CHECK(mx(e).item<double>() == -INFINITY);
    CHECK(jit::reduction({.name = "mn", .map = "x", .reduce = "min"})(e).item<double>() ==
          INFINITY);
    // a given identity starts every row, as CuPy's ReductionKernel does
    const auto relu_max =
        jit::reduction({.name = "relu_max", .map = "x", .reduce = "max", .identity = 0.0});
    CHECK(relu_max.identity() == 0);
    CHECK(relu_max(from_vector(std::vector<float>{-3, -1})).item<double>() == 0);
    CHECK(relu_max(e).item<double>() == 0);
  }

  TEST_CASE("reduction: fake inputs give a fake output of the reduced shape") {
    const auto sumsq = jit::reduction({.name = "sumsq", .map = "x * y"});
    const Tensor x = fake_empty({4, 5, 6}, {.dtype = DType::Float16});
    const Tensor y = fake_empty({6}, {.dtype = DType::Float32});
    const Tensor xy[] = {x, y};
    const int64_t d[] = {0, 2};
    const Tensor out = sumsq.call(xy, d, true);
    CHECK(out.is_fake());
    CHECK(out.sizes() == Shape{1, 5, 1});
    CHECK(out.dtype() == DType::Float32);
    // on a CUDA device too, without a GPU
    const Tensor g = fake_empty({4, 5}, {.device = Device("cuda:0")});
    const Tensor gy[] = {g, fake_empty({5}, {.device = Device("cuda:0")})};
    CHECK(sumsq.call(gy).device() == Device("cuda:0"));
    CHECK(sumsq.call(gy).sizes() == Shape{});
  }

  TEST_CASE("reduction: bad specs and calls are errors naming the reduction and the fix") {
    CHECK(error_of([] { jit::reduction({.name = "r", .map = "x", .reduce = "mean"}); }) ==
          "[jit] reduction 'r': unknown reduce op 'mean'; use \"sum\", \"prod\", \"max\" or "
          "\"min\"");
    CHECK(error_of([] { jit::reduction({.name = "", .map = "x"}); }) ==
          "[jit] reduction: the spec has no name; set .name (it names the kernels and their "
          "errors)");
    CHECK(error_of([] { jit::reduction({.name = "a b", .map = "x"}); }) ==
          "[jit] reduction: the name 'a b' is not an identifier; a name is letters, digits and "
          "_, not starting with a digit, or such names joined by '::' (\"sumsq\", "
          "\"demo::l2\"): it names the generated kernels");
    CHECK(error_of([] { jit::reduction({.name = "r", .map = "x * foo(x)"}); }) ==
          "[jit] reduction 'r' (map expression): unknown function 'foo'; the functions are abs, "
          "ceil, cos, erf, exp, expm1, floor, log, log1p, max, min, pow, relu, rsqrt, sigmoid, "
          "sign, sin, sqrt, tanh (and their C spellings: expf, fabsf, fmaxf, ...) (line 1, "
          "column 5)\n  x * foo(x)\n      ^");
    CHECK(error_of([] { jit::reduction({.name = "r", .map = "x", .post = "acc / m"}); }) ==
          "[jit] reduction 'r' (post expression): unknown name 'm'; the inputs are [acc, n], "
          "the scalars [] (line 1, column 7)\n  acc / m\n        ^");
    CHECK(error_of([] { jit::reduction({.name = "r", .map = "x * y", .inputs = {"x"}}); }) ==
          "[jit] reduction 'r' (map expression): unknown name 'y'; the inputs are [x], the "
          "scalars [] (line 1, column 5)\n  x * y\n      ^");
    CHECK(error_of([] { jit::reduction({.name = "r", .map = "a+b+c+d+e+f+g+h+i"}); }) ==
          "[jit] reduction 'r': at most 8 inputs, got 9; combine some into one tensor first");

    const auto r = jit::reduction({.name = "r", .map = "x * y"});
    const Tensor x = randn({2, 3}), y = randn({3});
    const Tensor xy[] = {x, y};
    const int64_t out_of_range[] = {2}, twice[] = {1, -1};
    CHECK(error_of([&] { r.call(xy, out_of_range); }) ==
          "[r] dim 2 is out of range for the inputs' broadcast shape [2, 3] (2 dims); pass dims "
          "in [-2, 1]");
    CHECK(error_of([&] { r.call(xy, twice); }) ==
          "[r] dim 1 appears more than once in dims; list each dim once");
    CHECK(error_of([&] { r(x); }) == "[r] takes 2 input tensors (x, y), got 1");
    CHECK(error_of([&] { r(x, Tensor()); }) == "[r] input 2 (y) is an undefined Tensor");
    CHECK(error_of([&] { r(x, randn({4})); }).starts_with("[r] "));
    const Tensor on_gpu = fake_empty({3}, {.device = Device("cuda:0")});
    CHECK(error_of([&] { r(x, on_gpu); }) ==
          "[r] the inputs are on different devices (x has cpu, y has cuda:0); move one with .to()");
    CHECK(error_of([] { jit::Reduction().call({}); }) ==
          "[jit] Reduction: this one is empty (default-constructed); assign it the result of "
          "mt::jit::reduction(spec) before using it");
  }

  TEST_CASE("reduction: the generated source, and every kernel compiles to CUBIN" *
            doctest::skip(no_nvrtc())) {
    const auto r = jit::reduction({.name = "demo::l2", .map = "x * y", .post = "sqrt(acc)"});
    const std::string& src = r.cuda_source();
    CHECK(src.find("struct rd_demo__l2 {") != std::string::npos);
    CHECK(src.find("// map:\n//   x * y\n// post:\n//   sqrt(acc)\n") != std::string::npos);
    CHECK(r.name_expression(DType::BFloat16, jit::ReductionVariant::RowsVec) ==
          "reduce_rows<mt::BFloat16, rd_demo__l2, 2, true>");
    CHECK(r.name_expression(DType::Float32, jit::ReductionVariant::Final) ==
          "reduce_final<float, rd_demo__l2>");
    const auto names = r.name_expressions();
    CHECK(names.size() == 28);  // 4 dtypes x 7 variants
    for (int arch : cubin_test_archs()) {
      CAPTURE(arch);
      const auto c = jit::compile(src, "demo__l2.reduce.cu", names, jit::default_options(), arch);
      CHECK(c.lowered_names.size() == names.size());
      CHECK(c.binary.size() > 1000);
    }
  }

  TEST_CASE("reduction (gpu): values on cuda match the CPU for every dtype, variant and shape" *
            doctest::skip(no_gpu())) {
    const auto sumsq = jit::reduction({.name = "sumsq", .map = "x * x"});
    const auto mean_ = jit::reduction({.name = "mean_", .map = "x", .post = "acc / n"});
    const auto mx = jit::reduction({.name = "mx", .map = "x", .reduce = "max"});
    const auto dot = jit::reduction({.name = "dot", .map = "x * y"});
    const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
        {{1 << 20}, {}},        // a full reduction: the split in one launch, 16-byte loads
        {{(1 << 20) + 3}, {}},  // the split with a tail, plain loads
        {{64, 1000}, {1}},      // one block a row
        {{64, 1024}, {-1}},     // one block a row, 16-byte loads
        {{300, 7}, {0}},        // a non-trailing dim: permuted first
        {{4, 0}, {1}},          // empty rows: the identity
        {{3, 70000}, {1}}};     // few long rows: split
    for (DType t : kFloats)
      for (const auto& c : cases) {
        const auto& [shape, dims] = c;
        CAPTURE(t);
        CAPTURE(c.first);  // not shape: clang 15 does not let CAPTURE's lambda take a binding
        const Tensor x = randn(shape).to(t);
        const Tensor g = x.to(kGpu);
        const double tol = tolerance(t) * 4;
        for (const jit::Reduction* r : {&sumsq, &mean_, &mx}) {
          CAPTURE(r->spec().name);
          const Tensor on_gpu = r->call({&g, 1}, dims);
          CHECK(on_gpu.device() == kGpu);
          CHECK(near(on_gpu, r->call({&x, 1}, dims), tol));
        }
        const Tensor y = randn({shape.back()}).to(t);
        const Tensor cpu_in[] = {x, y}, gpu_in[] = {g, y.to(kGpu)};
        CHECK(near(dot.call(gpu_in, dims), dot.call(cpu_in, dims), tol));
      }
    // a transposed view on the GPU
    const Tensor m = randn({33, 65}).to(kGpu).t();
    const int64_t d1[] = {1};
    CHECK(near(sumsq.call({&m, 1}, d1), sumsq.call(std::vector<Tensor>{m.cpu()}, d1), 1e-5));
  }

  TEST_CASE(
      "reduction (gpu): a split row is one launch, the same bits call after call and "
      "replayed in a CUDA graph" *
      doctest::skip(no_gpu())) {
    const auto sumsq = jit::reduction({.name = "sumsq", .map = "x * x"});
    const auto mx = jit::reduction({.name = "mx", .map = "x", .reduce = "max"});
    const Tensor x = randn({1 << 22}).to(kGpu), rows = randn({3, 70001}).to(kGpu);
    const int64_t d1[] = {1};
    const float first = sumsq(x).item<float>();
    const std::vector<float> first_rows = sumsq.call({&rows, 1}, d1).cpu().to_vector<float>();
    CHECK(std::abs(first - sum(x.cpu() * x.cpu()).item<float>()) <= 1e-4f * first);
    for (int i = 0; i < 4; ++i) {  // each launch's last block set its counts back to 0
      CHECK(sumsq(x).item<float>() == first);
      CHECK(sumsq.call({&rows, 1}, d1).cpu().to_vector<float>() == first_rows);
      CHECK(mx(x).item<float>() == max(x.cpu()).item<float>());
    }
    cuda::Graph g;
    g.capture_begin(kGpu.index);
    const Tensor y = sumsq(x);
    g.capture_end();
    CHECK(g.num_nodes() == 1);  // one kernel: no second pass, no memset
    for (int i = 0; i < 3; ++i) {
      g.replay();
      CHECK(y.item<float>() == first);
    }
  }

  TEST_CASE("reduction_op: a sum of squares as an op: schema, values, by name, gradcheck") {
    auto sumsq = reduction_op("rd_test::sumsq", {.map = "x * x"});
    CHECK(sumsq.schema() == "rd_test::sumsq(Tensor x, int[] dim=[], bool keepdim=False) -> Tensor");
    CHECK(sumsq.backward_bodies() ==
          std::vector<std::string>{"_t2 = grad * x;\nout = _t2 + _t2;\n"});
    const Tensor x = randn({4, 3}, {.dtype = DType::Float64}).requires_grad_();
    CHECK(near(sumsq(x), sum(x * x), 1e-12));
    const Tensor by_name = call<Tensor>("rd_test::sumsq", x, std::vector<int64_t>{1}, true);
    CHECK(near(by_name, sum(x * x, {1}, true), 1e-12));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return sumsq(in[0]); }, {x}));
    CHECK(
        gradcheck([&](const std::vector<Tensor>& in) { return sumsq.call(in, {0}, false); }, {x}));
    CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return sumsq.call(in, {1}, true); },
                        {x}));
    // the gradient of a float32 input is float32
    const Tensor f = randn({5}).requires_grad_();
    const Tensor gf = mt::grad({sumsq(f)}, {f})[0];
    CHECK(gf.dtype() == DType::Float32);
    CHECK(near(gf, f.detach() * 2, 1e-6));
    // the fake kernel
    {
      FakeMode fake;
      const Tensor fx = empty({7, 2});
      CHECK(sumsq.call({&fx, 1}, {0}).sizes() == Shape{2});
    }
  }

  TEST_CASE("reduction_op: mean and L2 norm through post, two broadcast inputs, gradcheck") {
    auto mean_ = reduction_op("rd_test::mean", {.map = "x", .post = "acc / n"});
    auto l2 = reduction_op("rd_test::l2", {.map = "x * x", .post = "sqrt(acc)"});
    auto wdist = reduction_op("rd_test::wdist", {.map = "w * (x - y) * (x - y)"});
    const Tensor x = randn({3, 4}, {.dtype = DType::Float64}).requires_grad_();
    CHECK(near(mean_.call({&x, 1}, {1}), mean(x, {1}), 1e-12));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return mean_.call(in, {1}, true); }, {x}));
    CHECK(near(l2(x), sqrt(sum(x * x)), 1e-12));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return l2.call(in, {0}); }, {x}));
    CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return l2(in[0]); }, {x}));
    const Tensor w = rand({4}, {.dtype = DType::Float64}).requires_grad_();
    const Tensor y = randn({3, 1}, {.dtype = DType::Float64}).requires_grad_();
    CHECK(
        wdist.schema() ==
        "rd_test::wdist(Tensor w, Tensor x, Tensor y, int[] dim=[], bool keepdim=False) -> Tensor");
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return wdist.call(in, {0}); }, {w, x, y}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return wdist(in[0], in[1], in[2]); },
                    {w, x, y}));
  }

  // The gradient of op over `dims` at x (float64 values), as a flat vector.
  std::vector<double> grad_at(const ReductionOp& op, const std::vector<double>& x, const Shape& s,
                              std::vector<int64_t> dims = {}, const char* device = "cpu") {
    const Tensor t =
        from_vector(x, s, {.dtype = DType::Float64}).to(Device(device)).requires_grad_();
    const Tensor out = op.call({&t, 1}, dims, false);
    return mt::grad({sum(out)}, {t})[0].cpu().contiguous().to_vector<double>();
  }

  TEST_CASE("reduction_op: max and min split the gradient evenly among ties, as torch's amax") {
    auto mx = reduction_op("rd_test::mx", {.map = "x", .reduce = "max"});
    auto mn = reduction_op("rd_test::mn", {.map = "x", .reduce = "min"});
    CHECK(grad_at(mx, {1, 5, 2, 5}, {4}) == std::vector<double>{0, 0.5, 0, 0.5});
    CHECK(grad_at(mx, {7, 7, 7}, {3}) == std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3});
    CHECK(grad_at(mn, {3, 1, 3, 0, 2, 0}, {2, 3}, {1}) ==
          std::vector<double>{0, 1, 0, 0.5, 0, 0.5});
    CHECK(grad_at(mn, {3, 1, 3, 0, 2, 0}, {2, 3}, {0}) == std::vector<double>{0, 1, 0, 1, 0, 1});
    // a group whose max is NaN gets NaN gradients (torch: the same); the other row does not
    const std::vector<double> g = grad_at(mx, {1, NAN, 2, 4, 3, 2}, {2, 3}, {1});
    CHECK((std::isnan(g[0]) && std::isnan(g[1]) && std::isnan(g[2])));
    CHECK(std::vector<double>(g.begin() + 3, g.end()) == std::vector<double>{1, 0, 0});
    // through a map of two broadcast inputs and a post, and a second derivative
    auto dist =
        reduction_op("rd_test::dist", {.map = "abs(x - y)", .reduce = "max", .post = "acc * acc"});
    auto peak = reduction_op("rd_test::peak", {.map = "x * x * x", .reduce = "min"});
    const Tensor x = randn({3, 5}, {.dtype = DType::Float64}).requires_grad_();
    const Tensor y = randn({5}, {.dtype = DType::Float64}).requires_grad_();
    CHECK(near(dist(x, y), max(abs(x - y)) * max(abs(x - y)), 1e-12));
    CHECK(
        gradcheck([&](const std::vector<Tensor>& in) { return dist.call(in, {1}, true); }, {x, y}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return dist(in[0], in[1]); }, {x, y}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return mx.call(in, {0}); }, {x}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return mn(in[0]); }, {x}));
    CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return peak.call(in, {1}); }, {x}));
    // the op harness's checks: schema, fake against real, autograd registration, gradcheck,
    // compile against eager
    for (const ReductionOp* op : {&mx, &mn}) {
      const OpCheckReport r =
          opcheck(dispatcher().find_or_throw(op->name()),
                  {Stack{randn({4, 3}, {.dtype = DType::Float64}), std::vector<int64_t>{1}, false},
                   Stack{randn({6}, {.dtype = DType::Float64})}});
      CHECK_MESSAGE(r.ok(), r.str());
    }
  }

  TEST_CASE("reduction_op: prod's gradient is the product of the others, zeros as in torch") {
    auto pr = reduction_op("rd_test::pr", {.map = "x", .reduce = "prod"});
    CHECK(grad_at(pr, {2, 3, 4}, {3}) == std::vector<double>{12, 8, 6});
    CHECK(grad_at(pr, {2, 0, 4}, {3}) == std::vector<double>{0, 8, 0});  // one zero
    CHECK(grad_at(pr, {0, 3, 0}, {3}) == std::vector<double>{0, 0, 0});  // two
    CHECK(grad_at(pr, {2, 0, 4, 1, 2, 3}, {2, 3}, {1}) == std::vector<double>{0, 8, 0, 6, 3, 2});
    CHECK(grad_at(pr, {2, 0, 4, 1, 2, 3}, {2, 3}, {0}) == std::vector<double>{1, 2, 3, 2, 0, 4});
    // a product is a polynomial: central differences are exact at zeros too
    const Tensor one_zero =
        from_vector(std::vector<double>{1.5, 0, -2, 0.5}, {2, 2}, {.dtype = DType::Float64})
            .requires_grad_();
    const Tensor two_zeros =
        from_vector(std::vector<double>{0, 0, -2, 0.5}, {4}, {.dtype = DType::Float64})
            .requires_grad_();
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return pr(in[0]); }, {one_zero}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return pr.call(in, {1}); }, {one_zero}));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return pr(in[0]); }, {two_zeros}));
    // a map, a post and a second derivative (exact where a group has no zero)
    auto lp = reduction_op("rd_test::logprod",
                           {.map = "1 + x * x", .reduce = "prod", .post = "log(acc)"});
    const Tensor x = randn({3, 4}, {.dtype = DType::Float64}).requires_grad_();
    CHECK(near(lp.call({&x, 1}, {1}), sum(log(x * x + 1.0), {1}), 1e-12));
    CHECK(gradcheck([&](const std::vector<Tensor>& in) { return lp.call(in, {1}, true); }, {x}));
    CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return lp.call(in, {0}); }, {x}));
    CHECK(gradgradcheck([&](const std::vector<Tensor>& in) { return pr.call(in, {1}); }, {x}));
    const OpCheckReport r =
        opcheck(dispatcher().find_or_throw(pr.name()),
                {Stack{randn({3, 4}, {.dtype = DType::Float64}), std::vector<int64_t>{0}, true},
                 Stack{from_vector(std::vector<double>{1.5, 0, -2, 0.5, 3, 0}, {2, 3},
                                   {.dtype = DType::Float64}),
                       std::vector<int64_t>{1}, false}});
    CHECK_MESSAGE(r.ok(), r.str());
  }

  TEST_CASE("reduction_op (gpu): max, min and prod gradients on cuda match the CPU's" *
            doctest::skip(no_gpu())) {
    auto mx = reduction_op("rd_test::mx", {.map = "x", .reduce = "max"});
    auto mn = reduction_op("rd_test::mn", {.map = "x", .reduce = "min"});
    auto pr = reduction_op("rd_test::pr", {.map = "x", .reduce = "prod"});
    const std::vector<double> ties = {3, 1, 3, 0, 2, 0}, zeros = {2, 0, 4, 1, 2, 3};
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, {0}, {1}}) {
      CAPTURE(dims.size());
      CHECK(grad_at(mx, ties, {2, 3}, dims, "cuda") == grad_at(mx, ties, {2, 3}, dims));
      CHECK(grad_at(mn, ties, {2, 3}, dims, "cuda") == grad_at(mn, ties, {2, 3}, dims));
      CHECK(grad_at(pr, zeros, {2, 3}, dims, "cuda") == grad_at(pr, zeros, {2, 3}, dims));
    }
    const Tensor x = randn({64, 33}).to(kGpu).requires_grad_();
    const Tensor xc = x.detach().cpu().requires_grad_();
    for (const ReductionOp* op : {&mx, &mn}) {
      const Tensor gg = mt::grad({sum(op->call({&x, 1}, {1}))}, {x})[0];
      const Tensor gc = mt::grad({sum(op->call({&xc, 1}, {1}))}, {xc})[0];
      CHECK(near(gg, gc, 0));
    }
  }

  TEST_CASE("reduction_op: an op defined with .differentiable = false says so") {
    auto mx = reduction_op("rd_test::mx", {.map = "x", .reduce = "max"}, {.differentiable = false});
    const Tensor x = from_vector(std::vector<float>{1, 5, 2});
    CHECK(mx(x).item<double>() == 5);
    const Tensor xg = x.detach().requires_grad_();
    CHECK(error_of([&] { mx(xg); }) ==
          "[rd_test::mx] was defined with .differentiable = false, but its input 'x' requires "
          "grad; detach it (x.detach()), or define the op without that option to get a derived "
          "backward");
    CHECK(error_of([] { reduction_op("rd_test::many", {.map = "a+b+c+d+e+f+g"}); }) ==
          "[rd_test::many] a differentiable reduction takes at most 6 inputs (a gradient kernel "
          "takes them all, the output's gradient and its result: 8 operands), got 7; combine "
          "inputs, or define it with mt::ReductionOpOptions{.differentiable = false}");
    CHECK(error_of([] {
            reduction_op("rd_test::fl", {.map = "floor(x)"});
          }).starts_with("[rd_test::fl] floor() has no derivative"));
  }
}
