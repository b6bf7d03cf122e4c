// SPDX-License-Identifier: MIT
#include "runtime/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/hooks.h"
#include "runtime/fake_observer.h"
#include "runtime/philox.h"
#include "runtime/tls.h"

namespace mt {

// ---- DispatchKey -------------------------------------------------------------------

std::string_view dispatch_key_name(DispatchKey k) {
  switch (k) {
    case DispatchKey::CPU:
      return "CPU";
    case DispatchKey::CUDA:
      return "CUDA";
    case DispatchKey::Fake:
      return "Fake";
    case DispatchKey::Mode:
      return "Mode";
    case DispatchKey::Autograd:
      return "Autograd";
    case DispatchKey::Autocast:
      return "Autocast";
    case DispatchKey::Batched:
      return "Batched";
    case DispatchKey::Trace:
      return "Trace";
  }
  return "?";
}

bool parse_dispatch_key(std::string_view name, DispatchKey* out) {
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    if (dispatch_key_name(DispatchKey(i)) == name) {
      *out = DispatchKey(i);
      return true;
    }
  }
  return false;
}

std::string DispatchKeySet::str() const {
  std::string s = "{";
  for (int i = kNumDispatchKeys - 1; i >= 0; --i) {
    if (!has(DispatchKey(i))) continue;
    if (s.size() > 1) s += ", ";
    s += dispatch_key_name(DispatchKey(i));
  }
  return s + "}";
}

// ---- TensorImpl and Tensor -----------------------------------------------------------

void TensorImpl::refresh_keys() {
  DispatchKeySet k = fake ? DispatchKeySet(DispatchKey::Fake)
                          : DispatchKeySet(device.is_cuda() ? DispatchKey::CUDA : DispatchKey::CPU);
  if (autograd && autograd->requires_grad) k = k.add(DispatchKey::Autograd);
  keys = k;
}

void Tensor::throw_undefined() {
  MT_ERROR(
      "[tensor] this Tensor is undefined (default-constructed or moved from); "
      "make one with a factory such as mt::zeros or mt::from_vector");
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dims -1 and 0
  MT_CHECK(dim >= -n && dim < n,
           "[{}] dimension {} is out of range for a {}-d tensor (expected a value in [{}, {}])", op,
           dim, ndim, -n, n - 1);
  return dim < 0 ? dim + n : dim;
}

int64_t Tensor::size_slow(int64_t d) const {
  MT_CHECK(dim() > 0, "[size] a 0-d tensor has no dimensions");
  return sizes()[size_t(wrap_dim(d, dim(), "size"))];
}

int64_t Tensor::stride_slow(int64_t d) const {
  MT_CHECK(dim() > 0, "[stride] a 0-d tensor has no dimensions");
  return strides()[size_t(wrap_dim(d, dim(), "stride"))];
}

// Saturates at INT64_MAX instead of overflowing: a shape whose strides do not fit has too
// many elements too, and the callers refuse it by its sizes (Note [Checked shapes]).
Shape contiguous_strides(const Shape& sizes) {
  Shape s(sizes.size(), 1);
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = acc;
    if (__builtin_mul_overflow(acc, std::max<int64_t>(sizes[i], 1), &acc)) acc = INT64_MAX;
  }
  return s;
}

bool Tensor::is_contiguous() const {
  const TensorImpl* t = checked();
  if (t->numel <= 1) return true;
  int64_t expected = 1;
  for (size_t i = t->sizes.size(); i-- > 0;) {
    if (t->sizes[i] == 1) continue;
    if (t->strides[i] != expected) return false;
    expected *= t->sizes[i];
  }
  return true;
}

void Tensor::throw_fake_data() const {
  const TensorImpl* t = impl_.get();
  MT_CHECK(!t->keys.has(DispatchKey::Batched),
           "[data_ptr] cannot read the data of a batched tensor (shape {} per sample): inside "
           "mt::vmap a tensor stands for every sample of the batch; return it from the vmapped "
           "function and read the result",
           t->sizes);
  MT_ERROR(
      "[data_ptr] cannot read the data of a fake tensor (shape {}, {}, {}): fake tensors "
      "carry only metadata; run the op on a real tensor to get values",
      t->sizes, t->dtype, t->device);
}

void Tensor::throw_dtype_mismatch(DType want) const {
  MT_ERROR(
      "[data_ptr] data_ptr<T>() with T of dtype {} was called on a {} tensor; use the "
      "matching T or convert first with .to(mt::DType::...)",
      want, dtype());
}

