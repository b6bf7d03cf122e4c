// SPDX-License-Identifier: MIT
// pde::laplacian3d, written the way a user writes a custom op: a CPU kernel of plain
// loops, the CUDA kernels of laplacian3d.cu launched through mt::jit::kernel, and the
// registrations (custom_op, register_kernel, register_fake, register_autograd).
#include "laplacian3d.h"

#include <algorithm>
#include <any>
#include <cmath>
#include <limits>
#include <vector>

#include "laplacian3d_cu.h"  // kLaplacian3dCu: laplacian3d.cu's text (embed_cu.py)

#ifdef _OPENMP
#define PDE_OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#define PDE_OMP_FOR
#endif

using namespace mt;

namespace pde {
namespace {

constexpr int kTileZ = 32, kTileY = 8;           // laplacian3d.cu's tile
constexpr unsigned kStreamZ = 32, kStreamY = 8;  // and its stream kernel's block
// The stream kernel's x chunks: about 32 blocks a SM (4 waves of 8 resident), at least 4
// planes a chunk. Chosen from the H200 sweep (`laplacian3d_bench --sweep`,
// docs/results/2026-12-04-h200-laplacian3d-sweep.json): 4 planes were fastest at N = 128
// and 256 and within 3% of the best at 512, and one plane (no reuse along x) was 10 to 20%
// slower.
constexpr int kStreamBlocksPerSm = 32, kStreamMinPlanes = 4;

struct Grid {
  int64_t n = 1, x = 0, y = 0, z = 0;
};

// The checks every kernel (CPU, CUDA, fake) makes; returns whether the boundary is periodic.
bool check_inputs(const Tensor& u, double h, const std::string& boundary) {
  MT_CHECK(u.dim() == 3 || u.dim() == 4,
           "[pde::laplacian3d] expects a grid of shape [N, X, Y, Z] or [X, Y, Z], got a tensor "
           "of {} dimensions {}; reshape it to one of those",
           u.dim(), u.sizes());
  MT_CHECK(u.dtype() == DType::Float32 || u.dtype() == DType::Float64,
           "[pde::laplacian3d] supports float32 and float64, got {}; convert with "
           "u.to(mt::DType::Float32)",
           u.dtype());
  MT_CHECK(boundary == "zero" || boundary == "periodic",
           "[pde::laplacian3d] boundary must be \"zero\" or \"periodic\", got \"{}\"", boundary);
  MT_CHECK(std::isfinite(h) && h > 0,
           "[pde::laplacian3d] the grid spacing h must be a positive finite number, got {}", h);
  return boundary == "periodic";
}

Grid grid_of(const Tensor& u) {
  const Shape& s = u.sizes();
  return u.dim() == 4 ? Grid{s[0], s[1], s[2], s[3]} : Grid{1, s[0], s[1], s[2]};
}

// Plane by plane (OpenMP over N * X planes); each (x, y) row of z values reads its four
// neighbour rows, a row of zeros where the zero boundary drops one.
template <typename T>
void laplacian_cpu_loop(const T* u, T* out, Grid g, bool periodic, T inv_h2) {
  const int64_t X = g.x, Y = g.y, Z = g.z, planes = g.n * X;
  PDE_OMP_FOR
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t n = p / X, x = p % X;
    const T* un = u + n * X * Y * Z;
    T* on = out + n * X * Y * Z;
    std::vector<T> zero_row(size_t(Z), T(0));
    auto row = [&](int64_t xx, int64_t yy) -> const T* {
      if (periodic) {
        xx = (xx + X) % X;
        yy = (yy + Y) % Y;
      }
      if (xx < 0 || xx >= X || yy < 0 || yy >= Y) return zero_row.data();
      return un + (xx * Y + yy) * Z;
    };
    for (int64_t y = 0; y < Y; ++y) {
      const T *c = row(x, y), *xm = row(x - 1, y), *xp = row(x + 1, y), *ym = row(x, y - 1),
              *yp = row(x, y + 1);
      T* o = on + (x * Y + y) * Z;
      const T z_first = periodic ? c[Z - 1] : T(0), z_last = periodic ? c[0] : T(0);
      for (int64_t z = 0; z < Z; ++z) {
        const T zm = z > 0 ? c[z - 1] : z_first, zp = z + 1 < Z ? c[z + 1] : z_last;
        o[z] = (xm[z] + xp[z] + ym[z] + yp[z] + zm + zp - T(6) * c[z]) * inv_h2;
      }
    }
  }
}

Tensor laplacian_cpu(const Tensor& u, double h, const std::string& boundary) {
  const bool periodic = check_inputs(u, h, boundary);
  Tensor uc = u.contiguous();
  Tensor out = empty(u.sizes(), {.dtype = u.dtype()});
  if (u.numel() == 0) return out;
  const double inv_h2 = 1.0 / (h * h);
  if (u.dtype() == DType::Float32)
    laplacian_cpu_loop(uc.data_ptr<float>(), out.data_ptr<float>(), grid_of(u), periodic,
                       float(inv_h2));
  else
    laplacian_cpu_loop(uc.data_ptr<double>(), out.data_ptr<double>(), grid_of(u), periodic, inv_h2);
  return out;
}

// The launch of `which` for u -> out, handed to f(kernel, config, args...): the op's
// launch and the GPU-less argument check go through the same code.
template <typename F>
void with_launch(const Tensor& u, const Tensor& out, double h, bool periodic,
                 Laplacian3dKernel which, int sm_count, int x_chunk_override, F&& f) {
  const Grid g = grid_of(u);
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  MT_CHECK(g.x <= kMaxInt && g.y <= kMaxInt && g.z <= kMaxInt,
           "[pde::laplacian3d] grid sides must be below 2^31, got {}", u.sizes());
  const int vec = laplacian3d_vec(u);
  const jit::UserKernel& k = laplacian3d_kernel(u.dtype(), periodic, which, vec > 1);
  const int X = int(g.x), Y = int(g.y), Z = int(g.z);
  auto go = [&](auto inv_h2) {
    if (which == Laplacian3dKernel::Naive) {
      const long long total = u.numel();
      f(k, jit::LaunchConfig{.grid = jit::grid_for(total)}, u, out, total, X, Y, Z, inv_h2);
      return;
    }
    if (which == Laplacian3dKernel::Stream) {
      const int64_t zb = (g.z / vec + kStreamZ - 1) / kStreamZ,
                    yb = (g.y + kStreamY - 1) / kStreamY;
      const int x_chunk = x_chunk_override > 0
                              ? std::min(x_chunk_override, X)
                              : laplacian3d_x_chunk(g.n, g.x, g.y, g.z, sm_count, kStreamZ * vec,
                                                    kStreamY, kStreamBlocksPerSm, kStreamMinPlanes);
      const int64_t blocks = zb * yb * g.n * ((g.x + x_chunk - 1) / x_chunk);
      MT_CHECK(blocks <= kMaxInt,
               "[pde::laplacian3d] a grid of {} needs {} blocks, more than a launch takes (2^31 - "
               "1); split the batch",
               u.sizes(), blocks);
      f(k, jit::LaunchConfig{.grid = {unsigned(blocks)}, .block = {kStreamZ, kStreamY}}, u, out, X,
        Y, Z, int(zb), int(yb), x_chunk, inv_h2);
      return;
    }
    const int x_chunk = x_chunk_override > 0 ? std::min(x_chunk_override, X)
                                             : laplacian3d_x_chunk(g.n, g.x, g.y, g.z, sm_count);
    const int64_t chunks = (g.x + x_chunk - 1) / x_chunk;
    const int64_t gy = (g.y + kTileY - 1) / kTileY, gz = g.n * chunks;
    MT_CHECK(gy <= 65535 && gz <= 65535,
             "[pde::laplacian3d] the tiled kernel takes at most {} grids of {} rows, got {}", 65535,
             65535 * kTileY, u.sizes());
    const jit::LaunchConfig config{
        .grid = {unsigned((g.z + kTileZ - 1) / kTileZ), unsigned(gy), unsigned(gz)},
        .block = {unsigned(kTileZ), unsigned(kTileY)}};
    f(k, config, u, out, X, Y, Z, x_chunk, inv_h2);
  };
  const double inv_h2 = 1.0 / (h * h);
  if (u.dtype() == DType::Float32)
    go(float(inv_h2));
  else
    go(inv_h2);
}

Tensor laplacian_cuda_kernel(const Tensor& u, double h, const std::string& boundary) {
  return laplacian3d_cuda(u, h, check_inputs(u, h, boundary));
}

Tensor laplacian_fake(const Tensor& u, double h, const std::string& boundary) {
  check_inputs(u, h, boundary);
  return empty_like(u);
}

auto make_op() {
  auto op = custom_op("pde::laplacian3d", laplacian_cpu,
                      {.schema = "(Tensor u, float h=1.0, str boundary=\"zero\") -> Tensor"});
  op.register_kernel(DeviceType::CUDA, laplacian_cuda_kernel);
  op.register_fake(laplacian_fake);
  // The stencil is symmetric for both boundaries (each neighbour pair appears in both
  // rows, wrapped or dropped alike), so the vector-Jacobian product is the op itself on
  // the gradient, and calling the op (not a kernel) makes the backward differentiable.
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& grad) {
        return laplacian3d(grad, std::any_cast<double>(ctx.data.at("h")),
                           std::any_cast<std::string>(ctx.data.at("boundary")));
      },
      [](AutogradContext& ctx, const Tensor&, double h, const std::string& boundary,
         const Tensor&) {
        ctx.data["h"] = h;
        ctx.data["boundary"] = boundary;
      });
  return op;
}

