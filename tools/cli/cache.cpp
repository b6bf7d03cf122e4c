// SPDX-License-Identifier: MIT
// `minitensor cache`: the NVRTC kernel cache: ls, stats, clear; --plot draws its LRU order.
#include "kernels/jit/cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "kernels/jit/nvrtc.h"
#include "tools/bench/memory_plot.h"
#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

int cache_cmd(const std::string& what, bool json) {
  auto& cache = jit::kernel_cache();
  const std::string& dir = cache.config().dir;
  if (what == "clear") {
    MT_CHECK(cache.disk_enabled(), "[cache] there is no disk cache to clear (MT_KERNEL_CACHE=0)");
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(dir, ec))) {  // nothing cached yet
      if (json)
        print_json({{"cleared", dir}, {"existed", false}});
      else
        std::printf("nothing to clear: %s does not exist yet\n", mt::quoted(dir).c_str());
      return 0;
    }
    cache.clear();  // throws, with the reason, when it cannot
    if (json)
      print_json({{"cleared", dir}, {"existed", true}});
    else
      std::printf("cleared %s\n", dir.c_str());
    return 0;
  }
  const auto entries = cache.list();
  if (what == "stats") {
    const size_t invalid = size_t(
        std::count_if(entries.begin(), entries.end(), [](const auto& e) { return !e.valid; }));
    if (json) {
      print_json({{"dir", dir},
                  {"entries", entries.size()},
                  {"invalid", invalid},
                  {"bytes", cache.disk_bytes()},
                  {"max_bytes", cache.config().max_bytes}});
    } else {
      std::printf("dir %s\nentries %zu (%zu invalid), %.2f MiB of %llu MiB\n", dir.c_str(),
                  entries.size(), invalid, double(cache.disk_bytes()) / (1 << 20),
                  (unsigned long long)(cache.config().max_bytes >> 20));
    }
    return 0;
  }
  // Most recently used first, with the disk hits that events.log recorded for each entry
  // (loads by any process since the log began; Note [Kernel cache history]).
  std::map<std::string, uint64_t> hits;
  for (const auto& ev : cache.disk_log())
    if (ev.kind == jit::CacheEvent::Kind::DiskHit) ++hits[ev.key];
  if (json) {
    Json out = Json::array();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      const auto& e = *it;
      out.push_back({{"key", e.key},
                     {"name", e.name},
                     {"target", e.target},
                     {"arch", e.arch},
                     {"path", e.path},
                     {"bytes", e.size_bytes},
                     {"age_s", e.age_s},
                     {"disk_hits", hits[e.key]},
                     {"valid", e.valid},
                     {"problem", e.problem}});
    }
    print_json(out);
    return 0;
  }
  if (!entries.empty())
    std::printf("%-16s  %-12s %-10s %10s  %9s  %5s  %s\n", "key", "name", "target", "bytes",
                "last use", "hits", "state");
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const auto& e = *it;
    std::printf("%s  %-12s %-10s %8llu B  %7.0f s  %5llu  %s\n", e.key.substr(0, 16).c_str(),
                mt::quoted(e.name).c_str(), e.target.c_str(), (unsigned long long)e.size_bytes,
                e.age_s, (unsigned long long)hits[e.key], e.valid ? "ok" : e.problem.c_str());
  }
  return 0;
}

// `cache --plot FILE.svg`: the LRU order over time, from this directory's events.log, or
// (--demo) from a small workload in a fresh temporary directory bounded to about three
// entries: five kernels accessed A B C A D B E A B C D E, each access after dropping the
// in-memory copies, so that every access is a disk hit or a compile.
int cache_plot(const std::string& path, bool demo) {
  std::vector<jit::CacheEvent> events;
  std::string title;
  if (demo) {
    MT_CHECK(jit::nvrtc_available(), "[cache --plot --demo] needs NVRTC: {}",
             jit::nvrtc_unavailable_reason());
    std::string dir = "/tmp/mt-cache-demo-XXXXXX";
    MT_CHECK(::mkdtemp(dir.data()),
             "[cache --plot --demo] cannot make a temporary directory in /tmp: {}",
             std::strerror(errno));
    const auto archs = jit::nvrtc_supported_archs();
    const int arch = std::count(archs.begin(), archs.end(), 80) ? 80 : archs.front();
    auto request = [arch](char k) {
      jit::CompileRequest r;
      r.name = fmt::format("lru_{}.cu", k);
      r.source = fmt::format(
          "template <typename T>\n__global__ void lru_{0}(T* p) {{ p[threadIdx.x] = T({1}); }}\n",
          k, int(k));
      r.name_expressions = {fmt::format("lru_{}<float>", k)};
      r.arch = arch;
      return r;
    };
    try {
      jit::KernelCache cache({.dir = dir});
      cache.record_history(true);
      const std::string pattern = "ABCADBEABCDE";
      for (size_t i = 0; i < pattern.size(); ++i) {
        cache.clear_memory();
        cache.get(request(pattern[i]));
        if (i == 0) {  // room for three entries of about this size
          const uint64_t entry = cache.disk_bytes();
          cache.set_max_bytes(3 * entry + entry / 2);
        }
      }
      events = cache.history();
      cache.clear();
      ::rmdir(dir.c_str());
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      throw;
    }
    title = fmt::format("kernel cache, LRU on disk: five kernels, room for three, accessed {}",
                        "A B C A D B E A B C D E");
  } else {
    auto& cache = jit::kernel_cache();
    MT_CHECK(cache.disk_enabled(),
             "[cache --plot] there is no disk cache to draw (MT_KERNEL_CACHE=0); try --demo");
    events = cache.disk_log();
    MT_CHECK(!events.empty(),
             "[cache --plot] {} has no events.log yet: run something that compiles kernels, or try "
             "--demo",
             cache.config().dir);
    title = fmt::format("kernel cache {}, LRU on disk", cache.config().dir);
  }
  write_plot(path, bench::svg_cache_lru(events, title));
  size_t hits = 0, misses = 0, evictions = 0;
  for (const auto& e : events) {
    hits += e.kind == jit::CacheEvent::Kind::DiskHit;
    misses += e.kind == jit::CacheEvent::Kind::Compile;
    evictions += e.kind == jit::CacheEvent::Kind::Eviction;
  }
  std::printf("%zu disk hits, %zu misses (compiled), %zu evictions\n", hits, misses, evictions);
  return 0;
}

struct CacheCliOptions {
  std::string what = "ls", plot;
  bool demo = false, json = false;
};

}  // namespace

void add_cache(CLI::App& app, Commands& commands) {
  auto [cac, o] = commands.add<CacheCliOptions>(
      app, "cache",
      "the NVRTC kernel cache: ls (most recent first, with hits), stats, clear, --plot",
      [](const CacheCliOptions& opts) {
        return opts.plot.empty() ? cache_cmd(opts.what, opts.json)
                                 : cache_plot(opts.plot, opts.demo);
      });
  cac->add_option("what", o->what, "ls | stats | clear")
      ->check(CLI::IsMember({"ls", "stats", "clear"}));
  cac->add_flag("--json", o->json, "machine-readable output");
  cac->add_option("--plot", o->plot,
                  "draw the LRU order over time (hits, misses, evictions) into this SVG file");
  cac->add_flag("--demo", o->demo,
                "with --plot: a small workload in a temporary directory, not this cache's log");
}

}  // namespace mt::cli
