// SPDX-License-Identifier: MIT
// Call tracing through the Trace dispatch key: a boxed fallback that records every op
// call (name, arguments, results) on this thread, and trace_fake, which runs a function
// on fake inputs to get the shapes of every call without computing anything.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"

namespace mt {

struct TracedCall {
  std::string op;
  int depth = 0;                  // 0 for calls made by the traced code itself
  std::vector<std::string> args;  // Value::str() of each argument
  std::vector<std::string> results;
  std::string str() const;  // "mt::mul(Tensor[2, 3] float32 cpu fake, ...) -> (Tensor[2, 3] ...)"
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

// While alive, each op this thread calls from its own code names the CUDA memory it
// allocates, in the allocator's history (runtime/cuda/cuda.h: record_memory_history):
// "mt::matmul", or "backward / mt::matmul" inside a MemoryContext("backward"). Ops called
// by that op keep its name. Through the Trace key, like TraceCallsGuard: it costs a boxed
// call per op while alive, and nothing otherwise.
class NameAllocationsByOp {
 public:
  NameAllocationsByOp();
  ~NameAllocationsByOp();
  NameAllocationsByOp(const NameAllocationsByOp&) = delete;
  NameAllocationsByOp& operator=(const NameAllocationsByOp&) = delete;

 private:
  bool prev_;
  IncludeDispatchKeyGuard include_;
};

// Sees every op call made on this thread while an ObserveCallsGuard holds it, as boxed
// values: before the call (it may replace arguments, and returns keys to add to the
// call's, e.g. Fake) and after it, with the results. depth is 0 for calls made by the
// observed code itself, 1 and more for calls made inside an op. mt::compile's capture
// (kernels/compile/capture.cpp) is one.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  virtual DispatchKeySet before(const OperatorHandle& op, int depth, std::span<Value> args) = 0;
  virtual void after(const OperatorHandle& op, int depth, std::span<const Value> args,
                     std::span<const Value> results) = 0;
};

class ObserveCallsGuard {
 public:
  explicit ObserveCallsGuard(CallObserver* observer);
  ~ObserveCallsGuard();
  ObserveCallsGuard(const ObserveCallsGuard&) = delete;
  ObserveCallsGuard& operator=(const ObserveCallsGuard&) = delete;

 private:
  CallObserver* prev_;
  IncludeDispatchKeyGuard include_;
};

// Runs fn on fake copies of `inputs` (same sizes, strides, dtype, device and
// requires_grad) under FakeMode and returns the op calls it made, with their shapes:
// shape propagation without computing, and without a GPU for cuda inputs.
CallTrace trace_fake(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                     const std::vector<Tensor>& inputs);

}  // namespace mt
