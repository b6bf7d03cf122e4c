// SPDX-License-Identifier: MIT
// Hardening of the kernel cache's and the autotuner's trust in their directory, the
// autotuner against a bad timing or a candidate that runs its own key, mt::compile and
// mt::capture against an empty function and a bad MT_COMPILE, and rand's range [0, 1).
// Crashes and hangs are run in a child process (in_child), so that they fail a case
// instead of stopping the suite.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "child.h"
#include "helpers.h"
#include "kernels/compile/compile.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/sha256.h"
#include "runtime/philox.h"
#include "scoped_env.h"

using namespace mt;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_misc_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// What fn printed on stderr.
std::string stderr_of(const std::function<void()>& fn) {
  TempDir d;
  const std::string log = d.sub("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  fn();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  return read_all(log);
}

bool not_root() { return ::geteuid() != 0; }
constexpr uid_t kNobody = 65534;

std::string key_of(char c) { return std::string(64, c); }

jit::CompileResult fake_result(const std::string& tag) {
  jit::CompileResult r;
  r.name = "fake.cu";
  r.target = "sm_90";
  r.binary = "\177ELF fake cubin " + tag;
  return r;
}

// A timing that gives every call of every candidate `ms`.
jit::TuneTiming constant_timing(double ms) {
  return {.device_tag = [](int) { return std::string("sm_90 Test GPU"); },
          .time_ms =
              [ms](int, const std::function<void()>& run, int reps) {
                std::vector<double> out;
                for (int i = 0; i < reps; ++i) run(), out.push_back(ms);
                return out;
              },
          .busy = {}};
}

// An autotune.tsv line, as the tuner writes it, with its checksum.
std::string tune_line(const std::string& body) {
  return body + "\t" + jit::to_hex(jit::sha256(body)).substr(0, 16) + "\n";
}

}  // namespace

// ---- the kernel cache and autotune.tsv trust only a directory of this user's alone -----

TEST_CASE("jit cache: a directory writable by its group or others is refused, entries unread") {
  TempDir dir;
  const std::string where = dir.sub("kernels");
  struct Case {
    mode_t mode;
    const char* who;
  };
  for (const Case c :
       {Case{0770, "its group"}, Case{0707, "others"}, Case{01777, "its group and others"}}) {
    CAPTURE(c.who);
    jit::KernelCache cache({.dir = where, .warn = false});
    REQUIRE(cache.store(key_of('a'), fake_result("A")));  // a valid entry, then chmod
    REQUIRE(::chmod(where.c_str(), c.mode) == 0);
    jit::KernelCache after({.dir = where, .warn = false});
    CHECK_FALSE(after.load(key_of('a')).has_value());
    CHECK(fs::exists(after.path_for(key_of('a'))));  // left alone, not loaded
    CHECK_FALSE(after.store(key_of('b'), fake_result("B")));
    CHECK_FALSE(fs::exists(after.path_for(key_of('b'))));
    CHECK(after.disk_problem() ==
          fmt::format("it is writable by {} (mode {:04o}), and whoever can write it chooses the "
                      "kernels that get loaded; chmod 700 it",
                      c.who, c.mode));
    CHECK(jit::cache_dir_problem(where) == after.disk_problem());
    REQUIRE(::chmod(where.c_str(), 0700) == 0);
    CHECK(jit::cache_dir_problem(where).empty());
    CHECK(after.load(key_of('a')).has_value());
  }
}

TEST_CASE("jit cache: an entry or events.log owned by another user is never read" *
          doctest::skip(not_root())) {
  TempDir dir;
  jit::KernelCache cache({.dir = dir.path, .warn = false, .event_log = true});
  const std::string k = key_of('c');
  REQUIRE(cache.store(k, fake_result("C")));
  REQUIRE(cache.load(k).has_value());
  REQUIRE_FALSE(cache.disk_log().empty());
  // As if another account planted the file (the directory is this user's, mode 0700).
  REQUIRE(::chown(cache.path_for(k).c_str(), kNobody, kNobody) == 0);
  REQUIRE(::chown(dir.sub("events.log").c_str(), kNobody, kNobody) == 0);
  const auto entries = cache.list();
  REQUIRE(entries.size() == 1);
  CHECK_FALSE(entries[0].valid);
  CHECK(entries[0].problem == "owned by uid 65534, not by this user (uid 0)");
  CHECK(cache.disk_log().empty());
  CHECK_FALSE(cache.load(k).has_value());
  CHECK_FALSE(fs::exists(cache.path_for(k)));  // removed: the next store writes our own
  CHECK(cache.disk_problem() ==
        "'" + cache.path_for(k) + "': owned by uid 65534, not by this user (uid 0)");
  CHECK(cache.store(k, fake_result("C")));
  CHECK(cache.load(k)->binary == fake_result("C").binary);
}

