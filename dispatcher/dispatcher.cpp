// SPDX-License-Identifier: MIT
#include "dispatcher/dispatcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "dispatcher/edit_distance.h"
#include "dispatcher/mode.h"
#include "runtime/init.h"
#include "runtime/log.h"
#include "runtime/tensor.h"

namespace mt {

// Note [Dispatch table publication]
// A call reads an operator's table through one atomic pointer load and takes no lock.
// Registrations happen under Dispatcher::State::mutex: they edit the per-key registration
// lists, build a complete new table and publish it with a release store. Old tables
// are kept (in OperatorEntry::tables_) for the life of the process: a thread may still
// be running a kernel it read from one, and the table's KernelFunctions own the kernels'
// functors, so a kernel stays alive while any call can still reach it. Registrations
// are rare (start-up, tests), so the memory this keeps is small.

// Note [Schema publication]
// An op's schema is read on call paths too: mt::call and typed() check the C++ signature
// against it, call_boxed fills defaults from it, the Autograd and Trace fallbacks read its
// arguments. So it is published the way tables are: def() builds a DefinedSchema (the
// schema and where it was defined) under the lock and publishes it with a release store;
// deregistering the def stores nullptr. Every DefinedSchema ever published stays in
// OperatorEntry::schemas_ for the entry's life (entries are never freed), so a reference
// a call took before the def was dropped stays valid. A call that finds nullptr after a
// def existed gets a clear error saying the op was dropped, never a crash.

namespace detail {
std::atomic<bool> g_trace_dispatch{false};
std::atomic<bool> g_trace_why{false};
namespace {
thread_local int t_trace_depth = 0;
}
TraceDepth::TraceDepth() { ++t_trace_depth; }
TraceDepth::~TraceDepth() { --t_trace_depth; }
}  // namespace detail

// ---- KernelFunction ------------------------------------------------------------------

KernelFunction KernelFunction::boxed(BoxedKernelFn fn) {
  KernelFunction k;
  k.kind_ = Kind::Boxed;
  k.boxed_fn_ = std::make_shared<BoxedKernelFn>(std::move(fn));
  return k;
}

KernelFunction KernelFunction::fallthrough() {
  KernelFunction k;
  k.kind_ = Kind::Fallthrough;
  return k;
}

void KernelFunction::call_boxed(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) const {
  if (kind_ == Kind::Boxed) return (*boxed_fn_)(op, ks, stack);
  MT_ASSERT(boxed_ != nullptr, "kernel of kind {} has no boxed entry", int(kind_));
  boxed_(functor_.get(), op, ks, stack);
}

namespace detail {

std::string InferredSignature::str() const {
  auto join = [](const std::vector<SchemaType>& ts) {
    std::string s;
    for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
    return s;
  };
  std::string r = join(returns);
  if (returns.size() != 1) r = "(" + r + ")";
  return "(" + join(args) + ") -> " + r;
}

namespace {
bool same_type(const SchemaType& a, const SchemaType& b) {
  return a.kind == b.kind && a.is_list == b.is_list && a.is_optional == b.is_optional;
}
}  // namespace

bool InferredSignature::matches(const FunctionSchema& s) const {
  if (args.size() != s.arguments.size() || returns.size() != s.returns.size()) return false;
  for (size_t i = 0; i < args.size(); ++i)
    if (!same_type(args[i], s.arguments[i].type)) return false;
  for (size_t i = 0; i < returns.size(); ++i)
    if (!same_type(returns[i], s.returns[i].type)) return false;
  return true;
}

void check_signature(const OperatorEntry& e, const InferredSignature& sig, const char* what) {
  const FunctionSchema& s = e.schema();  // one load: a clear error if there is none (any more)
  MT_CHECK(sig.matches(s),
           "[{}] the C++ signature {} does not match the schema of '{}': {}; change the C++ "
           "types to match the schema",
           what, sig.str(), e.name().str(), s.str());
}

}  // namespace detail

// ---- OperatorEntry -------------------------------------------------------------------

const FunctionSchema& OperatorEntry::schema() const {
  const DefinedSchema* d = defined();
  if (d != nullptr) [[likely]]
    return d->schema;
  MT_CHECK(!ever_defined_.load(std::memory_order_relaxed),
           "[{}] this op was dropped: the Library or custom_op handle that defined it was "
           "destroyed, and handles to it fail from then on; keep it alive while calls can reach "
           "it, or define the op again",
           name_.str());
  MT_ERROR(
      "[dispatcher] '{}' has kernels registered but no schema; define it with "
      "MT_LIBRARY({}, m) {{ m.def(\"{}(...) -> ...\"); }} or mt::custom_op",
      name_.str(), name_.ns, name_.name);
}

void OperatorEntry::rebuild(const std::array<KernelFunction, kNumDispatchKeys>& fallbacks,
                            const std::array<std::string, kNumDispatchKeys>& fallback_debug) {
  auto t = std::make_unique<DispatchTable>();
  uint64_t dispatchable = 0;
  for (int k = 0; k < kNumDispatchKeys; ++k) {
    if (!kernels_[size_t(k)].empty() && !(disabled_ >> k & 1u)) {
      const Registration& r = kernels_[size_t(k)].front();
      t->kernels[size_t(k)] = r.kernel;
      t->origin[size_t(k)] = 1;
      t->debug[size_t(k)] = r.debug;
    } else if (fallbacks[size_t(k)].is_valid()) {
      t->kernels[size_t(k)] = fallbacks[size_t(k)];
      t->origin[size_t(k)] = 2;
      t->debug[size_t(k)] = fallback_debug[size_t(k)];
    }
    if (t->kernels[size_t(k)].kind() != KernelFunction::Kind::Fallthrough)
      dispatchable |= uint64_t(1) << k;
  }
  t->dispatchable = DispatchKeySet(dispatchable);
  table_.store(t.get(), std::memory_order_release);
  tables_.push_back(std::move(t));
}

namespace {
// Keys 5 and 6 are reserved (runtime/tensor.h): dumps skip keys without a name.
bool named_key(int k) { return dispatch_key_name(DispatchKey(k)) != "?"; }

std::string_view kind_word(const DispatchTable& t, int k) {
  const KernelFunction& f = t.kernels[size_t(k)];
  if (f.kind() == KernelFunction::Kind::Missing) return "missing";
  if (f.kind() == KernelFunction::Kind::Fallthrough) return "fallthrough";
  return t.origin[size_t(k)] == 2 ? "fallback" : "kernel";
}
}  // namespace

std::string OperatorEntry::dump_table() const {
  const DispatchTable& t = table();
  std::string out = name_.str() + "\n";
  if (!tags().empty()) out += fmt::format("  tags: {}\n", tags().str());
  for (int k = kNumDispatchKeys - 1; k >= 0; --k) {
    if (!named_key(k)) continue;
    std::string_view word = kind_word(t, k);
    if (disabled_ >> k & 1u) {
      out += fmt::format("  {:<9} {:<11} [{}]\n", dispatch_key_name(DispatchKey(k)), word,
                         word == "missing" ? "its kernel is disabled by set_kernel_enabled"
                                           : t.debug[size_t(k)] + "; its own kernel is disabled");
    } else if (word == "missing") {
      out += fmt::format("  {:<9} missing\n", dispatch_key_name(DispatchKey(k)));
    } else {
      out += fmt::format("  {:<9} {:<11} [{}]\n", dispatch_key_name(DispatchKey(k)), word,
                         t.debug[size_t(k)]);
    }
  }
  return out;
}

std::string OperatorEntry::dump() const {
  std::string out = fmt::format("name: {}\n", name_.str());
  if (const DefinedSchema* d = defined()) {
    out += fmt::format("schema: {}\n  registered at {}\n", d->schema.str(), d->debug);
    if (!d->tags.empty()) out += fmt::format("tags: {}\n", d->tags.str());
  } else {
    out += "schema: (none)\n";
  }
  for (int k = kNumDispatchKeys - 1; k >= 0; --k) {
    bool first = true;
    for (const Registration& r : kernels_[size_t(k)]) {
      // (a Fake kernel is boxed by its FakeMode wrapper: Note [Fake is always fake])
      const char* what =
          r.kernel.kind() == KernelFunction::Kind::Fallthrough ? "fallthrough"
          : r.kernel.kind() == KernelFunction::Kind::Boxed && DispatchKey(k) != DispatchKey::Fake
              ? "boxed kernel"
              : "kernel";
      out += fmt::format("{}: {} registered at {}{}{}\n", dispatch_key_name(DispatchKey(k)), what,
                         r.debug, first ? "" : " (inactive)",
                         disabled_ >> k & 1u ? " (disabled by set_kernel_enabled)" : "");
      first = false;
    }
  }
  return out;
}

namespace detail {

void report_missing_kernel(const OperatorEntry& e, DispatchKey k) {
  // A handle whose op was dropped: say that, rather than list an empty table.
  if (!e.has_schema()) (void)e.schema();
  const DispatchTable& t = e.table();
  std::string name = e.name().str();
  if (k == DispatchKey::Fake) {
    MT_ERROR(
        "[{}] '{}' has no Fake kernel; register one with register_fake (or "
        "m.impl(\"{}\", ...) in MT_LIBRARY_IMPL({}, Fake, m)), so that it can run on fake "
        "tensors.\n{}",
        name, name, e.name().name, e.name().ns, e.dump_table());
  }
  std::vector<std::string_view> have;
  for (int i = 0; i < kNumDispatchKeys; ++i)
    if (t.origin[size_t(i)] == 1 &&
        t.kernels[size_t(i)].kind() != KernelFunction::Kind::Fallthrough)
      have.push_back(dispatch_key_name(DispatchKey(i)));
  MT_ERROR(
      "[{}] Could not run '{}' with arguments from the '{}' backend. '{}' is only available "
      "for these backends: [{}].\n{}",
      name, name, dispatch_key_name(k), name, fmt::join(have, ", "), e.dump_table());
}

void trace_call(const OperatorEntry& e, DispatchKeySet ks, DispatchKey k, bool redispatch) {
  const DispatchTable& t = e.table();
  Dispatcher::singleton().log(
      fmt::format("{}[{}] {} keys={} -> {} {} [{}]", std::string(size_t(2 * t_trace_depth), ' '),
                  redispatch ? "redispatch" : "call", e.name().str(), ks.str(),
                  dispatch_key_name(k), kind_word(t, int(k)), t.debug[size_t(k)]));
}

KernelFunction computed_kernel(const OperatorEntry& e, DispatchKey key) {
  const DispatchTable& t = e.table();
  const KernelFunction& k = t.kernels[size_t(key)];
  if (k.is_valid() && k.kind() != KernelFunction::Kind::Fallthrough) return k;
  (void)e.schema();  // a dropped op says so
  MT_ERROR("[get_kernel] '{}' has no kernel for {} ({}); its table:\n{}", e.name().str(),
           dispatch_key_name(key), k.is_valid() ? "a fallthrough" : "missing", e.dump_table());
}

void convert_call_arguments(const OperatorEntry& e, const InferredSignature& sig, Stack* stack) {
  const FunctionSchema& s = e.schema();
  auto plain = [](const SchemaType& t, TypeKind kind) {
    return t.kind == kind && !t.is_list && !t.is_optional;
  };
  InferredSignature converted = sig;
  for (size_t i = 0; i < sig.args.size() && i < s.arguments.size(); ++i) {
    const Argument& a = s.arguments[i];
    Value& v = (*stack)[i];
    if (plain(sig.args[i], TypeKind::Int) && plain(a.type, TypeKind::Float)) {
      const int64_t n = v.to_int();
      MT_CHECK(n >= -(int64_t(1) << 53) && n <= (int64_t(1) << 53),
               "[call] '{}' takes argument '{}' as a float, and {} has no exact float value; "
               "pass a double",
               e.name().str(), a.name, n);
      v = Value(double(n));
      converted.args[i] = a.type;
    } else if (plain(sig.args[i], TypeKind::Float) && plain(a.type, TypeKind::Int)) {
      const double d = v.to_double();
      MT_CHECK(std::nearbyint(d) == d && d >= -9.2233720368547758e18 && d < 9.2233720368547758e18,
               "[call] '{}' takes argument '{}' as an int, and {} is not a whole number (it would "
               "lose its fraction); pass an int",
               e.name().str(), a.name, d);
      v = Value(int64_t(d));
      converted.args[i] = a.type;
    }
  }
  check_signature(e, converted, "call");
}

}  // namespace detail

// ---- OperatorHandle (boxed) ----------------------------------------------------------

namespace {
Value default_to_value(const DefaultValue& d) {
  return std::visit(
      [](const auto& v) -> Value {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return Value();
        else
          return Value(v);
      },
      d);
}
}  // namespace

void OperatorHandle::call_boxed(Stack* stack) const {
  const FunctionSchema& s = entry_->schema();
  size_t want = s.arguments.size();
  MT_CHECK(stack->size() <= want, "[call_boxed] '{}' takes {} arguments but {} were given",
           name().str(), want, stack->size());
  for (size_t i = stack->size(); i < want; ++i) {
    const Argument& a = s.arguments[i];
    MT_CHECK(a.default_value.has_value(),
             "[call_boxed] '{}' needs argument '{}' ({}), which has no default; the schema is {}",
             name().str(), a.name, a.type.str(), s.str());
    stack->push_back(default_to_value(*a.default_value));
  }
  redispatch_boxed(detail::boxed_call_keys(*stack), stack);
}

DispatchKeySet detail::boxed_call_keys(const Stack& stack) {
  DispatchKeySet ks;
  for (const Value& v : stack) {
    if (v.is_tensor() && v.to_tensor().defined()) ks = ks | v.to_tensor().key_set();
    if (v.is_tensor_list())
      for (const Tensor& t : v.to_tensor_list()) ks = ks | t.key_set();
  }
  const LocalDispatchKeySet& local = local_dispatch_keys();
  ks = (ks | local.included) - local.excluded;
  if (ks.below(DispatchKey::Fake).empty() && !ks.has(DispatchKey::Fake))
    ks = ks.add(DispatchKey::CPU);
  return ks;
}

void OperatorHandle::redispatch_boxed(DispatchKeySet ks, Stack* stack) const {
  const DispatchTable& t = entry_->table();
  DispatchKeySet live = ks & t.dispatchable;
  if (live.empty()) detail::report_missing_kernel(*entry_, DispatchKey::CPU);
  DispatchKey k = live.highest();
  const KernelFunction& kf = t.kernels[size_t(k)];
  if (!kf.is_valid()) detail::report_missing_kernel(*entry_, k);
  if (detail::g_trace_dispatch.load(std::memory_order_relaxed)) {
    if (detail::g_trace_why.load(std::memory_order_relaxed)) {
      const size_t n = std::min(stack->size(), entry_->schema().arguments.size());
      detail::trace_why(*entry_, ks, true, Stack(stack->end() - std::ptrdiff_t(n), stack->end()));
    }
    detail::trace_call(*entry_, live, k, true);
    detail::TraceDepth depth;
    return kf.call_boxed(*this, live, stack);
  }
  kf.call_boxed(*this, live, stack);
}

// ---- Dispatcher ----------------------------------------------------------------------

namespace {
// Whether the comma-separated list in environment variable `var` holds `word` (whole
// words only: MT_TRACE=nodispatch is not dispatch); warns once about words it does not know.
// `also_known`: words that other parts of the library read from the same variable.
bool env_list_has(const char* var, std::string_view word,
                  std::initializer_list<std::string_view> also_known = {}, bool warn = true) {
  const char* v = std::getenv(var);
  if (!v) return false;
  bool found = false;
  std::vector<std::string> unknown;
  std::string_view rest(v);
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view w = rest.substr(0, comma);
    while (!w.empty() && w.front() == ' ') w.remove_prefix(1);
    while (!w.empty() && w.back() == ' ') w.remove_suffix(1);
    if (w == word)
      found = true;
    else if (!w.empty() && std::find(also_known.begin(), also_known.end(), w) == also_known.end())
      unknown.push_back(mt::quoted(w));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (!unknown.empty() && warn) {
    std::vector<std::string_view> known{word};
    known.insert(known.end(), also_known.begin(), also_known.end());
    std::fprintf(stderr, "minitensor: %s: ignoring unknown %s %s (known: %s)\n", var,
                 unknown.size() == 1 ? "word" : "words",
                 fmt::format("{}", fmt::join(unknown, ", ")).c_str(),
                 fmt::format("{}", fmt::join(known, ", ")).c_str());
  }
  return found;
}
}  // namespace

struct Dispatcher::State {
  std::mutex mutex;  // registrations; never taken on the call path
  std::unordered_map<std::string, std::unique_ptr<OperatorEntry>> ops;
  std::array<std::vector<OperatorEntry::Registration>, kNumDispatchKeys> fallbacks;  // newest first
  std::unordered_map<uint64_t, std::pair<OperatorEntry*, int>> by_id;                // key -1: def
  uint64_t next_id = 1;
};

Dispatcher::Dispatcher() : state_(std::make_unique<State>()) {
  const bool why = env_list_has("MT_TRACE", "dispatch:why", {"dispatch"}, /*warn=*/false);
  if (env_list_has("MT_TRACE", "dispatch", {"dispatch:why"}) || why)
    detail::g_trace_dispatch.store(true);
  detail::g_trace_why.store(why);
  // The Mode key's fallback (Note [Dispatch modes]): part of every table from the start.
  state_->fallbacks[size_t(DispatchKey::Mode)].insert(
      state_->fallbacks[size_t(DispatchKey::Mode)].begin(),
      {state_->next_id++, detail::mode_fallback_kernel(), detail::mode_fallback_debug()});
  if (env_list_has("MT_LOG", "registration", {"jit", "compile", "autotune"}))
    log_registrations_.store(true);
}

Dispatcher::~Dispatcher() = default;

Dispatcher& Dispatcher::singleton() {
  static Dispatcher* d = new Dispatcher();  // never destroyed: static kernels may outlive main
  return *d;
}

void Dispatcher::set_trace_dispatch(bool on) { detail::g_trace_dispatch.store(on); }
void Dispatcher::set_trace_why(bool on) { detail::g_trace_why.store(on); }
void Dispatcher::set_log_registrations(bool on) { log_registrations_.store(on); }

// The sink is the runtime's (runtime/log.h), which the JIT and mt::compile log through too.
void Dispatcher::set_log_sink(std::function<void(std::string_view)> sink) {
  detail::set_log_sink(std::move(sink));
}

void Dispatcher::log(std::string_view line) { detail::log_line(line); }

void Dispatcher::rebuild_locked(OperatorEntry& e) {
  std::array<KernelFunction, kNumDispatchKeys> fb;
  std::array<std::string, kNumDispatchKeys> fb_debug;
  for (int k = 0; k < kNumDispatchKeys; ++k) {
    if (!state_->fallbacks[size_t(k)].empty()) {
      fb[size_t(k)] = state_->fallbacks[size_t(k)].front().kernel;
      fb_debug[size_t(k)] = state_->fallbacks[size_t(k)].front().debug;
    }
  }
  e.rebuild(fb, fb_debug);
}

OperatorEntry& Dispatcher::entry_locked(const OperatorName& name) {
  auto& slot = state_->ops[name.str()];
  if (!slot) {
    slot = std::make_unique<OperatorEntry>(name);
    rebuild_locked(*slot);
  }
  return *slot;
}

uint64_t Dispatcher::def(FunctionSchema schema, std::string debug, TagSet tags) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  OperatorName name{schema.ns, schema.name, schema.overload};
  auto it = state_->ops.find(name.str());
  if (it != state_->ops.end()) {
    OperatorEntry& e = *it->second;
    const OperatorEntry::DefinedSchema* old = e.defined();
    MT_CHECK(old == nullptr,
             "[def] '{}' is already defined (at {}); define each op once, or use "
             "an overload name such as '{}.v2'",
             name.str(), old ? old->debug : "", name.str());
    for (auto& regs : e.kernels_)
      for (auto& r : regs)
        if (r.kernel.signature() && !r.kernel.signature()->matches(schema))
          MT_ERROR(
              "[def] the schema {} disagrees with the kernel registered at {}, whose C++ "
              "signature is {}; fix one of them",
              schema.str(), r.debug, r.kernel.signature()->str());
  }
  OperatorEntry& e = entry_locked(name);
  uint64_t id = state_->next_id++;
  if (log_registrations_)
    log(fmt::format("[registration] def {}{} at {}", schema.str(),
                    tags.empty() ? "" : " tags: " + tags.str(), debug));
  auto d = std::make_unique<OperatorEntry::DefinedSchema>(
      OperatorEntry::DefinedSchema{std::move(schema), std::move(debug), tags});
  e.schema_.store(d.get(), std::memory_order_release);  // Note [Schema publication]
  e.schemas_.push_back(std::move(d));
  e.ever_defined_.store(true, std::memory_order_relaxed);
  state_->by_id[id] = {&e, -1};
  return id;
}

