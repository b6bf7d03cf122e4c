// SPDX-License-Identifier: MIT
// The elementwise ops, one row each in MT_ELEMENTWISE_OPS. Everything about such an op
// comes from its row: the op's registration with CPU, CUDA and fake kernels
// (kernels/ops/unary.cpp, binary.cpp, by a loop over the rows), its backward, its fusion
// under mt::compile, the CPU loops (kernels/cpu/elementwise.cpp), the GPU launchers and
// name expressions (kernels/cuda_host) and the kernel and op tests. kernels/elementwise_rows.h
// makes the rows data (ew::Fn, ew::kRows). Note [The elementwise table].
//
// This header is public (it was, through kernels/ops.h) only for its flags' names; it
// includes nothing and defines no functions: the CPU functors are only text until a
// library file expands them.
#pragma once

#include <cmath>
#include <cstdint>

namespace mt::ew {

// Note [The elementwise table]
// A row is X(Id, name, arity, flags, forward, backward, CPU functor):
//  - Id names the row's enumerator ew::Fn::Id and its device functor, struct mt::op::Id in
//    kernels/cuda_device/elementwise.cu (none for kOwnKernels rows);
//  - name, an identifier, is the op's: "[exp] ..." in messages, and the op "mt::exp"
//    (Unary and Binary rows), "mt::add.Scalar" (Scalar rows; pow is "mt::pow"), none for a
//    kKernelOnly row. A Binary row's op takes `*, float alpha=1.0` when its forward reads s;
//  - forward is the row's math in the pointwise language (Note [Pointwise expressions] in
//    kernels/jit/expr.cpp) over x (and y) and the scalar s: mt::compile fuses the op from
//    it, and a test checks that it computes what the CPU functor computes;
//  - backward is a body over x (and y), s and g, the output's gradient, that sets gx (and
//    gy): the op's autograd formula, evaluated with dispatched ops (so it differentiates
//    again) and summed down to each input's shape. A test checks it against the symbolic
//    derivative of forward (kernels/jit/derive.h);
//  - the CPU functor is a generic lambda on the compute type C (float for float32,
//    float16 and bfloat16; double; int64_t for kInt rows, bool through int64): f(x) for
//    Unary rows, f(x, s) for Scalar rows, f(x, y, alpha) for Binary rows. Its float64 form
//    is the tests' reference.
//  - the flags give the dtype rule (kKeepDtype: the result keeps the inputs' promoted
//    dtype; otherwise integer inputs give float32) and the tests' sampling.
// A new unary op is two places in the library: this row and its device functor in
// kernels/cuda_device/elementwise.cu (plus, for a C++ function mt::<name>, its declaration in
// kernels/ops.h; the op is callable by name without it). The registration, backward,
// fusion formula, enum, GPU kernel slots, name expressions, CPU dispatch and the test lists
// (CPU kernels, emulated device functors, the op harness with opcheck and gradcheck) come
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
inline constexpr unsigned kKernelOnly = 32;  // a kernel of other ops, not an op of its own

}  // namespace mt::ew

