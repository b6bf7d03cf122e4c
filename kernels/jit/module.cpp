// SPDX-License-Identifier: MIT
#include "kernels/jit/module.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kernels/jit/embedded.h"
#include "runtime/error.h"

#if defined(MT_HAVE_CUDA)
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#endif

namespace mt::jit {

CompileRequest kernel_request(const KernelSpec& spec, int arch, std::string_view name_expression) {
  CompileRequest r;
  r.name = spec.name;
  r.source = spec.source.empty() ? std::string(embedded_source(spec.name)) : spec.source;
  if (spec.name_expressions.empty()) {
    r.name_expressions = {std::string(name_expression)};
  } else {
    MT_CHECK(std::find(spec.name_expressions.begin(), spec.name_expressions.end(),
                       name_expression) != spec.name_expressions.end(),
             "[jit] '{}' is not among the name expressions of '{}'; add it to "
             "KernelSpec::name_expressions (or leave them empty to compile kernels one by one)",
             name_expression, spec.name);
    r.name_expressions = spec.name_expressions;
  }
  r.options = spec.options;
  r.arch = arch;
  r.headers = spec.headers;
  r.arch_specific = spec.arch_specific;
  return r;
}

#if defined(MT_HAVE_CUDA)

namespace {

// Everything that tells one kernel from another; short for built-ins (no source text).
std::string identity(int device, const KernelSpec& spec, std::string_view expr) {
  std::string id = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f", device, expr, spec.name, spec.source);
  for (const auto& e : spec.name_expressions) id += e + '\x1e';
  id += '\x1f';
  for (const auto& o : spec.options) id += o + '\x1e';
  id += '\x1f';
  for (const auto& h : spec.headers) id += h.name + '\x1e' + h.text + '\x1e';
  return id + (spec.arch_specific ? "a" : "");
}

struct KernelSlot {
  std::mutex mutex;
  std::unique_ptr<Kernel> kernel;
};

std::mutex g_kernels_mutex;
std::unordered_map<std::string, std::shared_ptr<KernelSlot>> g_kernels;  // never erased
std::mutex g_modules_mutex;
std::unordered_map<std::string, CUmodule> g_modules;  // "device/cache key"; never unloaded

// Loads a CUBIN or PTX once per device and cache key; PTX goes through the driver's JIT.
CUmodule load_module(int device, const std::string& key, const CompileResult& res) {
  std::lock_guard<std::mutex> lock(g_modules_mutex);
  const std::string id = fmt::format("{}/{}", device, key);
  if (auto it = g_modules.find(id); it != g_modules.end()) return it->second;
  // Note [Arch-specific targets]: an sm_90a CUBIN runs on a 9.0 device and nowhere else.
  if (res.target.ends_with('a')) {
    const cuda::DeviceProps& props = cuda::device_props(device);
    MT_CHECK(res.target == fmt::format("sm_{}{}a", props.major, props.minor),
             "[jit] '{}' was compiled for the arch-specific target {}, which runs on that "
             "compute capability only; cuda:{} is {}.{}: compile it for this device (get_kernel "
             "does) or run it on a matching GPU",
             res.name, res.target, device, props.major, props.minor);
  }
  char error_log[4096] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(uintptr_t(sizeof(error_log) - 1))};
  CUmodule mod = nullptr;
  const CUresult r = cuda::driver().cuModuleLoadDataEx(&mod, res.binary.data(), 2, opts, values);
  MT_CHECK(r == CUDA_SUCCESS, "[jit] cuModuleLoadDataEx failed for '{}' ({}) on cuda:{}: {}{}{}",
           res.name, res.target, device, cuda::error_text(r), error_log[0] ? "\n" : "", error_log);
  g_modules.emplace(id, mod);
  return mod;
}

}  // namespace

