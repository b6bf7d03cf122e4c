// SPDX-License-Identifier: MIT
// The CUDA backend's face to the rest of the runtime. libcuda.so.1 is opened with
// dlopen on first use, so every function here works (or throws a clear mt::Error)
// on a machine without a GPU or driver, and in a build without the CUDA headers.
// Code that calls the driver itself includes runtime/cuda/driver.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/device.h"
#include "runtime/storage.h"

// The driver's opaque handles, declared as <cuda.h> declares them (CUevent is CUevent_st*).
struct CUevent_st;

namespace mt {
class Tensor;
}

namespace mt::cuda {

// False where the build has no CUDA backend, or the driver is missing, fails to
// initialise, or sees no device.
bool is_available();
int device_count();
// Why is_available() is false, in one line ("libcuda.so.1 could not be loaded: ...",
// "cuInit failed: CUDA_ERROR_NO_DEVICE (...)"); empty if it is true.
std::string unavailable_reason();
// The driver's CUDA version, e.g. 13000 for 13.0 (throws if CUDA is unavailable).
int driver_version();

struct DeviceProps {
  std::string name;          // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  int sm_count = 0;
  size_t total_memory = 0;  // bytes
  int max_threads_per_block = 0;
  int max_shared_per_block = 0;        // bytes, without opting in
  int max_shared_per_block_optin = 0;  // bytes, with cuFuncSetAttribute
  int l2_bytes = 0;
  int warp_size = 0;
};
// Properties of cuda:index, queried once (throws if unavailable or out of range).
const DeviceProps& device_props(int index);

// The caching allocator of cuda:index (throws if CUDA is unavailable or index is out of
// range). Note [Caching allocator] in allocator.cpp says how it reuses blocks.
Allocator* caching_allocator(int index);

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in blocks handed out now (sizes as rounded)
  size_t reserved_bytes = 0;        // taken from the driver: handed out plus cached
  size_t peak_allocated_bytes = 0;  // highest allocated_bytes since the last reset
  uint64_t driver_allocs = 0;       // cuMemAlloc calls that succeeded
  uint64_t driver_frees = 0;        // cuMemFree calls
  uint64_t cache_hits = 0;          // allocations served from a cached block
  uint64_t cache_misses = 0;        // allocations that went to the driver
  // Held by the private pools of CUDA graphs (runtime/cuda/graph.h), in use plus cached;
  // part of reserved_bytes. empty_cache leaves it; destroying the graph returns it.
  size_t graph_pool_bytes = 0;
};
AllocatorStats allocator_stats(int index);
// Sets peak_allocated_bytes to the current allocated_bytes.
void reset_peak_stats(int index);
// Returns every cached (free) block of cuda:index to the driver (not the blocks cached in
// a CUDA graph's private pool: they go when the graph does).
void empty_cache(int index);

// Copies between two tensors of the same shape where at least one is on CUDA. Done now:
// contiguous, same dtype (host->device, device->host, device->device on one device), on
// the current stream; a copy to the host waits for it. Other cases go to the kernel
// installed with set_copy_kernel, or throw "not yet supported". Called by Tensor::copy_.
void copy(const Tensor& dst, const Tensor& src);
// Fills a CUDA tensor with one value: zero with a memset, others through set_fill_kernel.
void fill(const Tensor& t, double value);
// Waits for all work on the current stream of cuda:index.
void synchronize(int index = 0);

// Device kernels for what copy() and fill() cannot do with a memcpy or memset, installed
// by the kernel library (kernels/cuda_host/device_hooks.cpp) when the library initializes; copy,
// fill and random_kernel() run that first (Note [Library initialization]). The copy kernel gets
// both tensors on one CUDA device (strided or of different dtypes); both run on the current stream.
// Each setter returns the kernel it replaces; nullptr removes it.
using CopyKernel = void (*)(const Tensor& dst, const Tensor& src);
using FillKernel = void (*)(const Tensor& t, double value);
CopyKernel set_copy_kernel(CopyKernel fn);
FillKernel set_fill_kernel(FillKernel fn);
// Fills a contiguous CUDA tensor with the counter-based generator's stream (mt::rand,
// or mt::randn when normal) from counter `base` of `seed`. random_kernel() gives the
// kernel library's; nullptr where there is none (then rand/randn draw on
// the host and copy).
using RandomKernel = void (*)(const Tensor& t, uint64_t seed, uint64_t base, bool normal);
RandomKernel set_random_kernel(RandomKernel fn);
RandomKernel random_kernel();

// Times work on the current stream of one device with a pair of events:
//   EventTimer t(0); t.start(); launch(); t.stop(); float ms = t.elapsed_ms();
// elapsed_ms waits for the stop event; start/stop may be called again to reuse the pair.
class EventTimer {
 public:
  explicit EventTimer(int index = 0);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  EventTimer(EventTimer&& o) noexcept;
  EventTimer& operator=(EventTimer&& o) noexcept;

  void start();
  void stop();
  float elapsed_ms() const;

 private:
  int index_ = 0;
  [[maybe_unused]] CUevent_st* start_ = nullptr;  // unused when CUDA is compiled out
  [[maybe_unused]] CUevent_st* stop_ = nullptr;
};

}  // namespace mt::cuda