TEST_CASE("autotune: autotune.tsv in a directory others can write is neither read nor written") {
  TempDir dir;
  const std::string file = dir.sub("autotune.tsv");
  // A planted line that names b the winner of key k.
  write_all(file, tune_line("mt-autotune-1\tsm_90 Test GPU\tk\ta,b\tb\t9,1"));
  REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
  std::vector<std::string> ran;
  std::vector<jit::TuneCandidate> c = {{"a", [&] { ran.push_back("a"); }},
                                       {"b", [&] { ran.push_back("b"); }}};
  jit::Autotuner tuner({.file = file, .warmup = 0, .reps = 1}, constant_timing(1.0));
  size_t index = 99;
  const std::string printed = stderr_of([&] { index = tuner.run("k", c); });
  CHECK(index == 0);  // timed here (a tie: the first), not taken from the file
  CHECK(tuner.choice("k")->source == jit::TuneChoice::Source::Tuned);
  CHECK(printed ==
        "minitensor: [autotune] '" + file + "' is not read or written: the directory '" + dir.path +
            "' cannot be trusted: it is writable by its group and others (mode 0777), and "
            "whoever can write it chooses the kernels that get loaded; chmod 700 it; tuning "
            "results are kept in memory only (set MT_KERNEL_CACHE to a directory of your own, "
            "or delete the file)\n");
  CHECK(read_all(file) == tune_line("mt-autotune-1\tsm_90 Test GPU\tk\ta,b\tb\t9,1"));
  ::chmod(dir.path.c_str(), 0700);
  // In a directory of its own the same line is read.
  jit::Autotuner trusting({.file = file, .warmup = 0, .reps = 1}, constant_timing(1.0));
  CHECK(trusting.run("k", c) == 1);
  CHECK(trusting.choice("k")->source == jit::TuneChoice::Source::Disk);
}

// ---- the autotuner against bad timings, its own key, and empty functions ---------------

TEST_CASE("autotune: a NaN or infinite timing is a clear error, not a crash") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double ms : {nan, inf, -1.0}) {
    CAPTURE(ms);
    // In a child: before the fix, every candidate lost with no exception to rethrow.
    CHECK(in_child([ms] {
            jit::Autotuner tuner({.warmup = 0, .reps = 3}, constant_timing(ms));
            std::vector<jit::TuneCandidate> c = {{"a", [] {}}, {"b", [] {}}};
            return error_of([&] { tuner.run("op k", c); }) ==
                   fmt::format(
                       "[autotune] key 'op k': the timing gave {} ms for candidate 'a'; "
                       "time_ms must return finite, non-negative milliseconds",
                       ms);
          }) == 0);
  }
  // One candidate with a NaN time loses to one with a number (before: a crash too).
  CHECK(in_child([nan] {
          jit::TuneTiming t = constant_timing(1.0);
          std::string current;
          t.time_ms = [&](int, const std::function<void()>& run, int reps) {
            std::vector<double> out;
            for (int i = 0; i < reps; ++i) run(), out.push_back(current == "a" ? nan : 2.0);
            return out;
          };
          jit::Autotuner tuner({.warmup = 0, .reps = 3}, t);
          std::vector<jit::TuneCandidate> c = {{"a", [&] { current = "a"; }},
                                               {"b", [&] { current = "b"; }}};
          return tuner.run("op k", c) == 1 && std::isinf(tuner.choice("op k")->ms[0]);
        }) == 0);
}

