// SPDX-License-Identifier: MIT
// The autograd kernel that register_autograd installs: it runs the op below the
// Autograd key, then records one tape entry whose backward calls the user's formula.
#pragma once

#include <any>
#include <array>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "dispatcher/dispatcher.h"

namespace mt {

namespace detail {
template <typename Ret, typename Args, typename Backward>
struct AutogradKernel;
template <size_t NIn, size_t NOut>
struct CustomNode;
}  // namespace detail

// What setup_context saves for backward: tensors (version-checked at backward) and
// any other values in `data`.
class AutogradContext {
 public:
  void save_for_backward(std::initializer_list<Tensor> tensors) {
    save_for_backward(std::span<const Tensor>(tensors.begin(), tensors.size()));
  }
  void save_for_backward(const std::vector<Tensor>& tensors) {
    save_for_backward(std::span<const Tensor>(tensors));
  }
  void save_for_backward(std::span<const Tensor> tensors);
  // One tensor, referenced: `{x}` builds an initializer list, a copy of the handle (an
  // atomic reference-count pair a call).
  void save_for_backward(const Tensor& t) { save_for_backward(std::span<const Tensor>(&t, 1)); }
  // The saved tensors, in order; throws if one was changed in place since it was saved.
  std::vector<Tensor> saved() const;
  // Whether the i-th tensor input needs a gradient (skip computing those that do not).
  // Past the 64th tensor input this answers true: computing an unused gradient is safe.
  bool needs_input_grad(size_t i) const { return i >= 64 || (needs_input_grad_ >> i & 1u); }

  // Non-tensor state for backward: ctx.save("alpha", alpha) in setup_context,
  // ctx.get<double>("alpha") in backward. An integer is kept as int64_t and a floating-point
  // value as double; get<T> of an arithmetic T converts, refusing a conversion that loses
  // value. A missing key, or another type, is an error naming the op and what was saved.
  template <typename T>
  void save(std::string key, T value) {
    using V = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<V, bool>)
      data[std::move(key)] = value;
    else if constexpr (std::is_integral_v<V>)
      data[std::move(key)] = int64_t(value);
    else if constexpr (std::is_floating_point_v<V>)
      data[std::move(key)] = double(value);
    else if constexpr (std::is_convertible_v<V, std::string_view> &&
                       !std::is_same_v<V, std::string>)
      data[std::move(key)] = std::string(std::string_view(value));
    else
      data[std::move(key)] = std::move(value);
  }
  template <typename T>
  T get(const std::string& key) const {
    const std::any& a = lookup(key, typeid(T));
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (const int64_t* i = std::any_cast<int64_t>(&a)) {
        const T v = static_cast<T>(*i);
        if (static_cast<int64_t>(v) != *i) lossy(key, typeid(T));
        return v;
      }
      if (const double* d = std::any_cast<double>(&a)) {
        const T v = static_cast<T>(*d);
        if (!(static_cast<double>(v) == *d || (std::is_floating_point_v<T> && *d != *d)))
          lossy(key, typeid(T));
        return v;
      }
    }
    if (const T* p = std::any_cast<T>(&a)) return *p;
    wrong_type(key, typeid(T));
  }
  bool has(const std::string& key) const { return data.count(key) != 0; }
  std::map<std::string, std::any> data;

 private:
  const std::any& lookup(const std::string& key, const std::type_info& want) const;
  [[noreturn]] void wrong_type(const std::string& key, const std::type_info& want) const;
  [[noreturn]] void lossy(const std::string& key, const std::type_info& want) const;
  template <typename, typename, typename>
  friend struct detail::AutogradKernel;
  template <size_t, size_t>
  friend struct detail::CustomNode;
  // The saved tensors: the first kInlineSaved inside the context (so inside the node's
  // one allocation), any further ones in `more`.
  struct SavedList {
    static constexpr size_t kInlineSaved = 2;
    std::array<autograd::SavedTensor, kInlineSaved> first;
    std::vector<autograd::SavedTensor> more;
    size_t n = 0;
    void push(const Tensor& t, bool is_output) {
      if (n < kInlineSaved)
        first[n] = autograd::SavedTensor(t, is_output);
      else
        more.emplace_back(t, is_output);
      ++n;
    }
    const autograd::SavedTensor& operator[](size_t i) const {
      return i < kInlineSaved ? first[i] : more[i - kInlineSaved];
    }
    size_t size() const { return n; }
    void clear() {
      for (size_t i = 0; i < n && i < kInlineSaved; ++i) first[i] = {};
      more.clear();
      n = 0;
    }
  };
  SavedList saved_;
  uint64_t needs_input_grad_ = 0;    // bit i: tensor input i requires grad
  std::span<const Tensor> outputs_;  // during setup_context only, to tell outputs from inputs
  std::string_view op_;              // the node's name (the node owns this context)
  autograd::Node* node_ = nullptr;
};

