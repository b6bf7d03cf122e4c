// SPDX-License-Identifier: MIT
// The library's initialization: the fallbacks, the built-in ops and the device hooks,
// run once on first use (Note [Library initialization] in runtime/init.h).
#include "dispatcher/dispatcher.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/ops/folders.h"
#include "kernels/ops/registry.h"
#include "runtime/init.h"

namespace mt {
namespace detail {
void install_autograd_fallback();     // autograd/function.cpp
void install_trace_fallback();        // autograd/trace.cpp
void install_opcheck_compile_test();  // kernels/compile/opcheck_compile.cpp
void install_batched_fallback();      // autograd/vmap.cpp
void install_autocast_fallback();     // autograd/autocast.cpp
}  // namespace detail

namespace ops {
void register_batching_rules();     // kernels/ops/batching.cpp
void register_autocast_policies();  // kernels/ops/autocast_policies.cpp
}  // namespace ops

namespace detail {
void initialize_library() {
  install_autograd_fallback();
  install_trace_fallback();
  install_opcheck_compile_test();
  install_batched_fallback();
  install_autocast_fallback();
  ops::register_binary();
  ops::register_unary();
  ops::register_views();
  ops::register_copy();
  for (const ops::OpFolder& folder : ops::op_folders()) folder.register_ops();
  ops::register_batching_rules();
  ops::register_autocast_policies();
  gpu::install_device_hooks();
}
}  // namespace detail
}  // namespace mt