namespace {
// Note [Fake is always fake]
// A Fake kernel runs under FakeMode however it was registered (register_fake, m.impl in
// MT_LIBRARY_IMPL(ns, Fake, m), by name), so mt::empty_like and the other factories make
// fake tensors in it. Its outputs must be fake: a real one (a tensor the kernel closed
// over) is an error naming the op and the output, and so is a read of a fake tensor's
// data. The wrapper is boxed: fake calls (capture, opcheck) are off the hot path.
KernelFunction always_fake(KernelFunction kernel, std::string debug) {
  return KernelFunction::boxed([kernel = std::move(kernel), debug = std::move(debug)](
                                   const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
    const size_t n_args = op.schema().arguments.size();
    const size_t base = stack->size() >= n_args ? stack->size() - n_args : 0;
    {
      FakeMode fake;
      try {
        kernel.call_boxed(op, ks, stack);
      } catch (const Error& e) {
        const std::string_view what = e.what();
        if (what.starts_with("[data_ptr] cannot read the data of a fake tensor") ||
            what.starts_with("[copy_] cannot copy data to or from a fake tensor"))
          MT_ERROR(
              "[{}] the Fake kernel registered at {} read the data of a fake tensor; a fake "
              "kernel computes the outputs' sizes, strides, dtype and device from the "
              "inputs' metadata only ({})",
              op.name().str(), debug, e.what());
        throw;
      }
    }
    size_t o = 0;
    auto check = [&](const Tensor& t) {
      if (t.defined() && !t.is_fake())
        MT_ERROR(
            "[{}] the Fake kernel registered at {} returned a real tensor as output {} "
            "(shape {}); a fake kernel must return fake tensors: make them from its inputs "
            "with mt::empty_like or mt::empty (it runs under FakeMode), not from real "
            "tensors it holds",
            op.name().str(), debug, o, t.sizes());
      ++o;
    };
    for (size_t i = base; i < stack->size(); ++i) {
      const Value& v = (*stack)[i];
      if (v.is_tensor())
        check(v.to_tensor());
      else if (v.is_tensor_list())
        for (const Tensor& t : v.to_tensor_list()) check(t);
    }
  });
}
}  // namespace

