// SPDX-License-Identifier: MIT
// Hand-written SVG plots for `minitensor bench --plot`: a line plot of one value against
// size (log2 x-axis, log10 or linear y-axis), reference lines (copy floors) dashed; and a
// horizontal bar chart for benchmarks without a size axis. Self-contained, no library.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mt::bench {

struct Series {
  std::string name = {};
  std::vector<double> x = {}, y = {};  // x > 0 (log2 axis); non-finite y values are skipped
  bool reference = false;              // drawn dashed: a floor or a ceiling, not a variant
  int color = -1;  // palette index; -1: the next variant color (grey for a reference)
};

struct LinePlot {
  std::string title = {}, x_label = {}, y_label = {};
  bool log_y = true;
  std::vector<Series> series = {};
};

struct Bar {
  std::string label = {};
  double value = 0;
};

struct BarPlot {
  std::string title = {}, value_label = {};
  std::vector<Bar> bars = {};
};

std::string svg(const LinePlot& plot);
std::string svg(const BarPlot& plot);

// Text for an SVG element or attribute: & < > " escaped.
std::string xml_escape(std::string_view s);

// Writes text to path; throws mt::Error if it cannot.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace mt::bench
