// SPDX-License-Identifier: MIT
#include "runtime/dtype.h"

#include <array>
#include <cstring>

namespace mt {

// Note [Half conversion]: round to nearest even, with subnormals, infinities and
// NaN handled; the same results as the F16C instructions and CUDA's __float2half.
uint16_t Half::from_float(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf (incl. rounding)
  if (absx < 0x38800000u) {                                  // subnormal or zero in half
    if (absx < 0x33000000u) return uint16_t(sign);           // rounds to zero
    // value = mant * 2^(e-150); in units of half's 2^-24 that is mant >> (126 - e)
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int drop = 126 - int(absx >> 23);  // 14 .. 24
    uint32_t res = mant >> drop;
    uint32_t rem = mant & ((1u << drop) - 1u);
    uint32_t halfway = 1u << (drop - 1);
    if (rem > halfway || (rem == halfway && (res & 1u))) res++;
    return uint16_t(sign | res);
  }
  // normal: rebias exponent 127 -> 15, round 23 -> 10 mantissa bits
  uint32_t rounded = absx + 0xfffu + ((absx >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

float Half::to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      out = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (dtype_name(DType(i)) == name) return DType(i);
  if (name == "float" || name == "f32") return DType::Float32;
  if (name == "double" || name == "f64") return DType::Float64;
  if (name == "half" || name == "f16") return DType::Float16;
  if (name == "bf16") return DType::BFloat16;
  if (name == "long") return DType::Int64;
  MT_ERROR(
      "[dtype] unknown dtype '{}'; expected one of float32, float64, float16, bfloat16, "
      "int64, bool",
      name);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool:
        return 0;
      case DType::Int64:
        return 1;
      case DType::Float16:
        return 2;
      case DType::BFloat16:
        return 2;
      case DType::Float32:
        return 3;
      case DType::Float64:
        return 4;
    }
    return 0;
  };
  if (rank(a) == 2 && rank(b) == 2) return DType::Float32;  // float16 with bfloat16
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace mt
