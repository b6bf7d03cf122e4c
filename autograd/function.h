// The autograd kernel that register_autograd installs: it runs the op below the
// Autograd key, then records one tape entry whose backward calls the user's formula.
#pragma once

#include <any>
#include <map>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "dispatcher/dispatcher.h"

namespace mt {

namespace detail {
template <typename Ret, typename Args, typename Backward>
struct AutogradKernel;
}

// What setup_context saves for backward: tensors (version-checked at backward) and
// any other values in `data`.
class AutogradContext {
 public:
  void save_for_backward(const std::vector<Tensor>& tensors);
  // The saved tensors, in order; throws if one was changed in place since it was saved.
  std::vector<Tensor> saved() const;
  // Whether the i-th tensor input needs a gradient (skip computing those that do not).
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  std::map<std::string, std::any> data;

 private:
  template <typename, typename, typename>
  friend struct detail::AutogradKernel;
  std::vector<autograd::SavedTensor> saved_;
  std::vector<bool> needs_input_grad_;
  std::vector<Tensor> outputs_;  // set during setup_context, to tell outputs from inputs
  std::string op_;
  autograd::Node* node_ = nullptr;
};

namespace detail {

template <typename T>
inline constexpr size_t tensor_arg_count = std::is_same_v<std::remove_cvref_t<T>, Tensor> ||
                                           std::is_same_v<std::remove_cvref_t<T>, std::optional<Tensor>>;

template <typename T>
void collect_tensor(std::vector<Tensor>& out, const T& v) {
  if constexpr (std::is_same_v<T, Tensor>) {
    out.push_back(v);
  } else if constexpr (std::is_same_v<T, std::optional<Tensor>>) {
    out.push_back(v ? *v : Tensor());
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
    return std::apply([](auto&&... ts) { return std::vector<Tensor>{Tensor(ts)...}; }, std::forward<R>(r));
  }
}

template <typename T, size_t>
using repeat_t = T;

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
    if constexpr (std::is_same_v<R, Tensor>) return 1;
    else if constexpr (std::is_same_v<R, std::vector<Tensor>>) return n_in;  // checked at run time
    else if constexpr (requires { std::tuple_size<R>::value; }) return std::tuple_size_v<R>;
    else return size_t(-1);
  }
};

template <typename Ret, typename... Args, typename Backward>
struct AutogradKernel<Ret, std::tuple<Args...>, Backward> {
  template <typename Setup>
  static KernelFunction make(std::string name, TypedOperatorHandle<Ret(Args...)> op,
                             Backward backward, Setup setup) {
    return KernelFunction::make(
        [name = std::move(name), op, backward = std::move(backward),
         setup = std::move(setup)](DispatchKeySet ks, canon_t<Args>... args) -> Ret {
          std::vector<Tensor> inputs;
          (collect_tensor(inputs, canon_value_cref(args)), ...);
          Ret out = [&] {
            ExcludeDispatchKeyGuard below(DispatchKey::Autograd);
            return op.redispatch(ks.below(DispatchKey::Autograd), args...);
          }();
          if (!autograd::any_requires_grad(inputs)) return out;
          auto node = autograd::make_node(name, inputs);
          auto ctx = std::make_shared<AutogradContext>();
          ctx->op_ = name;
          for (const Tensor& t : inputs) ctx->needs_input_grad_.push_back(t.defined() && t.requires_grad());
          ctx->outputs_ = flatten_outputs(out);
          // history first, so a saved output remembers it requires grad (double backward)
          for (size_t i = 0; i < ctx->outputs_.size(); ++i)
            autograd::set_history(ctx->outputs_[i], node, uint32_t(i));
          {
            NoGradGuard no_grad;
            setup(*ctx, args..., out);
          }
          ctx->outputs_.clear();
          node->context = ctx;
          node->backward = [backward](autograd::Node& n, const std::vector<Tensor>& grads) {
            auto& c = *static_cast<AutogradContext*>(n.context.get());
            c.node_ = &n;
            return [&]<size_t... I>(std::index_sequence<I...>) {
              return gradients_to_vector(backward(c, grads[I]...));
            }(std::make_index_sequence<output_count<Ret>>{});
          };
          return out;
        });
  }

 private:
  template <typename T>
  static const T& canon_value_cref(const T& v) { return v; }
};

}  // namespace detail

}  // namespace mt
