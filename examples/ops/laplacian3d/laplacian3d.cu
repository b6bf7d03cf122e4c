// SPDX-License-Identifier: MIT
// pde::laplacian3d's CUDA kernels: the 7-point stencil
//   out[x, y, z] = (u[x-1] + u[x+1] + u[y-1] + u[y+1] + u[z-1] + u[z+1] - 6 u) / h^2
// on a [N, X, Y, Z] grid (contiguous, z fastest), zero (Dirichlet) or periodic boundary.
// Compiled by NVRTC through mt::jit::kernel; also compiled as host C++ by the test's CPU
// emulation of the grid, so it uses nothing but the CUDA built-ins.

// u at (x, y, z) of one grid, with the boundary applied: periodic wraps one step, zero
// reads 0 outside. A point more than one step outside reads 0 either way (only threads
// whose value no one uses ask for those).
template <typename T, bool Periodic>
__device__ __forceinline__ T pde_fetch(const T* __restrict__ u, int x, int y, int z, int X, int Y,
                                       int Z) {
  if (Periodic) {
    x = x < 0 ? x + X : (x >= X ? x - X : x);
    y = y < 0 ? y + Y : (y >= Y ? y - Y : y);
    z = z < 0 ? z + Z : (z >= Z ? z - Z : z);
  }
  if (x < 0 || x >= X || y < 0 || y >= Y || z < 0 || z >= Z) return T(0);
  return u[((long long)x * Y + y) * Z + z];
}

// The simple version: one thread a point, every neighbour read from global memory.
template <typename T, bool Periodic>
__global__ void pde_laplacian3d_naive(const T* __restrict__ u, T* __restrict__ out, long long total,
                                      int X, int Y, int Z, T inv_h2) {
  const long long grid_size = (long long)X * Y * Z;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long n = i / grid_size;
    const long long r = i - n * grid_size;
    const int x = int(r / ((long long)Y * Z)), y = int(r / Z % Y), z = int(r % Z);
    const T* un = u + n * grid_size;
    const T s = pde_fetch<T, Periodic>(un, x - 1, y, z, X, Y, Z) +
                pde_fetch<T, Periodic>(un, x + 1, y, z, X, Y, Z) +
                pde_fetch<T, Periodic>(un, x, y - 1, z, X, Y, Z) +
                pde_fetch<T, Periodic>(un, x, y + 1, z, X, Y, Z) +
                pde_fetch<T, Periodic>(un, x, y, z - 1, X, Y, Z) +
                pde_fetch<T, Periodic>(un, x, y, z + 1, X, Y, Z) - T(6) * un[r];
    out[i] = s * inv_h2;
  }
}

// Note [2.5-D blocking]
// A block owns a tile of kTileY x kTileZ points of the (y, z) plane and walks a chunk of
// x_chunk planes along x. Each thread keeps its column's u[x-1], u[x], u[x+1] in
// registers, so the x neighbours cost nothing extra; the current plane goes through
// shared memory with a one-point halo, so the y and z neighbours are read from global
// memory once a plane (plus the halo's 2 (kTileY + kTileZ) points). Threads past the grid's
// edge still load their (boundary-applied) value: the thread at y == Y holds exactly the
// neighbour the last row needs, 0 or the wrapped row. Blocks: (ceil(Z / kTileZ),
// ceil(Y / kTileY), N * chunks); a chunk restarts the register pipeline, one extra plane
// read, so chunks are only cut to fill the GPU.
constexpr int kTileZ = 32;
constexpr int kTileY = 8;

