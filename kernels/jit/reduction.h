// SPDX-License-Identifier: MIT
// A reduction kernel from expressions, CuPy's ReductionKernel idea:
//   auto sumsq = mt::jit::reduction({.name = "sumsq", .map = "x * x", .reduce = "sum"});
//   Tensor s = sumsq(x);                      // every dim
//   Tensor r = sumsq.call({&x, 1}, {1}, true);  // dim 1, kept
// Each element of the inputs' broadcast shape goes through `map` (the pointwise language,
// Note [Pointwise expressions] in expr.cpp), the values of each output element are
// combined by `reduce` starting from the identity, and `post` turns the accumulated value
// `acc` (and `n`, the number of values reduced) into the output: "acc / n" is a mean,
// "sqrt(acc)" an L2 norm. Note [Reductions] in reduction.cpp.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace mt::detail {
struct JitAccess;  // the parsed expressions behind the kernel (kernels/jit/expr.h, internal)
}  // namespace mt::detail

namespace mt::jit {

struct ReductionSpec {
  std::string name = {};                 // in messages and the kernels' names: "sumsq"
  std::string map;                       // over the inputs: "x * x", "abs(x - y)"
  std::string reduce = "sum";            // "sum", "prod", "max" or "min"
  std::string post = "";                 // over acc and n: "acc / n", "sqrt(acc)"; empty: acc
  std::optional<double> identity = {};   // the start value; unset: 0, 1, -inf or +inf
  std::vector<std::string> inputs = {};  // tensor operands in call order; empty: map's free names
};

enum class ReduceOp { Sum, Prod, Max, Min };

// The kernels a call can take (the generated source's templates): one block a row, the
// same with 16-byte loads, the first pass of a split row (several blocks a row, plain or
// 16-byte loads), the pass that combines the split's partial values, and a split row in one
// launch (its last block combines the partial values; plain or 16-byte loads).
enum class ReductionVariant { Rows, RowsVec, Split, SplitVec, Final, SplitLast, SplitLastVec };

class Reduction {
 public:
  // Reduces the inputs' broadcast shape over `dims` (negative dims count from the end;
  // empty: every dim), keeping them as size 1 when keepdim. The output has the inputs'
  // promoted dtype (integer and bool inputs give float32); 16-bit dtypes and float32
  // accumulate in float, float64 in double. Inputs on one device; fake inputs give a fake
  // output. An empty reduction gives post(identity) with n = 0.
  Tensor call(std::span<const Tensor> inputs, std::span<const int64_t> dims = {},
              bool keepdim = false) const;
  // f(x), f(x, y): every input, reduced over every dim.
  template <typename... Ts>
  Tensor operator()(const Tensor& first, const Ts&... rest) const {
    const Tensor in[] = {first, rest...};
    return call(in);
  }

  const ReductionSpec& spec() const;  // inputs filled in, post as given
  ReduceOp reduce_op() const;
  double identity() const;
  // The generated CUDA source, and the name expression of one kernel in it:
  // "reduce_rows<float, rd_sumsq, 1, false>".
  const std::string& cuda_source() const;
  std::string name_expression(DType t, ReductionVariant v) const;
  // Every kernel the source can instantiate (floating dtypes times variants), for a test
  // that compiles them all to CUBIN.
  std::vector<std::string> name_expressions() const;

 private:
  friend struct mt::detail::JitAccess;
  friend Reduction reduction(ReductionSpec spec);
  struct State;
  std::shared_ptr<const State> state_;
};

Reduction reduction(ReductionSpec spec);

// The output shape of reducing `shape` over dims (wrapped, each once) for the reduction
// `name`, and the wrapped dims in ascending order; an empty list means every dim. For
// callers that allocate before calling (an op's fake kernel, a backward).
std::vector<int64_t> reduction_dims(std::string_view name, const Shape& shape,
                                    std::span<const int64_t> dims);
Shape reduction_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace mt::jit
