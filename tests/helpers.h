// Shared test helpers: doctest printers for minitensor types.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "minitensor.h"

namespace doctest {
template <>
struct StringMaker<mt::Shape> {
  static String convert(const mt::Shape& s) { return fmt::format("{}", s).c_str(); }
};
template <>
struct StringMaker<mt::DType> {
  static String convert(mt::DType t) { return fmt::format("{}", t).c_str(); }
};
template <>
struct StringMaker<mt::DispatchKeySet> {
  static String convert(mt::DispatchKeySet k) { return k.str().c_str(); }
};
}  // namespace doctest
