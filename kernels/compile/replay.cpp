// SPDX-License-Identifier: MIT
// mt::compile: guards, the cache of compiled plans, and replay without the dispatcher
// (kernels called directly on CPU; on CUDA, through a CUDA graph when one can be captured).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "autograd/autograd.h"
#include "kernels/compile/compile.h"
#include "kernels/cpu/loops.h"
#include "kernels/jit/expr.h"
#include "runtime/cuda/cuda.h"

namespace mt {

// Note [Replay without the dispatcher]
// compile() captures the function on its first call with each guard combination (the
// inputs' sizes, strides, dtypes, devices, requires_grad, whether .grad is set, which
// inputs share storage) and turns the graph into a plan: one step a node, or one a fusion
// group on CUDA (Note [Pointwise fusion]). An op step holds the KernelFunction that the
// op's dispatch table had for the node's backend key (CPU or CUDA) when the plan was made
// and its constant arguments already boxed: replay fills in the tensors, calls the kernel
// boxed, and takes the results, with no key computation, no table lookup, no Trace or
// Autograd layer (it runs under NoGradGuard, so calls made inside kernels record nothing
// either). The backward is in the plan as the ops the engine called, so no tape is needed.
// A node whose backend slot is not a plain kernel (a fallback, a fallthrough) is called
// through the dispatcher instead. Factories become allocations, .grad assignments happen
// at the end, as the captured function left them.
// On CUDA the second call records the plan into an mt::cuda::Graph (runtime/cuda/cuda.h)
// and every later call replays it: the tensors the capture allocated come from the graph's
// private pool, so the plan's outputs are the same buffers each time and are overwritten
// by the next call (as with torch.cuda.CUDAGraph); inputs on other storage than the
// captured ones are copied into them first, and copied back when the plan writes them.
// If the graph cannot be captured (not implemented in this build, an op that syncs), the
// plan runs directly on every call, and MT_LOG=compile says why.

namespace {

// MT_COMPILE: unset, empty, 1, on or true compiles; 0, off or false runs eagerly.
bool compile_off() {
  const char* v = std::getenv("MT_COMPILE");
  const std::string_view s = v ? v : "";
  if (s.empty() || s == "1" || s == "on" || s == "true") return false;
  if (s == "0" || s == "off" || s == "false") return true;
  MT_ERROR(
      "[compile] MT_COMPILE={} is not one of 0, 1, off, on, false, true; set it to 0 to run "
      "compiled functions eagerly, or to 1 (or unset it) to compile them",
      mt::quoted(s));
}

bool log_enabled() {
  const char* v = std::getenv("MT_LOG");
  if (!v) return false;
  std::string_view s(v);
  for (size_t start = 0; start <= s.size();) {
    size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view w = s.substr(start, end - start);
    while (!w.empty() && w.front() == ' ') w.remove_prefix(1);
    while (!w.empty() && w.back() == ' ') w.remove_suffix(1);
    if (w == "compile") return true;
    start = end + 1;
  }
  return false;
}

void log(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    dispatcher().log(
        fmt::format("[compile] {}", std::string_view(text).substr(start, end - start)));
    start = end + 1;
  }
}

// Signatures a kernel step calls unboxed (T: Tensor, d: double, l: int[], b: bool, i: int),
// Note [Replay's fixed cost]
// A replayed call pays, besides its kernels, for what eager code does not: the guard check,
// the value slots and the outputs. On one thread of the 2-core VM (callgrind and a blocked
// A/B, tools/bench/bench_compile_cpu) that cost once exceeded the dispatch it saves for a
// chain of 4 small ops (2^8 elements: 4-9% slower than eager): the guard was built as a
// vector (a malloc and a free, a push_back a number) and compared after; the slots were
// reassigned whole and every value's kind scanned for input .grads; every step's stack was
// cleared. Then the last plan's guard was compared number by number as it is worked out
// (guard_matches: no allocation; guard_of only for a miss), the slots kept empty between
// runs, only the boxed steps' stacks cleared, each output moved out of its slot, and the
// compiled function's lock made a ReplayLock, one inline atomic to take and one to give
// back in place of std::mutex's two libpthread calls. That left 60 to 70 ns a call over
// eager for a function of one op (5-17% of the call at 2^8 to 2^12 elements).
// perf on that case (exp of 16x16 floats, one thread) put most of it in reference counts:
// copying each input into its slot and clearing it after is an atomic increment and an
// atomic decrement an input, the costliest instructions of the call after the lock's two.
// Now, on the CPU, a value that is an input or a constant is read in place: Plan::ref has,
// for each value, the Tensor it reads (its slot, or the caller's input, set by begin_plan
// for the run, or the plan's constant), so no input or constant is copied. The guard reads
// each TensorImpl directly (every Tensor accessor checks for an undefined handle) and
// compares without a bounds check a number (guard_matches says why none is needed); the
// fake-input check runs only when the guard misses (a plan is made from real inputs only, so
// its guard never matches a fake one). A CPU plan whose steps are all unboxed kernel calls
// of one output, with no .grad read or set (Plan::unboxed: inference functions of built-in
// ops), runs in run_unboxed, begin_plan, run_steps and end_plan in one loop. What is left
// is the lock's two atomics, the guard over every input and the slots: 14 to 38 ns a call
// over eager's dispatch for the one-op functions of bench_compile_cpu's family table (exp,
// x * 1.5, x + y, sum, mean, max, matmul, mse_loss) on this VM, 57 to 80 before, so a
// one-op function runs at 0.92 to 0.98 of eager at 2^8 elements and 0.95 to 0.99 at
// 2^12, within noise of 1 from 2^16 (docs/results/2026-12-07-vm-cpu-replay-by-reference.json):
// still short of the 3% goal for small one-op calls. With two or more ops fused, replay is
// faster than eager.

// Note [Prepared CPU groups]
// A fused pointwise group on the CPU whose inputs are, as captured, contiguous, of its
// output's shape and of one dtype, float32 or float64 (the common case: a chain over one
// tensor, or over tensors of one shape), is prepared with the plan: its tile evaluator
// (the schedule and the tile buffers, Note [Tile evaluation] in kernels/jit/expr.cpp) is
// made once, and replay runs it on the inputs' memory and a fresh output, tile by tile,
// with no operand checks, conversions, broadcast views or per-call vectors: what
// jit::Pointwise::call does on the CPU costs more than the op calls it saves below a few
// thousand elements, this costs less than one op call. The same loops run, so the values
// are those of Pointwise::call. Each call checks that the inputs still have the prepared
// dtype, shape and contiguity (an intermediate whose kernel made another layout than its
// fake kernel said, say) and otherwise calls Pointwise::call, which handles any layout.
// A group of fewer than kTilesPerThread tiles runs on the calling thread; a larger one
// splits its tiles over the pool, each thread with an evaluator of its own.
struct CpuGroup {
  DType dtype = DType::Float32;  // every input's and the output's
  Shape sizes, strides;          // every input's and the output's (contiguous)
  int64_t numel = 0;
  const jit::expr::Program* program = nullptr;  // the step's Pointwise owns it
  std::vector<float> scalars_f32;
  std::vector<double> scalars_f64;
  std::unique_ptr<jit::expr::TileEvaluator<float>> f32;
  std::unique_ptr<jit::expr::TileEvaluator<double>> f64;
};
constexpr int64_t kTilesPerThread = 16;  // jit::Pointwise's CPU grain, in tiles

// Note [Prepared CPU reductions]
// A fused sum or mean (Note [Reduction fusion]) on the CPU whose inputs are, as captured,
// contiguous, of its map's shape and of one dtype, float32 or float64, reduced over every
// dim or over trailing ones, and of at most cpu::kGrainSize elements, is prepared too: the
// map's and the post's tile evaluators are made once, and replay runs jit::reduction's CPU
// steps for that layout itself (Note [Reductions] in kernels/jit/reduction.cpp: a tile's
// values combined in eight running values, then pairwise; rows shorter than a tile several
// at a time), without its operand checks, permutes and per-call buffers. The order is
// jit::reduction's, so the values are its values; at that size it runs on one thread there
// too. Larger or other layouts, and inputs not as prepared, call jit::Reduction::call.
struct CpuReduce {
  DType dtype = DType::Float32;  // every input's and the output's
  Shape sizes;                   // every input's: the map's shape (contiguous)
  Shape out_sizes;
  int64_t rows = 0, len = 0;  // kept and reduced elements
  double identity = 0;
  const jit::expr::Program* map = nullptr;   // the step's Reduction owns them
  const jit::expr::Program* post = nullptr;  // null: the output is the sum
  std::unique_ptr<jit::expr::TileEvaluator<float>> map32, post32;
  std::unique_ptr<jit::expr::TileEvaluator<double>> map64, post64;
};

// Note [Unboxed replay]; None: boxed, through a Stack.
enum class Fast : uint8_t { None, T_T, T_TT, T_TTd, T_Td, T_Tl, T_Tlb, T_Tii };

struct Step {
  enum class Kind : uint8_t { Kernel, Dispatch, Fused, Factory };
  Kind kind = Kind::Kernel;
  Fast fast = Fast::None;
  int t0 = -1, t1 = -1;  // tensor operands' values (fast path)
  double d = 0;
  std::vector<int64_t> l;
  bool b = false;
  int64_t i0 = 0, i1 = 0;
  OperatorHandle op;
  const KernelFunction* kernel = nullptr;
  DispatchKeySet keys;
  Stack args;                                   // constants boxed; tensor slots refilled
  std::vector<std::pair<size_t, int>> tensors;  // (stack slot, value)
  std::vector<std::pair<size_t, std::vector<int>>> lists;
  std::vector<int> outputs;
  bool returns_list = false;
  // Fused: a pointwise group, or with `reduce` set a reduction group (Note [Reduction fusion])
  jit::Pointwise pointwise;
  std::unique_ptr<CpuGroup> cpu;          // Note [Prepared CPU groups]; null: Pointwise::call
  std::unique_ptr<CpuReduce> cpu_reduce;  // Note [Prepared CPU reductions]; null: Reduction::call
  std::vector<int> inputs;
  std::vector<double> scalars;
  bool reduce = false;
  jit::Reduction reduction;
  std::vector<int64_t> dims;
  bool keepdim = false;
  // Factory
  Shape sizes, strides;
  TensorOptions options;
  std::optional<double> fill;
  TagSet tags;               // the op's tags (dispatcher/schema.h)
  std::vector<int> release;  // values not needed after this step
  std::string label;
  Stack stack;  // reused from call to call (its capacity stays)
};

// Note [CPU fusion]
// A fused group on the CPU runs through jit::Pointwise's tile evaluator (Note [Tile
// evaluation] in kernels/jit/expr.cpp): one pass over memory for the whole chain, each
// intermediate kept in a cache-sized tile, where eager replay makes one pass an op. A
// group the plan can prepare (Note [Prepared CPU groups], Note [Prepared CPU reductions])
// costs less a call than one of its op calls, and fuses at every size. For another one
// (broadcast or strided inputs, 16-bit dtypes, reduced dims before kept ones), below a size
// the call's fixed costs (the evaluator's buffers, broadcasting and dtype checks, the
// output) outweigh the passes saved, and the group stays op calls: the threshold is where
// tools/bench_compile_cpu measured the fused chain of 4 overtaking the op calls on one
// thread, through the pointwise builder's call (docs/compile.md, "CPU fusion"). A reduction
// group (Note [Reduction fusion]) costs more a call (jit::reduction's checks, layout and
// partial sums) and saves one pass of its map's size: unprepared, it fuses from
// kCpuReduceFuseMinElements elements of its map, where bench_compile_cpu measured the fused
// sum of squares level with the two calls.
// CompileOptions::fuse = true fuses every group whatever its size; false fuses none.
constexpr int64_t kCpuFuseMinElements = 4096;
constexpr int64_t kCpuReduceFuseMinElements = 16384;

struct Plan {
  Graph graph;              // as captured (printed)
  std::string fusion_note;  // on CPU: how many groups the size threshold kept
  Graph exec;               // as run: clones forwarded (Note [Clone forwarding])
  std::vector<FusionGroup> groups;
  std::vector<Step> steps;
  std::vector<std::pair<int, Tensor>> constants;
  std::vector<int64_t> guard;
  bool cuda = false;
  int device = 0;
  // CUDA graph replay
  int graph_state = 0;  // 0: next call warms up, 1: next call captures, 2: replays, -1: direct
  std::unique_ptr<cuda::Graph> cuda_graph;
  std::vector<Tensor> static_inputs, static_grads_in, static_outputs;
  std::vector<std::pair<int, Tensor>> static_grads_out;
  std::vector<bool> input_written;
  std::vector<Tensor> vals;  // one slot a value, reused from call to call; empty between runs
  // What each value reads (Note [Replay's fixed cost]): its slot in vals, or on the CPU an
  // input itself (set by begin_plan, for the run) or a constant in `constants`, neither copied.
  std::vector<const Tensor*> ref;
  bool by_ref = false;  // the CPU: inputs and constants read in place; CUDA: copied into vals
  // On the CPU, every step a kernel called unboxed with one output, no .grad read or set:
  // run_unboxed runs it (Note [Replay's fixed cost]).
  bool unboxed = false;
  std::vector<std::pair<int, int>> input_grads;  // (value, input): an input's .grad at call time
  std::vector<size_t> boxed_steps;               // steps that call through their Stack
  std::string tag_note;                          // MT_LOG=compile: what the ops' tags changed
  // Set when the graph has an op tagged inplace_view: the function runs eagerly (Note [Tags
  // in compile]); says why.
  std::string eager_reason;
  // Steps of ops tagged cudagraph_unsafe or nondeterministic_seeded: on CUDA the graph is
  // split around each (Note [Tags in compile]).
  std::vector<size_t> unsafe_steps;
  std::vector<std::unique_ptr<cuda::Graph>> part_graphs;  // one a part, null when empty
  std::vector<Tensor> static_vals;  // split graphs: every value as the capture left it
  std::string str() const;
};

// Whether a pointwise group can be prepared (Note [Prepared CPU groups]), from its values
// as captured.
bool contiguous_layout(const Shape& sizes, const Shape& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// Whether every input of fg is a contiguous CPU tensor of dtype t and shape sizes, as captured.
bool cpu_inputs_are(const Graph& g, const FusionGroup& fg, DType t, const Shape& sizes) {
  for (int v : fg.inputs) {
    const GraphValue& in = g.values[size_t(v)];
    if (in.dtype != t || !in.device.is_cpu() || !(in.sizes == sizes) ||
        !contiguous_layout(in.sizes, in.strides))
      return false;
  }
  return true;
}

bool cpu_preparable(const Graph& g, const FusionGroup& fg) {
  const GraphValue& out = g.values[size_t(fg.output)];
  if (!fg.reduce.empty() || !out.device.is_cpu() || fg.inputs.empty() || fg.inputs.size() > 8 ||
      (out.dtype != DType::Float32 && out.dtype != DType::Float64))
    return false;
  return cpu_inputs_are(g, fg, out.dtype, out.sizes);
}

std::unique_ptr<CpuGroup> prepare_cpu_group(const Graph& g, const FusionGroup& fg,
                                            const jit::Pointwise& kernel) {
  auto c = std::make_unique<CpuGroup>();
  const GraphValue& out = g.values[size_t(fg.output)];
  c->dtype = out.dtype;
  c->sizes = out.sizes;
  c->numel = shape_numel(out.sizes);
  c->program = &jit::expr::program_of(kernel);
  for (double x : fg.scalars) c->scalars_f32.push_back(float(x)), c->scalars_f64.push_back(x);
  if (c->dtype == DType::Float32)
    c->f32 = std::make_unique<jit::expr::TileEvaluator<float>>(*c->program, c->scalars_f32.data());
  else
    c->f64 = std::make_unique<jit::expr::TileEvaluator<double>>(*c->program, c->scalars_f64.data());
  return c;
}

// Tiles [first, last) of a prepared group: the next tile's lines asked for before each one
// is evaluated (Note [Prefetching the next tile] in kernels/jit/pointwise.cpp).
template <typename C>
void run_group_tiles(jit::expr::TileEvaluator<C>& ev, const C* const* in, size_t nin, C* out,
                     int64_t n, int64_t first, int64_t last) {
  constexpr int64_t kChunk = jit::expr::kChunk, kLine = 64 / int64_t(sizeof(C));
  const C* ic[8];
  for (int64_t t = first; t < last; ++t) {
    const int64_t begin = t * kChunk, len = std::min(kChunk, n - begin);
    for (size_t k = 0; k < nin; ++k) ic[k] = in[k] + begin;
    C* oc = out + begin;
    if (t + 1 < last) {
      const int64_t next = begin + kChunk, next_len = std::min(kChunk, n - next);
      for (size_t k = 0; k < nin; ++k)
        for (int64_t j = 0; j < next_len; j += kLine) __builtin_prefetch(in[k] + next + j, 0, 3);
      for (int64_t j = 0; j < next_len; j += kLine) __builtin_prefetch(out + next + j, 1, 3);
    }
    ev.run(ic, &oc, len);
  }
}

template <typename C>
void run_group(CpuGroup& c, jit::expr::TileEvaluator<C>& ev, const C* const* in, size_t nin,
               C* out) {
  const int64_t n = c.numel, tiles = (n + jit::expr::kChunk - 1) / jit::expr::kChunk;
  if (tiles <= kTilesPerThread || cpu::num_threads() == 1)
    return run_group_tiles(ev, in, nin, out, n, 0, tiles);
  cpu::parallel_for(tiles, kTilesPerThread, [&](int64_t first, int64_t last) {
    const C* s = nullptr;
    if constexpr (std::is_same_v<C, float>)
      s = c.scalars_f32.data();
    else
      s = c.scalars_f64.data();
    jit::expr::TileEvaluator<C> own(*c.program, s);  // its own buffers
    run_group_tiles(own, in, nin, out, n, first, last);
  });
}

// A prepared group's output, or an undefined tensor when an input is not as prepared (the
// caller then calls Pointwise::call).
Tensor run_cpu_group(CpuGroup& c, const Tensor* const* ins, size_t nin) {
  for (size_t k = 0; k < nin; ++k) {
    const Tensor& t = *ins[k];
    if (!t.defined() || t.dtype() != c.dtype || !t.is_cpu() || !(t.sizes() == c.sizes) ||
        !t.is_contiguous())
      return Tensor();
  }
  Tensor out = empty(c.sizes, {.dtype = c.dtype});
  if (c.numel == 0) return out;
  if (c.dtype == DType::Float32) {
    const float* in[8];
    for (size_t k = 0; k < nin; ++k) in[k] = ins[k]->data_ptr<float>();
    run_group(c, *c.f32, in, nin, out.data_ptr<float>());
  } else {
    const double* in[8];
    for (size_t k = 0; k < nin; ++k) in[k] = ins[k]->data_ptr<double>();
    run_group(c, *c.f64, in, nin, out.data_ptr<double>());
  }
  return out;
}

// Whether a reduction group can be prepared (Note [Prepared CPU reductions]).
bool cpu_reduce_preparable(const Graph& g, const FusionGroup& fg) {
  if (fg.reduce != "sum" && fg.reduce != "mean") return false;
  const GraphValue& map = g.values[size_t(fg.reduced)];
  const GraphValue& out = g.values[size_t(fg.output)];
  if (!out.device.is_cpu() || fg.inputs.empty() || fg.inputs.size() > 8 ||
      (out.dtype != DType::Float32 && out.dtype != DType::Float64) ||
      shape_numel(map.sizes) > cpu::kGrainSize)
    return false;
  // every dim, or trailing ones
  const auto ndim = int64_t(map.sizes.size());
  std::vector<int64_t> dims;
  for (int64_t d : fg.dims) dims.push_back(d < 0 ? d + ndim : d);
  std::sort(dims.begin(), dims.end());
  for (size_t k = 0; k < dims.size(); ++k)
    if (dims[k] != ndim - int64_t(dims.size()) + int64_t(k)) return false;
  return cpu_inputs_are(g, fg, out.dtype, map.sizes);
}

std::unique_ptr<CpuReduce> prepare_cpu_reduce(const Graph& g, const FusionGroup& fg,
                                              const jit::Reduction& red) {
  auto c = std::make_unique<CpuReduce>();
  const GraphValue& map = g.values[size_t(fg.reduced)];
  const GraphValue& out = g.values[size_t(fg.output)];
  c->dtype = out.dtype;
  c->sizes = map.sizes;
  c->out_sizes = out.sizes;
  const auto ndim = int64_t(map.sizes.size());
  const int64_t kept = fg.dims.empty() ? 0 : ndim - int64_t(fg.dims.size());
  c->rows = 1, c->len = 1;
  for (int64_t d = 0; d < ndim; ++d) (d < kept ? c->rows : c->len) *= map.sizes[size_t(d)];
  c->identity = red.identity();
  c->map = &jit::expr::map_program_of(red);
  c->post = red.spec().post.empty() ? nullptr : &jit::expr::post_program_of(red);
  const double no_scalars64[1] = {0};
  const float no_scalars32[1] = {0};
  if (c->dtype == DType::Float32) {
    c->map32 = std::make_unique<jit::expr::TileEvaluator<float>>(*c->map, no_scalars32);
    if (c->post)
      c->post32 = std::make_unique<jit::expr::TileEvaluator<float>>(*c->post, no_scalars32);
  } else {
    c->map64 = std::make_unique<jit::expr::TileEvaluator<double>>(*c->map, no_scalars64);
    if (c->post)
      c->post64 = std::make_unique<jit::expr::TileEvaluator<double>>(*c->post, no_scalars64);
  }
  return c;
}

// jit::reduction's CPU sum of a tile: eight running values, then pairwise (reduce_tile in
// kernels/jit/reduction.cpp, for ReduceOp::Sum).
template <typename C>
C sum_tile(const C* v, int64_t n, C ident) {
  C lane[8];
  for (C& l : lane) l = ident;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] = lane[k] + v[j + k];
  for (int k = 0; j < n; ++j, ++k) lane[k] = lane[k] + v[j];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// v[0..n) summed pairwise, in place (reduce_pairwise there).
template <typename C>
C sum_pairwise(C* v, int64_t n, C ident) {
  if (n == 0) return ident;
  while (n > 1) {
    const int64_t half = n / 2;
    for (int64_t i = 0; i < half; ++i) v[i] = v[2 * i] + v[2 * i + 1];
    if (n % 2) v[half] = v[n - 1];
    n = half + n % 2;
  }
  return v[0];
}

template <typename C>
void run_reduce(const CpuReduce& c, jit::expr::TileEvaluator<C>& map,
                jit::expr::TileEvaluator<C>* post, const C* const* in, size_t nin, C* out) {
  constexpr int64_t kTile = jit::expr::kChunk;
  const int64_t rows = c.rows, len = c.len;
  const C ident = C(c.identity);
  C buf[kTile];
  C acc_small[kTile];
  std::vector<C> acc_big;
  C* acc = acc_small;
  if (rows > kTile) acc_big.resize(size_t(rows)), acc = acc_big.data();
  const C* ic[8];
  C* o[1] = {buf};
  if (len == 0) {
    std::fill(acc, acc + rows, ident);
  } else if (len >= kTile) {  // long rows: a partial sum a tile, those pairwise
    const int64_t tiles = (len + kTile - 1) / kTile;
    C part[64];  // len <= cpu::kGrainSize: at most 32 tiles
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t begin = m * len + t * kTile, n = std::min(kTile, len - t * kTile);
        for (size_t k = 0; k < nin; ++k) ic[k] = in[k] + begin;
        map.run(ic, o, n);
        part[t] = sum_tile(buf, n, ident);
      }
      acc[m] = sum_pairwise(part, tiles, ident);
    }
  } else {  // short rows: as many whole rows a tile as fit
    const int64_t per = kTile / len;
    for (int64_t m0 = 0; m0 < rows; m0 += per) {
      const int64_t nrows = std::min(per, rows - m0);
      for (size_t k = 0; k < nin; ++k) ic[k] = in[k] + m0 * len;
      map.run(ic, o, nrows * len);
      for (int64_t r = 0; r < nrows; ++r) acc[m0 + r] = sum_tile(buf + r * len, len, ident);
    }
  }
  if (!post) {
    std::copy(acc, acc + rows, out);
    return;
  }
  std::fill(buf, buf + std::min(rows, kTile), C(len));  // post(acc, n)
  for (int64_t t = 0; t * kTile < rows; ++t) {
    const C* pin[2] = {acc + t * kTile, buf};
    C* po[1] = {out + t * kTile};
    post->run(pin, po, std::min(kTile, rows - t * kTile));
  }
}

