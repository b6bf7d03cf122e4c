// SPDX-License-Identifier: MIT
#include "tools/bench/memory_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <unordered_map>

#include "tools/bench/plot.h"

namespace mt::bench {

namespace {

// A row of colour swatches with their meanings, `step` apart, from (x, y).
std::string legend_row(std::initializer_list<std::pair<const char*, const char*>> items, double x,
                       double y, double step) {
  std::string out;
  for (const auto& [fill, text] : items) {
    out += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.0f}\" y=\"{:.1f}\">{}</text>\n",
        x, y, fill, x + 16, y + 10, text);
    x += step;
  }
  return out;
}

// "lru_C.cu" -> "lru_C"; an entry never named in the events: its key's first 8 digits.
std::string label_for(const std::map<std::string, std::string>& names, const std::string& key) {
  auto it = names.find(key);
  std::string n = it == names.end() || it->second.empty() ? key.substr(0, 8) : it->second;
  if (n.ends_with(".cu")) n.resize(n.size() - 3);
  return n.size() > 14 ? n.substr(0, 13) + "~" : n;
}

struct Column {
  std::string accessed;
  bool hit = false;
  std::vector<std::string> order;    // most recent first, after the access
  std::vector<std::string> evicted;  // by this access (its write's eviction pass)
  size_t evictions = 0;              // of those, evicted for room (the rest were corrupt)
};

}  // namespace

std::string svg_cache_lru(const std::vector<jit::CacheEvent>& events, const std::string& title,
                          size_t max_columns, size_t max_rows) {
  max_columns = std::max<size_t>(1, max_columns);
  max_rows = std::max<size_t>(2, max_rows);
  using Kind = jit::CacheEvent::Kind;
  std::map<std::string, std::string> names;
  for (const auto& e : events)
    if (!e.name.empty()) names[e.key] = e.name;
  // Replay the events: the disk's recency order, and one column per access.
  std::vector<std::string> order;
  std::vector<Column> cols;
  for (const auto& e : events) {
    auto drop = [&] { order.erase(std::remove(order.begin(), order.end(), e.key), order.end()); };
    if (e.kind == Kind::DiskHit || e.kind == Kind::Compile) {
      drop();
      order.insert(order.begin(), e.key);
      cols.push_back({e.key, e.kind == Kind::DiskHit, order, {}});
    } else if (e.kind == Kind::Eviction || e.kind == Kind::Corrupt) {
      drop();
      if (!cols.empty()) {
        cols.back().evicted.push_back(e.key);
        cols.back().evictions += e.kind == Kind::Eviction;
        cols.back().order = order;
      }
    }
  }
  const size_t total = cols.size();
  if (cols.size() > max_columns) cols.erase(cols.begin(), cols.end() - ptrdiff_t(max_columns));
  // The subtitle counts what is drawn.
  size_t hits = 0, misses = 0, evictions = 0;
  for (const auto& c : cols) ++(c.hit ? hits : misses), evictions += c.evictions;
  // A column longer than max_rows shows its max_rows - 1 most recent entries and "+N more".
  const size_t max_below = 4;
  size_t rows = 1, below = 0;
  for (const auto& c : cols) {
    rows = std::max(rows, std::min(c.order.size(), max_rows));
    below = std::max(below, std::min(c.evicted.size(), max_below));
  }
  const int cw = 64, ch = 22, left = 60, top = 70;
  const int width = left + int(std::max<size_t>(cols.size(), 4)) * cw + 20;
  const int grid_h = int(rows) * ch;
  const int height = top + grid_h + 16 + int(below) * ch + 70;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"11\">\n<title>{2}</title>\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{3}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{2}</text>\n"
      "<text x=\"{3}\" y=\"42\">{4}: {5} hits (green), {6} misses compiled and written "
      "(orange), {7} evictions (crossed out below each column)</text>\n",
      width, height, xml_escape(title), left,
      cols.size() < total ? fmt::format("the last {} of {} accesses", cols.size(), total)
                          : fmt::format("{} accesses", total),
      hits, misses, evictions);
  out += fmt::format(
      "<text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">"
      "recency: most recent on top</text>\n",
      top + grid_h / 2, top + grid_h / 2);
  for (size_t i = 0; i < cols.size(); ++i) {
    const Column& c = cols[i];
    const int x = left + int(i) * cw;
    out += fmt::format(
        "<g class=\"access\"><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
        "fill=\"#555\">{}</text>\n",
        x + cw / 2, top - 8, i + 1);
    const size_t shown = c.order.size() > max_rows ? max_rows - 1 : c.order.size();
    for (size_t r = 0; r < shown; ++r) {
      const bool me = c.order[r] == c.accessed;
      const char* cls = me ? (c.hit ? "hit" : "miss") : "cached";
      const char* fill = me ? (c.hit ? "#009E73" : "#E69F00") : "#DDE6F0";
      const int y = top + int(r) * ch;
      out += fmt::format(
          "<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" "
          "stroke=\"white\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
          cls, x + 1, y, cw - 2, ch - 2, fill, x + cw / 2, y + ch - 7,
          xml_escape(label_for(names, c.order[r])));
    }
    if (shown < c.order.size())
      out += fmt::format(
          "<text class=\"more\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">+{} "
          "more</text>\n",
          x + cw / 2, top + int(shown) * ch + ch - 7, c.order.size() - shown);
    const size_t shown_below = c.evicted.size() > max_below ? max_below - 1 : c.evicted.size();
    if (shown_below < c.evicted.size())
      out += fmt::format(
          "<text class=\"more\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">+{} "
          "more</text>\n",
          x + cw / 2, top + grid_h + 16 + int(shown_below) * ch + ch - 7,
          c.evicted.size() - shown_below);
    for (size_t r = 0; r < shown_below; ++r) {
      const int y = top + grid_h + 16 + int(r) * ch;
      out += fmt::format(
          "<rect class=\"evicted\" x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" "
          "fill=\"#BBBBBB\"/>"
          "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\" fill=\"#444\">{6}</text>"
          "<line x1=\"{0}\" y1=\"{7}\" x2=\"{8}\" y2=\"{7}\" stroke=\"#C00\" "
          "stroke-width=\"1.5\"/>\n",
          x + 1, y, cw - 2, ch - 2, x + cw / 2, y + ch - 7,
          xml_escape(label_for(names, c.evicted[r])), y + ch / 2 - 1, x + cw - 1);
    }
    out += "</g>\n";
  }
  const int ly = height - 30;
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\">accesses, in order (a column is the disk's LRU list after the "
      "access; the bound evicts from the bottom)</text>\n",
      left, top + grid_h + 16 + int(below) * ch + 16);
  out += legend_row({{"#009E73", "hit: loaded from disk"},
                     {"#E69F00", "miss: compiled, written"},
                     {"#DDE6F0", "cached, not accessed"},
                     {"#BBBBBB", "evicted"}},
                    left, ly, 170);
  out += "</svg>\n";
  return out;
}

