// SPDX-License-Identifier: MIT
// The robustness probe (issues #16, #23 and #41): every class of bad input those issues found,
// tried through the public API, each case in a child process of its own (fork), so that a
// crash or a hang is counted and the run goes on. A case passes when it gives a clear
// mt::Error (its message starts with the op's name in brackets and holds no control
// byte but newlines; docs/embedding.md) or, for the inputs that must be handled rather
// than refused, the right result. Prints one line per case that did not pass and
//   N cases, N clear errors, N crashes (N handled, N hangs, N unclear errors, N other
//   exceptions, N accepted, N wrong results)
// and exits 1 unless every case passed. The CLI's bad inputs are tests/cli/check_cli.py's.
//
// usage: robustness_probe [-v] [CASE_SUBSTRING]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kernels/jit/cache.h"
#include "kernels/jit/expr.h"
#include "minitensor.h"

using namespace mt;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// A wrong result of a case that must succeed.
struct Wrong {
  std::string what;
};
void expect(bool ok, std::string what) {
  if (!ok) throw Wrong{std::move(what)};
}

enum class Want { Error, Result };

struct Case {
  const char* area;
  std::string name;
  Want want;
  std::function<void()> fn;
};

// The child's verdicts, as exit codes.
enum Verdict : int {
  kClearError = 10,
  kHandled = 11,
  kUnclearError = 12,    // an mt::Error whose message is not in the promised format
  kOtherException = 13,  // not an mt::Error
  kAccepted = 14,        // no error where one was due
  kWrongResult = 15,
};

// "[op] ...": the op's (or the area's) name in brackets, then a space; no control byte
// but newlines anywhere (user text is quoted with escapes).
bool clear_format(std::string_view m, std::string* why) {
  const size_t close = m.find("] ");
  if (m.empty() || m[0] != '[' || close == std::string_view::npos || close < 2 ||
      m.substr(1, close - 1).find_first_of("[\n") != std::string_view::npos) {
    *why = "does not start with the op's name in brackets";
    return false;
  }
  for (char c : m)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7f) {
      *why = "holds a control byte";
      return false;
    }
  return true;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_probe_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (!p) throw Wrong{"mkdtemp failed"};
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

jit::CompileResult fake_cubin(const std::string& tag) {
  jit::CompileResult r;
  r.name = "probe.cu";
  r.target = "sm_90";
  r.binary = "\177ELF probe cubin " + tag;
  r.lowered_names = {{"probe<float>", "_Z5probeIfEvPT_"}};
  return r;
}

Tensor copy_of(const Tensor& x) { return x.clone(); }

// Defines and drops an op while other threads call it every way: each call must give
// the right value or a clear error (Note [Schema publication]).
void race_define_and_drop() {
  auto define = [] {
    auto l = std::make_unique<Library>(Library::Kind::Def, "probe_race");
    l->def("op(Tensor x) -> Tensor");
    l->impl("op", DispatchKey::CPU, [](const Tensor& x) { return full_like(x, 3); });
    return l;
  };
  auto first = define();
  const OperatorHandle h = dispatcher().find_or_throw("probe_race::op");
  auto typed = h.typed<Tensor(const Tensor&)>();
  first.reset();
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  auto check = [&](auto&& fn) {
    try {
      const Tensor y = fn();
      if (y.to_vector<float>() != std::vector<float>{3}) wrong.fetch_add(1);
    } catch (const Error& e) {
      std::string why;
      if (!clear_format(e.what(), &why)) wrong.fetch_add(1);
    }
  };
  std::vector<std::thread> ts;
  ts.emplace_back([&] {
    while (!stop) check([&] { return call<Tensor>("probe_race::op", zeros({1})); });
  });
  ts.emplace_back([&] {
    while (!stop)
      check([&] {
        Stack s{zeros({1})};
        h.call_boxed(&s);
        return s.at(0).to_tensor();
      });
  });
  ts.emplace_back([&] {
    while (!stop) check([&] { return typed(zeros({1})); });
  });
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) {
    auto l = define();
    (void)dispatcher().dump("probe_race::op");
  }
  stop = true;
  for (auto& t : ts) t.join();
  expect(wrong.load() == 0, std::to_string(wrong.load()) + " wrong results or unclear errors");
}

