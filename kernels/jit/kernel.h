// SPDX-License-Identifier: MIT
// What a GPU kernel is made of, for users of mt::jit: the spec to compile (KernelSpec: a
// source, its name expressions, options, headers), a loaded kernel (Kernel) and launch
// dimensions (Dim3); then a user's own kernel with its typed launch (UserKernel) and the
// autotuner (Autotuner). The kernel cache, NVRTC and the module loader behind them are
// internal (kernels/jit/module.h, cache.h, nvrtc.h) and not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/cuda_device/layout.h"
#include "runtime/tensor.h"

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

// Your own CUDA kernel, launched with C++ values: mt::jit::kernel(source, "my_silu<float>")
// compiles it through the kernel cache for the device of the tensors it gets, and
// launch(config, args...) turns tensors into device pointers and scalars into their own
// type, checking count and types against the kernel's signature before launching.
// Note [Typed launch] in user_kernel.cpp says where the signature comes from.

// Where and how to launch. stream nullptr: the current stream of the tensors' device.
struct LaunchConfig {
  Dim3 grid;
  Dim3 block = 256;
  unsigned shared = 0;  // dynamic shared memory, bytes
  CUstream_st* stream = nullptr;
};

// Blocks of `block` threads that cover n items, one item a thread: ceil(n / block), at
// least 1 (so n == 0 still launches a valid grid); throws past gridDim.x's limit.
unsigned grid_for(int64_t n, unsigned block = 256);
// A grid for a grid-stride loop over n items on cuda:device: enough blocks to fill every
// SM `blocks_per_sm` times, fewer when n is small.
unsigned grid_stride_for(int64_t n, int device, unsigned block = 256, int blocks_per_sm = 8);

// Passes a tensor that is not contiguous (the kernel reads its strides itself). Without
// it, launch refuses a non-contiguous tensor: a kernel indexing x[i] would silently read
// the wrong elements of a transposed view (the tutorial's third pitfall).
struct AllowStrided {
  const Tensor& tensor;
};
inline AllowStrided allow_strided(const Tensor& t) { return {t}; }

// One launch argument as the kernel receives it: its bytes, and what it was in C++.
struct KernelArg {
  enum class Kind { Tensor, Integer, Floating, Bool, Other };
  Kind kind = Kind::Other;
  const char* cxx_type = "";  // "int", "double", "mt::StridedLayout"; tensors: "Tensor"
  alignas(8) unsigned char bytes[sizeof(StridedLayout)] = {};
  size_t size = 0;
  const Tensor* tensor = nullptr;  // Kind::Tensor
  bool allow_strided = false;
  long double number = 0;  // Integer/Floating/Bool: the value, for conversions
  bool is_unsigned = false;
};

template <typename T>
KernelArg make_kernel_arg(const T& v);

// A user's kernel: one __global__ function (name expression) of one source. Cheap to
// copy (copies share the compiled state); thread-safe.
class UserKernel {
 public:
  UserKernel(KernelSpec spec, std::string name_expression);

  // Launches on the device of the tensor arguments (cuda:0 if there are none).
  template <typename... Args>
  void launch(const LaunchConfig& config, const Args&... args) const {
    KernelArg packed[] = {make_kernel_arg(args)..., KernelArg{}};
    launch_packed(config, packed, sizeof...(Args));
  }
  // Checks the arguments against the signature compiled for compute capability `arch`
  // (major * 10 + minor), without a GPU: the error launch would give, or nothing.
  template <typename... Args>
  void check_args(int arch, const Args&... args) const {
    KernelArg packed[] = {make_kernel_arg(args)..., KernelArg{}};
    check_packed(parameters(arch), packed, sizeof...(Args), /*device=*/-1);
  }

  // The kernel's parameter types as the compiler lowered them, e.g. {"float const*",
  // "float*", "long long"}; empty with known() false for an extern "C" kernel, whose
  // name carries no types (then launch checks nothing: declare it without extern "C").
  struct Parameters {
    bool known = false;
    std::vector<std::string> types;
  };
  Parameters parameters(int arch) const;

  const std::string& name_expression() const;
  const KernelSpec& spec() const;
  // Compiles (through the cache) and loads the kernel on cuda:device.
  const Kernel& on(int device) const;

 private:
  void launch_packed(const LaunchConfig& config, KernelArg* args, size_t n) const;
  // Checks args against params and converts scalars in place to the parameter's type.
  void check_packed(const Parameters& params, KernelArg* args, size_t n, int device) const;
  struct State;
  std::shared_ptr<State> state_;
};

