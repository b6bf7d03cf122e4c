// SPDX-License-Identifier: MIT
// The autotuner (kernels/jit/kernel.h) on the CPU: a scripted timing stands in for the CUDA
// events, so the selection (median, ties, throwing candidates), the forcing and off
// switches, the memory, the file beside the kernel cache (read back, corrupt and foreign
// lines ignored) and the environment are checked without a GPU. The threaded case is in
// test_threads.cpp (it runs under ThreadSanitizer in CI).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "helpers.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/sha256.h"

using namespace mt;
namespace fs = std::filesystem;

namespace {

struct TuneDir {
  std::string path;
  TuneDir() {
    char tmpl[] = "/tmp/mt_test_autotune_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TuneDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file() const { return path + "/autotune.tsv"; }
};

// Candidates whose runs are logged, timed by a script: times[name] gives the milliseconds
// of that candidate's timed calls in turn (repeating the last).
struct Script {
  std::map<std::string, std::vector<double>> times;
  std::map<std::string, int> timed_calls;  // calls made inside time_ms
  std::vector<std::string> ran;            // every call, in order
  std::string tag = "sm_90 Test GPU";
  bool busy = false;
  std::string current;

  jit::TuneTiming timing() {
    return {.device_tag = [this](int device) { return tag + (device ? " #1" : ""); },
            .time_ms =
                [this](int, const std::function<void()>& run, int reps) {
                  std::vector<double> ms;
                  for (int i = 0; i < reps; ++i) {
                    run();
                    const std::vector<double>& t = times.at(current);
                    ms.push_back(t[std::min(size_t(timed_calls[current]++), t.size() - 1)]);
                  }
                  return ms;
                },
            .busy = [this](int) { return busy; }};
  }
  std::vector<jit::TuneCandidate> candidates(const std::vector<std::string>& names) {
    std::vector<jit::TuneCandidate> c;
    for (const std::string& n : names)
      c.push_back({n, [this, n] {
                     current = n;
                     ran.push_back(n);
                   }});
    return c;
  }
  int count(const std::string& n) const { return int(std::count(ran.begin(), ran.end(), n)); }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void append(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::app);
  f << text;
}

// A line as the tuner writes it, with its checksum.
std::string line_for(const std::string& body) {
  return body + "\t" + jit::to_hex(jit::sha256(body)).substr(0, 16) + "\n";
}

}  // namespace

TEST_CASE(
    "autotune: the candidate with the smallest median wins, runs once more, and is "
    "remembered") {
  Script s;
  // a's fastest call beats b's, and its mean beats b's mean, but b's median is smaller.
  s.times = {{"a", {1, 3, 3, 3, 3}}, {"b", {2, 2, 100, 2, 2}}, {"c", {9}}};
  jit::Autotuner tuner({.warmup = 2, .reps = 5}, s.timing());
  const auto c = s.candidates({"a", "b", "c"});
  CHECK(tuner.run("op f16 S1024", c) == 1);
  // Each candidate: 2 warm-up calls and 5 timed ones; then the winner once more, last.
  CHECK(s.count("a") == 7);
  CHECK(s.count("b") == 8);
  CHECK(s.count("c") == 7);
  CHECK(s.ran.back() == "b");
  auto choice = tuner.choice("op f16 S1024");
  REQUIRE(choice);
  CHECK(choice->name == "b");
  CHECK(choice->source == jit::TuneChoice::Source::Tuned);
  CHECK(choice->ms == std::vector<double>{3, 2, 9});
  CHECK(tuner.stats().tunings == 1);
  CHECK(tuner.stats().timed_runs == 22);
  // Remembered: the next calls run b alone, untimed.
  s.ran.clear();
  CHECK(tuner.run("op f16 S1024", c) == 1);
  CHECK(tuner.run("op f16 S1024", c) == 1);
  CHECK(s.ran == std::vector<std::string>{"b", "b"});
  CHECK(tuner.stats().tunings == 1);
  // Another key, or another device, is tuned on its own.
  CHECK(!tuner.choice("op f16 S2048"));
  CHECK(!tuner.choice("op f16 S1024", 1));
  tuner.run("op f16 S1024", c, 1);
  CHECK(tuner.stats().tunings == 2);
  // A tie goes to the earlier candidate (the default is listed first).
  Script t;
  t.times = {{"x", {4}}, {"y", {4}}};
  jit::Autotuner tie({.warmup = 0, .reps = 1}, t.timing());
  CHECK(tie.run("k", t.candidates({"x", "y"})) == 0);
  CHECK(t.ran == std::vector<std::string>{"x", "y", "x"});
  // An even count of reps: the mean of the two middle times.
  Script e;
  e.times = {{"x", {1, 2, 4, 100}}, {"y", {3}}};
  jit::Autotuner even({.warmup = 0, .reps = 4}, e.timing());
  CHECK(even.run("k", e.candidates({"x", "y"})) == 0);
  CHECK(even.choice("k")->ms == std::vector<double>{3, 3});
}

TEST_CASE(
    "autotune: a candidate that throws loses; when all throw, the first error is "
    "thrown") {
  Script s;
  s.times = {{"fast_but_broken", {0.1}}, {"slow", {5}}};
  jit::Autotuner tuner({.warmup = 1, .reps = 3}, s.timing());
  std::vector<jit::TuneCandidate> c = s.candidates({"fast_but_broken", "slow"});
  c[0].run = [] { throw std::runtime_error("too much shared memory"); };
  CHECK(tuner.run("k", c) == 1);
  const auto choice = tuner.choice("k");
  CHECK(choice->name == "slow");
  CHECK(std::isinf(choice->ms[0]));
  CHECK(s.ran.back() == "slow");

  c[1].run = [] { throw std::runtime_error("second"); };
  jit::Autotuner all({.warmup = 1, .reps = 3}, s.timing());
  std::string what;
  try {
    all.run("k", c);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  CHECK(what == "too much shared memory");
  CHECK(!all.choice("k"));
}

TEST_CASE("autotune: forcing by name and turning tuning off run a candidate untimed") {
  Script s;
  s.times = {{"a", {2}}, {"b", {1}}};
  const auto c = s.candidates({"a", "b"});
  {
    jit::Autotuner off({.enabled = false}, s.timing());
    CHECK(off.run("k", c) == 0);
    CHECK(s.ran == std::vector<std::string>{"a"});
    CHECK(off.choice("k")->source == jit::TuneChoice::Source::Default);
    // The call's force wins even when tuning is off.
    CHECK(off.run("k", c, 0, "b") == 1);
    CHECK(off.choice("k")->source == jit::TuneChoice::Source::Forced);
    CHECK(off.stats().timed_runs == 0);
  }
  s.ran.clear();
  jit::Autotuner tuner({.force = {"other_op_name", "a"}}, s.timing());
  CHECK(tuner.run("k", c) == 0);  // forced by the config, though b is faster
  CHECK(s.ran == std::vector<std::string>{"a"});
  CHECK(tuner.choice("k")->name == "a");
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Forced);
  // A key with none of the forced names is tuned.
  const auto d = s.candidates({"p", "q"});
  s.times["p"] = {3};
  s.times["q"] = {1};
  CHECK(tuner.run("k2", d) == 1);
  CHECK(tuner.choice("k2")->source == jit::TuneChoice::Source::Tuned);
  // Forcing off again: k is tuned now, and the call's own force still wins.
  tuner.set_force({});
  CHECK(tuner.run("k", c) == 1);
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Tuned);
  CHECK(tuner.run("k", c, 0, "a") == 0);
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Forced);
  CHECK(tuner.run("k", c, 0, "no_such_name") == 1);
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Tuned);
  CHECK(tuner.stats().tunings == 2);
}