uint32_t Tensor::version() const {
  const TensorImpl* t = checked();
  return t->storage ? t->storage->version() : 0;
}

void Tensor::bump_version() const {
  const TensorImpl* t = checked();
  if (t->storage) t->storage->bump_version();
}

AutogradMeta& Tensor::ensure_autograd_meta() const {
  TensorImpl* t = checked();
  return t->autograd ? *t->autograd.get() : t->autograd.emplace();
}

const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  TensorImpl* t = checked();
  MT_CHECK(!requires_grad || is_floating(t->dtype),
           "[requires_grad_] only floating-point tensors can require gradients, but this "
           "tensor is {}; convert it first with .to(mt::DType::Float32)",
           t->dtype);
  MT_CHECK(requires_grad || !t->autograd || !t->autograd->grad_fn,
           "[requires_grad_] cannot turn off requires_grad on a tensor that an op produced "
           "(it is not a leaf); use .detach() to get a tensor without history");
  MT_CHECK(!t->keys.has(DispatchKey::Batched),
           "[requires_grad_] this is a batched tensor inside mt::vmap; call requires_grad_ on "
           "the tensor before passing it to mt::vmap (mt::grad inside vmap then gives per-sample "
           "gradients)");
  ensure_autograd_meta().requires_grad = requires_grad;
  t->refresh_keys();
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl* t = checked();
  if (!t->autograd || !t->autograd->grad) return Tensor();
  return Tensor(t->autograd->grad);
}

void Tensor::set_grad(const Tensor& g) const { ensure_autograd_meta().grad = g.impl_ptr(); }

bool Tensor::is_leaf() const {
  const TensorImpl* t = checked();
  return !t->autograd || !t->autograd->grad_fn;
}

namespace detail {
// A batched tensor's detach (autograd/vmap.cpp sets it): the same batch with its value detached.
std::atomic<Tensor (*)(const Tensor&)> g_detach_batched{nullptr};
}  // namespace detail

Tensor Tensor::detach() const {
  const TensorImpl* t = checked();
  if (t->keys.has(DispatchKey::Batched)) [[unlikely]]
    if (auto f = detail::g_detach_batched.load(std::memory_order_acquire)) return f(*this);
  Tensor d = t->fake ? detail::make_fake(t->sizes, t->strides, t->dtype, t->device)
                     : detail::make_tensor(t->storage, t->sizes, t->strides, t->offset, t->dtype,
                                           t->device);
  if (t->fake) detail::notify_fake_made(d, "detach", std::nullopt, this);
  return d;
}

// ---- construction ------------------------------------------------------------------

namespace detail {

Tensor make_tensor(Storage storage, const Shape& sizes, const Shape& strides, int64_t offset,
                   DType dtype, Device device) {
  return Tensor(detail::make_object<TensorImpl>(sizes, strides, offset, dtype, device,
                                                std::move(storage), false));
}

Tensor make_fake(const Shape& sizes, const Shape& strides, DType dtype, Device device) {
  return Tensor(detail::make_object<TensorImpl>(sizes, strides, 0, dtype, device, nullptr, true));
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  const TensorImpl* b = base.impl();
  if (b->fake) return make_fake(sizes, strides, b->dtype, b->device);
  return make_tensor(b->storage, sizes, strides, offset, b->dtype, b->device);
}

}  // namespace detail

namespace {

// A count that may be past int64: "2^64" when it is exactly a power of two (`exact`: the
// factors were), else "1.845e+19".
std::string describe_count(double n, bool exact = true) {
  int e = 0;
  if (exact && std::frexp(n, &e) == 0.5) return fmt::format("2^{}", e - 1);
  return fmt::format("{:.4g}", n);
}

bool all_powers_of_two(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](int64_t v) { return v <= 1 || (v & (v - 1)) == 0; });
}

}  // namespace

namespace detail {

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s.begin(), s.end(), ", "));
}