// A prepared reduction's output, or an undefined tensor when an input is not as prepared.
Tensor run_cpu_reduce(CpuReduce& c, const Tensor* const* ins, size_t nin) {
  for (size_t k = 0; k < nin; ++k) {
    const Tensor& t = *ins[k];
    if (!t.defined() || t.dtype() != c.dtype || !t.is_cpu() || !(t.sizes() == c.sizes) ||
        !t.is_contiguous())
      return Tensor();
  }
  Tensor out = empty(c.out_sizes, {.dtype = c.dtype});
  if (c.rows == 0) return out;
  if (c.dtype == DType::Float32) {
    const float* in[8];
    for (size_t k = 0; k < nin; ++k) in[k] = ins[k]->data_ptr<float>();
    run_reduce(c, *c.map32, c.post32.get(), in, nin, out.data_ptr<float>());
  } else {
    const double* in[8];
    for (size_t k = 0; k < nin; ++k) in[k] = ins[k]->data_ptr<double>();
    run_reduce(c, *c.map64, c.post64.get(), in, nin, out.data_ptr<double>());
  }
  return out;
}

// Note [Unboxed replay]
// A boxed call boxes every argument into a Value, and the kernel's trampoline unboxes it
// again; for the few signatures most built-in ops have, replay calls the kernel's unboxed
// function pointer instead, with the arguments taken from the value slots. The kernel's
// own inferred signature (KernelFunction::signature) is compared with the one called, so
// the cast is the one the dispatcher itself makes (Note [Canonical calling convention]).
template <typename Ret, typename... Args>
bool has_signature(const KernelFunction& kf) {
  const detail::InferredSignature* sig = kf.signature();
  if (!sig) return false;
  const detail::InferredSignature want = detail::infer_signature<Ret, Args...>();
  return sig->args == want.args && sig->returns == want.returns;
}

