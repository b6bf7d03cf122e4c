// SPDX-License-Identifier: MIT
// mt::vmap: a function written for one sample, run over a batch at once through the
// Batched dispatch key; register_vmap gives an op its batching rule.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "autograd/custom_op.h"

namespace mt {

// Note [Where Batched sits]
// Batched is above Autocast and Autograd (runtime/tensor.h). Inside mt::vmap an
// argument is a batched tensor: a TensorImpl that wraps the real tensor (its value) with
// the batch dim and a level, and shows the per-sample shape. While a vmap runs, Batched
// is in the thread's included keys, so every op call inside it reaches the Batched key
// first. That kernel (the op's rule, or the fallback) takes the level being processed:
//  - the arguments batched at that level are replaced by their values, and their batch
//    dims passed to the op's rule, which computes the whole batch with ordinary op calls
//    (matmul of [B, n, k] by [k, m] is one matmul); the results are wrapped again;
//  - those calls run one level down: level L's values may be batched tensors of level
//    L - 1 (vmap(vmap(f))), which the same key then unwraps in turn, until level 0 reaches
//    Autograd and the backends with real tensors;
//  - an op with no rule runs once per batch element and the results are stacked (the
//    slow fallback), with a one-time warning naming the op.
// Autograd so records the batched computation on the real values, once. For mt::grad
// inside vmap (per-sample gradients) a tensor that requires grad and is not batched (a
// parameter the function captures) is lifted at its first use at a level: replaced by an
// expand of it to [B, ...], a batched tensor of that level. Each sample's computation
// then reads its own slice, so mt::grad with respect to the parameter (which vmap asks of
// the lifted tensor) is the per-sample gradient, batched; a gradient taken outside the
// vmap still reaches the parameter through the expand. Lifting happens only with grad
// mode on. docs/dispatcher.md has the picture.

// Per argument (or output): its batch dim, or std::nullopt for one that is not batched.
using BatchDims = std::vector<std::optional<int64_t>>;
using VmapFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// vmap(fn, in_dims, out_dims)(args): fn runs once for the whole batch, seeing each
// batched argument without its batch dim. in_dims has one entry per argument (empty: 0
// for every one), out_dims one per output (empty: 0 for every one); a dim may be negative.
VmapFunction vmap(VmapFunction fn, BatchDims in_dims = {}, BatchDims out_dims = {});

// Whether t is a batched tensor of a vmap that is running.
bool is_batched(const Tensor& t);

// What a batching rule is told besides its arguments.
struct VmapInfo {
  int64_t batch_size = 0;
  BatchDims in_dims;  // one per argument of the op: the batch dim of a Tensor, or nullopt
};

// A boxed rule: the op's arguments are on the stack, each batched Tensor replaced by its
// value (with the batch dim at in_dims[i]); it leaves the op's results there instead and
// returns their batch dims (nullopt: the same for every sample).
using BoxedVmapRule = std::function<BatchDims(const VmapInfo&, Stack*)>;

namespace detail {
// t with dim `from` moved to `to` (a permute; t itself when they are equal).
Tensor movedim(const Tensor& t, int64_t from, int64_t to);
// Calls op on the arguments on the stack as a fresh call below Trace (a rule's own call).
void call_boxed_below(const OperatorHandle& op, Stack* args);
// The Batched kernel around a rule (the built-in rules and register_vmap's).
KernelFunction batched_kernel(BoxedVmapRule rule);
// mt::grad with a batched output or input (autograd/engine.cpp calls it).
bool needs_batched_grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs);
std::vector<Tensor> batched_grad(const std::vector<Tensor>& outputs,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<Tensor>& grad_outputs, bool retain_graph,
                                 bool create_graph, bool allow_unused);

// A typed rule, rule(info, args...) -> std::pair<Tensor, std::optional<int64_t>>, boxed.
template <typename... Args, typename F>
BoxedVmapRule typed_vmap_rule(F rule) {
  return [rule = std::move(rule)](const VmapInfo& info, Stack* s) -> BatchDims {
    constexpr size_t n = sizeof...(Args);
    const size_t base = s->size() - n;
    auto r = [&]<size_t... I>(std::index_sequence<I...>) {
      return rule(info, value_to<canon_value_t<Args>>((*s)[base + I])...);
    }
    (std::index_sequence_for<Args...>{});
    s->resize(base);
    s->emplace_back(std::move(r.first));
    return {r.second};
  };
}
template <typename Sig>
struct VmapRuleFor;
template <typename... Args>
struct VmapRuleFor<Tensor(Args...)> {
  template <typename F>
  static BoxedVmapRule make(F rule) {
    static_assert(std::is_invocable_v<const F&, const VmapInfo&, canon_t<Args>...>,
                  "register_vmap: the rule must be callable as rule(info, args...) with the "
                  "op's arguments");
    if constexpr (std::is_invocable_v<const F&, const VmapInfo&, canon_t<Args>...>) {
      using R = std::invoke_result_t<const F&, const VmapInfo&, canon_t<Args>...>;
      static_assert(std::is_same_v<R, std::pair<Tensor, std::optional<int64_t>>>,
                    "register_vmap: the rule must return std::pair<Tensor, "
                    "std::optional<int64_t>>: the output and its batch dim");
      return typed_vmap_rule<Args...>(std::move(rule));
    } else {
      return {};
    }
  }
};
// The op's signature from the rule's parameters (info, args...).
template <typename F>
struct RuleSig {
  using Args = typename FnTraits<std::remove_cvref_t<F>>::args;
  template <typename First, typename... Rest>
  static auto drop(std::tuple<First, Rest...>*) -> Tensor (*)(Rest...);
  using type = std::remove_pointer_t<decltype(drop((Args*)nullptr))>;
};
template <typename F>
inline constexpr bool kBoxedRule = std::is_convertible_v<F, BoxedVmapRule>&&
    std::is_invocable_v<const F&, const VmapInfo&, Stack*>;
// Checks a typed rule's signature (given, or read from its parameters) against the schema.
template <typename Sig, typename F>
void check_rule_signature(std::string_view op) {
  if constexpr (!std::is_void_v<Sig>) {
    (void)dispatcher().find_or_throw(op).typed<Sig>();
  } else if constexpr (!kBoxedRule<F>) {
    (void)dispatcher().find_or_throw(op).typed<typename RuleSig<F>::type>();
  }
}
template <typename Sig, typename F>
BoxedVmapRule vmap_rule(F rule) {
  if constexpr (kBoxedRule<F>) {
    return BoxedVmapRule(std::move(rule));
  } else if constexpr (std::is_void_v<Sig>) {
    return VmapRuleFor<typename RuleSig<F>::type>::make(std::move(rule));
  } else {
    return VmapRuleFor<Sig>::make(std::move(rule));
  }
}
}  // namespace detail