namespace detail {

template <typename T>
inline constexpr size_t tensor_arg_count =
    std::is_same_v<std::remove_cvref_t<T>, Tensor> ||
    std::is_same_v<std::remove_cvref_t<T>, std::optional<Tensor>>;

// Calls f(const Tensor&) for each tensor a kernel argument holds: a Tensor, an optional
// one (an undefined Tensor when empty) and, with Lists, each element of a Tensor list.
// Other argument types hold none. Tensor lists are not differentiable inputs of a custom
// op (its backward returns one gradient per Tensor argument), so autograd visits without.
template <bool Lists, typename T, typename F>
void visit_tensors(const T& v, F&& f) {
  if constexpr (std::is_same_v<T, Tensor>) {
    f(v);
  } else if constexpr (std::is_same_v<T, std::optional<Tensor>>) {
    static const Tensor none;
    f(v ? *v : none);
  } else if constexpr (Lists && std::is_same_v<T, std::vector<Tensor>>) {
    for (const Tensor& t : v) f(t);
  }
}

template <typename Ret>
inline constexpr size_t output_count = 1;
template <typename... Ts>
inline constexpr size_t output_count<std::tuple<Ts...>> = sizeof...(Ts);

template <typename Ret>
std::vector<Tensor> flatten_outputs(const Ret& r) {
  if constexpr (std::is_same_v<Ret, Tensor>) {
    return {r};
  } else {
    return std::apply([](const auto&... ts) { return std::vector<Tensor>{ts...}; }, r);
  }
}

template <typename R>
std::vector<Tensor> gradients_to_vector(R&& r) {
  using T = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) {
    return {std::forward<R>(r)};
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    return std::forward<R>(r);
  } else {
    return std::apply([](auto&&... ts) { return std::vector<Tensor>{Tensor(ts)...}; },
                      std::forward<R>(r));
  }
}

// T, once for each I of a pack: repeat_t<const Tensor&, I>... is one argument per index.
// Through a class template, because clang (15 and 16) drops a pack expansion over an alias
// template that does not use its parameter (CWG 1558), and would see one argument.
template <typename T, size_t>
struct repeat {
  using type = T;
};
template <typename T, size_t I>
using repeat_t = typename repeat<T, I>::type;

// Checks a backward/setup_context pair against an op of signature Ret(Args...) at compile
// time: the tutorial's register_autograd mistake becomes a build error, not a runtime one.
template <typename Backward, typename Ret, typename... Args>
struct BackwardCheck {
  static constexpr size_t n_in = (tensor_arg_count<Args> + ... + 0);
  static constexpr size_t n_out = output_count<Ret>;
  template <size_t... I>
  static constexpr bool invocable(std::index_sequence<I...>) {
    return std::is_invocable_v<Backward, AutogradContext&, repeat_t<const Tensor&, I>...>;
  }
  static constexpr bool callable = invocable(std::make_index_sequence<n_out>{});
  template <size_t... I>
  static auto result(std::index_sequence<I...>)
      -> std::invoke_result_t<Backward, AutogradContext&, repeat_t<const Tensor&, I>...>;
  template <typename R>
  static constexpr size_t count() {
    if constexpr (std::is_same_v<R, Tensor>)
      return 1;
    else if constexpr (std::is_same_v<R, std::vector<Tensor>>)
      return n_in;  // checked at run time
    else if constexpr (requires { std::tuple_size<R>::value; })
      return std::tuple_size_v<R>;
    else
      return size_t(-1);
  }
};

