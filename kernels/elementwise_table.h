// SPDX-License-Identifier: MIT
// The elementwise ops, one row each in MT_ELEMENTWISE_OPS. Everything about such an op
// comes from its row: the public function mt::<name> of a unary row (declared in
// kernels/ops.h, defined in kernels/ops/unary.cpp), the CPU loops
// (kernels/cpu/elementwise.cpp), the GPU launchers and name expressions (kernels/gpu), the
// op registration and fake kernels (kernels/ops/unary.cpp, binary.cpp) and the kernel and
// op tests. kernels/elementwise_rows.h makes the rows data (ew::Fn, ew::kRows).
// Note [The elementwise table].
//
// This header is public (kernels/ops.h expands the list), so it includes nothing and
// defines no functions: the CPU functors are only text until a library file expands them.
#pragma once

#include <cstdint>

namespace mt::ew {

// Note [The elementwise table]
// A row is X(Id, name, arity, flags, CPU functor):
//  - Id names the row's enumerator ew::Fn::Id and its device functor, struct mt::op::Id in
//    kernels/cuda/elementwise.cu (none for kOwnKernels rows);
//  - name, an identifier, is the op's: "[exp] ..." in messages, and for a Unary row the op
//    "mt::exp" and the public function Tensor mt::exp(const Tensor&), generated from the
//    row (kernels/ops.h declares it, kernels/ops/unary.cpp defines it);
//  - the CPU functor is a generic lambda on the compute type C (float for float32,
//    float16 and bfloat16; double; int64_t for kInt rows, bool through int64): f(x) for
//    Unary rows, f(x, s) for Scalar rows, f(x, y, alpha) for Binary rows (nullptr for a
//    row without a CPU form). Its float64 form is the tests' reference.
// A new unary op is three places in the library: this row (with its CPU functor), its
// device functor in kernels/cuda/elementwise.cu, and its register_unary_op line (the
// backward) in kernels/ops/unary.cpp. The public function, the enum, the GPU kernel slots,
// the name expressions that NVRTC compiles, the CPU dispatch, and the test lists (CPU
// kernels, the emulated device functors, the op harness with opcheck and gradcheck) come
// from here. docs/adding-an-op.md walks through it.

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

}  // namespace mt::ew

// clang-format off
#define MT_ELEMENTWISE_OPS(X)                                                                                 \
  X(Neg,     neg,        Unary,  kInt | kKeepDtype, [](auto x) { return decltype(x)(-x); })                  \
  X(Exp,     exp,        Unary,  kIsaClones,        [](auto x) { return ::mt::cpu::exp_f32(x); })            \
  X(Log,     log,        Unary,  kPositive,         [](auto x) { return std::log(x); })                      \
  X(Sqrt,    sqrt,       Unary,  kPositive,         [](auto x) { return std::sqrt(x); })                     \
  X(Abs,     abs,        Unary,  kInt | kKeepDtype, [](auto x) { return decltype(x)(std::abs(x)); })         \
  X(Sign,    sign,       Unary,  kInt | kKeepDtype, [](auto x) {                                             \
      using C = decltype(x);                                                                                  \
      return x > C(0) ? C(1) : x < C(0) ? C(-1) : C(x * C(0)); /* NaN stays NaN */ })                        \
  X(Sigmoid, sigmoid,    Unary,  kIsaClones,        [](auto x) { return ::mt::cpu::sigmoid_of(x); })         \
  X(Tanh,    tanh,       Unary,  kFloat,            [](auto x) { return std::tanh(x); /* libm: accurate near 0 */ }) \
  X(Relu,    relu,       Unary,  kInt | kKeepDtype, [](auto x) { return x < 0 ? decltype(x)(0) : x; /* keeps NaN */ }) \
  X(Silu,    silu,       Unary,  kIsaClones | kKeepDtype | kOwnKernels, [](auto x) { return ::mt::cpu::silu_of(x); }) \
  X(Gelu,    gelu,       Unary,  kIsaClones,        [](auto x) { return ::mt::cpu::gelu_of(x); /* x Phi(x), tanh form */ }) \
  X(Pow,     pow,        Scalar, kInt,              [](auto x, auto p) { return ::mt::cpu::pow_of(x, p); })  \
  X(AddS,    add,        Scalar, kInt | kKeepDtype, [](auto x, auto s) { return decltype(x)(x + s); })       \
  X(SubS,    sub,        Scalar, kInt | kKeepDtype, [](auto x, auto s) { return decltype(x)(x - s); })       \
  X(MulS,    mul,        Scalar, kInt | kKeepDtype, [](auto x, auto s) { return decltype(x)(x * s); })       \
  X(DivS,    div,        Scalar, kFloat,            [](auto x, auto s) { return x / s; })                    \
  X(Add,     add,        Binary, kInt | kKeepDtype, [](auto x, auto y, auto a) { return decltype(x)(x + a * y); }) \
  X(Sub,     sub,        Binary, kInt | kKeepDtype, [](auto x, auto y, auto a) { return decltype(x)(x - a * y); }) \
  X(Mul,     mul,        Binary, kInt | kKeepDtype, [](auto x, auto y, auto) { return decltype(x)(x * y); }) \
  X(Div,     div,        Binary, kFloat,            [](auto x, auto y, auto) { return x / y; })              \
  X(SquaredDiff, mse_loss, Binary, kFloat,          [](auto x, auto y, auto) { return (x - y) * (x - y); })
// clang-format on
