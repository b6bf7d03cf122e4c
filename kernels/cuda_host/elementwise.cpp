// SPDX-License-Identifier: MIT
// The elementwise ops on the GPU: the row's functor of kernels/cuda_device/elementwise.cu
// (kernels/elementwise_table.h), the contiguous or strided template, inputs converted to
// out's dtype, one launch.
#include <array>
#include <cmath>
#include <span>
#include <vector>

#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/cuda_host/launch.h"
#include "kernels/cuda_host/names.h"
#include "kernels/jit/builtin.h"

namespace mt::gpu {
namespace {

using detail::span_of;

jit::KernelTable<ew::kNumFns * kNumDTypes * 2> g_elementwise_kernels;
jit::KernelTable<ew::kNumFns * kNumDTypes> g_foreach_kernels;
jit::KernelTable<ew::kNumFns * kNumDTypes * 9> g_bcast_kernels;  // x 3 input codes of x, of y
static_assert(sizeof(ForeachTable) + sizeof(double) * 2 <= 4096,
              "a foreach launch's parameters must fit CUDA's 4 KiB limit");

struct Scalars {
  double a = 0, b = 0;  // mt::OpScalars in elementwise.cu
};

// out = f(inputs...) with every operand of out's dtype; a, b: the functor's scalars.
void launch(ew::Fn fn, const Tensor& out, std::initializer_list<Tensor> inputs, Scalars s) {
  const int arity = ew::row(fn).tensor_operands();
  const int64_t n = out.numel();
  if (n == 0) return;
  const DType t = out.dtype();
  const int dev = out.device().index;
  const Tensor* in = inputs.begin();
  bool contiguous = out.is_contiguous();
  for (const Tensor& x : inputs)
    contiguous = contiguous && x.is_contiguous() && x.sizes() == out.sizes();
  long long count = n;
  void* po = out.data_ptr();
  const void* p1 = in[0].data_ptr();
  const void* p2 = arity == 2 ? in[1].data_ptr() : nullptr;
  const int slot = (int(fn) * kNumDTypes + int(t)) * 2 + !contiguous;
  const jit::Kernel& k = g_elementwise_kernels.get(
      dev, slot, "elementwise.cu", [&] { return ew_name_expression(fn, t, !contiguous); });
  jit::LaunchShape shape;
  if (contiguous) {
    int vec = jit::aligned16({po, p1, p2 ? p2 : po});
    const int64_t pack = 16 / int64_t(dtype_size(t));
    shape = jit::elementwise_launch_shape(vec ? (n + pack - 1) / pack : n, jit::sm_count(dev));
    if (arity == 1) {
      void* args[] = {&po, &p1, &count, &s, &vec};
      k.launch(shape.grid, shape.block, 0, detail::stream_of(out), args);
    } else {
      void* args[] = {&po, &p1, &p2, &count, &s, &vec};
      k.launch(shape.grid, shape.block, 0, detail::stream_of(out), args);
    }
    return;
  }
  shape = jit::elementwise_launch_shape(n, jit::sm_count(dev));
  const auto so = span_of(out.strides());
  const auto s1 = detail::broadcast_strides(in[0], out.sizes());
  if (arity == 1) {
    StridedLayout l = jit::make_strided_layout(span_of(out.sizes()), {so, s1});
    void* args[] = {&po, &p1, &count, &s, &l};
    k.launch(shape.grid, shape.block, 0, detail::stream_of(out), args);
  } else {
    const auto s2 = detail::broadcast_strides(in[1], out.sizes());
    StridedLayout l = jit::make_strided_layout(span_of(out.sizes()), {so, s1, s2});
    void* args[] = {&po, &p1, &p2, &count, &s, &l};
    k.launch(shape.grid, shape.block, 0, detail::stream_of(out), args);
  }
}

// The input dtypes binary_op_bcast reads besides out's own (Note [Broadcast binary kernel] in
// elementwise.cu): 0 = out's dtype; 1, 2 = float16, bfloat16 into a float32 out (autocast's
// 16-bit results meeting float32 operands). -1: none of these.
int bcast_code(DType in, DType out) {
  if (in == out) return 0;
  if (out != DType::Float32) return -1;
  return in == DType::Float16 ? 1 : in == DType::BFloat16 ? 2 : -1;
}

// The period of x read as a broadcast into a contiguous out of n elements: n (same sizes,
// contiguous), 1 (one element), the product of out's trailing dims x fills (x contiguous,
// its sizes those dims after leading ones); -1 when none holds.
int64_t bcast_period(const Tensor& x, const Tensor& out) {
  const int64_t n = out.numel();
  if (x.numel() == 1) return 1;
  if (!x.is_contiguous()) return -1;
  if (x.sizes() == out.sizes()) return n;
  const auto xs = x.sizes(), os = out.sizes();
  const size_t xd = xs.size(), od = os.size();
  size_t first = 0;  // x's leading size-1 dims are the broadcast's too
  while (first < xd && xs[first] == 1) ++first;
  if (xd - first > od) return -1;
  int64_t m = 1;
  for (size_t d = first; d < xd; ++d) {
    if (xs[d] != os[od - (xd - d)]) return -1;
    m *= xs[d];
  }
  return m;
}

// A binary row through binary_op_bcast when out is contiguous and each input is one of its
// broadcasts above, in out's dtype or a 16-bit float into float32; false: the general path.
bool try_bcast(ew::Fn fn, const Tensor& out, const Tensor& x, const Tensor& y, Scalars s) {
  const DType t = out.dtype();
  if (!is_floating(t) || !out.is_contiguous() || out.numel() == 0) return false;
  const int cx = bcast_code(x.dtype(), t), cy = bcast_code(y.dtype(), t);
  if (cx < 0 || cy < 0) return false;
  long long n = out.numel(), mx = bcast_period(x, out), my = bcast_period(y, out);
  if (mx < 0 || my < 0 || (mx == n && my == n && cx == 0 && cy == 0)) return false;
  const int dev = out.device().index;
  const int slot = (int(fn) * kNumDTypes + int(t)) * 9 + cx * 3 + cy;
  const jit::Kernel& k = g_bcast_kernels.get(dev, slot, "elementwise.cu", [&] {
    return ew_bcast_name_expression(fn, t, x.dtype(), y.dtype());
  });
  void* po = out.data_ptr();
  const void* px = x.data_ptr();
  const void* py = y.data_ptr();
  // Packs of 16 bytes of out: K elements; an input of period n is read K of its own at once.
  const int64_t pack = 16 / int64_t(dtype_size(t));
  auto aligned = [&](const void* p, DType d) {
    return reinterpret_cast<uintptr_t>(p) % uintptr_t(pack * int64_t(dtype_size(d))) == 0;
  };
  int vec =
      aligned(po, t) && (mx != n || aligned(px, x.dtype())) && (my != n || aligned(py, y.dtype()));
  const jit::LaunchShape shape =
      jit::elementwise_launch_shape(vec ? (n + pack - 1) / pack : n, jit::sm_count(dev));
  void* args[] = {&po, &px, &py, &n, &s, &mx, &my, &vec};
  k.launch(shape.grid, shape.block, 0, detail::stream_of(out), args);
  return true;
}

// Runs row fn into out with every input converted to out's dtype. bool outputs compute in
// int64 and are stored as value != 0 (as the CPU kernels do); the kernels have no bool.
void run(ew::Fn fn, const Tensor& out, std::initializer_list<Tensor> inputs, Scalars s = {}) {
  const ew::Row& r = ew::row(fn);
  MT_ASSERT(int(inputs.size()) == r.tensor_operands(), "[{}] takes {} tensors", r.name,
            r.tensor_operands());
  MT_CHECK(r.has_device_functor(),
           "[{}] has its own CUDA kernels (kernels/ops/{}.cpp), not the elementwise template",
           r.name, r.name);
  detail::check_cuda(out, r.name.data());
  for (const Tensor& x : inputs) {
    MT_CHECK(x.device() == out.device(),
             "[{}] the inputs are on different devices ({} and {}); move one with .to()", r.name,
             x.device(), out.device());
  }
  DType t = out.dtype();
  const bool via_int64 = t == DType::Bool;
  if (via_int64) t = DType::Int64;
  MT_CHECK(is_floating(t) || r.int_ok(),
           "[{}] the CUDA kernel needs a floating output, got {}; integer and bool inputs "
           "promote to float32 (pass a float32 out)",
           r.name, out.dtype());
  if (r.tensor_operands() == 2 && !via_int64) {
    const Tensor* in = inputs.begin();
    if (try_bcast(fn, out, in[0], in[1], s)) return;
  }
  std::array<Tensor, 2> conv;
  size_t i = 0;
  for (const Tensor& x : inputs) conv[i++] = detail::converted(x, t);
  const Tensor dst = via_int64 ? empty(out.sizes(), {.dtype = t, .device = out.device()}) : out;
  if (r.tensor_operands() == 1)
    launch(fn, dst, {conv[0]}, s);
  else
    launch(fn, dst, {conv[0], conv[1]}, s);
  if (via_int64) mt::detail::copy_impl(out, dst);
}

// The multi-tensor launches of pairs idx (contiguous, of dtype t, on one device).
void foreach_launch(ew::Fn fn, DType t, std::span<const Tensor> self, std::span<const Tensor> other,
                    std::span<const size_t> idx, Scalars s) {
  if (idx.empty()) return;
  const int dev = self[idx[0]].device().index;
  const jit::Kernel& k = g_foreach_kernels.get(dev, int(fn) * kNumDTypes + int(t), "elementwise.cu",
                                               [&] { return foreach_name_expression(fn, t); });
  CUstream_st* stream = detail::stream_of(self[idx[0]]);
  std::vector<void*> ps(idx.size());
  std::vector<const void*> po(idx.size());
  std::vector<int64_t> n(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    ps[j] = self[idx[j]].data_ptr();
    po[j] = other[idx[j]].data_ptr();
    n[j] = self[idx[j]].numel();
  }
  jit::foreach_tables(ps, po, n, [&](ForeachTable& table, int blocks) {
    void* args[] = {&table, &s};
    k.launch(jit::Dim3(unsigned(blocks)), jit::Dim3(256), 0, stream, args);
  });
}

void check_integral(std::string_view op, const Tensor& out, double v, const char* what) {
  MT_CHECK(is_floating(out.dtype()) || v == std::trunc(v),
           "[{}] {} must be an integer when the output is {}, got {}; pass a floating out", op,
           what, out.dtype(), v);
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  MT_ASSERT(ew::row(op).arity == ew::Arity::Unary, "[{}] is not a unary row", ew::row(op).name);
  MT_CHECK(!(op == UnaryOp::Neg && out.dtype() == DType::Bool),
           "[neg] negation of a bool tensor is not supported; use logical_not");
  run(op, out, {x});
}

void pow_scalar(const Tensor& x, double exponent, const Tensor& out) {
  check_integral("pow", out, exponent, "the exponent");
  MT_CHECK(is_floating(out.dtype()) || exponent >= 0,
           "[pow] an integer tensor to a negative power is not an integer; pass a floating "
           "out");
  run(ew::Fn::Pow, out, {x}, {exponent, 0});
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  const ew::Row& r = ew::row(op);
  MT_ASSERT(r.arity == ew::Arity::Binary, "[{}] is not a binary row", r.name);
  if (op == BinaryOp::Add || op == BinaryOp::Sub) check_integral(r.name, out, alpha, "alpha");
  run(op, out, {a, b}, {alpha, 0});
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) {
  const ew::Fn fn = ew::scalar_form(op);
  const ew::Row& r = ew::row(fn);
  MT_ASSERT(r.arity == ew::Arity::Scalar, "[{}] has no scalar row", r.name);
  if (r.int_ok()) check_integral(r.name, out, s, "the scalar");
  run(fn, out, {a}, {s, 0});
}

void foreach_binary_(BinaryOp op, std::span<const Tensor> self, std::span<const Tensor> other,
                     double alpha) {
  const ew::Row& r = ew::row(op);
  MT_ASSERT(r.arity == ew::Arity::Binary && self.size() == other.size(), "[foreach] {} takes pairs",
            r.name);
  // Pairs that the fused kernel takes, grouped by dtype; the others (strided, bool) go
  // through the elementwise kernel one pair at a time, as PyTorch's slow path does.
  std::vector<size_t> fused[kNumDTypes];
  std::vector<Tensor> converted(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    detail::check_cuda(self[i], "foreach_add_");
    detail::check_cuda(other[i], "foreach_add_");
    const DType t = self[i].dtype();
    if (t == DType::Bool || !self[i].is_contiguous() || !other[i].is_contiguous()) {
      binary(op, self[i], other[i], self[i], alpha);
      continue;
    }
    converted[i] = detail::converted(other[i], t);
    fused[int(t)].push_back(i);
  }
  if (op == BinaryOp::Add || op == BinaryOp::Sub) {
    for (int t = 0; t < kNumDTypes; ++t)
      if (!fused[t].empty()) check_integral(r.name, self[fused[t][0]], alpha, "alpha");
  }
  for (int t = 0; t < kNumDTypes; ++t)
    foreach_launch(op, DType(t), self, converted, fused[t], {alpha, 0});
}

}  // namespace mt::gpu
