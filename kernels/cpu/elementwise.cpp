// Elementwise CPU kernels: unary math, pow, add/sub/mul/div, where, the fused SiLU
// backward and the mse_loss pieces. Each is one plain loop (Note [Elementwise loops]).
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/math.h"

namespace mt::cpu {
namespace {

MT_ISA_CLONES void exp_f32_loop(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = exp_f32(x[i]);
}
MT_ISA_CLONES void sigmoid_f32_loop(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = sigmoid_of(x[i]);
}
MT_ISA_CLONES void silu_f32_loop(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = silu_of(x[i]);
}

// exp_f32_sat: a NaN x makes s a number, but x * (1 - s) is NaN.
template <typename C>
[[gnu::always_inline]] inline void silu_backward_loop(C* o, const C* g, const C* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) {
    C s = C(1) / (C(1) + exp_f32_sat(-x[i]));
    o[i] = g[i] * s * (C(1) + x[i] * (C(1) - s));
  }
}
MT_ISA_CLONES void silu_backward_f32_loop(float* o, const float* g, const float* x, int64_t n) {
  silu_backward_loop<float>(o, g, x, n);
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return "neg";
    case UnaryOp::Exp:
      return "exp";
    case UnaryOp::Log:
      return "log";
    case UnaryOp::Sqrt:
      return "sqrt";
    case UnaryOp::Abs:
      return "abs";
    case UnaryOp::Sigmoid:
      return "sigmoid";
    case UnaryOp::Tanh:
      return "tanh";
    case UnaryOp::Relu:
      return "relu";
    case UnaryOp::Silu:
      return "silu";
  }
  return "unary";
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
  }
  return "binary";
}

void check_floating_out(const char* op, const Tensor& out) {
  MT_CHECK(is_floating(out.dtype()),
           "[{}] needs a floating output, got {}; integer and bool inputs promote to "
           "float32 (pass a float32 out)",
           op, out.dtype());
}

void check_integral_scalar(const char* op, const Tensor& out, double v, const char* what) {
  MT_CHECK(is_floating(out.dtype()) || v == std::trunc(v),
           "[{}] {} must be an integer when the output is {}, got {}; pass a floating out", op,
           what, out.dtype(), v);
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const char* name = unary_name(op);
  const bool int_ok = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu;
  if (!int_ok) check_floating_out(name, out);
  MT_CHECK(!(op == UnaryOp::Neg && out.dtype() == DType::Bool),
           "[neg] negation of a bool tensor is not supported; use logical_not");
  Loop it = make_loop(name, out, {x});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    auto run = [&](auto f) {  // f: C -> C, applied in one vectorizable loop
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        const C* a = in[0];
        MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
      });
    };
    switch (op) {
      case UnaryOp::Neg:
        return run([](C v) { return C(-v); });
      case UnaryOp::Abs:
        return run([](C v) { return C(std::abs(v)); });
      case UnaryOp::Relu:
        return run([](C v) { return v < 0 ? C(0) : v; });  // keeps NaN
      default:
        break;
    }
    if constexpr (std::is_same_v<C, float>) {
      auto run_f32 = [&](void (*loop)(float*, const float*, int64_t)) {
        for_each_block<float>(
            it, [&](float* o, const float* const* in, int64_t n) { loop(o, in[0], n); });
      };
      switch (op) {
        case UnaryOp::Exp:
          return run_f32(exp_f32_loop);
        case UnaryOp::Sigmoid:
          return run_f32(sigmoid_f32_loop);
        case UnaryOp::Silu:
          return run_f32(silu_f32_loop);
        default:
          break;
      }
    }
    if constexpr (std::is_floating_point_v<C>) {
      switch (op) {
        case UnaryOp::Exp:
          return run([](C v) { return exp_f32(v); });
        case UnaryOp::Log:
          return run([](C v) { return std::log(v); });
        case UnaryOp::Sqrt:
          return run([](C v) { return std::sqrt(v); });
        case UnaryOp::Sigmoid:
          return run([](C v) { return sigmoid_of(v); });
        case UnaryOp::Tanh:
          return run([](C v) { return std::tanh(v); });  // libm: accurate near 0
        case UnaryOp::Silu:
          return run([](C v) { return silu_of(v); });
        default:
          break;
      }
    }
  });
}

