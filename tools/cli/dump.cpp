// SPDX-License-Identifier: MIT
// `minitensor dump NS::OP`: an op's registrations and computed dispatch table.
#include <algorithm>
#include <cstdio>

#include "dispatcher/edit_distance.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

// The registered op closest to `name` ("silu" and "mt::sillu" give "mt::silu"), or "" when
// none is close: compared whole, and by the part after "::" alone; a tie goes to mt::.
std::string closest_op(std::string_view name) {
  const size_t colon = name.rfind("::");
  const std::string_view bare = colon == std::string_view::npos ? name : name.substr(colon + 2);
  const size_t most = std::max<size_t>(2, bare.size() / 4);
  std::string best;
  size_t best_d = most + 1;
  bool best_mt = false;
  for (const OperatorName& n : dispatcher().all_ops()) {
    const std::string full = n.str();
    std::string short_name = n.name;
    if (!n.overload.empty()) short_name += "." + n.overload;
    const size_t d =
        std::min(detail::edit_distance(name, full), detail::edit_distance(bare, short_name));
    const bool is_mt = n.ns == "mt";
    if (d < best_d || (d == best_d && is_mt && !best_mt)) best = full, best_d = d, best_mt = is_mt;
  }
  return best;
}

int dump(const std::string& name) {
  std::optional<decltype(make_demo_op())> demo;
  if (name == "triton_demo::silu") demo.emplace(make_demo_op());
  std::string text;
  try {
    text = dispatcher().dump(name) + "\n" + dispatcher().dump_table(name);
  } catch (const Error&) {
    const std::string guess = closest_op(name);
    if (guess.empty()) throw;
    MT_ERROR(
        "[dump] no operator named {} is registered; did you mean '{}'? (`minitensor ops` "
        "lists them)",
        mt::quoted(name), guess);
  }
  std::printf("%s", text.c_str());
  return 0;
}

}  // namespace

void add_dump(CLI::App& app, Commands& commands) {
  auto [dmp, name] = commands.add<std::string>(
      app, "dump", "an op's registrations and computed dispatch table", dump);
  dmp->add_option("name", *name, "namespace::op")->required();
}

}  // namespace mt::cli
