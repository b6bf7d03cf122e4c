// SPDX-License-Identifier: MIT
// Tensor: a cheap, reference-counted handle to sizes, strides, an offset, a dtype,
// a device and a Storage (none for a fake tensor), plus the autograd slot.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dispatch_key.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"
#include "runtime/storage.h"

namespace mt {

class Tensor;
struct TensorImpl;
struct Node;  // a tape entry (autograd/node.h)

// The autograd slot of a tensor. The engine in autograd/ reads and writes it;
// grad_fn is the tape entry that produced a non-leaf tensor.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<mt::Node> grad_fn;
  uint32_t output_nr = 0;
};

// A tensor's AutogradMeta, kept inside the TensorImpl (no allocation of its own) and
// empty until first asked for; it reads like the pointer it replaced.
class AutogradSlot {
 public:
  explicit operator bool() const { return engaged_; }
  AutogradMeta* get() { return engaged_ ? &meta_ : nullptr; }
  const AutogradMeta* get() const { return engaged_ ? &meta_ : nullptr; }
  AutogradMeta* operator->() { return &meta_; }
  const AutogradMeta* operator->() const { return &meta_; }
  AutogradMeta& emplace() {
    engaged_ = true;
    return meta_;
  }

 private:
  AutogradMeta meta_;
  bool engaged_ = false;
};

// The state behind a Tensor handle. Internal: use Tensor's methods.
struct TensorImpl {
  TensorImpl() = default;
  TensorImpl(const Shape& sizes_, const Shape& strides_, int64_t offset_, DType dtype_,
             Device device_, Storage storage_, bool fake_)
      : sizes(sizes_),
        strides(strides_),
        offset(offset_),
        numel(shape_numel(sizes_)),
        dtype(dtype_),
        device(device_),
        storage(std::move(storage_)),
        fake(fake_) {
    refresh_keys();
  }

  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  int64_t numel = 0;
  DType dtype = DType::Float32;
  Device device;
  Storage storage;  // null for fake tensors
  bool fake = false;
  DispatchKeySet keys;  // backend or Fake, plus Autograd when it requires grad
  AutogradSlot autograd;

  void refresh_keys();
};

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = kCPU;
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Metadata.
  const Shape& sizes() const { return checked()->sizes; }
  const Shape& strides() const { return checked()->strides; }
  // Dims may be negative (counted from the end); out of range is an error.
  int64_t size(int64_t dim) const {
    const TensorImpl* t = checked();
    if (dim >= 0 && size_t(dim) < t->sizes.size()) [[likely]]
      return t->sizes[size_t(dim)];
    return size_slow(dim);
  }
  int64_t stride(int64_t dim) const {
    const TensorImpl* t = checked();
    if (dim >= 0 && size_t(dim) < t->strides.size()) [[likely]]
      return t->strides[size_t(dim)];
    return stride_slow(dim);
  }
  int64_t dim() const { return int64_t(checked()->sizes.size()); }
  int64_t numel() const { return checked()->numel; }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->device; }
  int64_t storage_offset() const { return checked()->offset; }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_fake() const { return checked()->fake; }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  DispatchKeySet key_set() const { return impl_ ? impl_->keys : DispatchKeySet(); }

  // Data. Reading the data of a fake tensor is an error, never a crash.
  void* data_ptr() const {
    const TensorImpl* t = checked();
    if (t->fake) [[unlikely]]
      throw_fake_data();
    const StorageImpl* st = t->storage.get();
    if (st == nullptr || st->data() == nullptr) return nullptr;
    return static_cast<char*>(st->data()) + t->offset * int64_t(dtype_size(t->dtype));
  }
  template <typename T>
  T* data_ptr() const {
    check_dtype_for_data_ptr(dtype_v<T>);
    return static_cast<T*>(data_ptr());
  }
  const Storage& storage() const { return checked()->storage; }
  // The version counter of the storage, shared by every view (0 for fake tensors).
  uint32_t version() const;
  void bump_version() const;

  // Autograd slot. The engine is in autograd/.
  bool requires_grad() const {
    const TensorImpl* t = checked();
    return t->autograd && t->autograd->requires_grad;
  }
  const Tensor& requires_grad_(bool requires_grad = true) const;
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  bool is_leaf() const;
  AutogradMeta* autograd_meta() const { return checked()->autograd.get(); }
  AutogradMeta& ensure_autograd_meta() const;
  // A new handle to the same data that does not require grad and has no history.
  Tensor detach() const;

  // Views share storage; each is an op (kernels/ops/views.cpp; the methods are defined in
  // autograd/tensor_methods.cpp), so autograd sees them. Dims may be negative (from the end).
  Tensor view(const Shape& shape) const;     // one size may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a tensor of at most 2 dims
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // Copies.
  Tensor contiguous() const;  // this tensor when already contiguous
  Tensor clone() const;
  const Tensor& copy_(const Tensor& src) const;  // any layout and dtype; src broadcasts
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(kCPU); }
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const;

  // Values, copied to the host.
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;

  std::string str() const;

 private:
  // Every accessor goes through here: inline, with the error out of line.
  TensorImpl* checked() const {
    if (impl_ == nullptr) [[unlikely]]
      throw_undefined();
    return impl_.get();
  }
  [[noreturn]] static void throw_undefined();
  [[noreturn]] void throw_fake_data() const;
  int64_t size_slow(int64_t dim) const;
  int64_t stride_slow(int64_t dim) const;
  void check_dtype_for_data_ptr(DType want) const {
    if (dtype() != want) [[unlikely]]
      throw_dtype_mismatch(want);
  }
  [[noreturn]] void throw_dtype_mismatch(DType want) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Factories. Under FakeMode (below) they make fake tensors.