TEST_CASE("autotune: during a graph capture a new key takes its first candidate, tuned later") {
  Script s;
  s.times = {{"a", {2}}, {"b", {1}}};
  const auto c = s.candidates({"a", "b"});
  jit::Autotuner tuner({}, s.timing());
  s.busy = true;
  CHECK(tuner.run("k", c) == 0);
  CHECK(s.ran == std::vector<std::string>{"a"});
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Default);
  s.busy = false;
  CHECK(tuner.run("k", c) == 1);
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Tuned);
  // Once tuned, a capture runs the winner.
  s.busy = true;
  s.ran.clear();
  CHECK(tuner.run("k", c) == 1);
  CHECK(s.ran == std::vector<std::string>{"b"});
}

TEST_CASE(
    "autotune: winners persist in a file beside the kernel cache, per device and "
    "candidate names") {
  TuneDir dir;
  const std::string file = dir.path + "/sub/autotune.tsv";  // the directory is created
  Script s;
  s.times = {{"a", {2}}, {"b", {1}}, {"c", {0.5}}};
  {
    jit::Autotuner first({.file = file}, s.timing());
    CHECK(first.run("op D64 S4096", s.candidates({"a", "b"})) == 1);
  }
  CHECK(fs::exists(file));
  CHECK((fs::status(dir.path + "/sub").permissions() & fs::perms::all) == fs::perms::owner_all);
  CHECK((fs::status(file).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  const std::string text = read_all(file);
  CHECK(text.starts_with("mt-autotune-1\tsm_90 Test GPU\top D64 S4096\ta,b\tb\t2,1\t"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);

  // A new process (a new tuner) reads it: no timing.
  s.ran.clear();
  jit::Autotuner second({.file = file}, s.timing());
  CHECK(second.run("op D64 S4096", s.candidates({"a", "b"})) == 1);
  CHECK(s.ran == std::vector<std::string>{"b"});
  CHECK(second.choice("op D64 S4096")->source == jit::TuneChoice::Source::Disk);
  CHECK(second.choice("op D64 S4096")->ms == std::vector<double>{2, 1});
  CHECK(second.stats().disk_hits == 1);
  CHECK(second.stats().tunings == 0);
  // Other candidate names (the op changed) or another card: tuned again, and appended.
  CHECK(second.run("op D64 S4096", s.candidates({"a", "b", "c"})) == 2);
  CHECK(second.choice("op D64 S4096")->source == jit::TuneChoice::Source::Tuned);
  s.tag = "sm_80 Other GPU";
  jit::Autotuner third({.file = file}, s.timing());
  CHECK(third.run("op D64 S4096", s.candidates({"a", "b"})) == 1);
  CHECK(third.stats().tunings == 1);
  const std::string after = read_all(file);
  CHECK(std::count(after.begin(), after.end(), '\n') == 3);

  // MT_KERNEL_CACHE's directory: `cache clear` deletes the file with the kernels.
  jit::KernelCache cache({.dir = dir.path + "/sub", .warn = false});
  cache.clear();
  CHECK(!fs::exists(file));
}

TEST_CASE("autotune: corrupt, torn, edited and foreign lines of the file are ignored") {
  TuneDir dir;
  Script s;
  s.times = {{"a", {2}}, {"b", {1}}};
  const std::string body = "mt-autotune-1\tsm_90 Test GPU\tk\ta,b\t";
  // Valid, then lines that must not override it: garbage, a torn line, an edited winner
  // (checksum now wrong), a winner outside the candidates (checksum right), an unknown
  // version, a field too many, times that do not parse, binary bytes, an empty line.
  append(dir.file(),
         line_for(body + "a\t2,1") + "garbage\n\n" + line_for(body + "b\t2,1").substr(0, 40) +
             "\n" + line_for(body + "a\t2,1").replace(body.size(), 1, "b") +
             line_for(body + "z\t2,1") + line_for("mt-autotune-9\tsm_90 Test GPU\tk\ta,b\tb\t2,1") +
             line_for(body + "b\t2,1\textra") + line_for(body + "b\tfast,1") +
             line_for(body + "b\t2") + std::string("\x01\xff\t\t\t\t\t\t\n", 9));
  jit::Autotuner tuner({.file = dir.file()}, s.timing());
  CHECK(tuner.run("k", s.candidates({"a", "b"})) == 0);  // the one valid line says a
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Disk);
  CHECK(tuner.stats().timed_runs == 0);
  // A later valid line wins over an earlier one.
  append(dir.file(), line_for(body + "b\t2,1"));
  jit::Autotuner later({.file = dir.file()}, s.timing());
  CHECK(later.run("k", s.candidates({"a", "b"})) == 1);
  CHECK(later.choice("k")->source == jit::TuneChoice::Source::Disk);

  // Only junk: tuned, and the file still works afterwards.
  TuneDir junk;
  append(junk.file(),
         "\x7f"
         "ELF not a tuning file\n" +
             std::string(300, 'x'));
  jit::Autotuner fresh({.file = junk.file()}, s.timing());
  CHECK(fresh.run("k", s.candidates({"a", "b"})) == 1);
  CHECK(fresh.choice("k")->source == jit::TuneChoice::Source::Tuned);
  jit::Autotuner reread({.file = junk.file()}, s.timing());
  reread.run("k", s.candidates({"a", "b"}));
  CHECK(reread.choice("k")->source == jit::TuneChoice::Source::Disk);

  // A directory where the file should be: tuning stays in memory, no crash.
  TuneDir odd;
  fs::create_directory(odd.file());
  jit::Autotuner mem({.file = odd.file()}, s.timing());
  CHECK(mem.run("k", s.candidates({"a", "b"})) == 1);
  CHECK(mem.run("k", s.candidates({"a", "b"})) == 1);
  CHECK(mem.stats().tunings == 1);
}

TEST_CASE("autotune: keys and candidate names are checked, with errors naming the fix") {
  Script s;
  s.times = {{"a", {1}}, {"b", {1}}};
  jit::Autotuner tuner({}, s.timing());
  CHECK(error_of([&] { tuner.run("k", {}); }) ==
        "[autotune] key 'k' has no candidates; pass at least one");
  CHECK(error_of([&] {
          tuner.run("k", s.candidates({"a", "a"}));
        }) == "[autotune] key 'k': two candidates are named 'a'; name each one differently");
  CHECK(error_of([&] {
          tuner.run("k", s.candidates({"a", "b,c"}));
        }) ==
        "[autotune] key 'k': candidate 1 is named 'b,c'; give it a non-empty name without tabs, "
        "newlines or commas");
  CHECK(error_of([&] { tuner.run("a\tb", s.candidates({"a"})); }) ==
        "[autotune] the key 'a\\tb' must be non-empty, without tabs or newlines");
  CHECK(error_of([&] { jit::Autotuner({.reps = 0}, s.timing()); }) ==
        "[autotune] warmup must be at least 0 and reps at least 1, got 1 and 0");
  CHECK(tuner.stats().timed_runs == 0);
}

TEST_CASE(
    "autotune: pow2_bucket and the environment (MT_AUTOTUNE, MT_AUTOTUNE_FORCE, "
    "MT_KERNEL_CACHE, MT_LOG)") {
  CHECK(jit::pow2_bucket(0) == 1);
  CHECK(jit::pow2_bucket(1) == 1);
  CHECK(jit::pow2_bucket(2) == 2);
  CHECK(jit::pow2_bucket(3) == 4);
  CHECK(jit::pow2_bucket(4096) == 4096);
  CHECK(jit::pow2_bucket(4097) == 8192);

  struct Env {
    std::map<std::string, std::optional<std::string>> saved;
    void set(const char* name, const char* value) {
      if (!saved.count(name)) {
        const char* old = std::getenv(name);
        saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
      }
      value ? ::setenv(name, value, 1) : ::unsetenv(name);
    }
    ~Env() {
      for (auto& [n, v] : saved) v ? ::setenv(n.c_str(), v->c_str(), 1) : ::unsetenv(n.c_str());
    }
  } env;
  env.set("MT_AUTOTUNE", nullptr);
  env.set("MT_AUTOTUNE_FORCE", nullptr);
  env.set("MT_LOG", nullptr);
  env.set("MT_KERNEL_CACHE", "/tmp/mt_kc");
  jit::AutotuneConfig c = jit::AutotuneConfig::from_env();
  CHECK(c.enabled);
  CHECK(c.force.empty());
  CHECK(c.file == "/tmp/mt_kc/autotune.tsv");
  CHECK(!c.log);
  env.set("MT_AUTOTUNE", "0");
  env.set("MT_AUTOTUNE_FORCE", "bwd_warps=4,,fwd_row_tiles=1");
  env.set("MT_LOG", "jit, autotune");
  env.set("MT_KERNEL_CACHE", "0");
  c = jit::AutotuneConfig::from_env();
  CHECK(!c.enabled);
  CHECK(c.force == std::vector<std::string>{"bwd_warps=4", "fwd_row_tiles=1"});
  CHECK(c.file.empty());
  CHECK(c.log);
  env.set("MT_AUTOTUNE", "yes");
  CHECK(error_of([] { jit::AutotuneConfig::from_env(); }) ==
        "[autotune] MT_AUTOTUNE='yes' is not 0 or 1; set it to 0 to run every op's default "
        "candidate untimed, 1 (or unset it) to tune");
}

TEST_CASE("autotune: MT_LOG=autotune logs a tuning and a disk hit") {
  TuneDir dir;
  Script s;
  s.times = {{"a", {2}}, {"b", {1.5}}};
  std::vector<std::string> lines;
  dispatcher().set_log_sink([&](std::string_view l) { lines.emplace_back(l); });
  jit::Autotuner tuner({.file = dir.file(), .log = true}, s.timing());
  tuner.run("op k", s.candidates({"a", "b"}));
  jit::Autotuner again({.file = dir.file(), .log = true}, s.timing());
  again.run("op k", s.candidates({"a", "b"}));
  dispatcher().set_log_sink(nullptr);
  REQUIRE(lines.size() == 2);
  CHECK(
      lines[0].starts_with("[autotune] op k on sm_90 Test GPU: a 2 ms, b 1.5 ms -> b (tuned in "));
  CHECK(lines[1] == "[autotune] op k on sm_90 Test GPU: b (from " + dir.file() + ")");
}