// kernel(source, "my_silu<float>"): the file name in messages is the kernel's name with
// ".cu"; options default to default_options().
UserKernel kernel(std::string source, std::string name_expression,
                  std::vector<std::string> options = default_options());
UserKernel kernel(KernelSpec spec, std::string name_expression);

// The parameter types of a demangled kernel signature, "void f<float>(float const*, int)"
// -> {"float const*", "int"}; exposed for the tests.
std::vector<std::string> split_parameter_types(std::string_view demangled);

}  // namespace mt::jit

namespace mt::detail {
jit::KernelArg tensor_arg(const Tensor& t, bool allow_strided);
template <typename T>
constexpr const char* scalar_type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_same_v<T, char>)
    return "char";
  else if constexpr (std::is_same_v<T, signed char>)
    return "signed char";
  else if constexpr (std::is_same_v<T, unsigned char>)
    return "unsigned char";
  else if constexpr (std::is_same_v<T, short>)
    return "short";
  else if constexpr (std::is_same_v<T, unsigned short>)
    return "unsigned short";
  else if constexpr (std::is_same_v<T, int>)
    return "int";
  else if constexpr (std::is_same_v<T, unsigned>)
    return "unsigned int";
  else if constexpr (std::is_same_v<T, long>)
    return "long";
  else if constexpr (std::is_same_v<T, unsigned long>)
    return "unsigned long";
  else if constexpr (std::is_same_v<T, long long>)
    return "long long";
  else if constexpr (std::is_same_v<T, unsigned long long>)
    return "unsigned long long";
  else if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else
    return nullptr;
}
}  // namespace mt::detail

namespace mt::jit {

template <typename T>
KernelArg make_kernel_arg(const T& v) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return mt::detail::tensor_arg(v, false);
  } else if constexpr (std::is_same_v<T, AllowStrided>) {
    return mt::detail::tensor_arg(v.tensor, true);
  } else if constexpr (std::is_arithmetic_v<T>) {
    static_assert(mt::detail::scalar_type_name<T>() != nullptr, "unsupported scalar type");
    KernelArg a;
    a.kind = std::is_same_v<T, bool>       ? KernelArg::Kind::Bool
             : std::is_floating_point_v<T> ? KernelArg::Kind::Floating
                                           : KernelArg::Kind::Integer;
    a.cxx_type = mt::detail::scalar_type_name<T>();
    a.size = sizeof(T);
    std::memcpy(a.bytes, &v, sizeof(T));
    a.number = static_cast<long double>(v);
    a.is_unsigned = std::is_unsigned_v<T>;
    return a;
  } else if constexpr (std::is_same_v<T, StridedLayout>) {
    KernelArg a;
    a.cxx_type = "mt::StridedLayout";
    a.size = sizeof(T);
    std::memcpy(a.bytes, &v, sizeof(T));
    return a;
  } else if constexpr (std::is_pointer_v<T>) {
    static_assert(!std::is_pointer_v<T>,
                  "launch: pass a Tensor, not a raw pointer: the launch checks its device, "
                  "dtype and layout");
    return {};
  } else {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(StridedLayout),
                  "launch: arguments are Tensors, arithmetic scalars, mt::StridedLayout or "
                  "small trivially copyable structs");
    KernelArg a;
    a.cxx_type = "struct";
    a.size = sizeof(T);
    std::memcpy(a.bytes, &v, sizeof(T));
    return a;
  }
}

// The autotuner: an op with several correct ways to run (tile sizes, block shapes) names
// them as candidates under a key of its own; the first call of a key on a device times every
// candidate with CUDA events and keeps the fastest, in memory and in a file beside the kernel
// cache, so later calls (and later processes) run the winner at once.
//
//   std::vector<jit::TuneCandidate> c = {{"rows=2", [&] { launch(2); }},
//                                        {"rows=1", [&] { launch(1); }}};
//   jit::autotuner().run(fmt::format("my::op {} D{} S{}", dtype, D, jit::pow2_bucket(S)), c,
//                        device);
//
// Note [Autotuner] in autotune.cpp says what a tuning costs and how the choices stay
// consistent across threads and processes.

// One way to run the op. `run` launches one full, correct run on the device's current
// stream (whichever candidate runs last leaves right outputs): a candidate whose kernel
// accumulates into its outputs zeroes them itself.
struct TuneCandidate {
  std::string name = {};  // unique among the key's candidates; no tab, newline or comma
  std::function<void()> run = {};
};

