// SPDX-License-Identifier: MIT
// Why this kernel: the dispatcher's decision for one call, step by step, as data a test can
// assert on (explain_dispatch), as text (str(); MT_TRACE=dispatch:why prints it for every
// call), and from the command line (`minitensor explain 'ns::op' --args ...`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dispatcher/dispatcher.h"

namespace mt {

// One key and where it came from: "device cpu", "device cuda:0", "requires_grad", "fake",
// or for the thread-local sets the guard that put it there.
struct KeySource {
  DispatchKey key;
  std::string why;
  bool operator==(const KeySource&) const = default;
};

struct ArgumentKeys {
  std::string name;   // the schema's argument name
  std::string value;  // the argument, briefly: "f32[2, 3] cpu", "2.5"
  DispatchKeySet keys;
  std::vector<KeySource> sources;
};

// One key of the computed set, highest first, down to the one that runs.
struct KeyStep {
  DispatchKey key;
  std::string entry;          // "kernel", "fallback", "fallthrough" or "missing"
  std::string registered_at;  // file:line of the registration ("" when missing)
};

struct DispatchExplanation {
  std::string op;
  bool redispatch = false;  // the keys were given by a kernel above, not computed
  std::vector<ArgumentKeys> arguments;
  DispatchKeySet from_arguments;                    // the union of the arguments' key sets
  DispatchKeySet included, excluded;                // the thread-local sets
  std::vector<KeySource> included_by, excluded_by;  // which guard put each key there
  bool cpu_default = false;  // CPU was added: no argument names a backend or Fake
  DispatchKeySet computed;   // (from_arguments | included) - excluded, the call's keys
  std::vector<KeyStep> steps;
  std::optional<DispatchKey> winner;  // empty: no key of the computed set has a kernel
  std::string entry;                  // the winner's entry, or "missing"
  std::string registered_at;          // the winner's file:line

  std::string str() const;  // the explanation as lines of text
};

// How a call of `op` with `args` (boxed; trailing defaults may be left out) dispatches on
// this thread now, without running it. An op with no kernel for the call is explained
// (winner empty, entry "missing"); an unknown op, or too many arguments, is an error.
DispatchExplanation explain_dispatch(const OperatorHandle& op, const Stack& args);
DispatchExplanation explain_dispatch(std::string_view op, const Stack& args);

namespace detail {
// The explanation of a call whose keys `ks` were given (a redispatch, or a call whose
// keys dispatch() computed already).
DispatchExplanation explain_with_keys(const OperatorEntry& e, const Stack& args,
                                      std::optional<DispatchKeySet> ks, bool redispatch);
}  // namespace detail

}  // namespace mt
