// SPDX-License-Identifier: MIT
// Kernels on a GPU: compile (through the kernel cache) for the device's own
// architecture, load the module once per device, look up the function, launch.
// Built-in kernels name an embedded .cu file; users pass their own source string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/cache.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/nvrtc.h"

namespace mt::jit {

// What a launch of a user's kernel (UserKernel::launch) says of a fake argument, after
// "argument N"; mt::compile's capture recognizes the error by it (kernels/compile/capture.cpp).
inline constexpr const char* kFakeArgumentText = "is a fake tensor (shapes only, no data)";

// The kernel `name_expression` ("silu_fwd<float>") of `spec` on cuda:device, compiled
// for sm_{major}{minor} (or PTX for the newest older arch NVRTC knows), loaded once.
// Thread-safe. The reference stays valid for the life of the process, so callers
// on a hot path keep it instead of asking again.
const Kernel& get_kernel(int device, const KernelSpec& spec, std::string_view name_expression);

// The compile request get_kernel makes for a device of compute capability `arch`.
CompileRequest kernel_request(const KernelSpec& spec, int arch, std::string_view name_expression);

}  // namespace mt::jit
