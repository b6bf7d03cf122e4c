// SPDX-License-Identifier: MIT
#include "autograd/trace.h"

#include <fmt/format.h>

#include "dispatcher/library.h"
#include "runtime/cuda/cuda.h"
#include "runtime/tensor.h"

namespace mt {
namespace {

thread_local CallTrace* t_trace = nullptr;
thread_local CallObserver* t_observer = nullptr;
thread_local int t_depth = 0;
thread_local bool t_name_allocations = false;  // NameAllocationsByOp
thread_local int t_named_depth = 0;            // ops inside a named op keep its name

void observe_trace_or_redispatch(const OperatorHandle& op, DispatchKeySet ks, Stack* stack);

std::vector<std::string> strs(const Stack& s, size_t from) {
  std::vector<std::string> out;
  for (size_t i = from; i < s.size(); ++i) out.push_back(s[i].str());
  return out;
}

}  // namespace

namespace detail {
// The Trace key's fallback: under NameAllocationsByOp, name the op's allocations (a
// MemoryContext for the outermost op); under ObserveCallsGuard, show the call to the
// observer (mt::compile's capture); under TraceCallsGuard, record the call; then
// redispatch below Trace.
void install_trace_fallback() {
  static Library lib(Library::Kind::Impl, "_", DispatchKey::Trace);
  lib.fallback([](const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
    if (t_name_allocations && t_named_depth == 0) {
      const char* outer = cuda::MemoryContext::current();
      const std::string name =
          outer ? fmt::format("{} / {}", outer, op.name().str()) : op.name().str();
      cuda::MemoryContext context(name.c_str());
      ++t_named_depth;
      try {
        observe_trace_or_redispatch(op, ks, stack);
      } catch (...) {
        --t_named_depth;
        throw;
      }
      --t_named_depth;
      return;
    }
    observe_trace_or_redispatch(op, ks, stack);
  });
}
}  // namespace detail

namespace {
void observe_trace_or_redispatch(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
  if (CallObserver* observer = t_observer) {
    const size_t base = stack->size() - op.schema().arguments.size();
    const int depth = t_depth;
    ks = ks |
         observer->before(op, depth, std::span<Value>(stack->data() + base, stack->size() - base));
    const Stack args(stack->begin() + std::ptrdiff_t(base), stack->end());
    ++t_depth;
    struct Leave {
      ~Leave() { --t_depth; }
    } leave;
    op.redispatch_boxed(ks.below(DispatchKey::Trace), stack);
    observer->after(op, depth, args,
                    std::span<const Value>(stack->data() + base, stack->size() - base));
    return;
  }
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
}
}  // namespace

NameAllocationsByOp::NameAllocationsByOp()
    : prev_(t_name_allocations), include_(DispatchKey::Trace) {
  t_name_allocations = true;
}
NameAllocationsByOp::~NameAllocationsByOp() { t_name_allocations = prev_; }

TraceCallsGuard::TraceCallsGuard(CallTrace* out) : prev_(t_trace), include_(DispatchKey::Trace) {
  t_trace = out;
}
TraceCallsGuard::~TraceCallsGuard() { t_trace = prev_; }

ObserveCallsGuard::ObserveCallsGuard(CallObserver* observer)
    : prev_(t_observer), include_(DispatchKey::Trace) {
  t_observer = observer;
}
ObserveCallsGuard::~ObserveCallsGuard() { t_observer = prev_; }

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
