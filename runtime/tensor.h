// SPDX-License-Identifier: MIT
// Tensor: a cheap, reference-counted handle to sizes, strides, an offset, a dtype,
// a device and a Storage (none for a fake tensor), plus the autograd slot. Here too, in
// order: Allocator and Storage, Shape, DispatchKey and DispatchKeySet, FakeMode.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

// Allocator and Storage: the reference-counted buffer behind every tensor and its views.
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
// a saved tensor had (Note [Saved tensor versions] in autograd/autograd.h).
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

// Shape: a fixed-capacity list of sizes or strides (up to kMaxDims), so that making
// a tensor allocates nothing for its metadata.

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  Shape(std::span<const int64_t> v) { assign(v.begin(), v.end()); }     // NOLINT
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT
  explicit Shape(size_t n, int64_t value = 0) {
    check_size(n);
    n_ = uint8_t(n);
    for (size_t i = 0; i < n; ++i) d_[i] = value;
  }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t* data() { return d_; }
  const int64_t* data() const { return d_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t& operator[](size_t i) { return d_[i]; }
  int64_t operator[](size_t i) const { return d_[i]; }
  int64_t& back() { return d_[n_ - 1]; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    check_size(n_ + 1u);
    d_[n_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    check_size(n_ + 1u);
    for (size_t i = n_; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
    ++n_;
  }
  void erase(size_t pos) {
    for (size_t i = pos + 1; i < n_; ++i) d_[i - 1] = d_[i];
    --n_;
  }
  void resize(size_t n, int64_t value = 0) {
    check_size(n);
    for (size_t i = n_; i < n; ++i) d_[i] = value;
    n_ = uint8_t(n);
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  operator std::span<const int64_t>() const { return {d_, n_}; }  // NOLINT

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.n_ != b.n_) return false;
    for (size_t i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

 private:
  template <typename It>
  void assign(It b, It e) {
    size_t n = size_t(e - b);
    check_size(n);
    n_ = uint8_t(n);
    for (size_t i = 0; i < n; ++i) d_[i] = int64_t(b[i]);
  }
  static void check_size(size_t n) {
    MT_CHECK(n <= size_t(kMaxDims), "[shape] tensors have at most {} dimensions, got {}", kMaxDims,
             n);
  }
  int64_t d_[kMaxDims] = {};
  uint8_t n_ = 0;
};

namespace detail {
// "[op] the sizes [...] have 2^64 elements, more than int64 can count; ..." (or a
// negative size): the error of checked_numel.
[[noreturn]] void throw_bad_shape(const Shape& s, const char* op);
// "[2, 3]": the text of fmt's "{}" for a Shape.
std::string shape_str(const Shape& s);
}  // namespace detail

// Note [Checked shapes]
// Every shape a tensor gets is checked where it is made (the factories, view, reshape,
// expand): no size is negative, and the product of the sizes, counting a 0 as a 1 (what
// the contiguous strides and the extents need), fits in int64. Shapes derived from a
// checked one (a slice, a transpose, a flatten) then cannot overflow either, and neither
// can numel times the element size, which the factories and expand check as well.
// The number of elements of `s`, refusing ("[op] ...") negative sizes and shapes past int64.
inline int64_t checked_numel(const Shape& s, const char* op) {
  int64_t n = 1, strided = 1;
  for (int64_t v : s) {
    if (v < 0 || __builtin_mul_overflow(strided, v > 1 ? v : 1, &strided)) [[unlikely]]
      detail::throw_bad_shape(s, op);
    n *= v;  // 0 <= n <= strided: no overflow
  }
  return n;
}

// Product of sizes (1 for a 0-d shape), for shapes already checked; one that overflows
// is refused all the same, never wrapped.
inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s)
    if (__builtin_mul_overflow(n, v, &n)) [[unlikely]]
      detail::throw_bad_shape(s, "tensor");
  return n;
}

}  // namespace mt

template <>
struct fmt::formatter<mt::Shape> : mt::detail::TextFormatter {
  auto format(const mt::Shape& s, fmt::format_context& ctx) const {
    return write(mt::detail::shape_str(s), ctx);
  }
};

namespace mt {

// DispatchKey and DispatchKeySet. They live in the runtime (as c10's do in PyTorch)
// because every tensor carries a key set; the dispatcher reads them.

// Note [Dispatch key priority]
// The numeric value is the priority: a call goes to the highest key present in
// (union of the arguments' key sets | thread-local included) & ~thread-local excluded.
//   Trace > Batched > Autocast > Autograd > Mode > Fake > CUDA > CPU
// Trace is an optional boxed fallback that logs calls, then redispatches below itself.
// Batched (mt::vmap) unwraps batched tensors, applies the op's batching rule and wraps
// the results; Autocast casts the inputs by the op's policy; both then call below
// themselves (Note [Where Batched sits] in autograd/vmap.h).
// Autograd records a tape entry, then redispatches below itself to the backend.
// Mode runs the thread's innermost user dispatch mode (Note [Dispatch modes] in
// dispatcher/mode.h); below Autograd, so a mode sees the ops a backward runs too.
// Fake sits above the backends so a fake tensor never reaches a real kernel.
enum class DispatchKey : uint8_t {
  CPU = 0,
  CUDA = 1,
  Fake = 2,
  Mode = 3,
  Autograd = 4,
  Autocast = 5,
  Batched = 6,
  Trace = 7,
};
inline constexpr int kNumDispatchKeys = 8;

std::string_view dispatch_key_name(DispatchKey k);
// Parses a key's name ("CPU", ..., "Trace"); returns false if unknown.
bool parse_dispatch_key(std::string_view name, DispatchKey* out);

class DispatchKeySet {
 public:
  constexpr DispatchKeySet() = default;
  constexpr explicit DispatchKeySet(uint64_t bits) : bits_(bits) {}
  constexpr DispatchKeySet(DispatchKey k) : bits_(uint64_t(1) << uint8_t(k)) {}  // NOLINT
  constexpr DispatchKeySet(std::initializer_list<DispatchKey> ks) {
    for (auto k : ks) bits_ |= uint64_t(1) << uint8_t(k);
  }

  constexpr bool has(DispatchKey k) const { return bits_ & (uint64_t(1) << uint8_t(k)); }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr uint64_t raw() const { return bits_; }
  // The highest-priority key; undefined on an empty set (check empty() first).
  constexpr DispatchKey highest() const { return DispatchKey(63 - std::countl_zero(bits_)); }
  // The keys strictly below k.
  constexpr DispatchKeySet below(DispatchKey k) const {
    return DispatchKeySet(bits_ & ((uint64_t(1) << uint8_t(k)) - 1));
  }
  constexpr DispatchKeySet add(DispatchKey k) const { return *this | DispatchKeySet(k); }
  constexpr DispatchKeySet remove(DispatchKey k) const { return *this - DispatchKeySet(k); }

  constexpr DispatchKeySet operator|(DispatchKeySet o) const {
    return DispatchKeySet(bits_ | o.bits_);
  }
  constexpr DispatchKeySet operator&(DispatchKeySet o) const {
    return DispatchKeySet(bits_ & o.bits_);
  }
  constexpr DispatchKeySet operator-(DispatchKeySet o) const {
    return DispatchKeySet(bits_ & ~o.bits_);
  }
  constexpr bool operator==(const DispatchKeySet&) const = default;

  std::string str() const;  // "{Autograd, CPU}", highest first

 private:
  uint64_t bits_ = 0;
};

class Tensor;
struct TensorImpl;
struct Node;  // a tape entry (autograd/autograd.h)

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
