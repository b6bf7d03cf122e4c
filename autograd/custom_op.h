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
      (visit_tensors<true>(args, [&](const Tensor& t) {
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
      std::apply([&](const auto&... ts) {
        size_t o = 0;
        (check_output(o++, ts), ...);
      }, *r);
    }
  }
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
    using Traits = detail::FnTraits<std::remove_cvref_t<F>>;
    static_assert(std::is_same_v<typename Traits::ret, Ret>,
                  "register_fake: the fake function must return what the op returns");
    lib_->impl(op_.name().str(), DispatchKey::Fake,
               [fn = std::move(fn)](detail::canon_t<Args>... args) -> Ret {
                 FakeMode fake;
                 return fn(args...);
               },
               loc);
    return *this;
  }

  // backward(ctx, grad_out...) returns one gradient per Tensor input (a Tensor, a
  // std::tuple of Tensors, or a std::vector<Tensor>; undefined where none is needed);
  // setup_context(ctx, inputs..., output) saves what backward needs.
  template <typename Backward, typename Setup>
  CustomOp& register_autograd(Backward backward, Setup setup_context,
                              std::source_location loc = std::source_location::current()) {
    static_assert(!std::is_void_v<Ret>,
                  "register_autograd: the op returns nothing, so there is nothing to differentiate");
    using Check = detail::BackwardCheck<Backward, Ret, Args...>;
    static_assert(Check::callable,
                  "register_autograd: backward must be callable as backward(ctx, grad) with "
                  "mt::AutogradContext& ctx and one const Tensor& gradient per output of the op");
    if constexpr (Check::callable) {
      using R = decltype(Check::result(std::make_index_sequence<Check::n_out>{}));
      static_assert(Check::template count<std::remove_cvref_t<R>>() == Check::n_in,
                    "register_autograd: backward must return one gradient per Tensor input of "
                    "the op (a Tensor for one input, a std::tuple<Tensor, ...> for several)");
    }
    static_assert(std::is_invocable_v<Setup, AutogradContext&, detail::canon_t<Args>...,
                                      std::add_lvalue_reference_t<const Ret>>,
                  "register_autograd: setup_context must be callable as setup_context(ctx, "
                  "inputs..., output) with the op's arguments followed by its output");
    MT_CHECK(!op_.schema().is_mutable(),
             "[register_autograd] '{}' mutates its inputs ({}); autograd formulas can only be "
             "registered for functional ops: return a new tensor instead of writing to an input",
             op_.name().str(), op_.schema().str());
    lib_->impl(op_.name().str(), DispatchKey::Autograd,
               detail::AutogradKernel<Ret, std::tuple<Args...>, Backward>::make(
                   op_.name().str(), op_, std::move(backward), std::move(setup_context)),
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
    return KernelFunction::make(
        [fn = std::move(fn), pc](detail::canon_t<Args>... args) -> Ret {
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
  lib->def(schema.str(), loc);
  Op op(lib, dispatcher().find_or_throw(schema.full_name()));
  lib->impl(schema.full_name(), DispatchKey::CPU, op.wrap(std::move(fn)), loc);
  return op;
}

}  // namespace mt
