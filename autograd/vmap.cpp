// SPDX-License-Identifier: MIT
// mt::vmap's machinery: batched tensors, the levels of running vmaps, the Batched
// kernel around a rule, the slow fallback, and mt::grad inside vmap (Note [Where Batched
// sits] in autograd/vmap.h). The built-in rules are in kernels/ops/batching.cpp.
#include "autograd/vmap.h"

#include <atomic>
#include <iterator>
#include <mutex>
#include <set>
#include <unordered_map>

#include "autograd/autograd.h"
#include "dispatcher/library.h"

namespace mt {
namespace detail {
extern std::atomic<Tensor (*)(const Tensor&)> g_detach_batched;  // runtime/tensor.cpp
}
namespace {

// A batched tensor: per-sample sizes outside, the real tensor (value) inside. It has no
// storage and is marked fake, so reading its data is an error, never a sample's bytes.
struct BatchedImpl final : TensorImpl {
  Tensor value;
  int64_t bdim = 0;
  int64_t level = 0;    // 1 for the outermost running vmap
  uint64_t serial = 0;  // the level's vmap call: a tensor kept past its vmap is caught
};

struct Level {
  int64_t batch_size = 0;
  uint64_t serial = 0;
  // tensors that require grad, lifted to [B, ...] at their first use (by impl; the
  // original is kept so that its address is not reused while the vmap runs)
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> lifted;
};

thread_local std::vector<Level> t_levels;
thread_local int64_t t_cursor = 0;  // the level that Batched kernels now process
std::atomic<uint64_t> g_next_serial{1};

// Sets the level being processed, with Batched in the included keys while it is >= 1.
class CursorGuard {
 public:
  explicit CursorGuard(int64_t level)
      : saved_(t_cursor), saved_included_(detail::t_local_keys.included) {
    t_cursor = level;
    detail::t_local_keys.included = level >= 1 ? saved_included_.add(DispatchKey::Batched)
                                               : saved_included_.remove(DispatchKey::Batched);
  }
  ~CursorGuard() {
    t_cursor = saved_;
    detail::t_local_keys.included = saved_included_;
  }
  CursorGuard(const CursorGuard&) = delete;
  CursorGuard& operator=(const CursorGuard&) = delete;

