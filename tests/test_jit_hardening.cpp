// SPDX-License-Identifier: MIT
// The JIT's user text against hostile input (issue #41): pointwise bodies nested past any
// stack, names and comments that would write into the generated CUDA source, bytes that
// would reach a terminal through an error message, an empty Pointwise, a body of a
// million literals; and the user-kernel names that NVRTC pastes into its own code. Cases
// that crashed or hung run in a child process, so a regression fails the case, not the run.
#include <doctest/doctest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "child.h"
#include "helpers.h"
#include "kernels/jit/expr.h"
#include "kernels/jit/kernel.h"
#include "kernels/jit/nvrtc.h"
#include "minitensor.h"

using namespace mt;

namespace {

// A crash or a hang fails the case, not the run: `cpu_seconds` of CPU time (SIGXCPU) and
// four times that of wall time (SIGALRM).
int in_child_cpu(const std::function<bool()>& fn, unsigned cpu_seconds = 20) {
  return in_child(fn, 4 * cpu_seconds, cpu_seconds);
}

std::string repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string nesting_error(size_t column, std::string_view shown, size_t caret) {
  return fmt::format(
      "[jit] pointwise 'deep': the expression nests more than 256 levels deep (each "
      "parenthesis, call, ?: branch, unary operator and cast is a level); split it into "
      "statements, e.g. `t = ...;` (line 1, column {})\n  {}\n  {}^",
      column, shown, std::string(caret, ' '));
}

// Runs fn on a thread whose stack is `bytes` long; false if fn threw.
bool on_small_stack(size_t bytes, const std::function<void()>& fn) {
  struct Job {
    const std::function<void()>* fn;
    bool ok = false;
  } job{&fn};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t t;
  auto body = [](void* p) -> void* {
    auto* j = static_cast<Job*>(p);
    try {
      (*j->fn)();
      j->ok = true;
    } catch (...) {
    }
    return nullptr;
  };
  const bool started = pthread_create(&t, &attr, body, &job) == 0;
  pthread_attr_destroy(&attr);
  if (!started) return false;
  pthread_join(t, nullptr);
  return job.ok;
}

}  // namespace

