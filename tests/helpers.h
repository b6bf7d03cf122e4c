// SPDX-License-Identifier: MIT
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

// The message of the mt::Error that fn throws, or "(no error)": for tests that check the
// exact text users see.
inline std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const mt::Error& e) {
    return e.what();
  }
  return "(no error)";
}
