// SPDX-License-Identifier: MIT
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kernels/jit/cache.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/sha256.h"
#include "runtime/cuda/cuda.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace mt::jit {

// Note [Autotuner]
// run(key, candidates, device) decides, in this order: the call's forced name, the
// config's forced names (MT_AUTOTUNE_FORCE), the first candidate when tuning is off
// (MT_AUTOTUNE=0), the winner kept in memory, the winner in the file, and only then
// times. The memory and the file are keyed by (device tag, key, candidate names), the
// device tag being compute capability and name ("sm_90 NVIDIA H200"): a winner on one card
// is not trusted on another, and an op that changes its candidates tunes again.
//  - Cost: each candidate runs `warmup` times untimed (the first call compiles its kernels
//    through the kernel cache), then `reps` times between CUDA events; its median counts.
//    The winner (the smallest median, the earlier on a tie) then runs once more, so the
//    outputs are its own even when a later candidate threw halfway. With the defaults (1
//    and 5), a key of n candidates costs 6n + 1 calls of the op, once per process and
//    device unless the file has it. A candidate that throws (too much shared memory on a
//    smaller card) loses, and so does one whose timing is not a finite, non-negative
//    number of milliseconds (a user's TuneTiming); when all lose, the first one's error goes
//    to the caller. A candidate that runs its own key again is an error at once (it would
//    recurse until the stack overflows): keys whose candidate is running are kept per thread.
//  - Threads: the hot path is one lookup under mutex_. A miss takes tuning_ (recursive,
//    so a candidate may run another tuned key) and looks again, so threads asking for one
//    key at once time it once and run one winner; keys of one process tune one at a time,
//    so their timings do not overlap on the GPU. Lock order: tuning_, then mutex_, which
//    is never held while a candidate runs.
//  - Graph capture: timing would synchronize, so a key with no winner yet takes its first
//    candidate untimed and is tuned on a later call outside the capture.
//  - The file: autotune.tsv beside the kernel cache's entries, one line a tuning:
//      mt-autotune-1 TAB tag TAB key TAB names,... TAB winner TAB ms,... TAB checksum
//    appended with O_APPEND in one write, so lines of several processes interleave whole;
//    the checksum (16 hex digits of a SHA-256 of the line before it) rejects a torn or
//    edited line, and a line goes after a newline of its own when the file ends in a torn
//    one (a writer that died mid-line). The last valid line for a (tag, key, names) wins.
//    A line that does not parse, fails its checksum or names a winner outside its
//    candidates is ignored; a file that is not a regular file of this user, or is larger
//    than kMaxFileBytes, is not read (reported once on stderr), and tuning goes on in
//    memory. `minitensor cache clear` deletes it with the kernels.

namespace {

constexpr const char* kVersion = "mt-autotune-1";
constexpr const char* kFileName = "autotune.tsv";
constexpr uint64_t kMaxFileBytes = uint64_t(4) << 20;
constexpr size_t kNone = std::numeric_limits<size_t>::max();

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? std::string(1, sep) : "") + v[i];
  return s;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  while (true) {
    const size_t at = s.find(sep);
    out.emplace_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

std::string line_sum(std::string_view body) { return to_hex(sha256(body)).substr(0, 16); }

std::string format_ms(double ms) { return std::isfinite(ms) ? fmt::format("{:.6g}", ms) : "inf"; }

bool parse_ms(const std::string& s, double& out) {
  if (s == "inf") return out = std::numeric_limits<double>::infinity(), true;
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out) && out >= 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool same_names(const std::vector<std::string>& names, const std::vector<TuneCandidate>& c) {
  if (names.size() != c.size()) return false;
  for (size_t i = 0; i < c.size(); ++i)
    if (names[i] != c[i].name) return false;
  return true;
}

size_t index_of(const std::vector<TuneCandidate>& c, std::string_view name) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].name == name) return i;
  return kNone;
}

bool clean(std::string_view s) { return s.find_first_of("\t\n\r") == std::string_view::npos; }

