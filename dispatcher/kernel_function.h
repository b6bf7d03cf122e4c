// SPDX-License-Identifier: MIT
// Value and Stack: the boxed calling convention. A boxed kernel or fallback sees
// its arguments as Values on a Stack, pops them, and pushes its results. KernelFunction: one
// registered kernel, callable unboxed and boxed (below).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "dispatcher/schema.h"
#include "runtime/tensor.h"

namespace mt {

class Value {
 public:
  using Storage =
      std::variant<std::monostate, Tensor, std::vector<Tensor>, int64_t, double, bool, std::string,
                   std::vector<int64_t>, std::vector<double>, DType, Device>;

  Value() = default;                     // None
  Value(std::nullopt_t) {}               // NOLINT
  Value(Tensor t) : v_(std::move(t)) {}  // NOLINT: an undefined Tensor boxes as a Tensor
  Value(std::optional<Tensor> t) {       // NOLINT
    if (t) v_ = std::move(*t);
  }
  // int?, float?, ScalarType? and the like: the value, or None.
  template <typename T>
  Value(const std::optional<T>& o) {  // NOLINT
    if (o) *this = Value(*o);
  }
  Value(std::vector<Tensor> ts) : v_(std::move(ts)) {}  // NOLINT
  Value(int64_t i) : v_(i) {}                           // NOLINT
  Value(int i) : v_(int64_t(i)) {}                      // NOLINT
  Value(double d) : v_(d) {}                            // NOLINT
  Value(bool b) : v_(b) {}                              // NOLINT
  Value(std::string s) : v_(std::move(s)) {}            // NOLINT
  Value(const char* s) : v_(std::string(s)) {}          // NOLINT
  Value(std::vector<int64_t> l) : v_(std::move(l)) {}   // NOLINT
  Value(const Shape& s) : v_(s.vec()) {}                // NOLINT
  Value(std::vector<double> l) : v_(std::move(l)) {}    // NOLINT
  Value(DType t) : v_(t) {}                             // NOLINT
  Value(Device d) : v_(d) {}                            // NOLINT

  bool is_none() const { return v_.index() == 0; }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_tensor_list() const { return std::holds_alternative<std::vector<Tensor>>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_int_list() const { return std::holds_alternative<std::vector<int64_t>>(v_); }

  const Tensor& to_tensor() const { return get<Tensor>("Tensor"); }
  std::optional<Tensor> to_optional_tensor() const {
    if (is_none()) return std::nullopt;
    return to_tensor();
  }
  const std::vector<Tensor>& to_tensor_list() const { return get<std::vector<Tensor>>("Tensor[]"); }
  int64_t to_int() const { return get<int64_t>("int"); }
  double to_double() const { return is_int() ? double(to_int()) : get<double>("float"); }
  bool to_bool() const { return get<bool>("bool"); }
  const std::string& to_string() const { return get<std::string>("str"); }
  const std::vector<int64_t>& to_int_list() const { return get<std::vector<int64_t>>("int[]"); }
  const std::vector<double>& to_double_list() const { return get<std::vector<double>>("float[]"); }
  DType to_dtype() const { return get<DType>("ScalarType"); }
  Device to_device() const { return get<Device>("Device"); }

  std::string_view type_name() const;  // "Tensor", "int", "None", ...
  std::string str() const;             // short, for traces: "Tensor[2, 3] float32 cpu", "1.5"
  const Storage& storage() const { return v_; }

 private:
  template <typename T>
  const T& get(const char* want) const {
    const T* p = std::get_if<T>(&v_);
    if (!p) bad_type(want);
    return *p;
  }
  [[noreturn]] void bad_type(const char* want) const;
  Storage v_;
};

using Stack = std::vector<Value>;

// Converts a Value to the C++ type a kernel takes (the canonical argument types of
// dispatcher/kernel_function.h).
template <typename T>
T value_to(const Value& v);

template <>
inline Tensor value_to<Tensor>(const Value& v) {
  return v.to_tensor();
}
template <>
inline std::optional<Tensor> value_to<std::optional<Tensor>>(const Value& v) {
  return v.to_optional_tensor();
}
template <>
inline std::vector<Tensor> value_to<std::vector<Tensor>>(const Value& v) {
  return v.to_tensor_list();
}
template <>
inline int64_t value_to<int64_t>(const Value& v) {
  return v.to_int();
}
template <>
inline double value_to<double>(const Value& v) {
  return v.to_double();
}
template <>
inline bool value_to<bool>(const Value& v) {
  return v.to_bool();
}
template <>
inline std::string value_to<std::string>(const Value& v) {
  return v.to_string();
}
template <>
inline std::vector<int64_t> value_to<std::vector<int64_t>>(const Value& v) {
  return v.to_int_list();
}
template <>
inline std::vector<double> value_to<std::vector<double>>(const Value& v) {
  return v.to_double_list();
}
template <>
inline DType value_to<DType>(const Value& v) {
  return v.to_dtype();
}
template <>
inline Device value_to<Device>(const Value& v) {
  return v.to_device();
}
template <>
inline std::optional<int64_t> value_to<std::optional<int64_t>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<int64_t>(v.to_int());
}
template <>
inline std::optional<double> value_to<std::optional<double>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<double>(v.to_double());
}
template <>
inline std::optional<DType> value_to<std::optional<DType>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<DType>(v.to_dtype());
}
template <>
inline std::optional<Device> value_to<std::optional<Device>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<Device>(v.to_device());
}

