// SPDX-License-Identifier: MIT
// Library: an RAII set of registrations (defs, impls, fallbacks) that it undoes when
// destroyed, and the MT_LIBRARY macros that make one at static-initialization time.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"

namespace mt {

namespace detail {
std::string debug_location(const std::source_location& loc);  // "tests/test_x.cpp:12"
struct LibraryInit;

// Note [Autograd kernels that drop history]
// A user's Autograd kernel (a C++ callable given to impl at the Autograd key) that runs the
// op below Autograd without recording a tape node leaves its outputs without history,
// though an input requires grad. Such a kernel is wrapped at registration: the first call
// that returns floating-point outputs none of which requires grad, from an input that
// does, notes the op and where its kernel was registered, and backward on a tensor that
// does not require grad names it (autograd/engine.cpp, check_root). Until a kernel is
// noted, each call reads requires_grad of its outputs and inputs (a kernel that records its
// node, the usual case, pays this on every call); once noted, one relaxed load a call. Kernels
// given as a KernelFunction (register_autograd's, boxed ones) and the library's own (namespace mt)
// are not wrapped.
struct DroppedHistoryNote {
  std::string op, where;
  std::atomic<bool> seen{false};
};
void note_dropped_history(const std::shared_ptr<DroppedHistoryNote>& note);
// "ns::op (an Autograd kernel registered at file:line ...)" for each noted kernel that is
// still the op's Autograd kernel.
std::vector<std::string> dropped_history_kernels();

inline int history_of(const Tensor& t) {  // 1: requires grad, 2: floating without history
  if (!t.defined()) return 0;
  if (t.requires_grad()) return 1;
  return is_floating(t.dtype()) ? 2 : 0;
}
inline int history_of(const std::vector<Tensor>& ts) {
  int h = 0;
  for (const Tensor& t : ts) h |= history_of(t);
  return h;
}
template <typename... Ts>
int history_of(const std::tuple<Ts...>& ts) {
  return std::apply([](const Ts&... t) { return (0 | ... | history_of(t)); }, ts);
}
inline bool input_requires_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool input_requires_grad(const std::optional<Tensor>& t) {
  return t && input_requires_grad(*t);
}
inline bool input_requires_grad(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (input_requires_grad(t)) return true;
  return false;
}
template <typename T>
bool input_requires_grad(const T&) {
  return false;
}

template <typename F, typename Ret, typename Args>
struct HistoryChecked;
template <typename F, typename Ret, typename... A>
struct HistoryChecked<F, Ret, std::tuple<A...>> {
  mutable F f;
  std::shared_ptr<DroppedHistoryNote> note;
  Ret operator()(A... a) const {
    if constexpr (std::is_void_v<Ret>) {
      f(a...);
    } else {
      Ret r = f(a...);
      if (!note->seen.load(std::memory_order_relaxed)) [[unlikely]]
        if (history_of(r) == 2 && (false || ... || input_requires_grad(a)))
          note_dropped_history(note);
      return r;
    }
  }
};
}  // namespace detail

class Library {
 public:
  enum class Kind { Def, Fragment, Impl };

  // Def: the one library that defines namespace `ns` (a second is refused).
  // Fragment: adds defs to a namespace. Impl: kernels for one key (`ns` may be "_" for
  // fallbacks that apply to every op).
  Library(Kind kind, std::string ns, std::optional<DispatchKey> key = std::nullopt,
          std::source_location loc = std::source_location::current());
  ~Library();
  Library(Library&& o) noexcept;
  Library& operator=(Library&&) = delete;
  Library(const Library&) = delete;