void check_candidates(std::string_view key, const std::vector<TuneCandidate>& c) {
  MT_CHECK(clean(key) && !key.empty(),
           "[autotune] the key {} must be non-empty, without tabs or newlines", mt::quoted(key));
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string& n = c[i].name;
    MT_CHECK(!n.empty() && clean(n) && n.find(',') == std::string::npos,
             "[autotune] key '{}': candidate {} is named {}; give it a non-empty name without "
             "tabs, newlines or commas",
             key, i, mt::quoted(n));
    MT_CHECK(index_of(c, n) == i,
             "[autotune] key '{}': two candidates are named '{}'; name each one differently", key,
             n);
    MT_CHECK(bool(c[i].run), "[autotune] key '{}': candidate '{}' has no function to run", key, n);
  }
}

// "" when the file's directory is missing or only this user can write it; else the problem.
std::string untrusted_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const std::string problem = cache_dir_problem(dir);
  return problem.empty() ? ""
                         : fmt::format(
                               "'{}' is not read or written: the directory '{}' cannot be "
                               "trusted: {}",
                               path, dir, problem);
}

// Runs a candidate with its key marked as running on this thread: a candidate that calls
// run() with its own key again would recurse until the stack overflows.
thread_local std::vector<const std::string*> t_running;

// Never counted as a candidate's failure: it goes straight to the caller.
struct RecursiveKey : Error {
  using Error::Error;
};

struct RunningKey {
  explicit RunningKey(const std::string& full) { t_running.push_back(&full); }
  ~RunningKey() { t_running.pop_back(); }
  RunningKey(const RunningKey&) = delete;
  RunningKey& operator=(const RunningKey&) = delete;
};

void run_candidate(const std::string& full, std::string_view key, const TuneCandidate& c) {
  MT_CHECK(bool(c.run), "[autotune] key '{}': candidate '{}' has no function to run", key, c.name);
  RunningKey running(full);
  c.run();
}

}  // namespace

const char* source_name(TuneChoice::Source source) {
  switch (source) {
    case TuneChoice::Source::Tuned:
      return "tuned";
    case TuneChoice::Source::Disk:
      return "disk";
    case TuneChoice::Source::Forced:
      return "forced";
    case TuneChoice::Source::Default:
      return "default";
  }
  return "?";
}

int64_t pow2_bucket(int64_t n) {
  int64_t b = 1;
  while (b < n && b < (int64_t(1) << 62)) b <<= 1;
  return b;
}

TuneTiming cuda_event_timing() {
  TuneTiming t;
  t.device_tag = [](int device) {
    const cuda::DeviceProps& p = cuda::device_props(device);
    return fmt::format("sm_{}{} {}", p.major, p.minor, p.name);
  };
  t.time_ms = [](int device, const std::function<void()>& run, int reps) {
    cuda::EventTimer timer(device);
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      timer.start();
      run();
      timer.stop();
      ms.push_back(timer.elapsed_ms());
    }
    return ms;
  };
  t.busy = [](int device) { return cuda::is_capturing(device); };
  return t;
}

AutotuneConfig AutotuneConfig::from_env() {
  AutotuneConfig c;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (const std::string on = env("MT_AUTOTUNE"); !on.empty()) {
    MT_CHECK(on == "0" || on == "1",
             "[autotune] MT_AUTOTUNE='{}' is not 0 or 1; set it to 0 to run every op's default "
             "candidate untimed, 1 (or unset it) to tune",
             on);
    c.enabled = on == "1";
  }
  for (const std::string& name : split(env("MT_AUTOTUNE_FORCE"), ','))
    if (!name.empty()) c.force.push_back(name);
  const std::string dir = CacheConfig::from_env().dir;
  if (!dir.empty()) c.file = dir + "/" + kFileName;
  std::string log = "," + env("MT_LOG") + ",";
  std::erase(log, ' ');
  c.log = log.find(",autotune,") != std::string::npos;
  return c;
}

struct Autotuner::State {
  struct Entry {
    std::optional<TuneChoice> tuned;  // Tuned or Disk
    std::optional<TuneChoice> last;
  };
  State(AutotuneConfig config, TuneTiming timing)
      : timing_(std::move(timing)), config_(std::move(config)) {}
  TuneTiming timing_;
  std::mutex mutex_;  // guards config_, entries_, stats_, tags_, warned_
  AutotuneConfig config_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<int, std::string> tags_;
  AutotuneStats stats_;
  bool warned_ = false;
  std::recursive_mutex tuning_;  // one tuning at a time, so timings do not overlap
};