// KernelFunction: one registered kernel, callable unboxed (a typed function pointer)
// and boxed (over a Stack), plus the schema inferred from its C++ signature.

class OperatorHandle;
using BoxedKernelFn = std::function<void(const OperatorHandle&, DispatchKeySet, Stack*)>;

namespace detail {

// Note [Canonical calling convention]
// Every kernel of an op is called through a function pointer of one type, derived from
// the schema: Tensor -> const Tensor&, int -> int64_t, float -> double, str -> const
// std::string&, int[] -> const std::vector<int64_t>&, ... A kernel whose parameters are
// Tensor by value, Shape, int or std::string_view gets a trampoline that converts. So a
// caller's signature and a kernel's may differ in spelling, never in schema, and the
// schema check at registration makes the function pointer cast sound.
template <typename T, typename = void>
struct ArgTraits {
  static constexpr bool supported = false;
};
#define MT_ARG_TRAITS(CPP, CANON, KIND, LIST, OPT)                                 \
  template <>                                                                      \
  struct ArgTraits<CPP> {                                                          \
    static constexpr bool supported = true;                                        \
    using canon = CANON;                                                           \
    static SchemaType type() { return SchemaType{TypeKind::KIND, LIST, -1, OPT}; } \
  };
MT_ARG_TRAITS(Tensor, const Tensor&, Tensor, false, false)
MT_ARG_TRAITS(std::optional<Tensor>, const std::optional<Tensor>&, Tensor, false, true)
MT_ARG_TRAITS(std::vector<Tensor>, const std::vector<Tensor>&, Tensor, true, false)
MT_ARG_TRAITS(int64_t, int64_t, Int, false, false)
MT_ARG_TRAITS(int, int64_t, Int, false, false)
MT_ARG_TRAITS(std::optional<int64_t>, std::optional<int64_t>, Int, false, true)
MT_ARG_TRAITS(double, double, Float, false, false)
MT_ARG_TRAITS(float, double, Float, false, false)
MT_ARG_TRAITS(std::optional<double>, std::optional<double>, Float, false, true)
MT_ARG_TRAITS(bool, bool, Bool, false, false)
MT_ARG_TRAITS(std::string, const std::string&, Str, false, false)
MT_ARG_TRAITS(std::string_view, const std::string&, Str, false, false)
MT_ARG_TRAITS(std::vector<int64_t>, const std::vector<int64_t>&, Int, true, false)
MT_ARG_TRAITS(Shape, const std::vector<int64_t>&, Int, true, false)
MT_ARG_TRAITS(std::vector<double>, const std::vector<double>&, Float, true, false)
MT_ARG_TRAITS(DType, DType, ScalarType, false, false)
MT_ARG_TRAITS(std::optional<DType>, std::optional<DType>, ScalarType, false, true)
MT_ARG_TRAITS(Device, Device, Device, false, false)
MT_ARG_TRAITS(std::optional<Device>, std::optional<Device>, Device, false, true)
#undef MT_ARG_TRAITS

template <typename T>
using canon_t = typename ArgTraits<std::remove_cvref_t<T>>::canon;
template <typename T>
using canon_value_t = std::remove_cvref_t<canon_t<T>>;

template <typename R>
struct ReturnTraits {
  static constexpr bool supported = false;
};
template <>
struct ReturnTraits<void> {
  static constexpr bool supported = true;
  static std::vector<SchemaType> types() { return {}; }
};
template <>
struct ReturnTraits<Tensor> {
  static constexpr bool supported = true;
  static std::vector<SchemaType> types() { return {SchemaType{TypeKind::Tensor}}; }
};
template <>
struct ReturnTraits<std::vector<Tensor>> {
  static constexpr bool supported = true;
  static std::vector<SchemaType> types() { return {SchemaType{TypeKind::Tensor, true}}; }
};
template <typename... Ts>
struct ReturnTraits<std::tuple<Ts...>> {
  static constexpr bool supported = (std::is_same_v<Ts, Tensor> && ...);
  static std::vector<SchemaType> types() {
    return {(void(sizeof(Ts)), SchemaType{TypeKind::Tensor})...};
  }
};

// The signature of a function, function pointer, lambda or functor.
template <typename F>
struct FnTraits : FnTraits<decltype(&std::remove_cvref_t<F>::operator())> {};
template <typename R, typename... A>
struct FnTraits<R(A...)> {
  using ret = R;
  using args = std::tuple<A...>;
};
template <typename R, typename... A>
struct FnTraits<R (*)(A...)> : FnTraits<R(A...)> {};
template <typename C, typename R, typename... A>
struct FnTraits<R (C::*)(A...) const> : FnTraits<R(A...)> {};
template <typename C, typename R, typename... A>
struct FnTraits<R (C::*)(A...)> : FnTraits<R(A...)> {};

// A kernel may take the dispatch key set first, to redispatch below its own key.
template <typename Args>
struct StripKeys {
  static constexpr bool with_keys = false;
  using type = Args;
};
template <typename First, typename... Rest>
requires std::is_same_v<std::remove_cvref_t<First>, DispatchKeySet>
struct StripKeys<std::tuple<First, Rest...>> {
  static constexpr bool with_keys = true;
  using type = std::tuple<Rest...>;
};

// The schema types of a C++ signature, printed like "(Tensor, int) -> Tensor".
struct InferredSignature {
  std::vector<SchemaType> args, returns;
  std::string str() const;
  bool matches(const FunctionSchema& s) const;
};

template <typename Ret, typename... Args>
InferredSignature infer_signature() {
  static_assert((ArgTraits<std::remove_cvref_t<Args>>::supported && ...),
                "a kernel parameter has a type the dispatcher cannot box; use Tensor, "
                "std::optional<Tensor>, std::vector<Tensor>, int64_t, double, bool, std::string, "
                "std::vector<int64_t>, Shape, DType or Device");
  static_assert(
      ReturnTraits<Ret>::supported,
      "a kernel must return Tensor, std::tuple<Tensor, ...>, std::vector<Tensor> or void");
  return InferredSignature{{ArgTraits<std::remove_cvref_t<Args>>::type()...},
                           ReturnTraits<Ret>::types()};
}

class OperatorKernel {
 public:
  virtual ~OperatorKernel() = default;
};
template <typename F>
struct FunctorKernel final : OperatorKernel {
  explicit FunctorKernel(F fn) : f(std::move(fn)) {}
  F f;
};

template <typename Ret, typename... Args>
using UnboxedFn = Ret (*)(OperatorKernel*, DispatchKeySet, canon_t<Args>...);

template <typename F, bool WithKeys, typename Ret, typename... Args>
Ret call_functor(OperatorKernel* k, DispatchKeySet ks, canon_t<Args>... args) {
  auto& f = static_cast<FunctorKernel<F>*>(k)->f;
  if constexpr (WithKeys) {
    return f(ks, args...);
  } else {
    (void)ks;
    return f(args...);
  }
}

template <typename Ret>
void push_returns(Stack* s, Ret&& r) {
  if constexpr (std::is_same_v<std::remove_cvref_t<Ret>, Tensor> ||
                std::is_same_v<std::remove_cvref_t<Ret>, std::vector<Tensor>>) {
    s->emplace_back(std::forward<Ret>(r));
  } else {
    std::apply([&](auto&&... ts) { (s->emplace_back(ts), ...); }, r);
  }
}

template <typename Ret>
Ret pop_returns(Stack* s) {
  if constexpr (std::is_void_v<Ret>) {
    return;
  } else if constexpr (std::is_same_v<Ret, Tensor>) {
    MT_CHECK(s->size() == 1, "[boxed] a kernel returning Tensor left {} values on the stack",
             s->size());
    return (*s)[0].to_tensor();
  } else if constexpr (std::is_same_v<Ret, std::vector<Tensor>>) {
    return (*s)[0].to_tensor_list();
  } else {
    constexpr size_t n = std::tuple_size_v<Ret>;
    MT_CHECK(s->size() == n, "[boxed] expected {} returns on the stack, got {}", n, s->size());
    return [&]<size_t... I>(std::index_sequence<I...>) { return Ret((*s)[I].to_tensor()...); }
    (std::make_index_sequence<n>{});
  }
}

template <typename F, bool WithKeys, typename Ret, typename... Args>
void call_functor_boxed(OperatorKernel* k, const OperatorHandle&, DispatchKeySet ks, Stack* s) {
  constexpr size_t n = sizeof...(Args);
  MT_CHECK(s->size() >= n, "[boxed] the kernel takes {} arguments but the stack holds {}", n,
           s->size());
  size_t base = s->size() - n;
  auto invoke = [&]<size_t... I>(std::index_sequence<I...>)->decltype(auto) {
    return call_functor<F, WithKeys, Ret, Args...>(
        k, ks, value_to<canon_value_t<Args>>((*s)[base + I])...);
  };
  if constexpr (std::is_void_v<Ret>) {
    invoke(std::index_sequence_for<Args...>{});
    s->resize(base);
  } else {
    Ret r = invoke(std::index_sequence_for<Args...>{});
    s->resize(base);
    push_returns(s, std::move(r));
  }
}

using BoxedTrampoline = void (*)(OperatorKernel*, const OperatorHandle&, DispatchKeySet, Stack*);

}  // namespace detail

