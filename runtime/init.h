// SPDX-License-Identifier: MIT
// The library's one initialization hook: Note [Library initialization].
#pragma once

namespace mt::detail {

// Note [Library initialization]
// Who registers what, and when. The lower layers need what the top of the library
// provides: the dispatcher's first user expects the built-in ops, and cuda::copy, fill
// and rand/randn on a device need JIT-compiled kernels for what a memcpy or memset cannot
// do. So there is one hook, and nothing else in a lower layer names anything above it:
//  - What: initialize_library(), declared here and defined at the top of the library
//    (kernels/register_builtins.cpp). It installs the Autograd and Trace fallbacks
//    (autograd/), registers every built-in op (kernels/ops/*.cpp, through custom_op as a
//    user's op would) and installs the runtime's device hooks (kernels/cuda_host/device_hooks.cpp).
//  - When: once, on the first call of ensure_initialized(). That is called by
//    mt::dispatcher() (any lookup, registration or call of an op, a user's too) and by
//    runtime/cuda/copy.cpp before it looks for a device hook. Dispatcher::singleton() does
//    not call it: Library and custom_op register through that, and user MT_LIBRARY blocks
//    may run at static-initialization time, before main.
//  - Not from static initializers: a static library drops an object file that nothing
//    refers to, and they run in no defined order.
//  - Threads: other threads wait until the first call returns; the initializing thread
//    reaches ensure_initialized() again (the built-ins register through dispatcher()) and
//    returns at once. If initialization throws, the next call tries again.
// No layer includes a header of one above it (DESIGN's table; tools/lint/check_layers.py), and
// no object of one needs a symbol that only a layer above defines but this hook
// (tools/lint/check_layers.py --link).
void ensure_initialized();

// The initialization itself (kernels/register_builtins.cpp). Call ensure_initialized().
void initialize_library();

}  // namespace mt::detail
