// SPDX-License-Identifier: MIT
#include <fmt/ranges.h>

#include "dispatcher/dispatcher.h"
#include "dispatcher/mode.h"

namespace mt {
namespace {

void add_tensor_sources(const Tensor& t, const std::string& prefix, std::vector<KeySource>* out) {
  if (!t.defined()) return;
  const DispatchKeySet k = t.key_set();
  if (k.has(DispatchKey::Fake)) out->push_back({DispatchKey::Fake, prefix + "fake"});
  if (k.has(DispatchKey::CUDA))
    out->push_back({DispatchKey::CUDA, prefix + "device " + t.device().str()});
  if (k.has(DispatchKey::CPU))
    out->push_back({DispatchKey::CPU, prefix + "device " + t.device().str()});
  if (k.has(DispatchKey::Autograd))
    out->push_back({DispatchKey::Autograd, prefix + "requires_grad"});
}

// Which guard puts a key in the thread-local included or excluded set. The guards keep
// no record (they are on the hot path), so this names the library's guards for each key.
std::string included_by(DispatchKey k) {
  if (k == DispatchKey::Mode) {
    std::vector<std::string> quoted;
    for (const std::string& m : active_modes()) quoted.push_back(mt::quoted(m));
    return fmt::format("ModeGuard (modes, innermost last: {})", fmt::join(quoted, ", "));
  }
  if (k == DispatchKey::Trace)
    return "TraceCallsGuard, ObserveCallsGuard (mt::compile's capture) or NameAllocationsByOp";
  return "an IncludeDispatchKeyGuard";
}
std::string excluded_by(DispatchKey k) {
  if (k == DispatchKey::Autograd)
    return "NoGradGuard, or an Autograd kernel running the op below itself";
  return "an ExcludeDispatchKeyGuard";
}

std::string_view entry_word(const DispatchTable& t, DispatchKey k) {
  const KernelFunction& f = t.kernels[size_t(k)];
  if (!f.is_valid()) return "missing";
  if (f.kind() == KernelFunction::Kind::Fallthrough) return "fallthrough";
  return t.origin[size_t(k)] == 2 ? "fallback" : "kernel";
}

}  // namespace

namespace detail {

DispatchExplanation explain_with_keys(const OperatorEntry& e, const Stack& args,
                                      std::optional<DispatchKeySet> given, bool redispatch) {
  const FunctionSchema& schema = e.schema();  // a dropped op says so
  MT_CHECK(args.size() <= schema.arguments.size(),
           "[explain] '{}' takes {} arguments but {} were given; the schema is {}", e.name().str(),
           schema.arguments.size(), args.size(), schema.str());
  DispatchExplanation x;
  x.op = e.name().str();
  x.redispatch = redispatch;
  for (size_t i = 0; i < args.size(); ++i) {
    ArgumentKeys a;
    a.name = schema.arguments[i].name;
    a.value = args[i].str();
    const Value& v = args[i];
    if (v.is_tensor()) {
      add_tensor_sources(v.to_tensor(), "", &a.sources);
      if (v.to_tensor().defined()) a.keys = v.to_tensor().key_set();
    } else if (v.is_tensor_list()) {
      const std::vector<Tensor>& ts = v.to_tensor_list();
      for (size_t j = 0; j < ts.size(); ++j) {
        add_tensor_sources(ts[j], fmt::format("element {}: ", j), &a.sources);
        if (ts[j].defined()) a.keys = a.keys | ts[j].key_set();
      }
    }
    x.from_arguments = x.from_arguments | a.keys;
    x.arguments.push_back(std::move(a));
  }
  const LocalDispatchKeySet& local = local_dispatch_keys();
  x.included = local.included;
  x.excluded = local.excluded;
  for (int k = kNumDispatchKeys - 1; k >= 0; --k) {
    if (x.included.has(DispatchKey(k)))
      x.included_by.push_back({DispatchKey(k), included_by(DispatchKey(k))});
    if (x.excluded.has(DispatchKey(k)))
      x.excluded_by.push_back({DispatchKey(k), excluded_by(DispatchKey(k))});
  }
  if (given) {
    x.computed = *given;
  } else {
    DispatchKeySet ks = (x.from_arguments | x.included) - x.excluded;
    if (ks.below(DispatchKey::Fake).empty() && !ks.has(DispatchKey::Fake)) {
      ks = ks.add(DispatchKey::CPU);
      x.cpu_default = true;
    }
    x.computed = ks;
  }
  const DispatchTable& t = e.table();
  x.entry = "missing";
  for (int k = kNumDispatchKeys - 1; k >= 0; --k) {
    const DispatchKey key = DispatchKey(k);
    if (!x.computed.has(key)) continue;
    const std::string_view word = entry_word(t, key);
    x.steps.push_back({key, std::string(word), word == "missing" ? "" : t.debug[size_t(k)]});
    if (word == "fallthrough") continue;
    // The call path takes the highest key that is not a fallthrough, even a missing one.
    x.winner = word == "missing" ? std::nullopt : std::optional<DispatchKey>(key);
    x.entry = std::string(word);
    x.registered_at = x.steps.back().registered_at;
    break;
  }
  return x;
}

}  // namespace detail

DispatchExplanation explain_dispatch(const OperatorHandle& op, const Stack& args) {
  return detail::explain_with_keys(*op.entry(), args, std::nullopt, false);
}

DispatchExplanation explain_dispatch(std::string_view op, const Stack& args) {
  return explain_dispatch(dispatcher().find_or_throw(op), args);
}

std::string DispatchExplanation::str() const {
  auto sources = [](const std::vector<KeySource>& ss) {
    std::vector<std::string> parts;
    for (const KeySource& s : ss)
      parts.push_back(fmt::format("{} from {}", dispatch_key_name(s.key), s.why));
    return fmt::format("{}", fmt::join(parts, "; "));
  };
  std::string out = fmt::format("why {} ({})\n", op,
                                redispatch ? "a redispatch: keys from the kernel above" : "a call");
  for (const ArgumentKeys& a : arguments) {
    out += fmt::format("  argument {} = {}: {}", a.name, a.value, a.keys.str());
    if (!a.sources.empty()) out += "  (" + sources(a.sources) + ")";
    out += "\n";
  }
  out += fmt::format("  thread-local included: {}", included.str());
  if (!included_by.empty()) out += "  (" + sources(included_by) + ")";
  out += fmt::format("\n  thread-local excluded: {}", excluded.str());
  if (!excluded_by.empty()) out += "  (" + sources(excluded_by) + ")";
  out += fmt::format("\n  computed: {}{}\n", computed.str(),
                     cpu_default ? "  (CPU added: no argument names a backend)" : "");
  for (const KeyStep& s : steps) {
    const bool wins = winner && *winner == s.key;
    if (s.entry == "missing") {
      out += fmt::format("  {:<9} missing: no kernel and no fallback; the call is an error\n",
                         dispatch_key_name(s.key));
    } else {
      out +=
          fmt::format("  {:<9} {:<11} [{}]{}\n", dispatch_key_name(s.key), s.entry, s.registered_at,
                      wins                       ? "  <- runs"
                      : s.entry == "fallthrough" ? "  (skipped)"
                                                 : "");
    }
  }
  if (steps.empty()) out += "  no key: the computed set is empty; the call is an error\n";
  return out;
}

namespace detail {
void trace_why(const OperatorEntry& e, DispatchKeySet ks, bool redispatch, const Stack& args) {
  std::string text;
  try {
    text = explain_with_keys(e, args, redispatch ? std::optional<DispatchKeySet>(ks) : std::nullopt,
                             redispatch)
               .str();
  } catch (const Error& err) {  // e.g. the op was dropped: the call itself says so next
    text = fmt::format("why {}: {}\n", e.name().str(), err.what());
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  Dispatcher::singleton().log(text);
}
}  // namespace detail

}  // namespace mt
