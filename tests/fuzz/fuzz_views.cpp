// SPDX-License-Identifier: MIT
// Fuzz target for the view functions (view, reshape, expand, slice, narrow, select,
// transpose, permute, unsqueeze, squeeze, flatten), with sizes, dims and indices from a
// table of edge values (0, 1, -1, INT64_MAX, 2^32, 2^62, ...), against a slow reference:
// the storage holds 0, 1, 2, ... (float64), and the reference is the list of storage
// indices each element reads, in row-major order, recomputed by every op from the list
// before it (no strides involved). After each op the tensor must either hold exactly
// those values, or the call must throw an mt::Error starting with "[name] " where the
// reference says the call is invalid. A call the reference cannot judge (view of a
// non-contiguous tensor, which may or may not have compatible strides; an expand to more
// bytes than int64 counts though the count fits) may go either way, checked the same if
// it succeeds. Anything else aborts: a finding.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "minitensor.h"

namespace {

using mt::Shape;
using mt::Tensor;
using i128 = __int128;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxChecked = 4096;  // elements the reference materializes

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_views: %s\n", what.c_str());
  std::abort();  // the fuzzer's way to report a finding
}

struct Reader {
  const uint8_t* p;
  size_t n;
  bool done() const { return n == 0; }
  uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  // Mostly small values, sometimes an edge value.
  int64_t value() {
    static const int64_t edges[] = {kMax,
                                    kMin,
                                    kMax / 2,
                                    int64_t(1) << 32,
                                    int64_t(1) << 62,
                                    (int64_t(1) << 62) + 4,
                                    3037000500,
                                    -(int64_t(1) << 32),
                                    kMin + 1,
                                    100,
                                    -100,
                                    7};
    const uint8_t b = byte();
    if (b < 0xd0) return int64_t(b % 9) - 2;  // -2 .. 6
    return edges[b % (sizeof edges / sizeof edges[0])];
  }
};

// The reference: sizes and, when there are at most kMaxChecked elements, the storage
// index of every element in row-major order.
struct Ref {
  std::vector<int64_t> sizes;
  std::vector<int64_t> index;
  bool known = true;  // false: too many elements to list
};

i128 count(const std::vector<int64_t>& s) {
  for (int64_t v : s)
    if (v == 0) return 0;
  i128 n = 1;
  for (int64_t v : s) {
    n *= v;
    if (n > i128(kMax) || n < 0) return i128(kMax) + 1;
  }
  return n;
}

// The product of the sizes with 0s taken as 1s, saturating past int64.
i128 nonzero_count(const std::vector<int64_t>& s) {
  std::vector<int64_t> t;
  for (int64_t v : s) t.push_back(std::max<int64_t>(v, 1));
  return count(t);
}

// Row-major strides of the reference list (over its own sizes).
std::vector<int64_t> list_strides(const std::vector<int64_t>& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * std::max<int64_t>(s[i], 1);
  return st;
}

// Calls fn(position, multi-index) for every element of sizes s, row-major.
template <typename F>
void each(const std::vector<int64_t>& s, F fn) {
  const i128 n = count(s);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t k = 0; k < int64_t(n); ++k) {
    fn(k, idx);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

// A new reference of sizes `out` whose element at multi-index o reads the old element at
// src(o) (a multi-index of the old sizes).
template <typename Src>
Ref remap(const Ref& in, std::vector<int64_t> out, Src src) {
  Ref r;
  r.sizes = std::move(out);
  const i128 n = count(r.sizes);
  if (!in.known || n > kMaxChecked) {
    r.known = false;
    return r;
  }
  const std::vector<int64_t> st = list_strides(in.sizes);
  r.index.resize(size_t(n));
  each(r.sizes, [&](int64_t k, const std::vector<int64_t>& o) {
    const std::vector<int64_t> i = src(o);
    int64_t at = 0;
    for (size_t d = 0; d < i.size(); ++d) at += i[d] * st[d];
    r.index[size_t(k)] = in.index[size_t(at)];
  });
  return r;
}

// The same elements in the same order, new sizes (view, reshape, flatten).
Ref relabel(const Ref& in, std::vector<int64_t> out) {
  Ref r = in;
  r.sizes = std::move(out);
  return r;
}

enum class Verdict { Valid, Invalid, Either };

struct Expect {
  Verdict verdict = Verdict::Invalid;
  Ref ref;  // for Valid and Either
};
Expect invalid() { return {}; }
Expect valid(Ref r, Verdict v = Verdict::Valid) { return {v, std::move(r)}; }

bool wrap(int64_t& d, int64_t rank) {  // a dim in [-rank, rank)
  if (d < -rank || d >= rank) return false;
  if (d < 0) d += rank;
  return true;
}

// view/reshape's target sizes with -1 inferred; false when invalid.
bool infer(std::vector<int64_t> s, i128 numel, std::vector<int64_t>* out) {
  int infer_at = -1;
  i128 known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer_at >= 0) return false;
      infer_at = int(i);
    } else if (s[i] < 0) {
      return false;
    } else {
      known *= s[i];
      if (known > i128(kMax)) return false;
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) return false;
    s[size_t(infer_at)] = int64_t(numel / known);
  } else if (known != numel) {
    return false;
  }
  // Strides are products of sizes: with a 0 among them, the others must still multiply
  // to a count (minitensor's rule; "the strides cannot be computed").
  if (nonzero_count(s) > i128(kMax)) return false;
  *out = std::move(s);
  return true;
}

