// SPDX-License-Identifier: MIT
// The CUDA kernels of mt::silu and mt::silu_backward (kernels/ops/silu/cuda.cpp) against a
// float64 CPU reference, autograd through silu on the GPU,
// the device copy and fill kernels, and the caching allocator under a steady loop.
// Every case needs a GPU and is skipped without one.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda_host/gpu_kernels.h"
#include "minitensor.h"
#include "runtime/cuda/cuda.h"
#include "tests/helpers.h"

namespace {

using namespace mt;

struct CudaTol {
  double rtol, atol;
};
CudaTol tol_of(DType t) {
  switch (t) {
    case DType::Float64:
      return {1e-12, 1e-12};
    case DType::Float32:
      return {1e-5, 1e-6};
    case DType::Float16:
      return {2e-3, 2e-3};
    case DType::BFloat16:
      return {1.6e-2, 1e-2};
    default:
      return {0, 0};
  }
}

// Makes the next allocation of this size on the GPU likely to reuse a block full of NaN,
// so an output element the kernel forgot to write shows up.
void poison(int64_t n, DType t) {
  Tensor p = full({n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = t, .device = kGpu});
  cuda::synchronize(0);
}

void check_close(const Tensor& got_gpu, const Tensor& ref64, DType t, const char* what) {
  REQUIRE(got_gpu.is_cuda());
  REQUIRE(got_gpu.dtype() == t);
  Tensor got = got_gpu.cpu().to(DType::Float64);
  CudaTol tol = tol_of(t);
  INFO(fmt::format("{} dtype {} n {} max diff {}", what, t, got.numel(), max_abs_diff(got, ref64)));
  CHECK(allclose(got, ref64, tol.rtol, tol.atol));
}

// A float32 sum of n terms in a tree of partial sums is off by at most about
// (ceil(log2 n) + 1) unit roundoffs times the sum of the terms' magnitudes (Higham,
// "Accuracy and Stability of Numerical Algorithms", 4.2); near a cancellation that is far
// more than a tolerance relative to the result. The bound here allows 2 ulps of slack a
// level (the chunked kernels add a sequential run per thread before the tree).
void check_sum_close(const Tensor& got_gpu, const Tensor& ref64, const Tensor& abs_sum64, int64_t n,
                     const char* what) {
  REQUIRE(got_gpu.is_cuda());
  Tensor got = got_gpu.cpu().to(DType::Float64);
  const double u = std::ldexp(1.0, -24), levels = std::ceil(std::log2(double(n))) + 1;
  const std::vector<double> g = got.to_vector<double>(), r = ref64.to_vector<double>(),
                            a = abs_sum64.to_vector<double>();
  REQUIRE(g.size() == r.size());
  double worst = 0;  // the largest error as a fraction of its bound
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - r[i]) / (2 * levels * u * a[i] + 1e-30));
  INFO(fmt::format("{} n {} max diff {} ({} of the bound)", what, n, max_abs_diff(got, ref64),
                   worst));
  CHECK(worst <= 1.0);
}

// Input values in [-8, 8) with some exact extremes.
Tensor input(const Shape& shape, DType t, uint64_t seed) {
  Generator g(seed);
  Tensor x = mul(randn(shape, {}, &g), 3.0);
  return x.to(t);
}

const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64, DType::Float16,
                                        DType::BFloat16};

}  // namespace

