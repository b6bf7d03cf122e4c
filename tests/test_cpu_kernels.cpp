// SPDX-License-Identifier: MIT
// The CPU kernels (kernels/cpu) against naive float64 references written here, on 0-d,
// empty, odd and threading-sized shapes, broadcast and non-contiguous views, and every
// dtype each kernel takes.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/math.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/ops/silu/silu.h"
#include "kernels/ops/softmax/softmax.h"
#include "minitensor.h"
#include "tests/helpers.h"

using namespace mt;
using cpu::BinaryOp;
using cpu::UnaryOp;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// Tolerances for one result computed in the dtype (16-bit ones compute in float32).
struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t) {
  switch (t) {
    case DType::Float32:
      return {2e-5, 1e-6};
    case DType::Float64:
      return {1e-12, 1e-12};
    case DType::Float16:
      return {2e-3, 1e-3};
    case DType::BFloat16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

// Runs fn with the kernels on `n` threads, restoring the count after.
struct Threads {
  int saved = cpu::num_threads();
  explicit Threads(int n) { cpu::set_num_threads(n); }
  ~Threads() { cpu::set_num_threads(saved); }
};

enum class Layout { Contiguous, Transposed, Strided };
const Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};

std::vector<double> uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(size_t(std::max<int64_t>(n, 0)));
  for (double& x : v) x = d(rng);
  return v;
}

// A tensor of `shape` and dtype with values in [lo, hi), laid out as asked: transposed
// (the last two dims of a contiguous base swapped) or strided (every other element of
// a base twice as long in the last dim).
Tensor make(const Shape& shape, DType dt, Layout layout = Layout::Contiguous, double lo = -3,
            double hi = 3, uint64_t seed = 1) {
  const int64_t nd = int64_t(shape.size());
  if (layout == Layout::Transposed && nd < 2) layout = Layout::Strided;
  if (layout == Layout::Strided && nd < 1) layout = Layout::Contiguous;
  Shape base = shape;
  if (layout == Layout::Transposed) std::swap(base[nd - 1], base[nd - 2]);
  if (layout == Layout::Strided) base[nd - 1] *= 2;
  auto vals = uniform(shape_numel(base), lo, hi, seed);
  if (dt == DType::Int64)
    for (double& v : vals) v = std::round(v);
  if (dt == DType::Bool)
    for (double& v : vals) v = v > 0;
  Tensor t = from_vector(vals, base).to(dt);
  if (layout == Layout::Transposed) return t.transpose(-1, -2);
  if (layout == Layout::Strided) return t.slice(-1, 0, base[nd - 1], 2);
  return t;
}

Tensor bools(const std::vector<int64_t>& v) { return from_vector(v).to(DType::Bool); }

// got (any dtype and layout) against want, elementwise; reports the first mismatch.
void check_close(const Tensor& got, const std::vector<double>& want, Tol tol,
                 const std::string& what) {
  auto g = vals(got);
  REQUIRE_MESSAGE(g.size() == want.size(), what);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    double x = g[i], y = want[i];
    bool ok = (std::isnan(x) && std::isnan(y)) || x == y ||
              std::abs(x - y) <= tol.atol + tol.rtol * std::abs(y);
    if (!ok && bad++ == 0) first = int64_t(i);
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " differ; first at ", first, ": got ",
                first >= 0 ? g[size_t(first)] : 0.0, ", want ",
                first >= 0 ? want[size_t(first)] : 0.0);
}

// Element i (row-major in `out`) of an input of shape `in` broadcast to `out`.
int64_t bcast_index(const Shape& out, const Shape& in, int64_t i) {
  int64_t idx = 0, mul = 1;
  const int64_t lead = int64_t(out.size()) - int64_t(in.size());
  for (int64_t d = int64_t(out.size()) - 1; d >= 0; --d) {
    int64_t c = i % out[d];
    i /= out[d];
    int64_t id = d - lead;
    if (id < 0) continue;
    if (in[id] != 1) idx += c * mul;
    mul *= in[id];
  }
  return idx;
}

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

// The unary rows of the elementwise table with a CPU functor: what cpu::unary computes.
std::vector<ew::Row> unary_rows() {
  std::vector<ew::Row> rows;
  for (const ew::Row& r : ew::kRows)
    if (r.arity == ew::Arity::Unary && r.f64) rows.push_back(r);
  return rows;
}

const Shape kShapes[] = {{},     {0},     {1},       {7},       {33},
                         {1025}, {70001}, {3, 5, 7}, {2, 0, 3}, {129, 257}};

}  // namespace

TEST_CASE(
    "cpu unary: every row of the table matches its float64 functor on every float dtype, "
    "shape and layout") {
  Threads th(2);
  CHECK(unary_rows().size() >= 11);
  for (const ew::Row& r : unary_rows()) {
    const bool positive = r.positive();
    for (DType dt : kFloatTypes)
      for (const Shape& shape : kShapes)
        for (Layout layout : kLayouts) {
          Tensor x = make(shape, dt, layout, positive ? 0.01 : -6, positive ? 9 : 6, 7);
          Tensor out = empty(shape, {.dtype = dt});
          cpu::unary(r.fn, x, out);
          std::vector<double> want;
          for (double v : vals(x)) want.push_back(r.f64(v, 0, 0));
          check_close(out, want, tol_for(dt),
                      fmt::format("{} {} {} layout {}", r.name, dt, shape, int(layout)));
        }
  }
}

TEST_CASE("cpu unary: the int rows compute int64 in int64, the others refuse an int64 out") {
  Tensor i = from_vector<int64_t>({-3, 0, 5, -7});
  for (const ew::Row& r : unary_rows()) {
    CAPTURE(r.name);
    Tensor o = empty({4}, {.dtype = DType::Int64});
    if (!r.int_ok()) {
      CHECK_THROWS_WITH_AS(cpu::unary(r.fn, i, o),
                           fmt::format("[{}] needs a floating output, got int64; integer and bool "
                                       "inputs promote to float32 (pass a float32 out)",
                                       r.name)
                               .c_str(),
                           Error);
      continue;
    }
    cpu::unary(r.fn, i, o);
    std::vector<double> want;
    for (double v : vals(i)) want.push_back(r.f64(v, 0, 0));
    CHECK(vals(o) == want);
  }
}

TEST_CASE("cpu gelu: the tanh approximation at known points") {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated here in long double.
  auto ref = [](long double x) {
    const long double k = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
    return 0.5L * x * (1.0L + std::tanh(k * (x + 0.044715L * x * x * x)));
  };
  const std::vector<double> xs = {-6, -3, -1, -0.5, 0, 1e-3, 0.5, 1, 2, 3, 10};
  Tensor x = from_vector(xs);
  Tensor out = empty({int64_t(xs.size())}, {.dtype = DType::Float64});
  cpu::unary(UnaryOp::Gelu, x, out);
  auto got = vals(out);
  for (size_t k = 0; k < xs.size(); ++k) {
    CAPTURE(xs[k]);
    CHECK(got[k] == doctest::Approx(double(ref(xs[k]))).epsilon(1e-14));
  }
  CHECK(got[7] == doctest::Approx(0.8411919906082768).epsilon(1e-12));  // gelu(1)
  CHECK(got[4] == 0.0);
}

TEST_CASE("cpu unary: in place, into a strided out, and from another dtype") {
  Tensor x = make({33, 17}, DType::Float32, Layout::Contiguous, -4, 4, 3);
  auto xv = vals(x);
  cpu::unary(UnaryOp::Silu, x, x);  // out is the input
  std::vector<double> want;
  for (double v : xv) want.push_back(v * sigmoid_ref(v));
  check_close(x, want, tol_for(DType::Float32), "silu in place");

  Tensor y = make({40, 30}, DType::Float64, Layout::Strided, -2, 2, 4);
  Tensor out = empty({30, 40}).transpose(0, 1);  // float32, transposed
  cpu::unary(UnaryOp::Exp, y, out);
  want.clear();
  for (double v : vals(y)) want.push_back(std::exp(v));
  check_close(out, want, tol_for(DType::Float32), "exp float64 -> transposed float32");

  Tensor i = make({9}, DType::Int64, Layout::Contiguous, -5, 5, 5);
  Tensor f = empty({9});
  cpu::unary(UnaryOp::Sigmoid, i, f);  // int64 in, float32 out (the caller promoted)
  want.clear();
  for (double v : vals(i)) want.push_back(sigmoid_ref(v));
  check_close(f, want, tol_for(DType::Float32), "sigmoid int64 -> float32");
}

