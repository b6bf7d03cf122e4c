// SPDX-License-Identifier: MIT
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd.h"
#include "autograd/vmap.h"
#include "dispatcher/dispatcher.h"
#include "dispatcher/library.h"
#include "runtime/fake_observer.h"

namespace mt {
namespace {

using mt::Node;

struct Root {
  Tensor output;
  Tensor grad;
};

// Where grad() wants its answers: a leaf by its impl, a non-leaf by (node, output_nr).
struct Capture {
  std::unordered_map<const TensorImpl*, size_t> leaves;
  std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> nonleaf;
  std::vector<Tensor> grads;
};

Tensor accumulate(const Tensor& have, const Tensor& g) {
  if (!have.defined()) return g;
  if (!g.defined()) return have;
  // mt::add sits in the kernels library, a layer above: call it through the dispatcher.
  static const auto add =
      dispatcher().find_or_throw("mt::add").typed<Tensor(const Tensor&, const Tensor&, double)>();
  return add.call(have, g, 1.0);
}

// Fake zeros and ones come from the factories under FakeMode, so that mt::compile's capture
// sees what they hold (runtime/fake_observer.h, FakeFactoryObserver).
Tensor zeros_for(const mt::OutputMeta& m) {
  std::optional<FakeMode> fake;
  if (m.fake) fake.emplace();
  return zeros(m.sizes, {.dtype = m.dtype, .device = m.device});
}

void accumulate_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g, bool create_graph,
                     Capture* capture) {
  if (capture) {
    auto it = capture->leaves.find(leaf.get());
    if (it != capture->leaves.end())
      capture->grads[it->second] = accumulate(capture->grads[it->second], g);
    return;
  }
  Tensor t(leaf);
  Tensor have = t.grad();
  // A fresh gradient that nothing else references (not the caller's grad_output, not a
  // view, not saved anywhere) becomes .grad as it is, as PyTorch steals it: no copy.
  if (!have.defined() && !create_graph && g.defined() && g.impl_ptr().use_count() == 1 &&
      g.storage() && g.storage().use_count() == 1 && g.is_contiguous() &&
      g.autograd_meta() == nullptr) {
    t.set_grad(g);
    return;
  }
  Tensor next = accumulate(have, g);
  if (!create_graph) next = next.detach();
  // .grad owns contiguous memory: not an expanded view, nor the caller's grad_output
  if (!have.defined() || !next.is_contiguous()) next = next.clone();
  t.set_grad(next);
}

void run_backward(const std::vector<Root>& roots, bool retain_graph, bool create_graph,
                  Capture* capture) {
  // 1. The nodes reachable from the roots, newest first: reverse tape order is a
  //    topological order, because a node's inputs were made before it.
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Root& r : roots) {
    const AutogradMeta* m = r.output.autograd_meta();
    if (m && m->grad_fn && seen.insert(m->grad_fn.get()).second) stack.push_back(m->grad_fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    MT_CHECK(!n->released,
             "[backward] trying to go backward through the graph a second time: the tape entry "
             "of '{}' was freed by the first backward. Pass retain_graph=true to the first "
             "backward (or mt::grad) if you need to go back through it again",
             n->name);
    order.push_back(n);
    for (const auto& in : n->inputs)
      if (in.producer && seen.insert(in.producer.get()).second) stack.push_back(in.producer.get());
  }
  std::sort(order.begin(), order.end(),
            [](const Node* a, const Node* b) { return a->sequence_nr > b->sequence_nr; });

  // 1b. Under mt::grad, only the nodes on a path to one of its inputs run (as torch's
  //     engine does with its exec_info): a gradient nobody asked for is not computed, as
  //     the sum of a parameter's expanded copy that vmap's per-sample gradients would
  //     otherwise reduce away. Oldest first: a node runs when one of its inputs is a wanted
  //     leaf, a wanted non-leaf's node, or a node that runs.
  std::unordered_set<const Node*> runs;
  if (capture) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      for (const auto& in : (*it)->inputs) {
        if (!in.requires_grad) continue;
        bool leads = false;
        if (in.producer) {
          leads =
              runs.count(in.producer.get()) > 0 || capture->nonleaf.count(in.producer.get()) > 0;
        } else if (auto leaf = in.leaf.lock()) {
          leads = capture->leaves.count(leaf.get()) > 0;
        }
        if (leads) {
          runs.insert(*it);
          break;
        }
      }
    }
  }

  // 2. Seed the roots.
  std::unordered_map<const Node*, std::vector<Tensor>> buffers;
  for (const Root& r : roots) {
    const AutogradMeta* m = r.output.autograd_meta();
    if (m && m->grad_fn) {
      auto& buf = buffers[m->grad_fn.get()];
      buf.resize(m->grad_fn->outputs.size());
      buf[m->output_nr] = accumulate(buf[m->output_nr], r.grad);
    } else {  // the root is a leaf itself
      accumulate_leaf(r.output.impl_ptr(), r.grad, create_graph, capture);
    }
  }

  // 3. Walk.
  std::optional<NoGradGuard> no_grad;
  std::optional<EnableGradGuard> with_grad;
  if (create_graph)
    with_grad.emplace();
  else
    no_grad.emplace();
  for (Node* n : order) {
    auto it = buffers.find(n);
    if (it == buffers.end()) continue;
    std::vector<Tensor> grads = std::move(it->second);
    buffers.erase(it);
    grads.resize(n->outputs.size());
    if (capture) {
      auto c = capture->nonleaf.find(n);
      if (c != capture->nonleaf.end())
        for (auto [nr, idx] : c->second)
          capture->grads[idx] = accumulate(capture->grads[idx], grads[nr]);
    }
    if (capture && runs.count(n) == 0) continue;
    bool any_needed = false;
    for (const auto& in : n->inputs) any_needed = any_needed || in.requires_grad;
    if (!any_needed) continue;
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros_for(n->outputs[i]);
    MT_ASSERT(n->backward != nullptr, "node {} has no backward", n->name);
    std::vector<Tensor> in_grads = n->backward(*n, grads);
    MT_CHECK(in_grads.size() == n->inputs.size(),
             "[backward] the backward of '{}' returned {} gradients, but the op has {} tensor "
             "inputs; return one gradient (or an undefined Tensor) per tensor input",
             n->name, in_grads.size(), n->inputs.size());
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const auto& slot = n->inputs[i];
      // Moved, not copied: a fresh gradient that only in_grads holds can then become .grad
      // without a clone (accumulate_leaf checks that nothing else references it).
      Tensor g = std::move(in_grads[i]);
      if (!slot.requires_grad || !g.defined()) continue;
      MT_CHECK(g.sizes() == slot.sizes,
               "[backward] the backward of '{}' returned a gradient of shape {} for input {}, "
               "which has shape {}; each gradient must have its input's shape",
               n->name, g.sizes(), i, slot.sizes);
      MT_CHECK(g.device() == slot.device,
               "[backward] the backward of '{}' returned a gradient on {} for input {}, which "
               "is on {}; return each gradient on its input's device (.to(device))",
               n->name, g.device(), i, slot.device);
      if (g.dtype() != slot.dtype) g = g.to(slot.dtype);  // as PyTorch does: x.grad keeps x's dtype
      if (slot.producer) {
        auto& buf = buffers[slot.producer.get()];
        buf.resize(slot.producer->outputs.size());
        buf[slot.output_nr] = accumulate(buf[slot.output_nr], g);
      } else if (auto leaf = slot.leaf.lock()) {
        accumulate_leaf(leaf, g, create_graph, capture);
      }
    }
  }
  // Only what ran lets go of its saved tensors (as in torch): a node mt::grad did not need
  // can still be gone through by a later backward.
  if (!retain_graph)
    for (Node* n : order)
      if (!capture || runs.count(n) > 0) n->release();
}

