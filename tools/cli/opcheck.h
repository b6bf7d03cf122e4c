// SPDX-License-Identifier: MIT
// `minitensor opcheck OP [--sample ARGS]...`: opcheck (every test, test_compile included)
// and gradcheck on an op, typically one from a library loaded with --load.
#pragma once

#include <string>
#include <vector>

#include "minitensor.h"

namespace mt::cli {

// One sample's arguments, written as a comma list: randn(3,4) rand(2) ones(5) zeros(2,2)
// (float64 tensors; ':float32' etc. after the ')' picks another dtype), numbers (2, -0.5),
// true/false, none, and int lists [1,2]. Throws mt::Error naming the bad item.
Stack parse_sample(std::string_view text);

// The samples for `op` when none is given: its arguments without a default, each tensor
// randn [3, 4] then [5] (float64), each float 1.5, int 2, bool true. Throws mt::Error when
// an argument has no such value (a list, a string, ...): give --sample then.
std::vector<Stack> default_samples(const FunctionSchema& schema);

// Runs opcheck and, per sample, gradcheck over its floating tensors (as float64); prints a
// report.
// Returns 0 when every test passed, 1 otherwise.
int opcheck_command(const std::string& op, const std::vector<std::string>& samples);

}  // namespace mt::cli
