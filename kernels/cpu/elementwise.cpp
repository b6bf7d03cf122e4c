// SPDX-License-Identifier: MIT
// Elementwise CPU kernels: the rows of kernels/elementwise_table.h (unary math, add/sub/
// mul/div and their scalar forms, the mse_loss square), pow and where. Each is one plain
// loop (Note [Elementwise loops]).
#include <cmath>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/math.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/elementwise_rows.h"

namespace mt::cpu {
namespace {

// The float32 loop of a kIsaClones row without one of its own, compiled per ISA.
template <typename F>
MT_ISA_CLONES void isa_f32_loop(float* o, const float* x, int64_t n) {
  MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = F{}(x[i]);
}

// The float32 loop of a kIsaClones row: exp, sigmoid, silu and gelu have their own, AVX-512 where
// the CPU has it (kernels/cpu/vec_exp.h); another row gets its ISA clones.
template <typename F>
void f32_row_loop(ew::Fn fn, float* o, const float* x, int64_t n) {
  switch (fn) {
    case ew::Fn::Exp:
      return exp_f32_loop(o, x, n);
    case ew::Fn::Sigmoid:
      return sigmoid_f32_loop(o, x, n);
    case ew::Fn::Silu:
      return silu_f32_loop(o, x, n);
    case ew::Fn::Gelu:
      return gelu_f32_loop(o, x, n);
    default:
      return isa_f32_loop<F>(o, x, n);
  }
}

// Calls body.operator()<arity, flags>(cpu functor) with row fn's entries as constants.
template <typename Body>
void visit_row(ew::Fn fn, Body&& body) {
  using namespace ew;  // the rows' flags
  switch (fn) {
#define MT_EW_CASE(Id, name, arity, flags, fwd, bwd, ...) \
  case ew::Fn::Id:                                        \
    return body.template operator()<ew::Arity::arity, flags>(__VA_ARGS__);
    MT_ELEMENTWISE_OPS(MT_EW_CASE)
#undef MT_EW_CASE
  }
  MT_ASSERT(false, "unknown elementwise row {}", int(fn));
}

// out = f(x), f(x, s) or f(x, y, s) over the loop's operands, with row fn's CPU functor
// in the compute type of out's dtype (the caller has checked that the row takes it).
void run_row(ew::Fn fn, const Loop& it, DType t, double scalar) {
  visit_row(fn, [&]<ew::Arity A, unsigned kFlags>(auto f) {
    using F = decltype(f);
    if constexpr (std::is_same_v<F, std::nullptr_t>) {
      MT_ASSERT(false, "[{}] has no CPU functor in the elementwise table", ew::row(fn).name);
    } else {
      visit_compute(t, [&](auto tag) {
        using C = decltype(tag);
        if constexpr (!std::is_floating_point_v<C> && !(kFlags & ew::kInt)) {
          MT_ASSERT(false, "[{}] has no integer form", ew::row(fn).name);
        } else if constexpr (A == ew::Arity::Unary && (kFlags & ew::kIsaClones) &&
                             std::is_same_v<C, float>) {
          for_each_block<float>(it, [fn](float* o, const float* const* in, int64_t n) {
            f32_row_loop<F>(fn, o, in[0], n);
          });
        } else {
          [[maybe_unused]] const C s = C(scalar);
          for_each_block<C>(it, [&](C* o, const C* const* in, int64_t n) {
            const C* x = in[0];
            if constexpr (A == ew::Arity::Binary) {
              const C* y = in[1];
              MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = C(f(x[i], y[i], s));
            } else if constexpr (A == ew::Arity::Scalar) {
              MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = C(f(x[i], s));
            } else {
              MT_SIMD for (int64_t i = 0; i < n; ++i) o[i] = C(f(x[i]));
            }
          });
        }
      });
    }
  });
}

const ew::Row& checked_row(ew::Fn fn, ew::Arity arity) {
  const ew::Row& r = ew::row(fn);
  MT_ASSERT(r.arity == arity && r.f64 != nullptr, "[{}] is not a CPU row of arity {}", r.name,
            int(arity));
  return r;
}

void check_floating_out(std::string_view op, const Tensor& out) {
  MT_CHECK(is_floating(out.dtype()),
           "[{}] needs a floating output, got {}; integer and bool inputs promote to "
           "float32 (pass a float32 out)",
           op, out.dtype());
}

void check_integral_scalar(std::string_view op, const Tensor& out, double v, const char* what) {
  MT_CHECK(is_floating(out.dtype()) || v == std::trunc(v),
           "[{}] {} must be an integer when the output is {}, got {}; pass a floating out", op,
           what, out.dtype(), v);
}

void check_bool_sub(ew::Fn fn, const Tensor& out) {
  MT_CHECK(!((fn == ew::Fn::Sub || fn == ew::Fn::SubS) && out.dtype() == DType::Bool),
           "[sub] subtraction of bool tensors is not supported; use logical_xor, or cast to "
           "int64 first");
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const ew::Row& r = checked_row(op, ew::Arity::Unary);
  if (!r.int_ok()) check_floating_out(r.name, out);
  MT_CHECK(!(op == UnaryOp::Neg && out.dtype() == DType::Bool),
           "[neg] negation of a bool tensor is not supported; use logical_not");
  run_row(op, make_loop(r.name.data(), out, {x}), out.dtype(), 0);
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
    }
    run_row(ew::Fn::Pow, it, out.dtype(), e);  // the row's functor: libm, int64 by squaring
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  const ew::Row& r = checked_row(op, ew::Arity::Binary);
  if (!r.int_ok()) check_floating_out(r.name, out);
  check_bool_sub(op, out);
  if (op == BinaryOp::Add || op == BinaryOp::Sub)
    check_integral_scalar(r.name, out, alpha, "alpha");
  run_row(op, make_loop(r.name.data(), out, {a, b}), out.dtype(), alpha);
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) {
  const ew::Fn fn = ew::scalar_form(op);
  const ew::Row& r = checked_row(fn, ew::Arity::Scalar);
  if (!r.int_ok()) check_floating_out(r.name, out);
  check_bool_sub(fn, out);
  check_integral_scalar(r.name, out, s, "the scalar");
  run_row(fn, make_loop(r.name.data(), out, {a}), out.dtype(), s);
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

void squared_diff(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary(BinaryOp::SquaredDiff, a, b, out);
}

}  // namespace mt::cpu
