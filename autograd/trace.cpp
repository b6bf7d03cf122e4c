// SPDX-License-Identifier: MIT
#include "autograd/trace.h"

#include "dispatcher/library.h"
#include "runtime/fake.h"

namespace mt {
namespace {

thread_local CallTrace* t_trace = nullptr;
thread_local int t_depth = 0;

std::vector<std::string> strs(const Stack& s, size_t from) {
  std::vector<std::string> out;
  for (size_t i = from; i < s.size(); ++i) out.push_back(s[i].str());
  return out;
}

}  // namespace

namespace detail {
// The Trace key's fallback: record, then redispatch below Trace.
void install_trace_fallback() {
  static Library lib(Library::Kind::Impl, "_", DispatchKey::Trace);
  lib.fallback([](const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
    CallTrace* trace = t_trace;
    if (!trace) return op.redispatch_boxed(ks.below(DispatchKey::Trace), stack);
    size_t n = op.schema().arguments.size();
    size_t base = stack->size() - n;
    size_t index = trace->calls.size();
    trace->calls.push_back(TracedCall{op.name().str(), t_depth, strs(*stack, base), {}});
    ++t_depth;
    try {
      op.redispatch_boxed(ks.below(DispatchKey::Trace), stack);
    } catch (...) {
      --t_depth;
      throw;
    }
    --t_depth;
    trace->calls[index].results = strs(*stack, base);
  });
}
}  // namespace detail

TraceCallsGuard::TraceCallsGuard(CallTrace* out) : prev_(t_trace), include_(DispatchKey::Trace) {
  t_trace = out;
}
TraceCallsGuard::~TraceCallsGuard() { t_trace = prev_; }

std::string TracedCall::str() const {
  return fmt::format("{}{}({}) -> ({})", std::string(size_t(2 * depth), ' '), op,
                     fmt::join(args, ", "), fmt::join(results, ", "));
}

std::string CallTrace::str() const {
  std::string out;
  for (const TracedCall& c : calls) out += c.str() + "\n";
  return out;
}

CallTrace trace_fake(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                     const std::vector<Tensor>& inputs) {
  std::vector<Tensor> fakes;
  for (const Tensor& t : inputs) {
    Tensor f = fake_like(t);
    if (t.requires_grad()) f.requires_grad_(true);
    fakes.push_back(f);
  }
  CallTrace trace;
  {
    FakeMode fake;
    TraceCallsGuard guard(&trace);
    fn(fakes);
  }
  return trace;
}

}  // namespace mt