TEST_CASE("cpu unary: int64 and bool where meaningful, clear errors elsewhere") {
  Tensor i = from_vector<int64_t>({-3, 0, 5, -9223372036854775807LL});
  Tensor o = empty({4}, {.dtype = DType::Int64});
  cpu::unary(UnaryOp::Neg, i, o);
  CHECK(o.to_vector<int64_t>() == std::vector<int64_t>{3, 0, -5, 9223372036854775807LL});
  cpu::unary(UnaryOp::Abs, i, o);
  CHECK(o.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 5, 9223372036854775807LL});
  cpu::unary(UnaryOp::Relu, i, o);
  CHECK(o.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 5, 0});
  Tensor b = bools({1, 0});
  Tensor bo = empty({2}, {.dtype = DType::Bool});
  cpu::unary(UnaryOp::Abs, b, bo);
  CHECK(bo.to_vector<bool>() == std::vector<bool>{true, false});
  cpu::unary(UnaryOp::Relu, b, bo);
  CHECK(bo.to_vector<bool>() == std::vector<bool>{true, false});
  CHECK_THROWS_WITH_AS(cpu::unary(UnaryOp::Exp, i, o),
                       "[exp] needs a floating output, got int64; integer and bool inputs "
                       "promote to float32 (pass a float32 out)",
                       Error);
  CHECK_THROWS_WITH_AS(cpu::unary(UnaryOp::Neg, b, bo),
                       "[neg] negation of a bool tensor is not supported; use logical_not", Error);
}

TEST_CASE("cpu exp: within a few ulp of libm from underflow to overflow, inf and nan kept") {
  double worst = 0;
  for (int i = -1100000; i <= 1100000; ++i) {
    float x = float(i) * 8.1e-5f;  // [-89.1, 89.1]
    double want = std::exp(double(x));
    float got = cpu::exp_f32(x);
    if (want > 1e-37 && want < 3e38)
      worst = std::max(worst, std::abs(got - want) / want);
    else if (want <= 1e-37)
      CHECK(std::abs(double(got) - want) < 1.2e-38);
  }
  CHECK(worst < 4e-7);  // about 3 ulp of float
  CHECK(cpu::exp_f32(89.0f) == INFINITY);
  CHECK(cpu::exp_f32(INFINITY) == INFINITY);
  CHECK(cpu::exp_f32(-INFINITY) == 0.0f);
  CHECK(cpu::exp_f32(-1000.0f) == 0.0f);
  CHECK(std::isnan(cpu::exp_f32(NAN)));
  CHECK(std::isnan(cpu::exp_f32(-NAN)));
  CHECK(cpu::exp_f32(0.0f) == 1.0f);
}

// Error of a float32 result in units in the last place of the float64 reference rounded to
// float32 (the spacing of its binade; 2^-149 for subnormal results).
static double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  if (float(want) == got) return 0;
  const double a = std::abs(double(float(want)));
  if (std::isinf(a)) return INFINITY;
  int e = 0;
  std::frexp(a, &e);
  const double ulp = a < double(std::numeric_limits<float>::min()) ? std::ldexp(1.0, -149)
                                                                   : std::ldexp(1.0, e - 24);
  return std::abs(double(got) - want) / ulp;
}

// Every exponent of float32, both signs, with steps through the mantissas, subnormals and
// the specials.
// Every MT_SWEEP_STEP-th float32 bit pattern of both signs (default 4099; 1 sweeps every
// float, which takes minutes), with the special values first and last, so that they go
// through both the AVX-512 loops' wide bodies and their one-vector tails.
static std::vector<float> float_sweep() {
  const float specials[] = {0.0f,
                            -0.0f,
                            INFINITY,
                            -INFINITY,
                            NAN,
                            88.72f,
                            -88.72f,
                            89.0f,
                            -103.9f,
                            -104.0f,
                            -108.0f,
                            -150.0f,
                            -1e10f,
                            1e10f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min()};
  const char* env = std::getenv("MT_SWEEP_STEP");
  const uint32_t step = env && std::atoi(env) > 0 ? uint32_t(std::atoi(env)) : 4099u;
  std::vector<float> xs(std::begin(specials), std::end(specials));
  for (uint32_t bits = 0; bits < 0x7f800000u; bits += step) {
    const float f = std::bit_cast<float>(bits);
    xs.push_back(f);
    xs.push_back(-f);
  }
  xs.insert(xs.end(), std::begin(specials), std::end(specials));
  return xs;
}

TEST_CASE(
    "cpu exp, sigmoid, silu, silu_backward: the float32 loops against float64 over every "
    "exponent, subnormals, +-inf and NaN, AVX-512, AVX2 and portable") {
  const std::vector<float> xs = float_sweep();
  const int64_t n = int64_t(xs.size());
  std::vector<float> y(xs.size()), ones(xs.size(), 1.0f);
  struct Op {
    const char* name;
    void (*loop)(float*, const float*, int64_t);
    double (*ref)(double);
    // Bound on the AVX-512 loop's error: measured 0.90 (0.80 with Cephes' polynomial, one
    // degree higher), 2.42 and 2.57 here, 0.92, 2.75 and 2.85 over every 97th float
    // (MT_SWEEP_STEP=97, half a minute; every bound of this case holds there too). Sigmoid
    // and silu in the form before Note [SiLU over 2^fl + m]: 2.14 and 2.69 here; sigmoid
    // as 2^fl rc (before s / (s + m'), Note [AVX2 exp and sigmoid]): 2.42, and 2.65.
    double avx512_ulp;
    // The AVX2 loop's (Note [AVX2 exp and sigmoid]), subnormal results too; 0: none, the
    // portable loop runs there. Measured 0.90 and 2.16 here, 0.92 and 2.36 over every 97th
    // float, on a Xeon with AVX-512 capped at AVX2 (the portable loops: 0.97 and 2.0 where
    // |result| >= 1e-36).
    double avx2_ulp;
  };
  const Op ops[] = {
      {"exp", cpu::exp_f32_loop, [](double x) { return std::exp(x); }, 1, 1},
      {"sigmoid", cpu::sigmoid_f32_loop, [](double x) { return 1 / (1 + std::exp(-x)); }, 3, 2.5},
      {"silu", cpu::silu_f32_loop, [](double x) { return x / (1 + std::exp(-x)); }, 3.5, 0},
  };
  // Every level of loops the CPU has, widest first (vec: the AVX-512 loops).
  const cpu::VecIsa had = cpu::set_vec_exp_isa(cpu::VecIsa::Avx512);
  for (cpu::VecIsa isa : {cpu::VecIsa::Avx512, cpu::VecIsa::Avx2, cpu::VecIsa::Portable}) {
    if (int(isa) > int(cpu::vec_exp_widest())) continue;
    cpu::set_vec_exp_isa(isa);
    REQUIRE(cpu::vec_exp_isa() == isa);
    const bool vec = isa == cpu::VecIsa::Avx512;
    const char* isa_name = vec ? "AVX-512" : isa == cpu::VecIsa::Avx2 ? "AVX2" : "portable";
    CAPTURE(std::string(isa_name));
    for (const Op& op : ops) {
      CAPTURE(std::string(op.name));
      op.loop(y.data(), xs.data(), n);
      double worst = 0, worst_normal = 0;
      float at = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want = op.ref(double(xs[i]));  // NaN for NaN, and for silu(-inf)
        const double e = ulp_error(y[i], want);
        if (e > worst) worst = e, at = xs[i];
        if (std::abs(want) >= 1e-36 || want == 0) worst_normal = std::max(worst_normal, e);
      }
      MESSAGE(
          fmt::format("{} {}: max error {:.3g} ulp (at x = {}), {:.3g} ulp where |result| >= "
                      "1e-36",
                      op.name, isa_name, worst, at, worst_normal));
      if (vec)
        CHECK(worst <= op.avx512_ulp);  // subnormal results too
      else if (isa == cpu::VecIsa::Avx2 && op.avx2_ulp > 0)
        CHECK(worst <= op.avx2_ulp);  // subnormal results too
      else
        CHECK(worst_normal <= 4);  // the portable loops flush results below about 1e-36
    }
    // The fused backward, g = 1: the error against the size of the terms of
    // s (1 + x (1 - s)), which cancel near x = -1.28.
    // GELU as x sigmoid(w), w = 2 sqrt(2/pi) (x + 0.044715 x^3): rounding w to float moves
    // the result by x s (1 - s) |w| 2^-24 whatever the loop does, so the error is counted in
    // units of 2^-24 (|gelu| + |x| s (1 - s) |w|); where |w| <= 2, in ulp as above.
    cpu::gelu_f32_loop(y.data(), xs.data(), n);
    double gelu_worst = 0, gelu_near0 = 0;
    float gelu_at = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double x = xs[i];
      if (!std::isfinite(x)) {  // the table's tanh form: NaN, inf, and NaN at -inf
        const double want = ew::row(ew::Fn::Gelu).f64(x, 0, 0);
        CHECK((std::isnan(want) ? std::isnan(y[i]) : double(y[i]) == want));
        continue;
      }
      // The reference as x sigmoid(w) in float64: the tanh form's 1 + tanh(u) cancels
      // in float64 too once x < -6 or so.
      const double w = 1.5957691216057308 * (x + 0.044715 * x * x * x);
      const double s = 1 / (1 + std::exp(-w)), want = x * s;
      const double scale = std::abs(want) + std::abs(x) * s * (1 - s) * std::abs(w);
      const double e = std::abs(double(y[i]) - want) / (scale * 0x1p-24);
      if (scale > 1e-36 && e > gelu_worst) gelu_worst = e, gelu_at = xs[i];
      if (std::abs(w) <= 2) gelu_near0 = std::max(gelu_near0, ulp_error(y[i], want));
    }
    MESSAGE(
        fmt::format("gelu {}: max error {:.3g} units of 2^-24 (|gelu| + |x| s (1 - s) |w|) "
                    "(at x = {}); {:.3g} ulp where |w| <= 2",
                    isa_name, gelu_worst, gelu_at, gelu_near0));
    if (vec) CHECK(gelu_worst <= 4);       // the portable 1 + tanh(u) cancels for x < 0
    CHECK(gelu_near0 <= (vec ? 3.5 : 6));  // measured 2.59 (3.33 every 97th float) and 5.02

    // The backward with g = 1, and with a small, a tiny, a huge and a negative g (a loop that
    // scaled g by a tiny factor before the last step would lose a small g at large x). With
    // g != 1 only where s is a normal float: below, float s itself has lost bits, which a
    // huge g then shows (both loops form g s).
    double worst = 0, worst_g = 0;
    for (float gv : {1.0f, 0x1p-20f, 1e-30f, 1e30f, -3.0f}) {
      std::vector<float> g(xs.size(), gv);
      cpu::silu_backward_f32_loop(y.data(), g.data(), xs.data(), n);
      CAPTURE(gv);
      for (size_t i = 0; i < xs.size(); ++i) {
        const double x = xs[i], s = 1 / (1 + std::exp(-x));
        if (std::isinf(x)) {
          CHECK(std::isnan(y[i]));  // inf * 0 in x (1 - s) or in s (1 + x)
          continue;
        }
        const double want = gv * s * (1 + x * (1 - s));
        const double scale = std::abs(gv) * s * (1 + std::abs(x) * (1 - s));
        if (std::isnan(x)) {
          CHECK(std::isnan(y[i]));
        } else if (scale >= 1e-36 && scale <= 1e38 &&
                   (gv == 1.0f || s >= double(std::numeric_limits<float>::min()))) {
          const double e = std::abs(double(y[i]) - want) / (scale * 0x1p-24);
          (gv == 1.0f ? worst : worst_g) = std::max(gv == 1.0f ? worst : worst_g, e);
        }
      }
    }
    MESSAGE(
        fmt::format("silu_backward {}: max error {:.3g} ulp of s (1 + |x| (1 - s)), {:.3g} "
                    "with g in 2^-20, 1e-30, 1e30, -3",
                    isa_name, worst, worst_g));
    // Measured 3.79 (4.10 every 97th float) and 16.3: the portable 1 - s cancels for x > 0.
    CHECK(worst <= (vec ? 4.5 : 20));
    CHECK(worst_g <= (vec ? 5.5 : 20));  // measured 4.38 (4.76) and 17.4: g s is one rounding more
  }
  cpu::set_vec_exp_isa(had);
}