TEST_SUITE("jit") {
  // ---- 1. nesting
  TEST_CASE("pointwise: 10,000 nested parentheses are an error with a caret, not a crash") {
    // They overflowed the parser's stack (SIGSEGV) from about 2,500.
    const std::string body = repeat("(", 10000) + "x" + repeat(")", 10000);
    // The 257th level opens at byte 256; the caret line is a window of 100 characters.
    const std::string want = nesting_error(257, "..." + repeat("(", 100) + "...", 63);
    CHECK(in_child_cpu([&] { return error_of([&] { jit::pointwise("deep", body); }) == want; }) ==
          0);
  }

  TEST_CASE(
      "pointwise: long chains of unary operators, casts, calls and ?: are errors, not "
      "crashes") {
    const std::string prefix = "[jit] pointwise 'deep': the expression nests more than 256 levels";
    for (const std::string& body :
         {repeat("-", 100000) + "x", repeat("!", 100000) + "x", repeat("+ ", 100000) + "x",
          repeat("(float)", 100000) + "x", repeat("exp(", 10000) + "x" + repeat(")", 10000),
          repeat("x ? 1 : ", 100000) + "x", repeat("max(x, ", 10000) + "x" + repeat(")", 10000)}) {
      CAPTURE(body.substr(0, 16));
      CHECK(in_child_cpu([&] {
              return error_of([&] { jit::pointwise("deep", body); }).starts_with(prefix);
            }) == 0);
    }
  }

  TEST_CASE(
      "pointwise: 255 nested parentheses are the most; the deepest body parses on a "
      "2 MiB stack") {
    // The statement is level 1, each parenthesis one more: 255 of them make level 256.
    const std::string ok = repeat("(", 255) + "x * 2" + repeat(")", 255);
    // Each level here holds a frame for every precedence of binary operator.
    const std::string worst = repeat("x || x && x == x < x + x * (", 255) + "x" + repeat(")", 255);
    CHECK(in_child_cpu([&] {
            Tensor y;
            // Note [Nesting limit]: about 0.9 MiB under ASan, 0.2 MiB at -O2.
            const bool ran = on_small_stack(size_t(2) << 20, [&] {
              y = jit::pointwise("deep", ok)(from_vector<float>({1, -3}));
              (void)jit::pointwise("deep", worst);
            });
            return ran && y.to_vector<float>() == std::vector<float>{2, -6};
          }) == 0);
    // One more: the 257th level opens at byte 256 ('x'), 60 characters into the window.
    CHECK(error_of([&] { jit::pointwise("deep", "(" + ok + ")"); }) ==
          nesting_error(257, "..." + repeat("(", 60) + "x * 2" + repeat(")", 35) + "...", 63));
  }

  // ---- 2. names and the generated source
  TEST_CASE(
      "pointwise: a name is an identifier or identifiers joined by '::'; a newline or an "
      "#include in it is refused") {
    // It went into the generated source as it was: a name with a newline wrote lines of the
    // caller's choosing into the module, an #include put a host file into NVRTC's errors.
    CHECK(error_of([] { jit::pointwise("f\n#include \"/etc/hostname\"\n", "x"); }) ==
          "[jit] pointwise: the name 'f\\n#include \"/etc/hostname\"\\n' is not an identifier; a "
          "name is letters, digits and _, not starting with a digit, or such names joined by "
          "'::' (\"my_silu\", \"demo::fma\"): it names the generated kernel");
    for (const char* bad : {"1x", "a::", "::a", "a:b", "a:::b", "a-b", "a b", "a.b", "f()", "a//b",
                            "\xc3\xa9t\xc3\xa9", "a\\", "a\x1b"}) {
      CAPTURE(bad);
      CHECK(error_of([&] { jit::pointwise(bad, "x"); }).starts_with("[jit] pointwise: the name '"));
    }
    for (const char* good : {"f", "_f1", "demo::fma", "a::b::c2"}) {
      CAPTURE(good);
      CHECK(jit::pointwise(good, "x").cuda_source().find("struct pw_") != std::string::npos);
    }
  }

  TEST_CASE(
      "pointwise: a comment ending in a backslash, a NUL in a comment and 1e999 are "
      "refused on every device") {
    // The CPU evaluated each of these, and the CUDA source failed to compile: the backslash
    // joined the #include after the body's comment lines to the comment, NVRTC read the
    // source up to the NUL, and 1e999 became C(inf).
    CHECK(error_of([] { jit::pointwise("f", "x * 2 // twice \\\n + 1"); }) ==
          "[jit] pointwise 'f': a comment ends in a backslash, which in C joins the next line "
          "to the comment; remove the backslash (line 1, column 16)\n  x * 2 // twice \\\n"
          "                 ^");
    CHECK(error_of([] {
            jit::pointwise("f", "x // twice \\ ");
          }).starts_with("[jit] pointwise 'f': a comment ends in a backslash"));
    CHECK(error_of([] { jit::pointwise("f", std::string("x // a\0b", 8)); }) ==
          "[jit] pointwise 'f': a comment holds the control byte '\\x00'; remove it (line 1, "
          "column 7)\n  x // a b\n        ^");
    CHECK(error_of([] { jit::pointwise("f", "x + 1e999"); }) ==
          "[jit] pointwise 'f': the number '1e999' is outside the range of a double (magnitudes "
          "from about 4.9e-324 to 1.8e308); for infinity write 1.0 / 0.0 (line 1, column 5)\n"
          "  x + 1e999\n      ^");
    CHECK(error_of([] { jit::pointwise("f", "x + 1e-400f"); })
              .starts_with(
                  "[jit] pointwise 'f': the number '1e-400' is outside the range of a double"));
    CHECK(error_of([] { jit::pointwise("f", "x + 0x1p99999"); })
              .starts_with(
                  "[jit] pointwise 'f': the number '0x1p99999' is outside the range of a double"));
    const auto y =
        jit::pointwise("f", "x + 1.0 / 0.0")(from_vector<double>({1})).to_vector<double>();
    CHECK(std::isinf(y[0]));
  }

  TEST_CASE(
      "pointwise: what the CPU accepts compiles for CUDA: comments of any text, CR LF, "
      "hex, tiny and float-overflowing literals" *
      doctest::skip(no_nvrtc())) {
    const std::string body =
        "a = x * 0x1.8p1;  // hex: 3. \xc3\xa9t\xc3\xa9, 50% \\ of it,\ta tab\r\n"
        "b = a + 1e-310 + 0x10; // \r#include \"/etc/hostname\"\r\n"
        "\v\f// */ /* ?\?/ \xff\xfe not UTF-8, \xc2\x9b a C1 control\n"
        "return b * 1.5F + .5 - 5. + 0 * 3.5e39f;  // the last is inf in float, 0 * inf NaN\n";
    const auto f = jit::pointwise({.name = "edge", .inputs = {"x"}, .body = body});
    const std::string& src = f.cuda_source();
    // One preprocessor line, ours; nothing but printable ASCII and newlines.
    size_t hashes = 0;
    std::istringstream lines(src);
    for (std::string line; std::getline(lines, line);) hashes += line.starts_with("#");
    CHECK(hashes == 1);
    CHECK(src.find("#include \"pointwise.cuh\"") != std::string::npos);
    CHECK(std::all_of(src.begin(), src.end(),
                      [](char c) { return c == '\n' || (c >= 0x20 && c < 0x7f); }));
    CHECK(src.find("//   b = a + 1e-310 + 0x10; // \\x0d#include \"/etc/hostname\"\\x0d\n") !=
          std::string::npos);
    const std::string vec = f.name_expression(DType::Float64, jit::PointwiseVariant::Vec);
    const auto r = jit::compile(src, "edge.cu", {vec}, jit::default_options(), 80);
    CHECK(r.binary.size() > 1000);
    // Every value as C computes it: in float64 0 * 3.5e39 is 0, in float32 the literal is
    // infinity and the product NaN (so says the CUDA source too: C(3.5000000000000001e+39)).
    CHECK(f(from_vector<double>({2})).to_vector<double>() == std::vector<double>{28.5});
    CHECK(std::isnan(f(from_vector<float>({2})).to_vector<float>()[0]));
  }

  TEST_CASE(
      "cuda_body: a constant node that is not finite compiles (made by a pass, not a "
      "literal)" *
      doctest::skip(no_nvrtc())) {
    // {:.17g} printed C(inf) and C(nan), which are no CUDA.
    jit::expr::Program p;
    p.inputs = {"x"};
    p.outputs = {"out"};
    using jit::expr::Node, jit::expr::Op;
    const double inf = std::numeric_limits<double>::infinity();
    p.nodes = {Node{.op = Op::Input, .index = 0},
               Node{.op = Op::Const, .value = inf},
               Node{.op = Op::Const, .value = -inf},
               Node{.op = Op::Const, .value = std::numeric_limits<double>::quiet_NaN()},
               Node{.op = Op::Add, .a = 0, .b = 1},
               Node{.op = Op::Add, .a = 4, .b = 2},
               Node{.op = Op::Add, .a = 5, .b = 3}};
    p.output_nodes = {6};
    const std::string body = jit::expr::cuda_body(p);
    CHECK(body.find("inf") == std::string::npos);
    CHECK(body.find("nan") == std::string::npos);
    const std::string src =
        "#include \"pointwise.cuh\"\n"
        "struct pw_t {\n"
        "  template <class C>\n"
        "  __device__ __forceinline__ void operator()(const C* in, C* out, const C* s) const {\n"
        "    (void)s;\n" +
        body + "  }\n};\n";
    const auto r = jit::compile(src, "t.cu", {"pointwise_flat<float, pw_t, 1, 1>"},
                                jit::default_options(), 80);
    CHECK(r.binary.size() > 1000);
  }

  // ---- 4. error messages
  TEST_CASE(
      "pointwise: an error message shows the body's bytes escaped, the caret under the "
      "character") {
    // A terminal escape went through to the terminal, a UTF-8 letter was cut in half, a NUL
    // cut what() short.
    CHECK(error_of([] { jit::pointwise("f", "x \x1b[31m"); }) ==
          "[jit] pointwise 'f': unexpected character '\\x1b' (line 1, column 3)\n  x  [31m\n    ^");
    CHECK(error_of([] { jit::pointwise("f", "x + \xc3\xa9"); }) ==
          "[jit] pointwise 'f': unexpected character '\xc3\xa9' (line 1, column 5)\n"
          "  x + \xc3\xa9\n      ^");
    CHECK(error_of([] { jit::pointwise("f", "// \xe2\x82\xac\nx + 1 \xe2\x82\xac"); }) ==
          "[jit] pointwise 'f': unexpected character '\xe2\x82\xac' (line 2, column 7)\n"
          "  x + 1 \xe2\x82\xac\n        ^");
    CHECK(error_of([] { jit::pointwise("f", "x \xff + 1"); }) ==
          "[jit] pointwise 'f': unexpected character '\\xff' (line 1, column 3)\n  x ? + 1\n    ^");
    try {
      jit::pointwise("f", std::string("x +\0 1", 6));
      FAIL("no error");
    } catch (const Error& e) {
      const std::string want =
          "[jit] pointwise 'f': unexpected character '\\x00' (line 1, column 4)\n  x +  1\n     ^";
      CHECK(std::string(e.what()) == want);
      CHECK(std::strlen(e.what()) == want.size());
    }
    CHECK(error_of([] { jit::pointwise({.name = "f", .inputs = {"x\x1b[2J"}, .body = "x"}); }) ==
          "[jit] pointwise 'f': 'x\\x1b[2J' is not a valid name (letters, digits, _, not "
          "starting with a digit)");
    // A long line shows 60 characters before the caret and 40 after, "..." where cut.
    CHECK(error_of([] { jit::pointwise("f", repeat("x + ", 250000) + "* x + 1"); }) ==
          "[jit] pointwise 'f': expected a value, found '*' (line 1, column 1000001)\n  ..." +
              repeat("x + ", 15) + "* x + 1\n  " + std::string(63, ' ') + "^");
    CHECK(error_of([] { jit::pointwise("f", "(" + repeat("x + ", 100) + "x"); }) ==
          "[jit] pointwise 'f': expected ')' at the end of the body (line 1, column 403)\n  ..." +
              repeat(" + x", 15) + "\n  " + std::string(63, ' ') + "^");
  }

  // ---- 5. an empty Pointwise; a body of many literals
  TEST_CASE(
      "pointwise: an empty (default-constructed) Pointwise is an error when used, not a "
      "crash") {
    const std::string want =
        "[jit] Pointwise: this one is empty (default-constructed); assign it the result of "
        "mt::jit::pointwise(name, expression) before using it";
    CHECK(in_child_cpu([&] {
            const jit::Pointwise f;
            return error_of([&] { f(ones({2})); }) == want &&
                   error_of([&] { f.call(std::vector<Tensor>{ones({2})}); }) == want &&
                   error_of([&] { (void)f.cuda_source(); }) == want &&
                   error_of([&] { (void)f.spec(); }) == want &&
                   error_of([&] { (void)mt::jit::expr::program_of(f); }) == want &&
                   error_of([&] { (void)f.name_expressions(); }) == want;
          }) == 0);
    jit::Pointwise g;
    g = jit::pointwise("f", "x + 1");
    CHECK(g(ones({1})).item<float>() == 2);
  }

  TEST_CASE("pointwise: a body of a million literals parses in a fraction of a second") {
    // The lexer copied the rest of the body for strtod at every number: quadratic, 7.3 s for
    // 1 MiB of "+1" on a 2-core machine, so some 30 s for these 2 MiB. The child has 10 s
    // of CPU time; linear parsing takes a small share of it, even under a sanitizer.
    const std::string body = "x" + repeat("+1", size_t(1) << 20);
    CHECK(in_child_cpu(
              [&] {
                const auto p = jit::expr::parse("sum", body, {}, {}, {"out"}, true);
                return p.nodes.size() == 2 * (size_t(1) << 20) + 1 && p.inputs.size() == 1;
              },
              10) == 0);
  }

  // ---- user kernels: the names NVRTC and messages take
  TEST_CASE(
      "kernel(): a name expression or source name with control bytes, and a source "
      "with a NUL, are refused") {
    const std::string src = "__global__ void k(float* x) { x[0] = 1; }";
    CHECK(error_of([&] { jit::kernel(src, "k\n#include \"/etc/hostname\""); }) ==
          "[jit] kernel(): the name expression 'k\\n#include \"/etc/hostname\"' holds a byte "
          "outside printable ASCII; pass the __global__ function's name as C++ spells it, e.g. "
          "\"my_silu<float>\"");
    CHECK(error_of(
              [&] { jit::kernel(jit::KernelSpec{.name = "k\x1b[2J.cu", .source = src}, "k"); }) ==
          "[jit] kernel(): the KernelSpec's name 'k\\x1b[2J.cu' holds a byte outside printable "
          "ASCII; name the source like a file, e.g. \"my_silu.cu\"");
    CHECK(error_of([&] { jit::kernel(src + std::string("\0 junk", 6), "k"); }) ==
          "[jit] kernel(): the source of 'k.cu' holds a NUL byte at offset 41, where NVRTC "
          "would stop reading it; remove it");
    CHECK(jit::kernel(src, "k").name_expression() == "k");
  }
}

