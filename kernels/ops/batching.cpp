// SPDX-License-Identifier: MIT
// The built-in batching rules: each op's kernel at the Batched key (Note [Where Batched
// sits] in autograd/vmap.h). A rule gets the op's arguments with every batched tensor
// replaced by its value (the batch dim in info.in_dims) and computes the whole batch with
// ordinary op calls, one level down. Every elementwise row gets the broadcasting rule from
// the table; the views, reductions, matmul, softmax and mse_loss have rules of their own.
#include <fmt/format.h>

#include "autograd/vmap.h"
#include "dispatcher/library.h"
#include "kernels/elementwise_rows.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

using Bdim = std::optional<int64_t>;

size_t base_of(const VmapInfo& info, const Stack* s) { return s->size() - info.in_dims.size(); }

// A tensor argument with its batch dim moved to the front (an unbatched one as it is).
Tensor front(const Value& v, Bdim bdim) {
  const Tensor t = v.to_tensor();
  return bdim ? detail::movedim(t, *bdim, 0) : t;
}
// The per-sample rank of argument i.
int64_t rank(const Value& v, Bdim bdim) { return v.to_tensor().dim() - (bdim ? 1 : 0); }
// A batch-front tensor padded with size-1 dims after the batch dim to per-sample rank r.
Tensor pad_to(Tensor t, int64_t r) {
  while (t.dim() - 1 < r) t = t.unsqueeze(1);
  return t;
}
// A per-sample dim of a batch-front tensor of per-sample rank r, as its physical dim.
int64_t phys(int64_t dim, int64_t r, const char* op) { return wrap_dim(dim, r, op) + 1; }

BatchDims one(Stack* s, size_t base, Tensor out, Bdim bdim = 0) {
  s->resize(base);
  s->emplace_back(std::move(out));
  return {bdim};
}

// Elementwise ops, every tensor argument broadcasting: one batched tensor keeps its batch
// dim; several are moved to the front and padded to the same per-sample rank, so that
// the batch dim lines up and the per-sample dims broadcast as they would per sample.
BoxedVmapRule pointwise_rule(OperatorHandle op) {
  return [op](const VmapInfo& info, Stack* s) -> BatchDims {
    const size_t base = base_of(info, s);
    int tensors = 0;
    int64_t r = 0;
    for (size_t i = 0; i < info.in_dims.size(); ++i) {
      const Value& v = (*s)[base + i];
      if (!v.is_tensor() || !v.to_tensor().defined()) continue;
      ++tensors;
      r = std::max(r, rank(v, info.in_dims[i]));
    }
    Bdim out = 0;
    if (tensors == 1) {
      for (const Bdim& d : info.in_dims)
        if (d) out = d;
    } else {
      for (size_t i = 0; i < info.in_dims.size(); ++i)
        if (info.in_dims[i])
          (*s)[base + i] = Value(pad_to(front((*s)[base + i], info.in_dims[i]), r));
    }
    Stack args(s->begin() + std::ptrdiff_t(base), s->end());
    s->resize(base);
    detail::call_boxed_below(op, &args);
    s->insert(s->end(), args.begin(), args.end());
    return BatchDims(args.size(), out);
  };
}

// Rules on one batched tensor argument (self, first), the rest of the arguments as given.
template <typename F>
BoxedVmapRule self_rule(F f) {
  return [f](const VmapInfo& info, Stack* s) -> BatchDims {
    const size_t base = base_of(info, s);
    const Tensor t = front((*s)[base], info.in_dims[0]);
    return one(s, base, f(t, t.dim() - 1, info.batch_size, s, base));
  };
}

Shape with_batch(int64_t batch, std::span<const int64_t> rest) {
  Shape s{batch};
  for (int64_t d : rest) s.push_back(d);
  return s;
}

Tensor reduce(const Tensor& t, int64_t r, const std::vector<int64_t>& dims, bool keepdim, bool mean,
              const char* op) {
  if (dims.empty() && r == 0) return t.clone();  // a per-sample scalar reduces to itself
  std::vector<int64_t> d;
  if (dims.empty())
    for (int64_t i = 1; i <= r; ++i) d.push_back(i);
  for (int64_t x : dims) d.push_back(phys(x, r, op));
  return mean ? mt::mean(t, d, keepdim) : mt::sum(t, d, keepdim);
}

