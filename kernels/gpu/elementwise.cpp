// The elementwise ops on the GPU: picks the functor of kernels/cuda/elementwise.cu, the
// contiguous or strided template, converts inputs to out's dtype, and launches.
#include <array>
#include <cmath>

#include "kernels/gpu/gpu_kernels.h"
#include "kernels/gpu/launch.h"
#include "kernels/gpu/names.h"
#include "kernels/jit/builtin.h"

namespace mt::gpu {
namespace {

using detail::span_of;

jit::KernelTable<kNumEwFns * kNumDTypes * 2> g_kernels;

struct Scalars {
  double a = 0, b = 0;  // mt::OpScalars in elementwise.cu
};

// out = f(inputs...) with every operand of out's dtype; a, b: the functor's scalars.
void launch(EwFn fn, const Tensor& out, std::initializer_list<Tensor> inputs, Scalars s) {
  const EwFnInfo& info = ew_fn_info(fn);
  const int64_t n = out.numel();
  if (n == 0) return;
  const DType t = out.dtype();
  const int dev = out.device().index;
  const Tensor* in = inputs.begin();
  bool contiguous = out.is_contiguous();
  for (const Tensor& x : inputs) contiguous = contiguous && x.is_contiguous() && x.sizes() == out.sizes();
  long long count = n;
  void* po = out.data_ptr();
  const void* p1 = in[0].data_ptr();
  const void* p2 = info.arity == 2 ? in[1].data_ptr() : nullptr;
  const int slot = (int(fn) * kNumDTypes + int(t)) * 2 + !contiguous;
  const jit::Kernel& k = g_kernels.get(dev, slot, "elementwise.cu",
                                       [&] { return ew_name_expression(fn, t, !contiguous); });
  jit::LaunchShape shape;
  if (contiguous) {
    int vec = jit::aligned16({po, p1, p2 ? p2 : po});
    const int64_t pack = 16 / int64_t(dtype_size(t));
    shape = jit::elementwise_launch_shape(vec ? (n + pack - 1) / pack : n, jit::sm_count(dev));
    if (info.arity == 1) {
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
  if (info.arity == 1) {
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

// Runs fn into out with every input converted to out's dtype. bool outputs compute in
// int64 and are stored as value != 0 (as the CPU kernels do); the kernels have no bool.
void run(EwFn fn, const char* op, const Tensor& out, std::initializer_list<Tensor> inputs,
         Scalars s = {}) {
  detail::check_cuda(out, op);
  for (const Tensor& x : inputs) {
    MT_CHECK(x.device() == out.device(),
             "[{}] the inputs are on different devices ({} and {}); move one with .to()", op,
             x.device(), out.device());
  }
  const EwFnInfo& info = ew_fn_info(fn);
  DType t = out.dtype();
  const bool via_int64 = t == DType::Bool;
  if (via_int64) t = DType::Int64;
  MT_CHECK(is_floating(t) || info.int_ok,
           "[{}] the CUDA kernel needs a floating output, got {}; integer and bool inputs "
           "promote to float32 (pass a float32 out)",
           op, out.dtype());
  std::array<Tensor, 2> conv;
  size_t i = 0;
  for (const Tensor& x : inputs) conv[i++] = detail::converted(x, t);
  const Tensor dst = via_int64 ? empty(out.sizes(), {.dtype = t, .device = out.device()}) : out;
  if (info.arity == 1)
    launch(fn, dst, {conv[0]}, s);
  else
    launch(fn, dst, {conv[0], conv[1]}, s);
  if (via_int64) mt::detail::copy_impl(out, dst);
}

EwFn unary_fn(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return EwFn::Neg;
    case UnaryOp::Exp: return EwFn::Exp;
    case UnaryOp::Log: return EwFn::Log;
    case UnaryOp::Sqrt: return EwFn::Sqrt;
    case UnaryOp::Abs: return EwFn::Abs;
    case UnaryOp::Sigmoid: return EwFn::Sigmoid;
    case UnaryOp::Tanh: return EwFn::Tanh;
    case UnaryOp::Relu: return EwFn::Relu;
    case UnaryOp::Silu: break;
  }
  MT_ERROR("[silu] has its own kernels (kernels/gpu/silu.cpp), not the unary template");
}

void check_integral(const char* op, const Tensor& out, double v, const char* what) {
  MT_CHECK(is_floating(out.dtype()) || v == std::trunc(v),
           "[{}] {} must be an integer when the output is {}, got {}; pass a floating out", op,
           what, out.dtype(), v);
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const EwFn fn = unary_fn(op);
  MT_CHECK(!(op == UnaryOp::Neg && out.dtype() == DType::Bool),
           "[neg] negation of a bool tensor is not supported; use logical_not");
  run(fn, ew_fn_info(fn).name, out, {x});
}

void sign(const Tensor& x, const Tensor& out) { run(EwFn::Sign, "sign", out, {x}); }

void pow_scalar(const Tensor& x, double exponent, const Tensor& out) {
  check_integral("pow", out, exponent, "the exponent");
  MT_CHECK(is_floating(out.dtype()) || exponent >= 0,
           "[pow] an integer tensor to a negative power is not an integer; pass a floating "
           "out");
  run(EwFn::Pow, "pow", out, {x}, {exponent, 0});
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  switch (op) {
    case BinaryOp::Add:
      check_integral("add", out, alpha, "alpha");
      return run(EwFn::Add, "add", out, {a, b}, {alpha, 0});
    case BinaryOp::Sub:
      check_integral("sub", out, alpha, "alpha");
      return run(EwFn::Sub, "sub", out, {a, b}, {alpha, 0});
    case BinaryOp::Mul: return run(EwFn::Mul, "mul", out, {a, b});
    case BinaryOp::Div: return run(EwFn::Div, "div", out, {a, b});
  }
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) {
  switch (op) {
    case BinaryOp::Add:
      check_integral("add", out, s, "the scalar");
      return run(EwFn::AddS, "add", out, {a}, {s, 0});
    case BinaryOp::Sub:
      check_integral("sub", out, s, "the scalar");
      return run(EwFn::SubS, "sub", out, {a}, {s, 0});
    case BinaryOp::Mul:
      check_integral("mul", out, s, "the scalar");
      return run(EwFn::MulS, "mul", out, {a}, {s, 0});
    case BinaryOp::Div: return run(EwFn::DivS, "div", out, {a}, {s, 0});
  }
}

void squared_diff(const Tensor& a, const Tensor& b, const Tensor& out) {
  run(EwFn::SquaredDiff, "mse_loss", out, {a, b});
}

}  // namespace mt::gpu
