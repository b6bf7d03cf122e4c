// SPDX-License-Identifier: MIT
// The pointwise builder's little language: C-style expressions over named inputs, parsed
// once into a list of single-assignment nodes, from which come both the CUDA functor
// (pointwise.cpp compiles it with NVRTC) and the CPU evaluation, so both devices compute
// the same expression. Note [Pointwise expressions] in expr.cpp gives the grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mt::jit {
class Pointwise;
class Reduction;
namespace expr {
struct Program;
}  // namespace expr
}  // namespace mt::jit

namespace mt::detail {
// Reads the private state of a Pointwise or Reduction (pointwise.cpp, reduction.cpp).
struct JitAccess {
  static const jit::expr::Program& program(const jit::Pointwise& p);
  static const jit::expr::Program& map_program(const jit::Reduction& r);
  static const jit::expr::Program& post_program(const jit::Reduction& r);
};
}  // namespace mt::detail

namespace mt::jit::expr {

enum class Fn : uint8_t {
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Sin,
  Cos,
  Abs,
  Erf,
  Floor,
  Ceil,
  Log1p,
  Expm1,
  Sigmoid,
  Max,
  Min,
  Pow,
  Sign,
  Relu,
};
inline constexpr int kNumFns = int(Fn::Relu) + 1;
int fn_arity(Fn f);
const char* fn_name(Fn f);  // "exp": the name the CUDA source calls (mt::pw::exp)

enum class Op : uint8_t {
  Const,
  Input,
  Scalar,  // leaves
  Neg,
  Not,  // a
  Add,
  Sub,
  Mul,
  Div,
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  And,
  Or,      // a, b
  Select,  // a ? b : c
  Call,    // fn(a) or fn(a, b)
};

struct Node {
  Op op = Op::Const;
  Fn fn = Fn::Exp;
  int a = -1, b = -1, c = -1;  // operand nodes (earlier in the list)
  int index = -1;              // Input / Scalar: which one
  double value = 0;            // Const
  int pos = -1;                // Call: where the call starts in the body (for carets)
};

struct Program {
  std::vector<std::string> inputs, scalars, outputs;
  std::vector<Node> nodes;
  std::vector<int> output_nodes;  // the node each output takes, in outputs' order
  std::string body;               // as written, for messages and the generated source
};

// Parses `body` for the op `name` (named in messages). Unknown names are errors unless
// infer_inputs, which makes each new free name an input in order of first appearance.
// Throws mt::Error with the position and a caret line.
Program parse(std::string_view name, std::string_view body, std::vector<std::string> inputs,
              std::vector<std::string> scalars, std::vector<std::string> outputs,
              bool infer_inputs);

// The body of a device functor: `template <class C> __device__ void operator()(const C* in,
// C* out, const C* s) const { ... }` computing every output from the inputs.
std::string cuda_body(const Program& p);

// Evaluates p over n elements (n <= kChunk) in compute type C (float or double):
// in[k][i] -> out[k][i]; s: the scalars, converted to C.
inline constexpr int64_t kChunk = 1024;
template <typename C>
void eval_chunk(const Program& p, const C* const* in, C* const* out, const C* s, int64_t n,
                std::vector<C>& scratch);

// The same, for many tiles: made once per thread (uniform values and the schedule worked
// out once), then run(in, out, n) per tile of n <= kChunk elements.
// Note [Tile evaluation] in expr.cpp.
template <typename C>
class TileEvaluator {
 public:
  TileEvaluator(const Program& p, const C* s);
  void run(const C* const* in, C* const* out, int64_t n);
  // The tile buffers run uses: nodes whose values are not needed at the same time share one.
  int num_buffers() const;

 private:
  struct Plan;  // the schedule, in expr.cpp
  std::shared_ptr<const Plan> plan_;
  std::vector<C> buf_;  // num_buffers() tiles of kChunk values
};

// The parsed expressions of a jit::pointwise or jit::reduction kernel (their public
// headers keep them out of sight).
inline const Program& program_of(const Pointwise& p) { return mt::detail::JitAccess::program(p); }
inline const Program& map_program_of(const Reduction& r) {
  return mt::detail::JitAccess::map_program(r);
}
inline const Program& post_program_of(const Reduction& r) {
  return mt::detail::JitAccess::post_program(r);
}

}  // namespace mt::jit::expr