TEST_CASE("cpu exp: the AVX2 loops give the AVX-512 loops' values bitwise, where both run") {
  // Note [AVX2 exp and sigmoid]: the same reduction and polynomial, and 2^n as two factors
  // rounds as vscalefps does; exp(-x) and exp(x c) too (the tile evaluator's folded forms).
  if (cpu::vec_exp_widest() != cpu::VecIsa::Avx512) return;  // needs both
  const std::vector<float> xs = float_sweep();
  const auto n = int64_t(xs.size());
  const cpu::VecIsa had = cpu::set_vec_exp_isa(cpu::VecIsa::Avx512);
  for (int form = 0; form < 3; ++form) {
    CAPTURE(form);
    std::vector<float> wide(xs.size()), narrow(xs.size());
    for (cpu::VecIsa isa : {cpu::VecIsa::Avx512, cpu::VecIsa::Avx2}) {
      cpu::set_vec_exp_isa(isa);
      float* o = (isa == cpu::VecIsa::Avx512 ? wide : narrow).data();
      if (form == 0) cpu::exp_f32_loop(o, xs.data(), n);
      if (form == 1) cpu::exp_neg_f32_loop(o, xs.data(), n);
      if (form == 2) cpu::exp_mul_c_f32_loop(o, xs.data(), -0.75f, n);
    }
    size_t same = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      same += std::isnan(wide[i]) ? std::isnan(narrow[i])
                                  : std::memcmp(&wide[i], &narrow[i], sizeof(float)) == 0;
    CHECK(same == xs.size());
  }
  cpu::set_vec_exp_isa(had);
}

TEST_CASE("cpu sigmoid and silu: saturate cleanly at +-1000, inf and nan") {
  Tensor x = from_vector<float>({-1000, 1000, -INFINITY, INFINITY, NAN, -88, 88});
  Tensor s = empty({7}), si = empty({7});
  cpu::unary(UnaryOp::Sigmoid, x, s);
  cpu::unary(UnaryOp::Silu, x, si);
  auto sv = s.to_vector<float>(), siv = si.to_vector<float>();
  CHECK(sv[0] == 0.0f);
  CHECK(sv[1] == 1.0f);
  CHECK(sv[2] == 0.0f);
  CHECK(sv[3] == 1.0f);
  CHECK(std::isnan(sv[4]));
  CHECK(siv[0] == 0.0f);
  CHECK(siv[1] == 1000.0f);
  CHECK(siv[3] == INFINITY);
  CHECK(std::isnan(siv[4]));
  CHECK(siv[6] == 88.0f);
}

TEST_CASE("cpu binary: add, sub, mul, div with broadcasting, layouts and dtypes") {
  Threads th(2);
  struct Case {
    Shape a, b, out;
  };
  const Case cases[] = {
      {{}, {}, {}},
      {{7}, {}, {7}},
      {{}, {33}, {33}},
      {{0}, {1}, {0}},
      {{3, 1, 5}, {4, 5}, {3, 4, 5}},
      {{1025, 1}, {1, 70}, {1025, 70}},
      {{70001}, {70001}, {70001}},
      {{129, 257}, {257}, {129, 257}},
      {{129, 257}, {129, 1}, {129, 257}},
  };
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div};
  for (BinaryOp op : ops)
    for (DType dt : kFloatTypes)
      for (const Case& c : cases)
        for (Layout la : kLayouts) {
          Tensor a = make(c.a, dt, la, -3, 3, 11);
          Tensor b = make(c.b, dt, Layout::Strided, 0.5, 3, 12);  // nonzero for div
          Tensor out = empty(c.out, {.dtype = dt});
          const double alpha = op == BinaryOp::Add ? 0.5 : 1.0;
          cpu::binary(op, a, b, out, alpha);
          auto av = vals(a), bv = vals(b);
          std::vector<double> want(size_t(shape_numel(c.out)));
          for (int64_t i = 0; i < int64_t(want.size()); ++i) {
            double x = av[size_t(bcast_index(c.out, c.a, i))];
            double y = bv[size_t(bcast_index(c.out, c.b, i))];
            want[size_t(i)] = op == BinaryOp::Add   ? x + alpha * y
                              : op == BinaryOp::Sub ? x - y
                              : op == BinaryOp::Mul ? x * y
                                                    : x / y;
          }
          check_close(out, want, tol_for(dt),
                      fmt::format("binary {} {} {}x{} layout {}", int(op), dt, c.a, c.b, int(la)));
        }
}

TEST_CASE(
    "cpu elementwise: dense operands of one shape, one at a storage offset, give what the "
    "general loop gives") {
  // Note [Dense operands of one shape] in kernels/cpu/loops.cpp: a contiguous out takes the
  // dense path, a transposed out of the same shape the general one.
  for (DType dt : kFloatTypes) {
    Tensor a = make({7, 6}, dt, Layout::Contiguous, 0.5, 3, 31).slice(0, 2, 7);
    Tensor b = make({5, 6}, dt, Layout::Contiguous, 0.5, 3, 32);
    REQUIRE(a.is_contiguous());
    REQUIRE(a.storage_offset() == 12);
    Tensor dense = empty({5, 6}, {.dtype = dt});
    Tensor general = empty({6, 5}, {.dtype = dt}).transpose(0, 1);
    const auto av = vals(a), bv = vals(b);
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Div}) {
      cpu::binary(op, a, b, dense, 1.0);
      cpu::binary(op, a, b, general, 1.0);
      std::vector<double> want(av.size());
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = op == BinaryOp::Add ? av[i] + bv[i] : av[i] / bv[i];
      const std::string what = fmt::format("{} {}", op == BinaryOp::Add ? "add" : "div", dt);
      check_close(dense, want, tol_for(dt), what + " dense");
      CHECK_MESSAGE(vals(dense) == vals(general), what);
    }
    cpu::unary(UnaryOp::Silu, a, dense);
    cpu::unary(UnaryOp::Silu, a, general);
    check_close(dense, vals(general), tol_for(dt), fmt::format("silu {} dense vs general", dt));
  }
}

