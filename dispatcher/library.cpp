// SPDX-License-Identifier: MIT
#include "dispatcher/library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/init.h"

namespace mt {

namespace detail {

// file_name() is relative to the source root: meson.build maps the root away with
// -fmacro-prefix-map, wherever the build directory is.
std::string debug_location(const std::source_location& loc) {
  return fmt::format("{}:{}", loc.file_name(), loc.line());
}

namespace {
std::mutex g_dropped_mutex;
std::vector<std::shared_ptr<DroppedHistoryNote>>& dropped_notes() {
  static auto* v = new std::vector<std::shared_ptr<DroppedHistoryNote>>();
  return *v;
}
}  // namespace

// Note [Autograd kernels that drop history] in library.h.
void note_dropped_history(const std::shared_ptr<DroppedHistoryNote>& note) {
  if (note->seen.exchange(true)) return;
  std::lock_guard<std::mutex> lock(g_dropped_mutex);
  dropped_notes().push_back(note);
}

std::vector<std::string> dropped_history_kernels() {
  std::vector<std::shared_ptr<DroppedHistoryNote>> notes;
  {
    std::lock_guard<std::mutex> lock(g_dropped_mutex);
    notes = dropped_notes();
  }
  std::vector<std::string> out;
  const size_t k = size_t(DispatchKey::Autograd);
  for (const auto& n : notes) {
    // Only a kernel that is still the op's Autograd kernel (its library may be gone).
    const std::optional<OperatorHandle> h = Dispatcher::singleton().find(n->op);
    if (!h) continue;
    const DispatchTable& t = h->entry()->table();
    if (t.origin[k] != 1 || t.debug[k] != n->where) continue;
    const std::string line = fmt::format(
        "{} (an Autograd kernel registered at {} that returned outputs without "
        "history from an input that requires grad)",
        n->op, n->where);
    if (std::find(out.begin(), out.end(), line) == out.end()) out.push_back(line);
  }
  return out;
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
  std::string error;
  try {
    lib.emplace(kind, ns, key, loc);  // the block's location, also in a second Def's error
    init(*lib);
    return;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    // Escaping a static initializer, this would terminate the program (Note [Loading a
    // library of ops]).
    error =
        "it threw something that is not a std::exception; throw an mt::Error, or another "
        "std::exception, instead";
  }
  lib.reset();
  if (t_load_failures) {
    t_load_failures->push_back(fmt::format("the block at {}: {}", where, error));
    return;
  }
  std::fprintf(stderr, "[minitensor] the library block at %s failed and was not registered: %s\n",
               where.c_str(), error.c_str());
}

}  // namespace detail

// Note [Loading a library of ops]
// load_library runs a user's static initializers inside dlopen, which is C code: an
// exception that leaves one cannot be caught by the caller (glibc terminates the process;
// elsewhere the loader's own lock could stay held). So:
//  - MT_LIBRARY blocks catch everything they throw (a non-std::exception too) and report
//    it through t_load_failures, which a scope guard sets and restores (nested loads keep
//    their own list).
//  - A plain static constructor of the library is out of reach, so the file is first
//    loaded in a child process (fork, dlopen, _exit). If an exception leaves dlopen there,
//    or the child dies (the exception terminated it; a crash), the error says what it
//    threw or printed, and the file is not loaded here. A child that does not finish within
//    kTrialSeconds (say, OpenMP after fork) is killed and the real load goes ahead: the trial only
//    rules out certain death.
//  - One load at a time, under a recursive mutex: a library block may load its own
//    dependency (a distinct file); a file that asks, through its dependencies, for itself
//    while it loads is refused (a cycle).
//  - Each file's outcome is remembered by its canonical path: loading it again does
//    nothing if it loaded cleanly, and repeats the first load's error if it did not.
namespace {

constexpr int kTrialSeconds = 30;

struct LoadRegistry {
  std::recursive_mutex mutex;
  std::map<std::string, std::string> done;  // canonical path -> "" or the first load's error
  std::vector<std::string> in_progress;     // canonical paths, outermost first
};
LoadRegistry& load_registry() {
  static auto* r = new LoadRegistry();  // never destroyed: loads may happen at exit
  return *r;
}

// Restores the previous failure list (a nested load's caller's) however the scope ends.
struct FailureScope {
  std::vector<std::string>* saved;
  explicit FailureScope(std::vector<std::string>* mine) : saved(detail::t_load_failures) {
    detail::t_load_failures = mine;
  }
  ~FailureScope() { detail::t_load_failures = saved; }
  FailureScope(const FailureScope&) = delete;
  FailureScope& operator=(const FailureScope&) = delete;
};

// Set in the trial child only: there a library block's own load_library (a plugin loading
// its dependency) just opens the file. The registry's recursive mutex came through fork
// locked by the parent's thread, and the child's thread is another one to it, so taking it
// would block until the trial's time limit.
bool g_in_trial_child = false;

// Loads `where` in a child process; returns why the child died, or "" when it loaded the
// file, could not load it (the real dlopen then says why) or did not finish in time.
std::string trial_load(const std::string& where) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return "";
  }
  if (pid == 0) {
    g_in_trial_child = true;
    ::close(fds[0]);
    ::dup2(fds[1], 2);  // the child's stderr (a terminate message) goes to the parent
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    void* h = nullptr;
    try {  // where the platform lets an exception out of dlopen (in the parent it would keep
           // the loader's lock held)
      h = ::dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s", e.what());
      ::_exit(4);
    } catch (...) {
      std::fprintf(stderr, "something that is not a std::exception");
      ::_exit(4);
    }
    ::_exit(h ? 0 : 3);
  }
  ::close(fds[1]);
  std::string err;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTrialSeconds);
  bool timed_out = false;
  char buf[512];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child closed its end: it is exiting
    if (err.size() < 4096) err.append(buf, size_t(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3)))
    return "";
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 4)
    return fmt::format("threw {} (found by loading it in a child process first)", mt::quoted(err));
  std::string how = WIFSIGNALED(status)
                        ? fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                                      ::strsignal(WTERMSIG(status)))
                        : fmt::format("exited with status {}", WEXITSTATUS(status));
  return fmt::format("failed: loading it in a child process first, the child {}{}", how,
                     err.empty() ? "" : fmt::format(", saying: {}", mt::quoted(err)));
}

}  // namespace

