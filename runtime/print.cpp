// SPDX-License-Identifier: MIT
// Printing in PyTorch's style: one number format for the whole tensor, right-aligned
// columns, the middle of large tensors elided, then shape, dtype and device.
#include <cmath>
#include <ostream>

#include "runtime/tensor.h"

namespace mt {
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements, as torch's default threshold
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  enum Mode { Int, Fixed, Sci, Boolean, Integer } mode = Fixed;
  size_t width = 1;

  std::string fmt_one(double v) const {
    if (mode == Boolean) return v != 0 ? "True" : "False";
    if (mode == Integer) return fmt::format("{}", int64_t(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (mode == Int) return fmt::format("{:.0f}.", v);
    if (mode == Sci) return fmt::format("{:.4e}", v);
    return fmt::format("{:.4f}", v);
  }
};

Formatter make_formatter(const std::vector<double>& vals, DType dtype) {
  Formatter f;
  if (dtype == DType::Bool) {
    f.mode = Formatter::Boolean;
  } else if (dtype == DType::Int64) {
    f.mode = Formatter::Integer;
  } else {
    bool all_int = true;
    double amax = 0, amin = INFINITY;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      all_int = all_int && std::nearbyint(v) == v;
      double a = std::abs(v);
      amax = std::max(amax, a);
      if (a != 0) amin = std::min(amin, a);
    }
    if (all_int) {
      f.mode = amax > 1e8 ? Formatter::Sci : Formatter::Int;
    } else if (amin != INFINITY && (amax / amin > 1000.0 || amax > 1e8 || amin < 1e-4)) {
      f.mode = Formatter::Sci;
    }
  }
  for (double v : vals) f.width = std::max(f.width, f.fmt_one(v).size());
  return f;
}

// Row-major indices of the elements that are shown (all, or the edges of each dim).
bool shown(int64_t i, int64_t size, bool summarize) {
  return !summarize || size <= 2 * kEdgeItems || i < kEdgeItems || i >= size - kEdgeItems;
}

void format_rec(std::string& out, const Tensor& t, std::vector<int64_t>& idx, size_t d,
                size_t indent, const Formatter& f, bool summarize) {
  const Shape& sizes = t.sizes();
  if (d == sizes.size()) {
    int64_t linear = 0;
    for (size_t k = 0; k < sizes.size(); ++k) linear = linear * sizes[k] + idx[k];
    std::string s = f.fmt_one(detail::read_as_double(t, linear));
    out += std::string(f.width - s.size(), ' ') + s;
    return;
  }
  out += '[';
  int64_t n = sizes[d];
  bool last_dim = d + 1 == sizes.size();
  std::string sep =
      last_dim ? ", "
               : "," + std::string(sizes.size() - d - 1, '\n') + std::string(indent + d + 1, ' ');
  bool first = true;
  for (int64_t i = 0; i < n; ++i) {
    if (!shown(i, n, summarize)) {
      if (i == kEdgeItems) out += sep + "...";
      continue;
    }
    if (!first) out += sep;
    first = false;
    idx[d] = i;
    format_rec(out, t, idx, d + 1, indent, f, summarize);
  }
  out += ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::string suffix = fmt::format("shape={}, dtype={}", sizes(), dtype());
  if (!is_cpu()) suffix += fmt::format(", device={}", device());
  if (requires_grad()) suffix += ", requires_grad=True";
  if (is_fake()) return fmt::format("tensor(<fake>, {})", suffix);

  Tensor host = is_cpu() ? *this : detail::copy_as(*this, dtype(), kCPU);
  bool summarize = host.numel() > kSummarizeAbove;
  std::vector<double> vals;  // the shown values decide the format
  std::vector<int64_t> idx(size_t(host.dim()), 0);
  for (int64_t i = 0; i < host.numel(); ++i) {
    int64_t rem = i;
    bool keep = true;
    for (size_t d = host.sizes().size(); d-- > 0;) {
      keep = keep && shown(rem % host.sizes()[d], host.sizes()[d], summarize);
      rem /= host.sizes()[d];
    }
    if (keep) vals.push_back(detail::read_as_double(host, i));
  }
  Formatter f = make_formatter(vals, dtype());
  std::string body;
  const size_t indent = 7;  // strlen("tensor(")
  if (host.numel() == 0) {
    body = "[]";
  } else {
    format_rec(body, host, idx, 0, indent, f, summarize);
  }
  return fmt::format("tensor({}, {})", body, suffix);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mt