// How candidates are measured. cuda_event_timing() is the default; tests inject their own.
struct TuneTiming {
  // The device as part of every key: "sm_90 NVIDIA H200" (compute capability and name).
  std::function<std::string(int device)> device_tag = {};
  // Milliseconds of each of `reps` calls of run on cuda:device (one event pair a call).
  std::function<std::vector<double>(int device, const std::function<void()>& run, int reps)>
      time_ms = {};
  // True while the device's work cannot be timed (a CUDA graph capture): no tuning then.
  std::function<bool(int device)> busy = {};
};
TuneTiming cuda_event_timing();

struct AutotuneConfig {
  // false: every key takes its first candidate, nothing is timed (MT_AUTOTUNE=0).
  bool enabled = true;
  // Candidate names to use wherever a key has one, untimed (MT_AUTOTUNE_FORCE=a,b: A/B
  // benches); a key with none of them is tuned as usual.
  std::vector<std::string> force = {};
  // The winners on disk, one line each; empty: memory only.
  std::string file = {};
  int warmup = 1;    // untimed calls of each candidate first (the first compiles its kernels)
  int reps = 5;      // timed calls of each candidate; the median counts
  bool log = false;  // one line a tuning or disk hit through the dispatcher's log sink
  // MT_AUTOTUNE (1, the default, or 0), MT_AUTOTUNE_FORCE, MT_LOG=autotune; the file is
  // autotune.tsv in the kernel cache's directory (CacheConfig::from_env: MT_KERNEL_CACHE,
  // XDG_CACHE_HOME, HOME; none with MT_KERNEL_CACHE=0). Throws mt::Error on a bad value.
  static AutotuneConfig from_env();
};

// What a key ran, and why.
struct TuneChoice {
  // Tuned: timed here; Disk: a line of the file; Forced: by name (config or the call);
  // Default: the first candidate (tuning off, or the device busy capturing a graph).
  enum class Source { Tuned, Disk, Forced, Default };
  std::string name = {};
  size_t index = 0;
  Source source = Source::Default;
  std::vector<std::string> candidates = {};
  std::vector<double> ms = {};  // Tuned, Disk: median ms of each candidate (inf: it threw)
};
const char* source_name(TuneChoice::Source source);  // "tuned", "disk", "forced", "default"

struct AutotuneStats {
  uint64_t tunings = 0;     // keys timed
  uint64_t disk_hits = 0;   // keys whose winner came from the file
  uint64_t timed_runs = 0;  // candidate calls made to time them (warm-up, timed, final)
};

class Autotuner {
 public:
  explicit Autotuner(AutotuneConfig config, TuneTiming timing = cuda_event_timing());
  ~Autotuner();
  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  // Runs the candidate the key takes on cuda:device and returns its index: the call's
  // `force` (a name; ignored when no candidate has it), else the config's, else the first
  // when tuning is off, else the winner remembered in memory or on disk (for the same
  // device and candidate names), else it times them all (Note [Autotuner]), keeps the
  // fastest (a tie: the earlier one), and runs it once more. A candidate that throws while
  // being timed, or whose times are not finite and non-negative, loses; when all lose, the
  // first one's error is thrown. Thread-safe: threads asking for one key at once time it
  // once and run one winner. A candidate that runs its own key again, or has no function,
  // is an mt::Error. The file is not read or written when its directory is not this user's
  // alone (jit::cache_dir_problem).
  size_t run(std::string_view key, const std::vector<TuneCandidate>& candidates, int device = 0,
             std::string_view force = {});

  // What the last run() of the key on cuda:device took; nothing before one.
  std::optional<TuneChoice> choice(std::string_view key, int device = 0) const;

  AutotuneConfig config() const;
  void set_enabled(bool on);
  void set_force(std::vector<std::string> names);
  AutotuneStats stats() const;
  // Forgets the choices kept in memory (the file stays).
  void clear_memory();

 private:
  std::string full_key(std::string_view key, int device) const;
  std::optional<TuneChoice> load(const std::string& tag, std::string_view key,
                                 const std::vector<std::string>& names);
  void store(const std::string& tag, std::string_view key, const TuneChoice& c);
  void warn(const std::string& problem);

  struct State;  // the timing, the choices and their locks (autotune.cpp)
  std::unique_ptr<State> state_;
};

// The process's autotuner, configured from the environment on first use.
Autotuner& autotuner();

// A shape bucket: the smallest power of two at least n (1 for n <= 1).
int64_t pow2_bucket(int64_t n);

}  // namespace mt::jit
