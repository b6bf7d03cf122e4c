// SPDX-License-Identifier: MIT
// The CUDA caching allocator: one per device, behind mt::Allocator.
#ifdef MT_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/hooks.h"
#include "runtime/error.h"

namespace mt::cuda {
namespace {

// Note [Caching allocator]
// cuMemAlloc and cuMemFree are slow (the free synchronizes the device), so freed blocks
// are kept and handed out again, as PyTorch's CUDACachingAllocator does, minus block
// splitting. Sizes are rounded up (to 512 bytes below 1 MiB, to 2 MiB above) so that
// nearby requests share blocks. A free block goes to the free list of the stream it was
// allocated on, and is reused only by an allocation on that stream: work queued on one
// stream runs in order, so the next user of the block cannot overtake the kernels still
// reading it. (Using a block on another stream without synchronizing is the caller's
// business; there is no record_stream.) A request takes the smallest cached block that
// fits, if that block is at most twice the rounded size, so small tensors do not pin big
// blocks. When cuMemAlloc runs out of memory, every cached block is returned to the
// driver and the allocation tried once more before the error.
//
// Graph pools. While a mt::cuda::Graph captures a device, the allocations made on its
// capture stream come from a private pool of that graph, never from the free lists
// above: a replay writes exactly the addresses recorded at capture, so those blocks must
// belong to nobody else for the graph's whole life. A pool block freed during capture (a
// temporary) or after it (an output the user dropped) goes back to the pool's own free
// list, where later allocations of the same capture may take it (the capture stream
// orders them like any stream); it never goes to the general free lists or the driver
// while the graph lives. A pool cuMemAlloc during capture runs with the thread's capture
// mode set to relaxed (Note [CUDA graph capture] in graph.cpp), and an out-of-memory
// during capture is not retried (the retry synchronizes the context, which a capture
// forbids). When the graph is destroyed, after its last replay finished, the pool's
// cached blocks go back to the driver and the blocks still in use (outputs the user
// holds) join the general allocator, as if allocated on the current stream.
// Note [Allocator history]
// memory_snapshot() walks the three maps below under the lock. record_memory_history(true)
// makes every allocator call append events (runtime/cuda/cuda.h) to a bounded ring,
// under the same lock the call already holds; off, the only cost is testing recording_
// there, so the dispatch path (which allocates outputs) does not change measurably
// (`minitensor bench dispatch`). What an allocation is for comes from the thread's
// MemoryContext, a thread-local pointer: the runtime sits below the dispatcher and does
// not know op names by itself.
thread_local const char* t_memory_context = nullptr;

constexpr size_t kSmallSize = size_t(1) << 20;  // requests below this are "small"
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;

size_t round_size(size_t n) {
  size_t unit = n < kSmallSize ? kSmallRound : kLargeRound;
  MT_CHECK(n <= std::numeric_limits<size_t>::max() - unit,
           "[cuda] cannot allocate {} bytes: the size is out of range", n);
  return (n + unit - 1) / unit * unit;
}

std::string format_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, units[u]);
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int index) : index_(index) {
    spare_live_.reserve(kSpareNodes);
    spare_free_.reserve(kSpareNodes);
  }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t size = round_size(nbytes);
    CUstream stream = current_stream(index_);
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t pool_id = routing_pool_ && stream == routing_stream_ ? routing_pool_ : 0;
    Pool* pool = pool_id ? &pools_.at(pool_id) : nullptr;
    FreeList* fl = pool ? &pool->free : nullptr;
    if (!pool)
      if (auto it = free_.find(stream); it != free_.end()) fl = &it->second;
    if (fl) {
      auto it = fl->lower_bound(size);
      if (it != fl->end() && it->first <= 2 * size) {
        const size_t bsize = it->first;
        const CUdeviceptr p = it->second;
        insert_live(p, Block{bsize, stream, pool_id, recording_ ? context() : std::string()});
        keep_spare(spare_free_, fl->extract(it));  // after the insert, which may throw
        ++stats_.cache_hits;
        add_allocated(bsize);
        if (recording_) {
          event(MemoryEvent::Kind::CacheHit, p, bsize, stream, pool_id);
          event(MemoryEvent::Kind::Alloc, p, bsize, stream, pool_id, live_.at(p).op);
        }
        return reinterpret_cast<void*>(p);
      }
    }
    ++stats_.cache_misses;
    CUdeviceptr p = driver_alloc(nbytes, size);
    try {
      insert_live(p, Block{size, stream, pool_id, recording_ ? context() : std::string()});
    } catch (...) {
      DeviceGuard guard(index_);
      driver().cuMemFree(p);
      throw;
    }
    ++stats_.driver_allocs;
    stats_.reserved_bytes += size;
    if (pool) {
      pool->bytes += size;
      stats_.graph_pool_bytes += size;
    }
    add_allocated(size);
    if (recording_) {
      event(MemoryEvent::Kind::DriverAlloc, p, size, stream, pool_id);
      event(MemoryEvent::Kind::Alloc, p, size, stream, pool_id, context());
    }
    return reinterpret_cast<void*>(p);
  }

  void deallocate(void* ptr, size_t) noexcept override {
    if (!ptr) return;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(reinterpret_cast<CUdeviceptr>(ptr));
      if (it == live_.end()) return;  // not ours: nothing safe to do
      const Block& b = it->second;
      const size_t bsize = b.size;
      // May throw; the extract below cannot.
      FreeList& fl = b.pool ? pools_.at(b.pool).free : free_[b.stream];
      if (spare_free_.empty()) {
        fl.emplace(bsize, it->first);
      } else {
        FreeList::node_type n = std::move(spare_free_.back());
        spare_free_.pop_back();
        n.key() = bsize;
        n.mapped() = it->first;
        fl.insert(std::move(n));
      }
      if (recording_) event(MemoryEvent::Kind::Free, it->first, bsize, b.stream, b.pool);
      keep_spare(spare_live_, live_.extract(it));
      stats_.allocated_bytes -= bsize;
    } catch (...) {
      // Out of host memory for the free list: the block stays counted as allocated.
    }
  }

  Device device() const override { return Device(DeviceType::CUDA, index_); }

  AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

  void empty_cache() {
    if (is_capturing(index_))
      detail::refuse_during_capture(index_, "empty_cache",
                                    "it synchronizes the device; call it before capture_begin "
                                    "or after capture_end");
    std::lock_guard<std::mutex> lock(mutex_);
    if (recording_) event(MemoryEvent::Kind::EmptyCache, 0, 0, nullptr, 0);
    if (free_.empty()) return;
    DeviceGuard guard(index_);
    MT_CU_CHECK(driver().cuCtxSynchronize());  // no queued work may still use the blocks
    check(release_cached(), "cuMemFree");
  }

  // Note [Allocator history].
  MemorySnapshot snapshot() const {
    MemorySnapshot snap;
    snap.device = index_;
    std::lock_guard<std::mutex> lock(mutex_);
    snap.stats = stats_;
    auto add = [&](CUdeviceptr p, size_t size, CUstream stream, uint64_t pool,
                   MemoryBlock::State state, const std::string& op) {
      snap.blocks.push_back(
          {uintptr_t(p), size, reinterpret_cast<uintptr_t>(stream), pool, state, op});
    };
    for (const auto& [p, b] : live_)
      add(p, b.size, b.stream, b.pool, MemoryBlock::State::Allocated, b.op);
    for (const auto& [stream, blocks] : free_)
      for (const auto& [size, p] : blocks) add(p, size, stream, 0, MemoryBlock::State::Cached, {});
    for (const auto& [id, pool] : pools_)
      for (const auto& [size, p] : pool.free)
        add(p, size, nullptr, id, MemoryBlock::State::Pool, {});
    std::sort(snap.blocks.begin(), snap.blocks.end(),
              [](const MemoryBlock& a, const MemoryBlock& b) { return a.address < b.address; });
    return snap;
  }

  void record(bool on, size_t max_events) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.clear();
    max_events_ = std::max<size_t>(1, max_events);
    t0_ = std::chrono::steady_clock::now();
    recording_ = on;
  }

  std::vector<MemoryEvent> history() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {events_.begin(), events_.end()};
  }

  // Graph pools (Note [Caching allocator]).
  uint64_t begin_pool(CUstream stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    MT_CHECK(!routing_pool_, "[cuda] cuda:{} already routes allocations to a graph's pool", index_);
    const uint64_t id = next_pool_++;
    pools_[id];
    routing_pool_ = id;
    routing_stream_ = stream;
    return id;
  }

  void end_pool_routing(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (routing_pool_ != id) return;
    routing_pool_ = 0;
    routing_stream_ = nullptr;
  }

  size_t pool_bytes(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(id);
    return it == pools_.end() ? 0 : it->second.bytes;
  }

  void release_pool(uint64_t id) noexcept {
    try {
      // Both before the lock: current_stream may create the stream (it does not here:
      // capture_begin used it), is_capturing reads an atomic.
      const bool capturing = is_capturing(index_);
      CUstream adopt = current_stream(index_);
      DeviceGuard guard(index_);
      std::lock_guard<std::mutex> lock(mutex_);
      auto pit = pools_.find(id);
      if (pit == pools_.end()) return;
      Pool& pool = pit->second;
      // Cached blocks go to the driver; not while another capture runs on the device
      // (cuMemFree synchronizes): then they join the general cache.
      for (auto& [size, p] : pool.free) {
        if (!capturing && driver().cuMemFree(p) == CUDA_SUCCESS) {
          ++stats_.driver_frees;
          stats_.reserved_bytes -= size;
          if (recording_) event(MemoryEvent::Kind::DriverFree, p, size, nullptr, id);
        } else {
          free_[adopt].emplace(size, p);
        }
      }
      for (auto& [p, b] : live_) {
        if (b.pool != id) continue;
        b.pool = 0;
        b.stream = adopt;
      }
      stats_.graph_pool_bytes -= pool.bytes;
      pools_.erase(pit);
      if (routing_pool_ == id) routing_pool_ = 0, routing_stream_ = nullptr;
    } catch (...) {
      // Out of host memory, or the driver gone at exit: the pool's blocks stay reserved.
    }
  }

 private:
  using FreeList = std::multimap<size_t, CUdeviceptr>;  // cached blocks by size
  struct Block {
    size_t size;
    CUstream stream;
    uint64_t pool;   // 0: the general allocator; else the graph pool it belongs to
    std::string op;  // the MemoryContext at allocation, while recording
  };

  static std::string context() { return t_memory_context ? t_memory_context : ""; }

  // Note [Allocator nodes]
  // An allocation moves a block from a free list (a multimap) to live_ (a hash map), and
  // its free moves it back: with plain emplace and erase that is a malloc and a free of a
  // map node each way, four a tiny op, on the host path of every CUDA op that makes an
  // output. The nodes taken out are kept instead (up to 64 of each kind, in vectors
  // reserved up front, so keeping one never allocates) and reused by the next insert.
  static constexpr size_t kSpareNodes = 64;
  template <typename Node>
  void keep_spare(std::vector<Node>& spares, Node&& n) noexcept {
    if (spares.size() < spares.capacity()) spares.push_back(std::move(n));
  }
  void insert_live(CUdeviceptr p, Block&& b) {
    if (spare_live_.empty()) {
      live_.emplace(p, std::move(b));
      return;
    }
    LiveMap::node_type n = std::move(spare_live_.back());
    spare_live_.pop_back();
    n.key() = p;
    n.mapped() = std::move(b);
    live_.insert(std::move(n));  // a rehash may throw: the node is then freed, no leak
  }

  // Appends to the ring (mutex held, recording_ on).
  void event(MemoryEvent::Kind kind, CUdeviceptr p, size_t size, CUstream stream, uint64_t pool,
             std::string op = {}) {
    try {
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
      events_.push_back(
          {kind, us, uintptr_t(p), size, reinterpret_cast<uintptr_t>(stream), pool, std::move(op)});
      while (events_.size() > max_events_) events_.pop_front();
    } catch (...) {
      // Out of host memory: the event is lost, the allocation is not.
    }
  }
  struct Pool {
    FreeList free;
    size_t bytes = 0;  // reserved by the pool: in use plus cached
  };

  void add_allocated(size_t size) {
    stats_.allocated_bytes += size;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) {
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    }
  }

  // Returns every cached block of the general free lists to the driver (mutex held,
  // context current, device synchronized). The first cuMemFree failure is returned after
  // trying them all.
  CUresult release_cached() {
    CUresult first = CUDA_SUCCESS;
    for (auto& [stream, blocks] : free_) {
      for (auto& [size, p] : blocks) {
        CUresult r = driver().cuMemFree(p);
        if (r == CUDA_SUCCESS) {
          ++stats_.driver_frees;
          stats_.reserved_bytes -= size;
          if (recording_) event(MemoryEvent::Kind::DriverFree, p, size, stream, 0);
        } else if (first == CUDA_SUCCESS) {
          first = r;
        }
      }
    }
    free_.clear();
    return first;
  }

  // cuMemAlloc with one retry after emptying the cache (mutex held). During a capture on
  // this device the call runs in relaxed capture mode and is not retried.
  CUdeviceptr driver_alloc(size_t nbytes, size_t size) {
    DeviceGuard guard(index_);
    const bool capturing = is_capturing(index_);
    CUdeviceptr p = 0;
    CUresult r;
    if (capturing) {
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      MT_CU_CHECK(driver().cuThreadExchangeStreamCaptureMode(&mode));
      r = driver().cuMemAlloc(&p, size);
      driver().cuThreadExchangeStreamCaptureMode(&mode);  // back to the thread's own mode
    } else {
      r = driver().cuMemAlloc(&p, size);
    }
    size_t released = 0, released_blocks = 0;
    if (r == CUDA_ERROR_OUT_OF_MEMORY && !capturing && !free_.empty() &&
        driver().cuCtxSynchronize() == CUDA_SUCCESS) {
      if (recording_) event(MemoryEvent::Kind::OomRetry, 0, size, nullptr, 0);
      const size_t reserved_before = stats_.reserved_bytes;
      const uint64_t frees_before = stats_.driver_frees;
      release_cached();
      released = reserved_before - stats_.reserved_bytes;
      released_blocks = size_t(stats_.driver_frees - frees_before);
      r = driver().cuMemAlloc(&p, size);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free_mem = 0, total_mem = 0;
      driver().cuMemGetInfo(&free_mem, &total_mem);
      MT_ERROR(
          "[cuda] out of memory on cuda:{}: tried to allocate {} ({} bytes, rounded to {}); "
          "cuMemAlloc failed: {}. The device has {} free of {}. minitensor's allocator holds "
          "{} allocated, {} reserved (peak {}; {} driver allocations, {} cache hits, {} "
          "misses){}. Free tensors that are no longer needed, or use smaller sizes{}.",
          index_, format_bytes(nbytes), nbytes, size, error_text(r), format_bytes(free_mem),
          format_bytes(total_mem), format_bytes(stats_.allocated_bytes),
          format_bytes(stats_.reserved_bytes), format_bytes(stats_.peak_allocated_bytes),
          stats_.driver_allocs, stats_.cache_hits, stats_.cache_misses,
          released_blocks ? fmt::format("; {} cached blocks ({}) were released before retrying",
                                        released_blocks, format_bytes(released))
                          : std::string(),
          capturing ? " (a CUDA graph is capturing this device, so the cache was not emptied "
                      "to retry: call empty_cache before capture_begin)"
                    : "");
    }
    check(r, "cuMemAlloc");
    return p;
  }

  int index_;
  mutable std::mutex mutex_;
  using LiveMap = std::unordered_map<CUdeviceptr, Block>;
  LiveMap live_;                                // handed out
  std::map<CUstream, FreeList> free_;           // cached, by stream and size
  std::vector<LiveMap::node_type> spare_live_;  // Note [Allocator nodes]
  std::vector<FreeList::node_type> spare_free_;
  std::unordered_map<uint64_t, Pool> pools_;  // the graph pools, by id
  uint64_t routing_pool_ = 0;                 // the pool the capture stream takes from
  CUstream routing_stream_ = nullptr;
  uint64_t next_pool_ = 1;
  AllocatorStats stats_;
  bool recording_ = false;  // Note [Allocator history]; guarded by mutex_ like the rest
  size_t max_events_ = 100000;
  std::deque<MemoryEvent> events_;
  std::chrono::steady_clock::time_point t0_;
};

