// SPDX-License-Identifier: MIT
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "autograd/autograd.h"
#include "runtime/tls.h"

namespace mt {
namespace {

struct Tape {
  uint64_t next_sequence_nr = 0;
  std::vector<std::weak_ptr<Node>> entries;
  size_t prune_at = 1024;

  void append(const std::shared_ptr<Node>& n) {
    // Graphs mostly die newest-first (a step's graph goes at once), so dropping the dead
    // entries at the back keeps the tape short; a weak_ptr also keeps its node's memory
    // (make_shared puts both in one block), which is then reused at once.
    while (!entries.empty() && entries.back().expired()) entries.pop_back();
    if (entries.size() >= prune_at) {  // drop entries whose graphs are gone
      std::erase_if(entries, [](const std::weak_ptr<Node>& w) { return w.expired(); });
      prune_at = std::max<size_t>(1024, 2 * entries.size());
    }
    entries.push_back(n);
  }
};

// The thread's tape, reached through an initial-exec pointer: a thread_local Tape itself
// (it has a destructor) went through its guard variable, which takes the general-dynamic
// model, two calls to __tls_get_addr each record_node (callgrind, docs/host-cost.md). The
// owner is made on the thread's first recording and destroyed when the thread ends, as the
// allocator's block cache is (runtime/storage.cpp; Note [Thread-local variables in a shared
// library] in runtime/tls.h).
MT_TLS Tape* t_tape = nullptr;
struct TapeOwner {
  Tape tape;
  TapeOwner() { t_tape = &tape; }
  ~TapeOwner() { t_tape = nullptr; }
};
thread_local TapeOwner t_tape_owner;

Tape& this_thread_tape() {
  if (Tape* t = t_tape) [[likely]]
    return *t;
  return t_tape_owner.tape;  // the first use on this thread constructs it
}

std::string meta_str(const Shape& s, DType t) { return fmt::format("{} {}", s, t); }

}  // namespace

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  version_ = t.version();
  requires_grad_ = t.requires_grad();
  if (is_output) {
    data_ = t.detach();  // no grad_fn: a saved output must not keep its own node alive
    output_nr_ = t.autograd_meta() ? t.autograd_meta()->output_nr : 0;
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, std::string_view op) const {
  MT_CHECK(data_.defined() || !is_output_,
           "[backward] a tensor saved by '{}' was already freed; this is a bug", op);
  if (!data_.defined()) return data_;
  MT_CHECK(data_.version() == version_,
           "[backward] a tensor that '{}' saved for backward was modified by an in-place "
           "operation: it was at version {} when saved and is at version {} now. The gradient "
           "needs the old values; use an out-of-place op instead, or .clone() the tensor before "
           "changing it in place",
           op, version_, data_.version());
  if (!is_output_ || !requires_grad_) return data_;
  Tensor alias = detail::make_view(data_, data_.sizes(), data_.strides(), data_.storage_offset());
  AutogradMeta& m = alias.ensure_autograd_meta();
  m.requires_grad = true;
  m.grad_fn = owner;
  m.output_nr = output_nr_;
  alias.impl()->refresh_keys();
  return alias;
}

void Node::release() {
  released = true;
  backward = nullptr;
}

bool detail::any_requires_grad(std::span<const Tensor> ts) {
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void Node::allocate_slots(size_t n_in, size_t n_out) {
  input_slots_.resize(n_in);
  output_slots_.resize(n_out);
  inputs = input_slots_;
  outputs = output_slots_;
}

void detail::record_node(const std::shared_ptr<Node>& n, std::string_view name,
                         std::span<const Tensor* const> inputs) {
  MT_ASSERT(n->inputs.size() == inputs.size(), "node {} has {} input slots for {} inputs", name,
            n->inputs.size(), inputs.size());
  n->name = name;
  Tape& tape = this_thread_tape();
  n->sequence_nr = tape.next_sequence_nr++;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *inputs[i];
    InputSlot& s = n->inputs[i];
    if (!t.defined()) continue;
    const TensorImpl* p = t.impl();
    s.sizes = p->sizes;
    s.dtype = p->dtype;
    s.device = p->device;
    s.requires_grad = p->autograd && p->autograd->requires_grad;
    if (!s.requires_grad) continue;
    const AutogradMeta* m = p->autograd.get();
    if (m->grad_fn) {
      s.producer = m->grad_fn;
      s.output_nr = m->output_nr;
    } else {
      s.leaf = t.impl_ptr();
    }
  }
  tape.append(n);
}

std::shared_ptr<Node> detail::make_node(std::string name, std::span<const Tensor> inputs,
                                        size_t num_outputs) {
  auto n = std::make_shared<Node>();
  n->allocate_slots(inputs.size(), num_outputs);
  std::vector<const Tensor*> ptrs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) ptrs[i] = &inputs[i];
  detail::record_node(n, name, ptrs);
  return n;
}