void classify(Step& s, const KernelFunction& kf, const GraphNode& n) {
  using L = std::vector<int64_t>;
  const auto& a = n.args;
  auto tensor = [&](size_t i) { return i < a.size() && a[i].kind == GraphArg::Kind::Tensor; };
  auto constant = [&](size_t i, auto pred) {
    return i < a.size() && a[i].kind == GraphArg::Kind::Constant && pred(a[i].constant);
  };
  auto is_d = [](const Value& v) { return v.is_double(); };
  auto is_l = [](const Value& v) { return v.is_int_list(); };
  auto is_b = [](const Value& v) { return v.is_bool(); };
  auto is_i = [](const Value& v) { return v.is_int(); };
  if (n.returns_list || n.outputs.size() != 1) return;
  Fast f = Fast::None;
  if (a.size() == 1 && tensor(0) && has_signature<Tensor, Tensor>(kf))
    f = Fast::T_T;
  else if (a.size() == 2 && tensor(0) && tensor(1) && has_signature<Tensor, Tensor, Tensor>(kf))
    f = Fast::T_TT;
  else if (a.size() == 3 && tensor(0) && tensor(1) && constant(2, is_d) &&
           has_signature<Tensor, Tensor, Tensor, double>(kf))
    f = Fast::T_TTd;
  else if (a.size() == 2 && tensor(0) && constant(1, is_d) &&
           has_signature<Tensor, Tensor, double>(kf))
    f = Fast::T_Td;
  else if (a.size() == 2 && tensor(0) && constant(1, is_l) && has_signature<Tensor, Tensor, L>(kf))
    f = Fast::T_Tl;
  else if (a.size() == 3 && tensor(0) && constant(1, is_l) && constant(2, is_b) &&
           has_signature<Tensor, Tensor, L, bool>(kf))
    f = Fast::T_Tlb;
  else if (a.size() == 3 && tensor(0) && constant(1, is_i) && constant(2, is_i) &&
           has_signature<Tensor, Tensor, int64_t, int64_t>(kf))
    f = Fast::T_Tii;
  if (f == Fast::None) return;
  s.fast = f;
  s.t0 = a[0].value;
  if (tensor(1)) s.t1 = a[1].value;
  if (f == Fast::T_TTd) s.d = a[2].constant.to_double();
  if (f == Fast::T_Td) s.d = a[1].constant.to_double();
  if (f == Fast::T_Tl || f == Fast::T_Tlb) s.l = a[1].constant.to_int_list();
  if (f == Fast::T_Tlb) s.b = a[2].constant.to_bool();
  if (f == Fast::T_Tii) s.i0 = a[1].constant.to_int(), s.i1 = a[2].constant.to_int();
}