uint64_t Dispatcher::impl(std::string_view name_text, DispatchKey key, KernelFunction kernel,
                          std::string debug) {
  OperatorName name = parse_operator_name(name_text);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->ops.find(name.str());
  const OperatorEntry::DefinedSchema* def =
      it != state_->ops.end() ? it->second->defined() : nullptr;
  if (def && kernel.signature() && !kernel.signature()->matches(def->schema)) {
    MT_ERROR(
        "[impl] the {} kernel for '{}' (at {}) has the C++ signature {}, but the schema is "
        "{}; change the kernel's parameter and return types to match",
        dispatch_key_name(key), name.str(), debug, kernel.signature()->str(), def->schema.str());
  }
  if (key == DispatchKey::Fake && kernel.is_valid() &&
      kernel.kind() != KernelFunction::Kind::Fallthrough)
    kernel = always_fake(std::move(kernel), debug);  // Note [Fake is always fake]
  OperatorEntry& e = entry_locked(name);
  uint64_t id = state_->next_id++;
  if (log_registrations_)
    log(fmt::format("[registration] impl {} for {} at {}", name.str(), dispatch_key_name(key),
                    debug));
  auto& regs = e.kernels_[size_t(key)];
  regs.insert(regs.begin(), {id, std::move(kernel), std::move(debug)});
  state_->by_id[id] = {&e, int(key)};
  rebuild_locked(e);
  return id;
}