 private:
  int64_t saved_;
  DispatchKeySet saved_included_;
};

const BatchedImpl* as_batched(const Tensor& t) {
  if (!t.defined() || !t.key_set().has(DispatchKey::Batched)) return nullptr;
  return static_cast<const BatchedImpl*>(t.impl());
}

// The wrapper's level if it belongs to a running vmap, else an error naming `what`.
int64_t live_level(const BatchedImpl* b, std::string_view what) {
  MT_CHECK(b->level >= 1 && size_t(b->level) <= t_levels.size() &&
               t_levels[size_t(b->level - 1)].serial == b->serial,
           "[vmap] {} got a batched tensor of a vmap that has already returned (a tensor kept "
           "from inside the vmapped function); return it from the function instead",
           what);
  return b->level;
}

bool batched_at(const Tensor& t, int64_t level) {
  const BatchedImpl* b = as_batched(t);
  return b != nullptr && b->level == level && size_t(level) <= t_levels.size() &&
         t_levels[size_t(level - 1)].serial == b->serial;
}

Tensor make_batched(const Tensor& value, int64_t bdim, int64_t level) {
  Shape sizes = value.sizes();
  sizes.erase(size_t(bdim));
  auto impl = detail::make_object<BatchedImpl>();  // the runtime's small-object lists
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->numel = shape_numel(sizes);
  impl->dtype = value.dtype();
  impl->device = value.device();
  impl->fake = true;
  impl->keys = value.key_set().add(DispatchKey::Batched);
  impl->value = value;
  impl->bdim = bdim;
  impl->level = level;
  impl->serial = t_levels[size_t(level - 1)].serial;
  return Tensor(std::shared_ptr<TensorImpl>(std::move(impl)));
}

// The batched tensor b with another value (same batch dim, level and vmap call).
Tensor rewrap(const BatchedImpl* b, const Tensor& value) {
  auto impl = detail::make_object<BatchedImpl>();  // the runtime's small-object lists
  impl->sizes = b->sizes;
  impl->strides = b->strides;
  impl->numel = b->numel;
  impl->dtype = value.dtype();
  impl->device = value.device();
  impl->fake = true;
  impl->keys = value.key_set().add(DispatchKey::Batched);
  impl->value = value;
  impl->bdim = b->bdim;
  impl->level = b->level;
  impl->serial = b->serial;
  return Tensor(std::shared_ptr<TensorImpl>(std::move(impl)));
}

bool requires_grad_deep(const Tensor& t) {
  if (const BatchedImpl* b = as_batched(t)) return requires_grad_deep(b->value);
  return t.requires_grad();
}

// Calls op on `args` as a fresh call (the keys from the arguments and this thread), below
// Trace, which saw the outer call already.
void call_below(const OperatorHandle& op, Stack* args) {
  op.redispatch_boxed(detail::boxed_call_keys(*args).remove(DispatchKey::Trace), args);
}

// A tensor that requires grad, not batched at `level`, as [B, ...] (Note [Where Batched
// sits]); the same tensor for every use at this level.
Tensor lift(const Tensor& t, int64_t level) {
  Level& lv = t_levels[size_t(level - 1)];
  auto it = lv.lifted.find(t.impl());
  if (it != lv.lifted.end()) return it->second.second;
  Shape sizes = t.sizes();
  sizes.insert(0, lv.batch_size);
  Tensor lifted;
  {
    CursorGuard below(level - 1);
    lifted = t.expand(sizes);  // one view op (and one tape node) with the new leading dim
  }
  lv.lifted.emplace(t.impl(), std::make_pair(t, lifted));
  return lifted;
}

std::mutex g_warned_mutex;
std::set<std::string>& warned_ops() {
  static auto* s = new std::set<std::string>();  // never destroyed
  return *s;
}

// The differentiable stack of the per-sample results: each placed by select_backward,
// then summed.
Tensor stack_differentiable(const std::vector<Tensor>& rs, int64_t batch) {
  Shape sizes = rs[0].sizes();
  sizes.insert(0, batch);
  static const auto place =
      dispatcher()
          .find_or_throw("mt::select_backward")
          .typed<Tensor(const Tensor&, const std::vector<int64_t>&, int64_t, int64_t)>();
  static const auto add =
      dispatcher().find_or_throw("mt::add").typed<Tensor(const Tensor&, const Tensor&, double)>();
  Tensor out;
  for (size_t b = 0; b < rs.size(); ++b) {
    Tensor p = place.call(rs[b], sizes.vec(), 0, int64_t(b));
    out = out.defined() ? add.call(out, p, 1.0) : p;
  }
  return out;
}

// Row b of a [B, ...] tensor as a view, without an op call (no autograd, no trace).
Tensor row_of(const Tensor& out, int64_t b) {
  Shape sizes = out.sizes(), strides = out.strides();
  sizes.erase(0);
  strides.erase(0);
  return detail::make_view(out, sizes, strides, out.storage_offset() + b * out.stride(0));
}

// One output of the fallback, stacked as the samples run (Note [The fallback writes in
// place]).
struct Stacked {
  Tensor out;                   // [B, ...]: the rows copied so far
  std::vector<Tensor> results;  // the results themselves, once one cannot be copied