std::vector<Case> make_cases() {
  std::vector<Case> c;
  auto err = [&](const char* area, std::string name, std::function<void()> fn) {
    c.push_back({area, std::move(name), Want::Error, std::move(fn)});
  };
  auto ok = [&](const char* area, std::string name, std::function<void()> fn) {
    c.push_back({area, std::move(name), Want::Result, std::move(fn)});
  };

  // ---- factories: shape, element and byte counts (#16, #23)
  err("factories", "empty [2^32, 2^32]", [] { empty({1LL << 32, 1LL << 32}); });
  err("factories", "empty [INT64_MAX, 2]", [] { empty({kMax, 2}); });
  err("factories", "empty [3037000500, 3037000500]", [] { empty({3037000500, 3037000500}); });
  err("factories", "empty [2^62] float32", [] { empty({1LL << 62}); });
  err("factories", "empty [2^61] float64", [] { empty({1LL << 61}, {.dtype = DType::Float64}); });
  err("factories", "zeros [2^32, 2^32]", [] { zeros({1LL << 32, 1LL << 32}); });
  err("factories", "ones [INT64_MAX]", [] { ones({kMax}); });
  err("factories", "full [2^62]", [] { full({1LL << 62}, 1.0); });
  err("factories", "rand [2^32, 2^32]", [] { rand({1LL << 32, 1LL << 32}); });
  err("factories", "randn [2^32, 2^32]", [] { randn({1LL << 32, 1LL << 32}); });
  err("factories", "fake_empty [2^32, 2^32]", [] { fake_empty({1LL << 32, 1LL << 32}); });
  err("factories", "empty under FakeMode [2^40, 2^40]", [] {
    FakeMode fake;
    empty({1LL << 40, 1LL << 40});
  });
  err("factories", "empty [0, 2^32, 2^32] (strides overflow)", [] {
    empty({0, 1LL << 32, 1LL << 32});
  });
  err("factories", "empty negative size", [] { empty({2, -3}); });
  err("factories", "empty bool [INT64_MAX - 30] (out of memory)",
      [] { empty({kMax - 30}, {.dtype = DType::Bool}); });
  err("factories", "from_blob [2^32, 2^32]", [] {
    static float x = 0;
    from_blob(&x, {1LL << 32, 1LL << 32}, DType::Float32);
  });
  err("factories", "from_blob strides past int64", [] {
    static float x = 0;
    from_blob(&x, {3}, {kMax / 2 + 1}, DType::Float32);
  });
  err("factories", "empty_strided extent past int64, then fill_", [] {
    empty_strided({3, 2}, {kMax / 2, 1}).fill_(1);
  });
  err("factories", "empty_strided negative stride", [] { empty_strided({2}, {-1}); });
  err("factories", "arange 2^62", [] { arange(double(1LL << 62)); });
  err("factories", "arange 0 to 1e30", [] { arange(0, 1e30); });
  err("factories", "arange NaN step", [] { arange(0, 1, NAN); });
  err("factories", "arange wrong way", [] { arange(0, 1, -1); });
  err("factories", "linspace 2^62 steps", [] { linspace(0, 1, 1LL << 62); });
  err("factories", "linspace negative steps", [] { linspace(0, 1, -2); });
  err("factories", "silu of empty [2^62 + 4]", [] { silu(empty({(1LL << 62) + 4})); });
  err("factories", "zeros [2^61 + 1, 8] select fill_", [] {
    zeros({(1LL << 61) + 1, 8}).select(0, 1000).fill_(7);
  });
  err("factories", "empty [INT64_MAX] slice fill_", [] { empty({kMax}).slice(0, 0, 10).fill_(1); });
  err("factories", "sum of empty [2^62]", [] { sum(empty({1LL << 62})); });

  // ---- views
  err("views", "view to [2^32, 2^32]", [] { zeros({0}).view({1LL << 32, 1LL << 32}); });
  err("views", "view -1 with [2^32, 2^32]", [] { zeros({0}).view({-1, 1LL << 32, 1LL << 32}); });
  err("views", "reshape to [2^32, 2^32]", [] { zeros({0}).reshape({1LL << 32, 1LL << 32}); });
  err("views", "view of the wrong count", [] { zeros({6}).view({4}); });
  err("views", "view with two -1", [] { zeros({6}).view({-1, -1}); });
  err("views", "view of a transposed tensor", [] { zeros({2, 3}).t().view({6}); });
  err("views", "expand to [2^32, 2^32]", [] { ones({1, 1}).expand({1LL << 32, 1LL << 32}); });
  err("views", "expand float64 to [2^62]",
      [] { ones({1}, {.dtype = DType::Float64}).expand({1LL << 62}); });
  err("views", "expand to [-2]", [] { zeros({1}).expand({-2}); });
  err("views", "sum of expand [-3]", [] { sum(ones({1}).expand({-3})); });
  err("views", "expand -1 in a new dimension", [] { zeros({2}).expand({-1, 2}); });
  err("views", "expand a size that is not 1", [] { zeros({2}).expand({3}); });
  err("views", "narrow length INT64_MAX", [] { arange(4).narrow(0, 1, kMax); });
  err("views", "narrow start past the end", [] { arange(4).narrow(0, 5, 0); });
  err("views", "select index out of range", [] { zeros({2}).select(0, 2); });
  err("views", "select dim out of range", [] { zeros({2}).select(1, 0); });
  err("views", "transpose dim out of range", [] { zeros({2, 2}).transpose(0, 2); });
  err("views", "permute a repeated dim", [] { zeros({2, 2}).permute({0, 0}); });
  err("views", "slice step 0", [] { arange(4).slice(0, 0, 4, 0); });
  err("views", "squeeze dim out of range", [] { zeros({2}).squeeze(3); });
  err("views", "matmul of expanded [2^32, 1] x [1, 2^32]", [] {
    matmul(ones({1, 1}).expand({1LL << 32, 1}), ones({1, 1}).expand({1, 1LL << 32}));
  });
  ok("views", "slice step INT64_MAX keeps one element", [] {
    Tensor s = arange(4).slice(0, 0, 4, kMax);
    expect(s.numel() == 1 && s.item<double>() == 0, "slice(0, 0, 4, INT64_MAX) is not [0]");
  });
  ok("views", "expand [2^40] of one element reduces", [] {
    expect(ones({1}).expand({1LL << 40}).view({1LL << 20, 1LL << 20}).numel() == 1LL << 40,
           "a fitting expand was refused");
  });

  // ---- dtype rules (#16, #23)
  err("dtypes", "int64 add_ float32", [] {
    add_(from_vector<int64_t>({1, 2}), from_vector<float>({0.5f, 0.5f}));
  });
  err("dtypes", "int64 mul_ 2.5", [] { mul_(from_vector<int64_t>({1, 2}), 2.5); });
  err("dtypes", "bool add_ int64", [] {
    add_(from_vector<int64_t>({0, 1}).to(DType::Bool), from_vector<int64_t>({1, 1}));
  });
  err("dtypes", "int64 add_ with alpha 0.5", [] {
    Tensor i = from_vector<int64_t>({1});
    add_(i, i, 0.5);
  });
  err("dtypes", "silu of int64", [] { silu(from_vector<int64_t>({1})); });
  ok("dtypes", "float to int64 saturates, NaN is 0", [] {
    auto got = from_vector<float>({NAN, INFINITY, -INFINITY, 1e30f, 2.9f})
                   .to(DType::Int64)
                   .to_vector<int64_t>();
    expect(got == std::vector<int64_t>{0, kMax, std::numeric_limits<int64_t>::min(), kMax, 2},
           "float -> int64 conversion gave other values");
  });
  err("dtypes", "add of [2] and [3]", [] { add(zeros({2}), zeros({3})); });
  err("dtypes", "matmul [2, 3] x [4, 5]", [] { matmul(zeros({2, 3}), zeros({4, 5})); });
  err("dtypes", "item of two elements", [] { zeros({2}).item<float>(); });

  // ---- autograd (#16)
  err("autograd", "backward of a non-scalar", [] {
    Tensor x = ones({2}, {.requires_grad = true});
    backward(mul(x, 2.0));
  });
  err("autograd", "backward of a tensor without grad", [] { backward(sum(ones({2}))); });
  err("autograd", "backward twice without retain_graph", [] {
    Tensor x = ones({2}, {.requires_grad = true});
    Tensor l = sum(mul(x, x));
    backward(l);
    backward(l);
  });
  err("autograd", "backward with a gradient of the wrong shape", [] {
    Tensor x = ones({2}, {.requires_grad = true});
    backward(mul(x, 2.0), ones({3}));
  });
  ok("autograd", "a backward returning float64 is cast to float32", [] {
    auto op = custom_op("probe::double_grad", copy_of);
    op.register_autograd(
        [](AutogradContext&, const Tensor& g) { return mul(g.to(DType::Float64), 2.0); },
        [](AutogradContext&, const Tensor&, const Tensor&) {});
    Tensor x = from_vector<float>({1, 2});
    x.requires_grad_();
    backward(sum(op(x)));
    expect(x.grad().defined() && x.grad().dtype() == DType::Float32, "x.grad is not float32");
    expect(x.grad().to_vector<float>() == std::vector<float>{2, 2}, "x.grad is not [2, 2]");
  });
  err("autograd", "a backward returning another device", [] {
    auto op = custom_op("probe::cuda_grad", copy_of);
    op.register_autograd(
        [](AutogradContext&, const Tensor& g) {
          return fake_empty(g.sizes(), {.dtype = g.dtype(), .device = Device("cuda:0")});
        },
        [](AutogradContext&, const Tensor&, const Tensor&) {});
    Tensor x = from_vector<float>({1, 2});
    x.requires_grad_();
    backward(sum(op(x)));
  });
  err("autograd", "a backward returning the wrong shape", [] {
    auto op = custom_op("probe::shape_grad", copy_of);
    op.register_autograd([](AutogradContext&, const Tensor&) { return ones({5}); },
                         [](AutogradContext&, const Tensor&, const Tensor&) {});
    Tensor x = from_vector<float>({1, 2});
    x.requires_grad_();
    backward(sum(op(x)));
  });
  err("autograd", "requires_grad on an int64 tensor",
      [] { from_vector<int64_t>({1}).requires_grad_(); });

  // ---- schemas and the dispatcher (#16, #23)
  for (const char* s :
       {"", "ns::f(", "ns::f(Tensor x) ->", "ns::f(Tensor x) -> Tensor extra more",
        "ns::1f(Tensor x) -> Tensor", "ns::f(Foo x) -> Tensor", "ns::f(Tensor x=3) -> Tensor",
        "ns::f(int[] d=[1,\n2.5]) -> Tensor", "ns::f(Tensor x, Tensor x) -> Tensor",
        "ns::f(Tensor(a! x) -> Tensor", "ns::f(int x=99999999999999999999) -> Tensor",
        "ns::f.(Tensor x) -> Tensor", "ns::f(Tensor? ?x) -> Tensor", "::f(Tensor x) -> Tensor"})
    err("schema", std::string("parse ") + quoted(s), [s] { parse_schema(s); });
  err("schema", "op name with a NUL byte", [] { check_operator_name(std::string("ns::a\0b", 7)); });
  err("schema", "op name with a terminal escape",
      [] { dispatcher().find_or_throw("ns::\x1b[2Jx"); });
  err("dispatch", "find an op without a namespace", [] { dispatcher().find_or_throw("silu"); });
  err("dispatch", "find an unknown op", [] { dispatcher().find_or_throw("mt::silly"); });
  err("dispatch", "dump an unknown op", [] { dispatcher().dump("ns::no_such_op"); });
  err("dispatch", "call an unknown op by name", [] { call<Tensor>("probe::nothing", zeros({1})); });
  err("dispatch", "call by name with the wrong C++ types", [] { call<Tensor>("mt::silu", 1.0); });
  err("dispatch", "typed() with the wrong signature",
      [] { dispatcher().find_or_throw("mt::silu").typed<Tensor(const Tensor&, const Tensor&)>(); });
  err("dispatch", "boxed call with too many arguments", [] {
    Stack s{zeros({1}), zeros({1}), zeros({1})};
    dispatcher().find_or_throw("mt::silu").call_boxed(&s);
  });
  err("dispatch", "boxed call missing an argument", [] {
    Stack s;
    dispatcher().find_or_throw("mt::silu").call_boxed(&s);
  });
  err("dispatch", "a second defining Library names the user's line", [] {
    Library a(Library::Kind::Def, "probe_twice");
    try {
      Library b(Library::Kind::Def, "probe_twice");
    } catch (const Error& e) {
      expect(
          std::string_view(e.what()).find("tests/robustness/probe.cpp:") != std::string_view::npos,
          std::string("the message does not name this file: ") + e.what());
      throw;
    }
  });
  err("dispatch", "def twice", [] {
    Library a(Library::Kind::Def, "probe_def");
    a.def("op(Tensor x) -> Tensor");
    a.def("op(Tensor x) -> Tensor");
  });
  err("dispatch", "impl whose signature disagrees", [] {
    Library a(Library::Kind::Def, "probe_sig");
    a.def("op(Tensor x) -> Tensor");
    a.impl("op", DispatchKey::CPU, [](const Tensor& x, int64_t) { return x; });
  });
  err("dispatch", "no kernel for the backend", [] {
    Library a(Library::Kind::Def, "probe_nocuda");
    a.def("op(Tensor x) -> Tensor");
    a.impl("op", DispatchKey::CPU, copy_of);
    IncludeDispatchKeyGuard cuda(DispatchKey::CUDA);
    call<Tensor>("probe_nocuda::op", zeros({1}));
  });
  err("dispatch", "no Fake kernel", [] {
    auto op = custom_op("probe::nofake", copy_of);
    op(fake_empty({2}));
  });
  err("dispatch", "a typed handle of a dropped op", [] {
    auto lib = std::make_unique<Library>(Library::Kind::Def, "probe_drop");
    lib->def("op(Tensor x) -> Tensor");
    lib->impl("op", DispatchKey::CPU, copy_of);
    auto h = dispatcher().find_or_throw("probe_drop::op").typed<Tensor(const Tensor&)>();
    lib.reset();
    h(zeros({1}));
  });
  err("dispatch", "a boxed call through a handle of a dropped op", [] {
    auto lib = std::make_unique<Library>(Library::Kind::Def, "probe_drop");
    lib->def("op(Tensor x) -> Tensor");
    lib->impl("op", DispatchKey::CPU, copy_of);
    OperatorHandle h = dispatcher().find_or_throw("probe_drop::op");
    lib.reset();
    Stack s{zeros({1})};
    h.call_boxed(&s);
  });
  ok("dispatch", "define and drop an op while threads call it", race_define_and_drop);
  err("dispatch", "Library with a bad namespace", [] { Library a(Library::Kind::Def, "1bad"); });

  // ---- jit (no GPU needed: these fail before a compile)
  err("jit", "pointwise expression with a syntax error", [] { jit::pointwise("probe", "x +* y"); });
  err("jit", "pointwise expression with an unknown function",
      [] { jit::pointwise("probe", "frob(x)"); });
  err("jit", "pointwise with an empty expression", [] { jit::pointwise("probe", ""); });
  err("jit", "pointwise with a wrong input count",
      [] { jit::pointwise("probe", "x * y")(ones({1})); });
  ok("jit", "pointwise on an int64 tensor computes in float32", [] {
    Tensor y = jit::pointwise("probe", "x * 2")(from_vector<int64_t>({1, 3}));
    expect(y.dtype() == DType::Float32 && y.to_vector<float>() == std::vector<float>{2, 6},
           "x * 2 of int64 [1, 3] is not float32 [2, 6]");
  });
  err("jit", "pointwise with two outputs called for one", [] {
    jit::pointwise(
        {.name = "probe2", .inputs = {"x"}, .outputs = {"y", "z"}, .body = "y = x; z = x;"})(
        ones({1}));
  });

  // ---- the pointwise language and the JIT's names (#41): nesting, names pasted into the
  // generated source, escapes in messages, an empty Pointwise, many literals
  auto repeat = [](std::string_view s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
  };
  for (const auto& [what, body] : std::vector<std::pair<std::string, std::string>>{
           {"10,000 nested parentheses", repeat("(", 10000) + "x" + repeat(")", 10000)},
           {"2,500 nested parentheses", repeat("(", 2500) + "x" + repeat(")", 2500)},
           {"100,000 unary minuses", repeat("-", 100000) + "x"},
           {"100,000 '!'", repeat("!", 100000) + "x"},
           {"100,000 casts", repeat("(float)", 100000) + "x"},
           {"10,000 nested calls", repeat("exp(", 10000) + "x" + repeat(")", 10000)},
           {"a 100,000-arm ?: chain", repeat("x ? 1 : ", 100000) + "x"},
           {"a comment ending in a backslash", "x // c \\\n + 1"},
           {"a NUL in a comment", std::string("x // a\0b", 8)},
           {"the literal 1e999", "x + 1e999"},
           {"a terminal escape", "x \x1b[2J"},
           {"a NUL", std::string("x +\0 1", 6)},
           {"a UTF-8 letter", "x + \xc3\xa9"},
       })
    err("jit", "pointwise body with " + what, [body] { jit::pointwise("probe", body); });
  err("jit", "pointwise name with a newline and an #include",
      [] { jit::pointwise("f\n#include \"/etc/hostname\"\n", "x"); });
  err("jit", "pointwise input name with a terminal escape",
      [] { jit::pointwise({.name = "probe", .inputs = {"x\x1b[2J"}, .body = "x"}); });
  err("jit", "a default-constructed Pointwise called", [] { jit::Pointwise()(ones({1})); });
  ok("jit", "pointwise body of 2 MiB of '+1' parses", [repeat] {
    const auto f = jit::pointwise("probe", "x" + repeat("+1", size_t(1) << 20));
    expect(mt::jit::expr::program_of(f).nodes.size() == (size_t(2) << 20) + 1,
           "the node count is not 2^21 + 1");
  });
  err("jit", "kernel name expression with a newline",
      [] { jit::kernel("__global__ void k() {}", "k\n#include \"/etc/hostname\""); });
  err("jit", "kernel source with a NUL",
      [] { jit::kernel(std::string("__global__ void k() {}\0", 23), "k"); });

  // ---- the kernel cache (#16, #23): hostile entries must be handled, not trusted
  ok("cache", "an entry forged from another kernel's file is refused", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path, .warn = false});
    const std::string a(64, 'a'), b(64, 'b');
    expect(cache.store(a, fake_cubin("A")) && cache.store(b, fake_cubin("B")), "store failed");
    std::ifstream in(cache.path_for(a), std::ios::binary);
    std::string forged((std::istreambuf_iterator<char>(in)), {});
    const size_t at = forged.find(a);
    expect(at != std::string::npos, "no key field");
    forged.replace(at, 64, b);
    std::ofstream(cache.path_for(b), std::ios::binary | std::ios::trunc) << forged;
    auto got = cache.load(b);
    expect(!got.has_value() || got->binary == fake_cubin("B").binary,
           "the forged entry was loaded");
  });
  ok("cache", "a FIFO entry does not hang", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path, .warn = false});
    const std::string k(64, 'c');
    expect(::mkfifo(cache.path_for(k).c_str(), 0600) == 0, "mkfifo failed");
    (void)cache.list();
    expect(!cache.load(k).has_value(), "a FIFO loaded");
  });
  ok("cache", "a directory entry is refused and replaced", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path, .warn = false});
    const std::string k(64, 'e');
    std::filesystem::create_directory(cache.path_for(k));
    expect(!cache.load(k).has_value(), "a directory loaded");
    expect(cache.store(k, fake_cubin("E")) && cache.load(k).has_value(), "no store after it");
  });
  ok("cache", "a 3 GiB sparse entry under a 2 GiB address-space limit", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path, .warn = false});
    const std::string k(64, '0');
    const int fd = ::open(cache.path_for(k).c_str(), O_WRONLY | O_CREAT, 0600);
    expect(fd >= 0 && ::ftruncate(fd, off_t(3) << 30) == 0, "cannot make the sparse file");
    ::close(fd);