uint64_t Dispatcher::fallback(DispatchKey key, KernelFunction kernel, std::string debug) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  uint64_t id = state_->next_id++;
  if (log_registrations_)
    log(fmt::format("[registration] fallback for {} at {}", dispatch_key_name(key), debug));
  auto& regs = state_->fallbacks[size_t(key)];
  regs.insert(regs.begin(), {id, std::move(kernel), std::move(debug)});
  state_->by_id[id] = {nullptr, int(key)};
  for (auto& [_, e] : state_->ops) rebuild_locked(*e);
  return id;
}

void Dispatcher::deregister(uint64_t id) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->by_id.find(id);
  if (it == state_->by_id.end()) return;  // already undone
  // Plain variables, not a structured binding: the lambda below captures them (clang 15 does
  // not let a lambda capture a structured binding).
  OperatorEntry* const entry = it->second.first;
  const int key = it->second.second;
  state_->by_id.erase(it);
  auto drop = [&](std::vector<OperatorEntry::Registration>& regs, const char* what) {
    for (auto r = regs.begin(); r != regs.end(); ++r) {
      if (r->id != id) continue;
      if (log_registrations_)
        log(fmt::format("[deregistration] {} {} for {} at {}", what,
                        entry ? entry->name().str() : "", dispatch_key_name(DispatchKey(key)),
                        r->debug));
      regs.erase(r);
      return;
    }
  };
  if (entry == nullptr) {
    drop(state_->fallbacks[size_t(key)], "fallback");
    for (auto& [_, e] : state_->ops) rebuild_locked(*e);
    return;
  }
  if (key < 0) {
    const OperatorEntry::DefinedSchema* d = entry->defined();
    if (log_registrations_ && d)
      log(fmt::format("[deregistration] def {} at {}", d->schema.str(), d->debug));
    entry->schema_.store(nullptr, std::memory_order_release);  // kept in schemas_
    return;
  }
  drop(entry->kernels_[size_t(key)], "impl");
  rebuild_locked(*entry);
}