TEST_CASE("cuda ops (gpu): silu forward matches a float64 CPU reference" *
          doctest::skip(no_gpu())) {
  for (DType t : kFloatTypes) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4096 + 3), int64_t(1) << 20}) {
      Tensor x = input({n}, t, 1 + n);
      Tensor ref = silu(x.to(DType::Float64));
      poison(n, t);
      Tensor y = silu(x.to(kGpu));
      check_close(y, ref, t, "silu fwd contiguous");
    }
    // Transposed (non-contiguous) input.
    Tensor x2 = input({67, 129}, t, 7);
    Tensor xt_gpu = x2.to(kGpu).t();
    REQUIRE_FALSE(xt_gpu.is_contiguous());
    poison(67 * 129, t);
    Tensor yt = silu(xt_gpu);
    CHECK(yt.is_contiguous());
    CHECK(yt.sizes() == Shape{129, 67});
    check_close(yt, silu(x2.t().contiguous().to(DType::Float64)), t, "silu fwd transposed");
    // Misaligned: a slice starting at element 1 (not 16-byte aligned).
    const int64_t m = 4096 + 5;
    Tensor xm = input({m}, t, 11);
    Tensor xm_gpu = xm.to(kGpu).slice(0, 1, m);
    CHECK(xm_gpu.is_contiguous());
    poison(m - 1, t);
    check_close(silu(xm_gpu), silu(xm.slice(0, 1, m).to(DType::Float64)), t, "silu fwd misaligned");
  }
}

TEST_CASE("cuda ops (gpu): silu_backward matches a float64 CPU reference" *
          doctest::skip(no_gpu())) {
  for (DType t : kFloatTypes) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4096 + 3), int64_t(1) << 20}) {
      Tensor x = input({n}, t, 3 + n), g = input({n}, t, 5 + n);
      Tensor ref = silu_backward(g.to(DType::Float64), x.to(DType::Float64));
      poison(n, t);
      Tensor gi = silu_backward(g.to(kGpu), x.to(kGpu));
      check_close(gi, ref, t, "silu bwd contiguous");
    }
    Tensor x2 = input({67, 129}, t, 17), g2 = input({129, 67}, t, 19);
    Tensor xt = x2.to(kGpu).t();  // strided x, contiguous grad
    poison(67 * 129, t);
    check_close(silu_backward(g2.to(kGpu), xt),
                silu_backward(g2.to(DType::Float64), x2.t().contiguous().to(DType::Float64)), t,
                "silu bwd transposed");
    const int64_t m = 4096 + 5;
    Tensor xm = input({m}, t, 23), gm = input({m}, t, 29);
    check_close(
        silu_backward(gm.to(kGpu).slice(0, 1, m), xm.to(kGpu).slice(0, 1, m)),
        silu_backward(gm.slice(0, 1, m).to(DType::Float64), xm.slice(0, 1, m).to(DType::Float64)),
        t, "silu bwd misaligned");
  }
}

