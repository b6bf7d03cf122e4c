// SPDX-License-Identifier: MIT
#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "autograd/custom_op.h"
#include "dispatcher/library.h"

namespace mt {

void AutogradContext::save_for_backward(std::span<const Tensor> tensors) {
  for (const Tensor& t : tensors) {
    bool is_output = std::any_of(outputs_.begin(), outputs_.end(),
                                 [&](const Tensor& o) { return t.defined() && o.is_same(t); });
    saved_.push(t, is_output);
  }
}

std::vector<Tensor> AutogradContext::saved() const {
  MT_CHECK(node_ != nullptr,
           "[{}] ctx.saved() is only available in backward; in setup_context use the inputs "
           "and output directly",
           op_);
  std::shared_ptr<mt::Node> owner = node_->shared_from_this();
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (size_t i = 0; i < saved_.size(); ++i) out.push_back(saved_[i].unpack(owner, op_));
  return out;
}

namespace {
std::string type_name(const std::type_info& t) {
  if (t == typeid(double)) return "double";
  if (t == typeid(float)) return "float";
  if (t == typeid(int64_t)) return "int64_t";
  if (t == typeid(int)) return "int";
  if (t == typeid(bool)) return "bool";
  if (t == typeid(std::string)) return "std::string";
  if (t == typeid(Tensor)) return "mt::Tensor";
  int status = 0;
  char* d = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : t.name();
  std::free(d);
  return out;
}
}  // namespace

const std::any& AutogradContext::lookup(const std::string& key, const std::type_info& want) const {
  auto it = data.find(key);
  if (it != data.end()) return it->second;
  std::vector<std::string> keys;
  for (const auto& [k, _] : data) keys.push_back(mt::quoted(k));
  MT_ERROR(
      "[{}] ctx.get<{}>({}): nothing was saved under that name (saved: {}); save it in "
      "setup_context with ctx.save({}, value)",
      op_, type_name(want), mt::quoted(key),
      keys.empty() ? "nothing" : fmt::format("{}", fmt::join(keys, ", ")), mt::quoted(key));
}

void AutogradContext::wrong_type(const std::string& key, const std::type_info& want) const {
  MT_ERROR("[{}] ctx.get<{}>({}): setup_context saved a {} under that name; ask for that type", op_,
           type_name(want), mt::quoted(key), type_name(data.at(key).type()));
}

void AutogradContext::lossy(const std::string& key, const std::type_info& want) const {
  const std::any& a = data.at(key);
  const std::string v = a.type() == typeid(double) ? fmt::format("{}", std::any_cast<double>(a))
                                                   : fmt::format("{}", std::any_cast<int64_t>(a));
  MT_ERROR(
      "[{}] ctx.get<{}>({}): the saved {} {} does not fit a {} without losing value; ask "
      "for {}",
      op_, type_name(want), mt::quoted(key), type_name(a.type()), v, type_name(want),
      type_name(a.type()));
}

namespace detail {

// Note [Autograd fallback]
// Every op without an Autograd kernel gets this boxed fallback at the Autograd key. It
// runs the op below Autograd; if an input requires grad, the outputs get a tape entry
// whose backward raises an error naming the op, so a missing formula is never a
// silently wrong (or silently zero) gradient. Ops that mutate their inputs are refused
// at once, since there is no history to rewrite.
void install_autograd_fallback() {
  static Library lib(Library::Kind::Impl, "_", DispatchKey::Autograd);
  lib.fallback([](const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
    const FunctionSchema& schema = op.schema();
    size_t n = schema.arguments.size();
    std::vector<Tensor> inputs;
    for (size_t i = stack->size() - n; i < stack->size(); ++i) {
      const Value& v = (*stack)[i];
      if (v.is_tensor()) inputs.push_back(v.to_tensor());
      if (v.is_tensor_list())
        for (const Tensor& t : v.to_tensor_list()) inputs.push_back(t);
    }
    bool needs = mt::detail::any_requires_grad(inputs);
    if (needs && schema.is_mutable()) {
      MT_ERROR(
          "[autograd] '{}' modifies its inputs in place, and one of them requires grad; "
          "in-place ops cannot be recorded on the tape. Run it under mt::NoGradGuard (as "
          "an optimizer step does), or use the out-of-place op",
          op.name().str());
    }
    {
      ExcludeDispatchKeyGuard below(DispatchKey::Autograd);
      op.redispatch_boxed(ks.below(DispatchKey::Autograd), stack);
    }
    if (!needs) return;
    std::string name = op.name().str();
    auto node = mt::detail::make_node(name, inputs, schema.returns.size());
    node->backward = [name](mt::Node&, const std::vector<Tensor>&) -> std::vector<Tensor> {
      MT_ERROR(
          "[backward] '{}' has no autograd formula, but an input of it requires grad, so "
          "its gradient is unknown. Register one with register_autograd(backward, "
          "setup_context) on the custom op (or an MT_LIBRARY_IMPL(ns, Autograd, m) kernel)",
          name);
    };
    uint32_t nr = 0;
    for (size_t i = stack->size() - schema.returns.size(); i < stack->size(); ++i) {
      const Value& v = (*stack)[i];
      if (v.is_tensor() && is_floating(v.to_tensor().dtype()))
        mt::detail::set_history(v.to_tensor(), node, nr);
      ++nr;
    }
  });
}

}  // namespace detail
}  // namespace mt