TEST_CASE("cpu binary: expanded views, mixed dtypes, in place, int64 and bool") {
  // expand: a [5, 1] expanded to [5, 6] (stride 0) times a transposed [5, 6]
  Tensor a = make({5, 1}, DType::Float32, Layout::Contiguous, -2, 2, 21).expand({5, 6});
  Tensor b = make({5, 6}, DType::Float32, Layout::Transposed, -2, 2, 22);
  Tensor out = empty({5, 6});
  cpu::binary(BinaryOp::Mul, a, b, out);
  auto av = vals(a), bv = vals(b);
  std::vector<double> want;
  for (size_t i = 0; i < av.size(); ++i) want.push_back(av[i] * bv[i]);
  check_close(out, want, tol_for(DType::Float32), "expand * transpose");

  // int64 + float32 -> float32, float16 - bfloat16 -> float32 (promotion by the caller)
  Tensor i = from_vector<int64_t>({1, 2, 3});
  Tensor f = from_vector<float>({0.5f, 0.25f, -1});
  Tensor o = empty({3});
  cpu::binary(BinaryOp::Add, i, f, o);
  CHECK(o.to_vector<float>() == std::vector<float>{1.5f, 2.25f, 2});
  cpu::binary(BinaryOp::Sub, f.to(DType::Float16), f.to(DType::BFloat16), o);
  CHECK(o.to_vector<float>() == std::vector<float>{0, 0, 0});

  // in place: out is a
  Tensor x = from_vector<float>({1, 2, 3});
  cpu::binary(BinaryOp::Add, x, from_vector<float>({10}), x, 2);
  CHECK(x.to_vector<float>() == std::vector<float>{21, 22, 23});

  Tensor ia = from_vector<int64_t>({7, -8, 9}), ib = from_vector<int64_t>({2, 3, -4});
  Tensor io = empty({3}, {.dtype = DType::Int64});
  cpu::binary(BinaryOp::Add, ia, ib, io, 3);
  CHECK(io.to_vector<int64_t>() == std::vector<int64_t>{13, 1, -3});
  cpu::binary(BinaryOp::Sub, ia, ib, io);
  CHECK(io.to_vector<int64_t>() == std::vector<int64_t>{5, -11, 13});
  cpu::binary(BinaryOp::Mul, ia, ib, io);
  CHECK(io.to_vector<int64_t>() == std::vector<int64_t>{14, -24, -36});
  Tensor ba = bools({1, 1, 0}), bb = bools({1, 0, 0});
  Tensor bo = empty({3}, {.dtype = DType::Bool});
  cpu::binary(BinaryOp::Add, ba, bb, bo);
  CHECK(bo.to_vector<bool>() == std::vector<bool>{true, true, false});
  cpu::binary(BinaryOp::Mul, ba, bb, bo);
  CHECK(bo.to_vector<bool>() == std::vector<bool>{true, false, false});

  CHECK_THROWS_WITH_AS(cpu::binary(BinaryOp::Div, ia, ib, io),
                       "[div] needs a floating output, got int64; integer and bool inputs "
                       "promote to float32 (pass a float32 out)",
                       Error);
  CHECK_THROWS_WITH_AS(cpu::binary(BinaryOp::Sub, ba, bb, bo),
                       "[sub] subtraction of bool tensors is not supported; use logical_xor, or "
                       "cast to int64 first",
                       Error);
  CHECK_THROWS_WITH_AS(cpu::binary(BinaryOp::Add, ia, ib, io, 0.5),
                       "[add] alpha must be an integer when the output is int64, got 0.5; pass "
                       "a floating out",
                       Error);
  CHECK_THROWS_WITH_AS(cpu::binary(BinaryOp::Add, empty({3}), empty({4}), empty({3})),
                       "[add] an input of shape [4] does not broadcast to the output's shape [3]",
                       Error);
  CHECK_THROWS_WITH_AS(
      cpu::binary(BinaryOp::Add, empty({3}), empty({3}), empty({1}).expand({3})),
      "[add] the output (shape [3], strides [0]) has elements that share memory (an expanded "
      "tensor); write into a contiguous tensor instead",
      Error);
  CHECK_THROWS_WITH_AS(cpu::binary(BinaryOp::Add, fake_empty({3}), empty({3}), empty({3})),
                       "[add] the input tensor is fake (metadata only); CPU kernels need data",
                       Error);
}

TEST_CASE("cpu binary_scalar, pow_scalar and where") {
  for (DType dt : kFloatTypes)
    for (Layout la : kLayouts) {
      Tensor x = make({33, 70}, dt, la, 0.1, 4, 31);
      auto xv = vals(x);
      Tensor out = empty({33, 70}, {.dtype = dt});
      const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div};
      for (BinaryOp op : ops) {
        cpu::binary_scalar(op, x, 2.5, out);
        std::vector<double> want;
        for (double v : xv)
          want.push_back(op == BinaryOp::Add   ? v + 2.5
                         : op == BinaryOp::Sub ? v - 2.5
                         : op == BinaryOp::Mul ? v * 2.5
                                               : v / 2.5);
        check_close(out, want, tol_for(dt), fmt::format("scalar {} {}", int(op), dt));
      }
      for (double e : {0.0, 1.0, 2.0, 3.0, 0.5, -1.0, -2.0, 1.7}) {
        cpu::pow_scalar(x, e, out);
        std::vector<double> want;
        for (double v : xv) want.push_back(std::pow(v, e));
        check_close(out, want, tol_for(dt), fmt::format("pow {} {}", e, dt));
      }
    }
  Tensor i = from_vector<int64_t>({-3, 2, 5});
  Tensor io = empty({3}, {.dtype = DType::Int64});
  cpu::pow_scalar(i, 3, io);
  CHECK(io.to_vector<int64_t>() == std::vector<int64_t>{-27, 8, 125});
  cpu::pow_scalar(i, 5, io);
  CHECK(io.to_vector<int64_t>() == std::vector<int64_t>{-243, 32, 3125});
  cpu::binary_scalar(BinaryOp::Mul, i, 4, io);
  CHECK(io.to_vector<int64_t>() == std::vector<int64_t>{-12, 8, 20});
  CHECK_THROWS_WITH_AS(cpu::pow_scalar(i, -1, io),
                       "[pow] an integer tensor can only be raised to a non-negative integer "
                       "power, got -1; use a floating input",
                       Error);

  Tensor c = bools({1, 0, 1, 0}).view({2, 2});
  Tensor a = make({2, 2}, DType::Float32, Layout::Transposed, -1, 1, 5);
  Tensor w = empty({2, 2});
  cpu::where(c, a, from_vector<float>({7}), w);
  auto av = vals(a);
  CHECK(w.to_vector<double>() == std::vector<double>{av[0], 7, av[2], 7});
}

TEST_CASE("cpu silu_backward: fused formula matches float64, with a broadcast grad") {
  Threads th(2);
  for (DType dt : kFloatTypes)
    for (const Shape& shape : kShapes)
      for (Layout la : kLayouts) {
        Tensor x = make(shape, dt, la, -8, 8, 41);
        Tensor g = make(shape, dt, Layout::Strided, -2, 2, 42);
        Tensor out = empty(shape, {.dtype = dt});
        cpu::silu_backward(g, x, out);
        auto xv = vals(x), gv = vals(g);
        std::vector<double> want;
        for (size_t i = 0; i < xv.size(); ++i) {
          double s = sigmoid_ref(xv[i]);
          want.push_back(gv[i] * s * (1 + xv[i] * (1 - s)));
        }
        check_close(out, want, tol_for(dt),
                    fmt::format("silu_backward {} {} {}", dt, shape, int(la)));
      }
  Tensor x = make({1025}, DType::Float32, Layout::Contiguous, -5, 5, 43);
  Tensor out = empty({1025});
  cpu::silu_backward(scalar_tensor(1.0), x, out);  // a 0-d grad broadcasts
  std::vector<double> want;
  for (double v : vals(x)) {
    double s = sigmoid_ref(v);
    want.push_back(s * (1 + v * (1 - s)));
  }
  check_close(out, want, tol_for(DType::Float32), "silu_backward, 0-d grad");
}

TEST_CASE("cpu mse piece: squared_diff") {
  Tensor a = make({7, 33}, DType::Float32, Layout::Transposed, -2, 2, 51);
  Tensor b = make({33}, DType::Float32, Layout::Contiguous, -2, 2, 52);
  Tensor o = empty({7, 33});
  cpu::squared_diff(a, b, o);
  auto av = vals(a), bv = vals(b);
  std::vector<double> want;
  for (size_t i = 0; i < av.size(); ++i) {
    double d = av[i] - bv[i % 33];
    want.push_back(d * d);
  }
  check_close(o, want, tol_for(DType::Float32), "squared_diff");
}