namespace {

// Every float16 and bfloat16 value as a tensor (65,536 of them, NaNs and infinities
// included), plus `shift` leading zeros so that a shift of 1 leaves the data misaligned
// for the 16-byte vector kernel and takes the scalar one.
Tensor every_16bit(DType t, int64_t shift) {
  std::vector<uint16_t> bits(size_t(65536 + shift), 0);
  for (uint32_t b = 0; b < 65536; ++b) bits[size_t(b + shift)] = uint16_t(b);
  Tensor host = empty({int64_t(bits.size())}, {.dtype = t});
  std::memcpy(host.data_ptr(), bits.data(), bits.size() * 2);
  return host.to(kGpu).slice(0, shift, 65536 + shift);
}

// The spacing of the 16-bit type's values at v's magnitude (subnormals included).
double ulp16(double v, DType t) {
  const int mant = t == DType::Float16 ? 10 : 7, emin = t == DType::Float16 ? -14 : -126;
  int e = 0;
  std::frexp(std::abs(v), &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

}  // namespace

// Note [16-bit SiLU]: the 16-bit kernels use ex2.approx and rcp.approx instead of expf and
// a division. The forward result must be within one unit in the last place of the float64
// value (a correctly rounded one is within half), at every input; the backward within one
// unit plus 2^-18 of the magnitude of its terms, |g| s (1 + |x| (1 - s)), since
// 1 + x (1 - s) cancels near x = -1.28 in any float arithmetic. NaN must stay NaN and an
// infinity the same infinity.
TEST_CASE("cuda ops (gpu): silu on every 16-bit input is within one ulp of float64" *
          doctest::skip(no_gpu())) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    for (int64_t shift : {0, 1}) {
      Tensor xg = every_16bit(t, shift);
      const std::vector<double> x = xg.cpu().to(DType::Float64).to_vector<double>();
      const std::vector<double> y = silu(xg).cpu().to(DType::Float64).to_vector<double>();
      double worst = 0;
      int64_t exact = 0, finite = 0, bad = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double ref = x[i] / (1.0 + std::exp(-x[i]));
        if (std::isnan(ref) || std::isinf(ref)) {
          const bool same = std::isnan(ref) ? std::isnan(y[i]) : y[i] == ref;
          if (!same && bad++ < 5)
            MESSAGE(fmt::format("{}: silu({}) is {}, not {}", t, x[i], y[i], ref));
          continue;
        }
        const double err = std::abs(y[i] - ref) / ulp16(ref, t);
        ++finite;
        exact += err <= 0.5;
        if (!(err <= 1.0) && bad++ < 5)
          MESSAGE(fmt::format("{}: silu({}) is {}, float64 {} ({} ulp)", t, x[i], y[i], ref, err));
        if (err > worst || std::isnan(err)) worst = err;
      }
      MESSAGE(fmt::format("{} forward{}: max {:.3f} ulp, {} of {} finite results correctly rounded",
                          t, shift ? " (scalar kernel)" : "", worst, exact, finite));
      CHECK(bad == 0);
      CHECK(worst <= 1.0);
    }
    // The backward at three gradients, each exact in both types.
    for (double gv : {1.0, -0.75, 3.5}) {
      Tensor xg = every_16bit(t, 0);
      Tensor gg = full({65536}, gv, {.dtype = t, .device = kGpu});
      const std::vector<double> x = xg.cpu().to(DType::Float64).to_vector<double>();
      const std::vector<double> y =
          silu_backward(gg, xg).cpu().to(DType::Float64).to_vector<double>();
      double worst = 0;
      int64_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double s = 1.0 / (1.0 + std::exp(-x[i]));
        const double ref = gv * s * (1.0 + x[i] * (1.0 - s));
        if (std::isnan(ref) || std::isinf(ref)) {
          const bool same = std::isnan(ref) ? std::isnan(y[i]) : y[i] == ref;
          if (!same && bad++ < 5)
            MESSAGE(fmt::format("{}: silu_backward({}, {}) is {}, not {}", t, gv, x[i], y[i], ref));
          continue;
        }
        const double terms = std::abs(gv) * s * (1.0 + std::abs(x[i]) * (1.0 - s));
        const double err = std::abs(y[i] - ref) / (ulp16(ref, t) + std::ldexp(terms, -18));
        if (!(err <= 1.0) && bad++ < 5)
          MESSAGE(fmt::format("{}: silu_backward({}, {}) is {}, float64 {} ({} of the bound)", t,
                              gv, x[i], y[i], ref, err));
        if (err > worst || std::isnan(err)) worst = err;
      }
      MESSAGE(fmt::format("{} backward, g = {}: max {:.3f} of the bound", t, gv, worst));
      CHECK(bad == 0);
      CHECK(worst <= 1.0);
    }
  }
}

TEST_CASE("cuda ops (gpu): silu rejects integer tensors on CUDA too" * doctest::skip(no_gpu())) {
  Tensor xi = arange(8.0, {.dtype = DType::Int64}).to(kGpu);
  CHECK_THROWS_AS(silu(xi), mt::Error);
}

TEST_CASE("cuda ops (gpu): autograd through silu on CUDA gives x.grad on CUDA" *
          doctest::skip(no_gpu())) {
  for (DType t : {DType::Float32, DType::Float64}) {
    Tensor x_cpu = input({1000}, t, 31);
    Tensor g_cpu = input({1000}, t, 37);
    Tensor x = x_cpu.to(kGpu).detach();
    x.requires_grad_();
    Tensor y = silu(x);
    CHECK(y.is_cuda());
    mt::backward(y, g_cpu.to(kGpu));
    Tensor gx = x.grad();
    REQUIRE(gx.defined());
    CHECK(gx.is_cuda());
    Tensor ref = silu_backward(g_cpu.to(DType::Float64), x_cpu.to(DType::Float64));
    check_close(gx, ref, t, "x.grad");
  }
}