// The result of an unboxed kernel step.
Tensor call_fast(const Step& s, const Tensor* const* ref) {
  using L = std::vector<int64_t>;
  const KernelFunction& k = *s.kernel;
  const Tensor& x = *ref[s.t0];
  switch (s.fast) {
    case Fast::T_T:
      return k.call_unboxed<Tensor, Tensor>(s.keys, x);
    case Fast::T_TT:
      return k.call_unboxed<Tensor, Tensor, Tensor>(s.keys, x, *ref[s.t1]);
    case Fast::T_TTd:
      return k.call_unboxed<Tensor, Tensor, Tensor, double>(s.keys, x, *ref[s.t1], s.d);
    case Fast::T_Td:
      return k.call_unboxed<Tensor, Tensor, double>(s.keys, x, s.d);
    case Fast::T_Tl:
      return k.call_unboxed<Tensor, Tensor, L>(s.keys, x, s.l);
    case Fast::T_Tlb:
      return k.call_unboxed<Tensor, Tensor, L, bool>(s.keys, x, s.l, s.b);
    case Fast::T_Tii:
      return k.call_unboxed<Tensor, Tensor, int64_t, int64_t>(s.keys, x, s.i0, s.i1);
    case Fast::None:
      break;
  }
  MT_ASSERT(false, "call_fast on a boxed step");
  return {};
}

Step make_step(const Graph& g, const GraphNode& n) {
  Step s;
  s.outputs = n.outputs;
  s.returns_list = n.returns_list;
  s.label = n.op_name();
  if (n.is_factory()) {
    const GraphValue& v = g.values[size_t(n.outputs[0])];
    s.kind = Step::Kind::Factory;
    s.sizes = v.sizes;
    s.strides = v.strides;
    s.options = {.dtype = v.dtype, .device = v.device};
    s.fill = n.fill;
    return s;
  }
  s.op = n.op;
  bool on_cuda = false;
  for (const GraphArg& a : n.args) {
    if (a.kind == GraphArg::Kind::Tensor)
      on_cuda = on_cuda || g.values[size_t(a.value)].device.is_cuda();
    for (int id : a.list) on_cuda = on_cuda || g.values[size_t(id)].device.is_cuda();
    if (a.kind == GraphArg::Kind::Constant && a.constant.is_tensor() &&
        a.constant.to_tensor().defined())
      on_cuda = on_cuda || a.constant.to_tensor().is_cuda();
  }
  const DispatchKey key = on_cuda ? DispatchKey::CUDA : DispatchKey::CPU;
  s.keys = DispatchKeySet(key);
  const DispatchTable& table = n.op.entry()->table();
  const KernelFunction& kf = table.kernels[size_t(key)];
  s.tags = n.op.entry()->tags();
  // A tagged op is called through the dispatcher, as eager code calls it (Note [Tags in compile]).
  const bool direct =
      table.origin[size_t(key)] == 1 && kf.kind() == KernelFunction::Kind::Kernel && s.tags.empty();
  s.kind = direct ? Step::Kind::Kernel : Step::Kind::Dispatch;
  s.kernel = direct ? &kf : nullptr;
  for (size_t i = 0; i < n.args.size(); ++i) {
    const GraphArg& a = n.args[i];
    switch (a.kind) {
      case GraphArg::Kind::Constant:
        s.args.push_back(a.constant);
        break;
      case GraphArg::Kind::Tensor:
        s.tensors.push_back({i, a.value});
        s.args.emplace_back(Tensor());
        break;
      case GraphArg::Kind::TensorList:
        s.lists.push_back({i, a.list});
        s.args.emplace_back(std::vector<Tensor>());
        break;
    }
  }
  if (direct) classify(s, kf, n);
  return s;
}

// Note [Clone forwarding]
// Capture sees fake gradients, which have no storage, so the engine cannot tell that a
// fresh gradient is referenced nowhere else and steals it into .grad as it does in eager
// mode (autograd/engine.cpp, accumulate_leaf): it clones instead, and the graph has a
// clone per leaf. The plan drops a clone whose input is a fresh contiguous intermediate
// that nothing else reads (the condition eager mode checks with use counts) and passes the
// input on in its place: the values are the same bits, one copy fewer.
std::vector<bool> forward_clones(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  std::vector<int> to(g.values.size());
  for (size_t v = 0; v < to.size(); ++v) to[v] = int(v);
  std::vector<bool> dropped(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    GraphNode& n = g.nodes[i];
    if (n.is_factory() || n.op.name().str() != "mt::clone" || n.args.empty() ||
        n.args[0].kind != GraphArg::Kind::Tensor || n.outputs.size() != 1 || n.outputs[0] < 0)
      continue;
    const int v = n.args[0].value;
    const GraphValue& in = g.values[size_t(v)];
    if (uses[size_t(v)] != 1 || in.kind != GraphValue::Kind::Intermediate || in.alias_root != v ||
        in.strides != contiguous_strides(in.sizes))
      continue;
    to[size_t(n.outputs[0])] = v;
    dropped[i] = true;
  }
  auto fix = [&](int& id) {
    if (id >= 0) id = to[size_t(id)];
  };
  for (GraphNode& n : g.nodes) {
    for (GraphArg& a : n.args) {
      if (a.kind == GraphArg::Kind::Tensor) fix(a.value);
      for (int& id : a.list) fix(id);
    }
    for (int& id : n.mutated) fix(id);
  }
  for (int& id : g.outputs) fix(id);
  for (auto& [input, id] : g.grads) fix(id);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (dropped[i]) g.nodes[i].args.clear(), g.nodes[i].outputs.clear();
  return dropped;
}

