// SPDX-License-Identifier: MIT
#include <algorithm>
#include <atomic>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "runtime/tensor.h"

namespace mt {

std::vector<Tensor> detail::tensors_of(const Stack& s) {
  std::vector<Tensor> out;
  for (const Value& v : s) {
    if (v.is_tensor()) out.push_back(v.to_tensor());
    if (v.is_tensor_list())
      for (const Tensor& t : v.to_tensor_list()) out.push_back(t);
  }
  return out;
}

namespace {

using Test = OpCheckReport::Test;

Stack clone_stack(const Stack& s) {
  Stack out;
  for (const Value& v : s) {
    if (v.is_tensor() && v.to_tensor().defined()) {
      out.emplace_back(v.to_tensor().detach().clone());
    } else {
      out.push_back(v);
    }
  }
  return out;
}

using detail::tensors_of;

Stack run(const OperatorHandle& op, Stack args) {
  op.call_boxed(&args);
  return args;
}

Test test_schema(const OperatorHandle& op, const std::vector<Stack>& samples) {
  Test t{"test_schema", true, false, ""};
  const FunctionSchema& s = op.schema();
  for (size_t si = 0; si < samples.size() && t.passed; ++si) {
    NoGradGuard no_grad;
    Stack args = clone_stack(samples[si]);
    Stack before = clone_stack(args);
    std::vector<uint32_t> versions;
    for (const Value& v : args)
      versions.push_back(v.is_tensor() && v.to_tensor().defined() ? v.to_tensor().version() : 0);
    Stack outs = run(op, args);
    for (size_t i = 0; i < args.size() && i < s.arguments.size(); ++i) {
      if (!args[i].is_tensor() || !args[i].to_tensor().defined()) continue;
      const Tensor& now = args[i].to_tensor();
      const Tensor& was = before[i].to_tensor();
      bool declared = s.arguments[i].alias && s.arguments[i].alias->is_write;
      bool changed = !allclose(now, was, 0, 0, true);
      if (changed && !declared) {
        t.passed = false;
        t.message = fmt::format(
            "sample {}: argument '{}' was modified, but the schema {} does "
            "not declare it mutated (annotate it Tensor(a!), or mutates_args)",
            si, s.arguments[i].name, s.str());
        break;
      }
      if (declared && now.version() == versions[i]) {
        t.passed = false;
        t.message = fmt::format(
            "sample {}: argument '{}' is declared mutated but its version "
            "counter did not change",
            si, s.arguments[i].name);
        break;
      }
    }
    if (!t.passed) break;
    std::vector<Tensor> ins = tensors_of(args);
    std::vector<Tensor> res = tensors_of(outs);
    for (size_t o = 0; o < res.size(); ++o) {
      bool annotated = o < s.returns.size() && s.returns[o].alias.has_value();
      for (const Tensor& in : ins) {
        if (annotated || !res[o].defined() || !in.storage() || res[o].storage() != in.storage())
          continue;
        t.passed = false;
        t.message = fmt::format(
            "sample {}: output {} aliases an input, but the schema {} "
            "declares no alias",
            si, o, s.str());
      }
    }
  }
  return t;
}

Test test_faketensor(const OperatorHandle& op, const std::vector<Stack>& samples) {
  Test t{"test_faketensor", true, false, ""};
  for (size_t si = 0; si < samples.size() && t.passed; ++si) {
    NoGradGuard no_grad;
    Stack real_args = clone_stack(samples[si]);
    Stack fake_args;
    for (const Value& v : real_args)
      fake_args.push_back(v.is_tensor() && v.to_tensor().defined() ? Value(fake_like(v.to_tensor()))
                                                                   : v);
    std::vector<Tensor> real = tensors_of(run(op, real_args));
    std::vector<Tensor> fake;
    try {
      fake = tensors_of(run(op, fake_args));
    } catch (const Error& e) {
      t.passed = false;
      t.message = fmt::format("sample {}: {}", si, e.what());
      break;
    }
    if (fake.size() != real.size()) {
      t.passed = false;
      t.message = fmt::format("sample {}: the fake kernel returned {} tensors, the real one {}", si,
                              fake.size(), real.size());
      break;
    }
    for (size_t o = 0; o < real.size(); ++o) {
      const Tensor &r = real[o], &f = fake[o];
      std::string why;
      if (!f.is_fake())
        why = "is not a fake tensor (make outputs with mt::empty_like or mt::empty)";
      else if (f.sizes() != r.sizes())
        why = fmt::format("has shape {} but the real output has {}", f.sizes(), r.sizes());
      else if (f.dtype() != r.dtype())
        why = fmt::format("has dtype {} but the real output has {}", f.dtype(), r.dtype());
      else if (f.device() != r.device())
        why = fmt::format("is on {} but the real output is on {}", f.device(), r.device());
      else if (r.numel() > 1 && f.strides() != r.strides())
        why = fmt::format("has strides {} but the real output has {}", f.strides(), r.strides());
      if (!why.empty()) {
        t.passed = false;
        t.message = fmt::format("sample {}: fake output {} {}", si, o, why);
        break;
      }
    }
  }
  return t;
}

bool has_float_tensor(const Stack& s) {
  for (const Tensor& t : tensors_of(s))
    if (t.defined() && is_floating(t.dtype())) return true;
  return false;
}

Test test_autograd_registration(const OperatorHandle& op, const std::vector<Stack>& samples) {
  Test t{"test_autograd_registration", true, false, ""};
  const FunctionSchema& s = op.schema();
  if (s.is_mutable()) {
    t.skipped = true;
    t.message = "the op mutates its inputs; autograd does not apply";
    return t;
  }
  bool any = false;
  for (size_t si = 0; si < samples.size(); ++si) {
    if (!has_float_tensor(samples[si])) continue;
    any = true;
    Stack args = clone_stack(samples[si]);
    for (Value& v : args)
      if (v.is_tensor() && v.to_tensor().defined() && is_floating(v.to_tensor().dtype()))
        v.to_tensor().requires_grad_(true);
    Stack outs = run(op, args);
    const DispatchTable& table = op.entry()->table();
    bool has_kernel = table.origin[size_t(DispatchKey::Autograd)] == 1;
    for (const Tensor& o : tensors_of(outs)) {
      if (!o.defined() || !is_floating(o.dtype())) continue;
      if (!has_kernel || !o.requires_grad()) {
        t.passed = false;
        t.message = fmt::format(
            "sample {}: '{}' has no autograd kernel, so gradients through it "
            "raise at backward; register one with register_autograd",
            si, op.name().str());
        return t;
      }
    }
  }
  if (!any) {
    t.skipped = true;
    t.message = "no sample has a floating-point tensor input";
  }
  return t;
}

Test test_gradcheck(const OperatorHandle& op, const std::vector<Stack>& samples,
                    const GradcheckOptions& gopts) {
  Test t{"test_gradcheck", true, false, ""};
  if (op.schema().is_mutable()) {
    t.skipped = true;
    t.message = "the op mutates its inputs";
    return t;
  }
  bool any = false;
  for (size_t si = 0; si < samples.size(); ++si) {
    const Stack& sample = samples[si];
    std::vector<size_t> slots;
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < sample.size(); ++i) {
      const Value& v = sample[i];
      if (!v.is_tensor() || !v.to_tensor().defined() || !is_floating(v.to_tensor().dtype()))
        continue;
      Tensor x = v.to_tensor().detach().to(DType::Float64).clone();
      x.requires_grad_(true);
      inputs.push_back(x);
      slots.push_back(i);
    }
    if (inputs.empty()) continue;
    any = true;
    DifferentiableFn fn = [&](const std::vector<Tensor>& xs) {
      Stack args = sample;
      for (size_t k = 0; k < slots.size(); ++k) args[slots[k]] = xs[k];
      return tensors_of(run(op, args));
    };
    GradcheckResult r;
    try {
      r = gradcheck(fn, inputs, gopts);
    } catch (const Error& e) {
      r.ok = false;
      r.message = e.what();
    }
    if (!r.ok) {
      t.passed = false;
      t.message = fmt::format("sample {}: {}", si, r.message);
      return t;
    }
  }
  if (!any) {
    t.skipped = true;
    t.message = "no sample has a floating-point tensor input";
  }
  return t;
}

std::atomic<detail::OpCheckCompileTest> g_compile_test{nullptr};

}  // namespace

