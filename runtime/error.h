// SPDX-License-Identifier: MIT
// mt::Error and the checking macros every layer uses.
// User mistakes throw mt::Error (never abort); MT_ASSERT guards internal invariants.
#pragma once

#include <fmt/core.h>

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
std::string quoted(std::string_view s);

namespace detail {
[[noreturn]] void throw_error(std::string msg);
[[noreturn]] void throw_internal(const char* cond, std::string msg, const char* file, int line);

template <typename... Args>
std::string format_msg(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
inline std::string format_msg() { return {}; }

// The fmt formatter of a type shown as its text (Device, DType, Shape, Tensor), with a
// string's format spec ("{:>8}"), written through fmt::runtime: the public headers then
// need only <fmt/core.h>, whose formatter<string_view>::format is in <fmt/format.h>.
struct TextFormatter {
  std::string_view spec;  // after the ':', e.g. ">8"; a nested "{}" is not supported
  constexpr auto parse(fmt::format_parse_context& ctx) {
    auto it = ctx.begin();
    while (it != ctx.end() && *it != '}') {
      if (*it == '{') ctx.on_error("minitensor's types take no nested {} in a format spec");
      ++it;
    }
    spec = std::string_view(ctx.begin(), size_t(it - ctx.begin()));
    return it;
  }
  auto write(std::string_view text, fmt::format_context& ctx) const {
    if (spec.empty()) return fmt::format_to(ctx.out(), "{}", text);
    return fmt::format_to(ctx.out(), fmt::runtime("{:" + std::string(spec) + "}"), text);
  }
};
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