Tensor default_grad(const Tensor& out, const Tensor& given, const char* op) {
  if (given.defined()) {
    MT_CHECK(given.sizes() == out.sizes(),
             "[{}] grad_output has shape {} but the output has shape {}", op, given.sizes(),
             out.sizes());
    return given;
  }
  MT_CHECK(out.numel() == 1,
           "[{}] grad can be created implicitly only for scalar outputs, but this output has "
           "shape {}; pass grad_output (for example mt::ones_like(out)) or reduce it first "
           "(mt::sum)",
           op, out.sizes());
  std::optional<FakeMode> fake;
  if (out.is_fake()) fake.emplace();
  return ones_like(out);
}

// The ops whose Autograd entry is now a fallthrough, each with where it was registered: a
// call of one with inputs that require grad goes straight below Autograd and leaves its
// outputs without history.
std::vector<std::string> autograd_fallthroughs() {
  std::vector<std::string> out;
  const size_t k = size_t(DispatchKey::Autograd);
  for (const OperatorName& n : dispatcher().all_ops()) {
    const std::optional<OperatorHandle> h = dispatcher().find(n.str());
    if (!h) continue;
    const DispatchTable& t = h->entry()->table();
    if (t.origin[k] != 0 && t.kernels[k].kind() == KernelFunction::Kind::Fallthrough)
      out.push_back(fmt::format("{} (a fallthrough {}registered at {})", n.str(),
                                t.origin[k] == 2 ? "fallback " : "", t.debug[k]));
  }
  return out;
}

