// SPDX-License-Identifier: MIT
// mt::capture: run a function on fake tensors with every op call observed, and keep the
// calls as a graph; Graph::str and Graph::dot print it.
#include <fmt/format.h>

#include <unordered_map>

#include "autograd/trace.h"
#include "dispatcher/mode.h"
#include "kernels/compile/compile.h"
#include "kernels/jit/module.h"
#include "runtime/fake_observer.h"

namespace mt {

// Note [Capture through fake tensors]
// capture() calls fn once on fake copies of the example inputs, under FakeMode and with an
// ObserveCallsGuard (autograd/trace.h): each op call goes through the Trace key's fallback,
// which hands us its boxed arguments before and its results after. Only top-level calls
// (depth 0) become nodes: the calls fn makes, and those mt::backward makes for it (the
// engine dispatches every backward formula, and sums gradients with mt::add), so a training
// step is one graph. Calls made inside an op are the op's own business.
// Values are identified by TensorImpl: a fake tensor is either an input, the output of a
// node, or made by a factory or detach() during the capture (runtime/fake_observer.h's observer
// tells us which, and what it was filled with); anything else is refused. A real tensor
// that fn closed over becomes a constant and is replaced, for that call, by a fake stand-in,
// so every op runs its Fake kernel (Fake is added to the call's keys): nothing is computed,
// and a missing Fake kernel fails here, with the tutorial's message.
// Mutations and views need nothing special: replay runs the nodes in the recorded order on
// real tensors, so writes and aliases happen as they did. The graph records them (a node's
// `mutated` values; a view's alias_root) for fusion, which must not move a read past a write.

namespace {

std::string short_name(const OperatorName& n) { return n.name; }

class Capturer final : public CallObserver, public detail::FakeFactoryObserver {
 public:
  explicit Capturer(Graph* g) : g_(g) {}

  int add_value(GraphValue v, const Tensor& t, std::string base) {
    v.name = unique(std::move(base));
    if (t.defined()) {
      v.sizes = t.sizes();
      v.strides = t.strides();
      v.dtype = t.dtype();
      v.device = t.device();
      v.requires_grad = t.requires_grad();
      ids_[t.impl()] = int(g_->values.size());
      keep_.push_back(t);
    }
    if (v.alias_root < 0) v.alias_root = int(g_->values.size());
    g_->values.push_back(std::move(v));
    return int(g_->values.size()) - 1;
  }

  std::string unique(std::string base) {
    int& n = names_[base];
    std::string name = n == 0 ? base : fmt::format("{}_{}", base, n);
    ++n;
    return name;
  }

  // ---- FakeFactoryObserver ----
  void made(const Tensor& t, const char* factory, std::optional<double> fill,
            const Tensor* source) override {
    Made& m = made_[t.impl()];
    m.t = t;
    m.factory = factory;
    if (fill) m.fill = fill;
    if (source) m.source = *source;
  }

  // ---- CallObserver ----
  DispatchKeySet before(const OperatorHandle& op, int depth, std::span<Value> args) override {
    if (depth != 0) return {};
    current_ = op.name().str();
    for (Value& v : args) {
      if (v.is_tensor()) {
        const Tensor& t = v.to_tensor();
        if (t.defined() && !t.is_fake()) v = Value(stand_in(t, op));
      } else if (v.is_tensor_list()) {
        std::vector<Tensor> ts = v.to_tensor_list();
        bool changed = false;
        for (Tensor& t : ts)
          if (t.defined() && !t.is_fake()) t = stand_in(t, op), changed = true;
        if (changed) v = Value(std::move(ts));
      }
    }
    // Every call runs its Fake kernel, including one with no tensor arguments.
    return DispatchKeySet(DispatchKey::Fake);
  }

