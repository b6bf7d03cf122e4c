// SPDX-License-Identifier: MIT
// The edit distance behind every "did you mean" hint (op names, schema types, the CLI).
#pragma once

#include <cstddef>
#include <string_view>

namespace mt::detail {

// Levenshtein distance: insertions, deletions and substitutions cost 1 each; with
// ignore_case, letters compare without case ("Tensor" and "tensor" are 0 apart).
size_t edit_distance(std::string_view a, std::string_view b, bool ignore_case = false);

}  // namespace mt::detail