// register_vmap("ns::op", rule): the op's batching rule (torch.library.register_vmap),
// its kernel at the Batched key. rule(info, args...) gets the op's arguments with each
// batched Tensor unbatched (its batch dim in info.in_dims, nullopt for the others) and
// returns the output and its batch dim; a BoxedVmapRule works for any op. Undone when
// the Registration is destroyed (Note [Registration lifetime]).
template <typename Sig = void, typename F>
Registration register_vmap(std::string_view op, F rule,
                           std::source_location loc = std::source_location::current()) {
  auto lib = detail::by_name_library(op, loc);
  detail::check_rule_signature<Sig, F>(op);
  BoxedVmapRule boxed = detail::vmap_rule<Sig>(std::move(rule));
  lib->impl(op, DispatchKey::Batched, detail::batched_kernel(std::move(boxed)), loc);
  return Registration(std::move(lib));
}
// The same for a custom_op handle; the rule is checked against its signature.
template <typename Sig, typename F>
Registration register_vmap(const CustomOp<Sig>& op, F rule,
                           std::source_location loc = std::source_location::current()) {
  return register_vmap<Sig>(op.name(), std::move(rule), loc);
}
template <typename Sig = void, typename F>
void register_vmap(Library& owner, std::string_view op, F rule,
                   std::source_location loc = std::source_location::current()) {
  detail::check_rule_signature<Sig, F>(op);
  owner.impl(op, DispatchKey::Batched,
             detail::batched_kernel(detail::vmap_rule<Sig>(std::move(rule))), loc);
}

}  // namespace mt
