// SPDX-License-Identifier: MIT
// The op every compile-fail case registers autograd for: two Tensor inputs, one output.
// Only autograd/custom_op.h is included, so each case parses quickly.
#pragma once

#include "autograd/custom_op.h"

// Never run, only compiled.
inline mt::Tensor mul2(const mt::Tensor& a, const mt::Tensor&) { return a; }

inline auto make_mul2() { return mt::custom_op("compile_fail::mul2", mul2); }
