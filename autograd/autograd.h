// SPDX-License-Identifier: MIT
// The tape: one Node per recorded op call, holding the backward closure, the saved
// tensors with their versions, and where each input's gradient goes; the engine that walks
// it (backward, grad) and grad mode (NoGradGuard), below.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"
#include "runtime/tensor.h"

namespace mt {

struct Node;

// Note [Saved tensor versions]
// A tensor saved for backward remembers its storage's version counter. Every in-place
// op bumps the counter, so at backward a different version means the values the
// gradient formula needs were overwritten; the engine then refuses with an error that
// names the op that saved the tensor, rather than computing a wrong gradient.
// A saved *output* of the node is kept without its grad_fn (that would be a cycle)
// and gets it back on unpack, so double backward through it still works.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  // The tensor as saved; throws if it was modified in place since (op names the saver).
  Tensor unpack(const std::shared_ptr<Node>& owner, std::string_view op) const;
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;  // detached: shares storage and version counter
  uint32_t version_ = 0;
  bool is_output_ = false;
  bool requires_grad_ = false;
  uint32_t output_nr_ = 0;
};

// Where the gradient for one tensor input of a node goes.
struct InputSlot {
  bool requires_grad = false;
  std::shared_ptr<Node> producer;  // the node that made the input, or null for a leaf
  uint32_t output_nr = 0;
  std::weak_ptr<TensorImpl> leaf;  // the leaf to accumulate .grad into
  Shape sizes;                     // for checking the gradient's shape
  DType dtype = DType::Float32;
  Device device;
};

// Metadata of one output, to make zeros when no gradient reaches it.
struct OutputMeta {
  Shape sizes;
  DType dtype = DType::Float32;
  Device device;
  bool fake = false;
};

struct Node : std::enable_shared_from_this<Node> {
  // Given one gradient per output (zeros where none arrived), returns one gradient per
  // tensor input (undefined where the input needs none).
  using BackwardFn = std::function<std::vector<Tensor>(Node&, const std::vector<Tensor>&)>;

  Node() = default;
  Node(const Node&) = delete;  // inputs and outputs may point into the node itself
  Node& operator=(const Node&) = delete;
  virtual ~Node() = default;

  std::string name;  // the op, e.g. "mt::silu"
  uint64_t sequence_nr = 0;
  std::span<InputSlot> inputs;    // one per tensor input (list elements flattened)
  std::span<OutputMeta> outputs;  // one per output
  BackwardFn backward;
  bool released = false;

  // Frees the closure and what it saved (after a backward without retain_graph).
  virtual void release();
  // How many tensors the node keeps for backward (a custom op's: its context's).
  virtual size_t saved_count() const { return 0; }

  // Gives the node heap slots for n_in inputs and n_out outputs. Subclasses with a
  // fixed arity point inputs and outputs at slots of their own instead (no allocation).
  void allocate_slots(size_t n_in, size_t n_out);

 private:
  std::vector<InputSlot> input_slots_;
  std::vector<OutputMeta> output_slots_;
};

namespace detail {
// Names `node` (whose inputs and outputs spans are already sized), fills its input slots
// from `inputs` (pointers, so that recording copies no handle) and appends it to this
// thread's tape.
void record_node(const std::shared_ptr<Node>& node, std::string_view name,
                 std::span<const Tensor* const> inputs);
// Makes and records a node with an input slot per tensor in `inputs` and `num_outputs`
// output slots.
std::shared_ptr<Node> make_node(std::string name, std::span<const Tensor> inputs,
                                size_t num_outputs);
// Marks `out` as output `nr` of `node` (requires grad, grad_fn = node).
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t nr);
// The same for the last output: moves `node` into out's grad_fn instead of copying it (an
// atomic reference-count pair fewer). `node` is left as it was when `out` takes no gradient
// (undefined, or not floating), so the caller's node is still alive then; after a move, use
// a plain pointer to the node, which out keeps alive.
void set_history(const Tensor& out, std::shared_ptr<Node>&& node, uint32_t nr);
// Whether any of the tensors requires grad.
bool any_requires_grad(std::span<const Tensor> ts);

}  // namespace detail

// The live entries of this thread's tape, oldest first.
std::vector<std::shared_ptr<Node>> tape_entries();
// The tape as text (one line an entry) and as a Graphviz DOT graph.
std::string dump_tape();
std::string dump_tape_dot();

// The autograd engine: backward and grad walk the tape in reverse from the outputs' entries;
// grad mode says whether op calls record entries at all.

// Accumulates d(loss)/d(leaf) into every leaf's .grad. A non-scalar loss needs
// grad_output. Without retain_graph the entries walked are freed; create_graph records
// the backward computation itself, so its gradients can be differentiated again.
void backward(const Tensor& loss, const Tensor& grad_output = {}, bool retain_graph = false,
              bool create_graph = false);

struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;  // an input no output depends on gets an undefined Tensor
};
// The gradients of outputs with respect to inputs, without touching any .grad.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions opts = {});

// Sets every tensor's .grad to undefined.
void zero_grad(const std::vector<Tensor>& tensors);

// Grad mode: whether op calls record tape entries. No-grad excludes the Autograd key
// from dispatch on this thread, so an op call under it costs nothing extra.

inline bool grad_enabled() { return !local_dispatch_keys().excluded.has(DispatchKey::Autograd); }

// Turns recording off for its scope: mt::NoGradGuard g; (SGD updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : guard_(DispatchKey::Autograd) {}

 private:
  ExcludeDispatchKeyGuard guard_;
};

// Turns recording back on inside a NoGradGuard.
class EnableGradGuard {
 public:
  EnableGradGuard() : saved_(detail::t_local_keys.excluded) {
    detail::t_local_keys.excluded = saved_.remove(DispatchKey::Autograd);
  }
  ~EnableGradGuard() { detail::t_local_keys.excluded = saved_; }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

}  // namespace mt
