// SPDX-License-Identifier: MIT
// Tests whose failure was a crash or a hang run in a child process, so that they fail the
// case instead of stopping the run.
#pragma once

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <string>

// Runs fn in a forked child killed after `seconds` of wall time (and, when cpu_seconds is
// set, after that much CPU time: SIGXCPU). Returns the child's exit status: 0 when fn
// returned true, 1 when it returned false or threw, 128 + N when signal N killed it (the
// child's crash signals have their default action, not doctest's handlers, so the parent
// sees them).
inline int in_child(const std::function<bool()>& fn, unsigned seconds = 20,
                    unsigned cpu_seconds = 0) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);
    if (cpu_seconds > 0) {
      const rlimit cpu{cpu_seconds, cpu_seconds + 1};
      ::setrlimit(RLIMIT_CPU, &cpu);
    }
    ::alarm(seconds);
    bool ok = false;
    try {
      ok = fn();
    } catch (...) {
      ok = false;
    }
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// Runs this test program again as a new process (the cases a setting read once per process
// needs: an environment variable read at load), with `env` before it ("NAME=value ...")
// and `-tc=<filter>`; returns its exit status (-1 if it did not exit) and what it printed.
struct SelfRun {
  int exit_status = -1;
  std::string out;
};
inline SelfRun run_self(const std::string& env, const std::string& filter) {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  const std::string cmd = env + " '" + exe + "' --no-intro --no-version '-tc=" + filter + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  SelfRun r;
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) r.out.append(buf, got);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  return r;
}
