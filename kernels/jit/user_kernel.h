// SPDX-License-Identifier: MIT
// Your own CUDA kernel, launched with C++ values: mt::jit::kernel(source, "my_silu<float>")
// compiles it through the kernel cache for the device of the tensors it gets, and
// launch(config, args...) turns tensors into device pointers and scalars into their own
// type, checking count and types against the kernel's signature before launching.
// Note [Typed launch] in user_kernel.cpp says where the signature comes from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/cuda_device/layout.h"
#include "kernels/jit/kernel.h"
#include "runtime/tensor.h"

namespace mt::jit {

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

}  // namespace mt::jit
