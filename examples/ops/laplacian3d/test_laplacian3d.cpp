// SPDX-License-Identifier: MIT
// pde::laplacian3d's tests (build/examples/ops/laplacian3d/laplacian3d_tests, meson test
// suite 'ops'): against a float64 reference of plain loops, self-adjointness, gradcheck
// and gradgradcheck, opcheck, fake shapes, the errors; the CUDA kernels compiled to CUBIN
// for sm_80 and sm_90 with the op's own launch arguments checked against their
// signatures, and run through a CPU emulation of the grid (threads and a barrier). Cases
// marked "(gpu)" run on cuda:0 and are skipped where there is none.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "helpers.h"
#include "laplacian3d.h"
#include "minitensor.h"

// clang-format off
#include "grid_emulation.h"  // last: it defines __global__ and friends
// clang-format on

// laplacian3d.cu compiled as host C++, run by ../grid_emulation.h's threads.
namespace ops_emu {
#include "laplacian3d.cu"
}  // namespace ops_emu
namespace lap_emu = ops_emu;

using namespace mt;

namespace {

// The float64 reference: every point's six neighbours by index arithmetic.
Tensor reference(const Tensor& u, double h, bool periodic) {
  Tensor ud = u.cpu().to(DType::Float64).contiguous();
  const bool batched = u.dim() == 4;
  const int64_t N = batched ? u.sizes()[0] : 1, X = u.sizes()[batched], Y = u.sizes()[batched + 1],
                Z = u.sizes()[batched + 2];
  Tensor out = empty(u.sizes(), {.dtype = DType::Float64});
  const double* in = ud.data_ptr<double>();
  double* o = out.data_ptr<double>();
  auto at = [&](int64_t n, int64_t x, int64_t y, int64_t z) {
    if (periodic) {
      x = (x % X + X) % X;
      y = (y % Y + Y) % Y;
      z = (z % Z + Z) % Z;
    } else if (x < 0 || x >= X || y < 0 || y >= Y || z < 0 || z >= Z) {
      return 0.0;
    }
    return in[((n * X + x) * Y + y) * Z + z];
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t x = 0; x < X; ++x)
      for (int64_t y = 0; y < Y; ++y)
        for (int64_t z = 0; z < Z; ++z)
          o[((n * X + x) * Y + y) * Z + z] =
              (at(n, x - 1, y, z) + at(n, x + 1, y, z) + at(n, x, y - 1, z) + at(n, x, y + 1, z) +
               at(n, x, y, z - 1) + at(n, x, y, z + 1) - 6 * at(n, x, y, z)) /
              (h * h);
  return out;
}

double max_diff64(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a.cpu().to(DType::Float64), b.cpu().to(DType::Float64));
}

double dot64(const Tensor& a, const Tensor& b) {
  return sum(mul(a.to(DType::Float64), b.to(DType::Float64))).item<double>();
}

const std::vector<Shape> kShapes = {{2, 5, 6, 7}, {4, 3, 9}, {1, 1, 1}, {2, 1, 3, 2}, {3, 2, 1, 5}};

