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