CachingAllocator& allocator(int index) {
  detail::check_device(index);
  // Leaked on purpose: freeing device memory during static destruction can crash.
  static auto* allocators = [] {
    auto* v = new std::vector<std::unique_ptr<CachingAllocator>>();
    for (int i = 0; i < device_count(); ++i) v->push_back(std::make_unique<CachingAllocator>(i));
    return v;
  }();
  return *(*allocators)[size_t(index)];
}

}  // namespace

Allocator* caching_allocator(int index) { return &allocator(index); }

AllocatorStats allocator_stats(int index) { return allocator(index).stats(); }

void reset_peak_stats(int index) { allocator(index).reset_peak(); }

void empty_cache(int index) { allocator(index).empty_cache(); }

MemorySnapshot memory_snapshot(int index) { return allocator(index).snapshot(); }

void record_memory_history(bool on, size_t max_events, int index) {
  allocator(index).record(on, max_events);
}

std::vector<MemoryEvent> memory_history(int index) { return allocator(index).history(); }

namespace detail {
uint64_t begin_pool(int index, CUstream stream) { return allocator(index).begin_pool(stream); }
void end_pool_routing(int index, uint64_t pool) { allocator(index).end_pool_routing(pool); }
size_t pool_bytes(int index, uint64_t pool) { return allocator(index).pool_bytes(pool); }
void release_pool(int index, uint64_t pool) noexcept {
  try {
    allocator(index).release_pool(pool);
  } catch (...) {
  }
}
}  // namespace detail

MemoryContext::MemoryContext(const char* what) : prev_(t_memory_context) {
  t_memory_context = what;
}
MemoryContext::~MemoryContext() { t_memory_context = prev_; }
const char* MemoryContext::current() { return t_memory_context; }

}  // namespace mt::cuda

#endif  // MT_HAVE_CUDA
