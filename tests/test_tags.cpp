// SPDX-License-Identifier: MIT
// Tags on op definitions: shown by dump, refused when unknown, obeyed by mt::compile.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

#include "dispatcher/library.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

std::atomic<int> g_effects{0};

// An op with an effect outside its output: it counts its calls.
Tensor count_calls(const Tensor& x) {
  ++g_effects;
  return x.clone();
}

}  // namespace

TEST_CASE("tags: def and custom_op take tags; dump and dump_table print them") {
  Library lib(Library::Kind::Def, "test_tags_def");
  lib.def("plain(Tensor x) -> Tensor");
  lib.def("unsafe(Tensor x) -> Tensor", {.tags = {Tag::cudagraph_unsafe, Tag::side_effect}});
  lib.def("seeded(Tensor x) -> Tensor", {.tag_names = {"nondeterministic_seeded"}});
  CHECK(dispatcher().find_or_throw("test_tags_def::plain").entry()->tags().empty());
  const TagSet unsafe = dispatcher().find_or_throw("test_tags_def::unsafe").entry()->tags();
  CHECK(unsafe == TagSet{Tag::cudagraph_unsafe, Tag::side_effect});
  CHECK(unsafe.str() == "cudagraph_unsafe, side_effect");
  CHECK(dispatcher().find_or_throw("test_tags_def::seeded").entry()->tags() ==
        TagSet{Tag::nondeterministic_seeded});
  CHECK(
      dispatcher().dump("test_tags_def::unsafe").find("\ntags: cudagraph_unsafe, side_effect\n") !=
      std::string::npos);
  CHECK(dispatcher()
            .dump_table("test_tags_def::unsafe")
            .starts_with("test_tags_def::unsafe\n  tags: cudagraph_unsafe, side_effect\n"));
  CHECK(dispatcher().dump("test_tags_def::plain").find("tags:") == std::string::npos);

  auto op = custom_op("test_tags_def::counted", count_calls, {.tags = {Tag::side_effect}});
  CHECK(op.handle().entry()->tags() == TagSet{Tag::side_effect});
}

TEST_CASE("tags: an unknown tag name is an error, and nothing is defined") {
  Library lib(Library::Kind::Def, "test_tags_bad");
  CHECK(
      error_of([&] { lib.def("op(Tensor x) -> Tensor", {.tag_names = {"cuda_graph_unsafe"}}); }) ==
      "[def] unknown tag 'cuda_graph_unsafe'; the tags are: cudagraph_unsafe, "
      "nondeterministic_seeded, side_effect, inplace_view");
  CHECK_FALSE(dispatcher().find("test_tags_bad::op").has_value());
  CHECK(tag_from_name("inplace_view") == Tag::inplace_view);
}

TEST_CASE("tags: compile never fuses across a side_effect op, and calls it on every replay") {
  auto plain = custom_op("test_tags_fx::plain", count_calls);
  auto effect = custom_op("test_tags_fx::effect", count_calls, {.tags = {Tag::side_effect}});
  plain.register_fake([](const Tensor& t) { return empty_like(t); });
  effect.register_fake([](const Tensor& t) { return empty_like(t); });
  auto body = [](auto& op) {
    return [&op](const std::vector<Tensor>& in) {
      Tensor a = exp(in[0]);
      Tensor b = op(in[0]);
      return std::vector<Tensor>{mul(a, 2.0), b};
    };
  };
  Tensor x = from_vector<float>({0, 1, 2});
  Compiled without = mt::compile(body(plain), {.fuse = true});
  (void)without({x});
  CHECK(without.num_fusion_groups() == 1);  // exp and mul fuse over the untagged call

  CompileLog log;
  Compiled with = mt::compile(body(effect), {.fuse = true});
  g_effects = 0;
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) out = with({x});
  CHECK(with.num_fusion_groups() == 0);
  CHECK(g_effects == 3);  // called once a call: not dropped, not cached
  CHECK(out[0].to_vector<float>() == mul(exp(x), 2.0).to_vector<float>());
  CHECK(
      log.has("tags: step 1 test_tags_fx::effect [side_effect]: called through the dispatcher; "
              "nothing is fused or reordered across it"));
}

TEST_CASE(
    "tags: a cudagraph_unsafe op is called eagerly by the CPU replay; the log names the split") {
  auto unsafe = custom_op("test_tags_cg::unsafe", count_calls, {.tags = {Tag::cudagraph_unsafe}});
  unsafe.register_fake([](const Tensor& t) { return empty_like(t); });
  GraphFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(unsafe(add(in[0], 1.0)), 3.0)};
  };
  Tensor x = from_vector<float>({1, 2});
  CompileLog log;
  Compiled c = mt::compile(fn);
  g_effects = 0;
  for (int i = 0; i < 2; ++i) CHECK(c({x})[0].to_vector<float>() == std::vector<float>{6, 9});
  CHECK(g_effects == 2);
  CHECK(
      log.has("tags: step 1 test_tags_cg::unsafe [cudagraph_unsafe]: called through the "
              "dispatcher; on CUDA the graph would be split around it"));
  CHECK(log.has("tags: 1 step(s) run outside CUDA graphs, so a CUDA graph comes in up to 2 parts"));
}