#ifndef __SANITIZE_ADDRESS__  // ASan reserves terabytes of shadow memory
    rlimit lim{size_t(2) << 30, size_t(2) << 30};
    ::setrlimit(RLIMIT_AS, &lim);
#endif
    (void)cache.list();
    expect(!cache.load(k).has_value(), "a 3 GiB entry loaded");
  });
  ok("cache", "truncated and bit-flipped entries are refused", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path, .warn = false});
    const std::string k(64, '1');
    expect(cache.store(k, fake_cubin("T")), "store failed");
    std::ifstream in(cache.path_for(k), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    bytes[bytes.size() - 3] ^= 0x20;
    std::ofstream(cache.path_for(k), std::ios::binary | std::ios::trunc) << bytes;
    expect(!cache.load(k).has_value(), "a flipped entry loaded");
    expect(cache.store(k, fake_cubin("T")), "store failed");
    std::filesystem::resize_file(cache.path_for(k), 10);
    expect(!cache.load(k).has_value(), "a truncated entry loaded");
  });
  err("cache", "clear a missing directory", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path + "/missing", .warn = false});
    cache.clear();
  });
  err("cache", "clear a path that is a file", [] {
    TempDir d;
    std::ofstream(d.path + "/file") << "x";
    jit::KernelCache cache({.dir = d.path + "/file", .warn = false});
    cache.clear();
  });
  ok("cache", "a cache directory is created with mode 0700", [] {
    TempDir d;
    jit::KernelCache cache({.dir = d.path + "/new/kernels", .warn = false});
    expect(cache.store(std::string(64, '2'), fake_cubin("M")), "store failed");
    struct stat st {};
    expect(::stat((d.path + "/new/kernels").c_str(), &st) == 0 && (st.st_mode & 0777) == 0700,
           "the directory's mode is not 0700");
  });
  return c;
}

