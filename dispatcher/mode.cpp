// SPDX-License-Identifier: MIT
#include "dispatcher/mode.h"

#include <cxxabi.h>

#include <algorithm>
#include <list>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <typeindex>

#include "dispatcher/library.h"

namespace mt {
namespace {

struct ModeEntry {
  DispatchMode* mode;
  uint64_t id;
  std::atomic<bool> abandoned{false};                   // its guard was destroyed on another thread
  std::thread::id thread = std::this_thread::get_id();  // the thread whose stack holds it
  ModeEntry(DispatchMode* m, uint64_t i) : mode(m), id(i) {}
};

struct ModeStack {
  std::vector<std::shared_ptr<ModeEntry>> entries;  // innermost last
  std::string pending;            // the error a misused guard left, thrown at the next chance
  std::exception_ptr from_below;  // an exception passing up through redispatch()
};
thread_local ModeStack t_modes;
std::atomic<uint64_t> g_next_guard{1};

void sync_mode_key() {
  DispatchKeySet& inc = detail::t_local_keys.included;
  inc = t_modes.entries.empty() ? inc.remove(DispatchKey::Mode) : inc.add(DispatchKey::Mode);
}

std::string misuse(const DispatchMode& m, std::string_view what) {
  return fmt::format(
      "[mode] the ModeGuard of mode {} was destroyed {}; destroy ModeGuards on "
      "the thread that made them, innermost first (make them locals of nested "
      "scopes); the mode was taken off the stack",
      mt::quoted(m.name()), what);
}

// Drops entries whose guards ended on another thread, and throws a pending error.
void settle() {
  auto& es = t_modes.entries;
  for (auto it = es.begin(); it != es.end();) {
    if ((*it)->abandoned.load()) {
      if (t_modes.pending.empty()) t_modes.pending = misuse(*(*it)->mode, "on another thread");
      it = es.erase(it);
    } else {
      ++it;
    }
  }
  sync_mode_key();
  if (!t_modes.pending.empty()) {
    std::string msg = std::move(t_modes.pending);
    t_modes.pending.clear();
    detail::throw_error(std::move(msg));
  }
}

// ---- rules ------------------------------------------------------------------------------

struct RuleKey {
  std::string op;
  std::type_index mode;
  bool operator<(const RuleKey& o) const { return op != o.op ? op < o.op : mode < o.mode; }
};
struct Rules {
  std::shared_mutex mutex;
  std::map<RuleKey, std::list<std::pair<uint64_t, std::shared_ptr<ModeRuleFn>>>> map;
  std::atomic<size_t> count{0};
  uint64_t next = 1;
};
Rules& rules() {
  static Rules* r = new Rules();  // never destroyed: rules may be undone after main
  return *r;
}
std::shared_ptr<ModeRuleFn> find_rule(const OperatorHandle& op, const DispatchMode& m) {
  Rules& r = rules();
  if (r.count.load(std::memory_order_relaxed) == 0) return nullptr;
  std::shared_lock lock(r.mutex);
  auto it = r.map.find(RuleKey{op.name().str(), std::type_index(typeid(m))});
  if (it == r.map.end() || it->second.empty()) return nullptr;
  return it->second.front().second;
}

// The Mode key's fallback: Note [Dispatch modes]. (Its registration names this line.)
const std::source_location kModeFallbackAt = std::source_location::current();
void mode_fallback(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
  settle();
  if (t_modes.entries.empty()) return op.redispatch_boxed(ks.below(DispatchKey::Mode), stack);
  std::shared_ptr<ModeEntry> entry = t_modes.entries.back();
  t_modes.entries.pop_back();
  sync_mode_key();
  struct Restore {
    std::shared_ptr<ModeEntry> e;
    ~Restore() {
      if (!e->abandoned.load()) t_modes.entries.push_back(std::move(e));
      sync_mode_key();
    }
  } restore{entry};
  DispatchMode& mode = *entry->mode;

  const size_t n = op.schema().arguments.size();
  const size_t base = stack->size() - n;
  Stack local;
  Stack* s = stack;
  if (base != 0) {
    local.assign(std::make_move_iterator(stack->begin() + std::ptrdiff_t(base)),
                 std::make_move_iterator(stack->end()));
    stack->resize(base);
    s = &local;
  }
  try {
    if (std::shared_ptr<ModeRuleFn> rule = find_rule(op, mode))
      (*rule)(mode, op, *s);
    else
      mode.dispatch(op, *s);
  } catch (...) {
    std::exception_ptr e = std::current_exception();
    if (e == t_modes.from_below) {  // a kernel's or an outer mode's error: unchanged
      t_modes.from_below = nullptr;
      throw;
    }
    std::string what = "an exception that is not a std::exception";
    try {
      throw;
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    MT_ERROR("[mode] the dispatch mode {} failed while handling '{}': {}", mt::quoted(mode.name()),
             op.name().str(), what);
  }
  if (s != stack)
    stack->insert(stack->end(), std::make_move_iterator(s->begin()),
                  std::make_move_iterator(s->end()));
}

}  // namespace

// ---- DispatchMode ------------------------------------------------------------------------

std::string DispatchMode::name() const {
  const char* raw = typeid(*this).name();
  int status = 0;
  char* d = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : raw;
  std::free(d);
  return out;
}

void DispatchMode::redispatch(const OperatorHandle& op, Stack& stack) {
  DispatchKeySet ks = detail::boxed_call_keys(stack);
  ks = ks.below(DispatchKey::Mode) | (ks & DispatchKeySet(DispatchKey::Mode));
  try {
    op.redispatch_boxed(ks, &stack);
  } catch (...) {
    t_modes.from_below = std::current_exception();
    throw;
  }
}

// ---- ModeGuard ---------------------------------------------------------------------------

ModeGuard::ModeGuard(DispatchMode& mode) : mode_(&mode), id_(g_next_guard.fetch_add(1)) {
  settle();
  auto e = std::make_shared<ModeEntry>(&mode, id_);
  t_modes.entries.push_back(e);
  entry_ = e;
  sync_mode_key();
}

ModeGuard::~ModeGuard() {
  auto* e = static_cast<ModeEntry*>(entry_.get());
  if (std::this_thread::get_id() != e->thread) {
    e->abandoned.store(true);  // the owning thread drops it at its next mode call
    Dispatcher::singleton().log(misuse(*mode_, "on another thread"));
    return;
  }
  auto& es = t_modes.entries;
  auto it = std::find_if(es.begin(), es.end(), [&](const auto& p) { return p.get() == e; });
  if (it == es.end()) {  // popped by the fallback: its dispatch() is running
    e->abandoned.store(true);
    if (t_modes.pending.empty()) t_modes.pending = misuse(*mode_, "inside its own dispatch()");
    Dispatcher::singleton().log(t_modes.pending);
    return;
  }
  if (it + 1 != es.end() && t_modes.pending.empty()) {
    t_modes.pending = misuse(*mode_, fmt::format("before the guard of mode {} pushed after it",
                                                 mt::quoted((*(it + 1))->mode->name())));
    Dispatcher::singleton().log(t_modes.pending);
  }
  es.erase(it);
  sync_mode_key();
}

std::vector<std::string> active_modes() {
  std::vector<std::string> out;
  for (const auto& e : t_modes.entries)
    if (!e->abandoned.load()) out.push_back(e->mode->name());
  return out;
}

void check_mode_stack() { settle(); }

// ---- rules -------------------------------------------------------------------------------

ModeRule register_dispatch_mode_rule(std::string_view op, const std::type_info& mode_type,
                                     ModeRuleFn fn, std::source_location loc) {
  MT_CHECK(fn != nullptr,
           "[register_dispatch_mode_rule] the rule for {} is an empty function; "
           "pass a callable",
           mt::quoted(op));
  const std::string name = dispatcher().find_or_throw(op).name().str();
  Rules& r = rules();
  uint64_t id;
  {
    std::unique_lock lock(r.mutex);
    id = r.next++;
    r.map[RuleKey{name, mode_type}].emplace_front(id, std::make_shared<ModeRuleFn>(std::move(fn)));
    r.count.fetch_add(1);
  }
  (void)loc;
  std::shared_ptr<void> undo(nullptr, [name, mode_type = std::type_index(mode_type), id](void*) {
    Rules& r = rules();
    std::unique_lock lock(r.mutex);
    auto& l = r.map[RuleKey{name, mode_type}];
    for (auto it = l.begin(); it != l.end(); ++it)
      if (it->first == id) {
        l.erase(it);
        r.count.fetch_sub(1);
        break;
      }
  });
  return ModeRule(std::move(undo));
}

namespace detail {
KernelFunction mode_fallback_kernel() { return KernelFunction::boxed(mode_fallback); }
std::string mode_fallback_debug() { return debug_location(kModeFallbackAt); }
}  // namespace detail

}  // namespace mt