void Dispatcher::set_kernel_enabled(std::string_view name, DispatchKey key, bool enabled) {
  check_operator_name(name);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->ops.find(std::string(name));
  MT_CHECK(it != state_->ops.end() && it->second->has_schema(),
           "[set_kernel_enabled] no operator named {} is registered", mt::quoted(name));
  OperatorEntry& e = *it->second;
  const uint64_t bit = uint64_t(1) << int(key);
  e.disabled_ = enabled ? e.disabled_ & ~bit : e.disabled_ | bit;
  if (log_registrations_)
    log(fmt::format("[registration] {} {} for {}", enabled ? "enable" : "disable", name,
                    dispatch_key_name(key)));
  rebuild_locked(e);
}

std::optional<OperatorHandle> Dispatcher::find(std::string_view name) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->ops.find(std::string(name));
  if (it == state_->ops.end() || !it->second->has_schema()) return std::nullopt;
  return OperatorHandle(it->second.get());
}

OperatorHandle Dispatcher::find_or_throw(std::string_view name) {
  check_operator_name(name);
  if (auto h = find(name)) return *h;
  std::vector<std::pair<size_t, std::string>> close;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto it = state_->ops.find(std::string(name));
    if (it != state_->ops.end() && it->second->ever_defined_.load() &&
        !it->second->schemas_.empty()) {
      MT_ERROR(
          "[dispatcher] {} was defined at {}, and then dropped: the Library or custom_op "
          "handle that defined it was destroyed, which undoes its registrations. Keep that "
          "handle alive while the op is used (a custom_op in a shared library: a static "
          "handle; docs/embedding.md), or define the op in an MT_LIBRARY block, which lives "
          "for the process",
          mt::quoted(name), it->second->schemas_.back()->debug);
    }
    for (auto& [n, e] : state_->ops) {
      if (!e->has_schema()) continue;
      size_t d = detail::edit_distance(name, n);
      if (d <= std::max<size_t>(2, name.size() / 4)) close.emplace_back(d, n);
    }
  }
  std::sort(close.begin(), close.end());
  if (close.size() > 3) close.resize(3);
  std::vector<std::string> names;
  for (auto& [_, n] : close) names.push_back(n);
  if (names.empty())
    MT_ERROR(
        "[dispatcher] no operator named {} is registered; define it with "
        "mt::custom_op(\"{}\", fn) or MT_LIBRARY (run `minitensor ops` to list the ops)",
        mt::quoted(name), name);
  MT_ERROR("[dispatcher] no operator named {} is registered; did you mean: {}?", mt::quoted(name),
           fmt::join(names, ", "));
}

