// SPDX-License-Identifier: MIT
// The pictures of docs/memory.md: the kernel cache's LRU order over time (`minitensor cache
// --plot`) and the CUDA caching allocator's blocks over time (`minitensor memory --plot`).
#pragma once

#include <string>
#include <vector>

#include "kernels/jit/cache.h"
#include "runtime/cuda/cuda.h"

namespace mt::bench {

// One column per access (a disk hit, or a compile), left to right: the entries on disk
// after it, most recently used on top; the entry accessed is green (a hit) or orange (a
// miss, compiled and written), and the entries evicted by it are drawn crossed out under
// the column. Memory hits are left out (they do not touch the disk's order). So that a
// large cache stays readable (about 2000 x 700 px at most), only the last `max_columns`
// accesses are drawn, each with its `max_rows` - 1 most recent entries and "+N more" when it
// has more than `max_rows`, and at most 3 evictions and "+N more"; the subtitle counts what
// is drawn ("the last 30 of 149 accesses"). Elements carry class="access", "hit", "miss",
// "cached", "evicted", "more" for tests.
std::string svg_cache_lru(const std::vector<jit::CacheEvent>& events, const std::string& title,
                          size_t max_columns = 30, size_t max_rows = 16);

// One lane per block of device memory (in order of first appearance; height growing with
// the block's size), across the allocator's events in order: blue while a tensor holds it,
// grey while cached on its stream, purple while it belongs to a CUDA graph's pool (dark:
// in use, light: cached there); dashed lines mark empty_cache, red ones an out-of-memory
// retry. Hovering a lane segment shows its size, stream, state and MemoryContext. At most
// `max_lanes` lanes are drawn. Elements carry class="allocated", "cached", "pool",
// "pool-allocated", "empty-cache", "oom-retry" for tests.
std::string svg_memory_timeline(const std::vector<cuda::MemoryEvent>& events,
                                const std::string& title, size_t max_lanes = 150);

}  // namespace mt::bench
