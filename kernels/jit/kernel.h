// SPDX-License-Identifier: MIT
// What a GPU kernel is made of, for users of mt::jit: the spec to compile (KernelSpec: a
// source, its name expressions, options, headers), a loaded kernel (Kernel) and launch
// dimensions (Dim3). The kernel cache, NVRTC and the module loader behind them are
// internal (kernels/jit/module.h, cache.h, nvrtc.h) and not installed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

// The driver's opaque handles, declared as <cuda.h> declares them.
struct CUfunc_st;
struct CUmod_st;
struct CUctx_st;
struct CUstream_st;

namespace mt::jit {

// A file the source may #include "by_name". The embedded common.cuh and
// layout.h are always available (see embedded_headers()).
struct Header {
  std::string name;
  std::string text;
};

// -std=c++17 -default-device -lineinfo (precise math: no --use_fast_math).
const std::vector<std::string>& default_options();

// False where libnvrtc cannot be loaded (or the build had no CUDA headers).
bool nvrtc_available();
// Why nvrtc_available() is false, in one line; empty when it is true.
std::string nvrtc_unavailable_reason();
// MT_LOG=jit from code: one line on stderr each time a kernel is compiled, read from disk
// or found in memory (the kernel cache's log; kernels/jit/cache.h).
void set_cache_log(bool on);

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  constexpr Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT
};

// What to compile. For a built-in kernel, name the embedded file and leave source
// empty: {.name = "silu.cu"}. For your own: {.name = "my_silu.cu", .source = text}.
struct KernelSpec {
  std::string name;
  std::string source;  // empty: embedded_source(name)
  // Compiled together into one module. Empty: just the one get_kernel asks for.
  std::vector<std::string> name_expressions = {};
  std::vector<std::string> options = default_options();
  std::vector<Header> headers = {};  // besides the embedded common.cuh and layout.h
  // Compile for the arch-specific target (sm_90a on a 9.0 device, sm_100a on 10.0) that
  // Hopper-only PTX such as wgmma and setmaxnreg needs; the CUBIN then loads on that
  // compute capability only. Note [Arch-specific targets] in nvrtc.cpp.
  bool arch_specific = false;
};

// A loaded __global__ function on one device. Lives until the process ends.
class Kernel {
 public:
  CUfunc_st* function() const { return function_; }
  int device() const { return device_; }
  const std::string& name_expression() const { return name_expression_; }
  const std::string& lowered_name() const { return lowered_name_; }
  const std::string& target() const { return target_; }  // "sm_90", "sm_90a", "compute_90"
  // Registers a thread as compiled (CU_FUNC_ATTRIBUTE_NUM_REGS): what limits the blocks
  // an SM runs, for benches and tuning.
  int registers() const;

  // cuLaunchKernel with the device's context current; args[i] points at the i-th
  // kernel argument. Throws mt::Error naming the kernel if the launch fails.
  void launch(Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream_st* stream, void** args) const;

 private:
  friend const Kernel& get_kernel(int, const KernelSpec&, std::string_view);
  CUfunc_st* function_ = nullptr;
  CUmod_st* module_ = nullptr;
  CUctx_st* context_ = nullptr;  // the device's primary context, current while it launches
  int device_ = 0;
  std::string name_expression_, lowered_name_, target_;
};

}  // namespace mt::jit
