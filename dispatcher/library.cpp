// SPDX-License-Identifier: MIT
#include "dispatcher/library.h"

#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <vector>

#include "dispatcher/load_library.h"

namespace mt {

namespace detail {

// file_name() is relative to the source root: meson.build maps the root away with
// -fmacro-prefix-map, wherever the build directory is.
std::string debug_location(const std::source_location& loc) {
  return fmt::format("{}:{}", loc.file_name(), loc.line());
}

namespace {
std::mutex g_ns_mutex;

// While load_library runs the library's static initializers (on its own thread), the
// failures of MT_LIBRARY blocks go here, for load_library to throw, instead of to stderr.
thread_local std::vector<std::string>* t_load_failures = nullptr;
std::map<std::string, std::string>& defining_libraries() {
  static auto* m = new std::map<std::string, std::string>();
  return *m;
}
}  // namespace

LibraryInit::LibraryInit(Library::Kind kind, const char* ns, std::optional<DispatchKey> key,
                         void (*init)(Library&), std::source_location loc) {
  const std::string where = debug_location(loc);
  try {
    lib.emplace(kind, ns, key, loc);  // the block's location, also in a second Def's error
    init(*lib);
  } catch (const std::exception& e) {
    lib.reset();
    if (t_load_failures) {
      t_load_failures->push_back(fmt::format("the block at {}: {}", where, e.what()));
      return;
    }
    std::fprintf(stderr, "[minitensor] the library block at %s failed and was not registered: %s\n",
                 where.c_str(), e.what());
  }
}

}  // namespace detail

void load_library(const std::string& path) {
  std::error_code ec;
  MT_CHECK(std::filesystem::is_regular_file(path, ec),
           "[load_library] there is no file {}; give the path of a shared library of ops "
           "(libmyops.so), built against minitensor",
           mt::quoted(path));
  // A path without a slash would make dlopen search the library path instead.
  const std::string where = path.find('/') == std::string::npos ? "./" + path : path;
  static std::mutex load_mutex;  // one load at a time: the failures are collected per load
  std::lock_guard<std::mutex> lock(load_mutex);
  std::vector<std::string> failures;
  detail::t_load_failures = &failures;
  void* handle = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
  detail::t_load_failures = nullptr;
  if (!handle) {
    const char* why = dlerror();
    MT_CHECK(false, "[load_library] could not load {}: {}", mt::quoted(path),
             why ? why : "unknown reason");
  }
  MT_CHECK(failures.empty(),
           "[load_library] {} loaded, but {} of its library blocks failed and registered "
           "nothing: {}",
           mt::quoted(path), failures.size(), fmt::join(failures, "; "));
}

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key,
                 std::source_location loc)
    : kind_(kind), ns_(std::move(ns)), key_(key), debug_(detail::debug_location(loc)) {
  if (!(kind_ == Kind::Impl && ns_ == "_")) check_operator_name(ns_ + "::op");
  if (kind_ == Kind::Def) {
    std::lock_guard<std::mutex> lock(detail::g_ns_mutex);
    auto& libs = detail::defining_libraries();
    auto it = libs.find(ns_);
    MT_CHECK(it == libs.end(),
             "[library] namespace '{}' is already defined by the library at {}; a namespace has "
             "one MT_LIBRARY: add ops to it from elsewhere with MT_LIBRARY_FRAGMENT({}, m)",
             ns_, it == libs.end() ? "" : it->second, ns_);
    libs[ns_] = debug_;
    owns_ns_ = true;
  }
}

Library::Library(Library&& o) noexcept
    : kind_(o.kind_), ns_(std::move(o.ns_)), key_(o.key_), debug_(std::move(o.debug_)),
      ids_(std::move(o.ids_)), owns_ns_(o.owns_ns_) {
  o.ids_.clear();
  o.owns_ns_ = false;
}

Library::~Library() {
  reset();
  if (owns_ns_) {
    std::lock_guard<std::mutex> lock(detail::g_ns_mutex);
    detail::defining_libraries().erase(ns_);
  }
}

void Library::reset() {
  for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) Dispatcher::singleton().deregister(*it);
  ids_.clear();
}

std::string Library::qualify(std::string_view name) const {
  if (name.find("::") == std::string_view::npos) return ns_ + "::" + std::string(name);
  OperatorName n = parse_operator_name(name);
  MT_CHECK(n.ns == ns_ || ns_ == "_",
           "[library] '{}' belongs to namespace '{}', but this library is for '{}'", name, n.ns,
           ns_);
  return n.str();
}

Library& Library::def(std::string_view schema, std::source_location loc) {
  MT_CHECK(kind_ != Kind::Impl,
           "[library] def(\"{}\") in an MT_LIBRARY_IMPL block; define ops in MT_LIBRARY({}, m) "
           "or MT_LIBRARY_FRAGMENT({}, m)",
           schema, ns_, ns_);
  FunctionSchema s = parse_schema(schema, ns_);
  ids_.push_back(Dispatcher::singleton().def(std::move(s), detail::debug_location(loc)));
  return *this;
}

Library& Library::impl_kernel(std::string_view name, DispatchKey key, KernelFunction k,
                              std::source_location loc) {
  MT_CHECK(!key_ || *key_ == key,
           "[library] impl(\"{}\") for {} in a library for {}; use a library for that key",
           name, dispatch_key_name(key), dispatch_key_name(*key_));
  ids_.push_back(
      Dispatcher::singleton().impl(qualify(name), key, std::move(k), detail::debug_location(loc)));
  return *this;
}

Library& Library::fallback(KernelFunction kernel, std::source_location loc) {
  MT_CHECK(kind_ == Kind::Impl && key_.has_value(),
           "[library] fallback() needs an MT_LIBRARY_IMPL(_, Key, m) library");
  ids_.push_back(Dispatcher::singleton().fallback(*key_, std::move(kernel), detail::debug_location(loc)));
  return *this;
}

}  // namespace mt
