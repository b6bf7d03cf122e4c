// SPDX-License-Identifier: MIT
#include "tools/bench/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "runtime/error.h"

namespace mt::bench {

namespace {

// Colors for variants (Okabe-Ito, readable by color-blind viewers), then grey shades.
const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                         "#E69F00", "#56B4E9", "#000000"};

std::string esc(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// A short number for an axis label: 0.001, 25, 1.5k, 2M.
std::string short_num(double v) {
  double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

std::string header(int w, int h, std::string_view title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" "
      "font-weight=\"bold\">{3}</text>\n",
      w, h, w / 2, esc(title));
}

}  // namespace

std::string svg(const LinePlot& plot) {
  const int W = 820, H = 500, L = 80, R = 210, T = 40, B = 60;  // canvas and margins
  const double pw = W - L - R, ph = H - T - B;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const Series& s : plot.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!(s.x[i] > 0) || !std::isfinite(s.y[i]) || (plot.log_y && !(s.y[i] > 0))) continue;
      xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]), ymax = std::max(ymax, s.y[i]);
    }
  std::string out = header(W, H, plot.title);
  if (!(xmin <= xmax))
    return out + "<text x=\"410\" y=\"250\" text-anchor=\"middle\">no data</text>\n</svg>\n";
  // x: whole powers of two; y: whole decades (log) or 0 .. a round top (linear).
  const int lx0 = int(std::floor(std::log2(xmin))),
            lx1 = std::max(lx0 + 1, int(std::ceil(std::log2(xmax))));
  double y0, y1;
  if (plot.log_y) {
    y0 = std::floor(std::log10(ymin)), y1 = std::ceil(std::log10(ymax));
    if (y1 <= y0) y1 = y0 + 1;
  } else {
    y0 = std::min(0.0, ymin);
    double step = std::pow(10, std::floor(std::log10(std::max(ymax - y0, 1e-12))));
    y1 = std::ceil(ymax / step) * step;
    if (y1 <= y0) y1 = y0 + 1;
  }
  auto px = [&](double x) { return L + (std::log2(x) - lx0) / (lx1 - lx0) * pw; };
  auto py = [&](double y) {
    double v = plot.log_y ? std::log10(y) : y;
    return T + ph - (v - y0) / (y1 - y0) * ph;
  };
  // Grid and ticks.
  const int xstep = (lx1 - lx0) > 16 ? 4 : (lx1 - lx0) > 8 ? 2 : 1;
  for (int e = lx0; e <= lx1; e += xstep) {
    double x = L + double(e - lx0) / (lx1 - lx0) * pw;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">2<tspan dy=\"-5\" "
        "font-size=\"9\">{4}</tspan></text>\n",
        x, T, T + ph, T + ph + 18, e);
  }
  if (plot.log_y) {
    for (int e = int(y0); e <= int(y1); ++e) {
      double y = py(std::pow(10, e));
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>\n"
          "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
          L, y, L + pw, L - 6, y + 4, short_num(std::pow(10, e)));
      for (int m = 2; m < 10 && e < int(y1); ++m) {  // minor ticks
        double ym = py(m * std::pow(10, e));
        out += fmt::format(
            "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#f3f3f3\"/>\n", L,
            ym, L + pw);
      }
    }
  } else {
    for (int i = 0; i <= 5; ++i) {
      double v = y0 + (y1 - y0) * i / 5;
      double y = py(v);
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>\n"
          "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
          L, y, L + pw, L - 6, y + 4, short_num(v));
    }
  }
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", L, T,
      pw, ph);
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + pw / 2,
                     H - 15, esc(plot.x_label));
  out += fmt::format(
      "<text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      T + ph / 2, esc(plot.y_label));
  // Series and legend: variants in colors with dots, references dashed grey-ish.
  int vi = 0, li = 0;  // next auto color, legend row
  for (const Series& s : plot.series) {
    const char* color = s.color >= 0  ? kColors[size_t(s.color) % std::size(kColors)]
                        : s.reference ? "#777777"
                                      : kColors[size_t(vi) % std::size(kColors)];
    if (!s.reference && s.color < 0) ++vi;
    const std::string dash = s.reference ? " stroke-dasharray=\"6 4\"" : "";
    std::string pts;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!(s.x[i] > 0) || !std::isfinite(s.y[i]) || (plot.log_y && !(s.y[i] > 0))) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
    }
    if (!pts.empty()) {
      out += fmt::format(
          "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n", pts,
          color, s.reference ? 1.5 : 2, dash);
      if (!s.reference)
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
          if (s.x[i] > 0 && std::isfinite(s.y[i]) && (!plot.log_y || s.y[i] > 0))
            out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n",
                               px(s.x[i]), py(s.y[i]), color);
    }
    const double ly = T + 10 + 20 * li++;
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2\"{4}/>\n"
        "<text x=\"{5}\" y=\"{6:.1f}\">{7}</text>\n",
        L + pw + 12, ly, L + pw + 38, color, dash, L + pw + 44, ly + 4, esc(s.name));
  }
  return out + "</svg>\n";
}

std::string svg(const BarPlot& plot) {
  size_t longest = 0;
  for (const Bar& b : plot.bars) longest = std::max(longest, b.label.size());
  // The label column fits the longest label (about 6.6 px a character at 12 px).
  const int L = std::max(120, int(16 + 6.6 * double(longest))), R = 90, T = 40, B = 45, bar_h = 22,
            gap = 10;
  const int W = std::max(820, L + 480 + R);
  const int H = T + B + int(plot.bars.size()) * (bar_h + gap);
  const double pw = W - L - R;
  double vmax = 0;
  for (const Bar& b : plot.bars)
    if (std::isfinite(b.value)) vmax = std::max(vmax, b.value);
  if (vmax <= 0) vmax = 1;
  // Ticks at a round step (1, 2 or 5 times a power of ten), the axis ending on one.
  const double raw = vmax / 4, mag = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / mag <= 1   ? mag
                      : raw / mag <= 2 ? 2 * mag
                      : raw / mag <= 5 ? 5 * mag
                                       : 10 * mag;
  const int ticks = int(std::ceil(vmax / step - 1e-9));
  vmax = ticks * step;
  std::string out = header(W, H, plot.title);
  for (int i = 0; i <= ticks; ++i) {
    double x = L + pw * i / ticks;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, T, H - B, H - B + 16, short_num(step * i));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + pw / 2,
                     H - 8, esc(plot.value_label));
  for (size_t i = 0; i < plot.bars.size(); ++i) {
    const Bar& b = plot.bars[i];
    const double y = T + double(i) * (bar_h + gap) + gap / 2.0;
    const double w = std::isfinite(b.value) ? std::max(0.0, b.value) / vmax * pw : 0;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", L - 8,
                       y + bar_h / 2.0 + 4, esc(b.label));
    out += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n",
                       L, y, w, bar_h, kColors[i % (std::size(kColors) - 1)]);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{:.4g}</text>\n", L + w + 5,
                       y + bar_h / 2.0 + 4, b.value);
  }
  return out + "</svg>\n";
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  MT_CHECK(f.good(), "[bench] cannot write {}", path);
  f << text;
  f.close();
  MT_CHECK(f.good(), "[bench] writing {} failed", path);
}

std::string xml_escape(std::string_view s) { return esc(s); }

}  // namespace mt::bench