namespace {

// The float64 reference of sum/mean/max over `dims` of x (values row-major), in keepdim
// order; also the row-major index within the reduced dims for max.
struct RefReduce {
  std::vector<double> sum, abs_sum, max;
  std::vector<int64_t> argmax;
  int64_t n_red = 1;
};
RefReduce ref_reduce(const Tensor& x, const std::vector<int64_t>& dims) {
  const Shape& s = x.sizes();
  const int64_t nd = int64_t(s.size());
  std::vector<bool> red(size_t(nd), dims.empty());
  for (int64_t d : dims)
    if (d < nd) red[size_t(d)] = true;
  int64_t n_out = 1, n_red = 1;
  for (int64_t d = 0; d < nd; ++d) (red[size_t(d)] ? n_red : n_out) *= s[d];
  RefReduce r;
  r.n_red = n_red;
  r.sum.assign(size_t(n_out), 0), r.abs_sum.assign(size_t(n_out), 0);
  r.max.assign(size_t(n_out), -kInf), r.argmax.assign(size_t(n_out), -1);
  auto xv = vals(x);
  for (int64_t i = 0; i < int64_t(xv.size()); ++i) {
    int64_t rem = i, o = 0, om = 1, ri = 0, rm = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t c = rem % s[d];
      rem /= s[d];
      if (red[size_t(d)])
        ri += c * rm, rm *= s[d];
      else
        o += c * om, om *= s[d];
    }
    double v = xv[size_t(i)];
    r.sum[size_t(o)] += v;
    r.abs_sum[size_t(o)] += std::abs(v);
    bool first = r.argmax[size_t(o)] < 0;
    double& m = r.max[size_t(o)];
    bool better = std::isnan(v) ? !std::isnan(m) || first : (v > m && !std::isnan(m));
    // ties and later elements keep the earliest (the reference scans in row-major order,
    // which is increasing in the reduced index for a fixed output)
    if (first || better) {
      if (first || ri < r.argmax[size_t(o)] || better) m = v, r.argmax[size_t(o)] = ri;
    }
  }
  return r;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) {
    bool r = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r)
      out.push_back(s[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

}  // namespace

TEST_CASE("cpu sum, mean and max: any dims, keepdim, layouts and dtypes against float64") {
  Threads th(2);
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const Case cases[] = {
      {{}, {}},
      {{0}, {}},
      {{1}, {}},
      {{7}, {0}},
      {{70001}, {}},
      {{3, 5, 7}, {}},
      {{3, 5, 7}, {0}},
      {{3, 5, 7}, {1}},
      {{3, 5, 7}, {2}},
      {{3, 5, 7}, {0, 2}},
      {{3, 5, 7}, {0, 1}},
      {{3, 5, 7}, {1, 2}},
      {{300, 40}, {0}},
      {{40, 300}, {1}},
      {{1025, 70}, {0}},
      {{33, 1025}, {1}},
      {{5, 0, 3}, {1}},
      {{5, 0, 3}, {0}},
      {{2, 3, 4, 5}, {1, 3}},
      {{70001, 2}, {0}},
      {{20000, 17}, {0}},
  };
  for (DType dt : kFloatTypes)
    for (const Case& c : cases)
      for (Layout la : kLayouts)
        for (bool keepdim : {false, true}) {
          Tensor x = make(c.shape, dt, la, -2, 3, 61);
          RefReduce ref = ref_reduce(x, c.dims);
          Shape os = reduced_shape(c.shape, c.dims, keepdim);
          const std::string what = fmt::format("{} {} dims [{}] layout {} keepdim {}", dt, c.shape,
                                               fmt::join(c.dims, ","), int(la), keepdim);
          Tol t = tol_for(dt);
          Tensor out = empty(os, {.dtype = dt});
          cpu::sum(x, c.dims, keepdim, out);
          auto got = vals(out);
          REQUIRE(got.size() == ref.sum.size());
          for (size_t i = 0; i < got.size(); ++i)
            CHECK_MESSAGE(std::abs(got[i] - ref.sum[i]) <= t.rtol * ref.abs_sum[i] + t.atol, what,
                          " sum[", i, "] ", got[i], " vs ", ref.sum[i]);
          cpu::mean(x, c.dims, keepdim, out);
          got = vals(out);
          for (size_t i = 0; i < got.size(); ++i) {
            if (ref.n_red == 0) {
              CHECK(std::isnan(got[i]));
              continue;
            }
            double want = ref.sum[i] / double(ref.n_red);
            CHECK_MESSAGE(std::abs(got[i] - want) <=
                              (t.rtol * ref.abs_sum[i] + t.atol) / double(ref.n_red) + t.atol,
                          what, " mean[", i, "]");
          }
          if (ref.n_red == 0) continue;
          Tensor idx = empty(os, {.dtype = DType::Int64});
          cpu::max(x, c.dims, keepdim, out, idx);
          check_close(out, ref.max, {0, 0}, what + " max");
          CHECK_MESSAGE(idx.to_vector<int64_t>() == ref.argmax, what, " argmax");
        }
}

TEST_CASE("cpu reductions: int64 and bool sum into int64, into a strided out, other dtypes") {
  Tensor i = make({33, 7}, DType::Int64, Layout::Transposed, -100, 100, 71);
  Tensor o = empty({7}, {.dtype = DType::Int64});
  int64_t d0[] = {0};
  cpu::sum(i, d0, false, o);
  auto ref = ref_reduce(i, {0});
  std::vector<int64_t> want(ref.sum.begin(), ref.sum.end());
  CHECK(o.to_vector<int64_t>() == want);
  Tensor b = make({1025}, DType::Bool, Layout::Strided, -1, 1, 72);
  Tensor bo = empty({}, {.dtype = DType::Int64});
  cpu::sum(b, {}, false, bo);
  CHECK(bo.item<int64_t>() == int64_t(ref_reduce(b, {}).sum[0]));
  Tensor mo = empty({7}, {.dtype = DType::Int64}), mi = empty({7}, {.dtype = DType::Int64});
  cpu::max(i, d0, false, mo, mi);
  CHECK(mo.to_vector<double>() == ref.max);
  CHECK(mi.to_vector<int64_t>() == ref.argmax);

  // int64 into float32 (dtype=float32 sum); float32 into float64; a transposed out
  Tensor f = empty({7});
  cpu::sum(i, d0, false, f);
  CHECK(f.to_vector<double>() == ref.sum);
  Tensor x = make({40, 30}, DType::Float32, Layout::Contiguous, -1, 1, 73);
  Tensor od = empty({30, 1}, {.dtype = DType::Float64});
  int64_t d1[] = {1};
  Tensor ot = empty({1, 40}).transpose(0, 1);
  cpu::sum(x, d1, true, ot);
  auto rx = ref_reduce(x, {1});
  check_close(ot, rx.sum, {1e-5, 1e-5}, "sum into a transposed out");
  Tensor xt = x.t();
  cpu::sum(xt, d1, true, od);
  check_close(od, ref_reduce(xt, {1}).sum, {1e-12, 1e-12}, "float32 summed in float64");

  CHECK_THROWS_WITH_AS(cpu::sum(x, d1, false, empty({30})),
                       "[sum] the output has shape [30], but reducing [40, 30] gives [40]", Error);
  CHECK_THROWS_WITH_AS(cpu::mean(i, d0, false, o),
                       "[mean] needs a floating output, got int64; pass a float32 or float64 out",
                       Error);
  CHECK_THROWS_WITH_AS(cpu::max(empty({3, 0}), d1, false, empty({3}), Tensor()),
                       "[max] cannot reduce over dims of size 0 (input shape [3, 0]): the max of "
                       "nothing is undefined; give the reduced dims at least one element",
                       Error);
}

TEST_CASE("cpu sum: float32 sums pairwise, far better than a running float") {
  // 2^24 + 2^22 ones: a running float sum sticks at 2^24.
  const int64_t n = (1 << 24) + (1 << 22);
  Tensor x = ones({n});
  Tensor o = empty({});
  cpu::sum(x, {}, false, o);
  CHECK(o.item<double>() == double(n));
  // columns: [2^21, 16] of 0.1f summed over dim 0
  Tensor c = full({1 << 21, 16}, 0.1);
  Tensor co = empty({16});
  int64_t d0[] = {0};
  cpu::sum(c, d0, false, co);
  const double want = double(1 << 21) * double(0.1f);
  for (double v : co.to_vector<double>()) CHECK(std::abs(v - want) <= 1e-6 * want);
  // and a strided row of random values against float64
  Tensor r = make({3000000}, DType::Float32, Layout::Strided, 0, 1, 81);
  Tensor ro = empty({});
  cpu::sum(r, {}, false, ro);
  CHECK(std::abs(ro.item<double>() - ref_reduce(r, {}).sum[0]) <= 1e-6 * 1.5e6);
}

TEST_CASE("cpu max: ties go to the first index, NaN wins, across chunks and columns") {
  Tensor x = from_vector<float>({1, 3, 3, 2});
  Tensor v = empty({}), i = empty({}, {.dtype = DType::Int64});
  cpu::max(x, {}, false, v, i);
  CHECK(v.item<float>() == 3);
  CHECK(i.item<int64_t>() == 1);
  Tensor n = from_vector<float>({1, NAN, 5, NAN});
  cpu::max(n, {}, false, v, i);
  CHECK(std::isnan(v.item<float>()));
  CHECK(i.item<int64_t>() == 1);
  // a tie between the first and a later 32768-element chunk
  std::vector<float> big(70001, 0.0f);
  big[5] = big[40000] = big[70000] = 9.0f;
  cpu::max(from_vector(big), {}, false, v, i);
  CHECK(i.item<int64_t>() == 5);
  // columns: max over dim 0 of [50, 300] with ties in every column
  Tensor c = zeros({50, 300});
  c.select(0, 7).fill_(1.0);
  c.select(0, 30).fill_(1.0);
  Tensor cv = empty({300}), ci = empty({300}, {.dtype = DType::Int64});
  int64_t d0[] = {0};
  cpu::max(c, d0, false, cv, ci);
  for (int64_t k : ci.to_vector<int64_t>()) CHECK(k == 7);
  // several dims: the index is into the reduced dims flattened row-major
  Tensor m = zeros({2, 3, 4});
  m.select(0, 1).select(1, 2).fill_(5.0);  // element [1, 0..2, 2]
  Tensor mv = empty({3}), mi = empty({3}, {.dtype = DType::Int64});
  int64_t d02[] = {0, 2};
  cpu::max(m, d02, false, mv, mi);
  CHECK(mi.to_vector<int64_t>() == std::vector<int64_t>{6, 6, 6});  // 1 * 4 + 2
  // values only
  cpu::max(m, d02, false, mv, Tensor());
  CHECK(mv.to_vector<float>() == std::vector<float>{5, 5, 5});
}

TEST_CASE("cpu sum_to: reduces a broadcast gradient back to the input's shape") {
  Tensor g = make({3, 4, 5}, DType::Float32, Layout::Transposed, -1, 1, 91);
  auto gv = vals(g);
  struct Case {
    Shape shape;
  };
  for (const Shape& s : {Shape{4, 1}, Shape{1, 5}, Shape{}, Shape{5}, Shape{3, 1, 1},
                         Shape{3, 4, 5}, Shape{1, 4, 5}}) {
    Tensor out = empty(s);
    cpu::sum_to(g, s, out);
    std::vector<double> want(size_t(shape_numel(s)), 0.0);
    for (int64_t k = 0; k < 60; ++k) want[size_t(bcast_index({3, 4, 5}, s, k))] += gv[size_t(k)];
    check_close(out, want, {1e-5, 1e-6}, fmt::format("sum_to {}", s));
  }
  CHECK_THROWS_WITH_AS(cpu::sum_to(g, {3}, empty({3})),
                       "[sum_to] a gradient of shape [3, 4, 5] cannot come from broadcasting "
                       "shape [3]",
                       Error);
}

TEST_CASE("cpu reductions and elementwise: 1 and 2 threads give the same results") {
  Tensor x = make({1 << 20}, DType::Float32, Layout::Contiguous, -1, 1, 101);
  Tensor c = make({4096, 64}, DType::Float32, Layout::Contiguous, -1, 1, 102);
  Tensor s1 = empty({}), s2 = empty({}), c1 = empty({64}), c2 = empty({64});
  Tensor e1 = empty({1 << 20}), e2 = empty({1 << 20});
  int64_t d0[] = {0};
  {
    Threads th(1);
    cpu::sum(x, {}, false, s1);
    cpu::sum(c, d0, false, c1);
    cpu::unary(UnaryOp::Silu, x, e1);
  }
  {
    Threads th(2);
    cpu::sum(x, {}, false, s2);
    cpu::sum(c, d0, false, c2);
    cpu::unary(UnaryOp::Silu, x, e2);
  }
  // the chunking depends on the shape only, so these are bitwise equal
  CHECK(s1.item<float>() == s2.item<float>());
  CHECK(equal(c1, c2));
  CHECK(equal(e1, e2));
  CHECK(std::abs(s1.item<double>() - ref_reduce(x, {}).sum[0]) < 1e-3);
}

namespace {

// float64 reference of a broadcast batched matmul; abs_ab gets sum_k |a||b| per element.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, const Shape& os,
                               std::vector<double>* abs_ab) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape ab(a.sizes().vec()), bb(b.sizes().vec()), ob(os.vec());
  ab.resize(ab.size() - 2), bb.resize(bb.size() - 2), ob.resize(ob.size() - 2);
  auto av = vals(a), bv = vals(b);
  const int64_t batches = shape_numel(ob);
  std::vector<double> out(size_t(batches * m * n), 0.0);
  abs_ab->assign(out.size(), 0.0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t ia = bcast_index(ob, ab, bi), ib = bcast_index(ob, bb, bi);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = av[size_t((ia * m + i) * k + p)], y = bv[size_t((ib * k + p) * n + j)];
          s += x * y;
          sa += std::abs(x * y);
        }
        out[size_t((bi * m + i) * n + j)] = s;
        (*abs_ab)[size_t((bi * m + i) * n + j)] = sa;
      }
  }
  return out;
}