void pow_scalar(const Tensor& x, double e, const Tensor& out) {
  const bool integral_out = !is_floating(out.dtype());
  MT_CHECK(!integral_out || (e >= 0 && e == std::trunc(e)),
           "[pow] an integer tensor can only be raised to a non-negative integer power, got {}; "
           "use a floating input",
           e);
  MT_CHECK(out.dtype() != DType::Bool, "[pow] a bool output is not supported; use int64");
  Loop it = make_loop("pow", out, {x});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    auto run = [&](auto f) {
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        const C* a = in[0];
        MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
      });
    };
    if (e == 0) return run([](C) { return C(1); });
    if (e == 1) return run([](C v) { return v; });
    if (e == 2) return run([](C v) { return C(v * v); });
    if (e == 3) return run([](C v) { return C(v * v * v); });
    if constexpr (std::is_floating_point_v<C>) {
      if (e == 0.5) return run([](C v) { return std::sqrt(v); });
      if (e == -1) return run([](C v) { return C(1) / v; });
      if (e == -2) return run([](C v) { return C(1) / (v * v); });
      const C ce = C(e);
      return run([ce](C v) { return std::pow(v, ce); });
    } else {
      const uint64_t ue = uint64_t(e);
      return run([ue](C v) {
        C r = 1, b = v;  // by squaring; wraps like PyTorch's int64 pow on overflow
        for (uint64_t k = ue; k; k >>= 1) {
          if (k & 1) r = C(uint64_t(r) * uint64_t(b));
          b = C(uint64_t(b) * uint64_t(b));
        }
        return r;
      });
    }
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  const char* name = binary_name(op);
  if (op == BinaryOp::Div) check_floating_out(name, out);
  MT_CHECK(!(op == BinaryOp::Sub && out.dtype() == DType::Bool),
           "[sub] subtraction of bool tensors is not supported; use logical_xor, or cast to "
           "int64 first");
  if (op == BinaryOp::Add || op == BinaryOp::Sub) check_integral_scalar(name, out, alpha, "alpha");
  Loop it = make_loop(name, out, {a, b});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    auto run = [&](auto f) {  // f: (C, C) -> C
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        const C* x = in[0];
        const C* y = in[1];
        MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
      });
    };
    const C al = C(alpha);
    switch (op) {
      case BinaryOp::Add:
        if (alpha == 1) return run([](C x, C y) { return C(x + y); });
        return run([al](C x, C y) { return C(x + al * y); });
      case BinaryOp::Sub:
        if (alpha == 1) return run([](C x, C y) { return C(x - y); });
        return run([al](C x, C y) { return C(x - al * y); });
      case BinaryOp::Mul:
        return run([](C x, C y) { return C(x * y); });
      case BinaryOp::Div:
        if constexpr (std::is_floating_point_v<C>) return run([](C x, C y) { return x / y; });
        return;
    }
  });
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) {
  const char* name = binary_name(op);
  if (op == BinaryOp::Div) check_floating_out(name, out);
  MT_CHECK(!(op == BinaryOp::Sub && out.dtype() == DType::Bool),
           "[sub] subtraction of bool tensors is not supported; use logical_xor, or cast to "
           "int64 first");
  check_integral_scalar(name, out, s, "the scalar");
  Loop it = make_loop(name, out, {a});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    auto run = [&](auto f) {
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        const C* x = in[0];
        MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
      });
    };
    const C c = C(s);
    switch (op) {
      case BinaryOp::Add:
        return run([c](C x) { return C(x + c); });
      case BinaryOp::Sub:
        return run([c](C x) { return C(x - c); });
      case BinaryOp::Mul:
        return run([c](C x) { return C(x * c); });
      case BinaryOp::Div:
        if constexpr (std::is_floating_point_v<C>) return run([c](C x) { return x / c; });
        return;
    }
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  Loop it = make_loop("where", out, {cond, a, b});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
      const C *c = in[0], *x = in[1], *y = in[2];
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] != C(0) ? x[i] : y[i];
    });
  });
}

void silu_backward(const Tensor& grad, const Tensor& x, const Tensor& out) {
  check_floating_out("silu_backward", out);
  Loop it = make_loop("silu_backward", out, {grad, x});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_same_v<C, float>) {
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        silu_backward_f32_loop(o, in[0], in[1], n);
      });
    } else if constexpr (std::is_floating_point_v<C>) {
      for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
        silu_backward_loop<C>(o, in[0], in[1], n);
      });
    }
  });
}

void squared_diff(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_floating_out("mse_loss", out);
  Loop it = make_loop("mse_loss", out, {a, b});
  visit_compute(out.dtype(), [&](auto tag) {
    using C = decltype(tag);
    for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
      const C *x = in[0], *y = in[1];
      MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = (x[i] - y[i]) * (x[i] - y[i]);
    });
  });
}

}  // namespace mt::cpu
