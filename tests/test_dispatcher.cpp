// SPDX-License-Identifier: MIT
// The dispatcher: registry, keys, tables, boxed and unboxed calls, Library RAII,
// registration order, errors, trace and log output, concurrency.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "dispatcher/library.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

Tensor plus_one(const Tensor& x) {
  Tensor out = empty_like(x);
  auto in = x.contiguous();
  for (int64_t i = 0; i < x.numel(); ++i) out.data_ptr<float>()[i] = in.data_ptr<float>()[i] + 1;
  return out;
}

std::string loc(int line) { return fmt::format("tests/test_dispatcher.cpp:{}", line); }

}  // namespace

TEST_CASE("def + impl: a CPU kernel runs through typed, boxed and by-name calls") {
  Library lib(Library::Kind::Def, "test_basic");
  lib.def("plus_one(Tensor x) -> Tensor");
  lib.impl("plus_one", DispatchKey::CPU, plus_one);
  Tensor x = from_vector<float>({1, 2, 3});

  auto op = dispatcher().find_or_throw("test_basic::plus_one").typed<Tensor(const Tensor&)>();
  CHECK(op(x).to_vector<float>() == std::vector<float>{2, 3, 4});

  Stack s{x};
  dispatcher().find_or_throw("test_basic::plus_one").call_boxed(&s);
  REQUIRE(s.size() == 1);
  CHECK(s[0].to_tensor().to_vector<float>() == std::vector<float>{2, 3, 4});

  CHECK(call<Tensor>("test_basic::plus_one", x).to_vector<float>() == std::vector<float>{2, 3, 4});
  // a kernel taking Tensor by value has the same schema as one taking const Tensor&
  auto by_value = dispatcher().find_or_throw("test_basic::plus_one").typed<Tensor(Tensor)>();
  CHECK(by_value(x).to_vector<float>() == std::vector<float>{2, 3, 4});
}

TEST_CASE("typed handles check the C++ signature against the schema once") {
  Library lib(Library::Kind::Def, "test_typed");
  lib.def("scale(Tensor x, float alpha=2.0) -> Tensor");
  auto h = dispatcher().find_or_throw("test_typed::scale");
  CHECK_NOTHROW(h.typed<Tensor(const Tensor&, double)>());
  CHECK_THROWS_WITH_AS(h.typed<Tensor(const Tensor&, int64_t)>(),
                       "[typed()] the C++ signature (Tensor, int) -> Tensor does not match the "
                       "schema of 'test_typed::scale': test_typed::scale(Tensor x, float "
                       "alpha=2.0) -> Tensor; change the C++ types to match the schema",
                       Error);
}

TEST_CASE(
    "impl: a kernel whose signature disagrees with the schema is refused, leaving all as it was") {
  Library lib(Library::Kind::Def, "test_sig");
  lib.def("f(Tensor x, int n) -> Tensor");
  std::string before = dispatcher().dump("test_sig::f");
  int line = __LINE__ + 1;
  auto bad = [&] { lib.impl("f", DispatchKey::CPU, [](const Tensor& x, double) { return x; }); };
  CHECK_THROWS_WITH_AS(bad(),
                       fmt::format("[impl] the CPU kernel for 'test_sig::f' (at {}) has the C++ "
                                   "signature (Tensor, float) -> Tensor, but the schema is "
                                   "test_sig::f(Tensor x, int n) -> Tensor; change the kernel's "
                                   "parameter and return types to match",
                                   loc(line))
                           .c_str(),
                       Error);
  CHECK(dispatcher().dump("test_sig::f") == before);
  CHECK(lib.size() == 1);
}

TEST_CASE("schema inference from a C++ signature") {
  auto fn = [](const Tensor&, std::optional<Tensor>, int64_t, double, bool, std::string,
               std::vector<int64_t>, DType, Device,
               std::vector<Tensor>) { return std::tuple<Tensor, Tensor>(); };
  CHECK(infer_schema<decltype(fn)>("ns::op").str() ==
        "ns::op(Tensor _0, Tensor? _1, int _2, float _3, bool _4, str _5, int[] _6, "
        "ScalarType _7, Device _8, Tensor[] _9) -> (Tensor, Tensor)");
  auto keyed = [](DispatchKeySet, const Tensor& x) { return x; };
  CHECK(infer_schema<decltype(keyed)>("ns::k").str() == "ns::k(Tensor _0) -> Tensor");
  auto none = [](const Tensor&) {};
  CHECK(infer_schema<decltype(none)>("ns::v").str() == "ns::v(Tensor _0) -> ()");
}

