// SPDX-License-Identifier: MIT
// Element types: DType, the two 16-bit float storage types, and type promotion.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/error.h"

namespace mt {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int64, Bool };
inline constexpr int kNumDTypes = 6;

// IEEE binary16, stored as bits; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a float
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};

inline constexpr size_t dtype_size(DType t) {
  constexpr size_t kSize[kNumDTypes] = {4, 8, 2, 2, 8, 1};  // in the enum's order
  return size_t(t) < size_t(kNumDTypes) ? kSize[size_t(t)] : 0;
}
std::string_view dtype_name(DType t);  // "float32", "bfloat16", ...
DType parse_dtype(std::string_view name);
inline bool is_floating(DType t) { return t != DType::Int64 && t != DType::Bool; }
// The result type of a binary op, as PyTorch promotes (bool < int64 < floats;
// float16 with bfloat16 gives float32).
DType promote_types(DType a, DType b);
// Whether a result of dtype `from` may be written into a tensor of dtype `to` by an
// in-place op or an out= argument, as PyTorch's can_cast: not a float into an integer
// or bool, and not an integer into a bool (copy_ and .to() convert freely).
inline bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

// Note [Float to integer conversion]
// C++ leaves a float -> int64 conversion undefined when the value, truncated, does not
// fit (NaN, +-inf, 1e30); x86 gives INT64_MIN, other CPUs other values. minitensor
// saturates instead, the same on every path (copy_, .to(), fill_, the CPU kernels'
// loads and stores): NaN -> 0, values past the range -> INT64_MAX or INT64_MIN, the rest
// truncated toward zero.
template <typename F>
inline int64_t saturate_to_int64(F v) {
  if (v != v) return 0;                  // NaN
  if (v >= F(0x1p63)) return INT64_MAX;  // 2^63 and up, +inf
  if (v < F(-0x1p63)) return INT64_MIN;  // below -2^63, -inf
  return int64_t(v);
}

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls fn(T{}) with T the C++ type of `t`: MT_VISIT_DTYPE(t, [&](auto tag) { using T = ...; }).
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32:
      return fn(float{});
    case DType::Float64:
      return fn(double{});
    case DType::Float16:
      return fn(Half{});
    case DType::BFloat16:
      return fn(BFloat16{});
    case DType::Int64:
      return fn(int64_t{});
    case DType::Bool:
      return fn(bool{});
  }
  MT_ASSERT(false, "unknown dtype {}", int(t));
  return fn(float{});
}

}  // namespace mt

template <>
struct fmt::formatter<mt::DType> : mt::detail::TextFormatter {
  auto format(mt::DType t, fmt::format_context& ctx) const { return write(mt::dtype_name(t), ctx); }
};
