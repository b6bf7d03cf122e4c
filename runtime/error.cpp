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

namespace mt {

std::string quoted(std::string_view s) {
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

}  // namespace mt