  // m.def("silu(Tensor x) -> Tensor"); the namespace is the library's.
  Library& def(std::string_view schema, std::source_location loc = std::source_location::current());
  // m.def("op(Tensor x) -> Tensor", {.tags = {Tag::cudagraph_unsafe}}).
  Library& def(std::string_view schema, const DefOptions& opts,
               std::source_location loc = std::source_location::current());
  // m.impl("silu", fn) in an Impl library registers fn for the library's key.
  template <typename F>
  Library& impl(std::string_view name, F&& fn,
                std::source_location loc = std::source_location::current()) {
    MT_CHECK(key_.has_value(),
             "[library] impl(\"{}\", fn) needs a dispatch key: use MT_LIBRARY_IMPL({}, CPU, m) "
             "or impl(name, DispatchKey::CPU, fn)",
             name, ns_);
    return impl(name, *key_, std::forward<F>(fn), loc);
  }
  template <typename F>
  Library& impl(std::string_view name, DispatchKey key, F&& fn,
                std::source_location loc = std::source_location::current()) {
    if constexpr (std::is_same_v<std::remove_cvref_t<F>, KernelFunction>) {
      return impl_kernel(name, key, std::forward<F>(fn), loc);
    } else if constexpr (!std::is_void_v<typename detail::FnTraits<std::remove_cvref_t<F>>::ret>) {
      if (key == DispatchKey::Autograd &&
          ns_ != "mt") {  // Note [Autograd kernels that drop history]
        using Traits = detail::FnTraits<std::remove_cvref_t<F>>;
        auto note = std::make_shared<detail::DroppedHistoryNote>();
        note->op = qualify(name);
        note->where = detail::debug_location(loc);
        return impl_kernel(
            name, key,
            KernelFunction::make(detail::HistoryChecked<std::decay_t<F>, typename Traits::ret,
                                                        typename Traits::args>{std::forward<F>(fn),
                                                                               std::move(note)}),
            loc);
      }
      return impl_kernel(name, key, KernelFunction::make(std::forward<F>(fn)), loc);
    } else {
      return impl_kernel(name, key, KernelFunction::make(std::forward<F>(fn)), loc);
    }
  }
  // A boxed fallback for every op at this library's key (Impl libraries only).
  Library& fallback(KernelFunction kernel,
                    std::source_location loc = std::source_location::current());
  Library& fallback(BoxedKernelFn fn, std::source_location loc = std::source_location::current()) {
    return fallback(KernelFunction::boxed(std::move(fn)), loc);
  }

  const std::string& ns() const { return ns_; }
  size_t size() const { return ids_.size(); }
  // Undoes every registration now, newest first (the destructor does the same).
  void reset();

 private:
  friend struct detail::LibraryInit;
  Library& impl_kernel(std::string_view name, DispatchKey key, KernelFunction k,
                       std::source_location loc);
  std::string qualify(std::string_view name) const;

  Kind kind_;
  std::string ns_;
  std::optional<DispatchKey> key_;
  std::string debug_;
  std::vector<uint64_t> ids_;
  bool owns_ns_ = false;
};

namespace detail {
// Runs a MT_LIBRARY block at static-initialization time; an error there is logged
// to stderr instead of terminating the program.
struct LibraryInit {
  LibraryInit(Library::Kind kind, const char* ns, std::optional<DispatchKey> key,
              void (*init)(Library&), std::source_location loc);
  std::optional<Library> lib;
};
}  // namespace detail

}  // namespace mt

#define MT_CONCAT_INNER(a, b) a##b
#define MT_CONCAT(a, b) MT_CONCAT_INNER(a, b)

#define MT_LIBRARY(ns, m) \
  MT_LIBRARY_BLOCK_(Def, ns, std::nullopt, m, MT_CONCAT(mt_lib_, __COUNTER__))
#define MT_LIBRARY_FRAGMENT(ns, m) \
  MT_LIBRARY_BLOCK_(Fragment, ns, std::nullopt, m, MT_CONCAT(mt_lib_, __COUNTER__))
#define MT_LIBRARY_IMPL(ns, key, m) \
  MT_LIBRARY_BLOCK_(Impl, ns, ::mt::DispatchKey::key, m, MT_CONCAT(mt_lib_, __COUNTER__))

#define MT_LIBRARY_BLOCK_(kind, ns, key, m, uid)                                                \
  static void MT_CONCAT(uid, _init)(::mt::Library&);                                            \
  static ::mt::detail::LibraryInit MT_CONCAT(uid, _static)(::mt::Library::Kind::kind, #ns, key, \
                                                           &MT_CONCAT(uid, _init),              \
                                                           ::std::source_location::current());  \
  void MT_CONCAT(uid, _init)(::mt::Library & m)

// Loading a shared library of a user's ops at run time, like torch.ops.load_library: its
// MT_LIBRARY blocks register while it loads.
namespace mt {

// Opens the shared library at `path` (dlopen, every symbol bound now) so that its
// MT_LIBRARY, MT_LIBRARY_FRAGMENT and MT_LIBRARY_IMPL blocks register its ops. Throws
// mt::Error when the file is missing, when it cannot be loaded (the loader's reason), or
// when one of its blocks fails (each failure's message; the blocks that succeeded stay
// registered, and the library stays loaded for the life of the process). Loading the same
// file again does nothing.
void load_library(const std::string& path);

}  // namespace mt