void check_matmul(const Tensor& a, const Tensor& b, const Tensor& out, const std::string& what) {
  cpu::matmul(a, b, out);
  std::vector<double> abs_ab;
  auto want = ref_matmul(a, b, out.sizes(), &abs_ab);
  auto got = vals(out);
  REQUIRE(got.size() == want.size());
  Tol t = tol_for(out.dtype());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= t.rtol * abs_ab[i] + t.atol)) ++bad;
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", got.size(), " differ");
}

}  // namespace

TEST_CASE("cpu matmul: BLAS and blocked, transposed and strided views, batches, dtypes") {
  Threads th(2);
  std::vector<bool> paths = {false};
  cpu::set_use_blas(true);
  if (cpu::have_blas()) paths.push_back(true);
  struct Dims {
    int64_t m, k, n;
  };
  // k = 1 (an outer product) runs a loop of its own, on threads from 2^16 outputs
  const Dims dims[] = {{1, 1, 1}, {7, 33, 5},  {65, 130, 257}, {0, 3, 4},
                       {3, 0, 4}, {300, 1, 2}, {300, 1, 257}};
  for (bool blas : paths) {
    cpu::set_use_blas(blas);
    CHECK(cpu::have_blas() == blas);
    for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64})
      for (const Dims& d : dims)
        for (Layout la : kLayouts)
          for (Layout lb : kLayouts) {
            Tensor a = make({d.m, d.k}, dt, la, -1, 1, 111);
            Tensor b = make({d.k, d.n}, dt, lb, -1, 1, 112);
            std::string what = fmt::format("blas {} {} {}x{}x{} layouts {} {}", blas, dt, d.m, d.k,
                                           d.n, int(la), int(lb));
            check_matmul(a, b, empty({d.m, d.n}, {.dtype = dt}), what);
            if (dt == DType::Float32)  // a transposed out: C^T = B^T A^T for cblas
              check_matmul(a, b, empty({d.n, d.m}).t(), what + " out transposed");
          }
    // batches: broadcast [2, 1, m, k] @ [3, k, n]; [4, 5, m, k] @ [k, n] (one call); expand
    for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
      check_matmul(make({2, 1, 5, 6}, dt, Layout::Transposed, -1, 1, 121),
                   make({3, 6, 7}, dt, Layout::Contiguous, -1, 1, 122),
                   empty({2, 3, 5, 7}, {.dtype = dt}), fmt::format("broadcast batch {}", dt));
      check_matmul(make({4, 5, 9, 6}, dt, Layout::Contiguous, -1, 1, 123),
                   make({6, 7}, dt, Layout::Transposed, -1, 1, 124),
                   empty({4, 5, 9, 7}, {.dtype = dt}), fmt::format("folded batch {}", dt));
      check_matmul(make({1, 9, 6}, dt, Layout::Contiguous, -1, 1, 125).expand({5, 9, 6}),
                   make({5, 6, 3}, dt, Layout::Strided, -1, 1, 126),
                   empty({5, 9, 3}, {.dtype = dt}), fmt::format("expanded batch {}", dt));
      check_matmul(make({9, 1}, dt, Layout::Contiguous, -1, 1, 127).expand({9, 6}),
                   make({6, 3}, dt, Layout::Contiguous, -1, 1, 128), empty({9, 3}, {.dtype = dt}),
                   fmt::format("expanded columns {}", dt));
      check_matmul(make({64, 9, 6}, dt, Layout::Strided, -1, 1, 129),
                   make({64, 6, 3}, dt, Layout::Transposed, -1, 1, 130),
                   empty({64, 9, 3}, {.dtype = dt}), fmt::format("many small {}", dt));
      check_matmul(make({64, 33, 1}, dt, Layout::Strided, -1, 1, 133),
                   make({64, 1, 40}, dt, Layout::Contiguous, -1, 1, 134),
                   empty({64, 33, 40}, {.dtype = dt}), fmt::format("outer products {}", dt));
    }
  }
  cpu::set_use_blas(true);
}