TEST_CASE("cuda ops (gpu): copies between CPU and CUDA, strided and converting on the device" *
          doctest::skip(no_gpu())) {
  Tensor a = input({33, 65}, DType::Float32, 41);
  // Contiguous round trip.
  CHECK(equal(a.to(kGpu).cpu(), a));
  // Device strided -> contiguous (the copy kernel).
  Tensor at_gpu = a.to(kGpu).t();
  CHECK(equal(at_gpu.contiguous().cpu(), a.t().contiguous()));
  // Device dtype conversions.
  for (DType t : {DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Bool}) {
    INFO(fmt::format("to {}", t));
    CHECK(equal(a.to(kGpu).to(t).cpu(), a.to(t)));
    CHECK(equal(at_gpu.to(t).cpu(), a.t().to(t)));  // strided and converting at once
  }
  CHECK(equal(a.to(DType::Float16).to(kGpu).to(DType::BFloat16).cpu(),
              a.to(DType::Float16).to(DType::BFloat16)));
  // copy_ into a strided destination on the device.
  Tensor dst = zeros({65, 33}, {.device = kGpu}).t();
  dst.copy_(a.to(kGpu));
  CHECK(equal(dst.contiguous().cpu(), a));
  // Strided and converting copies between host and device, both ways (staged through
  // contiguous memory on each side).
  Tensor host_t = zeros({65, 33}, {.dtype = DType::Float64}).t();
  host_t.copy_(dst);  // device strided float32 -> host strided float64
  CHECK(equal(host_t, a.to(DType::Float64)));
  Tensor dev_t = zeros({65, 33}, {.dtype = DType::Float16, .device = kGpu}).t();
  dev_t.copy_(a.t().contiguous().t());  // host strided float32 -> device strided float16
  CHECK(equal(dev_t.cpu(), a.to(DType::Float16)));
  // A slice copied back to the host after a device-side contiguous().
  Tensor s = a.to(kGpu).slice(1, 3, 60, 2);
  CHECK(equal(s.contiguous().cpu(), a.slice(1, 3, 60, 2).contiguous()));
}

TEST_CASE("cuda ops (gpu): fill with a value, contiguous and strided" * doctest::skip(no_gpu())) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                  DType::Bool}) {
    INFO(fmt::format("{}", t));
    Tensor f = full({1 << 12 | 3}, 3.0, {.dtype = t, .device = kGpu});
    CHECK(equal(f.cpu(), full({1 << 12 | 3}, 3.0, {.dtype = t})));
    Tensor z = zeros({40, 50}, {.dtype = t, .device = kGpu});
    z.t().slice(0, 0, 50, 3).fill_(1.0);  // strided fill of every third row of the transpose
    Tensor zc = zeros({40, 50}, {.dtype = t});
    zc.t().slice(0, 0, 50, 3).fill_(1.0);
    CHECK(equal(z.cpu(), zc));
  }
}

TEST_CASE("cuda ops (gpu): a steady loop of silu calls makes no driver allocations" *
          doctest::skip(no_gpu())) {
  Tensor x = input({1 << 16}, DType::Float32, 43).to(kGpu);
  for (int i = 0; i < 10; ++i) {  // warm up every size the loop asks for
    Tensor y = silu(x);
    Tensor g = silu_backward(y, x);
  }
  cuda::synchronize(0);
  cuda::AllocatorStats before = cuda::allocator_stats(0);
  for (int i = 0; i < 200; ++i) {
    Tensor y = silu(x);
    Tensor g = silu_backward(y, x);
  }
  cuda::synchronize(0);
  cuda::AllocatorStats after = cuda::allocator_stats(0);
  CHECK(after.driver_allocs == before.driver_allocs);
  CHECK(after.cache_misses == before.cache_misses);
  CHECK(after.cache_hits >= before.cache_hits + 400);
}

// ---- training on the GPU ------------------------------------------------------------------

