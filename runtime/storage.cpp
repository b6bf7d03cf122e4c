// SPDX-License-Identifier: MIT
#include <array>
#include <cstdlib>
#include <mutex>
#include <new>

#include "runtime/cpu_cache.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/hooks.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/tls.h"

namespace mt {
namespace {

// Note [Small CPU blocks]
// glibc serves aligned_alloc outside its fast per-thread cache (tcache), so a 64-byte
// aligned block costs several times a plain malloc. Training loops and tiny ops make and
// drop the same small sizes over and over; blocks of up to kSmallMax bytes are therefore
// kept, per thread, in a short free list for each 64-byte size class. The runtime's own
// small objects (a tensor's TensorImpl, a StorageImpl, a tape entry: detail::make_object)
// come from lists of their own, made with plain malloc: a pop and a push there cost less
// than glibc's malloc and free, and a tiny op makes two or three of them.
// A block may be freed on another thread than the one that made it: it then joins that
// thread's list. A thread's lists are made at its first small free and emptied when it
// ends; blocks freed after that (static tensors at exit) go straight to free(). The thread
// reaches them through one pointer (Note [Thread-local variables in a shared library]).
// Under AddressSanitizer the lists are off, so that it still sees every use after free.
// MT_NO_CPU_CACHING=1 turns the lists off too (as PYTORCH_NO_CUDA_MEMORY_CACHING does
// torch's CUDA cache): every block then comes from malloc and goes back to free, for a
// memory checker, a heap profiler or an A/B of the lists' cost.
#if defined(__SANITIZE_ADDRESS__)
const bool kSmallCacheOn = false;
#else
const bool kSmallCacheOn = [] {
  const char* v = std::getenv("MT_NO_CPU_CACHING");
  return v == nullptr || v[0] == '\0' || v[0] == '0';
}();
#endif
constexpr size_t kSmallMax = 1024;
constexpr size_t kClasses = kSmallMax / 64;  // class c holds blocks of (c + 1) * 64 bytes
constexpr int kPerClass = 32;
enum Pool { kDataPool, kObjectPool, kNumPools };  // 64-byte aligned data; objects

// Note [Medium CPU blocks]
// Above kSmallMax, glibc serves a block with mmap or from the top of its heap, and gives
// the pages back to the kernel when the block is freed (munmap, or a trim of the heap's
// top). A loop that makes and drops the same intermediates of a few hundred KiB (a batched
// matmul's output, a per-sample gradient) then pays a page fault and a page of zeroes for
// every 4 KiB of every new block (`perf record` of a loop of vmap(grad) calls shows it in
// the kernel's page-fault path; MT_NO_CPU_CACHING=1 gives the A/B). So a thread also keeps its last
// freed blocks of up to kMediumMax bytes, at most kMediumPerSize of one size, kMediumKeep and
// kMediumBytes in all, and hands one back to an allocation of the same rounded size; when the list
// is full, the oldest is freed. The bound a size keeps a burst of one size (a loop's 64 per-sample
// results) from pushing out the other sizes a loop reuses. Same ownership and thread-end rules as
// the small lists; off under AddressSanitizer.
constexpr size_t kMediumMax = size_t(8) << 20;
constexpr size_t kMediumBytes = size_t(32) << 20;
constexpr int kMediumKeep = 64;
constexpr int kMediumPerSize = 8;

struct SmallCache {
  void* blocks[kNumPools][kClasses][kPerClass];
  int count[kNumPools][kClasses];
  // medium data blocks, oldest first
  void* medium[kMediumKeep];
  size_t medium_size[kMediumKeep];
  int medium_count;
  size_t medium_bytes;
};
MT_TLS SmallCache* t_small = nullptr;
MT_TLS bool t_small_closed = false;  // the thread is ending: free() at once

struct SmallCacheOwner {
  SmallCache* make() {
    t_small = static_cast<SmallCache*>(std::calloc(1, sizeof(SmallCache)));
    return t_small;
  }
  ~SmallCacheOwner() {
    t_small_closed = true;
    SmallCache* c = t_small;
    t_small = nullptr;
    if (c == nullptr) return;
    for (int p = 0; p < kNumPools; ++p)
      for (size_t k = 0; k < kClasses; ++k)
        for (int i = 0; i < c->count[p][k]; ++i) std::free(c->blocks[p][k][i]);
    for (int i = 0; i < c->medium_count; ++i) std::free(c->medium[i]);
    std::free(c);
  }
};
thread_local SmallCacheOwner t_small_owner;  // its destructor runs when the thread ends

// A kept block of `rounded` bytes (a multiple of 64) from `pool`, or nullptr.
inline void* small_take(Pool pool, size_t rounded) {
  SmallCache* cache = t_small;
  if (!kSmallCacheOn || cache == nullptr || rounded == 0 || rounded > kSmallMax) return nullptr;
  size_t c = rounded / 64 - 1;
  int& n = cache->count[pool][c];
  return n > 0 ? cache->blocks[pool][c][--n] : nullptr;
}

// Keeps ptr (of `rounded` bytes) for reuse; false when it must be freed instead.
inline bool small_keep(Pool pool, void* ptr, size_t rounded) {
  if (!kSmallCacheOn || ptr == nullptr || rounded == 0 || rounded > kSmallMax) return false;
  SmallCache* cache = t_small;
  if (cache == nullptr && !t_small_closed) cache = t_small_owner.make();  // first small free
  if (cache == nullptr) return false;
  size_t c = rounded / 64 - 1;
  int& n = cache->count[pool][c];
  if (n == kPerClass) return false;
  cache->blocks[pool][c][n++] = ptr;
  return true;
}

// A kept medium block of exactly `rounded` bytes (the newest), or nullptr.
inline void* medium_take(size_t rounded) {
  SmallCache* cache = t_small;
  if (!kSmallCacheOn || cache == nullptr || rounded <= kSmallMax || rounded > kMediumMax)
    return nullptr;
  for (int i = cache->medium_count - 1; i >= 0; --i) {
    if (cache->medium_size[i] != rounded) continue;
    void* p = cache->medium[i];
    for (int j = i + 1; j < cache->medium_count; ++j) {
      cache->medium[j - 1] = cache->medium[j];
      cache->medium_size[j - 1] = cache->medium_size[j];
    }
    --cache->medium_count;
    cache->medium_bytes -= rounded;
    return p;
  }
  return nullptr;
}

// Keeps the medium block ptr (of `rounded` bytes), freeing the oldest kept ones to make
// room; false when it must be freed instead.
inline bool medium_keep(void* ptr, size_t rounded) {
  if (!kSmallCacheOn || ptr == nullptr || rounded <= kSmallMax || rounded > kMediumMax)
    return false;
  SmallCache* cache = t_small;
  if (cache == nullptr && !t_small_closed) cache = t_small_owner.make();
  if (cache == nullptr) return false;
  int same = 0;
  for (int i = 0; i < cache->medium_count; ++i) same += cache->medium_size[i] == rounded;
  if (same == kMediumPerSize) return false;
  int drop = 0;  // the oldest blocks to free
  size_t bytes = cache->medium_bytes;
  while (drop < cache->medium_count &&
         (cache->medium_count - drop == kMediumKeep || bytes + rounded > kMediumBytes))
    bytes -= cache->medium_size[drop++];
  for (int i = 0; i < drop; ++i) std::free(cache->medium[i]);
  for (int i = drop; i < cache->medium_count; ++i) {
    cache->medium[i - drop] = cache->medium[i];
    cache->medium_size[i - drop] = cache->medium_size[i];
  }
  cache->medium_count -= drop;
  cache->medium[cache->medium_count] = ptr;
  cache->medium_size[cache->medium_count] = rounded;
  ++cache->medium_count;
  cache->medium_bytes = bytes + rounded;
  return true;
}

size_t round64(size_t nbytes) { return (nbytes + 63) / 64 * 64; }

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    // the factories never ask for more (Note [Checked shapes]); rounding up past it would wrap
    MT_CHECK(nbytes <= size_t(INT64_MAX),
             "[cpu allocator] cannot allocate {} bytes: more than int64 can count", nbytes);
    size_t rounded = round64(nbytes);
    if (void* p = small_take(kDataPool, rounded)) return p;
    if (void* p = medium_take(rounded)) return p;
    void* p = std::aligned_alloc(64, rounded);
    MT_CHECK(p != nullptr, "[cpu allocator] out of memory allocating {} bytes", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) noexcept override {
    const size_t rounded = round64(nbytes);
    if (!small_keep(kDataPool, ptr, rounded) && !medium_keep(ptr, rounded)) std::free(ptr);
  }
  Device device() const override { return kCPU; }
};

}  // namespace