  void add(const Tensor& r, int64_t b, int64_t batch) {
    const bool keep = (r.requires_grad() && grad_enabled()) || as_batched(r) != nullptr;
    if (results.empty() && !keep) {
      if (b == 0) {
        Shape sizes = r.sizes();
        sizes.insert(0, batch);
        out = empty(sizes, {.dtype = r.dtype(), .device = r.device()});
      }
      if (!out.is_fake()) detail::copy_impl(row_of(out, b), r);
      return;
    }
    // the rows copied so far do not require grad and hold data: they join as constants
    for (int64_t i = int64_t(results.size()); i < b; ++i) results.push_back(row_of(out, i));
    results.push_back(r);
  }
  Tensor finish(int64_t batch) const {
    return results.empty() ? out : stack_differentiable(results, batch);
  }
};

// The slow fallback: the op once per batch element, the results stacked along dim 0.
BatchDims loop_fallback(const OperatorHandle& op, const VmapInfo& info, Stack* args) {
  const FunctionSchema& s = op.schema();
  const std::string name = op.name().str();
  for (const Argument& a : s.arguments)
    MT_CHECK(!(a.alias && a.alias->is_write),
             "[vmap] '{}' has no batching rule and writes to its argument '{}': it cannot run "
             "once per sample (each sample would write to a copy). Give it a rule with "
             "mt::register_vmap, or call it outside mt::vmap",
             name, a.name);
  for (size_t i = 0; i < args->size(); ++i)
    MT_CHECK(!((*args)[i].is_tensor_list() && info.in_dims[i]),
             "[vmap] '{}' has no batching rule and takes a list of tensors: the fallback cannot "
             "loop over it; give it a rule with mt::register_vmap",
             name);
  MT_CHECK(info.batch_size > 0,
           "[vmap] '{}' has no batching rule, and the fallback that runs it once per sample "
           "cannot run on an empty batch; give it a rule with mt::register_vmap",
           name);
  {
    std::lock_guard<std::mutex> lock(g_warned_mutex);
    if (warned_ops().insert(name).second)
      Dispatcher::singleton().log(fmt::format(
          "[vmap] warning: '{}' has no batching rule, so it runs once per batch element and "
          "the results are stacked (slow); give it a rule with mt::register_vmap",
          name));
  }
  // Note [The fallback writes in place]
  // Each sample's results are copied into their row of the [B, ...] output as soon as the
  // op returns (no op calls: a view and the runtime's copy), so the fallback costs what a
  // loop that copies each result into its row costs, and each result's memory is free for
  // the next sample. A result that requires grad (with grad mode on) cannot be copied
  // without losing its graph, nor can a batched tensor of an outer level's vmap
  // (vmap(vmap(f)) with f's op without a rule), which has no data: from that sample on
  // the results are kept and stacked by ops (differentiable, and batched in turn), the
  // rows copied before it joining as constants.
  std::vector<Stacked> outs(s.returns.size());
  std::vector<Shape> shapes(s.returns.size());
  Stack sb;
  for (int64_t b = 0; b < info.batch_size; ++b) {
    sb.assign(args->begin(), args->end());
    for (size_t i = 0; i < sb.size(); ++i)
      if (info.in_dims[i]) sb[i] = Value(sb[i].to_tensor().select(*info.in_dims[i], b));
    call_below(op, &sb);
    MT_CHECK(sb.size() == s.returns.size(), "[vmap] '{}' left {} values for {} returns", name,
             sb.size(), s.returns.size());
    for (size_t o = 0; o < sb.size(); ++o) {
      MT_CHECK(sb[o].is_tensor(),
               "[vmap] '{}' has no batching rule and returns a {} (output {}): the fallback "
               "stacks only tensors; give it a rule with mt::register_vmap",
               name, s.returns[o].type.str(), o);
      const Tensor r = sb[o].to_tensor();
      if (b == 0) {
        shapes[o] = r.sizes();
      } else {
        MT_CHECK(r.sizes() == shapes[o],
                 "[vmap] '{}' returned output {} of shape {} for sample 0 but {} for sample {}: "
                 "an op whose output size depends on the data cannot be batched; call it "
                 "outside mt::vmap",
                 name, o, shapes[o], r.sizes(), b);
      }
      outs[o].add(r, b, info.batch_size);
    }
  }
  args->clear();
  BatchDims out;
  for (Stacked& st : outs) {
    args->emplace_back(st.finish(info.batch_size));
    out.emplace_back(0);
  }
  return out;
}

// Every call that reaches the Batched key: unwrap the arguments batched at the level being
// processed (lifting parameters), then the rule, or the fallback when rule is null.
void run_batched(const OperatorHandle& op, Stack* stack, const BoxedVmapRule* rule) {
  const size_t n = op.schema().arguments.size();
  const size_t base = stack->size() - n;
  Stack args(std::make_move_iterator(stack->begin() + std::ptrdiff_t(base)),
             std::make_move_iterator(stack->end()));
  stack->resize(base);
  auto check_live = [&](const Tensor& t) {
    const BatchedImpl* b = as_batched(t);
    if (b && !is_batched(t)) live_level(b, fmt::format("'{}'", op.name().str()));
  };
  for (const Value& v : args) {
    if (v.is_tensor()) {
      check_live(v.to_tensor());
    } else if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) check_live(t);
    }
  }
  const int64_t level = t_cursor;
  if (level == 0) {  // a live batched tensor while no level is processed: not reached
    call_below(op, &args);
    stack->insert(stack->end(), std::make_move_iterator(args.begin()),
                  std::make_move_iterator(args.end()));
    return;
  }
  VmapInfo info{t_levels[size_t(level - 1)].batch_size, BatchDims(n)};
  const bool grad = grad_enabled();
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    Value& v = args[i];
    if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list())
        MT_CHECK(!batched_at(t, level) && !(grad && requires_grad_deep(t) && !as_batched(t)),
                 "[vmap] '{}' takes a list of tensors, and lists of batched tensors are not "
                 "supported inside mt::vmap; call it on the stacked tensors outside vmap",
                 op.name().str());
      continue;
    }
    if (!v.is_tensor() || !v.to_tensor().defined()) continue;
    const Tensor t = v.to_tensor();
    if (batched_at(t, level)) {
      const BatchedImpl* b = as_batched(t);
      info.in_dims[i] = b->bdim;
      v = Value(b->value);
      any = true;
    } else if (grad && requires_grad_deep(t)) {
      v = Value(lift(t, level));
      info.in_dims[i] = 0;
      any = true;
    }
  }
  CursorGuard below(level - 1);
  if (!any) {
    call_below(op, &args);
    stack->insert(stack->end(), std::make_move_iterator(args.begin()),
                  std::make_move_iterator(args.end()));
    return;
  }
  BatchDims out = rule ? (*rule)(info, &args) : loop_fallback(op, info, &args);
  MT_CHECK(out.size() == args.size(),
           "[vmap] the batching rule of '{}' returned {} batch dims for {} outputs; return one "
           "per output",
           op.name().str(), out.size(), args.size());
  for (size_t o = 0; o < args.size(); ++o) {
    if (!out[o]) continue;
    MT_CHECK(args[o].is_tensor(),
             "[vmap] the batching rule of '{}' gave output {} a batch dim, but it is not a tensor",
             op.name().str(), o);
    const Tensor r = args[o].to_tensor();
    const int64_t d = *out[o] < 0 ? *out[o] + r.dim() : *out[o];
    MT_CHECK(d >= 0 && d < r.dim() && r.size(d) == info.batch_size,
             "[vmap] the batching rule of '{}' says output {} has its batch dim at {}, but its "
             "shape is {} and the batch size is {}; return the dim that holds the batch",
             op.name().str(), o, *out[o], r.sizes(), info.batch_size);
    args[o] = Value(make_batched(r, d, level));
  }
  stack->insert(stack->end(), std::make_move_iterator(args.begin()),
                std::make_move_iterator(args.end()));
}

}  // namespace