class KernelFunction {
 public:
  enum class Kind : uint8_t { Missing, Kernel, Fallthrough, Boxed };

  KernelFunction() = default;

  // From any callable: a function pointer, a lambda (captures allowed) or a functor.
  template <typename F>
  static KernelFunction make(F fn) {
    using Traits = detail::FnTraits<std::remove_cvref_t<F>>;
    using Strip = detail::StripKeys<typename Traits::args>;
    using Ret = typename Traits::ret;
    return make_impl<std::decay_t<F>, Strip::with_keys, Ret>(std::move(fn),
                                                             (typename Strip::type*)nullptr);
  }
  // A boxed kernel: sees the arguments on a Stack (used for fallbacks and by custom code).
  static KernelFunction boxed(BoxedKernelFn fn);
  // Skips this key: the call goes on to the next key in the set.
  static KernelFunction fallthrough();

  Kind kind() const { return kind_; }
  bool is_valid() const { return kind_ != Kind::Missing; }
  bool has_unboxed() const { return unboxed_ != nullptr; }
  const detail::InferredSignature* signature() const { return signature_.get(); }

  template <typename Ret, typename... Args>
  Ret call_unboxed(DispatchKeySet ks, detail::canon_t<Args>... args) const {
    return reinterpret_cast<detail::UnboxedFn<Ret, Args...>>(unboxed_)(functor_.get(), ks, args...);
  }
  void call_boxed(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) const;

