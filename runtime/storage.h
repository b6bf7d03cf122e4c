// SPDX-License-Identifier: MIT
// Allocator and Storage: the reference-counted buffer behind every tensor and its views.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "runtime/device.h"

namespace mt {

// Hands out device memory. The CPU allocator aligns to 64 bytes; the CUDA caching
// allocator (runtime/cuda) reuses blocks. allocate(0) may return nullptr.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) noexcept = 0;
  virtual Device device() const = 0;
};

Allocator* cpu_allocator();
// The allocator for `d`. A CUDA device on a machine without one is a clear error.
Allocator* allocator_for(Device d);

// A buffer of bytes on one device. The version counter is shared by every view
// of the storage: in-place ops bump it, autograd compares it with the version
// a saved tensor had (Note [Saved tensor versions] in autograd/node.h).
class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Allocator* allocator);
  // Wraps memory the caller owns; `deleter` (may be empty) runs when the last view dies.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;               // set when we allocated data_
  std::function<void(void*)> external_deleter_;  // set for from_blob
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

namespace detail {
// Memory for the runtime's small objects (TensorImpl, StorageImpl, tape entries): blocks of
// up to 1 KiB come from per-thread free lists (Note [Small CPU blocks]), larger ones from
// malloc. Aligned for any fundamental type.
void* object_alloc(size_t nbytes);
void object_free(void* ptr, size_t nbytes) noexcept;

template <typename T>
struct ObjectAllocator {
  static_assert(alignof(T) <= alignof(std::max_align_t), "object_alloc aligns to max_align_t");
  using value_type = T;
  ObjectAllocator() = default;
  template <typename U>
  ObjectAllocator(const ObjectAllocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(object_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { object_free(p, n * sizeof(T)); }
  friend bool operator==(const ObjectAllocator&, const ObjectAllocator&) { return true; }
};

// std::make_shared with the object allocator: the object and its reference counts in one
// block from those lists.
template <typename T, typename... Args>
std::shared_ptr<T> make_object(Args&&... args) {
  return std::allocate_shared<T>(ObjectAllocator<T>{}, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace mt