std::vector<OperatorName> Dispatcher::all_ops() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<OperatorName> out;
  for (auto& [_, e] : state_->ops)
    if (e->has_schema()) out.push_back(e->name());
  std::sort(out.begin(), out.end(),
            [](const OperatorName& a, const OperatorName& b) { return a.str() < b.str(); });
  return out;
}

std::string Dispatcher::dump(std::string_view name) {
  check_operator_name(name);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->ops.find(std::string(name));
  MT_CHECK(it != state_->ops.end(), "[dump] no operator named {} is registered", mt::quoted(name));
  return it->second->dump();
}

std::string Dispatcher::dump_table(std::string_view name) {
  check_operator_name(name);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->ops.find(std::string(name));
  MT_CHECK(it != state_->ops.end(), "[dump_table] no operator named {} is registered",
           mt::quoted(name));
  return it->second->dump_table();
}

std::vector<std::string> Dispatcher::find_dangling_impls() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::string> out;
  for (auto& [n, e] : state_->ops) {
    if (e->has_schema()) continue;
    bool any = false;
    for (auto& regs : e->kernels_) any = any || !regs.empty();
    if (any) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The built-in ops register on the first call (Note [Library initialization]).
Dispatcher& dispatcher() {
  detail::ensure_initialized();
  return Dispatcher::singleton();
}

}  // namespace mt