namespace {

// A two-layer MLP with SiLU and its SGD step, written inline so this test depends on the
// library only: y = silu(x W1 + b1) W2 + b2, mse_loss, p -= lr * p.grad.
struct Mlp {
  std::vector<Tensor> params;  // w1, b1, w2, b2
  Tensor x, target;
};

Mlp make_mlp(int64_t batch, int64_t in, int64_t hidden, int64_t out, Device dev) {
  Generator g(2024);
  Mlp m;
  m.x = randn({batch, in}, {}, &g).to(dev);
  m.target = randn({batch, out}, {}, &g).to(dev);
  m.params = {mul(randn({in, hidden}, {}, &g), 1 / std::sqrt(double(in))), zeros({hidden}),
              mul(randn({hidden, out}, {}, &g), 1 / std::sqrt(double(hidden))), zeros({out})};
  for (Tensor& p : m.params) p = p.to(dev).requires_grad_();
  return m;
}

Tensor mlp_step(Mlp& m, double lr) {
  const std::vector<Tensor>& p = m.params;
  Tensor h = silu(add(matmul(m.x, p[0]), p[1]));
  Tensor loss = mse_loss(add(matmul(h, p[2]), p[3]), m.target);
  backward(loss);
  {
    NoGradGuard no_grad;
    for (const Tensor& t : p) sub_(t, t.grad(), lr);
  }
  zero_grad(m.params);
  return loss;
}

}  // namespace

TEST_CASE("cuda ops (gpu): the MLP trains on the GPU, and its losses follow the CPU run's" *
          doctest::skip(no_gpu())) {
  Mlp cpu_model = make_mlp(64, 32, 64, 4, kCPU), gpu_model = make_mlp(64, 32, 64, 4, kGpu);
  std::vector<double> cpu_loss, gpu_loss;
  for (int step = 0; step < 30; ++step) {
    cpu_loss.push_back(mlp_step(cpu_model, 0.1).item<double>());
    Tensor l = mlp_step(gpu_model, 0.1);
    CHECK(l.is_cuda());
    gpu_loss.push_back(l.item<double>());
  }
  for (size_t i = 0; i < cpu_loss.size(); ++i) {
    CAPTURE(i);
    CHECK(gpu_loss[i] == doctest::Approx(cpu_loss[i]).epsilon(1e-4));
  }
  CHECK(gpu_loss.back() < 0.9 * gpu_loss.front());
  for (size_t k = 0; k < gpu_model.params.size(); ++k) {
    CAPTURE(k);
    CHECK(allclose(gpu_model.params[k].detach().cpu(), cpu_model.params[k].detach(), 1e-4, 1e-5));
  }
}

TEST_CASE("cuda ops (gpu): a steady training loop makes no driver allocations" *
          doctest::skip(no_gpu())) {
  Mlp m = make_mlp(256, 64, 128, 8, kGpu);
  for (int i = 0; i < 5; ++i) mlp_step(m, 0.01);  // warm up: every size the step asks for
  cuda::synchronize(0);
  const cuda::AllocatorStats before = cuda::allocator_stats(0);
  for (int i = 0; i < 50; ++i) mlp_step(m, 0.01);
  cuda::synchronize(0);
  const cuda::AllocatorStats after = cuda::allocator_stats(0);
  CHECK(after.driver_allocs == before.driver_allocs);
  CHECK(after.cache_misses == before.cache_misses);
  CHECK(after.cache_hits > before.cache_hits);
}

TEST_CASE("cuda ops (gpu): randn on CUDA draws the CPU's values, on the device" *
          doctest::skip(no_gpu())) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    CAPTURE(t);
    Generator a(77), b(77);
    Tensor cpu_u = rand({1000}, {.dtype = t}, &a), cpu_n = randn({3, 333}, {.dtype = t}, &a);
    Tensor gpu_u = rand({1000}, {.dtype = t, .device = kGpu}, &b);
    Tensor gpu_n = randn({3, 333}, {.dtype = t, .device = kGpu}, &b);
    CHECK(gpu_u.is_cuda());
    CHECK(equal(gpu_u.cpu(), cpu_u));  // uniform: the same bits on both sides
    // normal: the device's log1p and cos may differ from the host's in the last bit
    CHECK(allclose(gpu_n.cpu().to(DType::Float64), cpu_n.to(DType::Float64), 1e-6, 1e-12));
  }
}

