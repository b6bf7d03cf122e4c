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

// Collects what the dispatcher logs (MT_TRACE=dispatch lines, a fallback's warning) while it
// lives; count(s) is the number of lines that contain s. Its end also turns the dispatch
// trace and the registration log off, which a case may have turned on.
struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    mt::dispatcher().set_log_sink([this](std::string_view l) { lines.emplace_back(l); });
  }
  ~LogCapture() {
    mt::dispatcher().set_trace_dispatch(false);
    mt::dispatcher().set_log_registrations(false);
    mt::dispatcher().set_log_sink(nullptr);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  int count(std::string_view what) const {
    int n = 0;
    for (const std::string& l : lines) n += l.find(what) != std::string::npos;
    return n;
  }
};
