// SPDX-License-Identifier: MIT
// Grad mode: whether op calls record tape entries. No-grad excludes the Autograd key
// from dispatch on this thread, so an op call under it costs nothing extra.
#pragma once

#include "dispatcher/dispatcher.h"

namespace mt {

inline bool grad_enabled() { return !local_dispatch_keys().excluded.has(DispatchKey::Autograd); }

// Turns recording off for its scope: mt::NoGradGuard g; (SGD updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : guard_(DispatchKey::Autograd) {}

 private:
  ExcludeDispatchKeyGuard guard_;
};

// Turns recording back on inside a NoGradGuard.
class EnableGradGuard {
 public:
  EnableGradGuard() : saved_(detail::t_local_keys.excluded) {
    detail::t_local_keys.excluded = saved_.remove(DispatchKey::Autograd);
  }
  ~EnableGradGuard() { detail::t_local_keys.excluded = saved_; }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

}  // namespace mt