Autotuner::Autotuner(AutotuneConfig config, TuneTiming timing)
    : state_(std::make_unique<State>(std::move(config), std::move(timing))) {
  MT_CHECK(state_->config_.warmup >= 0 && state_->config_.reps >= 1,
           "[autotune] warmup must be at least 0 and reps at least 1, got {} and {}",
           state_->config_.warmup, state_->config_.reps);
  MT_CHECK(state_->timing_.device_tag && state_->timing_.time_ms,
           "[autotune] the timing needs device_tag and time_ms (cuda_event_timing() has both)");
}

std::string Autotuner::full_key(std::string_view key, int device) const {
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(state_->mutex_);
    if (auto it = state_->tags_.find(device); it != state_->tags_.end()) tag = it->second;
  }
  if (tag.empty()) {
    tag = state_->timing_.device_tag(device);
    MT_CHECK(clean(tag) && !tag.empty(), "[autotune] device tag {} of device {} is not one line",
             mt::quoted(tag), device);
    std::lock_guard<std::mutex> lock(state_->mutex_);
    state_->tags_[device] = tag;
  }
  tag += '\t';
  tag += key;
  return tag;
}

size_t Autotuner::run(std::string_view key, const std::vector<TuneCandidate>& candidates,
                      int device, std::string_view force) {
  MT_CHECK(!candidates.empty(), "[autotune] key '{}' has no candidates; pass at least one", key);
  const std::string full = full_key(key, device);
  for (const std::string* running : t_running)
    if (*running == full)
      throw RecursiveKey(fmt::format(
          "[autotune] key '{}' was run again by one of its own candidates; a candidate must "
          "launch its kernels itself, not call the op it tunes (that recursion never ends)",
          key));
  // Forced, off, or remembered: decided under state_->mutex_, run outside it.
  auto settled = [&]() -> size_t {
    size_t forced = force.empty() ? kNone : index_of(candidates, force);
    for (size_t i = 0; forced == kNone && i < state_->config_.force.size(); ++i)
      forced = index_of(candidates, state_->config_.force[i]);
    State::Entry& e = state_->entries_[full];
    TuneChoice::Source source;
    size_t index;
    if (forced != kNone) {
      source = TuneChoice::Source::Forced, index = forced;
    } else if (!state_->config_.enabled) {
      source = TuneChoice::Source::Default, index = 0;
    } else if (e.tuned && same_names(e.tuned->candidates, candidates)) {
      if (!e.last || e.last->source != e.tuned->source || e.last->index != e.tuned->index)
        e.last = e.tuned;
      return e.tuned->index;
    } else {
      return kNone;
    }
    if (!e.last || e.last->source != source || e.last->index != index ||
        !same_names(e.last->candidates, candidates)) {
      TuneChoice c{.name = candidates[index].name, .index = index, .source = source};
      for (const auto& x : candidates) c.candidates.push_back(x.name);
      e.last = std::move(c);
    }
    return index;
  };
  {
    std::unique_lock<std::mutex> lock(state_->mutex_);
    if (const size_t i = settled(); i != kNone) {
      lock.unlock();
      run_candidate(full, key, candidates[i]);
      return i;
    }
  }
  check_candidates(key, candidates);
  std::unique_lock<std::recursive_mutex> tuning(state_->tuning_);
  {
    std::unique_lock<std::mutex> lock(state_->mutex_);
    if (const size_t i = settled(); i != kNone) {  // another thread tuned it meanwhile
      lock.unlock();
      tuning.unlock();
      run_candidate(full, key, candidates[i]);
      return i;
    }
  }
  std::vector<std::string> names;
  for (const auto& c : candidates) names.push_back(c.name);
  const std::string tag = full.substr(0, full.find('\t'));
  std::optional<TuneChoice> found = load(tag, key, names);
  if (!found && state_->timing_.busy && state_->timing_.busy(device)) {
    // No timing during a graph capture: the first candidate, tuned on a later call.
    {
      std::lock_guard<std::mutex> lock(state_->mutex_);
      state_->entries_[full].last = TuneChoice{
          .name = names[0], .index = 0, .source = TuneChoice::Source::Default, .candidates = names};
    }
    tuning.unlock();
    run_candidate(full, key, candidates[0]);
    return 0;
  }
  const bool timed = !found;
  if (timed) {
    const auto t0 = std::chrono::steady_clock::now();
    int warmup, reps;
    {
      std::lock_guard<std::mutex> lock(state_->mutex_);
      warmup = state_->config_.warmup, reps = state_->config_.reps;
    }
    TuneChoice c{.source = TuneChoice::Source::Tuned, .candidates = names};
    c.ms.assign(names.size(), std::numeric_limits<double>::infinity());
    std::exception_ptr first_error;
    uint64_t calls = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      try {
        RunningKey running(full);
        for (int w = 0; w < warmup; ++w, ++calls) candidates[i].run();
        calls += uint64_t(reps);
        const std::vector<double> ms = state_->timing_.time_ms(device, candidates[i].run, reps);
        MT_CHECK(!ms.empty(), "[autotune] the timing gave no times for '{}'", names[i]);
        for (double m : ms)
          MT_CHECK(std::isfinite(m) && m >= 0,
                   "[autotune] key '{}': the timing gave {} ms for candidate '{}'; time_ms must "
                   "return finite, non-negative milliseconds",
                   key, m, names[i]);
        c.ms[i] = median(ms);
      } catch (const RecursiveKey&) {
        throw;  // an error of the code, not of this candidate on this device
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(state_->mutex_);
      state_->stats_.timed_runs += calls;
    }
    c.index = size_t(std::min_element(c.ms.begin(), c.ms.end()) - c.ms.begin());
    if (!std::isfinite(c.ms[c.index])) {
      MT_ASSERT(first_error, "every candidate lost without an error");
      std::rethrow_exception(first_error);
    }
    c.name = names[c.index];
    store(tag, key, c);
    if (config().log) {
      std::string times;
      for (size_t i = 0; i < names.size(); ++i)
        times += fmt::format("{}{} {} ms", i ? ", " : "", names[i], format_ms(c.ms[i]));
      mt::detail::log_line(fmt::format(
          "[autotune] {} on {}: {} -> {} (tuned in {:.1f} ms)", key, tag, times, c.name,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count()));
    }
    found = std::move(c);
  } else if (config().log) {
    mt::detail::log_line(
        fmt::format("[autotune] {} on {}: {} (from {})", key, tag, found->name, config().file));
  }
  const size_t index = found->index;
  {
    std::lock_guard<std::mutex> lock(state_->mutex_);
    (timed ? state_->stats_.tunings : state_->stats_.disk_hits) += 1;
    if (timed) state_->stats_.timed_runs += 1;  // the final run below
    State::Entry& e = state_->entries_[full];
    e.tuned = found;
    e.last = std::move(found);
  }
  tuning.unlock();
  run_candidate(full, key, candidates[index]);
  return index;
}

