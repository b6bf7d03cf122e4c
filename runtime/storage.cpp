#include "runtime/storage.h"

#include <array>
#include <cstdlib>
#include <mutex>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"

namespace mt {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    MT_CHECK(p != nullptr, "[cpu allocator] out of memory allocating {} bytes", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
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
