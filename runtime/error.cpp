// SPDX-License-Identifier: MIT
#include "runtime/error.h"

namespace mt::detail {

void throw_error(std::string msg) { throw Error(std::move(msg)); }

void throw_internal(const char* cond, std::string msg, const char* file, int line) {
  // "[internal] ...": an mt::InternalError is an mt::Error, whose messages start with a
  // name in brackets (docs/embedding.md).
  std::string text = fmt::format("[internal] assertion '{}' failed at {}:{}", cond, file, line);
  if (!msg.empty()) text += ": " + msg;
  text += " (this is a bug in minitensor; please report it)";
  throw InternalError(text);
}

}  // namespace mt::detail
