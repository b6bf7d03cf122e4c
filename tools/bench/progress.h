// SPDX-License-Identifier: MIT
// A progress line on stderr for long sweeps: rewritten in place on a terminal, one line
// per step otherwise (logs). Silent when disabled.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace mt::bench {

class Progress {
 public:
  Progress() = default;  // silent
  Progress(std::string prefix, int total) : prefix_(std::move(prefix)), total_(total), on_(true) {
    tty_ = isatty(fileno(stderr));
  }
  ~Progress() { done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Announces the next step ("float32 fwd 2^20").
  void step(const std::string& what) {
    if (!on_) return;
    ++done_;
    std::fprintf(stderr, "%s[%s] %d/%d %s%s", tty_ ? "\r\033[K" : "", prefix_.c_str(), done_,
                 total_, what.c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  void done() {
    if (on_ && tty_ && done_ > 0) std::fprintf(stderr, "\r\033[K");
    on_ = false;
  }

 private:
  std::string prefix_;
  int total_ = 0, done_ = 0;
  bool on_ = false, tty_ = false;
};

}  // namespace mt::bench
