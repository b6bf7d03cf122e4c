// SPDX-License-Identifier: MIT
// The NVRTC boundary: CUDA C++ source in, CUBIN (or PTX) out, or an mt::Error
// carrying NVRTC's log. libnvrtc is opened with dlopen on first use, so this
// works, or says why not, on any machine; no GPU is needed to compile.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/kernel.h"  // Header, default_options()

namespace mt::jit {

struct LoweredName {
  std::string expression;  // "silu_fwd<float>"
  std::string lowered;     // "_Z8silu_fwdIfEvPKT_PS0_x"
};

struct CompileResult {
  std::string name;    // the source's file name, as in messages ("silu.cu")
  std::string target;  // "sm_90" or "sm_90a": binary is a CUBIN; "compute_90": PTX text
  std::string binary;  // CUBIN bytes, or PTX text with its terminating NUL
  std::vector<LoweredName> lowered_names;  // one per name expression, in order
  std::string log;  // NVRTC's log of a successful compile (warnings); usually empty
  double compile_ms = 0;

  bool is_cubin() const { return target.starts_with("sm_"); }
  // The mangled name of a name expression; throws mt::Error if it was not compiled.
  const std::string& lowered_name(std::string_view expression) const;
};

// The loaded library's path and version, e.g. "/usr/local/cuda/lib64/libnvrtc.so.13", {13, 0}.
std::string nvrtc_library_path();
struct NvrtcVersion {
  int major = 0, minor = 0;
};
NvrtcVersion nvrtc_version();
// The architectures NVRTC can emit CUBIN for, ascending: {75, 80, 86, ..., 120}.
std::vector<int> nvrtc_supported_archs();
// What to compile for a device of compute capability `arch` (major * 10 + minor):
// "sm_XX" if NVRTC lists XX, else "compute_YY" (PTX, which the driver JITs) for
// the highest listed YY <= XX. Throws if NVRTC supports nothing that old.
// `arch_specific`: the arch-specific target "sm_XXa" (Note [Arch-specific targets]); throws,
// naming `kernel`, below sm_90 or where NVRTC does not list XX.
std::string nvrtc_target(int arch, bool arch_specific = false, std::string_view kernel = {});

// The embedded headers every compile can include: common.cuh, layout.h.
const std::vector<Header>& embedded_headers();
// The headers a compile sees: `headers`, then the embedded ones they do not replace.
std::vector<Header> all_headers(const std::vector<Header>& headers);

// Compiles `source` (named `name` in messages) for a device of compute capability
// `arch`, instantiating each name expression ("silu_fwd<float>"). `options` go to
// NVRTC as they are, plus --gpu-architecture=nvrtc_target(arch, arch_specific);
// `headers` add to embedded_headers(). Throws mt::Error with the log and the offending
// source lines on a compile error.
CompileResult compile(std::string_view source, std::string_view name,
                      const std::vector<std::string>& name_expressions,
                      const std::vector<std::string>& options, int arch,
                      const std::vector<Header>& headers = {}, bool arch_specific = false);

}  // namespace mt::jit