TEST_CASE("the missing-kernel error names the backend, the available ones and the table") {
  Library lib(Library::Kind::Def, "test_missing");
  lib.def("op(Tensor x) -> Tensor");
  int cpu_line = __LINE__ + 1;
  lib.impl("op", DispatchKey::CPU, plus_one);
  int fake_line = __LINE__ + 1;
  lib.impl("op", DispatchKey::Fake, [](const Tensor& x) { return fake_like(x); });
  auto op = dispatcher().find_or_throw("test_missing::op").typed<Tensor(const Tensor&)>();
  std::string dumped = dispatcher().dump_table("test_missing::op");
  // Trace and Autograd may carry the library's own fallbacks; check the rest exactly
  CHECK(dumped.find(fmt::format("  Fake      kernel      [{}]\n", loc(fake_line))) !=
        std::string::npos);
  CHECK(dumped.find("  CUDA      missing\n") != std::string::npos);
  CHECK(dumped.find(fmt::format("  CPU       kernel      [{}]\n", loc(cpu_line))) !=
        std::string::npos);

  IncludeDispatchKeyGuard pretend_cuda(DispatchKey::CUDA);
  std::string msg;
  try {
    op(from_vector<float>({1}));
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.starts_with(
      "[test_missing::op] Could not run 'test_missing::op' with arguments from "
      "the 'CUDA' backend. 'test_missing::op' is only available for these backends: [CPU, Fake].\n"
      "test_missing::op\n"));
  CHECK(msg.find("  CUDA      missing\n") != std::string::npos);
}

TEST_CASE("register_fake pitfall: an op without a Fake kernel says how to add one") {
  Library lib(Library::Kind::Def, "test_nofake");
  lib.def("op(Tensor x) -> Tensor");
  lib.impl("op", DispatchKey::CPU, plus_one);
  Tensor f = fake_empty({2});
  std::string msg;
  try {
    call<Tensor>("test_nofake::op", f);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.starts_with(
      "[test_nofake::op] 'test_nofake::op' has no Fake kernel; register one with "
      "register_fake (or m.impl(\"op\", ...) in MT_LIBRARY_IMPL(test_nofake, Fake, m)), so that it "
      "can run on fake tensors.\ntest_nofake::op\n"));
}

TEST_CASE("an Autograd-key kernel redispatches below itself; a fallthrough skips its key") {
  Library lib(Library::Kind::Def, "test_redispatch");
  lib.def("op(Tensor x) -> Tensor");
  lib.impl("op", DispatchKey::CPU, plus_one);
  std::vector<std::string> seen;
  auto op = [&] {
    return dispatcher().find_or_throw("test_redispatch::op").typed<Tensor(const Tensor&)>();
  };
  {
    Library ag(Library::Kind::Impl, "test_redispatch", DispatchKey::Autograd);
    ag.impl("op", [&](DispatchKeySet ks, const Tensor& x) {
      seen.push_back(ks.str());
      return op().redispatch(ks.below(DispatchKey::Autograd), x);
    });
    Tensor x = from_vector<float>({1});
    x.requires_grad_();
    CHECK(op()(x).item<float>() == 2);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0] == "{Autograd, CPU}");
  }
  {
    Library ag(Library::Kind::Impl, "test_redispatch", DispatchKey::Autograd);
    ag.impl("op", fallthrough());
    Tensor x = from_vector<float>({1});
    x.requires_grad_();
    CHECK(op()(x).item<float>() == 2);
    CHECK(dispatcher().dump_table("test_redispatch::op").find("  Autograd  fallthrough") !=
          std::string::npos);
  }
  CHECK(seen.size() == 1);  // the first Library's kernel is gone with it
}

TEST_CASE("Library undoes its registrations when destroyed; the previous kernel comes back") {
  Library def(Library::Kind::Def, "test_raii");
  def.def("op(Tensor x) -> Tensor");
  def.impl("op", DispatchKey::CPU, plus_one);
  auto op = dispatcher().find_or_throw("test_raii::op").typed<Tensor(const Tensor&)>();
  Tensor x = from_vector<float>({1});
  {
    Library over(Library::Kind::Impl, "test_raii", DispatchKey::CPU);
    over.impl("op", [](const Tensor& t) { return full_like(t, 42); });
    CHECK(op(x).item<float>() == 42);
    CHECK(dispatcher().dump("test_raii::op").find("(inactive)") != std::string::npos);
  }
  CHECK(op(x).item<float>() == 2);
  CHECK(dispatcher().dump("test_raii::op").find("(inactive)") == std::string::npos);
}