TEST_CASE("cpu matmul: BLAS and blocked agree on a larger product, at 1 and 2 threads") {
  Tensor a = make({257, 300}, DType::Float32, Layout::Contiguous, -1, 1, 131);
  Tensor b = make({300, 190}, DType::Float32, Layout::Transposed, -1, 1, 132);
  Tensor o1 = empty({257, 190}), o2 = empty({257, 190});
  cpu::set_use_blas(false);
  {
    Threads th(1);
    cpu::matmul(a, b, o1);
  }
  {
    Threads th(2);
    cpu::matmul(a, b, o2);
  }
  CHECK(equal(o1, o2));  // the blocked kernel sums in the same order on any thread count
  cpu::set_use_blas(true);
  Tensor o3 = empty({257, 190});
  cpu::matmul(a, b, o3);
  CHECK(max_abs_diff(o1, o3) < 1e-4);
}

TEST_CASE("cpu matmul: shape errors name the op and the shapes") {
  CHECK_THROWS_WITH_AS(cpu::matmul(empty({2, 3}), empty({4, 5}), empty({2, 5})),
                       "[matmul] shapes [2, 3] and [4, 5] cannot be multiplied: a has 3 columns "
                       "but b has 4 rows",
                       Error);
  CHECK_THROWS_WITH_AS(cpu::matmul(empty({2, 3}), empty({3, 5}), empty({2, 4})),
                       "[matmul] the output has shape [2, 4], expected [2, 5]", Error);
  CHECK_THROWS_WITH_AS(cpu::matmul(empty({3}), empty({3, 5}), empty({5})),
                       "[matmul] this kernel takes tensors of at least 2 dims, got 1-d and 2-d; "
                       "unsqueeze a vector to [1, k] or [k, 1] first",
                       Error);
}

namespace {

std::vector<double> ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.sizes();
  const int64_t nd = int64_t(s.size());
  auto xv = vals(x);
  std::vector<double> out(xv.size());
  if (nd == 0) return {log ? 0.0 : 1.0};
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < nd; ++d) inner *= s[d];
  const int64_t n = s[dim], outer = int64_t(xv.size()) / std::max<int64_t>(1, n * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) { return size_t((o * n + i) * inner + in); };
      double m = -kInf, sum = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, xv[at(i)]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(xv[at(i)] - m);
      for (int64_t i = 0; i < n; ++i)
        out[at(i)] = log ? xv[at(i)] - m - std::log(sum) : std::exp(xv[at(i)] - m) / sum;
    }
  return out;
}

}  // namespace

TEST_CASE("cpu softmax and log_softmax: every dim, layout and dtype; rows sum to 1") {
  Threads th(2);
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{}, 0},        {{}, -1},        {{1}, 0},
                        {{7}, 0},       {{1025}, -1},    {{3, 5, 7}, 0},
                        {{3, 5, 7}, 1}, {{3, 5, 7}, -1}, {{33, 70001 / 33}, 1},
                        {{300, 40}, 0}, {{2, 0, 3}, 1},  {{4, 0}, 0}};
  for (DType dt : kFloatTypes)
    for (const Case& c : cases)
      for (Layout la : kLayouts)
        for (bool log : {false, true}) {
          Tensor x = make(c.shape, dt, la, -5, 5, 141);
          Tensor out = empty(c.shape, {.dtype = dt});
          if (log)
            cpu::log_softmax(x, c.dim, out);
          else
            cpu::softmax(x, c.dim, out);
          int64_t d =
              c.shape.size() ? (c.dim + int64_t(c.shape.size())) % int64_t(c.shape.size()) : 0;
          Tol t = tol_for(dt);
          if (log) t.atol *= 10;  // log_softmax values are O(1..10)
          check_close(out, ref_softmax(x, d, log), t,
                      fmt::format("{} {} {} dim {} layout {}", log ? "log_softmax" : "softmax", dt,
                                  c.shape, c.dim, int(la)));
        }
  // rows sum to 1
  Tensor x = make({64, 1000}, DType::Float32, Layout::Contiguous, -20, 20, 142);
  Tensor out = empty({64, 1000});
  cpu::softmax(x, -1, out);
  Tensor sums = empty({64});
  int64_t d1[] = {1};
  cpu::sum(out, d1, false, sums);
  for (double s : sums.to_vector<double>()) CHECK(std::abs(s - 1) < 1e-5);
}

TEST_CASE("cpu softmax: stable for large inputs, and -inf entries get zero weight") {
  Tensor x = from_vector<float>({1000, 1001, 1002, -1000});
  Tensor out = empty({4});
  cpu::softmax(x, 0, out);
  auto want = ref_softmax(x, 0, false);
  check_close(out, want, tol_for(DType::Float32), "softmax at 1000");
  cpu::log_softmax(x, 0, out);
  check_close(out, ref_softmax(x, 0, true), {1e-5, 1e-4}, "log_softmax at 1000");
  Tensor y = from_vector<float>({-INFINITY, 0, 0});
  cpu::softmax(y, 0, out.narrow(0, 0, 3));
  CHECK(out.narrow(0, 0, 3).to_vector<float>() == std::vector<float>{0, 0.5f, 0.5f});
  CHECK_THROWS_WITH_AS(
      cpu::softmax(empty({3, 4}), 2, empty({3, 4})),
      "[softmax] dimension 2 is out of range for a 2-d tensor (expected a value in "
      "[-2, 1])",
      Error);
}

TEST_CASE("cpu threads: set_num_threads checks its argument") {
  int saved = cpu::num_threads();
  CHECK(saved >= 1);
  cpu::set_num_threads(1);
  CHECK(cpu::num_threads() == 1);
  cpu::set_num_threads(saved);
  CHECK_THROWS_WITH_AS(cpu::set_num_threads(0),
                       "[set_num_threads] the number of threads must be at least 1, got 0", Error);
}

TEST_CASE(
    "cpu matmul: the own kernel runs where OpenBLAS runs old kernels on an AVX2/AVX-512 CPU") {
  const std::string prescott512 =
      "OpenBLAS's Prescott kernels leave the CPU's AVX-512 unused; MT_MATMUL=blas, or "
      "OPENBLAS_CORETYPE=SkylakeX set before the program starts, gives OpenBLAS's";
  auto c = cpu::choose_matmul_kernel("Prescott", true, true, nullptr);
  CHECK(!c.blas);
  CHECK(c.why == prescott512);
  c = cpu::choose_matmul_kernel("Nehalem", true, false, nullptr);
  CHECK(!c.blas);
  CHECK(c.why ==
        "OpenBLAS's Nehalem kernels leave the CPU's AVX2 unused; MT_MATMUL=blas, or "
        "OPENBLAS_CORETYPE=Haswell set before the program starts, gives OpenBLAS's");
  // an old core on an old CPU, kernels made for the CPU, or a cblas that is not OpenBLAS
  struct Case {
    const char* core;
    bool avx2, avx512;
  };
  for (const Case& k :
       {Case{"Prescott", false, false}, Case{"SkylakeX", true, true}, Case{"Haswell", true, false},
        Case{"Zen", true, false}, Case{"", true, true}}) {
    c = cpu::choose_matmul_kernel(k.core, k.avx2, k.avx512, nullptr);
    CHECK_MESSAGE(c.blas, k.core);
    CHECK(c.why.empty());
  }
  // MT_MATMUL forces either; another value is ignored, and said so
  c = cpu::choose_matmul_kernel("Prescott", true, true, "blas");
  CHECK((c.blas && c.why == "MT_MATMUL=blas"));
  c = cpu::choose_matmul_kernel("Zen", true, false, "own");
  CHECK((!c.blas && c.why == "MT_MATMUL=own"));
  c = cpu::choose_matmul_kernel("Zen", true, false, "");
  CHECK((c.blas && c.why.empty()));
  c = cpu::choose_matmul_kernel("Zen", true, false, "mkl");
  CHECK((c.blas && c.why == "MT_MATMUL=mkl ignored: it takes blas or own"));
  c = cpu::choose_matmul_kernel("Prescott", true, true, "OWN");
  CHECK(!c.blas);
  CHECK(c.why == "MT_MATMUL=OWN ignored: it takes blas or own; " + prescott512);
}