// matmul per sample, as one matmul of the batch (Note [Batched matmul]).
Tensor batched_matmul(const Tensor& a0, Bdim ad, const Tensor& b0, Bdim bd) {
  // Note [Batched matmul]
  // Per sample a is [.., m, k] (or [k]) and b [.., k, n] (or [k]). A batched operand goes
  // to the front and is padded after the batch dim so that the batch dim lines up with
  // the other operand's leading dims; a 1-d batched operand first becomes a matrix
  // ([B, 1, k] or [B, k, 1]) and that dim is dropped from the result. An unbatched
  // operand broadcasts. A batched vector b against an unbatched a is a @ b^T: [.., m, B].
  const int64_t ra = a0.dim() - (ad ? 1 : 0), rb = b0.dim() - (bd ? 1 : 0);
  if (!ad) {
    if (rb == 1) return mt::matmul(a0, detail::movedim(b0, *bd, 1));  // [.., m, B]: caller's dim
    return mt::matmul(a0, pad_to(detail::movedim(b0, *bd, 0), std::max(ra, rb)));
  }
  Tensor a = detail::movedim(a0, *ad, 0);
  if (!bd) {
    if (ra == 1) {
      if (rb <= 2) return mt::matmul(a, b0);   // [B, k] @ [k] or [k, n]
      Tensor a2 = pad_to(a.unsqueeze(1), rb);  // [B, 1.., 1, k]
      return mt::matmul(a2, b0).squeeze(-2);
    }
    return mt::matmul(pad_to(a, std::max(ra, rb)), b0);
  }
  Tensor b = detail::movedim(b0, *bd, 0);
  const bool va = ra == 1, vb = rb == 1;
  Tensor a2 = va ? a.unsqueeze(1) : a;  // [B, 1, k]
  Tensor b2 = vb ? b.unsqueeze(2) : b;  // [B, k, 1]
  const int64_t r = std::max(a2.dim(), b2.dim()) - 1;
  Tensor out = mt::matmul(pad_to(a2, r), pad_to(b2, r));
  if (vb) out = out.squeeze(-1);
  if (va) out = out.squeeze(vb ? -1 : -2);
  return out;
}

}  // namespace