// The guard of a call: everything the captured graph depends on, as numbers, handed to
// emit one at a time in order; stops (false) at the first one emit refuses.
template <typename Emit>
bool each_guard_number(const std::vector<Tensor>& inputs, Emit&& emit) {
  if (!emit(int64_t(inputs.size()) << 1 | int64_t(grad_enabled())))  // grad mode changes the graph
    return false;
  // Read from each TensorImpl directly: every Tensor accessor checks for an undefined handle,
  // and this runs on every call (Note [Replay's fixed cost]).
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorImpl* t = inputs[i].impl();
    if (t == nullptr) {
      if (!emit(-1)) return false;
      continue;
    }
    const AutogradMeta* meta = t->autograd.get();  // requires_grad(), grad().defined()
    if (!emit(int64_t(t->dtype) | int64_t(t->device.type == DeviceType::CUDA) << 8 |
              int64_t(t->device.index + 1) << 9 | int64_t(meta && meta->requires_grad) << 20 |
              int64_t(meta && meta->grad) << 21 | int64_t(t->fake) << 22))
      return false;
    const size_t dims = t->sizes.size();
    if (!emit(int64_t(dims))) return false;
    const int64_t *sizes = t->sizes.data(), *strides = t->strides.data();
    for (size_t d = 0; d < dims; ++d)
      if (!emit(sizes[d]) || !emit(strides[d])) return false;
    // which earlier input shares this one's storage (-1: none)
    int64_t shares = -1;
    const StorageImpl* st = t->fake ? nullptr : t->storage.get();
    for (size_t j = 0; j < i && st && shares < 0; ++j) {
      const TensorImpl* u = inputs[j].impl();
      if (u && !u->fake && u->storage.get() == st) shares = int64_t(j);
    }
    if (!emit(shares)) return false;
  }
  return true;
}

std::vector<int64_t> guard_of(const std::vector<Tensor>& inputs) {
  std::vector<int64_t> g;
  g.reserve(inputs.size() * 12);
  each_guard_number(inputs, [&](int64_t v) {
    g.push_back(v);
    return true;
  });
  return g;
}

// Whether inputs have the guard g: guard_of(inputs) == g, compared as it is worked out, with
// nothing allocated (Note [Replay's fixed cost]). No bounds check a number: the first number
// holds the count of inputs, each input's first tells undefined (-1) from defined (never
// negative) and its second the count of dims, so g is read in step with the numbers until
// one differs, and never past its end.
bool guard_matches(const std::vector<int64_t>& g, const std::vector<Tensor>& inputs) {
  const int64_t* k = g.data();
  if (g.empty()) return false;
  const bool same = each_guard_number(inputs, [&](int64_t v) { return *k++ == v; });
  MT_ASSERT(!same || k == g.data() + g.size(), "[compile] guard read out of step");
  return same;
}

std::string guard_str(const std::vector<Tensor>& inputs) {
  std::vector<std::string> parts;
  for (const Tensor& t : inputs)
    parts.push_back(t.defined() ? fmt::format("{}{} {}{}", t.dtype(), t.sizes(), t.device(),
                                              t.requires_grad() ? " requires_grad" : "")
                                : "undefined");
  return fmt::format("({})", fmt::join(parts, ", "));
}

std::unique_ptr<Plan> make_plan(const GraphFn& fn, const std::vector<Tensor>& inputs,
                                const CompileOptions& opts) {
  auto plan = std::make_unique<Plan>();
  plan->graph = capture(fn, inputs, {.input_names = opts.input_names});
  for (size_t i = 0; i < plan->graph.nodes.size(); ++i) {
    const GraphNode& n = plan->graph.nodes[i];
    if (n.is_factory() || !n.op.entry()->tags().has(Tag::inplace_view)) continue;
    plan->eager_reason = fmt::format(
        "node {} {} is tagged inplace_view: it changes its input's view metadata (sizes, "
        "strides, offset) in place, which a replay's value slots and input guards do not "
        "follow; the function runs eagerly on every call with these inputs",
        i, n.op_name());
    return plan;
  }
  plan->exec = plan->graph;
  const std::vector<bool> dropped = forward_clones(plan->exec);
  const Graph& g = plan->exec;
  for (const Tensor& t : inputs)
    if (t.defined() && t.is_cuda()) plan->cuda = true, plan->device = t.device().index;
  // Note [CPU fusion]: on the CPU too, but groups of fewer than kCpuFuseMinElements
  // elements stay op calls unless the caller asked for fusion.
  const bool fuse = opts.fuse.value_or(true);
  if (fuse) plan->groups = fusion_groups(g);
  if (!plan->cuda && !opts.fuse.has_value() && !plan->groups.empty()) {
    const size_t found = plan->groups.size();
    const bool reductions = std::any_of(plan->groups.begin(), plan->groups.end(),
                                        [](const FusionGroup& fg) { return !fg.reduce.empty(); });
    std::erase_if(plan->groups, [&](const FusionGroup& fg) {
      if (fg.reduce.empty())
        return !cpu_preparable(g, fg) &&
               shape_numel(g.values[size_t(fg.output)].sizes) < kCpuFuseMinElements;
      return !cpu_reduce_preparable(g, fg) &&
             shape_numel(g.values[size_t(fg.reduced)].sizes) < kCpuReduceFuseMinElements;
    });
    const auto prepared = std::count_if(plan->groups.begin(), plan->groups.end(), [&](auto& fg) {
      return fg.reduce.empty() ? cpu_preparable(g, fg) : cpu_reduce_preparable(g, fg);
    });
    plan->fusion_note = fmt::format(
        "cpu fusion: {} of {} groups fused, {} of them prepared (below {} elements{}, only a "
        "prepared group fuses: Note [CPU fusion])\n",
        plan->groups.size(), found, prepared, kCpuFuseMinElements,
        reductions ? fmt::format(", {} in a reduction's map", kCpuReduceFuseMinElements) : "");
  }

  std::vector<int> group_of(g.nodes.size(), -1);
  for (size_t k = 0; k < plan->groups.size(); ++k)
    for (int n : plan->groups[k].nodes) group_of[size_t(n)] = int(k);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int k = group_of[i];
    if (dropped[i]) continue;
    if (k < 0) {
      plan->steps.push_back(make_step(g, g.nodes[i]));
    } else if (plan->groups[size_t(k)].nodes.back() == int(i)) {  // the group runs at its root
      const FusionGroup& fg = plan->groups[size_t(k)];
      Step s;
      s.kind = Step::Kind::Fused;
      s.reduce = !fg.reduce.empty();
      if (s.reduce) {
        s.reduction = fg.reduction();
        s.dims = fg.dims;
        s.keepdim = fg.keepdim;
        if (!plan->cuda && cpu_reduce_preparable(g, fg))
          s.cpu_reduce = prepare_cpu_reduce(g, fg, s.reduction);
      } else {
        s.pointwise = fg.kernel();
        if (!plan->cuda && cpu_preparable(g, fg)) s.cpu = prepare_cpu_group(g, fg, s.pointwise);
      }
      s.inputs = fg.inputs;
      s.scalars = fg.scalars;
      s.outputs = {fg.output};
      s.label = fg.name;
      plan->steps.push_back(std::move(s));
    }
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == GraphValue::Kind::Constant)
      plan->constants.push_back({int(v), g.values[v].constant});
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    const Step& s = plan->steps[i];
    if (s.tags.empty()) continue;
    std::vector<std::string> what;
    if (s.tags.has(Tag::side_effect)) what.push_back("nothing is fused or reordered across it");
    if (s.tags.has(Tag::cudagraph_unsafe) || s.tags.has(Tag::nondeterministic_seeded)) {
      plan->unsafe_steps.push_back(i);
      what.push_back(plan->cuda ? "the CUDA graph is split around it"
                                : "on CUDA the graph would be split around it");
    }
    if (s.tags.has(Tag::nondeterministic_seeded))
      what.push_back("it draws from the generator on every call, as eager code does");
    plan->tag_note +=
        fmt::format("tags: step {} {} [{}]: called through the dispatcher{}{}\n", i, s.label,
                    s.tags.str(), what.empty() ? "" : "; ", fmt::join(what, "; "));
  }
  if (!plan->unsafe_steps.empty())
    plan->tag_note += fmt::format(
        "tags: {} step(s) run outside CUDA graphs, so a CUDA graph "
        "comes in up to {} parts\n",
        plan->unsafe_steps.size(), plan->unsafe_steps.size() + 1);

  // Free each intermediate after its last reader, unless it is returned or left as a .grad.
  std::vector<int> last(g.values.size(), -1);
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    const Step& s = plan->steps[i];
    for (auto& [slot, v] : s.tensors) last[size_t(v)] = int(i);
    for (auto& [slot, l] : s.lists)
      for (int v : l) last[size_t(v)] = int(i);
    for (int v : s.inputs) last[size_t(v)] = int(i);
    for (int v : s.outputs)
      if (v >= 0) last[size_t(v)] = std::max(last[size_t(v)], int(i));
  }
  std::vector<bool> keep(g.values.size(), false);
  for (int v : g.outputs)
    if (v >= 0) keep[size_t(g.values[size_t(v)].alias_root)] = keep[size_t(v)] = true;
  for (auto [input, v] : g.grads)
    if (v >= 0) keep[size_t(v)] = true;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (!keep[v] && g.values[v].kind == GraphValue::Kind::Intermediate && last[v] >= 0)
      plan->steps[size_t(last[v])].release.push_back(int(v));
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == GraphValue::Kind::InputGrad)
      plan->input_grads.push_back({int(v), g.values[v].input});
  for (size_t i = 0; i < plan->steps.size(); ++i)
    if (plan->steps[i].kind != Step::Kind::Fused && plan->steps[i].kind != Step::Kind::Factory &&
        plan->steps[i].fast == Fast::None)
      plan->boxed_steps.push_back(i);
  plan->input_written.assign(inputs.size(), false);
  for (const GraphNode& n : g.nodes)
    for (int w : n.mutated)
      for (size_t i = 0; i < g.inputs.size(); ++i)
        if (g.values[size_t(g.inputs[i])].alias_root == g.values[size_t(w)].alias_root)
          plan->input_written[i] = true;
  // The slots, and what each value reads (begin_plan points the inputs' at the call's).
  plan->by_ref = !plan->cuda;
  plan->vals.assign(g.values.size(), Tensor());
  plan->ref.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) plan->ref[v] = &plan->vals[v];
  if (plan->by_ref)
    for (const auto& [v, t] : plan->constants) plan->ref[size_t(v)] = &t;
  plan->unboxed = plan->by_ref && plan->input_grads.empty() && g.grads.empty() &&
                  std::all_of(plan->steps.begin(), plan->steps.end(), [](const Step& s) {
                    return s.kind == Step::Kind::Kernel && s.fast != Fast::None;
                  });
  return plan;
}

