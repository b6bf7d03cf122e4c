// SPDX-License-Identifier: MIT
// mt::load_library with libraries that misbehave while they load (tests/load_probe.cpp):
// a throwing static constructor, a block that throws a non-std::exception, a block that
// loads its dependency (or itself), a built-in op's name, a second load after a failure.
// Each runs in a child process: a load lasts for the process, and before the fixes these
// cases aborted or hung (Note [Loading a library of ops] in dispatcher/library.cpp).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "minitensor.h"

namespace {

std::string probe(const char* variant) {
  return std::string(MT_LOAD_PROBE_DIR) + "/libload_probe_" + variant + ".so";
}

// Runs fn in a child killed after `seconds`; fn returns "" on success, else what went
// wrong (printed by the child). Returns the child's status: 0 passed, 1 failed, 128+N
// killed by signal N (SIGALRM: it hung).
int in_child(const std::function<std::string()>& fn, unsigned seconds = 60) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(seconds);
    std::string why;
    try {
      why = fn();
    } catch (const std::exception& e) {
      why = std::string("unexpected exception: ") + e.what();
    } catch (...) {
      why = "unexpected exception";
    }
    if (!why.empty()) std::fprintf(stderr, "in the child: %s\n", why.c_str());
    std::fflush(nullptr);
    ::_exit(why.empty() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// The error load_library(path) throws ("" if none).
std::string load_error(const std::string& path) {
  try {
    mt::load_library(path);
  } catch (const mt::Error& e) {
    return e.what();
  }
  return "";
}

std::string expect(const std::string& got, const std::string& want) {
  return got == want ? "" : "expected\n  " + want + "\ngot\n  " + got;
}
std::string expect_parts(const std::string& got, const std::string& prefix,
                         const std::string& middle, const std::string& suffix) {
  const bool ok = got.starts_with(prefix) && got.ends_with(suffix) &&
                  got.find(middle, prefix.size()) != std::string::npos;
  return ok ? "" : "expected " + prefix + " ... " + middle + " ... " + suffix + "\ngot\n  " + got;
}

// Another thread can still load a library (the loader's lock is free).
std::string other_thread_loads(const std::string& path, const char* op) {
  std::string why;
  std::thread t([&] {
    why = load_error(path);
    if (why.empty() && !mt::dispatcher().find(op)) why = std::string("no ") + op + " after loading";
  });
  t.join();
  return why;
}

}  // namespace

TEST_SUITE("load_library") {
  TEST_CASE("load_library: a static constructor that throws is an error, and later loads work") {
    const std::string p = probe("ctor_throws");
    CHECK(
        in_child([&] {
          std::string why = expect_parts(
              load_error(p),
              // "threw '...' (found by ...)" where the exception leaves dlopen, "failed: ... killed
              // by signal 6 (Aborted), saying: '... what(): ...'" where it terminates the child
              "[load_library] " + mt::quoted(p) + " was not loaded: a static initializer of it ",
              "probe: a static constructor failed",
              "; a static constructor must not throw: register from MT_LIBRARY blocks, whose "
              "errors load_library reports, or catch inside the constructor");
          if (!why.empty()) return why;
          if (mt::dispatcher().find("probe_ctor::f"))
            return std::string("probe_ctor::f is registered");
          why = other_thread_loads(probe("dep"), "probe_dep::dep");
          if (!why.empty()) return why;
          const std::string again = load_error(p);
          return again.starts_with("[load_library] " + mt::quoted(p) +
                                   " was loaded before, and that "
                                   "load failed: " +
                                   mt::quoted(p) + " was not loaded")
                     ? std::string()
                     : "a second load said: " + again;
        }) == 0);
  }

  TEST_CASE("load_library: a block that throws a non-std::exception is reported, not fatal") {
    const std::string p = probe("block_throws_int");
    CHECK(in_child([&] {
            std::string why =
                expect_parts(load_error(p),
                             "[load_library] " + mt::quoted(p) +
                                 " loaded, but 1 of its library blocks failed and "
                                 "registered nothing: the block at tests/load_probe.cpp:",
                             ": it threw something that is not a std::exception; ",
                             "throw an mt::Error, or another std::exception, instead");
            if (!why.empty()) return why;
            if (mt::dispatcher().find("probe_int::f"))
              return std::string("probe_int::f stayed registered");
            return other_thread_loads(probe("dep"), "probe_dep::dep");
          }) == 0);
  }

  TEST_CASE("load_library: a library block may load its dependency; a cycle is refused") {
    CHECK(in_child(
              [&] {
                std::string why = load_error(probe("nested"));
                if (!why.empty()) return why;
                if (!mt::dispatcher().find("probe_outer::outer") ||
                    !mt::dispatcher().find("probe_dep::dep"))
                  return std::string("the plugin or its dependency is missing");
                mt::Tensor x = mt::ones({2});
                if (!mt::allclose(mt::call<mt::Tensor>("probe_dep::dep", x), x))
                  return std::string("probe_dep::dep computed something else");
                return load_error(probe("dep"));  // loaded already, by the plugin: nothing to do
              },
              15) == 0);  // 15 s: under the trial load's 30, which a nested load once waited out
    const std::string c = probe("cycle");
    CHECK(in_child(
              [&] {
                return expect_parts(load_error(c),
                                    "[load_library] " + mt::quoted(c) +
                                        " loaded, but 1 of its library blocks failed and "
                                        "registered nothing: the block at tests/load_probe.cpp:",
                                    ": [load_library] " + mt::quoted(c) +
                                        " is being loaded already: a library block asked "
                                        "for it again while it loads (the loads in progress: ",
                                    "); break the cycle, so that each library loads only the "
                                    "libraries it depends on");
              },
              15) == 0);
  }

  TEST_CASE("load_library: a user library cannot define a built-in op's name or MT_LIBRARY(mt)") {
    const std::string p = probe("defines_add");
    CHECK(in_child([&] {
            std::string why = expect_parts(
                load_error(p),
                "[load_library] " + mt::quoted(p) +
                    " loaded, but 1 of its library blocks failed and "
                    "registered nothing: the block at tests/load_probe.cpp:",
                ": [def] 'mt::add' is already defined (at kernels/ops/binary.cpp:",
                "); define each op once, or use an overload name such as 'mt::add.v2'");
            if (!why.empty()) return why;
            // the built-in op still works
            mt::Tensor x = mt::ones({2});
            return mt::allclose(mt::add(x, x), mt::full({2}, 2.0))
                       ? std::string()
                       : std::string("mt::add is broken");
          }) == 0);
    const std::string q = probe("mt_library");
    CHECK(in_child([&] {
            return expect_parts(load_error(q),
                                "[load_library] " + mt::quoted(q) +
                                    " loaded, but 1 of its library blocks failed and "
                                    "registered nothing: the block at tests/load_probe.cpp:",
                                ": [library] MT_LIBRARY(mt, m) at tests/load_probe.cpp:",
                                ": the namespace 'mt' is minitensor's own; define your ops in a "
                                "namespace of your own "
                                "(MT_LIBRARY(myops, m))");
          }) == 0);
  }

  TEST_CASE("load_library: loading a library again after its block failed repeats the error") {
    const std::string p = probe("bad_block");
    CHECK(in_child([&] {
            const std::string first = load_error(p);
            std::string why =
                expect_parts(first,
                             "[load_library] " + mt::quoted(p) +
                                 " loaded, but 1 of its "
                                 "library blocks failed and registered nothing: the block at "
                                 "tests/load_probe.cpp:",
                             ": [schema] ", "");
            if (!why.empty()) return why;
            return expect(load_error(p),
                          "[load_library] " + mt::quoted(p) +
                              " was loaded before, and "
                              "that load failed: " +
                              first.substr(15) +
                              "; a library loads "
                              "once per process: fix it, rebuild it and start a new process");
          }) == 0);
  }
}

TEST_CASE(
    "load_library: a user's .so of ops (MT_LIBRARY, by-name fake and autograd) passes opcheck") {
  CHECK(
      in_child([] {
        std::string why = load_error(probe("user_ops"));
        if (!why.empty()) return why;
        mt::OpCheckReport rep =
            mt::opcheck(mt::dispatcher().find_or_throw("user_ops::scale"),
                        {mt::Stack{mt::randn({3, 4}), 2.0}, mt::Stack{mt::randn({5}), -0.5}});
        if (!rep.ok()) return rep.str();
        for (const auto& t : rep.tests)
          if (t.skipped) return "skipped: " + rep.str();
        if (rep.tests.size() != 5) return "not five tests: " + rep.str();
        mt::GradcheckResult g = mt::gradcheck(
            [](const std::vector<mt::Tensor>& xs) {
              return mt::call<mt::Tensor>("user_ops::scale", xs[0], 3);
            },
            {mt::randn({4}, mt::TensorOptions{.dtype = mt::DType::Float64}).requires_grad_(true)});
        if (!g.ok) return g.message;
        mt::Tensor out = mt::call<mt::Tensor>("user_ops::scale", mt::fake_empty({2, 3}), 2.0);
        return out.is_fake() ? std::string() : std::string("a real tensor from a fake input");
      }) == 0);
}