TEST_CASE("tags: a function with an inplace_view op runs eagerly under compile; the log says why") {
  // An op declared to change its input's view metadata in place (as torch's t_ does); its
  // kernels here return the input as it is.
  Library lib(Library::Kind::Def, "test_tags_iv");
  lib.def("mark_(Tensor(a!) self) -> Tensor(a!)", {.tags = {Tag::inplace_view}});
  lib.impl("mark_", DispatchKey::CPU, [](const Tensor& x) { return x; });
  lib.impl("mark_", DispatchKey::Fake, [](const Tensor& x) { return x; });
  auto mark = dispatcher().find_or_throw("test_tags_iv::mark_").typed<Tensor(const Tensor&)>();
  int fn_calls = 0;
  GraphFn fn = [&](const std::vector<Tensor>& in) {
    ++fn_calls;
    return std::vector<Tensor>{mul(mark(add(in[0], 1.0)), 3.0)};
  };
  Tensor x = from_vector<float>({1, 2});
  CompileLog log;
  Compiled c = mt::compile(fn, {.name = "iv"});
  for (int i = 0; i < 3; ++i) CHECK(c({x})[0].to_vector<float>() == std::vector<float>{6, 9});
  // Before: captured once (1 call of fn), then replayed. Now: the capture, then fn itself on
  // each of the 3 calls.
  CHECK(fn_calls == 4);
  CHECK(c.compile_count() == 1);
  CHECK(
      log.has("iv: captured for (float32[2] cpu) (compile #1), runs eagerly: node 1 "
              "test_tags_iv::mark_ is tagged inplace_view: it changes its input's view "
              "metadata (sizes, strides, offset) in place, which a replay's value slots and "
              "input guards do not follow; the function runs eagerly on every call with these "
              "inputs"));
  CHECK(c.plan_str().starts_with("eager    the function itself (node 1 test_tags_iv::mark_ "));
}

TEST_CASE("tags: a nondeterministic_seeded op draws on every replay, as in eager code") {
  auto noisy =
      custom_op("test_tags_rng::noisy", [](const Tensor& x) { return add(x, rand(x.sizes())); },
                {.tags = {Tag::nondeterministic_seeded}});
  noisy.register_fake([](const Tensor& t) { return empty_like(t); });
  GraphFn fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{noisy(in[0])}; };
  Tensor x = zeros({4});
  Compiled c = mt::compile(fn);
  manual_seed(7);
  std::vector<std::vector<float>> eager, compiled;
  for (int i = 0; i < 3; ++i) eager.push_back(fn({x})[0].to_vector<float>());
  manual_seed(7);
  for (int i = 0; i < 3; ++i) compiled.push_back(c({x})[0].to_vector<float>());
  CHECK(compiled == eager);
  CHECK(compiled[1] != compiled[2]);
}

TEST_CASE("tags (gpu): a cudagraph_unsafe op splits the CUDA graph in two; results equal eager" *
          doctest::skip(!cuda::is_available())) {
  auto unsafe = custom_op("test_tags_gpu::unsafe", count_calls, {.tags = {Tag::cudagraph_unsafe}});
  unsafe.register_kernel(DeviceType::CUDA, count_calls);
  unsafe.register_fake([](const Tensor& t) { return empty_like(t); });
  GraphFn fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(unsafe(exp(in[0])), 3.0)};
  };
  auto close = [](const Tensor& a, const Tensor& b) {
    const std::vector<float> va = a.cpu().to_vector<float>(), vb = b.cpu().to_vector<float>();
    if (va.size() != vb.size()) return false;
    for (size_t i = 0; i < va.size(); ++i)
      if (std::abs(va[i] - vb[i]) > 1e-5f * (1 + std::abs(vb[i]))) return false;
    return true;
  };
  const Device dev("cuda:0");
  CompileLog log;
  Compiled c = mt::compile(fn);
  g_effects = 0;
  for (int i = 0; i < 4; ++i) {  // warm-up, capture, two replays
    CAPTURE(i);
    Tensor x = randn({1 << 12}).to(dev);
    CHECK(close(c({x})[0], fn({x})[0]));
  }
  CHECK(g_effects == 8);  // four compiled calls and four eager ones
  CHECK(log.has("captured a CUDA graph in 2 parts around 1 eager step(s) (tags)"));
}
