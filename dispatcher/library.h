// SPDX-License-Identifier: MIT
// Library: an RAII set of registrations (defs, impls, fallbacks) that it undoes when
// destroyed, and the MT_LIBRARY macros that make one at static-initialization time.
#pragma once

#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"

namespace mt {

namespace detail {
std::string debug_location(const std::source_location& loc);  // "tests/test_x.cpp:12"
struct LibraryInit;
}

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
    } else {
      return impl_kernel(name, key, KernelFunction::make(std::forward<F>(fn)), loc);
    }
  }
  // A boxed fallback for every op at this library's key (Impl libraries only).
  Library& fallback(KernelFunction kernel, std::source_location loc = std::source_location::current());
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

#define MT_LIBRARY(ns, m) MT_LIBRARY_BLOCK_(Def, ns, std::nullopt, m, MT_CONCAT(mt_lib_, __COUNTER__))
#define MT_LIBRARY_FRAGMENT(ns, m) \
  MT_LIBRARY_BLOCK_(Fragment, ns, std::nullopt, m, MT_CONCAT(mt_lib_, __COUNTER__))
#define MT_LIBRARY_IMPL(ns, key, m) \
  MT_LIBRARY_BLOCK_(Impl, ns, ::mt::DispatchKey::key, m, MT_CONCAT(mt_lib_, __COUNTER__))

#define MT_LIBRARY_BLOCK_(kind, ns, key, m, uid)                                           \
  static void MT_CONCAT(uid, _init)(::mt::Library&);                                      \
  static ::mt::detail::LibraryInit MT_CONCAT(uid, _static)(                               \
      ::mt::Library::Kind::kind, #ns, key, &MT_CONCAT(uid, _init),                        \
      ::std::source_location::current());                                                 \
  void MT_CONCAT(uid, _init)(::mt::Library & m)
