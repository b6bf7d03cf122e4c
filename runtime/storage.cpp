// SPDX-License-Identifier: MIT
#include "runtime/storage.h"

#include <array>
#include <cstdlib>
#include <mutex>
#include <new>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"
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
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSmallCacheOn = false;
#else
constexpr bool kSmallCacheOn = true;
#endif
constexpr size_t kSmallMax = 1024;
constexpr size_t kClasses = kSmallMax / 64;  // class c holds blocks of (c + 1) * 64 bytes
constexpr int kPerClass = 32;
enum Pool { kDataPool, kObjectPool, kNumPools };  // 64-byte aligned data; objects

struct SmallCache {
  void* blocks[kNumPools][kClasses][kPerClass];
  int count[kNumPools][kClasses];
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
    void* p = std::aligned_alloc(64, rounded);
    MT_CHECK(p != nullptr, "[cpu allocator] out of memory allocating {} bytes", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) noexcept override {
    if (!small_keep(kDataPool, ptr, round64(nbytes))) std::free(ptr);
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
