// SPDX-License-Identifier: MIT
// The elementwise ops, one row each in MT_ELEMENTWISE_OPS: the CPU loops
// (kernels/cpu/elementwise.cpp), the GPU launchers and name expressions (kernels/gpu), the op
// registration and fake kernels (kernels/ops/unary.cpp, binary.cpp) and the kernel and op
// tests all read it. Note [The elementwise table].
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <type_traits>

#include "kernels/cpu/math.h"

namespace mt::ew {

// Note [The elementwise table]
// A row is X(Id, name, arity, flags, CPU functor):
//  - Id names the row's enumerator ew::Fn::Id and its device functor, struct mt::op::Id in
//    kernels/cuda/elementwise.cu (none for kOwnKernels rows);
//  - name is the op's, for messages ("[exp] ...") and, for unary rows, the op mt::<name>;
//  - the CPU functor is a generic lambda on the compute type C (float for float32,
//    float16 and bfloat16; double; int64_t for kInt rows, bool through int64): f(x) for
//    Unary rows, f(x, s) for Scalar rows, f(x, y, alpha) for Binary rows (nullptr for a
//    row without a CPU form). Its float64 form is the tests' reference.
// A new unary op is one row, its device functor, and in kernels/ops/unary.cpp its register
// line (with the backward) and its public function. The enum, the GPU kernel slots, the
// name expressions that NVRTC compiles, the CPU dispatch, and the test lists (CPU kernels,
// the emulated device functors, the op harness with opcheck and gradcheck) come from here.

// What a functor takes besides its tensor operands.
enum class Arity : uint8_t {
  Unary,   // f(x)
  Scalar,  // f(x, s): the scalar operand, or pow's exponent
  Binary,  // f(x, y, alpha)
};

// A row's flags.
inline constexpr unsigned kFloat = 0;        // float only: integer inputs need a float out
inline constexpr unsigned kInt = 1;          // int64 computes in int64 (bool through int64)
inline constexpr unsigned kKeepDtype = 2;    // the result has x's dtype (else int -> float32)
inline constexpr unsigned kPositive = 4;     // defined and smooth for x > 0: tests sample there
inline constexpr unsigned kIsaClones = 8;    // float32 loop of its own (kernels/cpu/vec_exp.h)
inline constexpr unsigned kOwnKernels = 16;  // own op file and CUDA kernels (kernels/ops/<name>)

// clang-format off
#define MT_ELEMENTWISE_OPS(X)                                                                                 \
  X(Neg,     "neg",      Unary,  kInt | kKeepDtype, [](auto x) { return decltype(x)(-x); })                  \
  X(Exp,     "exp",      Unary,  kIsaClones,        [](auto x) { return ::mt::cpu::exp_f32(x); })            \
  X(Log,     "log",      Unary,  kPositive,         [](auto x) { return std::log(x); })                      \
  X(Sqrt,    "sqrt",     Unary,  kPositive,         [](auto x) { return std::sqrt(x); })                     \
  X(Abs,     "abs",      Unary,  kInt | kKeepDtype, [](auto x) { return decltype(x)(std::abs(x)); })         \
  X(Sign,    "sign",     Unary,  kInt | kKeepDtype, [](auto x) {                                             \
      using C = decltype(x);                                                                                  \
      return x > C(0) ? C(1) : x < C(0) ? C(-1) : C(x * C(0)); /* NaN stays NaN */ })                        \
  X(Sigmoid, "sigmoid",  Unary,  kIsaClones,        [](auto x) { return ::mt::cpu::sigmoid_of(x); })         \
  X(Tanh,    "tanh",     Unary,  kFloat,            [](auto x) { return std::tanh(x); /* libm: accurate near 0 */ }) \
  X(Relu,    "relu",     Unary,  kInt | kKeepDtype, [](auto x) { return x < 0 ? decltype(x)(0) : x; /* keeps NaN */ }) \
  X(Silu,    "silu",     Unary,  kIsaClones | kKeepDtype | kOwnKernels, [](auto x) { return ::mt::cpu::silu_of(x); }) \
  X(Gelu,    "gelu",     Unary,  kIsaClones,        [](auto x) { return ::mt::cpu::gelu_of(x); /* tanh form */ }) \
  X(Pow,     "pow",      Scalar, kInt,              [](auto x, auto p) { return ::mt::cpu::pow_of(x, p); })  \
  X(AddS,    "add",      Scalar, kInt | kKeepDtype, [](auto x, auto s) { return decltype(x)(x + s); })       \
  X(SubS,    "sub",      Scalar, kInt | kKeepDtype, [](auto x, auto s) { return decltype(x)(x - s); })       \
  X(MulS,    "mul",      Scalar, kInt | kKeepDtype, [](auto x, auto s) { return decltype(x)(x * s); })       \
  X(DivS,    "div",      Scalar, kFloat,            [](auto x, auto s) { return x / s; })                    \
  X(Add,     "add",      Binary, kInt | kKeepDtype, [](auto x, auto y, auto a) { return decltype(x)(x + a * y); }) \
  X(Sub,     "sub",      Binary, kInt | kKeepDtype, [](auto x, auto y, auto a) { return decltype(x)(x - a * y); }) \
  X(Mul,     "mul",      Binary, kInt | kKeepDtype, [](auto x, auto y, auto) { return decltype(x)(x * y); }) \
  X(Div,     "div",      Binary, kFloat,            [](auto x, auto y, auto) { return x / y; })              \
  X(SquaredDiff, "mse_loss", Binary, kFloat,        [](auto x, auto y, auto) { return (x - y) * (x - y); })
// clang-format on

// The rows' enumerators, in table order.
enum class Fn {
#define MT_EW_ENUM(Id, ...) Id,
  MT_ELEMENTWISE_OPS(MT_EW_ENUM)
#undef MT_EW_ENUM
};

// Calls a row's CPU functor with the arguments its arity takes.
template <Arity A, typename F, typename C>
constexpr C call(F f, C x, C y, C s) {
  if constexpr (A == Arity::Unary)
    return f(x);
  else if constexpr (A == Arity::Scalar)
    return f(x, s);
  else
    return f(x, y, s);
}

struct Row {
  Fn fn;
  std::string_view id;    // "Exp": the device functor mt::op::Exp (see has_device_functor)
  std::string_view name;  // "exp"
  Arity arity;
  unsigned flags;
  // The CPU functor in float64 (y and s unused where the arity has none), or null.
  // The kernel and op tests use it as the reference.
  double (*f64)(double x, double y, double s);