template <typename T, bool Periodic>
__global__ void pde_laplacian3d_tiled(const T* __restrict__ u, T* __restrict__ out, int X, int Y,
                                      int Z, int x_chunk, T inv_h2) {
  __shared__ T tile[kTileY + 2][kTileZ + 2];
  const int tz = threadIdx.x, ty = threadIdx.y;
  const int z = blockIdx.x * kTileZ + tz, y = blockIdx.y * kTileY + ty;
  const int chunks = (X + x_chunk - 1) / x_chunk;
  const long long n = blockIdx.z / chunks;
  const int x0 = int(blockIdx.z % chunks) * x_chunk;
  const int x1 = x0 + x_chunk < X ? x0 + x_chunk : X;
  const long long grid_size = (long long)X * Y * Z;
  const T* un = u + n * grid_size;
  T* on = out + n * grid_size;
  const bool inside = y < Y && z < Z;

  T prev = pde_fetch<T, Periodic>(un, x0 - 1, y, z, X, Y, Z);
  T cur = pde_fetch<T, Periodic>(un, x0, y, z, X, Y, Z);
  for (int x = x0; x < x1; ++x) {
    const T next = pde_fetch<T, Periodic>(un, x + 1, y, z, X, Y, Z);
    tile[ty + 1][tz + 1] = cur;
    if (ty == 0) tile[0][tz + 1] = pde_fetch<T, Periodic>(un, x, y - 1, z, X, Y, Z);
    if (ty == kTileY - 1)
      tile[kTileY + 1][tz + 1] = pde_fetch<T, Periodic>(un, x, y + 1, z, X, Y, Z);
    if (tz == 0) tile[ty + 1][0] = pde_fetch<T, Periodic>(un, x, y, z - 1, X, Y, Z);
    if (tz == kTileZ - 1)
      tile[ty + 1][kTileZ + 1] = pde_fetch<T, Periodic>(un, x, y, z + 1, X, Y, Z);
    __syncthreads();
    if (inside) {
      const T s = prev + next + tile[ty][tz + 1] + tile[ty + 2][tz + 1] + tile[ty + 1][tz] +
                  tile[ty + 1][tz + 2] - T(6) * cur;
      on[((long long)x * Y + y) * Z + z] = s * inv_h2;
    }
    __syncthreads();  // the tile is rewritten for the next plane
    prev = cur;
    cur = next;
  }
}

// Note [Streaming along x]
// Why the tiled kernel above reaches only about 28% of the copy rate (H200, N = 512): each
// thread has one 4-byte load in flight (next plane's point) between two __syncthreads a
// plane, so an SM of 2048 threads has about 8 KiB of reads outstanding, while the H200's
// bandwidth times its memory latency asks for about 20-30 KiB an SM (Little's law); the
// z halo adds two single-word, uncoalesced loads a row of the tile too. The kernel below
// drops the shared-memory plane and its barriers: a thread owns VEC consecutive z points
// of one (y) row (VEC * sizeof(T) = 16 bytes: one 128-bit load, coalesced across the
// warp) and walks x_chunk planes along x, keeping x-1, x, x+1 in registers; the y
// neighbours are 16-byte loads of rows that the block's other threads load too (L1 and L2
// hits), the z neighbours are the scalars just outside the thread's vector. With no
// barrier, each thread has 3 to 5 independent 16-byte loads in flight. x_chunk = 1 is the
// plain "one thread, one vector of points" form. Blocks: 32 x 8 threads (32 VEC z points
// by 8 y rows), numbered on one grid axis as ((n * chunks + chunk) * y_blocks + yb) *
// z_blocks + zb, so no grid dimension limit applies to N or X.
constexpr int kStreamBlockZ = 32;  // threads along z, each VEC points
constexpr int kStreamBlockY = 8;

