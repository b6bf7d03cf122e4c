// SPDX-License-Identifier: MIT
// mt::compile: capture a function as a graph of op calls by running it on fake tensors,
// fuse its pointwise chains into generated kernels (with the sum or mean that consumes one),
// and replay it without the dispatcher (torch.compile's capture-and-replay idea in
// miniature; docs/compile.md walks through it).
//
//   mt::Graph g = mt::capture(fn, {x, w});     // fn(inputs) -> outputs, run on fake copies
//   std::printf("%s", g.str().c_str());         // one line a node, like torch.fx
//   auto step = mt::compile(fn);
//   std::vector<Tensor> out = step({x, w});     // guards checked, then the plan replayed
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"
#include "kernels/jit/pointwise.h"
#include "kernels/jit/reduction.h"

namespace mt {

using GraphFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// One value of a graph: what flows between nodes.
struct GraphValue {
  enum class Kind : uint8_t {
    Input,         // inputs[input] of the call
    InputGrad,     // inputs[input].grad() at the start of the call
    Constant,      // a real tensor the function closed over (kept in `constant`)
    Intermediate,  // made by node `producer`
  };
  Kind kind = Kind::Intermediate;
  std::string name;  // "x", "matmul_1": unique in the graph
  int input = -1;
  Tensor constant;
  int producer = -1;
  // The value whose memory this one shares (itself unless made by a view op, or an input
  // that shares storage with an earlier input): in-place writes to one reach all of them.
  int alias_root = -1;
  Shape sizes, strides;
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
};

// One argument of a node, as the schema orders them.
struct GraphArg {
  enum class Kind : uint8_t { Constant, Tensor, TensorList };
  Kind kind = Kind::Constant;
  Value constant;         // Constant: the boxed value (an undefined Tensor for None)
  int value = -1;         // Tensor
  std::vector<int> list;  // TensorList
};

// One op call (or, without an op, a factory: empty_strided, filled when `fill` is set).
struct GraphNode {
  OperatorHandle op;  // op.entry() == nullptr for a factory
  std::vector<GraphArg> args;
  std::vector<int> outputs;  // the values it returned (a Tensor[] return flattened)
  bool returns_list = false;
  std::vector<int> mutated;  // values it writes in place (its schema's Tensor(a!) arguments)
  std::optional<double> fill;
  bool is_factory() const { return op.entry() == nullptr; }
  std::string op_name() const;  // "mt::add.Scalar", or "empty_strided" / "full" for a factory
};

struct Graph {
  std::vector<GraphValue> values;
  std::vector<GraphNode> nodes;  // in the order the function made the calls
  std::vector<int> inputs;       // value of each input of the call
  std::vector<int> outputs;      // values the function returned
  // After the call, input i's .grad is value v (-1: none): for every input that requires
  // grad, so a captured training step leaves .grad as the eager one does.
  std::vector<std::pair<int, int>> grads;

  // One line a value-making node, like torch.fx's printed graph:
  //   graph(x: float32[4, 3], w: float32[3, 2] requires_grad):
  //     matmul: float32[4, 2] = mt::matmul(x, w)
  //     mt::sub_(w, clone, alpha=0.1)  # writes w
  //     return (mean)
  std::string str() const;
  // The same as a Graphviz digraph: values are ellipses (inputs, constants) and nodes boxes.
  std::string dot() const;
  // How often each value is read: as an argument (each time), a returned value or a .grad
  // left behind (2 each, so that such a value never counts as read once).
  std::vector<int> use_counts() const;
};

struct CaptureOptions {
  std::vector<std::string> input_names = {};  // default "x0", "x1", ...
};

// Runs fn once on fake copies of `example_inputs` (same sizes, strides, dtype, device,
// requires_grad; a defined .grad becomes a fake one) with every op call observed through
// the Trace key, and returns the graph of the calls fn made at top level, the backward's
// calls included when fn calls mt::backward. Nothing is computed. An op without a fake
// kernel, or a read of a value (item()), fails with an mt::Error that says why.
Graph capture(const GraphFn& fn, const std::vector<Tensor>& example_inputs,
              const CaptureOptions& opts = {});

// A chain of pointwise ops that becomes one generated kernel (jit::pointwise), or, when
// the mt::sum or mt::mean that reads its root joins it, one jit::reduction.
struct FusionGroup {
  std::vector<int> nodes;  // in graph order; the last one's output is the group's
  int output = -1;
  std::vector<int> inputs;  // the kernel's tensor inputs (values made outside the group)
  std::vector<double> scalars;
  std::string name;               // "fused_sigmoid_mul", "fused_mul_sum"
  std::string body;               // the pointwise expression over i0.., s0..
  jit::Pointwise kernel() const;  // the kernel (parsed from body; compiled on first CUDA use)
  // A reduction group (Note [Reduction fusion] in fuse.cpp): the last node is the mt::sum
  // or mt::mean that reads `reduced` (the pointwise root); body is its map, with every
  // scalar a literal (scalars stays empty), reduced over dims (empty: every dim).
  std::string reduce;  // "sum" or "mean"; empty for a pointwise group
  int reduced = -1;
  std::vector<int64_t> dims;
  bool keepdim = false;
  jit::Reduction reduction() const;  // its kernel: map = body, post "acc / n" for a mean
};
// The groups of two or more nodes that fusion makes of g (Note [Pointwise fusion] and Note
// [Reduction fusion] in fuse.cpp).
std::vector<FusionGroup> fusion_groups(const Graph& g);

struct CompileOptions {
  std::vector<std::string> input_names = {};
  // Fuse pointwise chains. Unset: on CUDA every group (a kernel launch is the cost), on CPU
  // the groups the plan can prepare and others of 4096 elements or more, run by the tile
  // evaluator (Note [CPU fusion] in replay.cpp); true: every group; false: none.
  std::optional<bool> fuse = std::nullopt;
  bool cuda_graph = true;   // on CUDA, replay through mt::cuda::Graph when available
  std::string name = "fn";  // in logs
};

class Compiled {
 public:
  Compiled(GraphFn fn, CompileOptions opts);
  // Checks the guards (sizes, strides, dtype, device, requires_grad, .grad defined, storage
  // sharing of the inputs; grad mode), compiling on a new combination, then replays the plan.
  // Fake inputs run fn itself (shapes only). On the CUDA-graph path the outputs are the graph's own
  // buffers, overwritten by the next call (clone them to keep them), as with torch's CUDA graphs.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  template <typename... Ts>
  std::vector<Tensor> operator()(const Tensor& first, const Ts&... rest) const {
    return (*this)(std::vector<Tensor>{first, rest...});
  }
  int compile_count() const;  // how many guard combinations were compiled
  // The graph and plan of the most recent call ("" before the first).
  std::string graph_str() const;
  std::string plan_str() const;
  size_t num_fusion_groups() const;
  size_t num_nodes() const;  // of the most recent call's graph

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Compiles fn lazily: the first call with each guard combination captures and plans.
// MT_COMPILE=0 (or off, false) in the environment makes the compiled callable run fn
// eagerly; 1, on, true or unset compile; any other value, or an empty fn, is an mt::Error.
Compiled compile(GraphFn fn, CompileOptions opts = {});

}  // namespace mt