// Runs the op's CUDA kernel `which` under the CPU emulation (the launch the op would make).
Tensor emulate(const Tensor& u, double h, bool periodic, pde::Laplacian3dKernel which) {
  Tensor uc = u.contiguous();
  Tensor out = full_like(uc, -123.0);  // every point must be written
  const bool batched = u.dim() == 4;
  const int N = batched ? int(u.sizes()[0]) : 1, X = int(u.sizes()[batched]),
            Y = int(u.sizes()[batched + 1]), Z = int(u.sizes()[batched + 2]);
  auto run = [&](auto* in, auto* o, auto inv_h2) {
    using T = std::remove_pointer_t<decltype(o)>;
    if (which == pde::Laplacian3dKernel::Naive) {
      const long long total = uc.numel();
      const unsigned blocks = unsigned((total + 63) / 64);
      lap_emu::launch({blocks}, {64}, [&] {
        periodic ? lap_emu::pde_laplacian3d_naive<T, true>(in, o, total, X, Y, Z, inv_h2)
                 : lap_emu::pde_laplacian3d_naive<T, false>(in, o, total, X, Y, Z, inv_h2);
      });
      return;
    }
    if (which == pde::Laplacian3dKernel::Stream) {
      // A small GPU's worth of SMs, so the x axis is cut into several chunks.
      const int vec = pde::laplacian3d_vec(uc);
      const int zb = (Z / vec + lap_emu::kStreamBlockZ - 1) / lap_emu::kStreamBlockZ;
      const int yb = (Y + lap_emu::kStreamBlockY - 1) / lap_emu::kStreamBlockY;
      const int x_chunk = pde::laplacian3d_x_chunk(N, X, Y, Z, 2, lap_emu::kStreamBlockZ * vec,
                                                   lap_emu::kStreamBlockY, 32, 4);
      const unsigned blocks = unsigned(zb * yb * N * ((X + x_chunk - 1) / x_chunk));
      const lap_emu::Dim block{unsigned(lap_emu::kStreamBlockZ), unsigned(lap_emu::kStreamBlockY)};
      lap_emu::launch({blocks}, block, [&] {
        constexpr int V = sizeof(T) == 4 ? 4 : 2;
        if (vec == 1)
          periodic
              ? lap_emu::pde_laplacian3d_stream<T, true, 1>(in, o, X, Y, Z, zb, yb, x_chunk, inv_h2)
              : lap_emu::pde_laplacian3d_stream<T, false, 1>(in, o, X, Y, Z, zb, yb, x_chunk,
                                                             inv_h2);
        else
          periodic
              ? lap_emu::pde_laplacian3d_stream<T, true, V>(in, o, X, Y, Z, zb, yb, x_chunk, inv_h2)
              : lap_emu::pde_laplacian3d_stream<T, false, V>(in, o, X, Y, Z, zb, yb, x_chunk,
                                                             inv_h2);
      });
      return;
    }
    // A small GPU's worth of SMs, so the x axis is cut into several chunks.
    const int x_chunk = pde::laplacian3d_x_chunk(N, X, Y, Z, 2);
    const unsigned chunks = unsigned((X + x_chunk - 1) / x_chunk);
    const lap_emu::Dim grid{unsigned((Z + lap_emu::kTileZ - 1) / lap_emu::kTileZ),
                            unsigned((Y + lap_emu::kTileY - 1) / lap_emu::kTileY),
                            unsigned(N) * chunks};
    lap_emu::launch(grid, {unsigned(lap_emu::kTileZ), unsigned(lap_emu::kTileY)}, [&] {
      periodic ? lap_emu::pde_laplacian3d_tiled<T, true>(in, o, X, Y, Z, x_chunk, inv_h2)
               : lap_emu::pde_laplacian3d_tiled<T, false>(in, o, X, Y, Z, x_chunk, inv_h2);
    });
  };
  if (u.dtype() == DType::Float32)
    run(uc.data_ptr<float>(), out.data_ptr<float>(), float(1 / (h * h)));
  else
    run(uc.data_ptr<double>(), out.data_ptr<double>(), 1 / (h * h));
  return out;
}

}  // namespace

