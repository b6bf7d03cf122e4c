// SPDX-License-Identifier: MIT
// The rows of `minitensor bench dispatch`: minitensor's side of the host-cost comparison
// with libtorch. Standard C++ only in this header, so that tools/bench/bench_libtorch.cpp can
// include it beside libtorch's headers and time both libraries in one process, loop by loop
// (its --interleaved mode), without minitensor's headers (and their fmt) meeting torch's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace mt::bench {

// One call to time: `key` is the name both sides share (bench_libtorch's JSON keys),
// `label` the row's name in `minitensor bench dispatch`, `divisor` how many times fewer
// calls than a no-op row a timed loop makes (the tiny ops cost ~10x a no-op dispatch).
struct DispatchRow {
  const char* key;
  const char* label;
  int64_t divisor;
  std::function<void()> call;
};

// Registers the no-op ops `bench::noop` (a CPU kernel) and `bench::noop_ag` (CPU and an
// Autograd kernel that redispatches) for its lifetime, and makes the inputs of each row.
class DispatchRows {
 public:
  DispatchRows();
  ~DispatchRows();
  DispatchRows(const DispatchRows&) = delete;
  DispatchRows& operator=(const DispatchRows&) = delete;
  const std::vector<DispatchRow>& rows() const { return rows_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::vector<DispatchRow> rows_;
};

}  // namespace mt::bench