  void after(const OperatorHandle& op, int depth, std::span<const Value> args,
             std::span<const Value> results) override {
    if (depth != 0) return;
    const FunctionSchema& schema = op.schema();
    GraphNode node;
    node.op = op;
    for (size_t i = 0; i < args.size(); ++i) {
      const Value& v = args[i];
      GraphArg a;
      if (v.is_tensor() && v.to_tensor().defined()) {
        a.kind = GraphArg::Kind::Tensor;
        a.value = resolve(v.to_tensor(), op, i);
      } else if (v.is_tensor_list()) {
        a.kind = GraphArg::Kind::TensorList;
        for (const Tensor& t : v.to_tensor_list()) a.list.push_back(resolve(t, op, i));
      } else {
        a.constant = v;
      }
      if (i < schema.arguments.size() && schema.arguments[i].alias &&
          schema.arguments[i].alias->is_write) {
        if (a.kind == GraphArg::Kind::Tensor) node.mutated.push_back(a.value);
        for (int id : a.list) node.mutated.push_back(id);
      }
      node.args.push_back(std::move(a));
    }
    const int index = int(g_->nodes.size());
    auto output = [&](const Tensor& t, size_t r) {
      if (!t.defined()) return -1;
      auto it = ids_.find(t.impl());
      if (it != ids_.end()) return it->second;  // an in-place op returns its self
      GraphValue gv;
      gv.kind = GraphValue::Kind::Intermediate;
      gv.producer = index;
      // A view (Tensor(a) return) shares the memory of the argument in its alias set.
      if (r < schema.returns.size() && schema.returns[r].alias) {
        for (size_t i = 0; i < schema.arguments.size() && i < node.args.size(); ++i)
          if (schema.arguments[i].alias &&
              schema.arguments[i].alias->set == schema.returns[r].alias->set &&
              node.args[i].kind == GraphArg::Kind::Tensor)
            gv.alias_root = g_->values[size_t(node.args[i].value)].alias_root;
      }
      return add_value(std::move(gv), t, short_name(op.name()));
    };
    for (size_t r = 0; r < results.size(); ++r) {
      if (results[r].is_tensor_list()) {
        node.returns_list = true;
        for (const Tensor& t : results[r].to_tensor_list()) node.outputs.push_back(output(t, r));
      } else {
        node.outputs.push_back(output(results[r].to_tensor(), r));
      }
    }
    g_->nodes.push_back(std::move(node));
    current_.clear();
  }

  // The value of a tensor seen as an argument or output.
  int resolve(const Tensor& t, const OperatorHandle* op, size_t arg) {
    auto it = ids_.find(t.impl());
    if (it != ids_.end()) return it->second;
    if (!t.is_fake()) return add_constant(t);
    auto m = made_.find(t.impl());
    std::string where = op ? fmt::format("argument {} of '{}'", arg, op->name().str())
                           : fmt::format("output {} of the function", arg);
    MT_CHECK(m != made_.end(),
             "[compile] {} is a fake tensor that the function did not get as an input and that "
             "no op or factory made while it was captured (a fake tensor from outside, such as "
             "another capture's); pass it as an input, or make it inside the function",
             where);
    if (m->second.source.defined()) {  // detach(): the same memory
      const int id = resolve(m->second.source, op, arg);
      ids_[t.impl()] = id;
      return id;
    }
    const std::string& f = m->second.factory;
    MT_CHECK(f == "empty" || f == "full" || f == "fake_empty" || f == "fake_like",
             "[compile] {} was made by mt::{} while the function was captured; its values "
             "(random draws, ranges) cannot be part of the graph. Make it outside the function and "
             "pass it as an input",
             where, f);
    // A factory call (mt::zeros, ones_like, empty, ...) made under FakeMode: a node of its own.
    GraphNode node;
    node.fill = m->second.fill;
    const int index = int(g_->nodes.size());
    GraphValue gv;
    gv.producer = index;
    const int id = add_value(std::move(gv), t, node.fill ? "full" : "empty");
    node.outputs.push_back(id);
    g_->nodes.push_back(std::move(node));
    return id;
  }
  int resolve(const Tensor& t, const OperatorHandle& op, size_t arg) {
    return resolve(t, &op, arg);
  }

  int add_constant(const Tensor& t) {
    GraphValue gv;
    gv.kind = GraphValue::Kind::Constant;
    gv.constant = t;
    return add_value(std::move(gv), t, "c");
  }

