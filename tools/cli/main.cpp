// SPDX-License-Identifier: MIT
// The minitensor command: the --load pre-pass, the app and its subcommands (each declared
// and run by its own file of tools/cli/, cli.h), the parse, and the top-level errors.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "dispatcher/library.h"
#include "minitensor.h"
#include "tools/cli/cli.h"

using namespace mt;

namespace {

// The subcommands a position takes, for "unknown command" messages (CLI11 says only
// that the argument was not expected).
int unknown_command(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  std::string path = "minitensor";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.starts_with("-")) {
      if (a == "--plot" || a == "--namespace" || a == "--device" || a == "--load")
        ++i;  // takes a value
      continue;
    }
    if (at->get_subcommands({}).empty()) break;  // a positional argument of a leaf
    const CLI::App* sub = nullptr;
    try {
      sub = at->get_subcommand(a);
    } catch (const CLI::OptionNotFound&) {
    }
    if (!sub) {
      std::vector<std::string> names;
      for (const CLI::App* s : at->get_subcommands({})) names.push_back(s->get_name());
      std::fprintf(stderr, "%s: unknown command %s; the commands are %s (see %s --help)\n",
                   path.c_str(), mt::quoted(a).c_str(),
                   fmt::format("{}", fmt::join(names, ", ")).c_str(), path.c_str());
      return 2;
    }
    at = sub;
    path += " " + a;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // --load LIB.so may come before or after the command (up to a "--"): taken out here, so
  // that no command's parser sees it.
  std::vector<std::string> load_first;
  std::vector<char*> kept_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      kept_args.insert(kept_args.end(), argv + i, argv + argc);
      break;
    }
    if (a == "--load") {
      if (i + 1 >= argc) {
        std::fprintf(stderr,
                     "minitensor: --load needs the path of a shared library of ops, "
                     "e.g. minitensor --load ./libmyops.so ops\n");
        return 2;
      }
      load_first.emplace_back(argv[++i]);
    } else if (a.starts_with("--load=")) {
      load_first.emplace_back(a.substr(7));
    } else {
      kept_args.push_back(argv[i]);
    }
  }
  argc = int(kept_args.size());
  kept_args.push_back(nullptr);
  argv = kept_args.data();
  CLI::App app{"minitensor: a small tensor runtime with its own op dispatcher"};
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::string("minitensor ") + MT_VERSION);
  app.footer(
      "Exit codes: 0 success; 1 an error (the message says why) or a failed check (doctor);\n"
      "2 a usage error (an unknown command or option, a bad value).");
  std::vector<std::string> load;
  app.add_option("--load", load,
                 "load a shared library of ops first (its MT_LIBRARY blocks register), e.g. "
                 "minitensor --load ./libmyops.so ops; before or after the command; repeatable")
      ->type_name("LIB.so");
  cli::Commands commands;
  cli::add_doctor(app, commands);
  cli::add_ops(app, commands);
  cli::add_dump(app, commands);
  cli::add_opcheck(app, commands);
  cli::add_demo(app, commands);
  cli::add_explain(app, commands);
  cli::add_bench(app, commands);
  cli::add_autocast(app, commands);
  cli::add_compile_demo(app, commands);
  cli::add_cache(app, commands);
  cli::add_memory(app, commands);
  if (int rc = unknown_command(app, std::vector<std::string>(argv + 1, argv + argc))) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, the version, or the error
    return rc == 0 ? 0 : 2;
  }
  try {
    for (const std::string& lib : load_first) load_library(lib);
    for (const std::string& lib : load) load_library(lib);
    cli::bound_omp_threads();
    return commands.run_parsed();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minitensor: %s\n", e.what());
    return 1;
  }
}