bool is_batched(const Tensor& t) {
  const BatchedImpl* b = as_batched(t);
  return b != nullptr && b->level >= 1 && size_t(b->level) <= t_levels.size() &&
         t_levels[size_t(b->level - 1)].serial == b->serial;
}

namespace detail {

void call_boxed_below(const OperatorHandle& op, Stack* args) { call_below(op, args); }

Tensor movedim(const Tensor& t, int64_t from, int64_t to) {
  if (from == to) return t;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (i != from) perm.push_back(i);
  perm.insert(perm.begin() + to, from);
  return t.permute(perm);
}

KernelFunction batched_kernel(BoxedVmapRule rule) {
  MT_CHECK(static_cast<bool>(rule), "[register_vmap] the rule is empty; pass a callable");
  return KernelFunction::boxed(
      [rule = std::move(rule)](const OperatorHandle& op, DispatchKeySet, Stack* stack) {
        run_batched(op, stack, &rule);
      });
}

void install_batched_fallback() {
  g_detach_batched.store(
      [](const Tensor& t) {
        const BatchedImpl* b = as_batched(t);
        return rewrap(b, b->value.detach());
      },
      std::memory_order_release);
  static Library lib(Library::Kind::Impl, "_", DispatchKey::Batched);
  lib.fallback([](const OperatorHandle& op, DispatchKeySet, Stack* stack) {
    run_batched(op, stack, nullptr);
  });
}

bool needs_batched_grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : outputs)
    if (t.defined() && t.key_set().has(DispatchKey::Batched)) return true;
  for (const Tensor& t : inputs)
    if (t.defined() && t.key_set().has(DispatchKey::Batched)) return true;
  return !t_levels.empty() && t_cursor >= 1;
}