namespace {

std::string size_text(size_t n) {
  if (n >= (size_t(1) << 30)) return fmt::format("{:.1f} GiB", double(n) / double(size_t(1) << 30));
  if (n >= (size_t(1) << 20)) return fmt::format("{:.1f} MiB", double(n) / double(1 << 20));
  if (n >= 1024) return fmt::format("{:.1f} KiB", double(n) / 1024);
  return fmt::format("{} B", n);
}

enum class LaneState { None, Allocated, Cached, Pool, PoolAllocated };

struct Segment {
  size_t from, to;  // event indices
  LaneState state;
  std::string op;
};

struct Lane {
  Lane(uintptr_t a, size_t s, uintptr_t st, uint64_t p)
      : address(a), size(s), stream(st), pool(p) {}
  uintptr_t address;
  size_t size;
  uintptr_t stream;
  uint64_t pool;
  LaneState state = LaneState::None;
  size_t since = 0;
  std::string op;
  std::vector<Segment> segments;
  void set(LaneState s, size_t at, std::string new_op = {}) {
    if (state != LaneState::None && at > since) segments.push_back({since, at, state, op});
    state = s;
    since = at;
    op = std::move(new_op);
  }
};

}  // namespace

std::string svg_memory_timeline(const std::vector<cuda::MemoryEvent>& events,
                                const std::string& title, size_t max_lanes) {
  using Kind = cuda::MemoryEvent::Kind;
  std::vector<Lane> lanes;
  std::unordered_map<uintptr_t, size_t> lane_of;  // live lanes by address
  std::vector<std::pair<size_t, Kind>> marks;
  std::unordered_map<uintptr_t, int> stream_ids;
  auto lane_for = [&](const cuda::MemoryEvent& e) -> Lane& {
    auto it = lane_of.find(e.address);
    if (it != lane_of.end() && lanes[it->second].size == e.size) return lanes[it->second];
    lanes.emplace_back(e.address, e.size, e.stream, e.pool);
    lane_of[e.address] = lanes.size() - 1;
    return lanes.back();
  };
  const size_t n = events.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& e = events[i];
    if (e.stream && !stream_ids.count(e.stream))
      stream_ids.emplace(e.stream, int(stream_ids.size()));
    switch (e.kind) {
      case Kind::DriverAlloc:
        lanes.emplace_back(e.address, e.size, e.stream, e.pool);
        lane_of[e.address] = lanes.size() - 1;
        break;
      case Kind::Alloc: {
        Lane& l = lane_for(e);
        l.stream = e.stream;
        l.pool = e.pool;
        l.set(e.pool ? LaneState::PoolAllocated : LaneState::Allocated, i, e.op);
        break;
      }
      case Kind::Free:
        lane_for(e).set(e.pool ? LaneState::Pool : LaneState::Cached, i);
        break;
      case Kind::DriverFree:
        if (auto it = lane_of.find(e.address); it != lane_of.end()) {
          lanes[it->second].set(LaneState::None, i);
          lane_of.erase(it);
        }
        break;
      case Kind::EmptyCache:
      case Kind::OomRetry:
        marks.emplace_back(i, e.kind);
        break;
      case Kind::CacheHit:
        break;
    }
  }
  for (Lane& l : lanes) l.set(LaneState::None, n);
  const size_t drawn = std::min(lanes.size(), max_lanes);
  auto lane_h = [](size_t size) {
    return std::clamp(4.0 + 2.5 * std::log2(std::max(1.0, double(size) / 512.0)), 4.0, 40.0);
  };
  double grid_h = 0;
  for (size_t i = 0; i < drawn; ++i) grid_h += lane_h(lanes[i].size) + 2;
  const double left = 150, top = 70, plot_w = 900;
  const double width = left + plot_w + 30, height = top + grid_h + 90;
  const double xs = n ? plot_w / double(n) : 1.0;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 "
      "0 "
      "{0:.0f} {1:.0f}\" font-family=\"sans-serif\" font-size=\"10\">\n<title>{2}</title>\n"
      "<rect x=\"0\" y=\"0\" width=\"{0:.0f}\" height=\"{1:.0f}\" fill=\"white\"/>\n"
      "<text x=\"{3:.0f}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{2}</text>\n"
      "<text x=\"{3:.0f}\" y=\"40\" font-size=\"11\">{4} events, {5} blocks{6}; a lane is one "
      "block "
      "(one cuMemAlloc), taller for larger blocks; hover for details</text>\n",
      width, height, xml_escape(title), left, n, lanes.size(),
      drawn < lanes.size() ? fmt::format(" ({} drawn)", drawn) : std::string());
  auto color = [](LaneState s) {
    switch (s) {
      case LaneState::Allocated:
        return std::pair{"allocated", "#0072B2"};
      case LaneState::Cached:
        return std::pair{"cached", "#C8C8C8"};
      case LaneState::Pool:
        return std::pair{"pool", "#E6B8D6"};
      case LaneState::PoolAllocated:
        return std::pair{"pool-allocated", "#8E3B76"};
      default:
        return std::pair{"none", "none"};
    }
  };
  double y = top;
  for (size_t i = 0; i < drawn; ++i) {
    const Lane& l = lanes[i];
    const double h = lane_h(l.size);
    const std::string where =
        l.pool
            ? fmt::format("graph pool {}", l.pool)
            : fmt::format("stream {}", stream_ids.count(l.stream) ? stream_ids.at(l.stream) : -1);
    out += fmt::format(
        "<g class=\"lane\"><text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\" "
        "fill=\"#333\">{} {}</text>\n",
        left - 6, y + std::min(h, 12.0) - 1, size_text(l.size), xml_escape(where));
    for (const Segment& s : l.segments) {
      const auto [cls, fill] = color(s.state);
      out += fmt::format(
          "<rect class=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{} at 0x{:x}, {}: {}{}, events {} to {}</title></rect>\n",
          cls, left + double(s.from) * xs, y, std::max(0.5, double(s.to - s.from) * xs), h, fill,
          size_text(l.size), l.address, xml_escape(where), cls,
          s.op.empty() ? std::string() : " by " + xml_escape(s.op), s.from, s.to);
    }
    out += "</g>\n";
    y += h + 2;
  }
  for (const auto& [at, kind] : marks) {
    const bool oom = kind == Kind::OomRetry;
    const double x = left + double(at) * xs;
    out += fmt::format(
        "<line class=\"{}\" x1=\"{:.2f}\" y1=\"{:.0f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-dasharray=\"{}\"><title>{} at event {}</title></line>\n",
        oom ? "oom-retry" : "empty-cache", x, top - 6, x, top + grid_h, oom ? "#D00" : "#555",
        oom ? "none" : "4 3", oom ? "out-of-memory retry" : "empty_cache", at);
  }
  const double ly = top + grid_h + 24;
  out +=
      fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\">allocator events, in order</text>\n", left, ly);
  out += legend_row({{"#0072B2", "in use"},
                     {"#C8C8C8", "cached on its stream"},
                     {"#8E3B76", "in use, graph pool"},
                     {"#E6B8D6", "cached in a graph pool"}},
                    left, ly + 14, 190);
  out += "</svg>\n";
  return out;
}

}  // namespace mt::bench