std::optional<TuneChoice> Autotuner::choice(std::string_view key, int device) const {
  const std::string full = full_key(key, device);
  std::lock_guard<std::mutex> lock(state_->mutex_);
  auto it = state_->entries_.find(full);
  if (it == state_->entries_.end()) return std::nullopt;
  return it->second.last;
}

AutotuneConfig Autotuner::config() const {
  std::lock_guard<std::mutex> lock(state_->mutex_);
  return state_->config_;
}

void Autotuner::set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(state_->mutex_);
  state_->config_.enabled = on;
}

void Autotuner::set_force(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(state_->mutex_);
  state_->config_.force = std::move(names);
}

AutotuneStats Autotuner::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex_);
  return state_->stats_;
}

void Autotuner::clear_memory() {
  std::lock_guard<std::mutex> lock(state_->mutex_);
  state_->entries_.clear();
}

void Autotuner::warn(const std::string& problem) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex_);
    if (std::exchange(state_->warned_, true)) return;
  }
  std::fprintf(stderr,
               "minitensor: [autotune] %s; tuning results are kept in memory only (set "
               "MT_KERNEL_CACHE to a directory of your own, or delete the file)\n",
               problem.c_str());
}

std::optional<TuneChoice> Autotuner::load(const std::string& tag, std::string_view key,
                                          const std::vector<std::string>& names) {
  const std::string path = config().file;
  if (path.empty()) return std::nullopt;
  if (const std::string dir = untrusted_dir(path); !dir.empty()) {
    warn(dir);
    return std::nullopt;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) warn(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    return std::nullopt;
  }
  std::string text;
  struct stat st;
  std::string problem;
  if (::fstat(fd, &st) != 0)
    problem = fmt::format("cannot stat '{}': {}", path, std::strerror(errno));
  else if (!S_ISREG(st.st_mode))
    problem = fmt::format("'{}' is not a regular file", path);
  else if (st.st_uid != ::geteuid())
    problem = fmt::format("'{}' is owned by uid {}, not by this user", path, st.st_uid);
  else if (uint64_t(st.st_size) > kMaxFileBytes)
    problem = fmt::format("'{}' is larger than {} MiB", path, kMaxFileBytes >> 20);
  if (problem.empty()) {
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!problem.empty()) {
    warn(problem);
    return std::nullopt;
  }
  const std::string names_field = join(names, ',');
  std::optional<TuneChoice> found;
  for (const std::string& line : split(text, '\n')) {
    const size_t last_tab = line.rfind('\t');
    if (last_tab == std::string::npos) continue;
    const std::vector<std::string> f = split(line, '\t');
    if (f.size() != 7 || f[0] != kVersion || f[1] != tag || f[2] != key || f[3] != names_field)
      continue;
    if (f[6] != line_sum(std::string_view(line).substr(0, last_tab))) continue;
    TuneChoice c{.name = f[4], .source = TuneChoice::Source::Disk, .candidates = names};
    auto it = std::find(names.begin(), names.end(), c.name);
    if (it == names.end()) continue;
    c.index = size_t(it - names.begin());
    const std::vector<std::string> ms = split(f[5], ',');
    if (ms.size() != names.size()) continue;
    c.ms.resize(ms.size());
    bool ok = true;
    for (size_t i = 0; i < ms.size() && ok; ++i) ok = parse_ms(ms[i], c.ms[i]);
    if (ok) found = std::move(c);
  }
  return found;
}