const auto& the_op() {
  static const auto op = make_op();
  return op;
}

}  // namespace

Tensor laplacian3d(const Tensor& u, double h, const std::string& boundary) {
  return the_op()(u, h, boundary);
}

const OperatorHandle& laplacian3d_handle() { return the_op().handle(); }

const jit::UserKernel& laplacian3d_kernel(DType dtype, bool periodic, Laplacian3dKernel which,
                                          bool vector) {
  auto make = [](const char* name) { return jit::kernel(kLaplacian3dCu, name); };
  // [stream 16-byte, stream scalar, tiled, naive][float, double][zero, periodic]
  static const jit::UserKernel kernels[4][2][2] = {
      {{make("pde_laplacian3d_stream<float, false, 4>"),
        make("pde_laplacian3d_stream<float, true, 4>")},
       {make("pde_laplacian3d_stream<double, false, 2>"),
        make("pde_laplacian3d_stream<double, true, 2>")}},
      {{make("pde_laplacian3d_stream<float, false, 1>"),
        make("pde_laplacian3d_stream<float, true, 1>")},
       {make("pde_laplacian3d_stream<double, false, 1>"),
        make("pde_laplacian3d_stream<double, true, 1>")}},
      {{make("pde_laplacian3d_tiled<float, false>"), make("pde_laplacian3d_tiled<float, true>")},
       {make("pde_laplacian3d_tiled<double, false>"), make("pde_laplacian3d_tiled<double, true>")}},
      {{make("pde_laplacian3d_naive<float, false>"), make("pde_laplacian3d_naive<float, true>")},
       {make("pde_laplacian3d_naive<double, false>"),
        make("pde_laplacian3d_naive<double, true>")}}};
  const int row = which == Laplacian3dKernel::Stream  ? (vector ? 0 : 1)
                  : which == Laplacian3dKernel::Tiled ? 2
                                                      : 3;
  return kernels[row][dtype == DType::Float64][periodic];
}