TEST_SUITE("pde::laplacian3d") {
  TEST_CASE("laplacian3d: CPU matches the float64 reference, both boundaries and dtypes") {
    manual_seed(11);
    for (const Shape& s : kShapes)
      for (const char* boundary : {"zero", "periodic"})
        for (DType t : {DType::Float32, DType::Float64}) {
          CAPTURE(s);
          CAPTURE(boundary);
          CAPTURE(t);
          Tensor u = randn(s).to(t);
          Tensor y = pde::laplacian3d(u, 0.5, boundary);
          CHECK(y.dtype() == t);
          CHECK(y.sizes() == s);
          const double tol = t == DType::Float64 ? 1e-12 : 1e-4;
          CHECK(max_diff64(y, reference(u, 0.5, std::string(boundary) == "periodic")) < tol);
        }
    // The defaults (h = 1, zero boundary), and a permuted view read through its strides.
    Tensor u = randn({6, 5, 4}, {.dtype = DType::Float64});
    CHECK(max_diff64(pde::laplacian3d(u), reference(u, 1.0, false)) < 1e-12);
    Tensor v = randn({4, 5, 6}, {.dtype = DType::Float64}).permute({2, 1, 0});
    REQUIRE_FALSE(v.is_contiguous());
    CHECK(max_diff64(pde::laplacian3d(v, 2.0, "periodic"), reference(v, 2.0, true)) < 1e-12);
    // Known values: a line of 3 in a zero boundary (its y and z neighbours are all 0), and
    // a constant on a periodic grid, whose Laplacian is 0.
    Tensor q = from_vector(std::vector<double>{1, 4, 9}, {3, 1, 1}, {.dtype = DType::Float64});
    CHECK(pde::laplacian3d(q, 1.0, "zero").to_vector<double>() ==
          std::vector<double>{4 - 6, 1 + 9 - 24, 4 - 54});
    CHECK(max(abs(pde::laplacian3d(full({2, 3, 4, 5}, 7.0), 0.1, "periodic"))).item<float>() == 0);
    // A zero-size grid gives a zero-size result.
    CHECK(pde::laplacian3d(empty({0, 4, 4, 4})).sizes() == Shape{0, 4, 4, 4});
  }

  TEST_CASE("laplacian3d: the stencil is self-adjoint, <L u, v> == <u, L v>") {
    manual_seed(12);
    for (const char* boundary : {"zero", "periodic"}) {
      CAPTURE(boundary);
      Tensor u = randn({2, 4, 5, 6}, {.dtype = DType::Float64});
      Tensor v = randn({2, 4, 5, 6}, {.dtype = DType::Float64});
      const double a = dot64(pde::laplacian3d(u, 0.3, boundary), v);
      const double b = dot64(u, pde::laplacian3d(v, 0.3, boundary));
      CHECK(std::abs(a - b) < 1e-9 * (1 + std::abs(a)));
    }
  }

  TEST_CASE("laplacian3d: gradcheck and gradgradcheck in float64, both boundaries") {
    manual_seed(13);
    for (const char* boundary : {"zero", "periodic"}) {
      CAPTURE(boundary);
      auto f = [boundary](const std::vector<Tensor>& in) {
        return pde::laplacian3d(in[0], 0.7, boundary);
      };
      Tensor u = randn({2, 3, 4, 3}, {.dtype = DType::Float64, .requires_grad = true});
      GradcheckResult gc = gradcheck(f, {u});
      CHECK_MESSAGE(gc.ok, gc.message);
      Tensor w = randn({3, 2, 4}, {.dtype = DType::Float64, .requires_grad = true});
      GradcheckResult gg = gradgradcheck(f, {w});
      CHECK_MESSAGE(gg.ok, gg.message);
    }
    // The gradient of sum(L u * c) is L c: the backward is the op on the gradient.
    Tensor u = randn({3, 4, 5}, {.dtype = DType::Float64, .requires_grad = true});
    Tensor c = randn({3, 4, 5}, {.dtype = DType::Float64});
    backward(sum(mul(pde::laplacian3d(u, 1.5, "periodic"), c)));
    CHECK(max_diff64(u.grad(), reference(c, 1.5, true)) < 1e-12);
  }

  TEST_CASE("laplacian3d: opcheck passes (schema, fake, autograd registration, gradcheck)") {
    manual_seed(14);
    OpCheckReport r = opcheck(pde::laplacian3d_handle(),
                              {Stack{randn({3, 4, 5})}, Stack{randn({2, 3, 4, 3}), 0.5, "periodic"},
                               Stack{randn({5, 4, 3}).permute({2, 0, 1}), 2.0, "zero"}});
    CHECK_MESSAGE(r.ok(), r.str());
    CHECK(r.tests.size() == 5);
    CHECK(pde::laplacian3d_handle().schema().str() ==
          "pde::laplacian3d(Tensor u, float h=1.0, str boundary=\"zero\") -> Tensor");
  }

  TEST_CASE("laplacian3d: fake tensors give the output's shape, dtype and device") {
    Tensor u = fake_empty({2, 64, 64, 64}, {.dtype = DType::Float64, .device = Device("cuda:0")});
    Tensor y = pde::laplacian3d(u, 0.1, "periodic");
    CHECK(y.is_fake());
    CHECK(y.sizes() == Shape{2, 64, 64, 64});
    CHECK(y.dtype() == DType::Float64);
    CHECK(y.device() == Device("cuda:0"));
    CHECK(error_of([] {
            pde::laplacian3d(fake_empty({4, 4}));
          }).starts_with("[pde::laplacian3d] expects a grid of shape"));
  }

  TEST_CASE("laplacian3d: wrong rank, dtype, boundary and spacing are errors naming the op") {
    CHECK(error_of([] {
            pde::laplacian3d(randn({3, 4}));
          }) ==
          "[pde::laplacian3d] expects a grid of shape [N, X, Y, Z] or [X, Y, Z], got a tensor of "
          "2 dimensions [3, 4]; reshape it to one of those");
    CHECK(error_of([] {
            pde::laplacian3d(randn({1, 2, 3, 4, 5}));
          })
              .starts_with("[pde::laplacian3d] expects a grid of shape [N, X, Y, Z] or [X, Y, Z], "
                           "got a tensor of "
                           "5 dimensions"));
    CHECK(error_of([] {
            pde::laplacian3d(zeros({3, 3, 3}, {.dtype = DType::Int64}));
          }) ==
          "[pde::laplacian3d] supports float32 and float64, got int64; convert with "
          "u.to(mt::DType::Float32)");
    CHECK(error_of([] {
            pde::laplacian3d(randn({3, 3, 3}).to(DType::BFloat16));
          }) ==
          "[pde::laplacian3d] supports float32 and float64, got bfloat16; convert with "
          "u.to(mt::DType::Float32)");
    CHECK(error_of([] {
            pde::laplacian3d(randn({3, 3, 3}), 1.0, "reflect");
          }) == "[pde::laplacian3d] boundary must be \"zero\" or \"periodic\", got \"reflect\"");
    CHECK(error_of([] {
            pde::laplacian3d(randn({3, 3, 3}), 0.0);
          }) == "[pde::laplacian3d] the grid spacing h must be a positive finite number, got 0");
    // Boxed, the same checks run (and a missing argument takes its default).
    Stack st{randn({3, 3, 3}), 1.0, "mirror"};
    CHECK(error_of([&] { pde::laplacian3d_handle().call_boxed(&st); }) ==
          "[pde::laplacian3d] boundary must be \"zero\" or \"periodic\", got \"mirror\"");
  }

  TEST_CASE("laplacian3d: the CUDA kernels compute the reference under a CPU emulation") {
    manual_seed(15);
    using K = pde::Laplacian3dKernel;
    for (auto which : {K::Stream, K::Tiled, K::Naive})
      for (const char* boundary : {"zero", "periodic"})
        // Z = 37 and 9: Stream's scalar path; Z = 12 and 2: its 16-byte one (4 and 1 vectors
        // a row in float64); Y = 11 and 9 leave partial blocks.
        for (const Shape& s : {Shape{2, 19, 11, 37}, Shape{1, 1, 1}, Shape{3, 1, 9},
                               Shape{2, 5, 9, 12}, Shape{3, 2, 2}}) {
          const bool periodic = std::string(boundary) == "periodic";
          CAPTURE(s);
          CAPTURE(boundary);
          CAPTURE(int(which));
          Tensor u = randn(s, {.dtype = DType::Float64});
          CHECK(max_diff64(emulate(u, 0.5, periodic, which), reference(u, 0.5, periodic)) < 1e-12);
        }
    // float32, several x chunks (19 planes on 2 SMs).
    CHECK(pde::laplacian3d_x_chunk(2, 19, 11, 37, 2) < 19);
    Tensor u = randn({2, 19, 11, 37});
    Tensor tiled = emulate(u, 1.0, false, pde::Laplacian3dKernel::Tiled);
    CHECK(max_diff64(tiled, reference(u, 1.0, false)) < 1e-4);
    // float32 with 16-byte vectors (Z = 16) over several x chunks, both boundaries.
    Tensor v = randn({1, 24, 9, 16});
    CHECK(pde::laplacian3d_vec(v) == 4);
    CHECK(pde::laplacian3d_vec(v.to(DType::Float64)) == 2);
    CHECK(pde::laplacian3d_vec(randn({3, 3, 6})) == 1);
    for (bool periodic : {false, true})
      CHECK(max_diff64(emulate(v, 1.0, periodic, pde::Laplacian3dKernel::Stream),
                       reference(v, 1.0, periodic)) < 1e-4);
  }

  TEST_CASE("laplacian3d: x chunks fill the GPU without cutting planes thinner than 8") {
    // 132 SMs want 1056 blocks. 128^3: 64 tiles, so 16 chunks of 8 planes (not 17 thinner
    // ones); 512^3 and 64 grids of 64^3: 1024 tiles, so 2 chunks; 2048 tiles need none.
    CHECK(pde::laplacian3d_x_chunk(1, 128, 128, 128, 132) == 8);
    CHECK(pde::laplacian3d_x_chunk(1, 512, 512, 512, 132) == 256);
    CHECK(pde::laplacian3d_x_chunk(64, 64, 64, 64, 132) == 32);
    CHECK(pde::laplacian3d_x_chunk(128, 64, 64, 64, 132) == 64);
    CHECK(pde::laplacian3d_x_chunk(1, 3, 3, 3, 132) == 3);
    // The stream kernel's (128 x 8 points a block in float32, 32 blocks a SM, 4 planes):
    // 4 planes at N = 128 and 256, 31 at 512 (256 tiles, 17 chunks).
    CHECK(pde::laplacian3d_x_chunk(1, 128, 128, 128, 132, 128, 8, 32, 4) == 4);
    CHECK(pde::laplacian3d_x_chunk(1, 256, 256, 256, 132, 128, 8, 32, 4) == 4);
    CHECK(pde::laplacian3d_x_chunk(1, 512, 512, 512, 132, 128, 8, 32, 4) == 31);
  }

  TEST_CASE(
      "laplacian3d: every kernel compiles to CUBIN for sm_80 and sm_90, and the op's launch "
      "arguments match their signatures" *
      doctest::skip(no_nvrtc())) {
    using K = pde::Laplacian3dKernel;
    for (int arch : cubin_test_archs())
      for (auto [which, vector] : {std::pair{K::Stream, true}, std::pair{K::Stream, false},
                                   std::pair{K::Tiled, true}, std::pair{K::Naive, true}})
        for (DType t : {DType::Float32, DType::Float64})
          for (bool periodic : {false, true}) {
            CAPTURE(arch);
            CAPTURE(t);
            CAPTURE(periodic);
            CAPTURE(int(which));
            const auto& k = pde::laplacian3d_kernel(t, periodic, which, vector);
            const auto params = k.parameters(arch);
            REQUIRE(params.known);
            CHECK(params.types.size() == (which == K::Stream ? 9u : 7u));
            const std::string scalar = t == DType::Float32 ? "float" : "double";
            CHECK(params.types[0] == scalar + " const*");
            CHECK(params.types[1] == scalar + "*");
            CHECK_NOTHROW(pde::laplacian3d_check_launch(arch, empty({2, 8, 9, 10}, {.dtype = t}),
                                                        0.5, periodic, which));
            CHECK_NOTHROW(pde::laplacian3d_check_launch(arch, empty({2, 8, 9, 12}, {.dtype = t}),
                                                        0.5, periodic, which));
          }
    // The check is not vacuous: a float64 tensor for the float kernel is refused.
    const auto& k = pde::laplacian3d_kernel(DType::Float32, false, pde::Laplacian3dKernel::Tiled);
    Tensor d = empty({4, 4, 4}, {.dtype = DType::Float64});
    CHECK(error_of([&] { k.check_args(90, d, d, 4, 4, 4, 4, 1.0f); })
              .starts_with("[jit] pde_laplacian3d_tiled<float, false>: argument 1 is a Tensor "
                           "(float64, cpu)"));
  }

  // --------------------------------------------------------------------------- on cuda:0

  TEST_CASE("laplacian3d (gpu): stream, tiled and naive kernels match the reference on cuda:0" *
            doctest::skip(no_gpu())) {
    manual_seed(16);
    const Device gpu("cuda:0");
    for (const Shape& s : {Shape{2, 19, 11, 37}, Shape{1, 1, 1}, Shape{64, 64, 64},
                           Shape{1, 40, 33, 130}, Shape{3, 2, 1, 5}, Shape{2, 17, 9, 132}})
      for (const char* boundary : {"zero", "periodic"})
        for (DType t : {DType::Float32, DType::Float64}) {
          CAPTURE(s);
          CAPTURE(boundary);
          CAPTURE(t);
          const bool periodic = std::string(boundary) == "periodic";
          Tensor u = randn(s).to(t);
          Tensor want = reference(u, 0.25, periodic);
          const double tol = t == DType::Float64 ? 1e-10 : 2e-3;
          Tensor ug = u.to(gpu);
          Tensor y = pde::laplacian3d(ug, 0.25, boundary);
          CHECK(y.device() == gpu);
          CHECK(max_diff64(y, want) < tol);
          for (auto which : {pde::Laplacian3dKernel::Tiled, pde::Laplacian3dKernel::Naive})
            CHECK(max_diff64(pde::laplacian3d_cuda(ug, 0.25, periodic, which), want) < tol);
          // x chunks of 1 plane and of the whole axis.
          for (int chunk : {1, 1 << 30})
            CHECK(max_diff64(pde::laplacian3d_cuda(ug, 0.25, periodic,
                                                   pde::Laplacian3dKernel::Stream, chunk),
                             want) < tol);
        }
    // A permuted view is made contiguous before the launch.
    Tensor v = randn({5, 6, 7}, {.dtype = DType::Float64});
    Tensor vp = v.to(gpu).permute({1, 2, 0});
    Tensor want = reference(v.permute({1, 2, 0}), 1.0, true);
    CHECK(max_diff64(pde::laplacian3d(vp, 1.0, "periodic"), want) < 1e-10);
  }

  TEST_CASE("laplacian3d (gpu): gradcheck, gradgradcheck and opcheck on cuda:0" *
            doctest::skip(no_gpu())) {
    manual_seed(17);
    const Device gpu("cuda:0");
    for (const char* boundary : {"zero", "periodic"}) {
      CAPTURE(boundary);
      auto f = [boundary](const std::vector<Tensor>& in) {
        return pde::laplacian3d(in[0], 0.7, boundary);
      };
      Tensor u = randn({2, 3, 4, 3}, {.dtype = DType::Float64}).to(gpu).requires_grad_();
      GradcheckResult gc = gradcheck(f, {u});
      CHECK_MESSAGE(gc.ok, gc.message);
      GradcheckResult gg = gradgradcheck(f, {u});
      CHECK_MESSAGE(gg.ok, gg.message);
    }
    OpCheckReport r = opcheck(
        pde::laplacian3d_handle(),
        {Stack{randn({3, 4, 5}).to(gpu)}, Stack{randn({2, 3, 4, 33}).to(gpu), 0.5, "periodic"}});
    CHECK_MESSAGE(r.ok(), r.str());
  }
}