TEST_CASE("autotune: a candidate that runs its own key is a clear error, not a stack overflow") {
  const std::string expected =
      "[autotune] key 'op self' was run again by one of its own candidates; a candidate must "
      "launch its kernels itself, not call the op it tunes (that recursion never ends)";
  // Tuned, forced and untuned: each path runs a candidate. In a child with a time limit:
  // before the fix each recursed until SIGSEGV.
  for (int path = 0; path < 3; ++path) {
    CAPTURE(path);
    CHECK(in_child([&] {
            jit::Autotuner tuner({.enabled = path != 2, .warmup = 0, .reps = 1},
                                 constant_timing(1.0));
            std::vector<jit::TuneCandidate> c;
            c.push_back({"a", [] {}});
            c.push_back({"self", [&] { tuner.run("op self", c); }});
            const std::string force = path == 1 ? "self" : "";
            if (path == 2) std::swap(c[0], c[1]);  // untuned: the first candidate runs
            return error_of([&] { tuner.run("op self", c, 0, force); }) == expected;
          }) == 0);
  }
  // A candidate may run another key (a tuned op calling a tuned op).
  jit::Autotuner tuner({.warmup = 0, .reps = 1}, constant_timing(1.0));
  int inner_runs = 0;
  std::vector<jit::TuneCandidate> inner = {{"x", [&] { ++inner_runs; }}};
  std::vector<jit::TuneCandidate> outer = {{"a", [&] { tuner.run("op inner", inner); }}};
  CHECK(tuner.run("op outer", outer) == 0);
  CHECK(inner_runs == 3);  // once timed, then its winner, all inside the outer's two runs
}

TEST_CASE("autotune: a candidate without a function is an mt::Error on every path") {
  const std::string expected = "[autotune] key 'op k': candidate 'a' has no function to run";
  std::vector<jit::TuneCandidate> c = {{"a", {}}, {"b", [] {}}};
  jit::Autotuner off({.enabled = false}, constant_timing(1.0));
  CHECK(error_of([&] { off.run("op k", c); }) == expected);  // was std::bad_function_call
  jit::Autotuner forced({.force = {"a"}}, constant_timing(1.0));
  CHECK(error_of([&] { forced.run("op k", c); }) == expected);
  jit::Autotuner tuned({.warmup = 0, .reps = 1}, constant_timing(1.0));
  CHECK(error_of([&] { tuned.run("op k", c); }) == expected);
}

// ---- mt::compile and mt::capture: an empty function, MT_COMPILE ------------------------

TEST_CASE("compile: an empty std::function is an mt::Error at compile and capture") {
  CHECK(error_of([] { mt::compile(GraphFn{}); }) ==
        "[compile] mt::compile got an empty std::function; pass a callable that takes the "
        "inputs and returns the outputs");
  CHECK(error_of([] { mt::capture(GraphFn{}, {ones({2})}); }) ==
        "[compile] mt::capture got an empty std::function; pass a callable that takes the "
        "inputs and returns the outputs");
}

TEST_CASE("compile: MT_COMPILE takes 0, 1, off, on, false, true and refuses the rest") {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{add(in[0], in[0])}; };
  const Tensor x = ones({3});
  for (const char* on : {"1", "on", "true", ""}) {
    CAPTURE(on);
    ScopedEnv env("MT_COMPILE", on);
    Compiled c = mt::compile(fn);
    CHECK(c(x)[0].to_vector<float>() == std::vector<float>{2, 2, 2});
    CHECK(c.compile_count() == 1);
  }
  for (const char* off : {"0", "off", "false"}) {
    CAPTURE(off);
    ScopedEnv env("MT_COMPILE", off);
    Compiled c = mt::compile(fn);
    CHECK(c(x)[0].to_vector<float>() == std::vector<float>{2, 2, 2});
    CHECK(c.compile_count() == 0);  // eager
  }
  for (const char* bad : {"yes", "no", "2", "OFF", " 0"}) {
    CAPTURE(bad);
    ScopedEnv env("MT_COMPILE", bad);
    CHECK(error_of([&] { mt::compile(fn); }) ==
          fmt::format("[compile] MT_COMPILE={} is not one of 0, 1, off, on, false, true; set it "
                      "to 0 to run compiled functions eagerly, or to 1 (or unset it) to compile "
                      "them",
                      mt::quoted(bad)));
  }
}

// ---- rand: [0, 1) in every dtype ----------------------------------------------------------