Tensor empty(const Shape& shape, const TensorOptions& opts = {});
Tensor empty_strided(const Shape& shape, const Shape& strides, const TensorOptions& opts = {});
Tensor empty_like(const Tensor& t);  // contiguous, same dtype and device
Tensor empty_like(const Tensor& t, const TensorOptions& opts);
Tensor zeros(const Shape& shape, const TensorOptions& opts = {});
Tensor ones(const Shape& shape, const TensorOptions& opts = {});
Tensor full(const Shape& shape, double value, const TensorOptions& opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, const TensorOptions& opts = {});
Tensor arange(double end, const TensorOptions& opts = {});
Tensor arange(double start, double end, double step = 1, const TensorOptions& opts = {});
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& opts = {});

// A counter-based generator (Philox4x32-10, runtime/philox.h, Note [The random stream]):
// element i of a draw depends only on (seed, offset + i), so the same seed gives the same
// numbers on every device and launch layout, and different seeds give independent streams.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed, offset_ = 0; }
  uint64_t seed() const { return seed_; }
  // Reserves n counters and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = offset_;
    offset_ += n;
    return o;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};
Generator& default_generator();
void manual_seed(uint64_t seed);

Tensor rand(const Shape& shape, const TensorOptions& opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, const TensorOptions& opts = {}, Generator* gen = nullptr);

// From host values (copied). The shape defaults to 1-d.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& opts);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  return from_vector(values, shape, TensorOptions{.dtype = dtype_v<T>});
}
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{int64_t(values.size())});
}
// Wraps user memory without copying; `deleter` (may be empty) runs when the last
// view dies. Strides default to contiguous.
Tensor from_blob(void* data, const Shape& shape, DType dtype,
                 std::function<void(void*)> deleter = {}, Device device = kCPU);
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                 std::function<void(void*)> deleter = {}, Device device = kCPU);

// Comparisons for tests, done in float64 on the host.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
double max_abs_diff(const Tensor& a, const Tensor& b);
bool equal(const Tensor& a, const Tensor& b);  // same shape, dtype and values

Shape contiguous_strides(const Shape& sizes);
// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

namespace detail {
// Metadata-only constructors used by the views and the ops.
Tensor make_tensor(Storage storage, const Shape& sizes, const Shape& strides, int64_t offset,
                   DType dtype, Device device);
Tensor make_fake(const Shape& sizes, const Shape& strides, DType dtype, Device device);
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
// elements * dtype_size(t), refused ("[op] ... sizes s ...") when past int64.
int64_t checked_nbytes(const Shape& s, int64_t elements, DType t, const char* op);
// The copy behind Tensor::copy_ (no autograd, no version bump).
void copy_impl(const Tensor& dst, const Tensor& src);
void fill_impl(const Tensor& t, double value);
// The runtime's own conversions, which are not ops (no autograd, no trace): the layers
// below the ops use them instead of Tensor::to and contiguous (Note [Where the op-backed
// Tensor methods live], autograd/tensor_methods.cpp). copy_as: a new contiguous tensor of
// t's values as dtype on device (fake under FakeMode, like empty). host_contiguous: t's
// values as a contiguous CPU tensor of dtype, t itself when it is one; a fake t is refused
// as data_ptr() refuses it.
Tensor copy_as(const Tensor& t, DType dtype, Device device);
Tensor host_contiguous(const Tensor& t, DType dtype);
// Reads element i (in logical row-major order) of a CPU tensor as double.
double read_as_double(const Tensor& t, int64_t i);
std::vector<double> to_double_vector(const Tensor& t);
}  // namespace detail

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detail::host_contiguous(*this, dtype_v<T>);
  const T* p = c.numel() ? c.template data_ptr<T>() : nullptr;
  return std::vector<T>(p, p + c.numel());
}

template <typename T>
T Tensor::item() const {
  MT_CHECK(numel() == 1,
           "[item] item() needs a tensor with exactly one element, but this one has shape {} "
           "({} elements); index or reduce it first",
           sizes(), numel());
  return to_vector<T>()[0];
}

// FakeMode: under this guard, factories make fake tensors (metadata, no storage).

class FakeMode {
 public:
  FakeMode();
  ~FakeMode();
  FakeMode(const FakeMode&) = delete;
  FakeMode& operator=(const FakeMode&) = delete;
  static bool enabled();

 private:
  bool prev_;
};

// A fake tensor with t's sizes, strides, dtype and device.
Tensor fake_like(const Tensor& t);
// A fake tensor of the given shape (contiguous); a fake cuda:0 works without a GPU.
Tensor fake_empty(const Shape& shape, const TensorOptions& opts = {});

}  // namespace mt

template <>
struct fmt::formatter<mt::Tensor> : mt::detail::TextFormatter {
  auto format(const mt::Tensor& t, fmt::format_context& ctx) const { return write(t.str(), ctx); }
};