// mt::grad inside vmap: the gradient of the level's values, each sample's from its own
// slice (Note [Where Batched sits]), returned batched.
std::vector<Tensor> batched_grad(const std::vector<Tensor>& outputs,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<Tensor>& grad_outputs, bool retain_graph,
                                 bool create_graph, bool allow_unused) {
  for (const Tensor& t : outputs)
    if (const BatchedImpl* b = as_batched(t)) live_level(b, "mt::grad");
  for (const Tensor& t : inputs)
    if (const BatchedImpl* b = as_batched(t)) live_level(b, "mt::grad");
  const int64_t level = t_cursor;
  MT_CHECK(level >= 1,
           "[grad] a batched tensor reached mt::grad outside a running vmap; call mt::grad "
           "inside the vmapped function");
  const Level& lv = t_levels[size_t(level - 1)];
  auto unwrap = [&](const Tensor& t, std::optional<int64_t>* bdim) -> Tensor {
    if (batched_at(t, level)) {
      const BatchedImpl* b = as_batched(t);
      *bdim = b->bdim;
      return b->value;
    }
    *bdim = std::nullopt;
    return t;
  };
  std::vector<Tensor> outs, gouts, ins;
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::optional<int64_t> bdim;
    Tensor v = unwrap(outputs[i], &bdim);
    Tensor g = i < grad_outputs.size() ? grad_outputs[i] : Tensor();
    if (!bdim) {  // the same for every sample: its gradient counts once per sample
      outs.push_back(v);
      gouts.push_back(g);
      continue;
    }
    CursorGuard below(level - 1);
    if (*bdim != 0) v = detail::movedim(v, *bdim, 0);
    if (g.defined()) {
      std::optional<int64_t> gdim;
      Tensor gv = unwrap(g, &gdim);
      if (gdim) {
        if (*gdim != 0) gv = detail::movedim(gv, *gdim, 0);
      } else {
        Shape s = gv.sizes();
        s.insert(0, lv.batch_size);
        gv = gv.expand(s);
      }
      g = gv;
    } else {
      MT_CHECK(outputs[i].numel() == 1,
               "[grad] output {} has shape {} per sample inside mt::vmap: a gradient of a "
               "non-scalar output needs grad_outputs (one per sample's output)",
               i, outputs[i].sizes());
      g = ones(v.sizes(), {.dtype = v.dtype(), .device = v.device()});
    }
    outs.push_back(v);
    gouts.push_back(g);
  }
  BatchDims in_dims;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::optional<int64_t> bdim;
    Tensor v = unwrap(inputs[i], &bdim);
    if (!bdim && inputs[i].defined()) {
      auto it = lv.lifted.find(inputs[i].impl());
      MT_CHECK(it != lv.lifted.end() || !inputs[i].requires_grad(),
               "[grad] input {} of mt::grad inside mt::vmap was not used by any op inside the "
               "vmapped function, so it has no per-sample gradient; use it inside the function "
               "(a tensor computed from it outside vmap carries one gradient for the whole batch)",
               i);
      if (it != lv.lifted.end()) {
        v = it->second.second;
        bdim = 0;
      }
    }
    ins.push_back(v);
    in_dims.push_back(bdim);
  }
  std::vector<Tensor> gs;
  {
    CursorGuard below(level - 1);
    gs = grad(
        outs, ins, gouts,
        {.retain_graph = retain_graph, .create_graph = create_graph, .allow_unused = allow_unused});
  }
  for (size_t i = 0; i < gs.size(); ++i)
    if (gs[i].defined() && in_dims[i]) gs[i] = make_batched(gs[i], *in_dims[i], level);
  return gs;
}

}  // namespace detail