namespace {
// P is const std::shared_ptr<Node>& (copy into grad_fn) or std::shared_ptr<Node> (move).
template <typename P>
void set_history_impl(const Tensor& out, P&& node, uint32_t nr) {
  Node& n = *node;
  MT_ASSERT(nr < n.outputs.size(), "node {} has {} output slots, not {}", n.name, n.outputs.size(),
            nr + 1);
  if (!out.defined() || !is_floating(out.dtype())) return;  // e.g. max's indices: no gradient
  AutogradMeta& m = out.ensure_autograd_meta();
  m.requires_grad = true;
  m.grad_fn = std::forward<P>(node);
  m.output_nr = nr;
  out.impl()->refresh_keys();
  OutputMeta& meta = n.outputs[nr];  // in place: no temporary Shape to copy twice
  const TensorImpl* p = out.impl();
  meta.sizes = p->sizes;
  meta.dtype = p->dtype;
  meta.device = p->device;
  meta.fake = p->fake;
}
}  // namespace

void detail::set_history(const Tensor& out, const std::shared_ptr<Node>& node, uint32_t nr) {
  set_history_impl(out, node, nr);
}

void detail::set_history(const Tensor& out, std::shared_ptr<Node>&& node, uint32_t nr) {
  set_history_impl(out, std::move(node), nr);
}

std::vector<std::shared_ptr<Node>> tape_entries() {
  std::vector<std::shared_ptr<Node>> out;
  for (auto& w : this_thread_tape().entries)
    if (auto n = w.lock()) out.push_back(std::move(n));
  return out;
}

std::string dump_tape() {
  auto entries = tape_entries();
  std::unordered_map<const Node*, size_t> index;
  std::string out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node& n = *entries[i];
    index[&n] = i;
    std::vector<std::string> ins, outs;
    for (const InputSlot& s : n.inputs) {
      if (!s.requires_grad) {
        ins.push_back(fmt::format("const {}", meta_str(s.sizes, s.dtype)));
      } else if (s.producer) {
        auto it = index.find(s.producer.get());
        ins.push_back(it != index.end() ? fmt::format("#{}.{}", it->second, s.output_nr)
                                        : fmt::format("{}.{}", s.producer->name, s.output_nr));
      } else {
        ins.push_back(fmt::format("leaf {}", meta_str(s.sizes, s.dtype)));
      }
    }
    for (const OutputMeta& o : n.outputs) outs.push_back(meta_str(o.sizes, o.dtype));
    out += fmt::format("#{} {}({}) -> ({}){}{}\n", i, n.name, fmt::join(ins, ", "),
                       fmt::join(outs, ", "),
                       n.saved_count() == 0 ? "" : fmt::format(" saved={}", n.saved_count()),
                       n.released ? " [released]" : "");
  }
  return out;
}

std::string dump_tape_dot() {
  auto entries = tape_entries();
  std::unordered_map<const Node*, size_t> index;
  std::unordered_map<const TensorImpl*, size_t> leaves;
  std::string out = "digraph tape {\n  rankdir=LR;\n  node [fontname=\"monospace\"];\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node& n = *entries[i];
    index[&n] = i;
    out += fmt::format("  n{} [shape=box, label=\"#{} {}\"];\n", i, i, n.name);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const InputSlot& s = n.inputs[k];
      if (!s.requires_grad) continue;
      if (s.producer) {
        auto it = index.find(s.producer.get());
        if (it != index.end()) out += fmt::format("  n{} -> n{};\n", it->second, i);
      } else if (auto leaf = s.leaf.lock()) {
        auto [it, fresh] = leaves.emplace(leaf.get(), leaves.size());
        if (fresh)
          out += fmt::format("  l{} [shape=ellipse, label=\"leaf {}\"];\n", it->second,
                             meta_str(leaf->sizes, leaf->dtype));
        out += fmt::format("  l{} -> n{};\n", it->second, i);
      }
    }
  }
  return out + "}\n";
}

}  // namespace mt