TEST_CASE(
    "cpu matmul: set_matmul_kernel and set_use_blas pick the path, and blas_info says which") {
  const std::string own =
      fmt::format("matmul runs the library's own {} kernel", cpu::gemm_isa_name(cpu::gemm_isa()));
  cpu::set_use_blas(false);
  CHECK(!cpu::have_blas());
  CHECK(cpu::blas_info().ends_with(own + " (set_use_blas(false))"));
  cpu::set_matmul_kernel(cpu::MatmulKernel::Blas);
  const bool built_with_blas = cpu::have_blas();
  if (built_with_blas)
    CHECK(
        cpu::blas_info().ends_with("; matmul runs cblas (set_matmul_kernel(MatmulKernel::Blas))"));
  else
    CHECK(cpu::blas_info() == "none; " + own);
  cpu::set_matmul_kernel(cpu::MatmulKernel::Own);
  CHECK(!cpu::have_blas());
  cpu::set_use_blas(true);  // back to the automatic choice
  CHECK(cpu::blas_info().find(cpu::have_blas() ? "; matmul runs cblas" : own) != std::string::npos);
}

namespace {

// Fills n values of a strided buffer with seeded values in [-1, 1).
template <typename T>
std::vector<T> gemm_values(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = T(d(gen));
  return v;
}

// One m x n x k product through cpu::gemm with A, B and C in the given layouts (0: rows
// contiguous, 1: transposed, 2: every other column), against a float64 reference; the
// result at 1 thread must equal the one at 2 bit for bit.
template <typename T>
void check_gemm(int64_t m, int64_t n, int64_t k, int la, int lb, int lc, const std::string& what) {
  // element (i, j) of an r x c matrix in layout l: {rs, cs, elements}
  auto strides = [](int64_t r, int64_t c, int l) -> std::array<int64_t, 3> {
    if (l == 1) return {1, std::max<int64_t>(r, 1), std::max<int64_t>(r, 1) * c};
    const int64_t cs = l == 2 ? 2 : 1;
    return {std::max<int64_t>(c, 1) * cs, cs, r * c * cs};
  };
  const auto sa = strides(m, k, la), sb = strides(k, n, lb), sc = strides(m, n, lc);
  const auto a = gemm_values<T>(sa[2], 7), b = gemm_values<T>(sb[2], 8);
  std::vector<T> c1(size_t(sc[2]), T(7)), c2 = c1;  // 7: a gap left as it was
  {
    Threads th(1);
    cpu::gemm(m, n, k, a.data(), sa[0], sa[1], b.data(), sb[0], sb[1], c1.data(), sc[0], sc[1],
              true);
  }
  {
    Threads th(2);
    cpu::gemm(m, n, k, a.data(), sa[0], sa[1], b.data(), sb[0], sb[1], c2.data(), sc[0], sc[1],
              true);
  }
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, sabs = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x =
            double(a[size_t(i * sa[0] + p * sa[1])]) * b[size_t(p * sb[0] + j * sb[1])];
        s += x;
        sabs += std::abs(x);
      }
      const double got = c1[size_t(i * sc[0] + j * sc[1])];
      if (!(std::abs(got - s) <= eps * (4 + double(k)) * sabs + eps)) ++bad;
    }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", m * n, " differ");
  CHECK_MESSAGE(c1 == c2, what, ": 1 and 2 threads differ");
  if (lc == 2) {  // the gaps between C's elements are left alone
    int64_t touched = 0;
    for (size_t i = 1; i < c1.size(); i += 2) touched += c1[i] != T(7);
    CHECK_MESSAGE(touched == 0, what);
  }
}

}  // namespace

TEST_CASE("cpu gemm: every ISA variant against a float64 reference over tails, layouts, threads") {
  struct Dims {
    int64_t m, n, k;
  };
  // tails of every tile size (4, 6 rows; 4, 8, 16, 32 columns), k past one 256 block, m
  // past one 96/128/144-row block, n past one 1024-column block, k = 0, one row or column
  // the last two split over 2 threads, by rows and by columns: two layouts each
  const Dims dims[] = {{1, 1, 1},    {7, 33, 5},     {150, 37, 3},  {5, 1030, 2},
                       {6, 32, 257}, {4, 0, 3},      {3, 5, 0},     {1, 70, 9},
                       {70, 1, 9},   {200, 40, 260}, {40, 200, 260}};
  const cpu::GemmIsa before = cpu::gemm_isa();
  CHECK(before == cpu::gemm_best_isa());
  for (cpu::GemmIsa isa : {cpu::GemmIsa::Portable, cpu::GemmIsa::Avx2, cpu::GemmIsa::Avx512}) {
    if (!cpu::set_gemm_isa(isa)) {
      CHECK(int(isa) > int(cpu::gemm_best_isa()));
      CHECK(cpu::gemm_isa() != isa);
      const std::string skipped = cpu::gemm_isa_name(isa);
      MESSAGE("cpu gemm: this CPU has no ", skipped, " variant to test");
      continue;
    }
    CHECK(cpu::gemm_isa() == isa);
    for (const Dims& d : dims)
      for (int la = 0; la < 3; ++la)
        for (int lb = 0; lb < 3; ++lb) {
          const bool large = d.m * d.n * d.k > 1000000;
          if (large && !(la == lb && la < 2)) continue;
          const int lc = large ? 2 * la : (la + lb) % 3;
          const std::string what = fmt::format("{} {}x{}x{} layouts {} {} {}",
                                               cpu::gemm_isa_name(isa), d.m, d.n, d.k, la, lb, lc);
          check_gemm<float>(d.m, d.n, d.k, la, lb, lc, "float " + what);
          check_gemm<double>(d.m, d.n, d.k, la, lb, lc, "double " + what);
        }
    // through matmul: a broadcast batch, on threads, with the variant above
    cpu::set_use_blas(false);
    Threads th(2);
    check_matmul(make({2, 1, 37, 45}, DType::Float32, Layout::Transposed, -1, 1, 141),
                 make({3, 45, 29}, DType::Float32, Layout::Strided, -1, 1, 142),
                 empty({2, 3, 37, 29}), fmt::format("{} broadcast batch", cpu::gemm_isa_name(isa)));
    cpu::set_use_blas(true);
  }
  cpu::set_gemm_isa(before);
}

TEST_CASE("cpu gemm: other cache blocks (MT_GEMM_BLOCKS, set_gemm_blocks) give the same products") {
  // Small blocks put many KC, MC and NC blocks (and the shared packed B's layout by NC) into
  // small products; MC and NC not multiples of MR and NR are rounded up to whole panels.
  const cpu::GemmBlocks before = cpu::gemm_blocks();
  CHECK(before.kc == 256);
  CHECK(before.nc == 1024);
  for (const cpu::GemmBlocks b :
       {cpu::GemmBlocks{16, 10, 40}, cpu::GemmBlocks{7, 0, 33}, cpu::GemmBlocks{1, 1, 1}}) {
    REQUIRE(cpu::set_gemm_blocks(b));
    CHECK(cpu::gemm_blocks().kc == b.kc);
    CHECK(cpu::gemm_blocks().mc == b.mc);
    CHECK(cpu::gemm_blocks().nc == b.nc);
    const std::string what = fmt::format("blocks {},{},{}", b.kc, b.mc, b.nc);
    for (int la = 0; la < 2; ++la) {
      check_gemm<float>(70, 90, 50, la, 1 - la, la, "float " + what);
      check_gemm<double>(33, 130, 41, la, la, 2 * la, "double " + what);
      check_gemm<float>(200, 40, 60, la, la, 0, "float by rows, shared B, " + what);
    }
  }
  cpu::set_use_blas(false);
  CHECK(cpu::blas_info().find("with blocks KC,MC,NC = 1,1,1") != std::string::npos);
  cpu::set_use_blas(true);
  // out of range: refused, and nothing changes
  for (const cpu::GemmBlocks b : {cpu::GemmBlocks{0, 0, 1}, cpu::GemmBlocks{1, -1, 1},
                                  cpu::GemmBlocks{1, 0, 0}, cpu::GemmBlocks{65537, 0, 1}}) {
    CHECK_FALSE(cpu::set_gemm_blocks(b));
    CHECK(cpu::gemm_blocks().kc == 1);
  }
  REQUIRE(cpu::set_gemm_blocks(before));
  // MT_GEMM_BLOCKS's text
  const auto p = cpu::parse_gemm_blocks("384,192,2048");
  REQUIRE(p.has_value());
  CHECK(p->kc == 384);
  CHECK(p->mc == 192);
  CHECK(p->nc == 2048);
  for (const char* bad : {"", "384", "384,192", "384,192,", ",1,2", "1,2,3,4", "1,-2,3", "a,1,2",
                          "1, 2,3", "1234567890,1,1"})
    CHECK_MESSAGE(!cpu::parse_gemm_blocks(bad).has_value(), bad);
}