void register_batching_rules() {
  static Library lib(Library::Kind::Impl, "mt", DispatchKey::Batched);
  auto add = [](const char* name, BoxedVmapRule rule,
                std::source_location loc = std::source_location::current()) {
    lib.impl(name, detail::batched_kernel(std::move(rule)), loc);
  };
  auto find = [](const std::string& name) { return dispatcher().find_or_throw(name); };

  // Every elementwise row's op, from the table; the ops that keep each element's place.
  for (const ew::Row& r : ew::kRows) {
    const std::string name = ew::op_name(r);
    if (!name.empty()) add(name.c_str(), pointwise_rule(find(name)));
  }
  for (const char* name : {"mt::clone", "mt::contiguous", "mt::to.dtype", "mt::to.device"})
    add(name, pointwise_rule(find(name)));

  // Views and reshapes: the per-sample dims move one place up.
  for (const char* name : {"mt::view", "mt::reshape"})
    add(name, self_rule([](const Tensor& t, int64_t, int64_t batch, Stack* s, size_t base) {
          return t.reshape(with_batch(batch, (*s)[base + 1].to_int_list()));
        }));
  add("mt::squeeze", self_rule([](const Tensor& t, int64_t r, int64_t, Stack*, size_t) {
        Tensor out = t;
        for (int64_t d = r; d >= 1; --d)
          if (out.size(d) == 1) out = out.squeeze(d);
        return out;
      }));
  add("mt::squeeze.dim", self_rule([](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
        const int64_t d = (*s)[base + 1].to_int();
        return r == 0 ? (void(wrap_dim(d, 1, "squeeze")), t.clone())
                      : t.squeeze(phys(d, r, "squeeze"));
      }));
  add("mt::unsqueeze", self_rule([](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
        return t.unsqueeze(phys((*s)[base + 1].to_int(), r + 1, "unsqueeze"));
      }));
  add("mt::transpose", self_rule([](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
        if (r == 0) return t.clone();
        return t.transpose(phys((*s)[base + 1].to_int(), r, "transpose"),
                           phys((*s)[base + 2].to_int(), r, "transpose"));
      }));
  add("mt::permute", self_rule([](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
        const std::vector<int64_t> dims = (*s)[base + 1].to_int_list();
        MT_CHECK(int64_t(dims.size()) == r,
                 "[permute] dims {} has {} entries for a tensor of {} dims; give one per dim",
                 fmt::join(dims, ", "), dims.size(), r);
        Shape p{0};
        for (int64_t d : dims) p.push_back(phys(d, r, "permute"));
        return t.permute(p);
      }));
  add("mt::expand", self_rule([](const Tensor& t, int64_t, int64_t batch, Stack* s, size_t base) {
        const std::vector<int64_t> size = (*s)[base + 1].to_int_list();
        return pad_to(t, int64_t(size.size())).expand(with_batch(batch, size));
      }));
  add("mt::slice", self_rule([](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
        return t.slice(phys((*s)[base + 1].to_int(), r, "slice"), (*s)[base + 2].to_int(),
                       (*s)[base + 3].to_int(), (*s)[base + 4].to_int());
      }));
  add("mt::select", self_rule([](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
        return t.select(phys((*s)[base + 1].to_int(), r, "select"), (*s)[base + 2].to_int());
      }));

  // Reductions over per-sample dims.
  for (bool mean : {false, true})
    add(mean ? "mt::mean" : "mt::sum",
        self_rule([mean](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
          return reduce(t, r, (*s)[base + 1].to_int_list(), (*s)[base + 2].to_bool(), mean,
                        mean ? "mean" : "sum");
        }));
  add("mt::max", self_rule([](const Tensor& t, int64_t r, int64_t batch, Stack*, size_t) {
        if (r == 0) return t.clone();
        return std::get<0>(mt::max(t.reshape({batch, -1}), 1, false));
      }));
  add("mt::max.dim", [](const VmapInfo& info, Stack* s) -> BatchDims {
    const size_t base = base_of(info, s);
    const Tensor t = front((*s)[base], info.in_dims[0]);
    const int64_t r = t.dim() - 1;
    const int64_t d = (*s)[base + 1].to_int();
    auto [values, indices] = mt::max(t, r == 0 ? 1 : phys(d, r, "max"), (*s)[base + 2].to_bool());
    s->resize(base);
    s->emplace_back(values);
    s->emplace_back(indices);
    return {0, 0};
  });
  add("mt::sum_to", self_rule([](const Tensor& t, int64_t, int64_t batch, Stack* s, size_t base) {
        const std::vector<int64_t> size = (*s)[base + 1].to_int_list();
        Tensor p = pad_to(t, int64_t(size.size()));
        Shape target{batch};
        for (int64_t i = int64_t(size.size()); i < p.dim() - 1; ++i) target.push_back(1);
        for (int64_t d : size) target.push_back(d);
        return mt::sum_to(p, target).reshape(with_batch(batch, size));
      }));

  // softmax and log_softmax over a per-sample dim.
  for (bool log : {false, true})
    add(log ? "mt::log_softmax" : "mt::softmax",
        self_rule([log](const Tensor& t, int64_t r, int64_t, Stack* s, size_t base) {
          const int64_t d = (*s)[base + 1].to_int();
          const char* name = log ? "log_softmax" : "softmax";
          if (r == 0) {  // one element per sample
            (void)wrap_dim(d, 1, name);
            Tensor u = t.unsqueeze(1);
            return (log ? mt::log_softmax(u, 1) : mt::softmax(u, 1)).squeeze(1);
          }
          return log ? mt::log_softmax(t, phys(d, r, name)) : mt::softmax(t, phys(d, r, name));
        }));

  // matmul: one matmul of the batch.
  add("mt::matmul", [](const VmapInfo& info, Stack* s) -> BatchDims {
    const size_t base = base_of(info, s);
    const Tensor a = (*s)[base].to_tensor(), b = (*s)[base + 1].to_tensor();
    const Bdim ad = info.in_dims[0], bd = info.in_dims[1];
    Tensor out = batched_matmul(a, ad, b, bd);
    // an unbatched a times a batched vector leaves the batch last
    const bool last = !ad && b.dim() - 1 == 1;
    return one(s, base, out, last ? out.dim() - 1 : 0);
  });

  // mse_loss (mean of the squared difference): the mean over each sample's elements.
  add("mt::mse_loss", [](const VmapInfo& info, Stack* s) -> BatchDims {
    const size_t base = base_of(info, s);
    int64_t r = 0;
    for (size_t i = 0; i < 2; ++i) r = std::max(r, rank((*s)[base + i], info.in_dims[i]));
    Tensor x = (*s)[base].to_tensor(), y = (*s)[base + 1].to_tensor();
    if (info.in_dims[0]) x = pad_to(front((*s)[base], info.in_dims[0]), r);
    if (info.in_dims[1]) y = pad_to(front((*s)[base + 1], info.in_dims[1]), r);
    Tensor d = x - y;
    Tensor sq = d * d;
    std::vector<int64_t> dims;
    for (int64_t i = 1; i <= r; ++i) dims.push_back(i);
    return one(s, base, r == 0 ? sq : mt::mean(sq, dims, false));
  });
}

}  // namespace ops
}  // namespace mt
