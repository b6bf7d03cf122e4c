// SPDX-License-Identifier: MIT
// Two dispatch modes that ship with the library: FlopCounterMode (FLOPs per op and per
// scope, from formulas registered per op) and DebugMode (one line per op: shapes, dtypes
// and a hash of each tensor's contents, so two runs can be diffed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dispatcher/mode.h"

namespace mt {

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
