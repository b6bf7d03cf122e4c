// SPDX-License-Identifier: MIT
// The autotuner: an op with several correct ways to run (tile sizes, block shapes) names
// them as candidates under a key of its own; the first call of a key on a device times every
// candidate with CUDA events and keeps the fastest, in memory and in a file beside the kernel
// cache, so later calls (and later processes) run the winner at once.
//
//   std::vector<jit::TuneCandidate> c = {{"rows=2", [&] { launch(2); }},
//                                        {"rows=1", [&] { launch(1); }}};
//   jit::autotuner().run(fmt::format("my::op {} D{} S{}", dtype, D, jit::pow2_bucket(S)), c,
//                        device);
//
// Note [Autotuner] in autotune.cpp says what a tuning costs and how the choices stay
// consistent across threads and processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mt::jit {

// One way to run the op. `run` launches one full, correct run on the device's current
// stream (whichever candidate runs last leaves right outputs): a candidate whose kernel
// accumulates into its outputs zeroes them itself.
struct TuneCandidate {
  std::string name = {};  // unique among the key's candidates; no tab, newline or comma
  std::function<void()> run = {};
};

// How candidates are measured. cuda_event_timing() is the default; tests inject their own.
struct TuneTiming {
  // The device as part of every key: "sm_90 NVIDIA H200" (compute capability and name).
  std::function<std::string(int device)> device_tag = {};
  // Milliseconds of each of `reps` calls of run on cuda:device (one event pair a call).
  std::function<std::vector<double>(int device, const std::function<void()>& run, int reps)>
      time_ms = {};
  // True while the device's work cannot be timed (a CUDA graph capture): no tuning then.
  std::function<bool(int device)> busy = {};
};
TuneTiming cuda_event_timing();

struct AutotuneConfig {
  // false: every key takes its first candidate, nothing is timed (MT_AUTOTUNE=0).
  bool enabled = true;
  // Candidate names to use wherever a key has one, untimed (MT_AUTOTUNE_FORCE=a,b: A/B
  // benches); a key with none of them is tuned as usual.
  std::vector<std::string> force = {};
  // The winners on disk, one line each; empty: memory only.
  std::string file = {};
  int warmup = 1;    // untimed calls of each candidate first (the first compiles its kernels)
  int reps = 5;      // timed calls of each candidate; the median counts
  bool log = false;  // one line a tuning or disk hit through the dispatcher's log sink
  // MT_AUTOTUNE (1, the default, or 0), MT_AUTOTUNE_FORCE, MT_LOG=autotune; the file is
  // autotune.tsv in the kernel cache's directory (CacheConfig::from_env: MT_KERNEL_CACHE,
  // XDG_CACHE_HOME, HOME; none with MT_KERNEL_CACHE=0). Throws mt::Error on a bad value.
  static AutotuneConfig from_env();
};

// What a key ran, and why.
struct TuneChoice {
  // Tuned: timed here; Disk: a line of the file; Forced: by name (config or the call);
  // Default: the first candidate (tuning off, or the device busy capturing a graph).
  enum class Source { Tuned, Disk, Forced, Default };
  std::string name = {};
  size_t index = 0;
  Source source = Source::Default;
  std::vector<std::string> candidates = {};
  std::vector<double> ms = {};  // Tuned, Disk: median ms of each candidate (inf: it threw)
};
const char* source_name(TuneChoice::Source source);  // "tuned", "disk", "forced", "default"

struct AutotuneStats {
  uint64_t tunings = 0;     // keys timed
  uint64_t disk_hits = 0;   // keys whose winner came from the file
  uint64_t timed_runs = 0;  // candidate calls made to time them (warm-up, timed, final)
};

class Autotuner {
 public:
  explicit Autotuner(AutotuneConfig config, TuneTiming timing = cuda_event_timing());
  ~Autotuner();
  Autotuner(const Autotuner&) = delete;
  Autotuner& operator=(const Autotuner&) = delete;

  // Runs the candidate the key takes on cuda:device and returns its index: the call's
  // `force` (a name; ignored when no candidate has it), else the config's, else the first
  // when tuning is off, else the winner remembered in memory or on disk (for the same
  // device and candidate names), else it times them all (Note [Autotuner]), keeps the
  // fastest (a tie: the earlier one), and runs it once more. A candidate that throws while
  // being timed, or whose times are not finite and non-negative, loses; when all lose, the
  // first one's error is thrown. Thread-safe: threads asking for one key at once time it
  // once and run one winner. A candidate that runs its own key again, or has no function,
  // is an mt::Error. The file is not read or written when its directory is not this user's
  // alone (jit::cache_dir_problem).
  size_t run(std::string_view key, const std::vector<TuneCandidate>& candidates, int device = 0,
             std::string_view force = {});

  // What the last run() of the key on cuda:device took; nothing before one.
  std::optional<TuneChoice> choice(std::string_view key, int device = 0) const;

  AutotuneConfig config() const;
  void set_enabled(bool on);
  void set_force(std::vector<std::string> names);
  AutotuneStats stats() const;
  // Forgets the choices kept in memory (the file stays).
  void clear_memory();

 private:
  std::string full_key(std::string_view key, int device) const;
  std::optional<TuneChoice> load(const std::string& tag, std::string_view key,
                                 const std::vector<std::string>& names);
  void store(const std::string& tag, std::string_view key, const TuneChoice& c);
  void warn(const std::string& problem);

  struct State;  // the timing, the choices and their locks (autotune.cpp)
  std::unique_ptr<State> state_;
};

// The process's autotuner, configured from the environment on first use.
Autotuner& autotuner();

// A shape bucket: the smallest power of two at least n (1 for n <= 1).
int64_t pow2_bucket(int64_t n);

}  // namespace mt::jit
