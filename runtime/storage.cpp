#include "runtime/storage.h"

#include <array>
#include <cstdlib>
#include <mutex>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"

namespace mt {
namespace {

// Note [Small CPU blocks]
// glibc serves aligned_alloc outside its fast per-thread cache (tcache), so a 64-byte
// aligned block costs several times a plain malloc. Training loops and tiny ops make and
// drop the same small sizes over and over; blocks of up to kSmallMax bytes are therefore
// kept, per thread, in a short free list for each 64-byte size class. A block may be
// freed on another thread than the one that made it: it then joins that thread's list.
// The lists are emptied when their thread ends; blocks freed after that (static tensors
// at exit) go straight to free().
// Under AddressSanitizer the lists are off, so that it still sees every use after free.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSmallCacheOn = false;
#else
constexpr bool kSmallCacheOn = true;
#endif
constexpr size_t kSmallMax = 1024;
constexpr size_t kClasses = kSmallMax / 64;  // class c holds blocks of (c + 1) * 64 bytes
constexpr int kPerClass = 32;

struct SmallCache {
  void* blocks[kClasses][kPerClass];
  int count[kClasses];
  bool live;    // the flush at thread exit is armed
  bool closed;  // the thread is ending: free() at once
};
thread_local SmallCache t_small{};  // trivially destructible: usable until the thread ends

struct SmallCacheFlusher {
  void arm() {}
  ~SmallCacheFlusher() {
    for (size_t c = 0; c < kClasses; ++c) {
      for (int i = 0; i < t_small.count[c]; ++i) std::free(t_small.blocks[c][i]);
      t_small.count[c] = 0;
    }
    t_small.live = false;
    t_small.closed = true;
  }
};
thread_local SmallCacheFlusher t_small_flusher;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (kSmallCacheOn && rounded <= kSmallMax) {  // rounded >= 64 here
      size_t c = rounded / 64 - 1;
      if (t_small.count[c] > 0) return t_small.blocks[c][--t_small.count[c]];
    }
    void* p = std::aligned_alloc(64, rounded);
    MT_CHECK(p != nullptr, "[cpu allocator] out of memory allocating {} bytes", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) noexcept override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (kSmallCacheOn && ptr != nullptr && rounded != 0 && rounded <= kSmallMax &&
        !t_small.closed) {
      if (!t_small.live) {  // first small free on this thread: arm the flush at thread exit
        t_small_flusher.arm();
        t_small.live = true;
      }
      size_t c = rounded / 64 - 1;
      if (t_small.count[c] < kPerClass) {
        t_small.blocks[c][t_small.count[c]++] = ptr;
        return;
      }
    }
    std::free(ptr);
  }
  Device device() const override { return kCPU; }
};

}  // namespace

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