 private:
  template <typename F, bool WithKeys, typename Ret, typename... Args>
  static KernelFunction make_impl(F fn, std::tuple<Args...>*) {
    KernelFunction k;
    k.kind_ = Kind::Kernel;
    k.functor_ = std::make_shared<detail::FunctorKernel<F>>(std::move(fn));
    k.unboxed_ = reinterpret_cast<void*>(&detail::call_functor<F, WithKeys, Ret, Args...>);
    k.boxed_ = &detail::call_functor_boxed<F, WithKeys, Ret, Args...>;
    k.signature_ =
        std::make_shared<detail::InferredSignature>(detail::infer_signature<Ret, Args...>());
    return k;
  }

  Kind kind_ = Kind::Missing;
  std::shared_ptr<detail::OperatorKernel> functor_;
  void* unboxed_ = nullptr;
  detail::BoxedTrampoline boxed_ = nullptr;
  std::shared_ptr<BoxedKernelFn> boxed_fn_;
  std::shared_ptr<detail::InferredSignature> signature_;
};

// Use as a kernel to skip a key: m.impl("op", mt::fallthrough()).
inline KernelFunction fallthrough() { return KernelFunction::fallthrough(); }

// The schema of a C++ function, with arguments named _0, _1, ...
template <typename F>
FunctionSchema infer_schema(std::string_view name) {
  using Traits = detail::FnTraits<std::remove_cvref_t<F>>;
  using Strip = detail::StripKeys<typename Traits::args>;
  auto sig = []<typename... A>(std::tuple<A...>*) {
    return detail::infer_signature<typename Traits::ret, A...>();
  }((typename Strip::type*)nullptr);
  OperatorName n = parse_operator_name(name);
  FunctionSchema s{n.ns, n.name, n.overload, {}, {}};
  for (size_t i = 0; i < sig.args.size(); ++i)
    s.arguments.push_back(Argument{fmt::format("_{}", i), sig.args[i], {}, {}, false});
  for (auto& r : sig.returns) s.returns.push_back(Argument{"", r, {}, {}, false});
  return s;
}

}  // namespace mt