void Autotuner::store(const std::string& tag, std::string_view key, const TuneChoice& c) {
  const std::string path = config().file;
  if (path.empty()) return;
  std::vector<std::string> ms;
  for (double m : c.ms) ms.push_back(format_ms(m));
  std::string line = fmt::format("{}\t{}\t{}\t{}\t{}\t{}", kVersion, tag, key,
                                 join(c.candidates, ','), c.name, join(ms, ','));
  line += '\t' + line_sum(line) + '\n';
  std::string problem;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
    std::filesystem::path sofar;
    for (const auto& part : dir) {
      sofar /= part;
      if (::mkdir(sofar.c_str(), 0700) != 0 && errno != EEXIST) {
        problem = fmt::format("cannot create '{}': {}", sofar.string(), std::strerror(errno));
        break;
      }
    }
  }
  if (problem.empty()) problem = untrusted_dir(path);
  if (problem.empty()) {
    const int fd = ::open(path.c_str(),
                          O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    struct stat st;
    if (fd < 0) {
      problem = fmt::format("cannot write '{}': {}", path, std::strerror(errno));
    } else {
      if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
        problem = fmt::format("'{}' is not a regular file of this user", path);
      else if (uint64_t(st.st_size) + line.size() > kMaxFileBytes)
        problem = fmt::format("'{}' is full ({} MiB)", path, kMaxFileBytes >> 20);
      // A torn last line (a writer that crashed mid-line) must not swallow this one.
      char last = '\n';
      if (problem.empty() && st.st_size > 0 && ::pread(fd, &last, 1, st.st_size - 1) == 1 &&
          last != '\n')
        line.insert(0, 1, '\n');
      if (problem.empty() && ::write(fd, line.data(), line.size()) != ssize_t(line.size()))
        problem = fmt::format("cannot write '{}': {}", path, std::strerror(errno));
      ::close(fd);
    }
  }
  if (!problem.empty()) warn(problem);
}

Autotuner::~Autotuner() = default;

Autotuner& autotuner() {
  static Autotuner tuner(AutotuneConfig::from_env());
  return tuner;
}

}  // namespace mt::jit
