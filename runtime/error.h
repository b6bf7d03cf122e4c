// SPDX-License-Identifier: MIT
// mt::Error and the checking macros every layer uses.
// User mistakes throw mt::Error (never abort); MT_ASSERT guards internal invariants.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace mt {

// Thrown for every user-facing mistake. what() holds the whole message, which
// starts with the op's name in brackets and says how to fix the call.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown when an internal invariant breaks: a bug in minitensor, not in the caller.
class InternalError : public Error {
 public:
  using Error::Error;
};

// User text for a message, in single quotes: quotes and backslashes escaped, control
// characters (NUL, newlines, terminal escapes, C1 controls) and bytes that are not UTF-8
// written as \n, \t, \r or \xNN, so what() is never cut short and a terminal shows it
// as it is.
inline std::string quoted(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  auto hex = [&](unsigned char c) { out += "\\x", out += kHex[c >> 4], out += kHex[c & 15]; };
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\'' || c == '\\') {
      out += '\\', out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c < 0x80) {
      out += char(c);
    } else {
      // A well-formed UTF-8 sequence (no overlongs, surrogates or C1 controls) stays.
      const size_t n = c >= 0xc2 && c <= 0xdf   ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
      bool ok = n != 0 && i + n <= s.size();
      for (size_t k = 1; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      if (ok) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xc2 && c1 < 0xa0) && !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) &&
             !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
      }
      if (!ok) {
        hex(c);
        continue;
      }
      out.append(s.substr(i, n));
      i += n - 1;
    }
  }
  return out + "'";
}

namespace detail {
[[noreturn]] void throw_error(std::string msg);
[[noreturn]] void throw_internal(const char* cond, std::string msg, const char* file, int line);

template <typename... Args>
std::string format_msg(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
inline std::string format_msg() { return {}; }
}  // namespace detail

}  // namespace mt

// MT_CHECK(cond, "[op] what went wrong {}; how to fix it", args...)
#define MT_CHECK(cond, ...)                                             \
  do {                                                                  \
    if (!(cond)) [[unlikely]]                                           \
      ::mt::detail::throw_error(::mt::detail::format_msg(__VA_ARGS__)); \
  } while (0)

// MT_ERROR("[op] ...", args...): throw unconditionally.
#define MT_ERROR(...) ::mt::detail::throw_error(::mt::detail::format_msg(__VA_ARGS__))

// MT_ASSERT(cond) or MT_ASSERT(cond, "context {}", args...): an internal invariant.
#define MT_ASSERT(cond, ...)                                                               \
  do {                                                                                     \
    if (!(cond)) [[unlikely]]                                                              \
      ::mt::detail::throw_internal(#cond, ::mt::detail::format_msg(__VA_ARGS__), __FILE__, \
                                   __LINE__);                                              \
  } while (0)