// A block registered at static-initialization time (its location goes through LibraryInit).
const int kBlockLine = __LINE__ + 1;
MT_LIBRARY(test_block_def, m) { m.def("op(Tensor x) -> Tensor"); }

TEST_CASE("a second defining library names the MT_LIBRARY block's own line") {
  CHECK_THROWS_WITH_AS(Library(Library::Kind::Def, "test_block_def"),
                       fmt::format("[library] namespace 'test_block_def' is already defined by the "
                                   "library at {}; a namespace has one MT_LIBRARY: add ops to it "
                                   "from elsewhere with MT_LIBRARY_FRAGMENT(test_block_def, m)",
                                   loc(kBlockLine))
                           .c_str(),
                       Error);
  CHECK(dispatcher().dump("test_block_def::op").find("registered at " + loc(kBlockLine) + "\n") !=
        std::string::npos);
}

namespace {
// Where the dump of `op` says its kernel for `key` ("CPU ", "CUDA", "Fake") was registered.
std::string kernel_location(const char* op, std::string_view key) {
  const std::string dump = dispatcher().dump_table(op);
  const size_t at = dump.find(fmt::format("  {:<10}kernel      [", key));
  if (at == std::string::npos) return "no " + std::string(key) + " kernel in:\n" + dump;
  const size_t open = dump.find('[', at), close = dump.find(']', open);
  return dump.substr(open + 1, close - open - 1);
}
}  // namespace

TEST_CASE("built-in ops registered through a helper name their own line, not the helper's") {
  // Each pair is registered through one helper from two lines of one file.
  const std::vector<std::array<const char*, 3>> pairs = {
      {"mt::view", "mt::reshape", "kernels/ops/views.cpp:"},
      {"mt::clone", "mt::copy_", "kernels/ops/copy.cpp:"},
      {"mt::softmax", "mt::log_softmax", "kernels/ops/softmax/softmax.cpp:"},
      {"mt::sum", "mt::mean", "kernels/ops/reduce/reduce.cpp:"},
  };
  for (const auto& pair : pairs) {
    const auto& [a, b, file] = pair;
    CAPTURE(std::get<0>(pair));  // not a: clang 15 does not let CAPTURE's lambda take a binding
    for (const char* key : {"CPU", "CUDA", "Fake", "Autograd"}) {
      if (std::string_view(a) == "mt::clone" && std::string_view(key) == "Autograd")
        continue;  // copy_ has no autograd formula
      CAPTURE(key);
      const std::string la = kernel_location(a, key), lb = kernel_location(b, key);
      CHECK(la.starts_with(file));
      CHECK(lb.starts_with(file));
      CHECK(la != lb);
    }
  }
  // Ops registered with custom_op directly already name their line.
  CHECK(kernel_location("mt::matmul", "CPU").starts_with("kernels/ops/matmul/matmul.cpp:"));
  CHECK(kernel_location("mt::mse_loss", "CUDA").starts_with("kernels/ops/loss/loss.cpp:"));
  CHECK(kernel_location("mt::silu", "CUDA").starts_with("kernels/ops/silu/silu.cpp:"));
}

