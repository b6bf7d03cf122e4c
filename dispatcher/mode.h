// SPDX-License-Identifier: MIT
// User dispatch modes (torch's TorchDispatchMode): an object that sees every op call below
// Autograd, with its arguments, and may run it, change it or replace it. Two ship with the
// library: FlopCounterMode and DebugMode (below).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <typeinfo>
#include <vector>

#include "dispatcher/dispatcher.h"

namespace mt {

// Note [Dispatch modes]
// A ModeGuard pushes a mode on the thread's mode stack and adds the Mode key to the
// thread's included keys, so every call on that thread reaches the Mode key's fallback
// (Trace > Autograd > Mode > Fake > backends). The fallback pops the innermost mode for
// the length of its dispatch() and hands it the op and the arguments; ops the mode calls
// then reach the next mode out, or the kernels below Mode once no mode is left (the
// Mode key leaves the included set while the stack is empty). Below Autograd: the
// Autograd kernel has recorded the call and excluded its own key, so a mode sees each
// op once, and the ops a backward runs too. With no mode pushed the Mode key is in no
// key set, and a call costs what it did before. An exception from dispatch() becomes an
// mt::Error naming the mode and the op; the popped mode is pushed back either way.
class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  // Runs for every op called under this mode. `stack` holds the op's arguments (all of
  // them, defaults filled in); leave its results there, in place of the arguments.
  virtual void dispatch(const OperatorHandle& op, Stack& stack) = 0;
  // The name in errors and tables; the default is the C++ type's name.
  virtual std::string name() const;

  // Runs `op` on `stack` below this mode: the next mode out, else the kernels below Mode
  // (Fake, CUDA, CPU). Results replace the arguments on `stack`. A rule registered with
  // register_dispatch_mode_rule for (op, this mode's type) runs instead of dispatch().
  static void redispatch(const OperatorHandle& op, Stack& stack);
};

// Pushes `mode` for this scope on this thread (modes stack: the innermost runs first).
// The mode must outlive the guard. Destroying guards out of order, or on another
// thread, cannot throw from a destructor: the guard takes its mode off the stack all the
// same (no mode stays stuck), logs the error to the dispatcher's log sink, and the next
// ModeGuard, mode call or check_mode_stack() on the guard's thread throws it.
class ModeGuard {
 public:
  explicit ModeGuard(DispatchMode& mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  DispatchMode* mode_;
  uint64_t id_;
  std::shared_ptr<void> entry_;  // the stack entry (with its thread), shared with the owning thread
};

// The modes active on this thread, innermost last (names, for messages and tests).
std::vector<std::string> active_modes();
// Throws the error a misused ModeGuard left on this thread (see ModeGuard), if any.
void check_mode_stack();

// A rule for one op under one mode type (torch.library.register_torch_dispatch): while a
// mode of type `mode_type` handles `op`, `fn` runs instead of the mode's dispatch().
// Undone when the returned handle (and its copies) is destroyed.
using ModeRuleFn = std::function<void(DispatchMode& mode, const OperatorHandle& op, Stack& stack)>;
class [[nodiscard]] ModeRule {
 public:
  ModeRule() = default;
  explicit ModeRule(std::shared_ptr<void> r) : r_(std::move(r)) {}
  void reset() { r_.reset(); }

 private:
  std::shared_ptr<void> r_;
};
ModeRule register_dispatch_mode_rule(std::string_view op, const std::type_info& mode_type,
                                     ModeRuleFn fn,
                                     std::source_location loc = std::source_location::current());
template <typename Mode, typename F>
ModeRule register_dispatch_mode_rule(std::string_view op, F fn,
                                     std::source_location loc = std::source_location::current()) {
  return register_dispatch_mode_rule(
      op, typeid(Mode),
      [fn = std::move(fn)](DispatchMode& m, const OperatorHandle& h, Stack& s) {
        fn(static_cast<Mode&>(m), h, s);
      },
      loc);
}

namespace detail {
// The Mode key's fallback (installed by the dispatcher itself) and where it is defined.
KernelFunction mode_fallback_kernel();
std::string mode_fallback_debug();
}  // namespace detail

// Two dispatch modes that ship with the library: FlopCounterMode (FLOPs per op and per
// scope, from formulas registered per op) and DebugMode (one line per op: shapes, dtypes
// and a hash of each tensor's contents, so two runs can be diffed).

// The FLOPs of one call of an op from its arguments and its results (both boxed).
using FlopFormula = std::function<int64_t(const Stack& args, const Stack& results)>;
// Registers (or replaces) the formula of `op` for FlopCounterMode, for the process.
// The built-in formulas: mt::matmul 2*m*k*n (times the batch), the elementwise ops one
// FLOP per output element, sum and mean one per input element. A scenario op such as
// an attention registers its own.
void register_flop_formula(std::string_view op, FlopFormula formula);

class FlopCounterMode : public DispatchMode {
 public:
  void dispatch(const OperatorHandle& op, Stack& stack) override;
  std::string name() const override { return "FlopCounterMode"; }

  // A module-like scope: calls inside it count for it (and for every scope around it).
  class Scope {
   public:
    Scope(FlopCounterMode& mode, std::string name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    FlopCounterMode& mode_;
  };

  int64_t total() const;  // every counted FLOP ("Global")
  // FLOPs per op name in `scope` ("Global": all of them).
  std::map<std::string, int64_t> by_op(const std::string& scope = "Global") const;
  // Calls of ops without a formula (counted as 0 FLOPs), by op name.
  const std::map<std::string, int64_t>& uncounted() const { return uncounted_; }
  // A table: scope, op, FLOPs; then the ops without a formula.
  std::string table() const;
  void reset();

 private:
  std::vector<std::string> scopes_{"Global"};
  std::vector<std::string> scope_order_{"Global"};
  std::map<std::string, std::map<std::string, int64_t>> counts_;
  std::map<std::string, int64_t> uncounted_;
};

// One line per op call: "mt::add(self=f32[64, 64]#3f2a.., other=f32[64]#..) -> f32[64, 64]#..".
// The hash is FNV-1a over each tensor's values (its contiguous bytes on the CPU; a CUDA
// tensor is copied to the CPU first); a fake tensor shows "fake" instead.
class DebugMode : public DispatchMode {
 public:
  // `print`: also write each line to the dispatcher's log sink (stderr unless set).
  explicit DebugMode(bool print = false) : print_(print) {}
  void dispatch(const OperatorHandle& op, Stack& stack) override;
  std::string name() const override { return "DebugMode"; }
  const std::vector<std::string>& lines() const { return lines_; }
  std::string str() const;  // the lines, each ending in a newline

 private:
  bool print_;
  std::vector<std::string> lines_;
};

// The FNV-1a hash DebugMode prints for a tensor (16 hex digits), or "fake".
std::string content_hash(const Tensor& t);

}  // namespace mt