void throw_bad_shape(const Shape& s, const char* op) {
  for (int64_t v : s)
    MT_CHECK(v >= 0, "[{}] negative size {} in shape {}; sizes must be >= 0", op, v, s);
  double n = 1, nonzero = 1;
  for (int64_t v : s) n *= double(v), nonzero *= double(std::max<int64_t>(v, 1));
  if (n != 0)
    MT_ERROR(
        "[{}] the sizes {} have {} elements, more than int64 can count; make the tensor "
        "smaller (at most 2^63 - 1 elements)",
        op, s, describe_count(n, all_powers_of_two(s)));
  MT_ERROR(
      "[{}] the sizes {} have no elements, but their nonzero sizes multiply to {}, more "
      "than int64 can count, so the strides cannot be computed; make the other sizes "
      "smaller",
      op, s, describe_count(nonzero, all_powers_of_two(s)));
}

int64_t checked_nbytes(const Shape& s, int64_t elements, DType t, const char* op) {
  int64_t bytes = 0;
  MT_CHECK(
      !__builtin_mul_overflow(elements, int64_t(dtype_size(t)), &bytes),
      "[{}] a {} tensor of sizes {} takes {} bytes, more than int64 can count; make the "
      "tensor smaller",
      op, t, s,
      describe_count(double(elements) * double(dtype_size(t)), (elements & (elements - 1)) == 0));
  return bytes;
}

}  // namespace detail

namespace {

void check_sizes(const Shape& shape, const char* op) { checked_numel(shape, op); }

MT_TLS bool t_fake_mode = false;

// Elements needed to hold every element reachable through (sizes, strides): the largest
// offset plus one, refused when past int64.
int64_t storage_extent(const Shape& sizes, const Shape& strides, const char* op) {
  for (size_t i = 0; i < sizes.size(); ++i)
    MT_CHECK(strides[i] >= 0,
             "[{}] negative stride {} in strides {} is not supported; use strides >= 0", op,
             strides[i], strides);
  for (int64_t s : sizes)
    if (s == 0) return 0;
  int64_t max_off = 0;
  bool overflow = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t step = 0;
    overflow = overflow || __builtin_mul_overflow(sizes[i] - 1, strides[i], &step) ||
               __builtin_add_overflow(max_off, step, &max_off);
  }
  overflow = overflow || __builtin_add_overflow(max_off, 1, &max_off);
  MT_CHECK(!overflow,
           "[{}] the sizes {} with strides {} reach past element 2^63 - 1, more than int64 can "
           "count; use smaller sizes or strides",
           op, sizes, strides);
  return max_off;
}

Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

namespace detail {
namespace {
MT_TLS FakeFactoryObserver* t_fake_observer = nullptr;
}
FakeFactoryObserver* set_fake_factory_observer(FakeFactoryObserver* observer) {
  return std::exchange(t_fake_observer, observer);
}
void notify_fake_made(const Tensor& t, const char* factory, std::optional<double> fill,
                      const Tensor* source) {
  if (t_fake_observer) [[unlikely]]
    t_fake_observer->made(t, factory, fill, source);
}
}  // namespace detail

FakeMode::FakeMode() : prev_(t_fake_mode) { t_fake_mode = true; }
FakeMode::~FakeMode() { t_fake_mode = prev_; }
bool FakeMode::enabled() { return t_fake_mode; }

Tensor fake_like(const Tensor& t) {
  Tensor f = detail::make_fake(t.sizes(), t.strides(), t.dtype(), t.device());
  detail::notify_fake_made(f, "fake_like");
  return f;
}

Tensor fake_empty(const Shape& shape, const TensorOptions& opts) {
  detail::checked_nbytes(shape, checked_numel(shape, "fake_empty"), opts.dtype, "fake_empty");
  Tensor f = detail::make_fake(shape, contiguous_strides(shape), opts.dtype, opts.device);
  detail::notify_fake_made(f, "fake_empty");
  return finish(f, opts);
}

namespace {
// A tensor over fresh storage of `elements` elements (fake under FakeMode); the callers
// have checked shape and strides, this checks the byte count.
Tensor allocate(const Shape& shape, const Shape& strides, int64_t elements,
                const TensorOptions& opts, const char* op) {
  int64_t nbytes = detail::checked_nbytes(shape, elements, opts.dtype, op);
  if (t_fake_mode) {
    Tensor f = detail::make_fake(shape, strides, opts.dtype, opts.device);
    detail::notify_fake_made(f, "empty");
    return finish(f, opts);
  }
  auto storage = detail::make_object<StorageImpl>(size_t(nbytes), allocator_for(opts.device));
  return finish(detail::make_tensor(std::move(storage), shape, strides, 0, opts.dtype, opts.device),
                opts);
}
}  // namespace

