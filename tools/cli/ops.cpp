// SPDX-License-Identifier: MIT
// `minitensor ops`: every registered op with its schema, kernels and tags.
#include <cstdio>

#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

int list_ops(const std::string& ns, bool json) {
  auto ops = dispatcher().all_ops();
  Json out = Json::array();
  for (const OperatorName& n : ops) {
    if (!ns.empty() && n.ns != ns) continue;
    auto h = dispatcher().find_or_throw(n.str());
    const DispatchTable& t = h.entry()->table();
    std::vector<std::string> keys;
    for (int k = 0; k < kNumDispatchKeys; ++k)
      if (t.origin[size_t(k)] == 1) keys.emplace_back(dispatch_key_name(DispatchKey(k)));
    const TagSet tags = h.entry()->tags();
    if (json) {
      std::vector<std::string> tag_names;
      for (std::string_view t : tags.names()) tag_names.emplace_back(t);
      out.push_back({{"name", n.str()},
                     {"schema", h.schema().str()},
                     {"kernels", keys},
                     {"tags", tag_names}});
    } else {
      std::printf("%-60s [%s]%s\n", h.schema().str().c_str(),
                  fmt::format("{}", fmt::join(keys, ", ")).c_str(),
                  tags.empty() ? "" : (" tags: " + tags.str()).c_str());
    }
  }
  if (json) print_json(out);
  return 0;
}

struct OpsCliOptions {
  std::string ns;
  bool json = false;
};

}  // namespace

void add_ops(CLI::App& app, Commands& commands) {
  auto [ops, o] = commands.add<OpsCliOptions>(
      app, "ops", "every registered op with its schema and kernels",
      [](const OpsCliOptions& opts) { return list_ops(opts.ns, opts.json); });
  ops->add_option("--namespace", o->ns, "only this namespace");
  ops->add_flag("--json", o->json, "machine-readable output");
}

}  // namespace mt::cli