const char* verdict_word(int v) {
  switch (v) {
    case kClearError:
      return "clear error";
    case kHandled:
      return "handled";
    case kUnclearError:
      return "UNCLEAR ERROR";
    case kOtherException:
      return "NON-mt::Error EXCEPTION";
    case kAccepted:
      return "ACCEPTED (no error)";
    case kWrongResult:
      return "WRONG RESULT";
    default:
      return "?";
  }
}

// In the child: run the case, write its message to `fd`, exit with the verdict.
// A case still running then is a hang. The slowest case (a 2 MiB pointwise body) takes a
// few seconds on an idle core, over 20 on 2 cores shared with other builds, and ten times
// longer in the sanitizer build: 60 s, and 180 s there, tell a hang from a busy machine.
#if defined(__SANITIZE_ADDRESS__)
unsigned g_case_seconds = 180;
#else
unsigned g_case_seconds = 60;
#endif

[[noreturn]] void run_child(const Case& k, int fd) {
  ::alarm(g_case_seconds);
  std::string msg;
  int v;
  try {
    k.fn();
    v = k.want == Want::Error ? kAccepted : kHandled;
  } catch (const Error& e) {
    msg = e.what();
    std::string why;
    if (k.want == Want::Result) {
      v = kWrongResult;
      msg = "an error where a result was due: " + msg;
    } else if (clear_format(msg, &why)) {
      v = kClearError;
    } else {
      v = kUnclearError;
      msg = why + ": " + msg;
    }
  } catch (const Wrong& w) {
    v = kWrongResult;
    msg = w.what;
  } catch (const std::exception& e) {
    v = kOtherException;
    msg = std::string(typeid(e).name()) + ": " + e.what();
  }
  const ssize_t n = ::write(fd, msg.data(), msg.size());
  (void)n;
  std::fflush(nullptr);
  ::_exit(v);
}