Tensor empty_strided(const Shape& shape, const Shape& strides, const TensorOptions& opts) {
  check_sizes(shape, "empty_strided");
  MT_CHECK(shape.size() == strides.size(),
           "[empty_strided] shape {} and strides {} have different lengths", shape, strides);
  // checks the strides, fake or not
  int64_t extent = storage_extent(shape, strides, "empty_strided");
  return allocate(shape, strides, extent, opts, "empty_strided");
}

Tensor empty(const Shape& shape, const TensorOptions& opts) {
  int64_t n = checked_numel(shape, "empty");
  return allocate(shape, contiguous_strides(shape), n, opts, "empty");
}

Tensor empty_like(const Tensor& t) {
  return empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
}

Tensor empty_like(const Tensor& t, const TensorOptions& opts) { return empty(t.sizes(), opts); }

Tensor full(const Shape& shape, double value, const TensorOptions& opts) {
  Tensor t = empty(shape, {.dtype = opts.dtype, .device = opts.device});
  if (!t.is_fake())
    detail::fill_impl(t, value);
  else
    detail::notify_fake_made(t, "full", value);
  return finish(t, opts);
}
Tensor zeros(const Shape& shape, const TensorOptions& opts) { return full(shape, 0, opts); }
Tensor ones(const Shape& shape, const TensorOptions& opts) { return full(shape, 1, opts); }
Tensor zeros_like(const Tensor& t) { return full_like(t, 0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.sizes(), value, {.dtype = t.dtype(), .device = t.device()});
}
Tensor scalar_tensor(double value, const TensorOptions& opts) { return full({}, value, opts); }

namespace {
// Fills a host buffer of `opts.dtype` from f(i) and moves it to the device.
template <typename F>
Tensor generate(const Shape& shape, const TensorOptions& opts, const char* op, F&& f) {
  detail::checked_nbytes(shape, checked_numel(shape, op), opts.dtype, op);
  if (t_fake_mode) {
    Tensor fake = fake_empty(shape, opts);
    detail::notify_fake_made(fake, op);  // values that a fake tensor cannot carry
    return fake;
  }
  Tensor host = empty(shape, {.dtype = opts.dtype});
  int64_t n = host.numel();
  visit_dtype(opts.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = n ? host.data_ptr<T>() : nullptr;
    for (int64_t i = 0; i < n; ++i) p[i] = T(f(i));
  });
  Tensor out = opts.device.is_cpu() ? host : detail::copy_as(host, opts.dtype, opts.device);
  return finish(out, opts);
}
}  // namespace

Tensor arange(double end, const TensorOptions& opts) { return arange(0, end, 1, opts); }

Tensor arange(double start, double end, double step, const TensorOptions& opts) {
  MT_CHECK(step != 0, "[arange] step must be non-zero");
  MT_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "[arange] start, end and step must be finite, got {}, {} and {}", start, end, step);
  double count = std::ceil((end - start) / step);
  MT_CHECK(count >= 0,
           "[arange] the range from {} to {} with step {} goes the wrong way; use a step of "
           "the other sign",
           start, end, step);
  // 2^63 is the first double past int64: converting it (or more) would be undefined
  MT_CHECK(count < 0x1p63,
           "[arange] the range from {} to {} with step {} has {} elements, more than int64 can "
           "count; use a larger step or a shorter range",
           start, end, step, describe_count(count));
  auto n = int64_t(count);
  return generate({n}, opts, "arange", [&](int64_t i) { return start + double(i) * step; });
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& opts) {
  MT_CHECK(steps >= 0, "[linspace] steps must be >= 0, got {}", steps);
  double step = steps > 1 ? (end - start) / double(steps - 1) : 0;
  return generate({steps}, opts, "linspace", [&](int64_t i) {
    // the second half counts back from `end` so the last value is exact, as PyTorch does
    return i < steps / 2 ? start + double(i) * step : end - double(steps - 1 - i) * step;
  });
}

// ---- random ------------------------------------------------------------------------

namespace {
std::mutex g_gen_mutex;
}  // namespace

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_gen_mutex);
  default_generator().manual_seed(seed);
}

