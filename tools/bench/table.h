// SPDX-License-Identifier: MIT
// A plain-text table with aligned columns (numbers right-aligned), printed at the end of
// a benchmark.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

namespace mt::bench {

inline void print_table(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        std::FILE* out = stdout) {
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  // A column is right-aligned (header too) when all its cells start like numbers.
  std::vector<bool> right(w.size(), true);
  right[0] = false;
  for (const auto& r : rows)
    for (size_t c = 1; c < r.size() && c < w.size(); ++c)
      if (!r[c].empty() &&
          !(std::isdigit((unsigned char)r[c][0]) || r[c][0] == '-' || r[c][0] == '+'))
        right[c] = false;
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string& cell = c < r.size() ? r[c] : std::string();
      std::string pad(w[c] - cell.size(), ' ');
      s += (c ? "  " : "") + (right[c] ? pad + cell : cell + pad);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::fprintf(out, "%s\n", s.c_str());
  };
  line(header);
  std::string rule;
  for (size_t c = 0; c < w.size(); ++c) rule += (c ? "  " : "") + std::string(w[c], '-');
  std::fprintf(out, "%s\n", rule.c_str());
  for (const auto& r : rows) line(r);
}

}  // namespace mt::bench