// --self-test: one case of each kind of failure, to show that the harness counts each
// and goes on (the expected summary line is checked by main).
std::vector<Case> self_test_cases() {
  std::vector<Case> c;
  c.push_back({"self", "a clear error", Want::Error, [] { zeros({2}).view({3}); }});
  c.push_back({"self", "a handled input", Want::Result, [] { expect(true, ""); }});
  c.push_back({"self", "a crash", Want::Error, [] { ::raise(SIGSEGV); }});
  c.push_back({"self", "a hang", Want::Error, [] { ::pause(); }});
  c.push_back({"self", "an unclear error", Want::Error, [] { MT_ERROR("no brackets"); }});
  c.push_back({"self", "another exception", Want::Error, [] { throw std::runtime_error("x"); }});
  c.push_back({"self", "an accepted input", Want::Error, [] {}});
  c.push_back({"self", "a wrong result", Want::Result, [] { expect(false, "wrong"); }});
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false, self_test = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-v") == 0)
      verbose = true;
    else if (std::strcmp(argv[i], "--self-test") == 0)
      self_test = true;
    else
      filter = argv[i];
  }
  if (self_test) g_case_seconds = 1;
  // The parent never touches the library: each child starts from a clean process.
  const std::vector<Case> cases = self_test ? self_test_cases() : make_cases();
  int n = 0, clear = 0, handled = 0, crashes = 0, hangs = 0, unclear = 0, other = 0, accepted = 0,
      wrong = 0;
  for (const Case& k : cases) {
    if (!filter.empty() && k.name.find(filter) == std::string::npos) continue;
    ++n;
    int pipefd[2];
    if (::pipe(pipefd) != 0) return 2;
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      ::close(pipefd[0]);
      run_child(k, pipefd[1]);
    }
    ::close(pipefd[1]);
    std::string msg;
    char buf[4096];
    ssize_t r;
    while ((r = ::read(pipefd[0], buf, sizeof buf)) > 0) msg.append(buf, size_t(r));
    ::close(pipefd[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::string verdict;
    bool bad = true;
    if (WIFSIGNALED(status)) {
      if (WTERMSIG(status) == SIGALRM) {
        ++hangs;
        verdict = "HANG (killed after " + std::to_string(g_case_seconds) + " s)";
      } else {
        ++crashes;
        verdict = std::string("CRASH (") + strsignal(WTERMSIG(status)) + ")";
      }
    } else {
      const int v = WEXITSTATUS(status);
      verdict = verdict_word(v);
      bad = false;
      switch (v) {
        case kClearError:
          ++clear;
          break;
        case kHandled:
          ++handled;
          break;
        case kUnclearError:
          ++unclear;
          bad = true;
          break;
        case kOtherException:
          ++other;
          bad = true;
          break;
        case kAccepted:
          ++accepted;
          bad = true;
          break;
        case kWrongResult:
          ++wrong;
          bad = true;
          break;
        default:
          ++crashes;
          bad = true;
          verdict = "CRASH (exit status " + std::to_string(v) + ")";
      }
    }
    if (bad || verbose) {
      const std::string first = msg.substr(0, msg.find('\n'));
      std::printf("%-9s %-55s %s%s%s\n", k.area, k.name.c_str(), verdict.c_str(),
                  first.empty() ? "" : ": ", first.c_str());
    }
  }
  const std::string summary = fmt::format(
      "{} cases, {} clear errors, {} crashes ({} handled, {} hangs, {} unclear errors, {} other "
      "exceptions, {} accepted, {} wrong results)",
      n, clear, crashes, handled, hangs, unclear, other, accepted, wrong);
  std::printf("%s\n", summary.c_str());
  if (self_test) {
    const char* want =
        "8 cases, 1 clear errors, 1 crashes (1 handled, 1 hangs, 1 unclear errors, 1 other "
        "exceptions, 1 accepted, 1 wrong results)";
    std::printf("self-test: %s\n", summary == want ? "every kind counted" : "WRONG COUNTS");
    return summary == want ? 0 : 1;
  }
  return n > 0 && clear + handled == n ? 0 : 1;
}
