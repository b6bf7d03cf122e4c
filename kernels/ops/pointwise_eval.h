// SPDX-License-Identifier: MIT
// The pointwise expressions behind ops: each elementwise row's forward and backward parsed
// once, a program evaluated with dispatched ops (the rows' backwards: so they differentiate
// again), and the registry mt::compile reads to fuse an op by its name (rows and users'
// mt::pointwise_op alike). Not a public header.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/elementwise_rows.h"
#include "kernels/jit/expr.h"
#include "runtime/tensor.h"

namespace mt::ops {

// Row fn's forward: inputs x (and y), scalars s (Scalar and Binary rows), output out.
const jit::expr::Program& row_forward(ew::Fn fn);
// Row fn's backward: inputs x (and y) and g, the same scalars, outputs gx (and gy).
const jit::expr::Program& row_backward(ew::Fn fn);

// Whether any output of p reads input `input`.
bool reads_input(const jit::expr::Program& p, int input);

// Evaluates p with dispatched ops (mt::add, mt::exp, ...): `in` for p's inputs, `scalars`
// for its scalars. Values that depend on no tensor are computed as numbers, so a select
// on scalars (pow's exponent 0) picks its branch here. Only the outputs whose `wanted`
// entry is true are computed (all when `wanted` is empty); the others are undefined.
// A construct with no op (a comparison or select on tensors, erf, ...) is an mt::Error.
std::vector<Tensor> eval_with_ops(std::string_view op, const jit::expr::Program& p,
                                  std::span<const Tensor> in, std::span<const double> scalars,
                                  std::span<const bool> wanted = {});

// What mt::compile needs to fuse a call of an elementwise op: its schema's first `tensors`
// arguments are the program's inputs, the next `scalars` ones its scalars (fewer than the
// program has: the rest are 1, a Binary row's alpha).
struct PointwiseFormula {
  int tensors = 0;
  int scalars = 0;
  jit::expr::Program program;
};
// The formula of the op named `op` ("mt::exp", "app::softplus"), or null.
std::shared_ptr<const PointwiseFormula> pointwise_formula(std::string_view op);
// Adds (or, with a null formula, removes) a user op's formula.
void set_pointwise_formula(std::string_view op, std::shared_ptr<const PointwiseFormula> f);

}  // namespace mt::ops