template <typename T, int VEC>
struct alignas(VEC * sizeof(T)) PdeVec {
  T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ PdeVec<T, VEC> pde_load(const T* p) {
  return *reinterpret_cast<const PdeVec<T, VEC>*>(p);
}

// The vector at plane x of the column starting at c (plane 0), with x's boundary applied.
template <typename T, bool Periodic, int VEC>
__device__ __forceinline__ PdeVec<T, VEC> pde_plane(const T* c, int x, int X, long long plane) {
  if (Periodic) x = x < 0 ? x + X : (x >= X ? x - X : x);
  if (x < 0 || x >= X) {
    PdeVec<T, VEC> zero;
    for (int j = 0; j < VEC; ++j) zero.v[j] = T(0);
    return zero;
  }
  return pde_load<T, VEC>(c + x * plane);
}

template <typename T, bool Periodic, int VEC>
__global__ void pde_laplacian3d_stream(const T* __restrict__ u, T* __restrict__ out, int X, int Y,
                                       int Z, int z_blocks, int y_blocks, int x_chunk, T inv_h2) {
  const unsigned zb = blockIdx.x % unsigned(z_blocks);
  unsigned rest = blockIdx.x / unsigned(z_blocks);
  const unsigned yb = rest % unsigned(y_blocks);
  rest /= unsigned(y_blocks);  // n * chunks + chunk
  const unsigned chunks = (unsigned(X) + unsigned(x_chunk) - 1) / unsigned(x_chunk);
  const unsigned n = rest / chunks;
  const int x0 = int(rest % chunks) * x_chunk;
  const int x1 = x0 + x_chunk < X ? x0 + x_chunk : X;
  const int z0 = int(zb * kStreamBlockZ + threadIdx.x) * VEC;
  const int y = int(yb * kStreamBlockY + threadIdx.y);
  if (z0 >= Z || y >= Y) return;
  const long long plane = (long long)Y * Z;
  const long long col = (long long)n * X * plane + (long long)y * Z + z0;  // (n, 0, y, z0)
  const T* c = u + col;
  const bool y_lo = y > 0, y_hi = y + 1 < Y;
  const long long ym_step = y_lo ? -(long long)Z : (Periodic ? (long long)(Y - 1) * Z : 0);
  const long long yp_step = y_hi ? (long long)Z : (Periodic ? -(long long)(Y - 1) * Z : 0);
  const bool ym_zero = !y_lo && !Periodic, yp_zero = !y_hi && !Periodic;
  const int zm_step = z0 > 0 ? -1 : (Periodic ? Z - 1 : 0);
  const int zp_step = z0 + VEC < Z ? VEC : (Periodic ? VEC - Z : 0);
  const bool zm_zero = z0 == 0 && !Periodic, zp_zero = z0 + VEC >= Z && !Periodic;

  PdeVec<T, VEC> prev = pde_plane<T, Periodic, VEC>(c, x0 - 1, X, plane);
  PdeVec<T, VEC> cur = pde_plane<T, Periodic, VEC>(c, x0, X, plane);
  for (int x = x0; x < x1; ++x) {
    const PdeVec<T, VEC> next = pde_plane<T, Periodic, VEC>(c, x + 1, X, plane);
    const T* p = c + x * plane;
    PdeVec<T, VEC> ym, yp;
    if (ym_zero)
      for (int j = 0; j < VEC; ++j) ym.v[j] = T(0);
    else
      ym = pde_load<T, VEC>(p + ym_step);
    if (yp_zero)
      for (int j = 0; j < VEC; ++j) yp.v[j] = T(0);
    else
      yp = pde_load<T, VEC>(p + yp_step);
    const T zm = zm_zero ? T(0) : p[zm_step];
    const T zp = zp_zero ? T(0) : p[zp_step];
    PdeVec<T, VEC> o;
    for (int j = 0; j < VEC; ++j) {
      const T left = j == 0 ? zm : cur.v[j == 0 ? 0 : j - 1];
      const T right = j == VEC - 1 ? zp : cur.v[j == VEC - 1 ? 0 : j + 1];
      o.v[j] =
          (prev.v[j] + next.v[j] + ym.v[j] + yp.v[j] + left + right - T(6) * cur.v[j]) * inv_h2;
    }
    *reinterpret_cast<PdeVec<T, VEC>*>(out + col + x * plane) = o;
    prev = cur;
    cur = next;
  }
}
