// SPDX-License-Identifier: MIT
// Symbolic derivatives of pointwise expressions (Note [Deriving a backward] in derive.cpp):
// the backward of an mt::pointwise_op, and the check that each elementwise row's written
// backward agrees with its forward. Not a public header.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/expr.h"

namespace mt::jit::expr {

// The reverse-mode derivative of p. Its inputs are p's inputs followed by one incoming
// gradient per output of p (named `grad` for a single output, else `grad_<output>`, with a
// trailing `_` until the name is free); its scalars are p's; its outputs are one gradient per input
// of p
// (`grad_<input>`), each the sum over p's outputs of the incoming gradient times the
// partial derivative. Piecewise-constant constructs (comparisons, &&, ||, !, a select's
// condition, sign) contribute zero; floor and ceil have no usable derivative and are an
// mt::Error naming the op, with a caret under the call and the fix (give the backward).
Program derivative(std::string_view op, const Program& p);

// p as a body in the pointwise language (one statement per shared temporary, then one
// assignment per output) that parses back to the same computation.
std::string to_text(const Program& p);

// Output 0 of p as an expression over the given input and scalar texts, for splicing into
// a larger body: temporaries (values read twice) are appended to body as statements
// `<prefix>_<n> = ...;`.
std::string inline_text(const Program& p, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& scalars, std::string_view prefix,
                        std::string& body);

// p with constants folded, x*1, x+0, --x and constant selects simplified, equal nodes
// shared and nodes no output reads dropped.
Program simplify(const Program& p);

}  // namespace mt::jit::expr
