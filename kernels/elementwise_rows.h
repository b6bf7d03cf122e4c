// SPDX-License-Identifier: MIT
// The rows of the elementwise table (kernels/elementwise_table.h) as data, for the library
// and its tests: the enum ew::Fn, and ew::kRows with each row's fields and its CPU functor
// in float64 (the tests' reference). Not a public header.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/cpu/math.h"
#include "kernels/elementwise_table.h"

namespace mt::ew {

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
  // The row's math in the pointwise language (Note [Pointwise expressions]): the forward
  // over x (y for Binary rows) and s (the scalar, or alpha), and the backward as a body that
  // sets gx (and gy) from those and g, the output's gradient.
  std::string_view forward;
  std::string_view backward;
  // The CPU functor in float64 (y and s unused where the arity has none), or null.
  // The kernel and op tests use it as the reference.
  double (*f64)(double x, double y, double s);

  constexpr bool int_ok() const { return flags & kInt; }
  constexpr bool keeps_dtype() const { return flags & kKeepDtype; }
  constexpr bool positive() const { return flags & kPositive; }
  constexpr bool own_kernels() const { return flags & kOwnKernels; }
  constexpr bool has_device_functor() const { return !own_kernels(); }
  constexpr bool kernel_only() const { return flags & kKernelOnly; }
  constexpr int tensor_operands() const { return arity == Arity::Binary ? 2 : 1; }
  // Whether the forward reads s: a Binary row's op then takes `*, float alpha=1.0`.
  constexpr bool reads_scalar() const {
    auto ident = [](char c) {
      return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    };
    for (size_t i = 0; i < forward.size(); ++i)
      if (forward[i] == 's' && !(i > 0 && ident(forward[i - 1])) &&
          !(i + 1 < forward.size() && ident(forward[i + 1])))
        return true;
    return false;
  }
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
#define MT_EW_ROW(Id, name, arity, flags, fwd, bwd, ...) \
  {Fn::Id, #Id, #name, Arity::arity, flags, fwd, bwd, f64_form<Arity::arity>(__VA_ARGS__)},
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

// The op a row registers: "mt::exp", "mt::add" (Binary), "mt::add.Scalar", "mt::pow";
// empty for a kKernelOnly row.
inline std::string op_name(const Row& r) {
  if (r.kernel_only()) return {};
  std::string s = "mt::" + std::string(r.name);
  if (r.arity == Arity::Scalar && r.name != "pow") s += ".Scalar";
  return s;
}

// The Scalar row with a Binary row's name (Add -> AddS); fn itself where there is none.
constexpr Fn scalar_form(Fn fn) {
  for (const Row& r : kRows)
    if (r.arity == Arity::Scalar && r.name == row(fn).name) return r.fn;
  return fn;
}

}  // namespace mt::ew