TEST_CASE("only one defining library per namespace; fragments add to it") {
  Library a(Library::Kind::Def, "test_once");
  int def_line = __LINE__ + 1;
  a.def("x(Tensor a) -> Tensor");
  int line = __LINE__ + 1;
  auto second = [] { Library b(Library::Kind::Def, "test_once"); };
  (void)line;
  std::string msg;
  try {
    second();
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(
      msg.starts_with("[library] namespace 'test_once' is already defined by the library at "
                      "tests/test_dispatcher.cpp:"));
  CHECK(
      msg.ends_with("a namespace has one MT_LIBRARY: add ops to it from elsewhere with "
                    "MT_LIBRARY_FRAGMENT(test_once, m)"));
  Library frag(Library::Kind::Fragment, "test_once");
  frag.def("y(Tensor a) -> Tensor");
  CHECK(dispatcher().find("test_once::y").has_value());
  CHECK_THROWS_WITH_AS(a.def("x(Tensor a) -> Tensor"),
                       fmt::format("[def] 'test_once::x' is already defined (at {}); define each "
                                   "op once, or use an overload name such as 'test_once::x.v2'",
                                   loc(def_line))
                           .c_str(),
                       Error);
}

TEST_CASE("find_or_throw: a bad name explains namespace::op; an unknown one lists close names") {
  Library lib(Library::Kind::Def, "test_find");
  lib.def("silu(Tensor x) -> Tensor");
  CHECK_THROWS_WITH_AS(dispatcher().find_or_throw("test_find::sillu"),
                       "[dispatcher] no operator named 'test_find::sillu' is registered; did you "
                       "mean: test_find::silu?",
                       Error);
  std::string msg;
  try {
    dispatcher().find_or_throw("test_find_silu");
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("namespace::op_name") != std::string::npos);
  CHECK(msg.find("did you mean 'test_find::silu'?") != std::string::npos);
  CHECK_FALSE(dispatcher().find("test_find::nothing").has_value());
}

TEST_CASE("find_dangling_impls lists impls without a def") {
  Library impl(Library::Kind::Impl, "test_dangling", DispatchKey::CPU);
  impl.impl("typo_op", plus_one);
  auto d = dispatcher().find_dangling_impls();
  CHECK(std::find(d.begin(), d.end(), "test_dangling::typo_op") != d.end());
  CHECK_THROWS_AS(dispatcher().find_or_throw("test_dangling::typo_op"), Error);
}

TEST_CASE("boxed calls fill defaults and check arguments") {
  Library lib(Library::Kind::Def, "test_boxed");
  lib.def("scale(Tensor x, float alpha=3.0, *, bool neg=False) -> Tensor");
  lib.impl("scale", DispatchKey::CPU, [](const Tensor& x, double a, bool neg) {
    Tensor out = empty_like(x);
    out.fill_((neg ? -a : a) * x.item<float>());
    return out;
  });
  auto h = dispatcher().find_or_throw("test_boxed::scale");
  Stack s{from_vector<float>({2})};
  h.call_boxed(&s);
  CHECK(s[0].to_tensor().item<float>() == 6);
  Stack s2{from_vector<float>({2}), 0.5, true};
  h.call_boxed(&s2);
  CHECK(s2[0].to_tensor().item<float>() == -1);
  Stack s3{};
  CHECK_THROWS_WITH_AS(h.call_boxed(&s3),
                       "[call_boxed] 'test_boxed::scale' needs argument 'x' (Tensor), which has no "
                       "default; the schema is test_boxed::scale(Tensor x, float alpha=3.0, *, "
                       "bool neg=False) -> Tensor",
                       Error);
  Stack s4{from_vector<float>({2}), std::string("no")};
  CHECK_THROWS_WITH_AS(h.call_boxed(&s4),
                       "[boxed] expected a value of type float on the stack, got str; the boxed "
                       "arguments do not match the operator's schema",
                       Error);
}

TEST_CASE("a boxed fallback sees every op's arguments and can redispatch") {
  Library lib(Library::Kind::Def, "test_fallback");
  lib.def("op(Tensor x, int n) -> Tensor");
  lib.impl("op", DispatchKey::CPU,
           [](const Tensor& x, int64_t n) { return full_like(x, double(n)); });
  std::vector<std::string> calls;
  Library fb(Library::Kind::Impl, "_", DispatchKey::Trace);
  fb.fallback([&](const OperatorHandle& op, DispatchKeySet ks, Stack* s) {
    calls.push_back(fmt::format("{} n={}", op.name().str(), s->back().to_int()));
    op.redispatch_boxed(ks.below(DispatchKey::Trace), s);
  });
  auto op = dispatcher().find_or_throw("test_fallback::op").typed<Tensor(const Tensor&, int64_t)>();
  CHECK(op(zeros({1}), 5).item<float>() == 5);  // Trace is not in the key set: not called
  CHECK(calls.empty());
  IncludeDispatchKeyGuard trace(DispatchKey::Trace);
  CHECK(op(zeros({1}), 5).item<float>() == 5);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0] == "test_fallback::op n=5");
}

TEST_CASE("MT_TRACE=dispatch: every call and redispatch with its keys, indented by depth") {
  Library lib(Library::Kind::Def, "test_trace");
  lib.def("op(Tensor x) -> Tensor");
  int cpu_line = __LINE__ + 1;
  lib.impl("op", DispatchKey::CPU, plus_one);
  auto op = [] {
    return dispatcher().find_or_throw("test_trace::op").typed<Tensor(const Tensor&)>();
  };
  int ag_line = __LINE__ + 1;
  lib.impl("op", DispatchKey::Autograd, [&](DispatchKeySet ks, const Tensor& x) {
    return op().redispatch(ks.below(DispatchKey::Autograd), x);
  });
  auto h = op();
  Tensor x = from_vector<float>({1});
  x.requires_grad_();
  LogCapture cap;
  Dispatcher::singleton().set_trace_dispatch(true);
  h(x);
  Dispatcher::singleton().set_trace_dispatch(false);
  REQUIRE(cap.lines.size() == 2);
  CHECK(cap.lines[0] ==
        fmt::format("[call] test_trace::op keys={{Autograd, CPU}} -> Autograd kernel [{}]",
                    loc(ag_line)));
  CHECK(cap.lines[1] == fmt::format("  [redispatch] test_trace::op keys={{CPU}} -> CPU kernel [{}]",
                                    loc(cpu_line)));
}

