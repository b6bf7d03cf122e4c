// SPDX-License-Identifier: MIT
// Pictures of the CUDA caching allocator: what it holds now (memory_snapshot) and what it
// did (record_memory_history), as torch.cuda.memory._snapshot and _record_memory_history
// give PyTorch's. Note [Caching allocator] in allocator.cpp says how blocks are reused;
// docs/memory.md draws both (`minitensor memory --plot`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/cuda.h"

namespace mt::cuda {

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
