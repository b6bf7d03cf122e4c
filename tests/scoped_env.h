// SPDX-License-Identifier: MIT
// An environment variable set for a scope, then restored (or unset again): for tests of
// settings read from the environment. No minitensor header: the ThreadSanitizer program
// (tests/meson.build, mt_tsan_threads) uses it too.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
  }
  ScopedEnv(const char* name, const char* value) : ScopedEnv(name) { set(value); }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  // A value for the variable, or nullptr: unset it.
  void set(const char* value) {
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};