  Tensor stand_in(const Tensor& real, const OperatorHandle& op) {
    auto it = stand_ins_.find(real.impl());
    if (it != stand_ins_.end()) return it->second;
    MT_CHECK(!real.requires_grad(),
             "[compile] '{}' got a real tensor that requires grad and is not an input of the "
             "captured function (a parameter it closes over); pass it as an input, so that "
             "its gradient and updates reach it",
             op.name().str());
    Tensor fake = detail::make_fake(real.sizes(), real.strides(), real.dtype(), real.device());
    const int id = add_constant(real);
    ids_[fake.impl()] = id;
    keep_.push_back(fake);
    stand_ins_[real.impl()] = fake;
    return fake;
  }

  const std::string& current() const { return current_; }

 private:
  struct Made {
    Tensor t;
    std::string factory;
    std::optional<double> fill;
    Tensor source;
  };
  Graph* g_;
  std::unordered_map<const TensorImpl*, int> ids_;
  std::unordered_map<const TensorImpl*, Made> made_;
  std::unordered_map<const TensorImpl*, Tensor> stand_ins_;
  std::unordered_map<std::string, int> names_;
  std::vector<Tensor> keep_;  // every tensor seen stays alive, so no address is reused
  std::string current_;
};

class FactoryObserverGuard {
 public:
  explicit FactoryObserverGuard(detail::FakeFactoryObserver* o)
      : prev_(detail::set_fake_factory_observer(o)) {}
  ~FactoryObserverGuard() { detail::set_fake_factory_observer(prev_); }
  FactoryObserverGuard(const FactoryObserverGuard&) = delete;
  FactoryObserverGuard& operator=(const FactoryObserverGuard&) = delete;