namespace detail {

void* object_alloc(size_t nbytes) {
  size_t rounded = round64(nbytes);
  if (void* p = small_take(kObjectPool, rounded)) return p;
  void* p = std::malloc(rounded);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void object_free(void* ptr, size_t nbytes) noexcept {
  if (!small_keep(kObjectPool, ptr, round64(nbytes))) std::free(ptr);
}

}  // namespace detail

CpuCacheStats cpu_cache_stats() {
  CpuCacheStats st;
  st.enabled = kSmallCacheOn;
  const SmallCache* c = t_small;
  if (c == nullptr) return st;
  for (size_t k = 0; k < kClasses; ++k) {
    st.blocks += c->count[kDataPool][k];
    st.bytes += int64_t(c->count[kDataPool][k]) * int64_t((k + 1) * 64);
  }
  st.blocks += c->medium_count;
  st.bytes += int64_t(c->medium_bytes);
  return st;
}

void cpu_empty_cache() {
  SmallCache* c = t_small;
  if (c == nullptr) return;
  for (size_t k = 0; k < kClasses; ++k) {
    for (int i = 0; i < c->count[kDataPool][k]; ++i) std::free(c->blocks[kDataPool][k][i]);
    c->count[kDataPool][k] = 0;
  }
  for (int i = 0; i < c->medium_count; ++i) std::free(c->medium[i]);
  c->medium_count = 0;
  c->medium_bytes = 0;
}

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

Allocator* allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  return cuda::caching_allocator(d.index);  // throws a clear error where CUDA is absent
}

StorageImpl::StorageImpl(size_t nbytes, Allocator* allocator)
    : nbytes_(nbytes), device_(allocator->device()), allocator_(allocator) {
  data_ = allocator->allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device,
                         std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), external_deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_) {
    allocator_->deallocate(data_, nbytes_);
  } else if (external_deleter_) {
    external_deleter_(data_);
  }
}

}  // namespace mt