TEST_CASE("cuda ops (gpu): matmul through cuBLAS: transposed views, batches, broadcast, TF32 off" *
          doctest::skip(no_gpu())) {
  REQUIRE_MESSAGE(gpu::cublas_available(), gpu::cublas_unavailable_reason());
  Generator g(9);
  Tensor a = randn({5, 37, 19}, {.dtype = DType::Float64}, &g);
  Tensor b = randn({19, 23}, {.dtype = DType::Float64}, &g);
  Tensor want = matmul(a, b);
  CHECK(allclose(matmul(a.to(kGpu), b.to(kGpu)).cpu(), want, 1e-12, 1e-12));
  // b given as the transpose of a contiguous [23, 19]: cuBLAS reads it with op T.
  Tensor bt = b.t().contiguous().to(kGpu).t();
  REQUIRE_FALSE(bt.is_contiguous());
  CHECK(allclose(matmul(a.to(kGpu), bt).cpu(), want, 1e-12, 1e-12));
  // float32 without TF32: close to float64 at float32's precision, not TF32's (1e-3).
  Tensor a32 = a.to(DType::Float32).to(kGpu), b32 = b.to(DType::Float32).to(kGpu);
  CHECK_FALSE(gpu::allow_tf32());
  CHECK(allclose(matmul(a32, b32).cpu().to(DType::Float64), want, 1e-5, 1e-5));
  // Batched times batched with a broadcast batch dim.
  Tensor c = randn({1, 19, 7}, {.dtype = DType::Float64}, &g);
  CHECK(allclose(matmul(a.to(kGpu), c.expand({5, 19, 7}).to(kGpu)).cpu(),
                 matmul(a, c.expand({5, 19, 7})), 1e-12, 1e-12));
  // int64 is refused with the op's name and a fix.
  Tensor ai = ones({2, 2}, {.dtype = DType::Int64, .device = kGpu});
  CHECK_THROWS_WITH_AS(matmul(ai, ai), doctest::Contains("[matmul] the CUDA kernel (cuBLAS)"),
                       mt::Error);
}

TEST_CASE("cuda ops (gpu): long reductions go over chunks and partials, short ones in one pass" *
          doctest::skip(no_gpu())) {
  // The op harness's samples are short (one pass); these lengths need the chunked passes
  // of kernels/cuda_host/reduce.cpp (rows past 4096 elements, columns past 256 rows).
  for (const Shape& shape : {Shape{3, 100003}, Shape{5000, 7}, Shape{64, 64}, Shape{1, 4097}}) {
    Tensor x = input(shape, DType::Float32, 17);
    Tensor x64 = x.to(DType::Float64);
    Tensor xg = x.to(kGpu);
    for (int64_t d : {int64_t(0), int64_t(1)}) {
      INFO(fmt::format("shape {} dim {}", shape, d));
      check_sum_close(sum(xg, {d}), sum(x64, {d}), sum(abs(x64), {d}), shape[size_t(d)], "sum");
      check_sum_close(mean(xg, {d}), mean(x64, {d}), mean(abs(x64), {d}), shape[size_t(d)], "mean");
      auto [mg, ig] = max(xg, d);
      auto [m64, i64] = max(x64, d);
      check_close(mg, m64, DType::Float32, "max");
      CHECK(equal(ig.cpu(), i64));
    }
    check_close(sum(xg), sum(x64), DType::Float32, "sum all");
  }
}

