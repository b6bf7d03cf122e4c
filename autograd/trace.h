// SPDX-License-Identifier: MIT
// Call tracing through the Trace dispatch key: a boxed fallback that records every op
// call (name, arguments, results) on this thread, and trace_fake, which runs a function
// on fake inputs to get the shapes of every call without computing anything.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"

namespace mt {

struct TracedCall {
  std::string op;
  int depth = 0;                  // 0 for calls made by the traced code itself
  std::vector<std::string> args;  // Value::str() of each argument
  std::vector<std::string> results;
  std::string str() const;        // "mt::mul(Tensor[2, 3] float32 cpu fake, ...) -> (Tensor[2, 3] ...)"
};

struct CallTrace {
  std::vector<TracedCall> calls;
  std::string str() const;  // one line a call, indented by depth
};

// Records every op call on this thread while alive (Trace key included).
class TraceCallsGuard {
 public:
  explicit TraceCallsGuard(CallTrace* out);
  ~TraceCallsGuard();
  TraceCallsGuard(const TraceCallsGuard&) = delete;
  TraceCallsGuard& operator=(const TraceCallsGuard&) = delete;

 private:
  CallTrace* prev_;
  IncludeDispatchKeyGuard include_;
};

// Runs fn on fake copies of `inputs` (same sizes, strides, dtype, device and
// requires_grad) under FakeMode and returns the op calls it made, with their shapes:
// shape propagation without computing, and without a GPU for cuda inputs.
CallTrace trace_fake(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                     const std::vector<Tensor>& inputs);

}  // namespace mt
