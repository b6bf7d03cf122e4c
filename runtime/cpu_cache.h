// SPDX-License-Identifier: MIT
// The CPU allocator's per-thread lists of freed blocks kept for reuse (Note [Small CPU
// blocks] and Note [Medium CPU blocks] in runtime/storage.cpp), as a count a test or a
// memory report can read. MT_NO_CPU_CACHING=1 (read once, at load) and AddressSanitizer
// builds turn the lists off.
#pragma once

#include <cstdint>

namespace mt {

struct CpuCacheStats {
  int64_t blocks = 0;    // data blocks this thread keeps (tensors' memory, not objects)
  int64_t bytes = 0;     // their bytes, rounded as allocated
  bool enabled = false;  // false with MT_NO_CPU_CACHING=1 or under AddressSanitizer
};

// This thread's kept data blocks.
CpuCacheStats cpu_cache_stats();

// Frees this thread's kept data blocks (as torch.cuda.empty_cache does its cache's): for an
// app that is done with a large computation on this thread and wants the memory back now.
void cpu_empty_cache();

}  // namespace mt
