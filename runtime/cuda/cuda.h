// SPDX-License-Identifier: MIT
// The CUDA backend's face to the rest of the runtime. libcuda.so.1 is opened with
// dlopen on first use, so every function here works (or throws a clear mt::Error)
// on a machine without a GPU or driver, and in a build without the CUDA headers.
// Code that calls the driver itself includes runtime/cuda/driver.h. Also here: CUDA graphs
// (Graph) and the caching allocator's snapshot and history (memory_snapshot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/tensor.h"

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
  // Held by the private pools of CUDA graphs (Graph, below), in use plus cached;
  // part of reserved_bytes. empty_cache leaves it; destroying the graph returns it.
  size_t graph_pool_bytes = 0;
};
AllocatorStats allocator_stats(int index);
// Sets peak_allocated_bytes to the current allocated_bytes.
void reset_peak_stats(int index);
// Returns every cached (free) block of cuda:index to the driver (not the blocks cached in
// a CUDA graph's private pool: they go when the graph does).
void empty_cache(int index);

// Waits for all work on the current stream of cuda:index.
void synchronize(int index = 0);

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

// CUDA graphs: the work queued on one device's stream, captured once and replayed with a
// single launch (torch.cuda.CUDAGraph in miniature). Used directly, and by mt::compile's
// CUDA replay (kernels/compile/).
//
//   mt::cuda::Graph g;
//   g.capture_begin(0);          // cuda:0's work now goes to a capture stream
//   Tensor y = mt::silu(x);      // recorded, not run; y's memory comes from g's pool
//   g.capture_end();             // instantiated
//   g.replay();                  // runs the recorded kernels on the current stream;
//                                // y holds the result, x is read from the same address
//
// Interface fixed by the lead so that mt::compile and the CUDA-graph work can proceed in
// parallel; the implementation lives in graph.cpp (stub.cpp without CUDA: every call
// throws a clear mt::Error).

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing the work that minitensor queues on cuda:index: a capture stream of
  // the graph's own becomes the device's current stream until capture_end, and the
  // caching allocator serves that stream's allocations from a private pool owned by the
  // graph (kept until the graph is destroyed, so replays write to the same addresses).
  // Throws if a capture is already in progress on the device or the graph was captured.
  void capture_begin(int index = 0);
  // Ends the capture, restores the previous current stream and instantiates the graph.
  // A failed capture (an operation that synchronizes, a sync read of a value) throws an
  // mt::Error naming the cause, and leaves the graph empty.
  void capture_end();
  // Launches the captured graph on the device's current stream (asynchronous, like a kernel).
  void replay();

  bool captured() const;
  int device_index() const;  // -1 before capture_begin
  size_t num_nodes() const;  // kernel, memcpy and memset nodes in the captured graph
  // Those nodes by kind, counted, in order of first appearance: "3 x memset",
  // "2 x kernel reduce_rows<float, ...>" (a kernel's name where the driver tells it,
  // CUDA 12.3 on; "kernel" alone otherwise). For MT_LOG=compile.
  std::vector<std::string> node_kinds() const;
  size_t pool_bytes() const;  // device memory held by the graph's private pool

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True while a Graph is capturing cuda:index (ops that would synchronize check it and
// throw instead of breaking the capture).
bool is_capturing(int index = 0);

// Pictures of the CUDA caching allocator: what it holds now (memory_snapshot) and what it
// did (record_memory_history), as torch.cuda.memory._snapshot and _record_memory_history
// give PyTorch's. Note [Caching allocator] in allocator.cpp says how blocks are reused;
// docs/memory.md draws both (`minitensor memory --plot`).

// One block of device memory the allocator holds. Blocks are never split, so each is
// also its own segment (one cuMemAlloc).
struct MemoryBlock {
  enum class State {
    Allocated,  // handed out to a tensor
    Cached,     // free, kept for reuse on its stream
    Pool,       // free, kept in a CUDA graph's private pool (for that graph only)
  };
  uintptr_t address = 0;
  size_t size = 0;       // as rounded (Note [Caching allocator])
  uintptr_t stream = 0;  // the stream it is reused on (the CUstream's value)
  uint64_t pool = 0;     // the graph pool it belongs to; 0: the general allocator
  State state = State::Allocated;
  std::string op;  // the MemoryContext it was allocated under, while recording
};

struct MemorySnapshot {
  int device = 0;
  std::vector<MemoryBlock> blocks;  // by address
  AllocatorStats stats;
};
// What cuda:index's caching allocator holds now (throws if CUDA is unavailable).
MemorySnapshot memory_snapshot(int index = 0);

struct MemoryEvent {
  enum class Kind {
    Alloc,        // a block handed out (after a CacheHit or a DriverAlloc)
    Free,         // a block given back: cached on its stream, or in its graph's pool
    CacheHit,     // the allocation took a cached block
    DriverAlloc,  // the allocation called cuMemAlloc
    DriverFree,   // cuMemFree of a cached block (empty_cache, the OOM retry, a graph's end)
    EmptyCache,   // empty_cache began
    OomRetry,     // cuMemAlloc ran out of memory: the cache is emptied and it is retried
  };
  Kind kind = Kind::Alloc;
  double time_us = 0;     // since recording began (steady clock)
  uintptr_t address = 0;  // 0 for EmptyCache and OomRetry
  size_t size = 0;        // rounded; for OomRetry the request
  uintptr_t stream = 0;
  uint64_t pool = 0;
  std::string op;  // Alloc: the thread's MemoryContext, if any
};
// "alloc", "free", "cache_hit", "driver_alloc", "driver_free", "empty_cache", "oom_retry".
inline const char* memory_event_name(MemoryEvent::Kind kind) {
  constexpr const char* names[] = {"alloc",       "free",        "cache_hit", "driver_alloc",
                                   "driver_free", "empty_cache", "oom_retry"};
  return names[int(kind)];
}
// "allocated", "cached", "pool".
inline const char* memory_state_name(MemoryBlock::State state) {
  constexpr const char* names[] = {"allocated", "cached", "pool"};
  return names[int(state)];
}

// Starts (clearing what was recorded) or stops recording the events of cuda:index's
// allocator, keeping the last `max_events`. Off, an allocation pays one branch on a flag
// read under the lock it takes anyway.
void record_memory_history(bool on, size_t max_events = 100000, int index = 0);
std::vector<MemoryEvent> memory_history(int index = 0);

// Names what this thread allocates while it lives ("forward", "sgd step"): recorded with
// each Alloc event and block while history is on. Nests; the innermost name wins. `what`
// must outlive the guard (a string literal, or a string the caller keeps).
class MemoryContext {
 public:
  explicit MemoryContext(const char* what);
  ~MemoryContext();
  MemoryContext(const MemoryContext&) = delete;
  MemoryContext& operator=(const MemoryContext&) = delete;
  // This thread's innermost name, or nullptr.
  static const char* current();

 private:
  const char* prev_;
};

}  // namespace mt::cuda