namespace {
// Runs foreach_add_ over the same lists on the CPU and on cuda:0 and compares every tensor.
void check_foreach_against_cpu(const std::vector<Tensor>& self_cpu,
                               const std::vector<Tensor>& other_cpu, double alpha) {
  std::vector<Tensor> self_gpu, other_gpu;
  for (const Tensor& t : self_cpu) self_gpu.push_back(t.to(kGpu));
  for (const Tensor& t : other_cpu) other_gpu.push_back(t.to(kGpu));
  std::vector<uint32_t> versions;
  for (const Tensor& t : self_gpu) versions.push_back(t.version());
  foreach_add_(self_cpu, other_cpu, alpha);
  foreach_add_(self_gpu, other_gpu, alpha);
  for (size_t i = 0; i < self_cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(self_gpu[i].version() == versions[i] + 1);
    const std::vector<double> want = self_cpu[i].to_vector<double>();
    const std::vector<double> got = self_gpu[i].cpu().to_vector<double>();
    REQUIRE(got.size() == want.size());
    size_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k)
      bad += std::abs(got[k] - want[k]) > 1e-2 * (1 + std::abs(want[k]));
    CHECK(bad == 0);
  }
}
}  // namespace

TEST_CASE(
    "cuda ops (gpu): foreach_add_ over 150 tensors, across chunks and tables, matches the "
    "CPU" *
    doctest::skip(no_gpu())) {
  // More pairs than one table holds (64), a tensor of several chunks (16384 elements each),
  // empty and odd sizes: several multi-tensor launches.
  std::vector<Tensor> self, other;
  for (int i = 0; i < 150; ++i) {
    const int64_t n = i == 3 ? 3 * 16384 + 5 : i == 7 ? 0 : (i * 37) % 300 + 1;
    self.push_back(randn({n}));
    other.push_back(randn({n}));
  }
  self.push_back(randn({400, 16384}));  // 400 chunks: more blocks than one table holds (320)
  other.push_back(randn({400, 16384}));
  check_foreach_against_cpu(self, other, -0.25);
}

TEST_CASE("cuda ops (gpu): foreach_add_ with mixed dtypes, views, int64 and bool, in one list" *
          doctest::skip(no_gpu())) {
  std::vector<Tensor> self = {randn({5, 7}),
                              randn({6}).to(DType::BFloat16),
                              randn({4, 3}).transpose(0, 1),
                              full({9}, 3.0, {.dtype = DType::Int64}),
                              full({4}, 1.0, {.dtype = DType::Bool}),
                              randn({3}).to(DType::Float64)};
  std::vector<Tensor> other = {randn({5, 7}).to(DType::Float16),
                               randn({6}).to(DType::BFloat16),
                               randn({3, 4}),
                               full({9}, -2.0, {.dtype = DType::Int64}),
                               full({4}, 0.0, {.dtype = DType::Bool}),
                               randn({3})};
  check_foreach_against_cpu(self, other, 2.0);
  CHECK(error_of([&] {
          foreach_add_({randn({2}).to(kGpu)}, {randn({2})});
        }).starts_with("[foreach_add_] pair 0: self is on cuda:0 and other on cpu"));
}

