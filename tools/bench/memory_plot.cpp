#include "tools/bench/memory_plot.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "tools/bench/plot.h"

namespace mt::bench {

namespace {

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
};

}  // namespace

std::string svg_cache_lru(const std::vector<jit::CacheEvent>& events, const std::string& title,
                          size_t max_columns) {
  using Kind = jit::CacheEvent::Kind;
  std::map<std::string, std::string> names;
  for (const auto& e : events)
    if (!e.name.empty()) names[e.key] = e.name;
  // Replay the events: the disk's recency order, and one column per access.
  std::vector<std::string> order;
  std::vector<Column> cols;
  size_t hits = 0, misses = 0, evictions = 0;
  for (const auto& e : events) {
    auto drop = [&] { order.erase(std::remove(order.begin(), order.end(), e.key), order.end()); };
    if (e.kind == Kind::DiskHit || e.kind == Kind::Compile) {
      drop();
      order.insert(order.begin(), e.key);
      cols.push_back({e.key, e.kind == Kind::DiskHit, order, {}});
      ++(e.kind == Kind::DiskHit ? hits : misses);
    } else if (e.kind == Kind::Eviction || e.kind == Kind::Corrupt) {
      drop();
      if (!cols.empty()) {
        cols.back().evicted.push_back(e.key);
        cols.back().order = order;
      }
      evictions += e.kind == Kind::Eviction;
    }
  }
  if (cols.size() > max_columns) cols.erase(cols.begin(), cols.end() - ptrdiff_t(max_columns));
  size_t rows = 1, below = 0;
  for (const auto& c : cols) {
    rows = std::max(rows, c.order.size());
    below = std::max(below, c.evicted.size());
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
      "<text x=\"{3}\" y=\"42\">{4} accesses: {5} hits (green), {6} misses compiled and written "
      "(orange), {7} evictions (crossed out below each column)</text>\n",
      width, height, xml_escape(title), left, cols.size(), hits, misses, evictions);
  out += fmt::format(
      "<text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">"
      "recency: most recent on top</text>\n",
      top + grid_h / 2, top + grid_h / 2);
  for (size_t i = 0; i < cols.size(); ++i) {
    const Column& c = cols[i];
    const int x = left + int(i) * cw;
    out += fmt::format("<g class=\"access\"><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
                       "fill=\"#555\">{}</text>\n",
                       x + cw / 2, top - 8, i + 1);
    for (size_t r = 0; r < c.order.size(); ++r) {
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
    for (size_t r = 0; r < c.evicted.size(); ++r) {
      const int y = top + grid_h + 16 + int(r) * ch;
      out += fmt::format(
          "<rect class=\"evicted\" x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" fill=\"#BBBBBB\"/>"
          "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\" fill=\"#444\">{6}</text>"
          "<line x1=\"{0}\" y1=\"{7}\" x2=\"{8}\" y2=\"{7}\" stroke=\"#C00\" stroke-width=\"1.5\"/>\n",
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
  const std::pair<const char*, const char*> legend[] = {
      {"#009E73", "hit: loaded from disk"}, {"#E69F00", "miss: compiled, written"},
      {"#DDE6F0", "cached, not accessed"}, {"#BBBBBB", "evicted"}};
  int lx = left;
  for (const auto& [color, text] : legend) {
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
                       "<text x=\"{}\" y=\"{}\">{}</text>\n",
                       lx, ly, color, lx + 16, ly + 10, text);
    lx += 170;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace mt::bench
