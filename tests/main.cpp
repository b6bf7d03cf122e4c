// SPDX-License-Identifier: MIT
// The doctest runner for every suite. CUDA cases are decorated with
// doctest::skip(!mt::cuda::is_available()); a listener counts the cases that their skip
// decorator left out and prints one plain line with the count (and why) before the summary.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <ostream>

#include "runtime/cuda/cuda.h"

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
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