VmapFunction vmap(VmapFunction fn, BatchDims in_dims, BatchDims out_dims) {
  MT_CHECK(static_cast<bool>(fn), "[vmap] the function is empty; pass a callable");
  return [fn = std::move(fn), in_dims = std::move(in_dims),
          out_dims = std::move(out_dims)](const std::vector<Tensor>& args) {
    BatchDims ins = in_dims.empty() ? BatchDims(args.size(), 0) : in_dims;
    MT_CHECK(ins.size() == args.size(),
             "[vmap] in_dims has {} entries but the function got {} arguments; give one per "
             "argument (std::nullopt for one that is not batched)",
             ins.size(), args.size());
    int64_t batch = -1;
    size_t first = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!ins[i]) continue;
      MT_CHECK(args[i].defined(),
               "[vmap] argument {} is undefined but in_dims[{}] is {}; pass "
               "a tensor, or std::nullopt as its in_dims entry",
               i, i, *ins[i]);
      if (const BatchedImpl* b = as_batched(args[i])) live_level(b, "mt::vmap");
      const int64_t r = args[i].dim();
      MT_CHECK(*ins[i] >= -r && *ins[i] < r,
               "[vmap] in_dims[{}] is {}, but argument {} has {} dims (shape {}); use a dim in "
               "[{}, {})",
               i, *ins[i], i, r, args[i].sizes(), -r, r);
      const int64_t d = *ins[i] < 0 ? *ins[i] + r : *ins[i];
      ins[i] = d;
      if (batch < 0) {
        batch = args[i].size(d);
        first = i;
      } else {
        MT_CHECK(args[i].size(d) == batch,
                 "[vmap] the batched arguments have different batch sizes: argument {} has {} "
                 "along dim {}, argument {} has {} along dim {}; give every batched argument "
                 "the same batch size",
                 first, batch, *ins[first], i, args[i].size(d), d);
      }
    }
    MT_CHECK(batch >= 0,
             "[vmap] no argument is batched (every in_dims entry is std::nullopt, or there are "
             "no arguments); batch at least one");
    t_levels.push_back(Level{batch, g_next_serial.fetch_add(1), {}});
    const int64_t level = int64_t(t_levels.size());
    struct Pop {
      ~Pop() { t_levels.pop_back(); }
    } pop;
    std::vector<Tensor> outs;
    {
      CursorGuard at(level);
      std::vector<Tensor> wrapped(args.size());
      for (size_t i = 0; i < args.size(); ++i)
        wrapped[i] = ins[i] ? make_batched(args[i], *ins[i], level) : args[i];
      outs = fn(wrapped);
    }
    BatchDims outd = out_dims.empty() ? BatchDims(outs.size(), 0) : out_dims;
    MT_CHECK(outd.size() == outs.size(),
             "[vmap] out_dims has {} entries but the function returned {} tensors; give one per "
             "output",
             outd.size(), outs.size());
    CursorGuard below(level - 1);
    std::vector<Tensor> result(outs.size());
    for (size_t o = 0; o < outs.size(); ++o) {
      const Tensor& t = outs[o];
      MT_CHECK(t.defined(), "[vmap] the function returned an undefined tensor as output {}", o);
      const int64_t r = t.dim() + 1;  // with the batch dim
      if (!outd[o]) {
        MT_CHECK(!batched_at(t, level),
                 "[vmap] out_dims[{}] is std::nullopt, but output {} differs from sample to "
                 "sample; give it a batch dim",
                 o, o);
        result[o] = t;
        continue;
      }
      MT_CHECK(*outd[o] >= -r && *outd[o] < r,
               "[vmap] out_dims[{}] is {}, but output {} has {} dims with its batch dim (shape "
               "{} per sample); use a dim in [{}, {})",
               o, *outd[o], o, r, t.sizes(), -r, r);
      const int64_t d = *outd[o] < 0 ? *outd[o] + r : *outd[o];
      Tensor v;
      int64_t bdim = 0;
      if (batched_at(t, level)) {
        const BatchedImpl* b = as_batched(t);
        v = b->value;
        bdim = b->bdim;
      } else {  // the same for every sample
        Shape s = t.sizes();
        s.insert(0, batch);
        v = t.expand(s);
      }
      result[o] = bdim == d ? v : detail::movedim(v, bdim, d);
    }
    return result;
  };
}

}  // namespace mt