std::vector<int64_t> read_shape(Reader& in, size_t max_rank) {
  std::vector<int64_t> s(in.byte() % (max_rank + 1));
  for (auto& v : s) v = in.value();
  return s;
}

std::string str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// MT_FUZZ_STATS=1: how many calls were accepted and refused, printed at exit (to see
// that the inputs reach valid calls, not only errors).
struct Stats {
  long accepted = 0, refused = 0, checked_values = 0;
  ~Stats() {
    if (std::getenv("MT_FUZZ_STATS"))
      std::fprintf(stderr,
                   "fuzz_views: %ld calls accepted (%ld with every value checked), %ld refused\n",
                   accepted, checked_values, refused);
  }
} g_stats;

void run(const uint8_t* data, size_t size) {
  Reader in{data, size};
  // The base: contiguous, 0 to 4 dims of 0 to 4 elements, holding 0, 1, 2, ...
  std::vector<int64_t> base_sizes(in.byte() % 5);
  for (auto& v : base_sizes) v = in.byte() % 5;
  const int64_t n = int64_t(count(base_sizes));
  Tensor t = mt::arange(double(n), {.dtype = mt::DType::Float64}).view(Shape(base_sizes));
  Ref ref;
  ref.sizes = base_sizes;
  for (int64_t i = 0; i < n; ++i) ref.index.push_back(i);
  std::string trail = "base " + str(base_sizes);

  for (int step = 0; step < 8 && !in.done(); ++step) {
    const int64_t rank = int64_t(ref.sizes.size());
    const i128 numel = count(ref.sizes);
    Expect e;
    std::function<Tensor()> call;
    std::string what;
    const int op = in.byte() % 11;
    switch (op) {
      case 0:
      case 1: {  // view, reshape
        const bool is_view = op == 0;
        std::vector<int64_t> s = read_shape(in, 5), out;
        what = std::string(is_view ? "view" : "reshape") + str(s);
        call = [&t, s, is_view] { return is_view ? t.view(Shape(s)) : t.reshape(Shape(s)); };
        if (!infer(s, numel, &out))
          e = invalid();
        else
          e = valid(relabel(ref, out),
                    is_view && !t.is_contiguous() ? Verdict::Either : Verdict::Valid);
        break;
      }
      case 2: {  // expand
        std::vector<int64_t> s = read_shape(in, 5);
        what = "expand" + str(s);
        call = [&t, s] { return t.expand(Shape(s)); };
        if (s.size() < ref.sizes.size()) {
          e = invalid();
          break;
        }
        const size_t lead = s.size() - ref.sizes.size();
        std::vector<int64_t> out = s;
        bool ok = true;
        for (size_t i = 0; i < s.size() && ok; ++i) {
          if (i < lead) {
            ok = s[i] >= 0;
          } else {
            const int64_t have = ref.sizes[i - lead];
            if (s[i] == -1)
              out[i] = have;
            else
              ok = s[i] >= 0 && (have == s[i] || have == 1);
          }
        }
        const i128 c = count(out);
        if (!ok || c > i128(kMax)) {
          e = invalid();
          break;
        }
        if (nonzero_count(out) > i128(kMax)) {  // refusing it is minitensor's rule for factories
          e = valid(Ref{out, {}, true}, Verdict::Either);  // a 0 among them: no element
          break;
        }
        Verdict v = c * 8 > i128(kMax) ? Verdict::Either : Verdict::Valid;
        const std::vector<int64_t> have = ref.sizes;
        e = valid(remap(ref, out,
                        [&](const std::vector<int64_t>& o) {
                          std::vector<int64_t> i(have.size());
                          for (size_t d = 0; d < have.size(); ++d)
                            i[d] = have[d] == 1 ? 0 : o[d + lead];
                          return i;
                        }),
                  v);
        break;
      }
      case 3: {  // slice
        int64_t d = in.value(), start = in.value(), end = in.value(), st = in.value();
        what = fmt::format("slice({}, {}, {}, {})", d, start, end, st);
        call = [&t, d, start, end, st] { return t.slice(d, start, end, st); };
        if (rank == 0 || !wrap(d, rank) || st <= 0) {
          e = invalid();
          break;
        }
        const int64_t sz = ref.sizes[size_t(d)];
        i128 s0 = start < 0 ? i128(start) + sz : start, e0 = end < 0 ? i128(end) + sz : end;
        s0 = std::clamp<i128>(s0, 0, sz);
        e0 = std::clamp<i128>(e0, 0, sz);
        const int64_t len = e0 <= s0 ? 0 : int64_t((e0 - s0 + st - 1) / st);
        std::vector<int64_t> out = ref.sizes;
        out[size_t(d)] = len;
        e = valid(remap(ref, out, [&](std::vector<int64_t> o) {
          o[size_t(d)] = int64_t(s0 + i128(o[size_t(d)]) * st);
          return o;
        }));
        break;
      }
      case 4: {  // narrow
        int64_t d = in.value(), start = in.value(), len = in.value();
        what = fmt::format("narrow({}, {}, {})", d, start, len);
        call = [&t, d, start, len] { return t.narrow(d, start, len); };
        if (rank == 0 || !wrap(d, rank)) {
          e = invalid();
          break;
        }
        const int64_t sz = ref.sizes[size_t(d)];
        const i128 s0 = start < 0 ? i128(start) + sz : start;
        if (s0 < 0 || s0 > sz || len < 0 || s0 + len > sz) {
          e = invalid();
          break;
        }
        std::vector<int64_t> out = ref.sizes;
        out[size_t(d)] = len;
        e = valid(remap(ref, out, [&](std::vector<int64_t> o) {
          o[size_t(d)] += int64_t(s0);
          return o;
        }));
        break;
      }
      case 5: {  // select
        int64_t d = in.value(), i = in.value();
        what = fmt::format("select({}, {})", d, i);
        call = [&t, d, i] { return t.select(d, i); };
        if (rank == 0 || !wrap(d, rank)) {
          e = invalid();
          break;
        }
        const int64_t sz = ref.sizes[size_t(d)];
        const i128 i0 = i < 0 ? i128(i) + sz : i;
        if (i0 < 0 || i0 >= sz) {
          e = invalid();
          break;
        }
        std::vector<int64_t> out = ref.sizes;
        out.erase(out.begin() + d);
        e = valid(remap(ref, out, [&](std::vector<int64_t> o) {
          o.insert(o.begin() + d, int64_t(i0));
          return o;
        }));
        break;
      }
      case 6: {  // transpose
        int64_t a = in.value(), b = in.value();
        what = fmt::format("transpose({}, {})", a, b);
        call = [&t, a, b] { return t.transpose(a, b); };
        if (rank == 0) return;  // 0-dim: conventions differ; not judged
        if (!wrap(a, rank) || !wrap(b, rank)) {
          e = invalid();
          break;
        }
        std::vector<int64_t> out = ref.sizes;
        std::swap(out[size_t(a)], out[size_t(b)]);
        e = valid(remap(ref, out, [&](std::vector<int64_t> o) {
          std::swap(o[size_t(a)], o[size_t(b)]);
          return o;
        }));
        break;
      }
      case 7: {  // permute
        std::vector<int64_t> p(static_cast<size_t>(rank));
        for (auto& v : p) v = in.value();
        what = "permute" + str(p);
        call = [&t, p] { return t.permute(Shape(p)); };
        std::vector<bool> seen(size_t(rank), false);
        bool ok = true;
        for (auto& v : p) {
          ok = ok && wrap(v, rank) && !seen[size_t(v)];
          if (ok) seen[size_t(v)] = true;
        }
        if (!ok) {
          e = invalid();
          break;
        }
        std::vector<int64_t> out(static_cast<size_t>(rank));
        for (size_t i = 0; i < p.size(); ++i) out[i] = ref.sizes[size_t(p[i])];
        e = valid(remap(ref, out, [&](const std::vector<int64_t>& o) {
          std::vector<int64_t> i(o.size());
          for (size_t k = 0; k < p.size(); ++k) i[size_t(p[k])] = o[k];
          return i;
        }));
        break;
      }
      case 8: {  // unsqueeze
        int64_t d = in.value();
        what = fmt::format("unsqueeze({})", d);
        call = [&t, d] { return t.unsqueeze(d); };
        if (rank >= mt::kMaxDims || !wrap(d, rank + 1)) {
          e = invalid();
          break;
        }
        std::vector<int64_t> out = ref.sizes;
        out.insert(out.begin() + d, 1);
        e = valid(relabel(ref, out));
        break;
      }
      case 9: {  // squeeze(dim), squeeze()
        const bool all = in.byte() % 2 == 0;
        int64_t d = all ? 0 : in.value();
        what = all ? std::string("squeeze()") : fmt::format("squeeze({})", d);
        call = [&t, d, all] { return all ? t.squeeze() : t.squeeze(d); };
        std::vector<int64_t> out;
        if (all) {
          for (int64_t v : ref.sizes)
            if (v != 1) out.push_back(v);
        } else if (rank == 0) {
          return;  // 0-dim: conventions differ; not judged
        } else if (!wrap(d, rank)) {
          e = invalid();
          break;
        } else {
          out = ref.sizes;
          if (out[size_t(d)] == 1) out.erase(out.begin() + d);
        }
        e = valid(relabel(ref, out));
        break;
      }
      default: {  // flatten
        int64_t a = in.value(), b = in.value();
        what = fmt::format("flatten({}, {})", a, b);
        call = [&t, a, b] { return t.flatten(a, b); };
        if (rank == 0) return;  // 0-dim: conventions differ; not judged
        if (!wrap(a, rank) || !wrap(b, rank) || a > b) {
          e = invalid();
          break;
        }
        std::vector<int64_t> out(ref.sizes.begin(), ref.sizes.begin() + a);
        out.push_back(
            int64_t(count(std::vector<int64_t>(ref.sizes.begin() + a, ref.sizes.begin() + b + 1))));
        out.insert(out.end(), ref.sizes.begin() + b + 1, ref.sizes.end());
        e = valid(relabel(ref, out));
        break;
      }
    }
    trail += " -> " + what;
    Tensor r;
    try {
      r = call();
    } catch (const mt::InternalError& x) {
      die("internal error after " + trail + "\n" + x.what());
    } catch (const mt::Error& x) {
      const std::string_view m = x.what();
      if (!m.starts_with("[") || m.find("] ") == std::string_view::npos)
        die("an error without the op's name in brackets after " + trail + "\n" + x.what());
      if (e.verdict == Verdict::Valid) die("a valid call was refused: " + trail + "\n" + x.what());
      ++g_stats.refused;
      return;  // refused: the sequence ends here
    } catch (const std::exception& x) {
      die("a non-mt::Error exception after " + trail + "\n" + x.what());
    }
    if (e.verdict == Verdict::Invalid) die("an invalid call was accepted: " + trail);
    if (std::vector<int64_t>(r.sizes().vec()) != e.ref.sizes)
      die("sizes " + str(r.sizes().vec()) + " instead of " + str(e.ref.sizes) + " after " + trail);
    ++g_stats.accepted;
    if (e.ref.known) {
      ++g_stats.checked_values;
      const std::vector<double> got = r.to_vector<double>();
      for (size_t k = 0; k < got.size(); ++k)
        if (got[k] != double(e.ref.index[k]))
          die(fmt::format("element {} reads {} instead of {} after {}", k, got[k], e.ref.index[k],
                          trail));
    }
    t = r;
    ref = e.ref;
    if (!ref.known) return;  // too large to follow further
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(data, size);
  return 0;
}
