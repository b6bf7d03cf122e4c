// SPDX-License-Identifier: MIT
// The minitensor command: each subcommand is a file of tools/cli/ whose add_* function
// declares its options and what runs it; main.cpp calls them in the order of --help. This
// header holds the registration and what several subcommands share.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "examples/mlp.h"
#include "minitensor.h"

namespace mt::cli {

// The subcommands, each with the function that runs it when it is the one parsed.
class Commands {
 public:
  // Declares subcommand `name` of `parent`, run by `run` (which returns the exit code).
  CLI::App* add(CLI::App& parent, std::string name, std::string help, std::function<int()> run);

  // The same for a subcommand with options: they go in an Options made here (its defaults
  // are the options' defaults), which the caller declares on the subcommand and `run` reads.
  template <class Options>
  std::pair<CLI::App*, Options*> add(CLI::App& parent, std::string name, std::string help,
                                     std::function<int(const Options&)> run) {
    auto options = std::make_shared<Options>();
    CLI::App* command = add(parent, std::move(name), std::move(help),
                            [options, run = std::move(run)] { return run(*options); });
    return {command, options.get()};
  }

  // The exit code of the command parsed; 0 when it was none of those added.
  int run_parsed() const;

 private:
  std::vector<std::pair<const CLI::App*, std::function<int()>>> commands_;
};

// One each for minitensor's subcommands, in the order of --help (tools/cli/<name>.cpp).
void add_doctor(CLI::App& app, Commands& commands);
void add_ops(CLI::App& app, Commands& commands);
void add_dump(CLI::App& app, Commands& commands);
void add_opcheck(CLI::App& app, Commands& commands);
void add_demo(CLI::App& app, Commands& commands);
void add_explain(CLI::App& app, Commands& commands);
void add_bench(CLI::App& app, Commands& commands);  // the group, bench.cpp; one per bench below
void add_autocast(CLI::App& app, Commands& commands);
void add_compile_demo(CLI::App& app, Commands& commands);
void add_cache(CLI::App& app, Commands& commands);
void add_memory(CLI::App& app, Commands& commands);

// ---- output --------------------------------------------------------------------------

// Every --json output is built as a value and printed by nlohmann::json, which escapes
// control characters; bytes that are not UTF-8 (a path, say) become U+FFFD. Keys keep
// the order they were added in. NaN and infinities (a variant that could not run) print
// as null.
using Json = nlohmann::ordered_json;
void print_json(const Json& j);

// The CPU's model name from /proc/cpuinfo, "unknown" when it has none.
std::string cpu_model();

// Writes an SVG file and says so on stderr.
void write_plot(const std::string& path, const std::string& svg_text);

// ---- options and their checks -----------------------------------------------------------

// --device: a usage error (exit 2) when it does not parse, as the help's exit codes promise.
CLI::Validator device_name();

// A thread count of `what` (an option, a variable), at most this machine's hardware
// threads: more are clamped, with a warning.
int clamp_threads(int n, const char* what);

// OMP_NUM_THREADS=100000 would start that many threads per parallel region: clamped.
void bound_omp_threads();

// BATCHxINxHIDDEN with each size in 1..2^31-1 and no matrix over 2^31 elements; nullopt
// for anything else (out-of-range numbers too: from_chars does not saturate).
std::optional<mlp::Shape> parse_mlp_shape(std::string_view text);

// The tutorial's op, as the demo and `dump triton_demo::silu` show it (demo.cpp); its
// registrations last as long as the handle.
CustomOp<Tensor(const Tensor&)> make_demo_op();

// ---- bench -------------------------------------------------------------------------------

// What every bench subcommand takes: --json (JSON on stdout instead of the table) and
// --plot FILE.svg; options of the group, so they may come before or after the subcommand.
struct BenchOutput {
  bool json = false;
  std::string plot;
};

// The bench group (bench.cpp), as its subcommands' files see it.
class BenchGroup {
 public:
  BenchGroup(CLI::App& app, Commands& commands);

  // Declares bench subcommand `name`, as Commands::add does; `run` also gets the group's
  // --json and --plot.
  template <class Options>
  std::pair<CLI::App*, Options*> add(std::string name, std::string help,
                                     std::function<int(const Options&, const BenchOutput&)> run) {
    auto added = commands_.add<Options>(
        *group_, std::move(name), std::move(help),
        [out = output_, run = std::move(run)](const Options& o) { return run(o, *out); });
    added.first->fallthrough();  // so that --json and --plot may come after it
    return added;
  }

 private:
  Commands& commands_;
  std::shared_ptr<BenchOutput> output_ = std::make_shared<BenchOutput>();
  CLI::App* group_;
};

// One each for bench's subcommands, in the order of `bench --help` (bench_<name>.cpp;
// silu and matmul share one file and their options).
void add_bench_dispatch(BenchGroup& bench);
void add_bench_silu_matmul(BenchGroup& bench);
void add_bench_mlp(BenchGroup& bench);
void add_bench_graph(BenchGroup& bench);
void add_bench_cpu(BenchGroup& bench);
void add_bench_vmap(BenchGroup& bench);
void add_bench_split(BenchGroup& bench);
void add_bench_reduction(BenchGroup& bench);

// The options several bench subcommands share: --device (checked as a device name) and
// --repeats (the timed samples whose median is shown).
void add_device_option(CLI::App& sub, std::string& device, const char* help);
void add_repeats_option(CLI::App& sub, int& repeats, const char* help);

// The device a bench runs on, checked by bench::check_device (`what` names the bench).
Device bench_device(const std::string& name, std::string_view what);

}  // namespace mt::cli