std::string Plan::str() const {
  if (!eager_reason.empty()) return "eager    the function itself (" + eager_reason + ")\n";
  std::string out;
  for (const Step& s : steps) {
    const char* how = s.kind == Step::Kind::Kernel     ? (s.fast != Fast::None ? "kernel" : "boxed")
                      : s.kind == Step::Kind::Dispatch ? "dispatch"
                      : s.kind == Step::Kind::Fused    ? "fused"
                                                       : "alloc";
    std::vector<std::string> outs;
    for (int v : s.outputs)
      if (v >= 0) outs.push_back(graph.values[size_t(v)].name);
    out += fmt::format("{:<9}{}{}\n", how, s.label,
                       outs.empty() ? "" : fmt::format(" -> {}", fmt::join(outs, ", ")));
  }
  return out;
}

// The value slots at the start of a run: the inputs, their .grads, the constants. The slots
// are empty between runs (end_plan, and run_plan after an error), so only these are set.
// On the CPU (p.by_ref) the inputs are not copied into slots: their values read them in
// place, through p.ref, for this run (Note [Replay's fixed cost]).
void begin_plan(Plan& p, const std::vector<Tensor>& inputs) {
  const Graph& g = p.exec;
  std::vector<Tensor>& vals = p.vals;
  if (p.by_ref) {
    for (size_t i = 0; i < inputs.size(); ++i) p.ref[size_t(g.inputs[i])] = &inputs[i];
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) vals[size_t(g.inputs[i])] = inputs[i];
    for (const auto& [v, t] : p.constants) vals[size_t(v)] = t;
  }
  for (auto [v, input] : p.input_grads) vals[size_t(v)] = inputs[size_t(input)].grad();
}

// Runs steps [from, to) of the plan on its value slots.
void run_steps(Plan& p, size_t from, size_t to) {
  std::vector<Tensor>& vals = p.vals;
  const Tensor* const* ref = p.ref.data();
  NoGradGuard no_grad;
  for (size_t si = from; si < to; ++si) {
    Step& s = p.steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel:
      case Step::Kind::Dispatch: {
        if (s.fast != Fast::None) {
          Tensor r = call_fast(s, ref);
          if (s.outputs[0] >= 0) vals[size_t(s.outputs[0])] = std::move(r);
          break;
        }
        Stack& stack = s.stack;
        stack.assign(s.args.begin(), s.args.end());
        for (const auto& [slot, v] : s.tensors) stack[slot] = Value(*ref[v]);
        for (const auto& [slot, l] : s.lists) {
          std::vector<Tensor> ts;
          ts.reserve(l.size());
          for (int v : l) ts.push_back(*ref[v]);
          stack[slot] = Value(std::move(ts));
        }
        if (s.kind == Step::Kind::Kernel)
          s.kernel->call_boxed(s.op, s.keys, &stack);
        else
          s.op.call_boxed(&stack);
        if (s.returns_list) {
          const std::vector<Tensor>& ts = stack[0].to_tensor_list();
          for (size_t k = 0; k < s.outputs.size() && k < ts.size(); ++k)
            if (s.outputs[k] >= 0) vals[size_t(s.outputs[k])] = ts[k];
        } else {
          for (size_t k = 0; k < s.outputs.size() && k < stack.size(); ++k)
            if (s.outputs[k] >= 0) vals[size_t(s.outputs[k])] = stack[k].to_tensor();
        }
        break;
      }
      case Step::Kind::Fused: {
        if (s.cpu || s.cpu_reduce) {  // Note [Prepared CPU groups], [Prepared CPU reductions]
          const Tensor* in[8];
          for (size_t k = 0; k < s.inputs.size(); ++k) in[k] = ref[s.inputs[k]];
          Tensor r = s.cpu ? run_cpu_group(*s.cpu, in, s.inputs.size())
                           : run_cpu_reduce(*s.cpu_reduce, in, s.inputs.size());
          if (r.defined()) {
            vals[size_t(s.outputs[0])] = std::move(r);
            break;
          }
        }
        Tensor ins[8];
        for (size_t k = 0; k < s.inputs.size(); ++k) ins[k] = *ref[s.inputs[k]];
        if (s.reduce) {
          vals[size_t(s.outputs[0])] =
              s.reduction.call(std::span<const Tensor>(ins, s.inputs.size()), s.dims, s.keepdim);
          break;
        }
        std::vector<Tensor> outs =
            s.pointwise.call(std::span<const Tensor>(ins, s.inputs.size()), s.scalars);
        vals[size_t(s.outputs[0])] = std::move(outs[0]);
        break;
      }
      case Step::Kind::Factory: {
        Tensor t = s.sizes.size() == 0 || s.strides == contiguous_strides(s.sizes)
                       ? (s.fill ? full(s.sizes, *s.fill, s.options) : empty(s.sizes, s.options))
                       : empty_strided(s.sizes, s.strides, s.options);
        if (s.fill && !t.is_contiguous()) t.fill_(*s.fill);
        vals[size_t(s.outputs[0])] = std::move(t);
        break;
      }
    }
    for (int v : s.release) vals[size_t(v)] = Tensor();
  }
}