  constexpr bool int_ok() const { return flags & kInt; }
  constexpr bool keeps_dtype() const { return flags & kKeepDtype; }
  constexpr bool positive() const { return flags & kPositive; }
  constexpr bool own_kernels() const { return flags & kOwnKernels; }
  constexpr bool has_device_functor() const { return !own_kernels(); }
  constexpr int tensor_operands() const { return arity == Arity::Binary ? 2 : 1; }
};

// A row's CPU functor as Row::f64.
template <Arity A, typename F>
constexpr auto f64_form(F) -> double (*)(double, double, double) {
  if constexpr (std::is_same_v<F, std::nullptr_t>)
    return nullptr;
  else
    return [](double x, double y, double s) { return call<A>(F{}, x, y, s); };
}

inline constexpr Row kRows[] = {
#define MT_EW_ROW(Id, name, arity, flags, ...) \
  {Fn::Id, #Id, name, Arity::arity, flags, f64_form<Arity::arity>(__VA_ARGS__)},
    MT_ELEMENTWISE_OPS(MT_EW_ROW)
#undef MT_EW_ROW
};
inline constexpr int kNumFns = int(std::size(kRows));

// Row i is Fn(i): the enum and the rows come from one list, this keeps it so.
consteval bool rows_in_enum_order() {
  for (int i = 0; i < kNumFns; ++i)
    if (kRows[i].fn != Fn(i)) return false;
  return true;
}
static_assert(rows_in_enum_order());

constexpr const Row& row(Fn fn) { return kRows[int(fn)]; }

// The Scalar row with a Binary row's name (Add -> AddS); fn itself where there is none.
constexpr Fn scalar_form(Fn fn) {
  for (const Row& r : kRows)
    if (r.arity == Arity::Scalar && r.name == row(fn).name) return r.fn;
  return fn;
}

}  // namespace mt::ew
