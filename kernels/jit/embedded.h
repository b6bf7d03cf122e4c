// SPDX-License-Identifier: MIT
// The device sources of kernels/cuda_device, embedded into the library at build time by
// tools/build/embed_sources.py ("silu.cu", "copy.cu", "common.cuh", "layout.h").
#pragma once

#include <string_view>
#include <vector>

namespace mt::jit {

// The text of an embedded file; throws mt::Error listing the names if there is none.
std::string_view embedded_source(std::string_view name);
bool has_embedded_source(std::string_view name);
// All embedded file names, sorted.
std::vector<std::string_view> embedded_source_names();

}  // namespace mt::jit
