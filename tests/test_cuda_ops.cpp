// The CUDA kernels of the built-in ops (kernels/ops/cuda_silu.cpp): mt::silu and
// mt::silu_backward against a float64 CPU reference, autograd through silu on the GPU,
// the device copy and fill kernels, and the caching allocator under a steady loop.
// Every case needs a GPU and is skipped without one.
#include <cmath>
#include <limits>
#include <vector>

#include "minitensor.h"
#include "tests/helpers.h"

namespace {

using namespace mt;

bool no_gpu() { return !cuda::is_available(); }
const Device kGpu{DeviceType::CUDA, 0};

struct Tol {
  double rtol, atol;
};
Tol tol_of(DType t) {
  switch (t) {
    case DType::Float64: return {1e-12, 1e-12};
    case DType::Float32: return {1e-5, 1e-6};
    case DType::Float16: return {2e-3, 2e-3};
    case DType::BFloat16: return {1.6e-2, 1e-2};
    default: return {0, 0};
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
  Tol tol = tol_of(t);
  INFO(fmt::format("{} dtype {} n {} max diff {}", what, t, got.numel(), max_abs_diff(got, ref64)));
  CHECK(allclose(got, ref64, tol.rtol, tol.atol));
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

TEST_CASE("cuda ops (gpu): silu forward matches a float64 CPU reference" * doctest::skip(no_gpu())) {
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
    check_close(silu_backward(gm.to(kGpu).slice(0, 1, m), xm.to(kGpu).slice(0, 1, m)),
                silu_backward(gm.slice(0, 1, m).to(DType::Float64),
                              xm.slice(0, 1, m).to(DType::Float64)),
                t, "silu bwd misaligned");
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
  // (cuda::copy does no strided host<->device copies: make the device side contiguous.)
  CHECK(equal(dst.contiguous().cpu(), a));
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