void detail::set_opcheck_compile_test(OpCheckCompileTest test) { g_compile_test.store(test); }

bool OpCheckReport::ok() const {
  return std::all_of(tests.begin(), tests.end(),
                     [](const Test& t) { return t.passed || t.skipped; });
}

const OpCheckReport::Test* OpCheckReport::find(std::string_view name) const {
  for (const Test& t : tests)
    if (t.name == name) return &t;
  return nullptr;
}

std::string OpCheckReport::str() const {
  std::string out = fmt::format("opcheck {}\n", op);
  for (const Test& t : tests) {
    std::string status = t.skipped ? "SKIP" : t.passed ? "PASS" : "FAIL";
    out +=
        fmt::format("  {:<27} {}{}\n", t.name, status, t.message.empty() ? "" : ": " + t.message);
  }
  return out;
}

OpCheckReport opcheck(const OperatorHandle& op, const std::vector<Stack>& samples,
                      OpCheckOptions opts) {
  MT_CHECK(!samples.empty(), "[opcheck] give at least one sample (a Stack of the op's arguments)");
  OpCheckReport r;
  r.op = op.name().str();
  auto guarded = [&](const char* name, auto&& f) {
    try {
      r.tests.push_back(f());
    } catch (const Error& e) {
      r.tests.push_back(Test{name, false, false, e.what()});
    }
  };
  guarded("test_schema", [&] { return test_schema(op, samples); });
  guarded("test_faketensor", [&] { return test_faketensor(op, samples); });
  guarded("test_autograd_registration", [&] { return test_autograd_registration(op, samples); });
  if (opts.gradcheck)
    guarded("test_gradcheck", [&] { return test_gradcheck(op, samples, opts.gradcheck_options); });
  if (opts.compile) {
    guarded("test_compile", [&] {
      (void)dispatcher();  // the library's initialization installs the test
      if (auto test = g_compile_test.load()) return test(op, samples);
      return Test{"test_compile", true, true, "mt::compile did not install its test"};
    });
  }
  return r;
}

}  // namespace mt