TEST_CASE("rand: the largest draw converts exactly, below 1, in every floating dtype") {
  // The draw of all-ones Philox words is the largest there is: 1 - 2^-bits, exact in the
  // dtype. The 53-bit value rounded to nearest was 1.0 in float32, float16 and bfloat16.
  const unsigned int ones = 0xffffffffu;
  const int b64 = philox_uniform_bits(8, false), b32 = philox_uniform_bits(4, false),
            b16 = philox_uniform_bits(2, false), bb16 = philox_uniform_bits(2, true);
  CHECK(b64 == 53);
  CHECK(b32 == 24);
  CHECK(b16 == 11);
  CHECK(bb16 == 8);
  CHECK(philox_uniform(ones, ones, b64) == 1.0 - 0x1p-53);
  CHECK(float(philox_uniform(ones, ones, b32)) == 1.0f - 0x1p-24f);
  CHECK(float(Half(float(philox_uniform(ones, ones, b16)))) == 1.0f - 0x1p-11f);
  CHECK(float(BFloat16(float(philox_uniform(ones, ones, bb16)))) == 1.0f - 0x1p-8f);
  CHECK(philox_uniform(0, 0, b16) == 0.0);
  CHECK(philox_uniform01(ones, ones) == philox_uniform(ones, ones, 53));
  // Each dtype's draws are the top bits of the 64-bit word, so exact in the dtype.
  const unsigned int lo = 0x89abcdefu, hi = 0xfedcba98u;
  const unsigned long long word = (0xfedcba98ull << 32) | 0x89abcdefull;
  CHECK(philox_uniform(lo, hi, b32) == double(word >> 40) * 0x1p-24);
  CHECK(double(float(philox_uniform(lo, hi, b32))) == philox_uniform(lo, hi, b32));
}

TEST_CASE("rand: float16 and bfloat16 draws stay below 1") {
  // 1.0 came 261 times a million in float16 and 1,938 in bfloat16 before: about 52 and 388
  // in these draws.
  Generator g(7);
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32}) {
    CAPTURE(t);
    const std::vector<float> v =
        rand({200000}, {.dtype = t}, &g).to(DType::Float32).to_vector<float>();
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0f);
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0f);
  }
}

// ---- backward after an Autograd fallthrough --------------------------------------------

namespace {
// A CPU kernel that computes without recording (as a kernel of raw loops does).
Tensor twice_cpu(const Tensor& x) { return mul(x.detach(), 2.0); }

// backward's message for a tensor without history when no op is known to have dropped it.
const std::string kPlainNoGradError =
    "[backward] the tensor does not require grad and has no grad_fn: nothing it was computed "
    "from requires grad. Call .requires_grad_() on the leaves before the forward pass, and do "
    "not run it under NoGradGuard";
}  // namespace

TEST_CASE(
    "backward: a loss whose history an Autograd fallthrough dropped names it, with file:line") {
  Library def(Library::Kind::Def, "test_dropped");
  def.def("twice(Tensor x) -> Tensor");
  def.impl("twice", DispatchKey::CPU, twice_cpu);
  auto twice = dispatcher().find_or_throw("test_dropped::twice").typed<Tensor(const Tensor&)>();
  const Tensor x = ones({3}).requires_grad_();
  CHECK(error_of([&] { backward(sum(ones({3}))); }) == kPlainNoGradError);
  {
    Library skip(Library::Kind::Impl, "test_dropped", DispatchKey::Autograd);
    const int line = __LINE__ + 1;
    skip.impl("twice", fallthrough());
    const Tensor y = twice(x);  // x requires grad; y has no history
    CHECK_FALSE(y.requires_grad());
    // Before: the plain message, telling the user to call .requires_grad_(), which x has.
    CHECK(error_of([&] { backward(sum(y)); }) ==
          fmt::format("[backward] the tensor does not require grad and has no grad_fn. If it was "
                      "computed through test_dropped::twice (a fallthrough registered at "
                      "tests/test_hardening_misc.cpp:{}), its history was dropped there: a "
                      "fallthrough at Autograd records no tape node (register an autograd "
                      "formula with register_autograd instead). Otherwise nothing it was "
                      "computed from requires grad: call .requires_grad_() on the leaves before "
                      "the forward pass, and do not run it under NoGradGuard",
                      line));
  }
  CHECK(error_of([&] { backward(sum(ones({3}))); }) ==
        kPlainNoGradError);  // the fallthrough is gone
}