 private:
  detail::FakeFactoryObserver* prev_;
};

const StorageImpl* storage_of(const Tensor& t) {
  return t.defined() && !t.is_fake() ? t.storage().get() : nullptr;
}

}  // namespace

std::string GraphNode::op_name() const {
  if (!is_factory()) return op.name().str();
  return fill ? "full" : "empty_strided";
}

// Note [Compile under a dispatch mode]
// A mode may change what an op computes, and a replayed graph runs without the dispatcher,
// so a mode could neither be recorded faithfully nor see the replay. So mt::capture refuses
// to run under a mode, and a compiled function called under a mode runs its function
// eagerly: the mode sees every op, and the results are the eager ones.
Graph capture(const GraphFn& fn, const std::vector<Tensor>& example_inputs,
              const CaptureOptions& opts) {
  MT_CHECK(bool(fn),
           "[compile] mt::capture got an empty std::function; pass a callable that takes the "
           "inputs and returns the outputs");
  if (local_dispatch_keys().included.has(DispatchKey::Mode)) {
    std::vector<std::string> modes;
    for (const std::string& m : active_modes()) modes.push_back(mt::quoted(m));
    MT_ERROR(
        "[compile] mt::capture was called under the dispatch mode {}; a mode may change what "
        "ops compute and a replay does not reach it, so capture outside the ModeGuard (a "
        "compiled function called under a mode runs eagerly instead)",
        fmt::join(modes, ", "));
  }
  Graph g;
  Capturer cap(&g);
  std::vector<Tensor> fakes;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const Tensor& t = example_inputs[i];
    MT_CHECK(t.defined(), "[compile] input {} is an undefined Tensor", i);
    Tensor f = detail::make_fake(t.sizes(), t.strides(), t.dtype(), t.device());
    if (t.requires_grad()) f.requires_grad_(true);
    GraphValue v;
    v.kind = GraphValue::Kind::Input;
    v.input = int(i);
    // Inputs over one storage alias each other: a write through one shows in the other.
    for (size_t j = 0; j < i && storage_of(t); ++j)
      if (storage_of(example_inputs[j]) == storage_of(t))
        v.alias_root = g.values[size_t(g.inputs[j])].alias_root;
    const std::string name =
        i < opts.input_names.size() ? opts.input_names[i] : fmt::format("x{}", i);
    g.inputs.push_back(cap.add_value(std::move(v), f, name));
    fakes.push_back(f);
  }
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const Tensor grad = example_inputs[i].grad();
    if (!grad.defined()) continue;
    Tensor fg = detail::make_fake(grad.sizes(), grad.strides(), grad.dtype(), grad.device());
    GraphValue v;
    v.kind = GraphValue::Kind::InputGrad;
    v.input = int(i);
    cap.add_value(std::move(v), fg, g.values[size_t(g.inputs[i])].name + "_grad");
    fakes[i].set_grad(fg);
  }
  std::vector<Tensor> outs;
  {
    FakeMode fake;
    FactoryObserverGuard factories(&cap);
    ObserveCallsGuard observe(&cap);
    try {
      outs = fn(fakes);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.starts_with("[compile]")) throw;  // says what and where already
      const std::string at = cap.current().empty() ? "" : fmt::format(" (in '{}')", cap.current());
      if (what.starts_with("[data_ptr] cannot read the data of a fake tensor"))
        MT_ERROR(
            "[compile] the function read a tensor's values while it was captured{}: "
            "capture runs it on fake tensors, which have shapes but no values. Compute with "
            "ops instead of item(), to_vector() or printing values, or do that outside the "
            "compiled function.\n{}",
            at, what);
      // A kernel launched outside the dispatcher (a user's mt::jit kernel in a backward
      // written as a lambda, say) reads its arguments' values as surely as item() does.
      if (what.starts_with("[jit] ") && what.find(jit::kFakeArgumentText) != std::string::npos)
        MT_ERROR(
            "[compile] the function read a tensor's values while it was captured{}: it launched "
            "a kernel outside the dispatcher (mt::jit) on a fake tensor, and capture runs the "
            "function on fake tensors, which have shapes but no values. Launch the kernel from an "
            "op with a Fake kernel (custom_op, register_fake), so capture records the op, or "
            "launch it outside the compiled function.\n{}",
            at, what);
      if (what.find("has no Fake kernel") != std::string::npos)
        MT_ERROR(
            "[compile] capturing runs every op on fake tensors to lay out the graph before "
            "anything runs, so each op needs a Fake kernel{}:\n{}",
            at, what);
      MT_ERROR("[compile] capturing the function failed{}:\n{}", at, what);
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) g.outputs.push_back(cap.resolve(outs[i], nullptr, i));
  for (size_t i = 0; i < fakes.size(); ++i) {
    if (!fakes[i].requires_grad() && !example_inputs[i].grad().defined()) continue;
    const Tensor grad = fakes[i].grad();
    g.grads.push_back({int(i), grad.defined() ? cap.resolve(grad, nullptr, i) : -1});
  }
  return g;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(values.size(), 0);
  for (const GraphNode& n : nodes)
    for (const GraphArg& a : n.args) {
      if (a.kind == GraphArg::Kind::Tensor) ++uses[size_t(a.value)];
      for (int id : a.list) ++uses[size_t(id)];
    }
  for (int id : outputs)
    if (id >= 0) uses[size_t(id)] += 2;
  for (auto [input, id] : grads)
    if (id >= 0) uses[size_t(id)] += 2;
  return uses;
}

// ---- printing ------------------------------------------------------------------------

namespace {

std::string type_str(const GraphValue& v) {
  std::string s = fmt::format("{}{}", v.dtype, v.sizes);
  if (!v.device.is_cpu()) s += " " + v.device.str();
  return s;
}

std::string arg_str(const Graph& g, const GraphArg& a) {
  switch (a.kind) {
    case GraphArg::Kind::Tensor:
      return g.values[size_t(a.value)].name;
    case GraphArg::Kind::TensorList: {
      std::vector<std::string> names;
      for (int id : a.list) names.push_back(g.values[size_t(id)].name);
      return fmt::format("[{}]", fmt::join(names, ", "));
    }
    case GraphArg::Kind::Constant:
      break;
  }
  if (a.constant.is_tensor() && !a.constant.to_tensor().defined()) return "None";
  return a.constant.str();
}

std::string call_str(const Graph& g, const GraphNode& n) {
  if (n.is_factory()) {
    const GraphValue& v = g.values[size_t(n.outputs[0])];
    if (n.fill) return fmt::format("full({}, {}, {})", v.sizes, *n.fill, v.dtype);
    return fmt::format("empty_strided({}, {}, {})", v.sizes, v.strides, v.dtype);
  }
  const FunctionSchema& s = n.op.schema();
  std::vector<std::string> args;
  for (size_t i = 0; i < n.args.size(); ++i) {
    const bool kw = i < s.arguments.size() && s.arguments[i].kwarg_only;
    args.push_back((kw ? s.arguments[i].name + "=" : "") + arg_str(g, n.args[i]));
  }
  return fmt::format("{}({})", n.op.name().str(), fmt::join(args, ", "));
}

// Values a node made (not the in-place results that are its arguments).
std::vector<int> made_by(const Graph& g, int index) {
  std::vector<int> out;
  for (int id : g.nodes[size_t(index)].outputs)
    if (id >= 0 && g.values[size_t(id)].producer == index) out.push_back(id);
  return out;
}

}  // namespace