TEST_CASE("MT_LOG=registration: every registration and deregistration with file:line") {
  LogCapture cap;
  Dispatcher::singleton().set_log_registrations(true);
  int line = __LINE__ + 3;
  {
    Library lib(Library::Kind::Def, "test_log");
    lib.def("op(Tensor x) -> Tensor");
    lib.impl("op", DispatchKey::CPU, plus_one);
  }
  Dispatcher::singleton().set_log_registrations(false);
  REQUIRE(cap.lines.size() == 4);
  CHECK(cap.lines[0] ==
        fmt::format("[registration] def test_log::op(Tensor x) -> Tensor at {}", loc(line)));
  CHECK(cap.lines[1] ==
        fmt::format("[registration] impl test_log::op for CPU at {}", loc(line + 1)));
  CHECK(cap.lines[2] ==
        fmt::format("[deregistration] impl test_log::op for CPU at {}", loc(line + 1)));
  CHECK(cap.lines[3] ==
        fmt::format("[deregistration] def test_log::op(Tensor x) -> Tensor at {}", loc(line)));
}

TEST_CASE("dump: schema, debug info and every registration, active or not") {
  Library lib(Library::Kind::Def, "test_dump");
  int line = __LINE__ + 1;
  lib.def("op(Tensor x) -> Tensor");
  lib.impl("op", DispatchKey::CPU, plus_one);
  lib.impl("op", DispatchKey::CPU, plus_one);
  lib.impl("op", DispatchKey::Autograd, fallthrough());
  CHECK(dispatcher().dump("test_dump::op") ==
        fmt::format("name: test_dump::op\n"
                    "schema: test_dump::op(Tensor x) -> Tensor\n"
                    "  registered at {}\n"
                    "Autograd: fallthrough registered at {}\n"
                    "CPU: kernel registered at {}\n"
                    "CPU: kernel registered at {} (inactive)\n",
                    loc(line), loc(line + 3), loc(line + 2), loc(line + 1)));
}

namespace {
// One registration of the order test, and what it contributes to the dump.
struct Step {
  const char* what;
  std::function<uint64_t()> add;
};
}  // namespace

TEST_CASE("registration order: the dump and table depend only on which registrations are active") {
  // As PyTorch's test_dispatch.py: register in every order, deregister in every order.
  Dispatcher& d = Dispatcher::singleton();
  std::vector<Step> steps = {
      {"def", [&] { return d.def(parse_schema("test_order::op(Tensor x) -> Tensor"), "def"); }},
      {"cpu",
       [&] {
         return d.impl("test_order::op", DispatchKey::CPU, KernelFunction::make(plus_one), "cpu");
       }},
      {"fake",
       [&] {
         return d.impl("test_order::op", DispatchKey::Fake, KernelFunction::make(plus_one), "fake");
       }},
      {"autograd",
       [&] { return d.impl("test_order::op", DispatchKey::Autograd, fallthrough(), "autograd"); }},
      {"fallback",
       [&] {
         return d.fallback(
             DispatchKey::CUDA,
             KernelFunction::boxed([](const OperatorHandle&, DispatchKeySet, Stack*) {}),
             "fallback");
       }},
  };
  std::map<unsigned, std::string> expected;  // active mask -> dump + table
  auto state = [&] { return d.dump("test_order::op") + d.dump_table("test_order::op"); };
  std::vector<int> order(steps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  int permutations = 0;
  do {
    std::vector<uint64_t> ids(steps.size());
    unsigned mask = 0;
    auto record = [&] {
      std::string s = state();
      auto [it, fresh] = expected.emplace(mask, s);
      CHECK_MESSAGE(it->second == s, "mask ", mask);
    };
    for (int i : order) {
      ids[size_t(i)] = steps[size_t(i)].add();
      mask |= 1u << i;
      record();
    }
    std::vector<int> undo = order;
    std::rotate(undo.begin(), undo.begin() + permutations % int(undo.size()), undo.end());
    for (int i : undo) {
      d.deregister(ids[size_t(i)]);
      mask &= ~(1u << i);
      record();
    }
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(permutations == 120);
  CHECK(expected.size() == 32);  // every subset was reached, each with one state
}