void load_library(const std::string& path) {
  std::error_code ec;
  MT_CHECK(std::filesystem::is_regular_file(path, ec),
           "[load_library] there is no file {}; give the path of a shared library of ops "
           "(libmyops.so), built against minitensor",
           mt::quoted(path));
  std::string key = std::filesystem::canonical(path, ec).string();
  if (ec) key = std::filesystem::absolute(path, ec).string();
  // A path without a slash would make dlopen search the library path instead.
  const std::string where = path.find('/') == std::string::npos ? "./" + path : path;
  if (g_in_trial_child) {  // a dependency of the library on trial: open it, nothing more
    MT_CHECK(::dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL) != nullptr,
             "[load_library] could not open {} (a dependency of the library being tried)",
             mt::quoted(path));
    return;
  }
  LoadRegistry& reg = load_registry();
  std::lock_guard<std::recursive_mutex> lock(reg.mutex);
  if (auto it = reg.done.find(key); it != reg.done.end()) {
    MT_CHECK(it->second.empty(),
             "[load_library] {} was loaded before, and that load failed: {}; a library loads "
             "once per process: fix it, rebuild it and start a new process",
             mt::quoted(path), it->second);
    return;  // loaded cleanly before
  }
  if (std::find(reg.in_progress.begin(), reg.in_progress.end(), key) != reg.in_progress.end()) {
    MT_ERROR(
        "[load_library] {} is being loaded already: a library block asked for it again "
        "while it loads (the loads in progress: {}); break the cycle, so that each library "
        "loads only the libraries it depends on",
        mt::quoted(path), fmt::join(reg.in_progress, " -> "));
  }
  reg.in_progress.push_back(key);
  struct PopInProgress {
    LoadRegistry& reg;
    ~PopInProgress() { reg.in_progress.pop_back(); }
  } pop{reg};
  auto fail = [&](std::string why) {
    reg.done[key] = why;
    MT_ERROR("[load_library] {}", why);
  };
  if (std::string died = trial_load(where); !died.empty()) {
    fail(
        fmt::format("{} was not loaded: a static initializer of it {}; a static constructor "
                    "must not throw: register from MT_LIBRARY blocks, whose errors load_library "
                    "reports, or catch inside the constructor",
                    mt::quoted(path), died));
  }
  std::vector<std::string> failures;
  void* handle = nullptr;
  std::string thrown;
  {
    FailureScope scope(&failures);
    try {
      handle = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
    } catch (const std::exception& e) {
      thrown = e.what();
    } catch (...) {
      thrown = "something that is not a std::exception";
    }
  }
  if (!thrown.empty())
    fail(
        fmt::format("{}: a static initializer threw {} while it loaded; a static constructor "
                    "must not throw",
                    mt::quoted(path), mt::quoted(thrown)));
  if (!handle) {
    const char* why = dlerror();
    MT_ERROR("[load_library] could not load {}: {}", mt::quoted(path),
             why ? why : "unknown reason");
  }
  if (!failures.empty())
    fail(fmt::format("{} loaded, but {} of its library blocks failed and registered nothing: {}",
                     mt::quoted(path), failures.size(), fmt::join(failures, "; ")));
  reg.done[key] = "";
}

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key,
                 std::source_location loc)
    : kind_(kind), ns_(std::move(ns)), key_(key), debug_(detail::debug_location(loc)) {
  if (!(kind_ == Kind::Impl && ns_ == "_")) check_operator_name(ns_ + "::op");
  if (ns_ == "mt") {
    MT_CHECK(kind_ != Kind::Def,
             "[library] MT_LIBRARY(mt, m) at {}: the namespace 'mt' is minitensor's own; define "
             "your ops in a namespace of your own (MT_LIBRARY(myops, m))",
             debug_);
    // The built-in ops first, whenever this library is made: a user's def of a built-in
    // name then fails here, in its own block, and a user's mt kernel always comes after
    // (so replaces) the built-in one, before or after the dispatcher's first use.
    detail::ensure_initialized();
  }
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
    : kind_(o.kind_),
      ns_(std::move(o.ns_)),
      key_(o.key_),
      debug_(std::move(o.debug_)),
      ids_(std::move(o.ids_)),
      owns_ns_(o.owns_ns_) {
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
  return def(schema, DefOptions{}, loc);
}

Library& Library::def(std::string_view schema, const DefOptions& opts, std::source_location loc) {
  MT_CHECK(kind_ != Kind::Impl,
           "[library] def(\"{}\") in an MT_LIBRARY_IMPL block; define ops in MT_LIBRARY({}, m) "
           "or MT_LIBRARY_FRAGMENT({}, m)",
           schema, ns_, ns_);
  FunctionSchema s = parse_schema(schema, ns_);
  TagSet tags = opts.tags;
  for (const std::string& n : opts.tag_names) tags = tags.add(tag_from_name(n));
  ids_.push_back(Dispatcher::singleton().def(std::move(s), detail::debug_location(loc), tags));
  return *this;
}

Library& Library::impl_kernel(std::string_view name, DispatchKey key, KernelFunction k,
                              std::source_location loc) {
  MT_CHECK(!key_ || *key_ == key,
           "[library] impl(\"{}\") for {} in a library for {}; use a library for that key", name,
           dispatch_key_name(key), dispatch_key_name(*key_));
  ids_.push_back(
      Dispatcher::singleton().impl(qualify(name), key, std::move(k), detail::debug_location(loc)));
  return *this;
}

Library& Library::fallback(KernelFunction kernel, std::source_location loc) {
  MT_CHECK(kind_ == Kind::Impl && key_.has_value(),
           "[library] fallback() needs an MT_LIBRARY_IMPL(_, Key, m) library");
  ids_.push_back(
      Dispatcher::singleton().fallback(*key_, std::move(kernel), detail::debug_location(loc)));
  return *this;
}

}  // namespace mt
