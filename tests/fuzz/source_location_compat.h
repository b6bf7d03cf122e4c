// SPDX-License-Identifier: MIT
// Force-included (-include) into the fuzz build: clang 14 lacks __builtin_source_location,
// so libstdc++ 12's <source_location> is empty there and runtime/error.h would not compile.
// This supplies the few members error.h uses; newer compilers get the real one.
#pragma once

#include <source_location>
#include <version>

#if !defined(__cpp_lib_source_location)
namespace std {
struct source_location {
  static consteval source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           unsigned line = __builtin_LINE()) noexcept {
    source_location loc;
    loc.file_ = file, loc.function_ = function, loc.line_ = line;
    return loc;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
};
}  // namespace std
#endif
