// SPDX-License-Identifier: MIT
// `minitensor explain NS::OP --args ...`: why a call of an op runs the kernel it runs.
#include <cstdio>
#include <cstdlib>

#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

// `minitensor explain 'ns::op' --args cpu:grad 2.5 ...`: why a call of the op with such
// arguments runs the kernel it runs (dispatcher/dispatcher.h). An argument is a float32
// tensor of 2 elements, `cpu`, `cuda` or `fake`, with `:grad` to require grad; or a number.
// --include / --exclude add thread-local keys as a guard would.
int explain(const std::string& name, const std::vector<std::string>& args,
            const std::vector<std::string>& include, const std::vector<std::string>& exclude) {
  OperatorHandle op = dispatcher().find_or_throw(name);
  Stack stack;
  for (const std::string& a : args) {
    const size_t colon = a.find(':');
    const std::string base = a.substr(0, colon);
    const std::string flag = colon == std::string::npos ? "" : a.substr(colon + 1);
    MT_CHECK(flag.empty() || flag == "grad",
             "[explain] argument {}: the only suffix is ':grad' (requires grad); e.g. cpu:grad",
             mt::quoted(a));
    Tensor t;
    if (base == "cpu") {
      t = zeros({2});
    } else if (base == "fake") {
      t = fake_empty({2});
    } else if (base == "cuda") {
      MT_CHECK(cuda::is_available(),
               "[explain] argument 'cuda' needs a GPU, but CUDA is unavailable: {}",
               cuda::unavailable_reason());
      t = zeros({2}, {.device = Device("cuda:0")});
    } else {
      char* end = nullptr;
      const double d = std::strtod(a.c_str(), &end);
      MT_CHECK(!a.empty() && end == a.c_str() + a.size(),
               "[explain] argument {} is not cpu, cuda, fake (each with an optional :grad) or a "
               "number",
               mt::quoted(a));
      if (a.find_first_of(".eE") == std::string::npos)
        stack.emplace_back(int64_t(d));
      else
        stack.emplace_back(d);
      continue;
    }
    if (flag == "grad") t.requires_grad_();
    stack.emplace_back(t);
  }
  auto keys = [](const std::vector<std::string>& names, const char* what) {
    DispatchKeySet ks;
    for (const std::string& n : names) {
      DispatchKey k;
      MT_CHECK(parse_dispatch_key(n, &k) && dispatch_key_name(k) != "?",
               "[explain] {} {} is not a dispatch key; the keys are Trace, Autograd, Mode, Fake, "
               "CUDA, CPU",
               what, mt::quoted(n));
      ks = ks.add(k);
    }
    return ks;
  };
  IncludeDispatchKeyGuard inc(keys(include, "--include"));
  ExcludeDispatchKeyGuard exc(keys(exclude, "--exclude"));
  std::printf("%s", explain_dispatch(op, stack).str().c_str());
  return 0;
}

struct ExplainCliOptions {
  std::string name;
  std::vector<std::string> args, include, exclude;
};

}  // namespace

void add_explain(CLI::App& app, Commands& commands) {
  auto [exp_cmd, o] = commands.add<ExplainCliOptions>(
      app, "explain",
      "why a call of an op runs the kernel it runs (each argument's keys, the thread-local sets, "
      "the table's entries)",
      [](const ExplainCliOptions& opts) {
        return explain(opts.name, opts.args, opts.include, opts.exclude);
      });
  exp_cmd->add_option("name", o->name, "namespace::op")->required();
  exp_cmd
      ->add_option("--args", o->args,
                   "the call's arguments: cpu, cuda or fake (a float32 tensor of 2 elements; "
                   "add :grad to require grad) or a number")
      ->type_name("ARG ...");
  exp_cmd->add_option("--include", o->include, "thread-local included keys, as a guard adds")
      ->type_name("KEY ...");
  exp_cmd
      ->add_option("--exclude", o->exclude,
                   "thread-local excluded keys (--exclude Autograd: no_grad)")
      ->type_name("KEY ...");
}

}  // namespace mt::cli