// ---- an NVRTC that leaves a lowered name null ------------------------------------------

#if defined(MT_HAVE_CUDA)
// One case, two processes. Run normally, it runs mt_tests again for this case alone with
// MT_NVRTC_LIBRARY naming tests/fake_nvrtc's library (an NVRTC that succeeds at everything
// and names nothing; a new process, because NVRTC is loaded once per process), and checks
// what that process printed. Run there (MT_TEST_FAKE_NVRTC set), it compiles against the
// fake: a null lowered name used to become a std::string and throw std::logic_error.
TEST_CASE("jit hardening: an NVRTC that gives no lowered name is an mt::Error naming the kernel") {
  if (std::getenv("MT_TEST_FAKE_NVRTC") != nullptr) {
    REQUIRE(jit::nvrtc_available());
    CHECK(jit::nvrtc_library_path().find("fake_nvrtc") != std::string::npos);
    CHECK_THROWS_WITH_AS(
        jit::compile("extern \"C\" __global__ void probe() {}", "probe.cu", {"probe"},
                     jit::default_options(), 90),
        "[jit] NVRTC gave no lowered name for 'probe' in 'probe.cu'; add it to the name "
        "expressions before compiling (nvrtcAddNameExpression), or check the NVRTC library",
        mt::Error);
    return;
  }
  const SelfRun r =
      run_self(std::string("MT_NVRTC_LIBRARY='") + MT_LOAD_PROBE_DIR +
                   "/fake_nvrtc/libfake_nvrtc.so' MT_TEST_FAKE_NVRTC=1 MT_KERNEL_CACHE=0",
               "jit hardening: an NVRTC that gives no lowered name*");
  INFO(r.out);
  CHECK(r.exit_status == 0);
  CHECK(std::regex_search(r.out, std::regex(R"(test cases:\s+1 \|\s+1 passed)")));
}
#endif
