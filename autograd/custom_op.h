// SPDX-License-Identifier: MIT
// mt::custom_op: torch.library.custom_op in C++. One call defines "ns::name" (schema
// inferred from the C++ signature, or given) with fn as its CPU kernel; the handle then
// takes register_kernel, register_fake and register_autograd, and calls the op.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "dispatcher/library.h"
#include "runtime/fake.h"

namespace mt {

struct CustomOpOptions {
  // Names of the arguments fn writes to (inferred schemas name them _0, _1, ...). They
  // get Tensor(aN!) annotations and their version counters are bumped after each call.
  std::vector<std::string> mutates_args = {};
  // An explicit schema "(Tensor x, float alpha) -> Tensor" (names, defaults); else inferred.
  std::string schema = {};
  // Tags of the definition (dispatcher/tags.h), e.g. {Tag::cudagraph_unsafe}.
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
