// SPDX-License-Identifier: MIT
// The Dispatcher: the registry of operators by "ns::name", their registrations per
// dispatch key, the computed dispatch tables, and the unboxed and boxed call paths.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "dispatcher/kernel_function.h"
#include "dispatcher/schema.h"

namespace mt {

// ---- thread-local key sets ---------------------------------------------------------

struct LocalDispatchKeySet {
  DispatchKeySet included;  // added to every call's keys (e.g. Trace)
  DispatchKeySet excluded;  // removed from every call's keys (e.g. Autograd under no_grad)
};
namespace detail {
// Read on every call, so initial-exec like the library's other hot thread-locals (Note
// [Thread-local variables in a shared library] in runtime/tls.h, which is not installed).
#if defined(__GNUC__) && defined(__ELF__)
inline __attribute__((tls_model("initial-exec"))) thread_local LocalDispatchKeySet t_local_keys;
#else
inline thread_local LocalDispatchKeySet t_local_keys;
#endif
extern std::atomic<bool> g_trace_dispatch;
extern std::atomic<bool> g_trace_why;  // MT_TRACE=dispatch:why (read only when tracing)
}  // namespace detail
inline const LocalDispatchKeySet& local_dispatch_keys() { return detail::t_local_keys; }

class IncludeDispatchKeyGuard {
 public:
  explicit IncludeDispatchKeyGuard(DispatchKeySet ks) : saved_(detail::t_local_keys.included) {
    detail::t_local_keys.included = saved_ | ks;
  }
  ~IncludeDispatchKeyGuard() { detail::t_local_keys.included = saved_; }
  IncludeDispatchKeyGuard(const IncludeDispatchKeyGuard&) = delete;
  IncludeDispatchKeyGuard& operator=(const IncludeDispatchKeyGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

class ExcludeDispatchKeyGuard {
 public:
  explicit ExcludeDispatchKeyGuard(DispatchKeySet ks) : saved_(detail::t_local_keys.excluded) {
    detail::t_local_keys.excluded = saved_ | ks;
  }
  ~ExcludeDispatchKeyGuard() { detail::t_local_keys.excluded = saved_; }
  ExcludeDispatchKeyGuard(const ExcludeDispatchKeyGuard&) = delete;
  ExcludeDispatchKeyGuard& operator=(const ExcludeDispatchKeyGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

// ---- the key set of a call's arguments -----------------------------------------------

namespace detail {
inline DispatchKeySet keys_of(const Tensor& t) { return t.key_set(); }
inline DispatchKeySet keys_of(const std::optional<Tensor>& t) {
  return t ? t->key_set() : DispatchKeySet();
}
inline DispatchKeySet keys_of(const std::vector<Tensor>& ts) {
  DispatchKeySet k;
  for (const Tensor& t : ts) k = k | t.key_set();
  return k;
}
template <typename T>
inline DispatchKeySet keys_of(const T&) {
  return {};
}

template <typename... Args>
inline DispatchKeySet call_keys(const Args&... args) {
  DispatchKeySet ks = (DispatchKeySet() | ... | keys_of(args));
  const LocalDispatchKeySet& local = t_local_keys;
  ks = (ks | local.included) - local.excluded;
  // an op without tensor arguments runs on the CPU backend
  if (ks.below(DispatchKey::Fake).empty() && !ks.has(DispatchKey::Fake))
    ks = ks.add(DispatchKey::CPU);
  return ks;
}
}  // namespace detail

// ---- operator entries ----------------------------------------------------------------

// The computed table: one kernel (or fallthrough, fallback, missing) per key.
struct DispatchTable {
  std::array<KernelFunction, kNumDispatchKeys> kernels;
  std::array<uint8_t, kNumDispatchKeys> origin{};  // 0 missing, 1 kernel, 2 fallback
  std::array<std::string, kNumDispatchKeys> debug;
  DispatchKeySet dispatchable{~uint64_t(0)};  // keys whose entry is not a fallthrough
};

class OperatorEntry {
 public:
  explicit OperatorEntry(OperatorName name) : name_(std::move(name)) {}

  // The schema and where it was defined, as one published record (Note [Schema
  // publication]): lock-free to read, kept alive for the entry's life once published.
  struct DefinedSchema {
    FunctionSchema schema;
    std::string debug;
    TagSet tags = {};
  };

  const OperatorName& name() const { return name_; }
  bool has_schema() const { return defined() != nullptr; }
  // The current definition, or nullptr when the op has none (never defined, or dropped).
  const DefinedSchema* defined() const { return schema_.load(std::memory_order_acquire); }
  // Throws a clear error when the op has only impls so far, or its def was dropped.
  const FunctionSchema& schema() const;
  // The definition's tags (none when the op has no definition).
  TagSet tags() const {
    const DefinedSchema* d = defined();
    return d ? d->tags : TagSet();
  }

  // The active table; lock-free to read (see Note [Dispatch table publication]).
  const DispatchTable& table() const { return *table_.load(std::memory_order_acquire); }

  std::string dump_table() const;  // one line a key; lock-free, like a call

  // Registrations, each undone by the id they return; done under the dispatcher's lock.
  struct Registration {
    uint64_t id;
    KernelFunction kernel;
    std::string debug;
  };

 private:
  friend class Dispatcher;
  // Schema, debug info, every registration: reads the registration lists, so only under
  // the dispatcher's lock (Dispatcher::dump).
  std::string dump() const;
  void rebuild(const std::array<KernelFunction, kNumDispatchKeys>& fallbacks,
               const std::array<std::string, kNumDispatchKeys>& fallback_debug);

  OperatorName name_;
  std::atomic<const DefinedSchema*> schema_{nullptr};
  std::vector<std::unique_ptr<DefinedSchema>> schemas_;  // every schema ever published
  std::atomic<bool> ever_defined_{false};  // a missing schema then means a dropped def
  std::array<std::vector<Registration>, kNumDispatchKeys> kernels_;  // newest first
  std::atomic<const DispatchTable*> table_{nullptr};
  std::vector<std::unique_ptr<DispatchTable>> tables_;  // every table ever published
  uint64_t disabled_ = 0;  // bit k: the kernels at key k are switched off (set_kernel_enabled)
};

// ---- handles -------------------------------------------------------------------------

template <typename Sig>
class TypedOperatorHandle;

class OperatorHandle {
 public:
  OperatorHandle() = default;
  explicit OperatorHandle(OperatorEntry* e) : entry_(e) {}

  const OperatorName& name() const { return entry_->name(); }
  const FunctionSchema& schema() const { return entry_->schema(); }
  OperatorEntry* entry() const { return entry_; }

  // Checks once that Sig agrees with the schema; the typed handle then calls unboxed.
  template <typename Sig>
  TypedOperatorHandle<Sig> typed() const;

  // Boxed call: arguments on the stack (missing trailing ones take their defaults),
  // results left on it.
  void call_boxed(Stack* stack) const;
  void redispatch_boxed(DispatchKeySet ks, Stack* stack) const;

 protected:
  OperatorEntry* entry_ = nullptr;
};

namespace detail {
[[noreturn]] void report_missing_kernel(const OperatorEntry& e, DispatchKey k);
void check_signature(const OperatorEntry& e, const InferredSignature& sig, const char* what);
void trace_call(const OperatorEntry& e, DispatchKeySet ks, DispatchKey k, bool redispatch);
// MT_TRACE=dispatch:why: the call's explanation (explain_dispatch, below), `args` boxed.
void trace_why(const OperatorEntry& e, DispatchKeySet ks, bool redispatch, const Stack& args);
// The kernel the table holds for `key` (a clear error when it has none).
KernelFunction computed_kernel(const OperatorEntry& e, DispatchKey key);
// mt::call's slow path: the caller's arguments disagree with the schema only in arithmetic
// scalars (an int for a float). Converts those on the stack, refusing a conversion that
// loses value; any other mismatch is check_signature's error.
void convert_call_arguments(const OperatorEntry& e, const InferredSignature& sig, Stack* stack);
struct TraceDepth {
  TraceDepth();
  ~TraceDepth();
};
}  // namespace detail

namespace detail {
template <typename T>
Value box_argument(const T& v);
// The key set of a boxed call: the keys of every tensor argument (a tensor list's too), with
// this thread's included keys added and its excluded keys taken out; CPU when that leaves
// no backend key and no Fake (a call with no tensor). OperatorHandle::call_boxed, the Mode
// key's fallback and vmap's calls below Batched compute theirs with it.
DispatchKeySet boxed_call_keys(const Stack& stack);
}  // namespace detail

template <typename Ret, typename... Args>
class TypedOperatorHandle<Ret(Args...)> : public OperatorHandle {
 public:
  TypedOperatorHandle() = default;
  explicit TypedOperatorHandle(OperatorEntry* e) : OperatorHandle(e) {}

  Ret call(detail::canon_t<Args>... args) const {
    return dispatch(detail::call_keys(args...), false, args...);
  }
  Ret operator()(detail::canon_t<Args>... args) const { return call(args...); }
  // Calls the kernel for the highest key of `ks` (e.g. ks.below(DispatchKey::Autograd)).
  Ret redispatch(DispatchKeySet ks, detail::canon_t<Args>... args) const {
    return dispatch(ks, true, args...);
  }

 private:
  Ret dispatch(DispatchKeySet ks, bool re, detail::canon_t<Args>... args) const {
    const DispatchTable& t = entry_->table();
    DispatchKeySet live = ks & t.dispatchable;
    if (live.empty()) [[unlikely]]
      detail::report_missing_kernel(*entry_, DispatchKey::CPU);
    DispatchKey k = live.highest();
    const KernelFunction& kf = t.kernels[size_t(k)];
    if (detail::g_trace_dispatch.load(std::memory_order_relaxed)) [[unlikely]]
      return dispatch_traced(kf, k, ks, live, re, args...);
    return invoke(kf, k, live, args...);
  }
  // MT_TRACE=dispatch[:why]: out of line, so the untraced path's frame stays as small.
  [[gnu::noinline, gnu::cold]] Ret dispatch_traced(const KernelFunction& kf, DispatchKey k,
                                                   DispatchKeySet ks, DispatchKeySet live, bool re,
                                                   detail::canon_t<Args>... args) const {
    if (detail::g_trace_why.load(std::memory_order_relaxed)) {
      Stack boxed;
      (boxed.push_back(detail::box_argument(args)), ...);
      detail::trace_why(*entry_, ks, re, boxed);
    }
    detail::trace_call(*entry_, live, k, re);
    detail::TraceDepth depth;
    return invoke(kf, k, live, args...);
  }
  Ret invoke(const KernelFunction& kf, DispatchKey k, DispatchKeySet live,
             detail::canon_t<Args>... args) const {
    if (kf.has_unboxed()) [[likely]]
      return kf.template call_unboxed<Ret, Args...>(live, args...);
    if (!kf.is_valid()) detail::report_missing_kernel(*entry_, k);
    Stack s;
    s.reserve(sizeof...(Args));
    (s.emplace_back(args), ...);
    kf.call_boxed(*this, live, &s);
    return detail::pop_returns<Ret>(&s);
  }
};

// ---- the dispatcher ------------------------------------------------------------------

class Dispatcher {
 public:
  static Dispatcher& singleton();

  // nullptr / a clear error (listing close names) when `name` is unknown.
  std::optional<OperatorHandle> find(std::string_view name);
  OperatorHandle find_or_throw(std::string_view name);
  std::vector<OperatorName> all_ops();  // sorted by name

  // Registrations; each returns an id for deregister(). A failed one changes nothing.
  uint64_t def(FunctionSchema schema, std::string debug, TagSet tags = {});
  uint64_t impl(std::string_view name, DispatchKey key, KernelFunction kernel, std::string debug);
  uint64_t fallback(DispatchKey key, KernelFunction kernel, std::string debug);
  void deregister(uint64_t id);
  // Switches the kernels registered for `key` off (the table falls through to the key's
  // fallback, or has none) and on again; shown by dump and dump_table.
  void set_kernel_enabled(std::string_view name, DispatchKey key, bool enabled);

  std::string dump(std::string_view name);
  std::string dump_table(std::string_view name);
  // Ops that have impls but no def (usually a typo in a name).
  std::vector<std::string> find_dangling_impls();

  // MT_TRACE=dispatch / MT_LOG=registration, also switchable from code. Messages go to
  // the sink (stderr unless set).
  void set_trace_dispatch(bool on);
  // MT_TRACE=dispatch:why: each traced call also prints its explanation (explain.h).
  void set_trace_why(bool on);
  void set_log_registrations(bool on);
  void set_log_sink(std::function<void(std::string_view)> sink);
  void log(std::string_view line);

 private:
  Dispatcher();
  ~Dispatcher();
  OperatorEntry& entry_locked(const OperatorName& name);
  void rebuild_locked(OperatorEntry& e);

  // The registries and their lock (dispatcher.cpp); never touched on the call path.
  struct State;
  std::unique_ptr<State> state_;
  std::atomic<bool> log_registrations_{false};
};

// The dispatcher, with the built-in ops registered (on the first call, not by static
// initializers: Note [Library initialization] in runtime/init.h).
Dispatcher& dispatcher();

template <typename Sig>
TypedOperatorHandle<Sig> OperatorHandle::typed() const {
  using Traits = detail::FnTraits<Sig>;
  auto sig = []<typename... A>(std::tuple<A...>*) {
    return detail::infer_signature<typename Traits::ret, A...>();
  }((typename Traits::args*)nullptr);
  detail::check_signature(*entry_, sig, "typed()");
  return TypedOperatorHandle<Sig>(entry_);
}

namespace detail {
template <typename T>
Value box_argument(const T& v) {
  if constexpr (std::is_constructible_v<Value, const T&>)
    return Value(v);
  else
    return Value(canon_value_t<T>(v));
}
}  // namespace detail

// Calls an op by name: mt::call<Tensor>("triton_demo::silu", x). The handle is looked
// up on every call; keep a typed handle for hot loops. An arithmetic scalar converts to
// the schema's type as in a call through a handle (mt::call<Tensor>("ns::scale", x, 2)
// for a float argument), unless that loses value (2.5 for an int is an error).
template <typename Ret, typename... Args>
Ret call(std::string_view name, const Args&... args) {
  OperatorHandle h = dispatcher().find_or_throw(name);
  const detail::InferredSignature sig = detail::infer_signature<Ret, const Args&...>();
  if (sig.matches(h.schema())) [[likely]]
    return TypedOperatorHandle<Ret(const Args&...)>(h.entry()).call(args...);
  Stack s;
  s.reserve(sizeof...(Args));
  (s.push_back(detail::box_argument(args)), ...);
  detail::convert_call_arguments(*h.entry(), sig, &s);
  h.call_boxed(&s);
  return detail::pop_returns<Ret>(&s);
}

// A kernel of an op as a callable (torch.library.get_kernel): the one its table holds for
// `key` now, called directly, below any key above it. Keeps the kernel alive.
template <typename Sig>
class KernelHandle;
template <typename Ret, typename... Args>
class KernelHandle<Ret(Args...)> {
 public:
  KernelHandle(OperatorHandle op, DispatchKey key, KernelFunction k)
      : op_(op), key_(key), kernel_(std::move(k)) {}
  Ret operator()(detail::canon_t<Args>... args) const {
    const DispatchKeySet ks = detail::call_keys(args...).below(key_).add(key_);
    if (kernel_.has_unboxed()) return kernel_.template call_unboxed<Ret, Args...>(ks, args...);
    Stack s;
    s.reserve(sizeof...(Args));
    (s.emplace_back(args), ...);
    kernel_.call_boxed(op_, ks, &s);
    return detail::pop_returns<Ret>(&s);
  }
  DispatchKey key() const { return key_; }

 private:
  OperatorHandle op_;
  DispatchKey key_;
  KernelFunction kernel_;
};

// get_kernel<Tensor(const Tensor&)>("ns::op", DispatchKey::CPU): Sig is checked against
// the schema; an op without a kernel for `key` is an error naming the keys it has.
template <typename Sig>
KernelHandle<Sig> get_kernel(std::string_view name, DispatchKey key) {
  OperatorHandle h = dispatcher().find_or_throw(name);
  (void)h.typed<Sig>();  // the signature check
  return KernelHandle<Sig>(h, key, detail::computed_kernel(*h.entry(), key));
}

// Switches one key's kernels of an op off and on (Dispatcher::set_kernel_enabled).
inline void set_kernel_enabled(std::string_view name, DispatchKey key, bool enabled) {
  dispatcher().set_kernel_enabled(name, key, enabled);
}

// Why this kernel: the dispatcher's decision for one call, step by step, as data a test can
// assert on (explain_dispatch), as text (str(); MT_TRACE=dispatch:why prints it for every
// call), and from the command line (`minitensor explain 'ns::op' --args ...`).

// One key and where it came from: "device cpu", "device cuda:0", "requires_grad", "fake",
// or for the thread-local sets the guard that put it there.
struct KeySource {
  DispatchKey key;
  std::string why;
  bool operator==(const KeySource&) const = default;
};

struct ArgumentKeys {
  std::string name;   // the schema's argument name
  std::string value;  // the argument, briefly: "f32[2, 3] cpu", "2.5"
  DispatchKeySet keys;
  std::vector<KeySource> sources;
};

// One key of the computed set, highest first, down to the one that runs.
struct KeyStep {
  DispatchKey key;
  std::string entry;          // "kernel", "fallback", "fallthrough" or "missing"
  std::string registered_at;  // file:line of the registration ("" when missing)
};

struct DispatchExplanation {
  std::string op;
  bool redispatch = false;  // the keys were given by a kernel above, not computed
  std::vector<ArgumentKeys> arguments;
  DispatchKeySet from_arguments;                    // the union of the arguments' key sets
  DispatchKeySet included, excluded;                // the thread-local sets
  std::vector<KeySource> included_by, excluded_by;  // which guard put each key there
  bool cpu_default = false;  // CPU was added: no argument names a backend or Fake
  DispatchKeySet computed;   // (from_arguments | included) - excluded, the call's keys
  std::vector<KeyStep> steps;
  std::optional<DispatchKey> winner;  // empty: no key of the computed set has a kernel
  std::string entry;                  // the winner's entry, or "missing"
  std::string registered_at;          // the winner's file:line

  std::string str() const;  // the explanation as lines of text
};

// How a call of `op` with `args` (boxed; trailing defaults may be left out) dispatches on
// this thread now, without running it. An op with no kernel for the call is explained
// (winner empty, entry "missing"); an unknown op, or too many arguments, is an error.
DispatchExplanation explain_dispatch(const OperatorHandle& op, const Stack& args);
DispatchExplanation explain_dispatch(std::string_view op, const Stack& args);

namespace detail {
// The explanation of a call whose keys `ks` were given (a redispatch, or a call whose
// keys dispatch() computed already).
DispatchExplanation explain_with_keys(const OperatorEntry& e, const Stack& args,
                                      std::optional<DispatchKeySet> ks, bool redispatch);
}  // namespace detail

}  // namespace mt