// A draw made on the GPU by the kernel library's random kernel (the same values as the
// host's); undefined when the tensor is not a real CUDA tensor or there is no kernel.
static Tensor device_random(const Shape& shape, const TensorOptions& opts, uint64_t seed,
                            uint64_t base, bool normal) {
  if (!opts.device.is_cuda() || t_fake_mode) return Tensor();
  cuda::RandomKernel k = cuda::random_kernel();
  if (!k) return Tensor();
  check_sizes(shape, normal ? "randn" : "rand");
  Tensor out = empty(shape, {.dtype = opts.dtype, .device = opts.device});
  k(out, seed, base, normal);
  return finish(out, opts);
}

Tensor rand(const Shape& shape, const TensorOptions& opts, Generator* gen) {
  MT_CHECK(is_floating(opts.dtype), "[rand] needs a floating dtype, got {}", opts.dtype);
  Generator& g = gen ? *gen : default_generator();
  uint64_t seed, base;
  {
    std::lock_guard<std::mutex> lock(g_gen_mutex);
    seed = g.seed();
    base = g.advance(uint64_t(checked_numel(shape, "rand")));
  }
  if (Tensor t = device_random(shape, opts, seed, base, false); t.defined()) return t;
  // As many bits as the dtype holds, so the value stays below 1 (Note [The random stream]).
  const int bits = philox_uniform_bits(int(dtype_size(opts.dtype)), opts.dtype == DType::BFloat16);
  return generate(shape, opts, "rand", [&](int64_t i) {
    const Philox4x32 r = philox_block(seed, base + uint64_t(i));
    return philox_uniform(r.v[0], r.v[1], bits);
  });
}

Tensor randn(const Shape& shape, const TensorOptions& opts, Generator* gen) {
  MT_CHECK(is_floating(opts.dtype), "[randn] needs a floating dtype, got {}", opts.dtype);
  Generator& g = gen ? *gen : default_generator();
  uint64_t seed, base;
  {
    std::lock_guard<std::mutex> lock(g_gen_mutex);
    seed = g.seed();
    base = g.advance(uint64_t(checked_numel(shape, "randn")));
  }
  if (Tensor t = device_random(shape, opts, seed, base, true); t.defined()) return t;
  return generate(shape, opts, "randn", [&](int64_t i) {
    // Box-Muller on the two 64-bit halves of one block (kernels/cuda_device/random.cu does the
    // same)
    const Philox4x32 r = philox_block(seed, base + uint64_t(i));
    const double u1 = philox_uniform01(r.v[0], r.v[1]), u2 = philox_uniform01(r.v[2], r.v[3]);
    return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
  });
}

// ---- host values -------------------------------------------------------------------

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& opts) {
  check_sizes(shape, "from_vector");
  MT_CHECK(int64_t(values.size()) == shape_numel(shape),
           "[from_vector] {} values cannot fill shape {} ({} elements)", values.size(), shape,
           shape_numel(shape));
  Tensor host = empty(shape, {.dtype = dtype_v<T>});
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  Tensor out = host;
  if (opts.dtype != dtype_v<T>) out = detail::copy_as(out, opts.dtype, kCPU);
  if (!opts.device.is_cpu()) out = detail::copy_as(out, opts.dtype, opts.device);
  return finish(out, opts);
}

template Tensor from_vector(const std::vector<float>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<double>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<Half>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, const TensorOptions&);

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter,
                 Device device) {
  return from_blob(data, shape, contiguous_strides(shape), dtype, std::move(deleter), device);
}

Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                 std::function<void(void*)> deleter, Device device) {
  check_sizes(shape, "from_blob");
  MT_CHECK(shape.size() == strides.size(),
           "[from_blob] shape {} and strides {} have different lengths", shape, strides);
  MT_CHECK(data != nullptr || shape_numel(shape) == 0,
           "[from_blob] data is null but shape {} has elements", shape);
  int64_t extent = storage_extent(shape, strides, "from_blob");
  int64_t nbytes = detail::checked_nbytes(shape, extent, dtype, "from_blob");
  auto storage = std::make_shared<StorageImpl>(data, size_t(nbytes), device, std::move(deleter));
  return detail::make_tensor(std::move(storage), shape, strides, 0, dtype, device);
}

// ---- comparisons -------------------------------------------------------------------

namespace detail {
std::vector<double> to_double_vector(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace detail

double max_abs_diff(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.sizes() == b.sizes(), "[max_abs_diff] shapes differ: {} vs {}", a.sizes(), b.sizes());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (equal_nan && std::isnan(x[i]) && std::isnan(y[i])) continue;
      return false;
    }
    if (x[i] == y[i]) continue;  // equal infinities
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace mt
