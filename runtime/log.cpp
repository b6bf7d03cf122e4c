// SPDX-License-Identifier: MIT
#include "runtime/log.h"

#include <cstdio>
#include <mutex>

namespace mt::detail {
namespace {

struct Sink {
  std::mutex mutex;
  std::function<void(std::string_view)> fn;
};
// Never destroyed: static objects' destructors may still log.
Sink& sink() {
  static Sink* s = new Sink();
  return *s;
}

}  // namespace

void set_log_sink(std::function<void(std::string_view)> fn) {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.fn = std::move(fn);
}

void log_line(std::string_view line) {
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.fn) {
    s.fn(line);
  } else {
    std::fprintf(stderr, "%.*s\n", int(line.size()), line.data());
  }
}

}  // namespace mt::detail