// The end of a run: sets the .grads, returns the outputs, empties the slots.
std::vector<Tensor> end_plan(Plan& p, const std::vector<Tensor>& inputs) {
  const Graph& g = p.exec;
  std::vector<Tensor>& vals = p.vals;
  NoGradGuard no_grad;
  for (auto [input, v] : g.grads) {
    const Tensor& t = inputs[size_t(input)];
    if (v >= 0 || t.grad().defined()) t.set_grad(v >= 0 ? *p.ref[size_t(v)] : Tensor());
  }
  std::vector<Tensor> outs(g.outputs.size());
  // the slots are emptied next: an output's last mention moves it out (no reference count)
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int v = g.outputs[k];
    if (v < 0) continue;
    if (p.ref[size_t(v)] == &vals[size_t(v)] &&
        std::find(g.outputs.begin() + long(k) + 1, g.outputs.end(), v) == g.outputs.end())
      outs[k] = std::move(vals[size_t(v)]);
    else
      outs[k] = *p.ref[size_t(v)];  // an input or a constant, or returned again
  }
  std::fill(vals.begin(), vals.end(), Tensor());
  for (size_t i : p.boxed_steps) p.steps[i].stack.clear();
  return outs;
}

// run_plan for a plan of unboxed kernel steps only (Plan::unboxed): begin_plan, run_steps
// and end_plan in one loop, with what they do for other steps left out.
std::vector<Tensor> run_unboxed(Plan& p, const std::vector<Tensor>& inputs) {
  const Graph& g = p.exec;
  const Tensor** ref = p.ref.data();
  Tensor* vals = p.vals.data();
  for (size_t i = 0; i < inputs.size(); ++i) ref[g.inputs[i]] = &inputs[i];
  {
    NoGradGuard no_grad;
    try {
      for (const Step& s : p.steps) {
        Tensor r = call_fast(s, ref);
        if (s.outputs[0] >= 0) vals[s.outputs[0]] = std::move(r);
        for (int v : s.release) vals[v] = Tensor();
      }
    } catch (...) {
      std::fill(p.vals.begin(), p.vals.end(), Tensor());
      throw;
    }
  }
  std::vector<Tensor> outs(g.outputs.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int v = g.outputs[k];
    if (v < 0) continue;
    if (ref[v] == &vals[v] &&
        std::find(g.outputs.begin() + long(k) + 1, g.outputs.end(), v) == g.outputs.end())
      outs[k] = std::move(vals[v]);
    else
      outs[k] = *ref[v];
  }
  std::fill(p.vals.begin(), p.vals.end(), Tensor());
  return outs;
}

// Runs the plan's steps on `inputs`; returns the outputs (and sets the .grads). After an
// error the slots are emptied, as begin_plan expects them.
std::vector<Tensor> run_plan(Plan& p, const std::vector<Tensor>& inputs) {
  if (p.unboxed) return run_unboxed(p, inputs);
  begin_plan(p, inputs);
  try {
    run_steps(p, 0, p.steps.size());
  } catch (...) {
    std::fill(p.vals.begin(), p.vals.end(), Tensor());
    for (size_t i : p.boxed_steps) p.steps[i].stack.clear();
    throw;
  }
  return end_plan(p, inputs);
}

bool same_memory(const Tensor& a, const Tensor& b) {
  return a.storage().get() == b.storage().get() && a.storage_offset() == b.storage_offset() &&
         a.sizes() == b.sizes() && a.strides() == b.strides();
}

// Note [Tags in compile]
// An op's tags (dispatcher/schema.h) change how a compiled function runs it:
//  - every tagged op is a step called through the dispatcher, in its place in the order;
//  - side_effect: fusion never moves a member of a group past it (fuse.cpp), so nothing
//    is reordered across it, and it is never dropped (the plan drops no calls);
//  - cudagraph_unsafe: on CUDA the graph is split around it: the steps before it are one
//    CUDA graph, it runs eagerly, the steps after it are the next graph (run_cuda_split);
//  - nondeterministic_seeded: recorded as a call, so it draws from the generator on every
//    call as eager code does; on CUDA it splits the graph too (a graph would replay the
//    same numbers);
//  - inplace_view: the op changes its input's sizes, strides or offset in place (torch's
//    t_, squeeze_, as_strided_): a mutation of metadata that the plan's value slots (each
//    with the metadata capture saw), its input guards and a CUDA graph's static inputs do
//    not follow. Rather than replay something else than the function does, a function whose
//    capture records such an op runs eagerly on every call with those inputs (a graph
//    break over the whole function; torch's compiler functionalizes these instead).
// MT_LOG=compile says what each tagged step does.

void reset_split(Plan& p) {
  p.part_graphs.clear();
  p.static_vals.clear();
  p.static_inputs.clear();
}

// A graph replay's ends: the user's inputs (and their grads) into the captured ones, skipped
// where they are the same memory; then the inputs the plan writes, and the grads it set,
// back to the user's tensors, and the captured outputs.
void replay_inputs(Plan& p, const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!same_memory(inputs[i], p.static_inputs[i])) p.static_inputs[i].copy_(inputs[i]);
    const Tensor grad = inputs[i].grad();
    if (p.static_grads_in[i].defined() && grad.defined() &&
        !same_memory(grad, p.static_grads_in[i]))
      p.static_grads_in[i].copy_(grad);
  }
}

std::vector<Tensor> replay_outputs(Plan& p, const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (p.input_written[i] && !same_memory(inputs[i], p.static_inputs[i]))
      inputs[i].copy_(p.static_inputs[i]);
  for (const auto& [input, grad] : p.static_grads_out) inputs[size_t(input)].set_grad(grad);
  return p.static_outputs;
}

// The CUDA graph of a plan with cudagraph_unsafe (or seeded) steps, in parts: graph 0, the
// first unsafe step eagerly, graph 1, ... The capture run replays each part as soon as it
// is captured (the eager step after it reads its results); later calls replay the parts,
// and copy each eager step's results into the memory the next parts were captured with.
std::vector<Tensor> run_cuda_split(Plan& p, const std::vector<Tensor>& inputs,
                                   const CompileOptions& opts, bool logging) {
  if (p.graph_state == 1) {
    try {
      reset_split(p);
      p.static_inputs = inputs;
      p.static_grads_in.clear();
      for (const Tensor& t : inputs) p.static_grads_in.push_back(t.grad());
      begin_plan(p, inputs);
      p.static_vals.assign(p.vals.size(), Tensor());
      size_t from = 0, nodes = 0;
      auto capture_part = [&](size_t to) {
        if (from == to) {
          p.part_graphs.push_back(nullptr);
          return;
        }
        auto graph = std::make_unique<cuda::Graph>();
        graph->capture_begin(p.device);
        try {
          run_steps(p, from, to);
        } catch (...) {
          try {
            graph->capture_end();
          } catch (...) {
          }
          throw;
        }
        graph->capture_end();
        graph->replay();
        nodes += graph->num_nodes();
        p.part_graphs.push_back(std::move(graph));
      };
      for (size_t u : p.unsafe_steps) {
        capture_part(u);
        const Step& s = p.steps[u];
        for (auto& [slot, v] : s.tensors) p.static_vals[size_t(v)] = p.vals[size_t(v)];
        for (auto& [slot, l] : s.lists)
          for (int v : l) p.static_vals[size_t(v)] = p.vals[size_t(v)];
        std::vector<int> release = std::move(p.steps[u].release);
        p.steps[u].release.clear();
        run_steps(p, u, u + 1);
        p.steps[u].release = release;
        for (int v : s.outputs)
          if (v >= 0) p.static_vals[size_t(v)] = p.vals[size_t(v)];
        for (int v : release) p.vals[size_t(v)] = Tensor();
        from = u + 1;
      }
      capture_part(p.steps.size());
      std::vector<Tensor> outs = end_plan(p, inputs);
      p.static_outputs = outs;
      p.static_grads_out.clear();
      for (auto [input, v] : p.exec.grads)
        p.static_grads_out.push_back({input, inputs[size_t(input)].grad()});
      p.graph_state = 2;
      if (logging)
        log(
            fmt::format("{}: captured a CUDA graph in {} parts around {} eager step(s) (tags), "
                        "{} nodes in all",
                        opts.name, p.part_graphs.size(), p.unsafe_steps.size(), nodes));
      return outs;
    } catch (const Error& e) {
      reset_split(p);
      p.graph_state = -1;
      if (logging)
        log(fmt::format("{}: no CUDA graph ({}); running the plan directly on every call",
                        opts.name, e.what()));
      return run_plan(p, inputs);
    }
  }
  replay_inputs(p, inputs);
  for (size_t part = 0; part < p.part_graphs.size(); ++part) {
    if (p.part_graphs[part]) p.part_graphs[part]->replay();
    if (part == p.unsafe_steps.size()) break;
    const size_t u = p.unsafe_steps[part];
    p.vals = p.static_vals;
    run_steps(p, u, u + 1);
    for (int v : p.steps[u].outputs)
      if (v >= 0 && p.vals[size_t(v)].defined() && p.static_vals[size_t(v)].defined() &&
          !same_memory(p.vals[size_t(v)], p.static_vals[size_t(v)]))
        p.static_vals[size_t(v)].copy_(p.vals[size_t(v)]);
    std::fill(p.vals.begin(), p.vals.end(), Tensor());
    p.steps[u].stack.clear();
  }
  return replay_outputs(p, inputs);
}

