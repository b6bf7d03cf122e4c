// SPDX-License-Identifier: MIT
// The doctest runner for every suite. CUDA cases are decorated with
// doctest::skip(!mt::cuda::is_available()); a listener counts the cases that their skip
// decorator left out and prints one plain line with the count (and why) before the summary.
// Every mt::Error thrown during the run has its message checked (Note [Every error the
// suites trigger]).
#define DOCTEST_CONFIG_IMPLEMENT
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"

// Note [Every error the suites trigger]
// docs/embedding.md promises that every mt::Error message starts with a name in brackets
// ("[add_] ...", "[schema] ..."). tools/lint/check_error_format.py reads the format strings of
// the sources; this checks the messages themselves, of every mt::Error any case throws,
// caught by the test or by the library or not at all. The test program defines
// __cxa_throw, which the C++ runtime calls for every throw expression, the library's
// included (the program's definition comes first in the dynamic linker's search order);
// it looks at an mt::Error's message and hands the throw on to the real __cxa_throw (the
// next definition: libstdc++'s, or a sanitizer's interceptor). main() fails the run when
// a message lacks the prefix, and prints the count.
namespace {
std::atomic<int64_t> g_errors_seen{0};
std::mutex g_bad_mutex;
std::set<std::string>* g_bad_messages = nullptr;  // leaked: throws may come after main

// "[NAME] " with NAME non-empty, no ']' or newline in it, and no space first.
bool has_name_prefix(std::string_view m) {
  if (m.size() < 4 || m[0] != '[' || m[1] == ']' || m[1] == ' ') return false;
  const size_t close = m.find(']');
  return close != std::string_view::npos && m.substr(0, close).find('\n') == m.npos &&
         close + 1 < m.size() && m[close + 1] == ' ';
}

void note_thrown(void* obj, std::type_info* tinfo) {
  void* adjusted = obj;
  if (tinfo == nullptr || !typeid(mt::Error).__do_catch(tinfo, &adjusted, 1)) return;
  g_errors_seen.fetch_add(1, std::memory_order_relaxed);
  const char* what = static_cast<const mt::Error*>(adjusted)->what();
  if (has_name_prefix(what)) return;
  std::lock_guard<std::mutex> lock(g_bad_mutex);
  if (g_bad_messages == nullptr) g_bad_messages = new std::set<std::string>;
  g_bad_messages->insert(std::string(what).substr(0, 300));
}
}  // namespace

// The type_info argument as void*: the declaration the compiler itself assumes.
extern "C" [[noreturn]] void __cxa_throw(void* obj, void* tinfo, void (*destroy)(void*)) {
  using Throw = void (*)(void*, void*, void (*)(void*));
  static const Throw next = reinterpret_cast<Throw>(::dlsym(RTLD_NEXT, "__cxa_throw"));
  if (next == nullptr) {
    std::fputs("[minitensor tests] __cxa_throw: the C++ runtime's was not found\n", stderr);
    std::abort();
  }
  note_thrown(obj, static_cast<std::type_info*>(tinfo));
  next(obj, tinfo, destroy);
  std::abort();  // not reached: the real __cxa_throw does not return
}

namespace {

struct SkipCounter : doctest::IReporter {
  std::ostream& out;
  unsigned skipped = 0;

  explicit SkipCounter(const doctest::ContextOptions& o) : out(*o.cout) {}

  // Called for the cases a filter leaves out too; only the decorated ones count.
  void test_case_skipped(const doctest::TestCaseData& tc) override { skipped += tc.m_skip; }
  void test_run_end(const doctest::TestRunStats&) override {
    if (skipped == 0) return;
    out << "[minitensor tests] " << skipped << " test cases skipped: ";
    if (mt::cuda::is_available())
      out << "they run only where CUDA or NVRTC is unavailable\n";
    else
      out << "they need CUDA (" << mt::cuda::unavailable_reason() << ")\n";
  }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
};

}  // namespace

REGISTER_LISTENER("mt_skip_counter", 1, SkipCounter);

int main(int argc, char** argv) {
  // MT_TESTS_ERROR_FORMAT_SELF_TEST=1 (the meson test 'error messages self-test'): one
  // message with the prefix and one without are thrown and caught before the cases run;
  // the run passes only if exactly the second is reported.
  const bool self_test = std::getenv("MT_TESTS_ERROR_FORMAT_SELF_TEST") != nullptr;
  const std::string planted = "planted: a message without a name in brackets";
  if (self_test) {
    for (const std::string& m : {std::string("[self_test] a good message"), planted}) {
      try {
        throw mt::Error(m);
      } catch (const mt::Error&) {
      }
    }
  }
  // The suites never write the user's own kernel cache (~/.cache/minitensor): unless the
  // caller chose one, kernels and autotune results go to the build directory's.
  // build/tests/mt_tests -> build/test-kernel-cache (the path meson.build gives meson test).
  if (std::getenv("MT_KERNEL_CACHE") == nullptr) {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec)
      setenv("MT_KERNEL_CACHE", (exe.parent_path().parent_path() / "test-kernel-cache").c_str(), 0);
  }
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;  // --help, --list-test-cases, ...
  std::lock_guard<std::mutex> lock(g_bad_mutex);
  const size_t bad = g_bad_messages ? g_bad_messages->size() : 0;
  if (self_test) {
    const bool ok = g_errors_seen.load() >= 2 && bad == 1 && g_bad_messages->count(planted);
    std::cout << "error messages self-test: " << (ok ? "ok" : "FAILED") << " (" << bad
              << " reported)" << std::endl;
    return ok ? 0 : 1;
  }
  std::cout << "[minitensor tests] " << g_errors_seen.load() << " mt::Error messages thrown, "
            << bad << " without a name in brackets first" << std::endl;
  if (bad > 0) {
    for (const std::string& m : *g_bad_messages) std::cout << "  not '[name] ...': " << m << "\n";
    rc = 1;
  }
  return rc;
}
