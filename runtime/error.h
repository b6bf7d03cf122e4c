// mt::Error and the checking macros every layer uses.
// User mistakes throw mt::Error (never abort); MT_ASSERT guards internal invariants.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

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
#define MT_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) [[unlikely]]                                        \
      ::mt::detail::throw_error(::mt::detail::format_msg(__VA_ARGS__)); \
  } while (0)

// MT_ERROR("[op] ...", args...): throw unconditionally.
#define MT_ERROR(...) ::mt::detail::throw_error(::mt::detail::format_msg(__VA_ARGS__))

// MT_ASSERT(cond) or MT_ASSERT(cond, "context {}", args...): an internal invariant.
#define MT_ASSERT(cond, ...)                                                         \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::mt::detail::throw_internal(#cond, ::mt::detail::format_msg(__VA_ARGS__),     \
                                   __FILE__, __LINE__);                              \
  } while (0)