// clang-format off
#define MT_ELEMENTWISE_OPS(X)                                                                                 \
  X(Neg,     neg,        Unary,  kInt | kKeepDtype, "-x",        "gx = -g",                                  \
    [](auto x) { return decltype(x)(-x); })                                                                   \
  X(Exp,     exp,        Unary,  kIsaClones,        "exp(x)",    "gx = g * exp(x)",                          \
    [](auto x) { return ::mt::cpu::exp_f32(x); })                                                             \
  X(Log,     log,        Unary,  kPositive,         "log(x)",    "gx = g / x",                               \
    [](auto x) { return std::log(x); })                                                                       \
  X(Sqrt,    sqrt,       Unary,  kPositive,         "sqrt(x)",   "gx = g / (sqrt(x) * 2)",                   \
    [](auto x) { return std::sqrt(x); })                                                                      \
  X(Abs,     abs,        Unary,  kInt | kKeepDtype, "abs(x)",    "gx = g * sign(x)",                         \
    [](auto x) { return decltype(x)(std::abs(x)); })                                                          \
  X(Sign,    sign,       Unary,  kInt | kKeepDtype, "sign(x)",   "gx = g * 0",                               \
    [](auto x) {                                                                                              \
      using C = decltype(x);                                                                                  \
      return x > C(0) ? C(1) : x < C(0) ? C(-1) : C(x * C(0)); /* NaN stays NaN */ })                        \
  X(Sigmoid, sigmoid,    Unary,  kIsaClones,        "sigmoid(x)", "t = sigmoid(x); gx = g * (t - t * t)",    \
    [](auto x) { return ::mt::cpu::sigmoid_of(x); })                                                          \
  X(Tanh,    tanh,       Unary,  kFloat,            "tanh(x)",   "t = tanh(x); gx = g - g * (t * t)",        \
    [](auto x) { return std::tanh(x); /* libm: accurate near 0 */ })                                          \
  X(Relu,    relu,       Unary,  kInt | kKeepDtype, "relu(x)",   "gx = g * relu(sign(x))",                   \
    [](auto x) { return x < 0 ? decltype(x)(0) : x; /* keeps NaN */ })                                        \
  X(Silu,    silu,       Unary,  kIsaClones | kKeepDtype | kOwnKernels, "x / (1 + exp(-x))",                 \
    "t = sigmoid(x); gx = g * t * (1 + x * (1 - t))",                                                         \
    [](auto x) { return ::mt::cpu::silu_of(x); })                                                             \
  X(Gelu,    gelu,       Unary,  kIsaClones,                                                                  \
    "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))",                                 \
    "x2 = x * x; t = tanh(x * (x2 * 0.044715 + 1) * 0.7978845608028654);"                                    \
    "gx = g * ((t + 1) * 0.5 + x * 0.5 * ((1 - t * t) * ((x2 * (0.044715 * 3) + 1) * 0.7978845608028654)))",       \
    [](auto x) { return ::mt::cpu::gelu_of(x); /* x Phi(x), tanh form */ })                                   \
  X(Pow,     pow,        Scalar, kInt,              "pow(x, s)",                                              \
    "gx = s == 0 ? g * 0 : (s == 1 ? g : g * (pow(x, s - 1) * s))",                                           \
    [](auto x, auto p) { return ::mt::cpu::pow_of(x, p); })                                                   \
  X(AddS,    add,        Scalar, kInt | kKeepDtype, "x + s",     "gx = g",                                   \
    [](auto x, auto s) { return decltype(x)(x + s); })                                                        \
  X(SubS,    sub,        Scalar, kInt | kKeepDtype, "x - s",     "gx = g",                                   \
    [](auto x, auto s) { return decltype(x)(x - s); })                                                        \
  X(MulS,    mul,        Scalar, kInt | kKeepDtype, "x * s",     "gx = g * s",                               \
    [](auto x, auto s) { return decltype(x)(x * s); })                                                        \
  X(DivS,    div,        Scalar, kFloat,            "x / s",     "gx = g / s",                               \
    [](auto x, auto s) { return x / s; })                                                                     \
  X(Add,     add,        Binary, kInt | kKeepDtype, "x + s * y", "gx = g; gy = g * s",                       \
    [](auto x, auto y, auto a) { return decltype(x)(x + a * y); })                                            \
  X(Sub,     sub,        Binary, kInt | kKeepDtype, "x - s * y", "gx = g; gy = g * -s",                      \
    [](auto x, auto y, auto a) { return decltype(x)(x - a * y); })                                            \
  X(Mul,     mul,        Binary, kInt | kKeepDtype, "x * y",     "gx = g * y; gy = g * x",                   \
    [](auto x, auto y, auto) { return decltype(x)(x * y); })                                                  \
  X(Div,     div,        Binary, kFloat,            "x / y",     "gx = g / y; gy = -(g * x / (y * y))",      \
    [](auto x, auto y, auto) { return x / y; })                                                               \
  X(SquaredDiff, mse_loss, Binary, kFloat | kKernelOnly, "(x - y) * (x - y)",                                 \
    "d = x - y; gx = g * 2 * d; gy = -(g * 2 * d)",                                                           \
    [](auto x, auto y, auto) { return (x - y) * (x - y); })
// clang-format on