void check_root(const Tensor& out, const char* op) {
  MT_CHECK(out.defined(), "[{}] the output tensor is undefined", op);
  if (out.requires_grad()) return;
  // Inputs that require grad lose their history through an Autograd fallthrough: name it
  // rather than tell the user to call .requires_grad_(), which they may have done.
  // So do they through an Autograd kernel that ran the op below Autograd without recording
  // a node (Note [Autograd kernels that drop history] in dispatcher/library.h).
  std::vector<std::string> dropping = autograd_fallthroughs();
  const bool fallthroughs = !dropping.empty();
  const std::vector<std::string> kernels = detail::dropped_history_kernels();
  dropping.insert(dropping.end(), kernels.begin(), kernels.end());
  if (!dropping.empty())
    MT_ERROR(
        "[{}] the tensor does not require grad and has no grad_fn. If it was computed through "
        "{}, its history was dropped there: {}{}{} (register an autograd formula with "
        "register_autograd instead). Otherwise nothing it was computed from requires grad: "
        "call .requires_grad_() on the leaves before the forward pass, and do not run it under "
        "NoGradGuard",
        op, fmt::join(dropping, ", or "),
        fallthroughs ? "a fallthrough at Autograd records no tape node" : "",
        fallthroughs && !kernels.empty() ? ", and " : "",
        kernels.empty() ? ""
                        : "an Autograd kernel that runs the op below Autograd records no tape "
                          "node by itself");
  MT_ERROR(
      "[{}] the tensor does not require grad and has no grad_fn: nothing it was computed "
      "from requires grad. Call .requires_grad_() on the leaves before the forward pass, "
      "and do not run it under NoGradGuard",
      op);
}

}  // namespace

void backward(const Tensor& loss, const Tensor& grad_output, bool retain_graph, bool create_graph) {
  check_root(loss, "backward");
  run_backward({Root{loss, default_grad(loss, grad_output, "backward")}}, retain_graph,
               create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions opts) {
  MT_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
           "[grad] got {} grad_outputs for {} outputs", grad_outputs.size(), outputs.size());
  if (detail::needs_batched_grad(outputs, inputs)) [[unlikely]]  // inside mt::vmap
    return detail::batched_grad(outputs, inputs, grad_outputs, opts.retain_graph, opts.create_graph,
                                opts.allow_unused);
  std::vector<Root> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_root(outputs[i], "grad");
    roots.push_back(
        {outputs[i],
         default_grad(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], "grad")});
  }
  Capture cap;
  cap.grads.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    MT_CHECK(t.defined() && t.requires_grad(),
             "[grad] input {} does not require grad; only tensors that require grad (leaves "
             "with requires_grad_() or results computed from them) can be differentiated",
             i);
    const AutogradMeta* m = t.autograd_meta();
    if (m->grad_fn) {
      cap.nonleaf[m->grad_fn.get()].push_back({m->output_nr, i});
    } else {
      cap.leaves[t.impl()] = i;
    }
  }
  run_backward(roots, opts.retain_graph || opts.create_graph, opts.create_graph, &cap);
  for (size_t i = 0; i < inputs.size(); ++i)
    MT_CHECK(cap.grads[i].defined() || opts.allow_unused,
             "[grad] input {} was not used to compute the outputs, so it has no gradient; pass "
             "allow_unused=true to get an undefined Tensor for it instead",
             i);
  return cap.grads;
}

void zero_grad(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.autograd_meta()) t.autograd_meta()->grad.reset();
}

}  // namespace mt
