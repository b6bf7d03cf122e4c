// SPDX-License-Identifier: MIT
// A CPU emulation of a CUDA grid, for testing a .cu file's kernels without a GPU: each
// thread of a block is a std::thread, __syncthreads is a barrier, and the block's threads
// walk the grid's blocks in order. Include it after every other header (it defines
// __global__, __shared__ and friends as macros), then the .cu inside namespace ops_emu:
//   #include "grid_emulation.h"
//   namespace ops_emu {
//   #include "my_kernels.cu"
//   }
//   ops_emu::launch({blocks}, {256}, [&] { ops_emu::my_kernel<float>(x, y, n); });
// __shfl_down_sync, __shfl_sync and __match_any_sync synchronize the whole block, so kernels that
// shuffle must be launched with one warp a block (32 threads), and all its threads must reach them;
// atomicAdd takes a global lock.
#pragma once

#include <barrier>
#include <mutex>
#include <thread>
#include <vector>

namespace ops_emu {

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local Dim threadIdx, blockIdx;
inline Dim blockDim, gridDim;
inline std::barrier<>* block_barrier = nullptr;
inline std::mutex atomic_lock;

inline void sync_block() { block_barrier->arrive_and_wait(); }

template <typename T>
T atomicAdd(T* p, T v) {
  std::lock_guard<std::mutex> g(atomic_lock);
  const T old = *p;
  *p = old + v;
  return old;
}

template <typename T>
T __shfl_down_sync(unsigned, T v, int offset) {
  static T slots[1024];
  const unsigned lane = threadIdx.x % 32;
  slots[threadIdx.x] = v;
  sync_block();
  const T got = lane + unsigned(offset) < 32 ? slots[threadIdx.x + unsigned(offset)] : v;
  sync_block();
  return got;
}

template <typename T>
T __shfl_sync(unsigned, T v, int src_lane) {
  static T slots[1024];
  slots[threadIdx.x] = v;
  sync_block();
  const T got = slots[threadIdx.x - threadIdx.x % 32 + unsigned(src_lane) % 32];
  sync_block();
  return got;
}

// The lanes of the caller's warp whose v equals its own, as a bit mask.
template <typename T>
unsigned __match_any_sync(unsigned, T v) {
  static T slots[1024];
  slots[threadIdx.x] = v;
  sync_block();
  const unsigned warp0 = threadIdx.x - threadIdx.x % 32;
  unsigned mask = 0;
  for (unsigned j = 0; j < 32 && warp0 + j < blockDim.x * blockDim.y * blockDim.z; ++j)
    if (slots[warp0 + j] == v) mask |= 1u << j;
  sync_block();
  return mask;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }

template <typename F>
void launch(Dim grid, Dim block, F kernel) {
  gridDim = grid;
  blockDim = block;
  const unsigned nt = block.x * block.y * block.z;
  std::barrier<> bar(nt);
  block_barrier = &bar;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < nt; ++t)
    threads.emplace_back([&, t] {
      threadIdx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
      for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
          for (unsigned bx = 0; bx < grid.x; ++bx) {
            blockIdx = {bx, by, bz};
            kernel();
            bar.arrive_and_wait();  // static "__shared__" memory is the next block's
          }
    });
  for (auto& t : threads) t.join();
}

}  // namespace ops_emu

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() ::ops_emu::sync_block()
