// SPDX-License-Identifier: MIT
// The CUDA driver API as minitensor uses it: a table of entry points resolved at run time
// (libcuda.so.1 is opened with dlopen on first use), error checking, the primary context
// of each device and its current stream. For code that talks to the driver directly
// (kernels/jit loads modules and launches through driver()); everything else uses cuda.h.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

#include "runtime/cuda/cuda.h"

namespace mt::cuda {

// Every driver entry point minitensor calls, named after the driver API. cuda.h maps
// some names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the members follow the
// same macros, so `driver().cuMemAlloc(...)` calls the version this header declares.
// Note [Driver entry points] in driver.cpp says how they are resolved.
struct DriverApi {
  // Initialisation, versions, errors.
  decltype(&::cuInit) cuInit;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion;
  decltype(&::cuGetErrorName) cuGetErrorName;
  decltype(&::cuGetErrorString) cuGetErrorString;
  // Devices.
  decltype(&::cuDeviceGet) cuDeviceGet;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount;
  decltype(&::cuDeviceGetName) cuDeviceGetName;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute;
  decltype(&::cuDeviceTotalMem) cuDeviceTotalMem;
  // Contexts.
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice;
  decltype(&::cuCtxSynchronize) cuCtxSynchronize;
  // Streams and events.
  decltype(&::cuStreamCreate) cuStreamCreate;
  decltype(&::cuStreamDestroy) cuStreamDestroy;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize;
  decltype(&::cuStreamQuery) cuStreamQuery;
  decltype(&::cuStreamWaitEvent) cuStreamWaitEvent;
  decltype(&::cuEventCreate) cuEventCreate;
  decltype(&::cuEventRecord) cuEventRecord;
  decltype(&::cuEventSynchronize) cuEventSynchronize;
  decltype(&::cuEventQuery) cuEventQuery;
  decltype(&::cuEventElapsedTime) cuEventElapsedTime;
  decltype(&::cuEventDestroy) cuEventDestroy;
  // Memory.
  decltype(&::cuMemAlloc) cuMemAlloc;
  decltype(&::cuMemFree) cuMemFree;
  decltype(&::cuMemGetInfo) cuMemGetInfo;
  decltype(&::cuMemcpyHtoDAsync) cuMemcpyHtoDAsync;
  decltype(&::cuMemcpyDtoHAsync) cuMemcpyDtoHAsync;
  decltype(&::cuMemcpyDtoDAsync) cuMemcpyDtoDAsync;
  decltype(&::cuMemsetD8Async) cuMemsetD8Async;
  decltype(&::cuMemsetD32Async) cuMemsetD32Async;
  // Modules and launches.
  decltype(&::cuModuleLoadData) cuModuleLoadData;
  decltype(&::cuModuleLoadDataEx) cuModuleLoadDataEx;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction;
  decltype(&::cuModuleGetGlobal) cuModuleGetGlobal;
  decltype(&::cuModuleUnload) cuModuleUnload;
  decltype(&::cuLaunchKernel) cuLaunchKernel;
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx;
  decltype(&::cuFuncGetAttribute) cuFuncGetAttribute;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute;
  decltype(&::cuOccupancyMaxActiveBlocksPerMultiprocessor)
      cuOccupancyMaxActiveBlocksPerMultiprocessor;
  // Stream capture and CUDA graphs (graph.cpp; Note [CUDA graph capture]).
  decltype(&::cuStreamBeginCapture) cuStreamBeginCapture;
  decltype(&::cuStreamEndCapture) cuStreamEndCapture;
  decltype(&::cuStreamIsCapturing) cuStreamIsCapturing;
  decltype(&::cuThreadExchangeStreamCaptureMode) cuThreadExchangeStreamCaptureMode;
  decltype(&::cuGraphInstantiateWithFlags) cuGraphInstantiateWithFlags;
  decltype(&::cuGraphLaunch) cuGraphLaunch;
  decltype(&::cuGraphExecDestroy) cuGraphExecDestroy;
  decltype(&::cuGraphDestroy) cuGraphDestroy;
  decltype(&::cuGraphGetNodes) cuGraphGetNodes;
  decltype(&::cuGraphNodeGetType) cuGraphNodeGetType;
  // Optional (null where the driver lacks them; not counted in kNumDriverEntries): the
  // kernel names of a captured graph's nodes (Graph::node_kinds), CUDA 12.3 drivers on.
  decltype(&::cuGraphKernelNodeGetParams) cuGraphKernelNodeGetParams = nullptr;
  decltype(&::cuFuncGetName) cuFuncGetName = nullptr;
};

// The loaded driver. Throws mt::Error("[cuda] CUDA is unavailable: <reason>") where
// is_available() is false.
const DriverApi& driver();

// Throws mt::Error("[cuda] cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)")
// when r != CUDA_SUCCESS. `call` is the driver function's name or the checked expression;
// the message keeps the cuXxx name found in it.
void check(CUresult r, const char* call);
// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", for messages that add their own context.
std::string error_text(CUresult r);

namespace detail {
// Throws unless CUDA is available and 0 <= index < device_count().
void check_device(int index);

// The capture state of one device (Note [CUDA graph capture] in graph.cpp). A Graph sets
// the stream it captures on (nullptr when it ends); the runtime's synchronizing calls
// check it and, while it is set, throw through refuse_during_capture, which also records
// the first refusal so that capture_end fails with it instead of instantiating a graph
// with work missing.
CUstream capture_stream(int index);
void set_capture_stream(int index, CUstream s);
[[noreturn]] void refuse_during_capture(int index, const std::string& what, const std::string& fix);
std::string take_capture_refusal(int index);  // and forget it

// The caching allocator's private pools for CUDA graphs (allocator.cpp). begin_pool
// makes a pool that serves every allocation on `stream` (the capture stream) until
// end_pool_routing; release_pool (after the graph's work is done) returns its cached
// blocks to the driver and hands the blocks still in use to the general allocator.
uint64_t begin_pool(int index, CUstream stream);
void end_pool_routing(int index, uint64_t pool);
size_t pool_bytes(int index, uint64_t pool);
void release_pool(int index, uint64_t pool) noexcept;
}  // namespace detail

}  // namespace mt::cuda

// MT_CU_CHECK(driver().cuMemFree(p)): runs the call and throws naming it if it fails.
#define MT_CU_CHECK(expr) ::mt::cuda::check((expr), #expr)

namespace mt::cuda {

// Makes the primary context of `index` current on this thread for the guard's lifetime
// (retaining it on first use) and restores the previous one after. The second form takes
// a context already known (a kernel keeps its own): one cuCtxGetCurrent, and no switch when
// that context is current, the usual case.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(CUcontext ctx);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  CUcontext prev_ = nullptr;
  bool switched_ = false;
};

// The primary context of `index`, retained once for the life of the process.
CUcontext primary_context(int index);

// The stream minitensor's work on `index` goes to. Each device has one non-default
// stream of its own, created on first use; set_current_stream replaces it for the whole
// process (not per thread, unlike PyTorch), and nullptr restores the device's own.
CUstream current_stream(int index);
void set_current_stream(int index, CUstream s);

// Sets the current stream of `index` for its lifetime, then restores the previous one.
class StreamGuard {
 public:
  StreamGuard(int index, CUstream s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int index_;
  CUstream prev_;
};

}  // namespace mt::cuda