TEST_CASE(
    "backward: a loss whose history an Autograd kernel with the guard dropped names it, with "
    "file:line") {
  // An Autograd kernel that runs the op below Autograd (the guard and a redispatch) and
  // records no node: its output does not require grad though x does.
  Library def(Library::Kind::Def, "test_dropped_guard");
  def.def("halve(Tensor x) -> Tensor");
  def.def("keep(Tensor x) -> Tensor");
  def.impl("halve", DispatchKey::CPU, [](const Tensor& x) { return mul(x.detach(), 0.5); });
  def.impl("keep", DispatchKey::CPU, [](const Tensor& x) { return mul(x.detach(), 1.0); });
  auto halve =
      dispatcher().find_or_throw("test_dropped_guard::halve").typed<Tensor(const Tensor&)>();
  auto keep = dispatcher().find_or_throw("test_dropped_guard::keep").typed<Tensor(const Tensor&)>();
  const Tensor x = ones({3}).requires_grad_();
  {
    Library ag(Library::Kind::Impl, "test_dropped_guard", DispatchKey::Autograd);
    const int line = __LINE__ + 1;
    ag.impl("halve", [halve](DispatchKeySet ks, const Tensor& t) {
      ExcludeDispatchKeyGuard below(DispatchKey::Autograd);
      return halve.redispatch(ks.below(DispatchKey::Autograd), t);
    });
    // An Autograd kernel that keeps history (it calls differentiable ops) is not named.
    ag.impl("keep", [](const Tensor& t) { return mul(t, 1.0); });
    CHECK(keep(x).requires_grad());
    CHECK(error_of([&] { backward(sum(ones({3}))); }) == kPlainNoGradError);
    // Called without an input that requires grad, it drops nothing: not named either.
    CHECK_FALSE(halve(ones({3})).requires_grad());
    CHECK(error_of([&] { backward(sum(ones({3}))); }) == kPlainNoGradError);
    const Tensor y = halve(x);
    CHECK_FALSE(y.requires_grad());
    CHECK(allclose(y, full({3}, 0.5)));
    // Before: the plain message, telling the user to call .requires_grad_(), which x has.
    const std::string named = fmt::format(
        "[backward] the tensor does not require grad and has no grad_fn. If it was computed "
        "through test_dropped_guard::halve (an Autograd kernel registered at "
        "tests/test_hardening_misc.cpp:{} that returned outputs without history from an input "
        "that requires grad), its history was dropped there: an Autograd kernel that runs the "
        "op below Autograd records no tape node by itself (register an autograd formula with "
        "register_autograd instead). Otherwise nothing it was computed from requires grad: "
        "call .requires_grad_() on the leaves before the forward pass, and do not run it under "
        "NoGradGuard",
        line);
    CHECK(error_of([&] { backward(sum(y)); }) == named);
    CHECK(error_of([&] { (void)grad({mul(y, 2.0)}, {x}); }) ==
          "[grad]" + named.substr(std::string("[backward]").size()));
    {
      // With a fallthrough that dropped history too, both are named.
      Library skip(Library::Kind::Impl, "test_dropped_guard", DispatchKey::Autograd);
      const int ft_line = __LINE__ + 1;
      skip.impl("keep", fallthrough());
      CHECK(error_of([&] { backward(sum(keep(x))); }) ==
            fmt::format("[backward] the tensor does not require grad and has no grad_fn. If it "
                        "was computed through test_dropped_guard::keep (a fallthrough registered "
                        "at tests/test_hardening_misc.cpp:{}), or test_dropped_guard::halve (an "
                        "Autograd kernel registered at tests/test_hardening_misc.cpp:{} that "
                        "returned outputs without history from an input that requires grad), its "
                        "history was dropped there: a fallthrough at Autograd records no tape "
                        "node, and an Autograd kernel that runs the op below Autograd records no "
                        "tape node by itself (register an autograd formula with register_autograd "
                        "instead). Otherwise nothing it was computed from requires grad: call "
                        ".requires_grad_() on the leaves before the forward pass, and do not run "
                        "it under NoGradGuard",
                        ft_line, line));
    }
  }
  // The kernel's registration is gone: the plain message again.
  CHECK(error_of([&] { backward(sum(ones({3}))); }) == kPlainNoGradError);
}
