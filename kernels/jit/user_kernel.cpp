// SPDX-License-Identifier: MIT
#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "kernels/jit/cache.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/module.h"
#include "runtime/cuda/cuda.h"
#include "runtime/error.h"

#if defined(MT_HAVE_CUDA)
#include "runtime/cuda/driver.h"
#endif

namespace mt::jit {

// Note [Typed launch]
// cuLaunchKernel takes an array of pointers to the arguments and trusts it: pass an int
// where the kernel takes a long long, or a float64 tensor to a float* parameter, and the
// kernel reads garbage without a word. NVRTC tells us the kernel's parameter types for
// free: a name expression's lowered name is the Itanium-mangled symbol
// ("_Z7my_siluIfEvPKfPfx"), and the C++ runtime's demangler turns it back into
// "void my_silu<float>(float const*, float*, long long)". launch() compares each argument
// with that list before launching: a tensor must be a CUDA tensor on the launch's device,
// contiguous unless wrapped in allow_strided(), and match the pointee type (void* takes
// any dtype); a scalar converts to the parameter's type only when its value survives
// (int -> long long, 0.5 -> float; 0.1 -> float or 2.5 -> int is an error). An extern "C"
// kernel's symbol carries no types, so it is launched unchecked.

namespace {

constexpr int kUserKernelSlots = 16;  // devices with a cached kernel pointer

std::string demangle(const std::string& lowered) {
  int status = 0;
  char* out = abi::__cxa_demangle(lowered.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return {};
  std::string s(out);
  std::free(out);
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

// "float const*" -> "float"; "mt::Half*" -> "mt::Half"; not a pointer: "".
std::string pointee(std::string t) {
  if (t.empty() || t.back() != '*') return {};
  t.pop_back();
  for (std::string_view q : {" const", "const ", " volatile", "volatile "}) {
    size_t p;
    while ((p = t.find(q)) != std::string::npos) t.erase(p, q.size());
  }
  return trim(t);
}

bool pointee_matches(const std::string& p, DType t) {
  if (p == "void") return true;
  auto any = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), p) != names.end();
  };
  switch (t) {
    case DType::Float32:
      return any({"float"});
    case DType::Float64:
      return any({"double"});
    case DType::Float16:
      return any({"mt::Half", "__half", "half"});
    case DType::BFloat16:
      return any({"mt::BFloat16", "__nv_bfloat16", "nv_bfloat16"});
    case DType::Int64:
      return any({"long long", "long", "unsigned long long", "unsigned long"});
    case DType::Bool:
      return any({"bool"});
  }
  return false;
}

// The kernel type to instantiate for a dtype, for hints.
std::string_view hint_type(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Float16:
      return "mt::Half";
    case DType::BFloat16:
      return "mt::BFloat16";
    case DType::Int64:
      return "long long";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

struct IntType {
  int bytes;
  bool is_unsigned;
};
// The integer parameter types a demangled signature spells, with their size on the GPU
// (LP64: long is 64-bit there as on the host).
bool int_param(const std::string& p, IntType* out) {
  static const std::map<std::string, IntType, std::less<>> kInts = {
      {"char", {1, false}},
      {"signed char", {1, false}},
      {"unsigned char", {1, true}},
      {"short", {2, false}},
      {"unsigned short", {2, true}},
      {"int", {4, false}},
      {"unsigned int", {4, true}},
      {"long", {8, false}},
      {"unsigned long", {8, true}},
      {"long long", {8, false}},
      {"unsigned long long", {8, true}},
  };
  auto it = kInts.find(p);
  if (it == kInts.end()) return false;
  *out = it->second;
  return true;
}

bool scalar_param(const std::string& p) {
  IntType it;
  return int_param(p, &it) || p == "float" || p == "double" || p == "bool";
}

std::string describe(const KernelArg& a) {
  if (a.kind == KernelArg::Kind::Tensor) {
    const Tensor& t = *a.tensor;
    if (!t.defined()) return "an undefined Tensor";
    return fmt::format("a Tensor ({}, {}{})", t.dtype(), t.device(), t.is_fake() ? ", fake" : "");
  }
  if (a.kind == KernelArg::Kind::Floating)
    return fmt::format("{} {}", a.cxx_type, double(a.number));
  if (a.kind == KernelArg::Kind::Integer || a.kind == KernelArg::Kind::Bool)
    return fmt::format("{} {}", a.cxx_type, (long long)a.number);
  return a.cxx_type;
}

bool printable_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

template <typename T>
void put(KernelArg& a, T v) {
  std::memcpy(a.bytes, &v, sizeof(T));
  a.size = sizeof(T);
}

}  // namespace

unsigned grid_for(int64_t n, unsigned block) {
  MT_CHECK(block > 0, "[jit] grid_for: block must be positive");
  const int64_t blocks = std::max<int64_t>(1, (n + int64_t(block) - 1) / int64_t(block));
  MT_CHECK(blocks <= 0x7fffffff,
           "[jit] grid_for: {} items in blocks of {} need {} blocks, past gridDim.x's limit "
           "(2^31 - 1); use a grid-stride loop with grid_stride_for",
           n, block, blocks);
  return unsigned(blocks);
}

unsigned grid_stride_for(int64_t n, int device, unsigned block, int blocks_per_sm) {
  const int64_t cap = int64_t(cuda::device_props(device).sm_count) * std::max(1, blocks_per_sm);
  const int64_t need = std::max<int64_t>(1, (n + int64_t(block) - 1) / int64_t(block));
  return unsigned(std::min(cap, need));
}

std::vector<std::string> split_parameter_types(std::string_view d) {
  // The parameter list is the last top-level parenthesized group.
  if (d.empty() || d.back() != ')') return {};
  int depth = 0;
  size_t open = std::string_view::npos;
  for (size_t i = d.size(); i-- > 0;) {
    if (d[i] == ')') ++depth;
    if (d[i] == '(' && --depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string_view::npos) return {};
  std::string_view inner = d.substr(open + 1, d.size() - open - 2);
  std::vector<std::string> out;
  int nest = 0;
  size_t start = 0;
  for (size_t i = 0; i <= inner.size(); ++i) {
    const char c = i < inner.size() ? inner[i] : ',';
    if (c == '<' || c == '(' || c == '[') ++nest;
    if (c == '>' || c == ')' || c == ']') --nest;
    if (c == ',' && nest == 0) {
      std::string t = trim(inner.substr(start, i - start));
      if (!t.empty() && t != "void") out.push_back(t);
      start = i + 1;
    }
  }
  return out;
}

struct UserKernel::State {
  KernelSpec spec;
  std::string name_expression;
  std::mutex mutex;
  std::map<int, Parameters> params_by_arch;
  struct Slot {
    std::atomic<const Kernel*> kernel{nullptr};
    Parameters params;  // written before kernel is published
  };
  Slot slots[kUserKernelSlots];
};

UserKernel::UserKernel(KernelSpec spec, std::string name_expression)
    : state_(std::make_shared<State>()) {
  MT_CHECK(!name_expression.empty(),
           "[jit] kernel(): the name expression is empty; pass the "
           "__global__ function's name, e.g. \"my_silu<float>\"");
  // NVRTC pastes the name expression into code it generates, and the source's name goes
  // into messages: neither may carry a line break, a terminal escape or a NUL.
  MT_CHECK(printable_ascii(name_expression),
           "[jit] kernel(): the name expression {} holds a byte outside printable ASCII; pass "
           "the __global__ function's name as C++ spells it, e.g. \"my_silu<float>\"",
           mt::quoted(name_expression));
  MT_CHECK(!spec.name.empty(),
           "[jit] kernel(): the KernelSpec has no name; set .name (e.g. "
           "\"my_silu.cu\"), it is what messages call the source");
  MT_CHECK(printable_ascii(spec.name),
           "[jit] kernel(): the KernelSpec's name {} holds a byte outside printable ASCII; name "
           "the source like a file, e.g. \"my_silu.cu\"",
           mt::quoted(spec.name));
  const size_t nul = spec.source.find('\0');
  MT_CHECK(nul == std::string::npos,
           "[jit] kernel(): the source of '{}' holds a NUL byte at offset {}, where NVRTC would "
           "stop reading it; remove it",
           spec.name, nul);
  state_->spec = std::move(spec);
  state_->name_expression = std::move(name_expression);
}

const std::string& UserKernel::name_expression() const { return state_->name_expression; }
const KernelSpec& UserKernel::spec() const { return state_->spec; }

UserKernel kernel(std::string source, std::string name_expression,
                  std::vector<std::string> options) {
  MT_CHECK(!source.empty(), "[jit] kernel({}): the source is empty", mt::quoted(name_expression));
  std::string base = name_expression.substr(0, name_expression.find('<'));
  KernelSpec spec{.name = base + ".cu", .source = std::move(source)};
  spec.options = std::move(options);
  return UserKernel(std::move(spec), std::move(name_expression));
}

UserKernel kernel(KernelSpec spec, std::string name_expression) {
  return UserKernel(std::move(spec), std::move(name_expression));
}

UserKernel::Parameters UserKernel::parameters(int arch) const {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (auto it = state_->params_by_arch.find(arch); it != state_->params_by_arch.end())
      return it->second;
  }
  const CompileRequest req = kernel_request(state_->spec, arch, state_->name_expression);
  const auto res = kernel_cache().get(req);
  const std::string& lowered = res->lowered_name(state_->name_expression);
  Parameters p;
  if (lowered.starts_with("_Z")) {
    const std::string d = demangle(lowered);
    if (!d.empty()) {
      p.known = true;
      p.types = split_parameter_types(d);
    }
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->params_by_arch[arch] = p;
  return p;
}

void UserKernel::check_packed(const Parameters& params, KernelArg* args, size_t n,
                              int device) const {
  const std::string& name = state_->name_expression;
  for (size_t i = 0; i < n; ++i) {
    KernelArg& a = args[i];
    if (a.kind != KernelArg::Kind::Tensor) continue;
    const Tensor& t = *a.tensor;
    MT_CHECK(t.defined(), "[jit] {}: argument {} is an undefined Tensor", name, i + 1);
    MT_CHECK(!t.is_fake(),
             "[jit] {}: argument {} {}, so no kernel can run on it; under FakeMode call the op's "
             "fake kernel instead (register_fake)",
             name, i + 1, kFakeArgumentText);
    MT_CHECK(device < 0 || (t.is_cuda() && t.device().index == device),
             "[jit] {}: argument {} is a Tensor on {}, but the kernel launches on cuda:{}; move "
             "it with .to(mt::Device(\"cuda:{}\"))",
             name, i + 1, t.device(), device, device);
    MT_CHECK(a.allow_strided || t.is_contiguous(),
             "[jit] {}: argument {} (a Tensor of sizes {} and strides {}) is not contiguous, so "
             "a kernel that indexes it as x[i] would read the wrong elements; pass "
             "x.contiguous(), or mt::jit::allow_strided(x) if the kernel reads strides itself",
             name, i + 1, t.sizes(), t.strides());
  }
  if (!params.known) return;
  const auto& p = params.types;
  auto signature = [&] { return fmt::format("({})", fmt::join(p, ", ")); };
  MT_CHECK(p.size() == n, "[jit] {} takes {} argument{} {}, but the launch passed {}", name,
           p.size(), p.size() == 1 ? "" : "s", signature(), n);
  for (size_t i = 0; i < n; ++i) {
    KernelArg& a = args[i];
    const std::string& want = p[i];
    auto fail = [&](std::string_view hint) {
      MT_ERROR("[jit] {}: argument {} is {}, but the kernel's parameter {} is {} {}{}{}", name,
               i + 1, describe(a), i + 1, want, signature(), hint.empty() ? "" : "; ", hint);
    };
    const std::string pt = pointee(want);
    switch (a.kind) {
      case KernelArg::Kind::Tensor: {
        const DType t = a.tensor->dtype();
        if (pt.empty()) fail("pass a scalar of that type, or make the parameter a pointer");
        if (!pointee_matches(pt, t))
          fail(fmt::format("convert the tensor with .to(), or instantiate the kernel for {}",
                           hint_type(t)));
        break;
      }
      case KernelArg::Kind::Integer: {
        IntType it;
        if (int_param(want, &it)) {
          const long double v = a.number;
          const long double lo = it.is_unsigned ? 0.0L : -std::ldexp(1.0L, it.bytes * 8 - 1);
          const long double hi = std::ldexp(1.0L, it.bytes * 8 - (it.is_unsigned ? 0 : 1)) - 1;
          if (v < lo || v > hi) fail("the value does not fit that type");
          const unsigned long long bits =
              v < 0 ? (unsigned long long)(long long)v : (unsigned long long)v;
          std::memcpy(a.bytes, &bits, 8);  // little-endian: the low bytes are the value
          a.size = size_t(it.bytes);
        } else if (want == "float" || want == "double") {
          const long double limit = want == "float" ? 16777216.0L : 9007199254740992.0L;
          if (std::fabs(a.number) > limit) fail("the value is not exact in that type");
          if (want == "float")
            put(a, float(a.number));
          else
            put(a, double(a.number));
        } else {
          fail("");
        }
        break;
      }
      case KernelArg::Kind::Floating: {
        if (want == "double") {
          put(a, double(a.number));
        } else if (want == "float") {
          const float f = float(a.number);
          if (!std::isnan(a.number) && (long double)f != a.number)
            fail(fmt::format("{} is not exactly a float: pass a float ({}f)", double(a.number),
                             double(a.number)));
          put(a, f);
        } else {
          fail(scalar_param(want) ? "a floating value does not convert to an integer parameter "
                                    "implicitly; cast it"
                                  : "");
        }
        break;
      }
      case KernelArg::Kind::Bool:
        if (want != "bool") fail("");
        break;
      case KernelArg::Kind::Other:
        if (!pt.empty() || scalar_param(want)) fail("");
        if (std::string_view(a.cxx_type) == "mt::StridedLayout" && want != "mt::StridedLayout")
          fail("");
        break;
    }
  }
}

#if defined(MT_HAVE_CUDA)

const Kernel& UserKernel::on(int device) const {
  const bool cached = device >= 0 && device < kUserKernelSlots;
  if (cached)
    if (const Kernel* k = state_->slots[device].kernel.load(std::memory_order_acquire)) return *k;
  const Kernel& k = get_kernel(device, state_->spec, state_->name_expression);
  if (cached) {
    const auto& props = cuda::device_props(device);
    Parameters p = parameters(props.major * 10 + props.minor);
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->slots[device].kernel.load(std::memory_order_relaxed)) {
      state_->slots[device].params = std::move(p);
      state_->slots[device].kernel.store(&k, std::memory_order_release);
    }
  }
  return k;
}

void UserKernel::launch_packed(const LaunchConfig& config, KernelArg* args, size_t n) const {
  int device = -1;
  for (size_t i = 0; i < n; ++i) {
    if (args[i].kind != KernelArg::Kind::Tensor || !args[i].tensor->defined()) continue;
    const Tensor& t = *args[i].tensor;
    MT_CHECK(t.is_cuda() || t.is_fake(),
             "[jit] {}: argument {} is a Tensor on {}; a CUDA kernel takes CUDA tensors: move it "
             "with .to(mt::Device(\"cuda\")), or register a CPU kernel for CPU tensors",
             state_->name_expression, i + 1, t.device());
    if (device < 0 && t.is_cuda()) device = t.device().index;
  }
  if (device < 0) device = 0;
  const Kernel& k = on(device);
  Parameters uncached;
  const Parameters* params = &uncached;
  if (device < kUserKernelSlots) {
    params = &state_->slots[device].params;
  } else {
    const auto& props = cuda::device_props(device);
    uncached = parameters(props.major * 10 + props.minor);
  }
  check_packed(*params, args, n, device);
  void* ptrs[64];
  MT_CHECK(n <= 64, "[jit] {}: at most 64 arguments, got {}", state_->name_expression, n);
  for (size_t i = 0; i < n; ++i) {
    if (args[i].kind == KernelArg::Kind::Tensor) {
      void* p = args[i].tensor->data_ptr();
      std::memcpy(args[i].bytes, &p, sizeof(p));
    }
    ptrs[i] = args[i].bytes;
  }
  CUstream_st* stream = config.stream ? config.stream : cuda::current_stream(device);
  k.launch(config.grid, config.block, config.shared, stream, ptrs);
}

#else  // !MT_HAVE_CUDA

const Kernel& UserKernel::on(int device) const {
  return get_kernel(device, state_->spec, state_->name_expression);  // throws: no CUDA
}

void UserKernel::launch_packed(const LaunchConfig&, KernelArg*, size_t) const {
  MT_ERROR(
      "[jit] cannot launch {}: minitensor was built without CUDA (MT_HAVE_CUDA is not "
      "defined); rebuild with the CUDA toolkit installed",
      state_->name_expression);
}

#endif

}  // namespace mt::jit

namespace mt::detail {

jit::KernelArg tensor_arg(const Tensor& t, bool allow_strided) {
  jit::KernelArg a;
  a.kind = jit::KernelArg::Kind::Tensor;
  a.cxx_type = "Tensor";
  a.size = sizeof(void*);
  a.tensor = &t;
  a.allow_strided = allow_strided;
  return a;
}

}  // namespace mt::detail