// CUDA: warm up, then capture the plan into a CUDA graph and replay it (Note [Replay
// without the dispatcher]); direct runs when a graph cannot be captured.
std::vector<Tensor> run_cuda(Plan& p, const std::vector<Tensor>& inputs, const CompileOptions& opts,
                             bool logging) {
  if (!opts.cuda_graph || p.graph_state < 0) return run_plan(p, inputs);
  if (p.graph_state == 0) {  // warm-up: compiles and loads every kernel outside a capture
    p.graph_state = 1;
    return run_plan(p, inputs);
  }
  if (!p.unsafe_steps.empty()) return run_cuda_split(p, inputs, opts, logging);
  if (p.graph_state == 1) {
    try {
      p.cuda_graph = std::make_unique<cuda::Graph>();
      p.static_inputs = inputs;
      p.static_grads_in.clear();
      for (const Tensor& t : inputs) p.static_grads_in.push_back(t.grad());
      p.cuda_graph->capture_begin(p.device);
      std::vector<Tensor> outs;
      try {
        outs = run_plan(p, inputs);
      } catch (...) {
        try {
          p.cuda_graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      p.cuda_graph->capture_end();
      p.static_outputs = outs;
      p.static_grads_out.clear();
      for (auto [input, v] : p.exec.grads)
        p.static_grads_out.push_back({input, inputs[size_t(input)].grad()});
      p.graph_state = 2;
      if (logging)
        log(fmt::format("{}: captured a CUDA graph of {} nodes ({} bytes in its pool): {}",
                        opts.name, p.cuda_graph->num_nodes(), p.cuda_graph->pool_bytes(),
                        fmt::join(p.cuda_graph->node_kinds(), ", ")));
      p.cuda_graph->replay();
      return outs;
    } catch (const Error& e) {
      p.cuda_graph.reset();
      p.static_inputs.clear();
      p.graph_state = -1;
      if (logging)
        log(fmt::format("{}: no CUDA graph ({}); running the plan directly on every call",
                        opts.name, e.what()));
      return run_plan(p, inputs);
    }
  }
  replay_inputs(p, inputs);
  p.cuda_graph->replay();
  return replay_outputs(p, inputs);
}

}  // namespace

// A compiled function's lock: an uncontended lock and unlock are one atomic instruction
// each, inline, where std::mutex's are two calls into libpthread (Note [Replay's fixed
// cost]); a waiter sleeps in atomic::wait (a futex on Linux). 0: free, 1: held, 2: held
// with waiters (the three-state futex mutex of Drepper's "Futexes Are Tricky").
class ReplayLock {
 public:
  void lock() {
    int c = 0;
    if (s_.compare_exchange_strong(c, 1, std::memory_order_acquire)) return;
    if (c != 2) c = s_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
      s_.wait(2, std::memory_order_relaxed);
      c = s_.exchange(2, std::memory_order_acquire);
    }
  }
  void unlock() {
    if (s_.exchange(0, std::memory_order_release) == 2) s_.notify_one();
  }

 private:
  std::atomic<int> s_{0};
};

struct Compiled::State {
  GraphFn fn;
  CompileOptions opts;
  bool eager = false;
  bool logging = false;
  ReplayLock mutex;
  std::vector<std::unique_ptr<Plan>> plans;
  Plan* last = nullptr;
  int compiles = 0;
};

Compiled::Compiled(GraphFn fn, CompileOptions opts) : state_(std::make_shared<State>()) {
  MT_CHECK(bool(fn),
           "[compile] mt::compile got an empty std::function; pass a callable that takes the "
           "inputs and returns the outputs");
  state_->fn = std::move(fn);
  state_->opts = std::move(opts);
  state_->eager = compile_off();
  state_->logging = log_enabled();
}

std::vector<Tensor> Compiled::operator()(const std::vector<Tensor>& inputs) const {
  State& st = *state_;
  if (st.eager) return st.fn(inputs);
  // Under a dispatch mode the function runs eagerly, so the mode sees each of its ops
  // (Note [Compile under a dispatch mode] in capture.cpp).
  if (local_dispatch_keys().included.has(DispatchKey::Mode)) return st.fn(inputs);
  std::unique_lock<ReplayLock> lock(st.mutex);
  // Note [Replay's fixed cost]: the last plan's guard is checked in place
  Plan* plan = st.last && guard_matches(st.last->guard, inputs) ? st.last : nullptr;
  std::vector<int64_t> guard;
  if (!plan) {
    // Fake inputs ask for shapes only: the function itself gives them, through the fake
    // kernels. (No plan's guard matches a fake input: plans are made from real ones.)
    for (const Tensor& t : inputs)
      if (t.defined() && t.is_fake()) {
        lock.unlock();
        return st.fn(inputs);
      }
    guard = guard_of(inputs);
  }
  for (size_t i = 0; i < st.plans.size() && !plan; ++i)
    if (st.plans[i]->guard == guard) plan = st.plans[i].get();
  if (!plan) {
    const auto t0 = std::chrono::steady_clock::now();
    auto made = make_plan(st.fn, inputs, st.opts);
    made->guard = std::move(guard);
    plan = made.get();
    st.plans.push_back(std::move(made));
    ++st.compiles;
    if (st.logging && !plan->eager_reason.empty())
      log(fmt::format("{}: captured for {} (compile #{}), runs eagerly: {}\n{}", st.opts.name,
                      guard_str(inputs), st.compiles, plan->eager_reason, plan->graph.str()));
    else if (st.logging) {
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::string text = fmt::format(
          "{}: compiled for {} in {:.2f} ms (compile #{}): {} nodes, {} steps, {} fusion "
          "groups\n{}",
          st.opts.name, guard_str(inputs), ms, st.compiles, plan->graph.nodes.size(),
          plan->steps.size(), plan->groups.size(), plan->graph.str());
      text += plan->fusion_note;
      text += plan->tag_note;
      for (const FusionGroup& fg : plan->groups) {
        std::vector<std::string> names;
        for (int n : fg.nodes) names.push_back(plan->exec.nodes[size_t(n)].op_name());
        text += fmt::format("fusion group {}: {} -> {}\n{}\n", fg.name, fmt::join(names, ", "),
                            plan->exec.values[size_t(fg.output)].name, fg.body);
        if (!fg.reduce.empty())  // Note [Reduction fusion]
          text += fmt::format("reduction: {} of the map over {}{}, one jit::reduction\n", fg.reduce,
                              fg.dims.empty() ? std::string("every dim")
                                              : fmt::format("dims [{}]", fmt::join(fg.dims, ", ")),
                              fg.keepdim ? ", keepdim" : "");
        if (plan->cuda)
          text += fg.reduce.empty() ? fg.kernel().cuda_source() : fg.reduction().cuda_source();
      }
      text += "plan:\n" + plan->str();
      log(text);
    }
  }
  st.last = plan;
  if (!plan->eager_reason.empty()) {  // Note [Tags in compile]: inplace_view
    lock.unlock();
    return st.fn(inputs);
  }
  if (plan->cuda) return run_cuda(*plan, inputs, st.opts, st.logging);
  return run_plan(*plan, inputs);
}

int Compiled::compile_count() const {
  std::lock_guard<ReplayLock> lock(state_->mutex);
  return state_->compiles;
}
std::string Compiled::graph_str() const {
  std::lock_guard<ReplayLock> lock(state_->mutex);
  return state_->last ? state_->last->graph.str() : "";
}
std::string Compiled::plan_str() const {
  std::lock_guard<ReplayLock> lock(state_->mutex);
  return state_->last ? state_->last->str() : "";
}
size_t Compiled::num_fusion_groups() const {
  std::lock_guard<ReplayLock> lock(state_->mutex);
  return state_->last ? state_->last->groups.size() : 0;
}

size_t Compiled::num_nodes() const {
  std::lock_guard<ReplayLock> lock(state_->mutex);
  return state_->last ? state_->last->graph.nodes.size() : 0;
}

Compiled compile(GraphFn fn, CompileOptions opts) {
  return Compiled(std::move(fn), std::move(opts));
}

}  // namespace mt