// The tape entry of a custom op: the node with its AutogradContext and its input slots
// (and output slots, unless the op returns a Tensor list: NOut 0) in one allocation.
template <size_t NIn, size_t NOut>
struct CustomNode final : autograd::Node {
  explicit CustomNode(size_t n_out) {
    if constexpr (NOut == 0)
      allocate_slots(0, n_out);
    else
      outputs = out_slots;
    inputs = in_slots;
  }
  void release() override {
    autograd::Node::release();
    ctx.saved_.clear();
    ctx.data.clear();
  }
  size_t saved_count() const override { return ctx.saved_.size(); }
  AutogradContext ctx;
  std::array<autograd::InputSlot, NIn> in_slots;
  std::array<autograd::OutputMeta, NOut> out_slots;
};

template <typename Ret, typename... Args, typename Backward>
struct AutogradKernel<Ret, std::tuple<Args...>, Backward> {
  static constexpr size_t kTensors = (tensor_arg_count<Args> + ... + 0);
  static constexpr bool kFixedOutputs = !std::is_same_v<Ret, std::vector<Tensor>>;
  using NodeT = CustomNode<kTensors, kFixedOutputs ? output_count<Ret> : 0>;

  template <typename Setup>
  static KernelFunction make(std::string name, TypedOperatorHandle<Ret(Args...)> op,
                             Backward backward, Setup setup) {
    return KernelFunction::make(
        [name = std::move(name), op, backward = std::move(backward), setup = std::move(setup)](
            DispatchKeySet ks, canon_t<Args>... args) -> Ret {
          Ret out = [&] {
            ExcludeDispatchKeyGuard below(DispatchKey::Autograd);
            return op.redispatch(ks.below(DispatchKey::Autograd), args...);
          }();
          bool any = false;
          (visit_tensors<false>(
               args, [&](const Tensor& t) { any = any || (t.defined() && t.requires_grad()); }),
           ...);
          if (!any) return out;
          std::array<const Tensor*, kTensors> inputs;  // the tensor inputs, in order
          size_t n = 0;
          (visit_tensors<false>(args, [&](const Tensor& t) { inputs[n++] = &t; }), ...);
          size_t n_out = output_count<Ret>;
          if constexpr (!kFixedOutputs) n_out = out.size();
          auto made = make_object<NodeT>(n_out);
          NodeT* typed = made.get();  // alive while `node` or an output holds it
          std::shared_ptr<autograd::Node> node = std::move(made);
          autograd::record_node(node, name, inputs);
          uint64_t needs = 0;
          for (size_t i = 0; i < kTensors && i < 64; ++i)
            if (typed->inputs[i].requires_grad) needs |= uint64_t(1) << i;
          AutogradContext& ctx = typed->ctx;
          ctx.op_ = typed->name;
          ctx.needs_input_grad_ = needs;
          auto with_outputs = [&](std::span<const Tensor> outs) {
            // history first, so a saved output remembers it requires grad (double backward);
            // the last output takes the node by move (no atomic reference-count pair)
            if (!outs.empty()) {
              const size_t last = outs.size() - 1;
              for (size_t i = 0; i < last; ++i) autograd::set_history(outs[i], node, uint32_t(i));
              autograd::set_history(outs[last], std::move(node), uint32_t(last));
            }
            ctx.outputs_ = outs;
            NoGradGuard no_grad;
            setup(ctx, args..., out);
          };
          if constexpr (std::is_same_v<Ret, Tensor>) {
            with_outputs(std::span<const Tensor>(&out, 1));
          } else if constexpr (std::is_same_v<Ret, std::vector<Tensor>>) {
            with_outputs(out);
          } else {
            auto outs = std::apply(
                [](const auto&... ts) { return std::array<Tensor, sizeof...(ts)>{ts...}; }, out);
            with_outputs(outs);
          }
          ctx.outputs_ = {};
          typed->backward = [backward](autograd::Node& n, const std::vector<Tensor>& grads) {
            auto& c = static_cast<NodeT&>(n).ctx;
            c.node_ = &n;
            return [&]<size_t... I>(std::index_sequence<I...>) {
              return gradients_to_vector(backward(c, grads[I]...));
            }
            (std::make_index_sequence<output_count<Ret>>{});
          };
          return out;
        });
  }
};

}  // namespace detail

}  // namespace mt
