// SPDX-License-Identifier: MIT
// A pointwise kernel from one expression, PyTorch's jiterator idea:
//   auto silu = mt::jit::pointwise("my_silu", "x / (1.0f + expf(-x))");
//   Tensor y = silu(x);
// The expression (Note [Pointwise expressions] in expr.cpp) becomes a functor over the
// templates of kernels/cuda_device/pointwise.cuh, compiled by NVRTC through the kernel cache for
// each dtype and layout it meets: every floating dtype (16-bit ones compute in float),
// broadcasting, strided views, 16-byte packs when aligned, the current stream. On CPU
// tensors the same parsed expression is evaluated on the host, so code and tests that
// run without a GPU go through the same call.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace mt::detail {
struct JitAccess;  // the parsed expressions behind the kernel (kernels/jit/expr.h, internal)
}  // namespace mt::detail

namespace mt::jit {

struct PointwiseSpec {
  std::string name;                       // in messages and the kernel's name: "my_silu"
  std::vector<std::string> inputs;        // tensor operands, in call order: {"g", "x"}
  std::vector<std::string> scalars = {};  // numbers passed with each call: {"alpha"}
  std::vector<std::string> outputs = {"out"};
  // Statements and a final expression, e.g. "s = sigmoid(x); out = g * s * (1 + x * (1 - s));"
  std::string body;
};

// The kernel variants a call can take (kernels/cuda_device/pointwise.cuh).
enum class PointwiseVariant { Vec, Flat, Strided };
inline constexpr int kPointwiseUnroll = 2;  // packs a thread a loop in the vec kernel

class Pointwise {
 public:
  // Outputs get the inputs' broadcast shape and their promoted dtype (integer and bool
  // inputs give float32). Inputs on one device; fake inputs give fake outputs (shapes
  // only), so the same call serves as an op's fake kernel.
  std::vector<Tensor> call(std::span<const Tensor> inputs,
                           std::span<const double> scalars = {}) const;
  // f(x), f(g, x): every input, no scalars, one output.
  template <typename... Ts>
  Tensor operator()(const Tensor& first, const Ts&... rest) const {
    const Tensor in[] = {first, rest...};
    return single(call(in));
  }

  const PointwiseSpec& spec() const;  // inputs filled in (the free names, when inferred)
  // The generated CUDA source, and the name expression of one kernel in it:
  // "pointwise_vec<float, pw_my_silu, 1, 1, 2>".
  const std::string& cuda_source() const;
  std::string name_expression(DType t, PointwiseVariant v) const;
  // Every kernel the source can instantiate (floating dtypes times variants), for a test
  // that compiles them all to CUBIN.
  std::vector<std::string> name_expressions() const;

 private:
  friend struct mt::detail::JitAccess;
  friend Pointwise pointwise(PointwiseSpec spec);
  friend Pointwise pointwise(std::string name, std::string expression);
  Tensor single(std::vector<Tensor> outs) const;
  struct State;
  std::shared_ptr<const State> state_;
};

// The inputs are the expression's free names, in order of first appearance; one output.
Pointwise pointwise(std::string name, std::string expression);
Pointwise pointwise(PointwiseSpec spec);

}  // namespace mt::jit
