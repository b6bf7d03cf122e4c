// SPDX-License-Identifier: MIT
#pragma once
// The library's one log sink. Every layer's diagnostic lines go through it: the dispatcher's
// MT_TRACE=dispatch and MT_LOG=registration, the JIT kernel cache's and the autotuner's
// MT_LOG lines, mt::compile's. It lives in the runtime, the lowest layer, so a layer logs
// without calling one above or beside it (the JIT does not reach into the dispatcher for
// it). Dispatcher::set_log_sink and Dispatcher::log are the public spelling.

#include <functional>
#include <string_view>

namespace mt::detail {

// Sends each line to `sink` (nullptr: back to stderr, one line each). Thread-safe; lines
// from several threads are delivered one at a time, so a sink needs no lock of its own, and
// must not log itself.
void set_log_sink(std::function<void(std::string_view)> sink);
void log_line(std::string_view line);

}  // namespace mt::detail