int laplacian3d_vec(const Tensor& u) {
  const int v = u.dtype() == DType::Float64 ? 2 : 4;
  const int64_t Z = u.dim() > 0 ? u.sizes()[size_t(u.dim() - 1)] : 0;
  return Z % v == 0 && u.storage_offset() % v == 0 ? v : 1;
}

int laplacian3d_x_chunk(int64_t n_batch, int64_t X, int64_t Y, int64_t Z, int sm_count,
                        int64_t tile_z, int64_t tile_y, int blocks_per_sm, int min_planes) {
  // Enough blocks for blocks_per_sm a SM (256 threads each); chunks of at least min_planes.
  const int64_t tiles = ((Z + tile_z - 1) / tile_z) * ((Y + tile_y - 1) / tile_y) * n_batch;
  const int64_t want = int64_t(sm_count) * blocks_per_sm;
  int64_t chunks = tiles >= want ? 1 : (want + tiles - 1) / tiles;
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, X / min_planes));
  chunks = std::min<int64_t>(chunks, std::max<int64_t>(1, 65535 / std::max<int64_t>(1, n_batch)));
  return int(std::max<int64_t>(1, (X + chunks - 1) / chunks));
}

Tensor laplacian3d_cuda(const Tensor& u, double h, bool periodic, Laplacian3dKernel which,
                        int x_chunk) {
  Tensor uc = u.contiguous();  // the kernels index u[i]
  Tensor out = empty_like(uc);
  if (uc.numel() == 0) return out;
  const int device = u.device().index;
  with_launch(uc, out, h, periodic, which, cuda::device_props(device).sm_count, x_chunk,
              [](const jit::UserKernel& k, const jit::LaunchConfig& c, const auto&... args) {
                k.launch(c, args...);
              });
  return out;
}

void laplacian3d_check_launch(int arch, const Tensor& u, double h, bool periodic,
                              Laplacian3dKernel which) {
  Tensor out = empty_like(u);
  with_launch(u, out, h, periodic, which, /*sm_count=*/132, /*x_chunk=*/0,
              [arch](const jit::UserKernel& k, const jit::LaunchConfig&, const auto&... args) {
                k.check_args(arch, args...);
              });
}

}  // namespace pde
