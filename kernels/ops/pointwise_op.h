// SPDX-License-Identifier: MIT
// mt::pointwise_op: an elementwise op from one expression, registered as a real op.
//   auto softplus = mt::pointwise_op("app::softplus", "log1p(exp(x))");
//   Tensor y = softplus(x);          // or mt::call<Tensor>("app::softplus", x)
// One call gives the op its schema, CPU and CUDA kernels (mt::jit::pointwise), a fake
// kernel, and a backward derived symbolically from the expression (Note [Deriving a
// backward]), itself an op with a derived backward, so gradients of any order work;
// mt::compile fuses it like a built-in elementwise op. The built-in rows of
// kernels/elementwise_table.h come from the same expressions.
#pragma once

#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/pointwise.h"
#include "kernels/jit/reduction.h"
#include "runtime/tensor.h"

namespace mt {

struct PointwiseOpOptions {
  // The tensor arguments, in call order; empty: the expression's free names, in order of
  // first appearance.
  std::vector<std::string> inputs = {};
  // Float arguments after the tensors ("(Tensor x, float beta) -> Tensor"), not
  // differentiated.
  std::vector<std::string> scalars = {};
  // A backward written by hand: one expression per input, over the inputs, the scalars
  // and `grad` (the output's gradient), e.g. {"grad * sigmoid(x)"}. Empty: derived.
  std::vector<std::string> backward = {};
  // false: no autograd formula (calling it on inputs that require grad is an error that
  // says so).
  bool differentiable = true;
};

class PointwiseOp {
 public:
  // op(x), op(x, y), op(x, beta): the tensors, then the scalars.
  template <typename... A>
  Tensor operator()(const A&... args) const {
    std::vector<Tensor> ts;
    std::vector<double> ss;
    (push(ts, ss, args), ...);
    return call(ts, ss);
  }
  Tensor call(std::span<const Tensor> inputs, std::span<const double> scalars = {}) const;

  const std::string& name() const;  // "app::softplus"
  std::string schema() const;       // "app::softplus(Tensor x) -> Tensor"
  const std::string& expression() const;
  // The backward's body in the pointwise language: `grad_x = grad * ...;` per input
  // (derived or as given). Throws as the backward would for a non-differentiable op.
  std::string backward_body() const;

  struct State;

 private:
  friend PointwiseOp pointwise_op(std::string_view, std::string_view, PointwiseOpOptions,
                                  std::source_location);
  static void push(std::vector<Tensor>& ts, std::vector<double>&, const Tensor& t) {
    ts.push_back(t);
  }
  template <typename S>
  requires std::is_arithmetic_v<S>
  static void push(std::vector<Tensor>&, std::vector<double>& ss, S s) { ss.push_back(double(s)); }
  std::shared_ptr<State> state_;
};

// Defines `name` ("namespace::op") computing `expression` (Note [Pointwise expressions] in
// kernels/jit/expr.cpp) elementwise, with broadcasting and type promotion as the built-in
// ops. The handle owns the registrations, like mt::custom_op's: they are undone when the
// last copy of it is destroyed.
PointwiseOp pointwise_op(std::string_view name, std::string_view expression,
                         PointwiseOpOptions options = {},
                         std::source_location loc = std::source_location::current());

// mt::reduction_op: a reduction from expressions (mt::jit::reduction), registered as an op.
//   auto sumsq = mt::reduction_op("app::sumsq", {.map = "x * x"});
//   Tensor s = sumsq(x);                     // every dim
//   Tensor r = sumsq.call({&x, 1}, {1});     // or mt::call<Tensor>("app::sumsq", x, dims, false)
// One call gives the op its schema, "sumsq(Tensor x, int[] dim=[], bool keepdim=False) ->
// Tensor", CPU, CUDA and fake kernels, and a backward derived symbolically from the map and
// post expressions (Note [Reduction ops] in reduction_op.cpp; max and min split the gradient
// among ties, prod handles zeros as PyTorch does), itself made of ops, so gradients of any
// order work (for maps of one or two inputs).

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