const Kernel& get_kernel(int device, const KernelSpec& spec, std::string_view name_expression) {
  std::shared_ptr<KernelSlot> slot;
  {
    const std::string id = identity(device, spec, name_expression);
    std::lock_guard<std::mutex> lock(g_kernels_mutex);
    auto& s = g_kernels[id];
    if (!s) s = std::make_shared<KernelSlot>();
    slot = s;
  }
  std::lock_guard<std::mutex> fill(slot->mutex);
  if (slot->kernel) return *slot->kernel;

  const cuda::DeviceProps& props = cuda::device_props(device);  // checks the index
  const CompileRequest request =
      kernel_request(spec, props.major * 10 + props.minor, name_expression);
  const std::shared_ptr<const CompileResult> res = kernel_cache().get(request);
  const std::string& lowered = res->lowered_name(name_expression);

  cuda::DeviceGuard guard(device);
  auto k = std::make_unique<Kernel>();
  k->module_ = load_module(device, cache_key(request), *res);
  const CUresult r = cuda::driver().cuModuleGetFunction(&k->function_, k->module_, lowered.c_str());
  MT_CHECK(r == CUDA_SUCCESS, "[jit] cuModuleGetFunction('{}' = {}) failed in '{}' on cuda:{}: {}",
           name_expression, lowered, spec.name, device, cuda::error_text(r));
  k->context_ = cuda::primary_context(device);
  k->device_ = device;
  k->name_expression_ = std::string(name_expression);
  k->lowered_name_ = lowered;
  k->target_ = res->target;
  slot->kernel = std::move(k);
  return *slot->kernel;
}

// Note [Dynamic shared memory above 48 KiB]
// A kernel may take more than 48 KiB of dynamic shared memory (up to the device's
// max_shared_per_block_optin) only after cuFuncSetAttribute raises its limit; launch does
// that the first time a kernel asks for more than it was allowed, so a user's kernel just
// passes LaunchConfig::shared.
static void raise_dynamic_shared_limit(CUfunction f, unsigned shared_bytes, const std::string& name,
                                       int device) {
  static std::mutex mu;
  static std::unordered_map<CUfunction, unsigned> allowed;
  std::lock_guard<std::mutex> lock(mu);
  unsigned& now = allowed[f];
  if (shared_bytes <= std::max(now, 48u * 1024u)) return;
  const CUresult r = cuda::driver().cuFuncSetAttribute(
      f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared_bytes));
  MT_CHECK(r == CUDA_SUCCESS,
           "[jit] {} asks for {} B of dynamic shared memory on cuda:{}, more than the device "
           "allows a block ({} B): {}",
           name, shared_bytes, device, cuda::device_props(device).max_shared_per_block_optin,
           cuda::error_text(r));
  now = shared_bytes;
}

int Kernel::registers() const {
  int n = 0;
  const CUresult r = cuda::driver().cuFuncGetAttribute(&n, CU_FUNC_ATTRIBUTE_NUM_REGS, function_);
  MT_CHECK(r == CUDA_SUCCESS, "[jit] {}: cannot read its register count on cuda:{}: {}",
           name_expression_, device_, cuda::error_text(r));
  return n;
}

void Kernel::launch(Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream_st* stream,
                    void** args) const {
  cuda::DeviceGuard guard(context_);
  if (shared_bytes > 48u * 1024u)
    raise_dynamic_shared_limit(function_, shared_bytes, name_expression_, device_);
  const CUresult r =
      cuda::driver().cuLaunchKernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                    shared_bytes, stream, args, nullptr);
  MT_CHECK(r == CUDA_SUCCESS,
           "[jit] launching {} on cuda:{} (grid {}x{}x{}, block {}x{}x{}, {} B shared) failed: {}",
           name_expression_, device_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
           shared_bytes, cuda::error_text(r));
}

#else  // !MT_HAVE_CUDA

const Kernel& get_kernel(int device, const KernelSpec& spec, std::string_view name_expression) {
  MT_ERROR(
      "[jit] cannot load '{}' from '{}' on cuda:{}: minitensor was built without CUDA "
      "(MT_HAVE_CUDA is not defined); rebuild with the CUDA toolkit installed",
      name_expression, spec.name, device);
}

void Kernel::launch(Dim3, Dim3, unsigned, CUstream_st*, void**) const {
  MT_ERROR("[jit] cannot launch {}: minitensor was built without CUDA", name_expression_);
}

#endif

}  // namespace mt::jit
