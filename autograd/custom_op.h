// SPDX-License-Identifier: MIT
// mt::custom_op: torch.library.custom_op in C++. One call defines "ns::name" (schema
// inferred from the C++ signature, or given) with fn as its CPU kernel; the handle then
// takes register_kernel, register_fake and register_autograd, and calls the op.
#pragma once

#include <any>
#include <array>
#include <initializer_list>
#include <map>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include "autograd/autograd.h"
#include "dispatcher/dispatcher.h"
#include "dispatcher/library.h"
#include "runtime/tensor.h"

namespace mt {

// The autograd kernel that register_autograd installs: it runs the op below the
// Autograd key, then records one tape entry whose backward calls the user's formula.

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
    std::array<mt::SavedTensor, kInlineSaved> first;
    std::vector<mt::SavedTensor> more;
    size_t n = 0;
    void push(const Tensor& t, bool is_output) {
      if (n < kInlineSaved)
        first[n] = mt::SavedTensor(t, is_output);
      else
        more.emplace_back(t, is_output);
      ++n;
    }
    const mt::SavedTensor& operator[](size_t i) const {
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
  mt::Node* node_ = nullptr;
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
struct CustomNode final : mt::Node {
  explicit CustomNode(size_t n_out) {
    if constexpr (NOut == 0)
      allocate_slots(0, n_out);
    else
      outputs = out_slots;
    inputs = in_slots;
  }
  void release() override {
    mt::Node::release();
    ctx.saved_.clear();
    ctx.data.clear();
  }
  size_t saved_count() const override { return ctx.saved_.size(); }
  AutogradContext ctx;
  std::array<mt::InputSlot, NIn> in_slots;
  std::array<mt::OutputMeta, NOut> out_slots;
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
          std::shared_ptr<mt::Node> node = std::move(made);
          mt::detail::record_node(node, name, inputs);
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
              for (size_t i = 0; i < last; ++i) mt::detail::set_history(outs[i], node, uint32_t(i));
              mt::detail::set_history(outs[last], std::move(node), uint32_t(last));
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
          typed->backward = [backward](mt::Node& n, const std::vector<Tensor>& grads) {
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

struct CustomOpOptions {
  // Names of the arguments fn writes to (inferred schemas name them _0, _1, ...). They
  // get Tensor(aN!) annotations and their version counters are bumped after each call.
  std::vector<std::string> mutates_args = {};
  // An explicit schema "(Tensor x, float alpha) -> Tensor" (names, defaults); else inferred.
  std::string schema = {};
  // Tags of the definition (dispatcher/schema.h), e.g. {Tag::cudagraph_unsafe}.
  TagSet tags = {};
};

namespace detail {
FunctionSchema custom_op_schema(std::string_view name, FunctionSchema inferred,
                                const CustomOpOptions& opts);

// What the wrapper of a custom op's kernel checks after each call, worked out once from
// the schema when the kernel is registered.
struct PostCall {
  FunctionSchema schema;
  uint64_t mutated_args = 0;       // bit i: argument i is written (Tensor(a!)), version bumped
  uint64_t annotated_returns = 0;  // bit o: return o declares an alias, so may share memory
  explicit PostCall(FunctionSchema s);
  // The error for output `o` sharing memory with tensor input `i` (counting list elements).
  [[noreturn]] void alias_error(size_t i, size_t o) const;
};

inline const StorageImpl* storage_of(const Tensor& t) {
  const TensorImpl* p = t.impl();
  return p != nullptr && !p->fake ? p->storage.get() : nullptr;
}

// After a kernel call: bump mutated inputs' versions; refuse outputs that alias inputs
// without an alias annotation. No allocation: this runs on every call.
template <typename Ret, typename... A>
void post_call(const PostCall& pc, const Ret* r, const A&... args) {
  if (pc.mutated_args != 0) {
    size_t pos = 0;
    auto bump = [&](const auto& v) {
      if (pos < 64 && (pc.mutated_args >> pos & 1u))
        visit_tensors<true>(v, [](const Tensor& t) {
          if (t.defined()) t.bump_version();
        });
      ++pos;
    };
    (bump(args), ...);
  }
  if constexpr (!std::is_void_v<Ret>) {
    auto check_output = [&](size_t o, const Tensor& out) {
      if (o < 64 && (pc.annotated_returns >> o & 1u)) return;
      const StorageImpl* so = storage_of(out);
      if (so == nullptr) return;
      size_t i = 0;  // tensor inputs, list elements flattened
      (visit_tensors<true>(args,
                           [&](const Tensor& t) {
                             if (storage_of(t) == so) pc.alias_error(i, o);
                             ++i;
                           }),
       ...);
    };
    if constexpr (std::is_same_v<Ret, Tensor>) {
      check_output(0, *r);
    } else if constexpr (std::is_same_v<Ret, std::vector<Tensor>>) {
      for (size_t o = 0; o < r->size(); ++o) check_output(o, (*r)[o]);
    } else {
      std::apply(
          [&](const auto&... ts) {
            size_t o = 0;
            (check_output(o++, ts), ...);
          },
          *r);
    }
  }
}
}  // namespace detail

namespace detail {
// The compile-time checks of a backward/setup_context pair for an op of signature
// Ret(Args...) (the handle's and the by-name register_autograd's), then its kernel.
template <typename Sig, typename Backward, typename Setup>
struct AutogradChecks;
template <typename Ret, typename... Args, typename Backward, typename Setup>
struct AutogradChecks<Ret(Args...), Backward, Setup> {
  static KernelFunction make(const TypedOperatorHandle<Ret(Args...)>& op, Backward backward,
                             Setup setup_context) {
    static_assert(
        !std::is_void_v<Ret>,
        "register_autograd: the op returns nothing, so there is nothing to differentiate");
    using Check = BackwardCheck<Backward, Ret, Args...>;
    static_assert(Check::callable,
                  "register_autograd: backward must be callable as backward(ctx, grad) with "
                  "mt::AutogradContext& ctx and one const Tensor& gradient per output of the op");
    if constexpr (Check::callable) {
      using R = decltype(Check::result(std::make_index_sequence<Check::n_out>{}));
      static_assert(Check::template count<std::remove_cvref_t<R>>() == Check::n_in,
                    "register_autograd: backward must return one gradient per Tensor input of "
                    "the op (a Tensor for one input, a std::tuple<Tensor, ...> for several)");
    }
    static_assert(std::is_invocable_v<Setup, AutogradContext&, canon_t<Args>...,
                                      std::add_lvalue_reference_t<const Ret>>,
                  "register_autograd: setup_context must be callable as setup_context(ctx, "
                  "inputs..., output) with the op's arguments followed by its output");
    MT_CHECK(!op.schema().is_mutable(),
             "[register_autograd] '{}' mutates its inputs ({}); autograd formulas can only be "
             "registered for functional ops: return a new tensor instead of writing to an input",
             op.name().str(), op.schema().str());
    return AutogradKernel<Ret, std::tuple<Args...>, Backward>::make(
        op.name().str(), op, std::move(backward), std::move(setup_context));
  }
};
template <typename Sig, typename Backward, typename Setup>
KernelFunction checked_autograd_kernel(const TypedOperatorHandle<Sig>& op, Backward backward,
                                       Setup setup_context) {
  return AutogradChecks<Sig, Backward, Setup>::make(op, std::move(backward),
                                                    std::move(setup_context));
}
}  // namespace detail

template <typename Sig>
class CustomOp;

template <typename Ret, typename... Args>
class CustomOp<Ret(Args...)> {
 public:
  CustomOp(std::shared_ptr<Library> lib, OperatorHandle h)
      : lib_(std::move(lib)), op_(h.typed<Ret(Args...)>()) {}

  // A kernel for CUDA (or another CPU one); it replaces fn for that device.
  template <typename F>
  CustomOp& register_kernel(DeviceType device, F fn,
                            std::source_location loc = std::source_location::current()) {
    lib_->impl(op_.name().str(), device == DeviceType::CPU ? DispatchKey::CPU : DispatchKey::CUDA,
               wrap(std::move(fn)), loc);
    return *this;
  }

  // The shape function: runs on fake tensors under FakeMode (so mt::empty_like makes
  // fake tensors) and returns outputs with the real kernel's sizes, dtype and device.
  template <typename F>
  CustomOp& register_fake(F fn, std::source_location loc = std::source_location::current()) {
    static_assert(std::is_invocable_v<const F&, detail::canon_t<Args>...>,
                  "register_fake: the fake function must be callable with the op's arguments: "
                  "one parameter for each argument of the op, of the kernel's types");
    if constexpr (std::is_invocable_v<const F&, detail::canon_t<Args>...>) {
      static_assert(std::is_same_v<std::invoke_result_t<const F&, detail::canon_t<Args>...>, Ret>,
                    "register_fake: the fake function must return what the op returns");
      // The dispatcher runs it under FakeMode (Note [Fake is always fake]).
      lib_->impl(
          op_.name().str(), DispatchKey::Fake,
          [fn = std::move(fn)](detail::canon_t<Args>... args) -> Ret { return fn(args...); }, loc);
    }
    return *this;
  }

  // backward(ctx, grad_out...) returns one gradient per Tensor input (a Tensor, a
  // std::tuple of Tensors, or a std::vector<Tensor>; undefined where none is needed);
  // setup_context(ctx, inputs..., output) saves what backward needs.
  template <typename Backward, typename Setup>
  CustomOp& register_autograd(Backward backward, Setup setup_context,
                              std::source_location loc = std::source_location::current()) {
    lib_->impl(op_.name().str(), DispatchKey::Autograd,
               detail::checked_autograd_kernel<Ret(Args...)>(op_, std::move(backward),
                                                             std::move(setup_context)),
               loc);
    return *this;
  }

  Ret operator()(detail::canon_t<Args>... args) const { return op_.call(args...); }
  const TypedOperatorHandle<Ret(Args...)>& handle() const { return op_; }
  std::string name() const { return op_.name().str(); }
  const FunctionSchema& schema() const { return op_.schema(); }

  // Wraps a kernel: mutated inputs get their versions bumped, aliasing outputs are refused.
  template <typename F>
  KernelFunction wrap(F fn) const {
    auto pc = std::make_shared<const detail::PostCall>(op_.schema());
    return KernelFunction::make([fn = std::move(fn), pc](detail::canon_t<Args>... args) -> Ret {
      if constexpr (std::is_void_v<Ret>) {
        fn(args...);
        detail::post_call<void>(*pc, nullptr, args...);
      } else {
        Ret r = fn(args...);
        detail::post_call(*pc, &r, args...);
        return r;
      }
    });
  }

 private:
  std::shared_ptr<Library> lib_;  // owns the registrations: they live as long as a handle does
  TypedOperatorHandle<Ret(Args...)> op_;
};

namespace detail {
template <typename Ret, typename ArgsTuple>
struct CustomOpFor;
template <typename Ret, typename... Args>
struct CustomOpFor<Ret, std::tuple<Args...>> {
  using type = CustomOp<Ret(Args...)>;
};
}  // namespace detail

// Defines `name` ("namespace::op") with `fn` as its CPU kernel.
template <typename F>
auto custom_op(std::string_view name, F fn, CustomOpOptions opts = {},
               std::source_location loc = std::source_location::current()) {
  using Traits = detail::FnTraits<std::remove_cvref_t<F>>;
  using Op = typename detail::CustomOpFor<typename Traits::ret, typename Traits::args>::type;
  check_operator_name(name);
  FunctionSchema schema = detail::custom_op_schema(name, infer_schema<F>(name), opts);
  auto lib = std::make_shared<Library>(Library::Kind::Fragment, schema.ns, std::nullopt, loc);
  lib->def(schema.str(), DefOptions{.tags = opts.tags}, loc);
  Op op(lib, dispatcher().find_or_throw(schema.full_name()));
  lib->impl(schema.full_name(), DispatchKey::CPU, op.wrap(std::move(fn)), loc);
  return op;
}

// ---- registration by name, for any op (MT_LIBRARY or custom_op) ---------------------
//
// Note [Registration lifetime]
// Every registration belongs to an owner and is undone when its owner is destroyed: a
// Library (an MT_LIBRARY block's lives for the process), a custom_op handle (and its
// copies), or the Registration a by-name call returns. So a by-name registration made in
// an MT_LIBRARY block either goes to the block's library, mt::register_fake(m, "ns::op",
// fn), or its Registration is kept (a static). An op whose definition was undone is
// "dropped": looking it up says where it was defined and that its owner was destroyed.

// What a by-name registration returns: the registration is undone when the last copy
// is destroyed, or by reset().
class [[nodiscard]] Registration {
 public:
  Registration() = default;
  explicit Registration(std::shared_ptr<Library> lib) : lib_(std::move(lib)) {}
  void reset() { lib_.reset(); }
  bool active() const { return lib_ != nullptr; }

 private:
  std::shared_ptr<Library> lib_;
};

namespace detail {
// The C++ signature of an op from a setup_context(ctx, inputs..., output).
template <typename Tuple, size_t... I>
auto take_front(std::index_sequence<I...>) -> std::tuple<std::tuple_element_t<I, Tuple>...>;
template <typename Args>
struct SetupSignature {
  static constexpr bool ok = false;
};
template <typename Ctx, typename... Rest>
requires(sizeof...(Rest) >= 1) struct SetupSignature<std::tuple<Ctx, Rest...>> {
  static constexpr bool ok = true;
  using all = std::tuple<Rest...>;
  using ret = std::remove_cvref_t<std::tuple_element_t<sizeof...(Rest) - 1, all>>;
  using args = decltype(take_front<all>(std::make_index_sequence<sizeof...(Rest) - 1>{}));
};
template <typename Ret, typename Args>
struct MakeSig;
template <typename Ret, typename... Args>
struct MakeSig<Ret, std::tuple<Args...>> {
  using type = Ret(Args...);
};

// A kernel for `key` of an op, from fn; Sig (when given) is checked at compile time.
template <typename Sig, typename F>
KernelFunction by_name_kernel(F fn) {
  if constexpr (std::is_void_v<Sig>) {
    return KernelFunction::make(std::move(fn));  // its own signature, checked against the schema
  } else {
    return []<typename Ret, typename... Args>(F f, Ret (*)(Args...)) {
      static_assert(std::is_invocable_v<const F&, canon_t<Args>...>,
                    "register_fake / register_kernel: the function must be callable with the "
                    "op's arguments: one parameter for each argument of the signature given");
      if constexpr (std::is_invocable_v<const F&, canon_t<Args>...>) {
        static_assert(std::is_same_v<std::invoke_result_t<const F&, canon_t<Args>...>, Ret>,
                      "register_fake / register_kernel: the function must return what the "
                      "signature given returns");
        return KernelFunction::make(
            [f = std::move(f)](canon_t<Args>... args) -> Ret { return f(args...); });
      } else {
        return KernelFunction();
      }
    }(std::move(fn), (Sig*)nullptr);
  }
}

std::shared_ptr<Library> by_name_library(std::string_view op, std::source_location loc);
inline DispatchKey device_key(DeviceType d) {
  return d == DeviceType::CPU ? DispatchKey::CPU : DispatchKey::CUDA;
}
}  // namespace detail

// register_fake("ns::op", fn): fn is the op's Fake kernel (run under FakeMode; Note [Fake
// is always fake]). With a signature, register_fake<Tensor(const Tensor&, double)>(...),
// fn is checked against it at compile time; without one, fn's own signature is checked
// against the schema when it registers.
template <typename Sig = void, typename F>
Registration register_fake(std::string_view op, F fn,
                           std::source_location loc = std::source_location::current()) {
  auto lib = detail::by_name_library(op, loc);
  if constexpr (!std::is_void_v<Sig>) (void)dispatcher().find_or_throw(op).typed<Sig>();
  lib->impl(op, DispatchKey::Fake, detail::by_name_kernel<Sig>(std::move(fn)), loc);
  return Registration(std::move(lib));
}
// The same, owned by a library (`m` in an MT_LIBRARY block: for the life of the process).
template <typename Sig = void, typename F>
void register_fake(Library& owner, std::string_view op, F fn,
                   std::source_location loc = std::source_location::current()) {
  if constexpr (!std::is_void_v<Sig>) (void)dispatcher().find_or_throw(op).typed<Sig>();
  owner.impl(op, DispatchKey::Fake, detail::by_name_kernel<Sig>(std::move(fn)), loc);
}

// register_kernel("ns::op", DeviceType::CUDA, fn): fn is the op's kernel for that device.
template <typename Sig = void, typename F>
Registration register_kernel(std::string_view op, DeviceType device, F fn,
                             std::source_location loc = std::source_location::current()) {
  auto lib = detail::by_name_library(op, loc);
  if constexpr (!std::is_void_v<Sig>) (void)dispatcher().find_or_throw(op).typed<Sig>();
  lib->impl(op, detail::device_key(device), detail::by_name_kernel<Sig>(std::move(fn)), loc);
  return Registration(std::move(lib));
}
template <typename Sig = void, typename F>
void register_kernel(Library& owner, std::string_view op, DeviceType device, F fn,
                     std::source_location loc = std::source_location::current()) {
  if constexpr (!std::is_void_v<Sig>) (void)dispatcher().find_or_throw(op).typed<Sig>();
  owner.impl(op, detail::device_key(device), detail::by_name_kernel<Sig>(std::move(fn)), loc);
}

namespace detail {
template <typename Sig, typename Setup>
struct AutogradSig {
  using type = Sig;
};
template <typename Setup>
struct AutogradSig<void, Setup> {
  using S = SetupSignature<typename FnTraits<std::remove_cvref_t<Setup>>::args>;
  static_assert(S::ok,
                "register_autograd: setup_context must be callable as setup_context(ctx, "
                "inputs..., output) with the op's arguments followed by its output");
  using type = typename MakeSig<typename S::ret, typename S::args>::type;
};
template <typename Sig, typename Backward, typename Setup>
KernelFunction by_name_autograd(std::string_view op, Backward backward, Setup setup) {
  using S = typename AutogradSig<Sig, Setup>::type;
  // the C++ signature (given, or setup_context's) against the schema, at run time
  auto typed = dispatcher().find_or_throw(op).template typed<S>();
  return checked_autograd_kernel<S>(typed, std::move(backward), std::move(setup));
}
}  // namespace detail

// register_autograd("ns::op", backward, setup_context): the op's autograd formula, as on
// a custom_op handle, with the same compile-time checks against the op's C++ signature:
// the one given (register_autograd<Tensor(const Tensor&, double)>(...)), or else the one
// setup_context(ctx, inputs..., output) spells out. That signature is checked against the
// schema when it registers.
template <typename Sig = void, typename Backward, typename Setup>
Registration register_autograd(std::string_view op, Backward backward, Setup setup_context,
                               std::source_location loc = std::source_location::current()) {
  auto lib = detail::by_name_library(op, loc);
  lib->impl(op, DispatchKey::Autograd,
            detail::by_name_autograd<Sig>(op, std::move(backward), std::move(setup_context)), loc);
  return Registration(std::move(lib));
}
template <typename Sig = void, typename Backward, typename Setup>
void register_autograd(Library& owner, std::string_view op, Backward backward, Setup setup_context,
                       std::source_location loc = std::source_location::current()) {
  owner.impl(op, DispatchKey::Autograd,
             detail::by_name_autograd<Sig>(op, std::move(backward), std::move(setup_context)), loc);
}

}  // namespace mt