// Note [Broadcast binary kernel] (kernels/cuda_device/elementwise.cu): a contiguous out
// whose inputs are each the same shape, one element, or a row of its trailing dims, in its
// dtype or a 16-bit float into float32, takes one launch that reads each input in place in
// its own type. The shapes below take that path (periods dividing the 16-byte pack and not,
// the left input broadcast, a 0-dim and a [1] input, misaligned views) and some beside it
// (a middle broadcast, float32 into float64) that keep the general one; each result must be
// the CPU op's on the same inputs, in the same dtype.
TEST_CASE("cuda ops (gpu): binary ops over broadcasts and mixed 16-bit inputs match the CPU" *
          doctest::skip(no_gpu())) {
  struct Op {
    const char* name;
    Tensor (*f)(const Tensor&, const Tensor&);
  };
  const Op ops[] = {
      {"add alpha 2.5", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
  };
  struct Shapes {
    Shape x, y;
  };
  const Shapes shapes[] = {
      {{37, 64}, {64}},       {{37, 66}, {66}},     {{5, 7, 3}, {7, 3}},  {{64}, {37, 64}},
      {{129}, {1}},           {{129}, {}},          {{1, 64}, {37, 64}},  {{37, 64}, {1, 64}},
      {{3, 1, 5}, {3, 4, 5}}, {{1000, 256}, {256}}, {{37, 64}, {37, 64}},
  };
  const std::pair<DType, DType> dtypes[] = {
      {DType::Float32, DType::Float32},   {DType::BFloat16, DType::Float32},
      {DType::Float32, DType::BFloat16},  {DType::Float16, DType::Float32},
      {DType::Float32, DType::Float16},   {DType::Float64, DType::Float64},
      {DType::BFloat16, DType::BFloat16}, {DType::Float16, DType::Float16},
      {DType::Float32, DType::Float64},   {DType::BFloat16, DType::Float16},
  };
  uint64_t seed = 100;
  int cases = 0;
  for (const Op& op : ops)
    for (const Shapes& sh : shapes)
      for (auto [tx, ty] : dtypes)
        for (bool misaligned : {false, true}) {
          // misaligned: each input a view one element into a larger buffer (no 16-byte packs)
          auto make = [&](const Shape& s, DType t) {
            int64_t n = 1;
            for (int64_t d : s) n *= d;
            Tensor base = input({n + 1}, t, seed++);
            if (op.name[0] == 'd') base = add(abs(base), 0.5).to(t);  // no division by ~0
            Tensor flat = misaligned ? base.narrow(0, 1, n) : base.narrow(0, 0, n);
            return flat.reshape(s);
          };
          const Tensor x = make(sh.x, tx), y = make(sh.y, ty);
          const Tensor want = op.f(x, y);
          poison(want.numel(), want.dtype());
          const Tensor got = op.f(x.to(kGpu), y.to(kGpu));
          CAPTURE(op.name);
          CAPTURE(fmt::format("x {} {}, y {} {}, misaligned {}", sh.x, tx, sh.y, ty, misaligned));
          REQUIRE(got.dtype() == want.dtype());
          REQUIRE(got.sizes() == want.sizes());
          check_close(got, want.to(DType::Float64), want.dtype(), op.name);
          ++cases;
        }
  // In place: a bias added into a contiguous float32 matrix, from bfloat16 and float32.
  for (DType tb : {DType::Float32, DType::BFloat16}) {
    Tensor m = input({33, 40}, DType::Float32, 7), b = input({40}, tb, 8);
    Tensor want = add(m, b);
    Tensor g = m.to(kGpu);
    add_(g, b.to(kGpu));
    check_close(g, want.to(DType::Float64), DType::Float32, "add_ bias");
    ++cases;
  }
  MESSAGE(cases << " broadcast and mixed-dtype cases against the CPU");
}

TEST_CASE("cuda ops (gpu): mse_loss is one kernel, and matches the CPU's for every float dtype" *
          doctest::skip(no_gpu())) {
  for (mt::DType t :
       {mt::DType::Float32, mt::DType::Float64, mt::DType::Float16, mt::DType::BFloat16}) {
    CAPTURE(t);
    const mt::Tensor x = mt::randn({64, 33}).to(t), y = mt::randn({64, 33}).to(t);
    const mt::Tensor g = mt::mse_loss(x.to(kGpu), y.to(kGpu));
    CHECK(g.dtype() == t);
    const double want =
        mt::mse_loss(x.to(mt::DType::Float64), y.to(mt::DType::Float64)).item<double>();
    const double tol = t == mt::DType::Float64 ? 1e-12 : t == mt::DType::Float32 ? 1e-6 : 1e-2;
    CHECK(std::abs(g.item<double>() - want) <= tol * want);
  }
  CHECK(std::isnan(mt::mse_loss(mt::empty({0}, {.device = kGpu}), mt::empty({0}, {.device = kGpu}))
                       .item<float>()));
  const mt::Tensor x = mt::randn({64, 32}).to(kGpu), y = mt::randn({64, 32}).to(kGpu);
  const float eager = mt::mse_loss(x, y).item<float>();
  mt::cuda::Graph g;
  g.capture_begin(0);
  const mt::Tensor l = mt::mse_loss(x, y);
  g.capture_end();
  CHECK(g.num_nodes() == 1);
  g.replay();
  CHECK(l.item<float>() == eager);
}
