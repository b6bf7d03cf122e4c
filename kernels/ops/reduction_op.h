// SPDX-License-Identifier: MIT
// mt::reduction_op: a reduction from expressions (mt::jit::reduction), registered as an op.
//   auto sumsq = mt::reduction_op("app::sumsq", {.map = "x * x"});
//   Tensor s = sumsq(x);                     // every dim
//   Tensor r = sumsq.call({&x, 1}, {1});     // or mt::call<Tensor>("app::sumsq", x, dims, false)
// One call gives the op its schema, "sumsq(Tensor x, int[] dim=[], bool keepdim=False) ->
// Tensor", CPU, CUDA and fake kernels, and a backward derived symbolically from the map and
// post expressions (Note [Reduction ops] in reduction_op.cpp; max and min split the gradient
// among ties, prod handles zeros as PyTorch does), itself made of ops, so gradients of any
// order work (for maps of one or two inputs).
#pragma once

#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/reduction.h"
#include "runtime/tensor.h"

namespace mt {

struct ReductionOpOptions {
  // false: no autograd formula (calling it on inputs that require grad is an error that
  // says so): for a map without a derivative (floor) or of more than 6 inputs.
  bool differentiable = true;
};

class ReductionOp {
 public:
  // op(x), op(x, y): every tensor, reduced over every dim.
  template <typename... Ts>
  Tensor operator()(const Tensor& first, const Ts&... rest) const {
    const Tensor in[] = {first, rest...};
    return call(in);
  }
  Tensor call(std::span<const Tensor> inputs, std::vector<int64_t> dims = {},
              bool keepdim = false) const;

  const std::string& name() const;  // "app::sumsq"
  std::string schema() const;  // "app::sumsq(Tensor x, int[] dim=[], bool keepdim=False) -> Tensor"
  const jit::Reduction& kernel() const;
  // The backward's expressions in the pointwise language: one `out = ...` body per input,
  // the gradient of the map over the inputs and `grad` (the output's gradient broadcast
  // back, times d post / d acc).
  std::vector<std::string> backward_bodies() const;

  struct State;

 private:
  friend ReductionOp reduction_op(std::string_view, jit::ReductionSpec, ReductionOpOptions,
                                  std::source_location);
  std::shared_ptr<State> state_;
};

// Defines `name` ("namespace::op") as the reduction `spec` (its .name is set to `name`).
// The handle owns the registrations, like mt::pointwise_op's: they are undone when the
// last copy of it (and of every autograd graph through the op) is destroyed.
ReductionOp reduction_op(std::string_view name, jit::ReductionSpec spec,
                         ReductionOpOptions options = {},
                         std::source_location loc = std::source_location::current());

}  // namespace mt
