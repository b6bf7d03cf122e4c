// SPDX-License-Identifier: MIT
// What several of the minitensor command's subcommands share (cli.h).
#include "tools/cli/cli.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kernels/cpu/cpu_kernels.h"
#include "tools/bench/plot.h"
#include "tools/bench/timing.h"

namespace mt::cli {

CLI::App* Commands::add(CLI::App& parent, std::string name, std::string help,
                        std::function<int()> run) {
  CLI::App* command = parent.add_subcommand(std::move(name), std::move(help));
  commands_.emplace_back(command, std::move(run));
  return command;
}

int Commands::run_parsed() const {
  for (const auto& [command, run] : commands_)
    if (*command) return run();
  return 0;
}

void print_json(const Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

std::string cpu_model() {
  const std::string model = bench::cpu_model();
  return model == "unknown CPU" ? "unknown" : model;  // what this command has always printed
}

void write_plot(const std::string& path, const std::string& svg_text) {
  bench::write_text_file(path, svg_text);
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

CLI::Validator device_name() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          Device d(v);
          (void)d;
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "");
}

namespace {
// The thread counts that can help on this machine.
int machine_threads() { return std::max(1, int(std::thread::hardware_concurrency())); }
}  // namespace

int clamp_threads(int n, const char* what) {
  const int most = machine_threads();
  if (n <= most) return n;
  std::fprintf(stderr,
               "minitensor: %s %d is more than this machine's %d hardware threads; using %d\n",
               what, n, most, most);
  return most;
}

void bound_omp_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return;
  std::string_view text(v);
  text = text.substr(0, text.find(','));  // a list gives the outermost level first
  long long n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && n > machine_threads()))
    cpu::set_num_threads(clamp_threads(
        ec == std::errc() ? int(std::min<long long>(n, 1 << 30)) : 1 << 30, "OMP_NUM_THREADS"));
}

std::optional<mlp::Shape> parse_mlp_shape(std::string_view text) {
  int64_t dims[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int k = 0; k < 3; ++k) {
    if (k > 0 && (p == end || *p++ != 'x')) return std::nullopt;
    auto [next, ec] = std::from_chars(p, end, dims[k]);
    if (ec != std::errc() || next == p || dims[k] < 1 || dims[k] >= (int64_t(1) << 31))
      return std::nullopt;
    p = next;
  }
  if (p != end) return std::nullopt;
  const int64_t cap = int64_t(1) << 31;
  if (dims[0] * dims[1] > cap || dims[0] * dims[2] > cap || dims[1] * dims[2] > cap)
    return std::nullopt;
  return mlp::Shape{.batch = dims[0],
                    .in = dims[1],
                    .hidden = dims[2],
                    .out = dims[1]};  // output dim = input dim
}

void add_device_option(CLI::App& sub, std::string& device, const char* help) {
  sub.add_option("--device", device, help)->capture_default_str()->check(device_name());
}

void add_repeats_option(CLI::App& sub, int& repeats, const char* help) {
  sub.add_option("--repeats", repeats, help)->capture_default_str()->check(CLI::Range(1, 100000));
}

Device bench_device(const std::string& name, std::string_view what) {
  Device d(name);
  bench::check_device(d, what);
  return d;
}

}  // namespace mt::cli