std::string Graph::str() const {
  std::vector<std::string> params;
  for (const GraphValue& v : values)
    if (v.kind == GraphValue::Kind::Input || v.kind == GraphValue::Kind::InputGrad)
      params.push_back(
          fmt::format("{}: {}{}", v.name, type_str(v), v.requires_grad ? " requires_grad" : ""));
  std::string out = fmt::format("graph({}):\n", fmt::join(params, ", "));
  for (const GraphValue& v : values)
    if (v.kind == GraphValue::Kind::Constant)
      out += fmt::format("  {}: {} = constant\n", v.name, type_str(v));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    std::vector<std::string> lhs;
    for (int id : made_by(*this, int(i)))
      lhs.push_back(fmt::format("{}: {}", values[size_t(id)].name, type_str(values[size_t(id)])));
    std::string line = "  ";
    if (!lhs.empty()) line += fmt::format("{} = ", fmt::join(lhs, ", "));
    line += call_str(*this, n);
    if (!n.mutated.empty()) {
      std::vector<std::string> w;
      for (int id : n.mutated) w.push_back(values[size_t(id)].name);
      line += fmt::format("  # writes {}", fmt::join(w, ", "));
    }
    out += line + "\n";
  }
  std::vector<std::string> rets;
  for (int id : outputs) rets.push_back(id < 0 ? "None" : values[size_t(id)].name);
  out += fmt::format("  return ({})\n", fmt::join(rets, ", "));
  for (auto [input, id] : grads)
    out += fmt::format("  {}.grad = {}\n", values[size_t(inputs[size_t(input)])].name,
                       id < 0 ? "None" : values[size_t(id)].name);
  return out;
}

std::string Graph::dot() const {
  std::string out = "digraph graph_ {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n";
  for (size_t i = 0; i < values.size(); ++i) {
    const GraphValue& v = values[i];
    if (v.kind == GraphValue::Kind::Intermediate) continue;
    out +=
        fmt::format("  v{} [shape={}, label=\"{}: {}\"];\n", i,
                    v.kind == GraphValue::Kind::Constant ? "note" : "ellipse", v.name, type_str(v));
  }
  auto source = [&](int id) {
    const GraphValue& v = values[size_t(id)];
    return v.producer >= 0 ? fmt::format("n{}", v.producer) : fmt::format("v{}", id);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    std::vector<std::string> made;
    for (int id : made_by(*this, int(i))) made.push_back(values[size_t(id)].name);
    out +=
        fmt::format("  n{} [shape=box, label=\"{}{}\"];\n", i,
                    made.empty() ? "" : fmt::format("{} = ", fmt::join(made, ", ")), n.op_name());
    for (const GraphArg& a : n.args) {
      if (a.kind == GraphArg::Kind::Tensor)
        out += fmt::format("  {} -> n{};\n", source(a.value), i);
      for (int id : a.list) out += fmt::format("  {} -> n{};\n", source(id), i);
    }
  }
  out += "  out [shape=doublecircle, label=\"return\"];\n";
  for (int id : outputs)
    if (id >= 0) out += fmt::format("  {} -> out;\n", source(id));
  return out + "}\n";
}

}  // namespace mt
