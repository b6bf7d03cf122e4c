// SPDX-License-Identifier: MIT
#include "kernels/jit/reduction.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "autograd/autograd.h"
#include "kernels/cpu/loops.h"
#include "kernels/jit/builtin.h"
#include "kernels/jit/expr.h"
#include "kernels/jit/generated.h"
#include "kernels/jit/module.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/view.h"

#if defined(MT_HAVE_CUDA)
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#endif

namespace mt::jit {
using detail::check_operands;
using detail::comment_lines;
using detail::identifier;
using detail::is_valid_name;
using detail::kFloatTypes;

// Note [Reductions]
// A reduction is three expressions around one combining step: map (inputs -> one value a
// element of the broadcast shape), reduce (sum, prod, max or min: combine values into an
// accumulator that starts at the identity) and post ((acc, n) -> the output). Both devices
// see the reduced dims as the inner part of a [rows, len] layout: the inputs are permuted
// (kept dims first, reduced dims last) and made contiguous, which costs nothing when the
// reduced dims already are the last ones, as in a full reduction or a reduction over the
// trailing dims, and one copy otherwise; except on the CPU, where reduced dims that form
// one block before kept ones (a column sum, dim 0 of a matrix) are read in place as
// [outer, len, inner], each output's values combined in blocks of 128 rows.
// CPU: the map runs through the tile evaluator (Note [Tile evaluation]) a tile at a time;
// a tile's values are combined in eight running values (a blocked order, which keeps a
// float32 sum accurate and lets the compiler vectorize), and the tiles of a long row are
// combined pairwise. Tiles are cut the same way whatever the thread count, so a result
// does not depend on it: threads take rows (several short rows a tile) or the tiles of
// long rows. 16-bit dtypes and float32 accumulate in float, float64 in double.
// CUDA: one generated source holds the map and post functors and the combine step
// (a traits struct `rd_<name>`) and the kernel templates below: one block a row
// (reduce_rows: threads stride over the row, then a warp-shuffle and shared-memory block
// reduce), and for a few long rows (a full reduction is one row) a grid-wide split in one
// launch (reduce_split_last: blocks over chunks of each row, each writing one partial value;
// the row's last block to finish combines them in index order and applies post, so the
// result does not depend on which block that is; Note [Split counts]), or where no count is
// free the same in two launches (reduce_split, then reduce_final). Rows whose length is a
// multiple of the 16-byte pack, with every input pointer aligned, take the Vec variants
// (16-byte loads). max and min propagate NaN, as mt::max does.

namespace {

constexpr int kMaxInputs = 8;
constexpr int kSlots = 16;  // devices with cached kernel pointers
constexpr int kVariants = 7;

// Parses one of the spec's expressions; the pointwise parser's message (with its caret
// line) is kept, its prefix says which reduction and which expression.
expr::Program parse_part(const std::string& name, const char* part, const std::string& body,
                         std::vector<std::string> inputs, bool infer) {
  try {
    return expr::parse(name, body, std::move(inputs), {}, {"out"}, infer);
  } catch (const Error& e) {
    const std::string msg = e.what();
    const std::string prefix = "[jit] pointwise " + mt::quoted(name) + ": ";
    if (!msg.starts_with(prefix)) throw;
    MT_ERROR("[jit] reduction {} ({} expression): {}", mt::quoted(name), part,
             msg.substr(prefix.size()));
  }
}

ReduceOp parse_reduce_op(const std::string& name, const std::string& op) {
  if (op == "sum") return ReduceOp::Sum;
  if (op == "prod") return ReduceOp::Prod;
  if (op == "max") return ReduceOp::Max;
  if (op == "min") return ReduceOp::Min;
  MT_ERROR("[jit] reduction {}: unknown reduce op {}; use \"sum\", \"prod\", \"max\" or \"min\"",
           mt::quoted(name), mt::quoted(op));
}

double default_identity(ReduceOp op) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  switch (op) {
    case ReduceOp::Sum:
      return 0;
    case ReduceOp::Prod:
      return 1;
    case ReduceOp::Max:
      return -inf;
    case ReduceOp::Min:
      return inf;
  }
  return 0;
}

// The kernel templates every generated source ends with (Note [Reductions]). Rd is the
// generated traits struct: Map and Post functors and combine(a, b).
constexpr const char* kKernels = R"(
namespace mt {

constexpr int RD_UNROLL = 4;  // 16-byte packs a thread loads before combining them

template <int N>
struct RdInputs {
  const void* p[N];
};

template <typename T, class Rd, int NIN>
__device__ __forceinline__ compute_t<T> rd_map(const RdInputs<NIN>& in, long long i) {
  using C = compute_t<T>;
  C x[NIN], y[1];
  MT_UNROLL
  for (int k = 0; k < NIN; ++k) x[k] = load_compute(static_cast<const T*>(in.p[k])[i]);
  typename Rd::Map{}(x, y, x);
  return y[0];
}

// U 16-byte packs of every input, at q, q + step, ...: all loaded, then combined into acc.
template <typename T, class Rd, int NIN, int U>
__device__ __forceinline__ void rd_packs(const RdInputs<NIN>& in, long long q, long long step,
                                         compute_t<T>& acc) {
  using C = compute_t<T>;
  using P = Pack16<T>;
  P v[U][NIN];
  MT_UNROLL
  for (int u = 0; u < U; ++u) {
    MT_UNROLL
    for (int k = 0; k < NIN; ++k) v[u][k] = static_cast<const P*>(in.p[k])[q + u * step];
  }
  MT_UNROLL
  for (int u = 0; u < U; ++u) {
    MT_UNROLL
    for (int e = 0; e < P::size; ++e) {
      C x[NIN], y[1];
      MT_UNROLL
      for (int k = 0; k < NIN; ++k) x[k] = load_compute(v[u][k].v[e]);
      typename Rd::Map{}(x, y, x);
      acc = Rd::combine(acc, y[0]);
    }
  }
}

// This thread's share of the elements [lo, hi) of every input, combined into acc: the
// elements lo + first, lo + first + step, ...; VEC: 16-byte packs (lo a multiple of the
// pack, every pointer aligned), RD_UNROLL of them in flight, then the tail.
template <typename T, class Rd, int NIN, bool VEC>
__device__ __forceinline__ compute_t<T> rd_range(const RdInputs<NIN>& in, long long lo,
                                                 long long hi, long long first, long long step,
                                                 compute_t<T> acc) {
  using C = compute_t<T>;
  long long i = lo + first;
  if constexpr (VEC) {
    using P = Pack16<T>;
    const long long phi = hi / P::size;
    long long q = lo / P::size + first;
    for (; q + (RD_UNROLL - 1) * step < phi; q += RD_UNROLL * step)
      rd_packs<T, Rd, NIN, RD_UNROLL>(in, q, step, acc);
    for (; q < phi; q += step) rd_packs<T, Rd, NIN, 1>(in, q, step, acc);
    i = phi * P::size + first;
  }
  for (; i < hi; i += step) acc = Rd::combine(acc, rd_map<T, Rd, NIN>(in, i));
  return acc;
}

// The block's values combined (blockDim.x a multiple of 32); the result in thread 0.
template <class Rd, typename A>
__device__ __forceinline__ A rd_block_reduce(A v, A ident) {
  __shared__ A warp_vals[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  MT_UNROLL
  for (int o = 16; o > 0; o >>= 1) v = Rd::combine(v, __shfl_down_sync(0xffffffffu, v, o));
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x >> 5) ? warp_vals[lane] : ident;
    MT_UNROLL
    for (int o = 16; o > 0; o >>= 1) v = Rd::combine(v, __shfl_down_sync(0xffffffffu, v, o));
  }
  __syncthreads();  // warp_vals is free for the next row
  return v;
}

template <typename T, class Rd>
__device__ __forceinline__ T rd_finish(compute_t<T> acc, long long n) {
  using C = compute_t<T>;
  C x[2] = {acc, C(n)}, y[1];
  typename Rd::Post{}(x, y, x);
  return store_compute<T>(y[0]);
}

}  // namespace mt

// One block a row (grid-stride over rows): out[m] = post(the combined map of row m).
template <typename T, class Rd, int NIN, bool VEC>
__global__ void reduce_rows(mt::RdInputs<NIN> in, T* out, long long rows, long long len,
                            double ident) {
  using C = mt::compute_t<T>;
  for (long long m = blockIdx.x; m < rows; m += gridDim.x) {
    C acc = mt::rd_range<T, Rd, NIN, VEC>(in, m * len, (m + 1) * len, threadIdx.x, blockDim.x,
                                          C(ident));
    acc = mt::rd_block_reduce<Rd>(acc, C(ident));
    if (threadIdx.x == 0) out[m] = mt::rd_finish<T, Rd>(acc, len);
  }
}

// Pass 1 of a split row: block (b, m) combines chunk b of row m into part[m * gridDim.x + b].
template <typename T, class Rd, int NIN, bool VEC>
__global__ void reduce_split(mt::RdInputs<NIN> in, mt::compute_t<T>* part, long long len,
                             long long chunk, double ident) {
  using C = mt::compute_t<T>;
  const long long m = blockIdx.y;
  const long long lo = m * len + blockIdx.x * chunk;
  const long long end = (m + 1) * len, hi = lo + chunk < end ? lo + chunk : end;
  C acc = mt::rd_range<T, Rd, NIN, VEC>(in, lo, hi, threadIdx.x, blockDim.x, C(ident));
  acc = mt::rd_block_reduce<Rd>(acc, C(ident));
  if (threadIdx.x == 0) part[m * gridDim.x + blockIdx.x] = acc;
}

// A split row in one launch: block (b, m) combines chunk b of row m into
// part[m * gridDim.x + b], as reduce_split does; then the row's last block to finish (its
// count[m], bumped after a fence, reaches gridDim.x - 1) combines the row's partial values
// in index order, as reduce_final does (the same result, bit for bit, whichever block is
// last), applies post and sets count[m] back to 0 for the next launch.
template <typename T, class Rd, int NIN, bool VEC>
__global__ void reduce_split_last(mt::RdInputs<NIN> in, mt::compute_t<T>* part, unsigned* count,
                                  T* out, long long len, long long chunk, double ident) {
  using C = mt::compute_t<T>;
  __shared__ bool last;
  const long long m = blockIdx.y, parts = gridDim.x;
  const long long lo = m * len + blockIdx.x * chunk;
  const long long end = (m + 1) * len, hi = lo + chunk < end ? lo + chunk : end;
  C acc = mt::rd_range<T, Rd, NIN, VEC>(in, lo, hi, threadIdx.x, blockDim.x, C(ident));
  acc = mt::rd_block_reduce<Rd>(acc, C(ident));
  if (threadIdx.x == 0) {
    part[m * parts + blockIdx.x] = acc;
    __threadfence();  // the partial is visible device-wide before the count says so
    last = atomicAdd(&count[m], 1u) == unsigned(parts - 1);
  }
  __syncthreads();
  if (!last) return;  // the whole block takes the same branch
  __threadfence();
  acc = C(ident);
  for (long long i = threadIdx.x; i < parts; i += blockDim.x)
    acc = Rd::combine(acc, __ldcg(&part[m * parts + i]));  // from L2: other SMs wrote them
  acc = mt::rd_block_reduce<Rd>(acc, C(ident));
  if (threadIdx.x == 0) {
    out[m] = mt::rd_finish<T, Rd>(acc, len);
    count[m] = 0u;
  }
}

// Pass 2: one block a row combines the row's `parts` partial values, then applies post.
template <typename T, class Rd>
__global__ void reduce_final(const mt::compute_t<T>* part, T* out, long long rows, long long parts,
                             long long len, double ident) {
  using C = mt::compute_t<T>;
  for (long long m = blockIdx.x; m < rows; m += gridDim.x) {
    C acc = C(ident);
    for (long long i = threadIdx.x; i < parts; i += blockDim.x)
      acc = Rd::combine(acc, part[m * parts + i]);
    acc = mt::rd_block_reduce<Rd>(acc, C(ident));
    if (threadIdx.x == 0) out[m] = mt::rd_finish<T, Rd>(acc, len);
  }
}
)";

const char* combine_text(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "a + b";
    case ReduceOp::Prod:
      return "a * b";
    case ReduceOp::Max:
      return "(a > b || a != a) ? a : b";  // NaN wins
    case ReduceOp::Min:
      return "(a < b || a != a) ? a : b";
  }
  return "";
}

std::string generate_source(const ReductionSpec& spec, ReduceOp op, const expr::Program& map,
                            const expr::Program& post, const std::string& traits) {
  return fmt::format(
      "// Generated by mt::jit::reduction for '{}' (inputs: {}; reduce: {}; identity: {}):\n"
      "// map:\n{}// post:\n{}"
      "#include \"pointwise.cuh\"\n\n"
      "struct {} {{\n"
      "  struct Map {{\n"
      "    template <class C>\n"
      "    __device__ __forceinline__ void operator()(const C* in, C* out, const C* s) const {{\n"
      "      (void)s;\n"
      "{}"
      "    }}\n"
      "  }};\n"
      "  struct Post {{  // in[0]: acc, in[1]: n\n"
      "    template <class C>\n"
      "    __device__ __forceinline__ void operator()(const C* in, C* out, const C* s) const {{\n"
      "      (void)s;\n"
      "{}"
      "    }}\n"
      "  }};\n"
      "  template <class A>\n"
      "  __device__ __forceinline__ static A combine(A a, A b) {{ return {}; }}\n"
      "}};\n"
      "{}",
      spec.name, fmt::join(map.inputs, ", "), spec.reduce,
      spec.identity ? fmt::format("{}", *spec.identity) : "default", comment_lines(spec.map),
      comment_lines(spec.post.empty() ? "acc" : spec.post), traits, expr::cuda_body(map),
      expr::cuda_body(post), combine_text(op), kKernels);
}

template <class S>
const S& reduction_state(const std::shared_ptr<const S>& s) {
  MT_CHECK(s != nullptr,
           "[jit] Reduction: this one is empty (default-constructed); assign it the result of "
           "mt::jit::reduction(spec) before using it");
  return *s;
}

}  // namespace

#if defined(MT_HAVE_CUDA)
// Note [Split counts]
// reduce_split_last finds a row's last block with a count per row that starts at 0 and that
// the last block sets back to 0, so a count is reused by every later launch on its stream
// (a CUDA graph's replays included: the launch resets what it used). Each device has one
// buffer of counts, zeroed when first needed outside a capture and kept for the process;
// each stream that runs a split reduction takes its own range of it, kSplitRows counts, so
// launches on different streams never share a count. A stream past the buffer's
// kStreamRanges ranges, a split of more rows, or a first use during a capture takes the two
// launches (reduce_split, reduce_final). A stream handle that the driver hands out again
// after its stream was destroyed gets the old stream's range: a graph captured on the old
// stream and replayed at the same time as the new stream's reductions would share it.
constexpr int64_t kSplitRows = 512;    // counts a stream (a split has rows < 2 * SMs)
constexpr int64_t kStreamRanges = 64;  // streams a device

unsigned* split_counts(int device, CUstream_st* stream, int64_t rows) {
  struct Counts {
    Tensor buffer;
    std::vector<CUstream_st*> streams;  // the range of streams[i] starts at i * kSplitRows
  };
  static std::mutex mu;
  static auto* by_device = new std::map<int, Counts>;  // never destroyed: outlives contexts
  if (rows > kSplitRows) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_device->find(device);
  if (it == by_device->end()) {
    if (cuda::detail::capture_stream(device) != nullptr)
      return nullptr;                                   // a fill would be captured
    Tensor b = zeros({kSplitRows * kStreamRanges / 2},  // two 32-bit counts an element
                     {.dtype = DType::Int64, .device = Device(DeviceType::CUDA, device)});
    cuda::synchronize(device);  // zero before any stream's first launch reads it
    it = by_device->emplace(device, Counts{b, {}}).first;
  }
  Counts& c = it->second;
  auto at = std::find(c.streams.begin(), c.streams.end(), stream);
  if (at == c.streams.end()) {
    if (int64_t(c.streams.size()) == kStreamRanges) return nullptr;
    c.streams.push_back(stream);
    at = c.streams.end() - 1;
  }
  return static_cast<unsigned*>(c.buffer.data_ptr()) + (at - c.streams.begin()) * kSplitRows;
}
#endif

struct Reduction::State {
  ReductionSpec spec;
  ReduceOp op = ReduceOp::Sum;
  double identity = 0;
  expr::Program map, post;
  bool post_is_acc = false;  // post returns acc unchanged
  std::string traits;
  KernelSpec kernel_spec;
  mutable std::atomic<const Kernel*> slots[kSlots][kNumDTypes][kVariants] = {};
};

Reduction reduction(ReductionSpec spec) {
  MT_CHECK(!spec.name.empty(),
           "[jit] reduction: the spec has no name; set .name (it names the "
           "kernels and their errors)");
  MT_CHECK(is_valid_name(spec.name),
           "[jit] reduction: the name {} is not an identifier; a name is letters, digits and _, "
           "not starting with a digit, or such names joined by '::' (\"sumsq\", \"demo::l2\"): "
           "it names the generated kernels",
           mt::quoted(spec.name));
  auto st = std::make_shared<Reduction::State>();
  st->op = parse_reduce_op(spec.name, spec.reduce);
  st->identity = spec.identity ? *spec.identity : default_identity(st->op);
  st->map = parse_part(spec.name, "map", spec.map, spec.inputs, spec.inputs.empty());
  spec.inputs = st->map.inputs;
  MT_CHECK(spec.inputs.size() <= size_t(kMaxInputs),
           "[jit] reduction {}: at most {} inputs, got {}; combine some into one tensor first",
           mt::quoted(spec.name), kMaxInputs, spec.inputs.size());
  st->post =
      parse_part(spec.name, "post", spec.post.empty() ? "acc" : spec.post, {"acc", "n"}, false);
  const expr::Node& out = st->post.nodes[size_t(st->post.output_nodes[0])];
  st->post_is_acc = out.op == expr::Op::Input && out.index == 0;
  st->traits = "rd_" + identifier(spec.name);
  st->kernel_spec.name = identifier(spec.name) + ".reduce.cu";
  st->kernel_spec.source = generate_source(spec, st->op, st->map, st->post, st->traits);
  st->spec = std::move(spec);
  Reduction r;
  r.state_ = std::move(st);
  return r;
}

const ReductionSpec& Reduction::spec() const { return reduction_state(state_).spec; }
ReduceOp Reduction::reduce_op() const { return reduction_state(state_).op; }
double Reduction::identity() const { return reduction_state(state_).identity; }
}  // namespace mt::jit

namespace mt::detail {
const jit::expr::Program& JitAccess::map_program(const jit::Reduction& r) {
  return jit::reduction_state(r.state_).map;
}
const jit::expr::Program& JitAccess::post_program(const jit::Reduction& r) {
  return jit::reduction_state(r.state_).post;
}
}  // namespace mt::detail

namespace mt::jit {
const std::string& Reduction::cuda_source() const {
  return reduction_state(state_).kernel_spec.source;
}

std::string Reduction::name_expression(DType t, ReductionVariant v) const {
  const State& st = reduction_state(state_);
  const size_t nin = st.map.inputs.size();
  const std::string_view ty = kernel_type_name(t);
  switch (v) {
    case ReductionVariant::Rows:
    case ReductionVariant::RowsVec:
      return fmt::format("reduce_rows<{}, {}, {}, {}>", ty, st.traits, nin,
                         v == ReductionVariant::RowsVec);
    case ReductionVariant::Split:
    case ReductionVariant::SplitVec:
      return fmt::format("reduce_split<{}, {}, {}, {}>", ty, st.traits, nin,
                         v == ReductionVariant::SplitVec);
    case ReductionVariant::Final:
      return fmt::format("reduce_final<{}, {}>", ty, st.traits);
    case ReductionVariant::SplitLast:
    case ReductionVariant::SplitLastVec:
      return fmt::format("reduce_split_last<{}, {}, {}, {}>", ty, st.traits, nin,
                         v == ReductionVariant::SplitLastVec);
  }
  MT_ASSERT(false, "unknown ReductionVariant {}", int(v));
  return {};
}

std::vector<std::string> Reduction::name_expressions() const {
  std::vector<std::string> out;
  for (DType t : kFloatTypes)
    for (auto v : {ReductionVariant::Rows, ReductionVariant::RowsVec, ReductionVariant::Split,
                   ReductionVariant::SplitVec, ReductionVariant::Final, ReductionVariant::SplitLast,
                   ReductionVariant::SplitLastVec})
      out.push_back(name_expression(t, v));
  return out;
}

std::vector<int64_t> reduction_dims(std::string_view name, const Shape& shape,
                                    std::span<const int64_t> dims) {
  const int64_t nd = int64_t(shape.size()), n = std::max<int64_t>(nd, 1);
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    MT_CHECK(d >= -n && d < n,
             "[{}] dim {} is out of range for the inputs' broadcast shape {} ({} dim{}); pass "
             "dims in [{}, {}]",
             name, d, shape, nd, nd == 1 ? "" : "s", -n, n - 1);
    out.push_back(d < 0 ? d + n : d);
  }
  std::sort(out.begin(), out.end());
  const auto dup = std::adjacent_find(out.begin(), out.end());
  MT_CHECK(dup == out.end(), "[{}] dim {} appears more than once in dims; list each dim once", name,
           dup == out.end() ? 0 : *dup);
  if (nd == 0) out.clear();  // a 0-d input: dim 0 or -1 is every dim
  return out;
}

namespace {

bool reduced(const std::vector<int64_t>& dims, int64_t d) {
  return dims.empty() || std::binary_search(dims.begin(), dims.end(), d);
}

}  // namespace

Shape reduction_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    if (!reduced(dims, d))
      out.push_back(shape[size_t(d)]);
    else if (keepdim)
      out.push_back(1);
  return out;
}

namespace {

template <ReduceOp R, typename C>
inline C combine(C a, C b) {
  if constexpr (R == ReduceOp::Sum)
    return a + b;
  else if constexpr (R == ReduceOp::Prod)
    return a * b;
  else if constexpr (R == ReduceOp::Max)
    return (a > b || a != a) ? a : b;
  else
    return (a < b || a != a) ? a : b;
}

// n values combined in eight running values, those pairwise.
template <ReduceOp R, typename C>
C reduce_tile(const C* v, int64_t n, C ident) {
  C lane[8];
  for (C& l : lane) l = ident;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] = combine<R>(lane[k], v[j + k]);
  for (int k = 0; j < n; ++j, ++k) lane[k] = combine<R>(lane[k], v[j]);
  return combine<R>(combine<R>(combine<R>(lane[0], lane[1]), combine<R>(lane[2], lane[3])),
                    combine<R>(combine<R>(lane[4], lane[5]), combine<R>(lane[6], lane[7])));
}

// v[0..n) combined pairwise, in place.
template <ReduceOp R, typename C>
C reduce_pairwise(C* v, int64_t n, C ident) {
  if (n == 0) return ident;
  while (n > 1) {
    const int64_t half = n / 2;
    for (int64_t i = 0; i < half; ++i) v[i] = combine<R>(v[2 * i], v[2 * i + 1]);
    if (n % 2) v[half] = v[n - 1];
    n = half + n % 2;
  }
  return v[0];
}

// The map over rows x len contiguous values of each input, reduced a row into acc[rows].
template <ReduceOp R, typename C>
void reduce_cpu(const expr::Program& map, const std::vector<const C*>& in, int64_t rows,
                int64_t len, C ident, C* acc) {
  constexpr int64_t kTile = expr::kChunk;
  const C no_scalars[1] = {C(0)};
  if (len == 0) {
    std::fill(acc, acc + rows, ident);
    return;
  }
  if (len >= kTile) {  // long rows: every tile of every row is a work item
    const int64_t tiles = (len + kTile - 1) / kTile;
    std::vector<C> part(size_t(rows * tiles));
    cpu::parallel_for(rows * tiles, cpu::kGrainSize / kTile, [&](int64_t b, int64_t e) {
      expr::TileEvaluator<C> ev(map, no_scalars);
      std::vector<C> buf(static_cast<size_t>(kTile));
      C* out[1] = {buf.data()};
      std::vector<const C*> ic(in.size());
      for (int64_t item = b; item < e; ++item) {
        const int64_t m = item / tiles, t = item % tiles;
        const int64_t begin = m * len + t * kTile, n = std::min(kTile, len - t * kTile);
        for (size_t k = 0; k < in.size(); ++k) ic[k] = in[k] + begin;
        ev.run(ic.data(), out, n);
        part[size_t(item)] = reduce_tile<R>(buf.data(), n, ident);
      }
    });
    cpu::parallel_for(rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m)
        acc[m] = reduce_pairwise<R>(&part[size_t(m * tiles)], tiles, ident);
    });
    return;
  }
  // short rows: as many whole rows a tile as fit
  const int64_t per = kTile / len, groups = (rows + per - 1) / per;
  cpu::parallel_for(groups, std::max<int64_t>(1, cpu::kGrainSize / (per * len)),
                    [&](int64_t b, int64_t e) {
                      expr::TileEvaluator<C> ev(map, no_scalars);
                      std::vector<C> buf(static_cast<size_t>(kTile));
                      C* out[1] = {buf.data()};
                      std::vector<const C*> ic(in.size());
                      for (int64_t g = b; g < e; ++g) {
                        const int64_t m0 = g * per, nrows = std::min(per, rows - m0);
                        for (size_t k = 0; k < in.size(); ++k) ic[k] = in[k] + m0 * len;
                        ev.run(ic.data(), out, nrows * len);
                        for (int64_t r = 0; r < nrows; ++r)
                          acc[m0 + r] = reduce_tile<R>(buf.data() + r * len, len, ident);
                      }
                    });
}

// post(acc, n) over rows values into out.
template <typename C>
void post_cpu(const expr::Program& post, const C* acc, int64_t rows, int64_t len, C* out) {
  constexpr int64_t kTile = expr::kChunk;
  const C no_scalars[1] = {C(0)};
  const int64_t tiles = (rows + kTile - 1) / kTile;
  cpu::parallel_for(tiles, std::max<int64_t>(1, cpu::kGrainSize / kTile),
                    [&](int64_t b, int64_t e) {
                      expr::TileEvaluator<C> ev(post, no_scalars);
                      const std::vector<C> n(static_cast<size_t>(kTile), static_cast<C>(len));
                      for (int64_t t = b; t < e; ++t) {
                        const C* in[2] = {acc + t * kTile, n.data()};
                        C* o[1] = {out + t * kTile};
                        ev.run(in, o, std::min(kTile, rows - t * kTile));
                      }
                    });
}

// The map over inputs laid out [outer, len, inner] (contiguous), reduced over len into
// acc[outer * inner]: a column reduction, read in place. Rows of the slab go through the
// evaluator several at a time (or a tile of a long row at a time), each output's values
// combined in blocks of 128 rows, the blocks in order.
template <ReduceOp R, typename C>
void reduce_outer_cpu(const expr::Program& map, const std::vector<const C*>& in, int64_t outer,
                      int64_t len, int64_t inner, C ident, C* acc) {
  constexpr int64_t kTile = expr::kChunk, kBlock = 128;
  const C no_scalars[1] = {C(0)};
  const int64_t width = std::min(inner, kTile), cols = (inner + width - 1) / width;
  const int64_t per = std::max<int64_t>(1, kTile / inner);  // rows a run when inner < kTile
  cpu::parallel_for(
      outer * cols, std::max<int64_t>(1, cpu::kGrainSize / std::max<int64_t>(1, len * width)),
      [&](int64_t b, int64_t e) {
        expr::TileEvaluator<C> ev(map, no_scalars);
        std::vector<C> buf(static_cast<size_t>(kTile)), block(static_cast<size_t>(width)),
            total(static_cast<size_t>(width));
        C* out[1] = {buf.data()};
        std::vector<const C*> ic(in.size());
        for (int64_t item = b; item < e; ++item) {
          const int64_t a = item / cols, c0 = (item % cols) * width,
                        w = std::min(width, inner - c0);
          std::fill(total.begin(), total.end(), ident);
          std::fill(block.begin(), block.end(), ident);
          int64_t in_block = 0;
          for (int64_t r = 0; r < len;) {
            const int64_t g = inner <= kTile ? std::min(per, len - r) : 1;  // rows this run
            for (size_t k = 0; k < in.size(); ++k) ic[k] = in[k] + (a * len + r) * inner + c0;
            ev.run(ic.data(), out, inner <= kTile ? g * inner : w);
            for (int64_t q = 0; q < g; ++q)
              for (int64_t j = 0; j < w; ++j)
                block[size_t(j)] = combine<R>(block[size_t(j)], buf[size_t(q * inner + j)]);
            r += g, in_block += g;
            if (in_block >= kBlock || r == len) {
              for (int64_t j = 0; j < w; ++j) {
                total[size_t(j)] = combine<R>(total[size_t(j)], block[size_t(j)]);
                block[size_t(j)] = ident;
              }
              in_block = 0;
            }
          }
          std::copy(total.begin(), total.begin() + w, acc + a * inner + c0);
        }
      });
}

// When the reduced dims of shape (size-1 dims aside) are one block followed by kept dims,
// the sizes of the kept dims before it, the block and the kept dims after it.
std::optional<std::array<int64_t, 3>> outer_layout(const Shape& shape,
                                                   const std::vector<int64_t>& dims) {
  std::array<int64_t, 3> sizes = {1, 1, 1};
  int part = 0;  // 0: kept before the block, 1: the block, 2: kept after it
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (shape[size_t(d)] == 1) continue;
    const bool red = reduced(dims, d);
    if (red && part == 2) return std::nullopt;
    if (red)
      part = 1;
    else if (part == 1)
      part = 2;
    sizes[size_t(part)] *= shape[size_t(d)];
  }
  if (part != 2) return std::nullopt;
  return sizes;
}

// Kept dims first, reduced dims last.
std::vector<int64_t> rows_permutation(size_t ndim, const std::vector<int64_t>& dims) {
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < int64_t(ndim); ++d)
    if (!reduced(dims, d)) perm.push_back(d);
  for (int64_t d = 0; d < int64_t(ndim); ++d)
    if (reduced(dims, d)) perm.push_back(d);
  return perm;
}

}  // namespace

Tensor Reduction::call(std::span<const Tensor> inputs, std::span<const int64_t> dims_in,
                       bool keepdim) const {
  const State& st = reduction_state(state_);
  const expr::Program& p = st.map;
  const std::string& name = st.spec.name;
  MT_CHECK(inputs.size() == p.inputs.size(), "[{}] takes {} input tensor{} ({}), got {}", name,
           p.inputs.size(), p.inputs.size() == 1 ? "" : "s", fmt::join(p.inputs, ", "),
           inputs.size());
  const detail::Operands o = check_operands(name, inputs, p.inputs);
  const Shape& shape = o.shape;
  const DType t = o.dtype;
  const Device dev = o.device;
  const bool fake = o.fake;
  const std::vector<int64_t> dims = reduction_dims(name, shape, dims_in);
  const Shape out_shape = reduction_shape(shape, dims, keepdim);
  const TensorOptions opts{.dtype = t, .device = dev};
  if (fake) return fake_empty(out_shape, opts);
  int64_t rows = 1, len = 1;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    (reduced(dims, d) ? len : rows) *= shape[size_t(d)];
  if (rows == 0) return empty(out_shape, opts);

  NoGradGuard no_grad;  // conversions inside are not part of anyone's graph
  const std::vector<int64_t> perm = rows_permutation(shape.size(), dims);
  const DType ct = t == DType::Float64 ? DType::Float64 : DType::Float32;
  const DType load_t = dev.is_cpu() ? ct : t;
  // On the CPU a block of reduced dims before kept ones is read in place, as columns.
  const auto outer = dev.is_cpu() && len > 0 ? outer_layout(shape, dims) : std::nullopt;
  std::vector<Tensor> in;  // [rows, len] (or [outer, len, inner]) contiguous, of load_t
  for (const Tensor& x : inputs) {
    const Tensor full = x.to(load_t).expand(shape);
    in.push_back(outer ? full.contiguous() : full.permute(Shape(perm)).contiguous());
  }

  if (dev.is_cpu()) {
    Tensor out = empty(out_shape, {.dtype = ct});
    visit_dtype(ct, [&](auto tag) {
      using C = decltype(tag);
      if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
        std::vector<const C*> ip;
        for (const Tensor& x : in) ip.push_back(x.data_ptr<C>());
        std::vector<C> acc(static_cast<size_t>(rows));
        const C ident = C(st.identity);
        auto run = [&]<ReduceOp R>() {
          if (outer)
            reduce_outer_cpu<R>(p, ip, (*outer)[0], (*outer)[1], (*outer)[2], ident, acc.data());
          else
            reduce_cpu<R>(p, ip, rows, len, ident, acc.data());
        };
        switch (st.op) {
          case ReduceOp::Sum:
            run.template operator()<ReduceOp::Sum>();
            break;
          case ReduceOp::Prod:
            run.template operator()<ReduceOp::Prod>();
            break;
          case ReduceOp::Max:
            run.template operator()<ReduceOp::Max>();
            break;
          case ReduceOp::Min:
            run.template operator()<ReduceOp::Min>();
            break;
        }
        C* o = out.data_ptr<C>();
        if (st.post_is_acc)
          std::copy(acc.begin(), acc.end(), o);
        else
          post_cpu(st.post, acc.data(), rows, len, o);
      }
    });
    return t == ct ? out : out.to(t);
  }
#if defined(MT_HAVE_CUDA)
  MT_CHECK(dev.is_cuda(), "[{}] cannot run on {}", name, dev);
  const int d = dev.index;
  Tensor out = empty(out_shape, opts);
  void* ptrs[kMaxInputs] = {};  // RdInputs<NIN>: the inputs' data
  bool aligned = true;
  for (size_t k = 0; k < in.size(); ++k) {
    ptrs[k] = in[k].data_ptr();
    aligned = aligned && reinterpret_cast<uintptr_t>(ptrs[k]) % 16 == 0;
  }
  const int64_t pack = int64_t(16 / dtype_size(t));
  const bool vec = aligned && len % pack == 0;
  const int sms = sm_count(d);
  auto kernel_for = [&](ReductionVariant v) {
    std::atomic<const Kernel*>* slot =
        d >= 0 && d < kSlots ? &st.slots[d][int(t)][int(v)] : nullptr;
    const Kernel* k = slot ? slot->load(std::memory_order_acquire) : nullptr;
    if (!k) {
      k = &get_kernel(d, st.kernel_spec, name_expression(t, v));
      if (slot) slot->store(k, std::memory_order_release);
    }
    return k;
  };
  CUstream_st* stream = cuda::current_stream(d);
  long long nrows = rows, nlen = len;
  double ident = st.identity;
  void* out_ptr = out.data_ptr();
  // A few long rows: split each over several blocks (Note [Reductions]).
  constexpr int64_t kSplitChunk = 16384;  // elements a block at least; a multiple of every pack
  int64_t parts = 1;
  if (rows < 2 * int64_t(sms) && len >= 4 * kSplitChunk)
    parts = std::min<int64_t>((len + kSplitChunk - 1) / kSplitChunk,
                              std::max<int64_t>(1, 8 * int64_t(sms) / rows));
  const unsigned block = len >= 256 ? 256u : unsigned(std::max<int64_t>(32, (len + 31) / 32 * 32));
  if (parts <= 1) {
    const Kernel* k = kernel_for(vec ? ReductionVariant::RowsVec : ReductionVariant::Rows);
    const unsigned grid = unsigned(std::min<int64_t>(rows, int64_t(sms) * 32));
    void* args[] = {ptrs, &out_ptr, &nrows, &nlen, &ident};
    k->launch(Dim3(grid), Dim3(block), 0, stream, args);
    return out;
  }
  long long chunk = (len + parts - 1) / parts;
  chunk = (chunk + 2047) / 2048 * 2048;  // pack-aligned chunks
  long long nparts = (len + chunk - 1) / chunk;
  Tensor part =
      empty({rows * nparts},
            {.dtype = t == DType::Float64 ? DType::Float64 : DType::Float32, .device = dev});
  void* part_ptr = part.data_ptr();
  if (unsigned* count = split_counts(d, stream, rows)) {  // one launch
    const Kernel* k =
        kernel_for(vec ? ReductionVariant::SplitLastVec : ReductionVariant::SplitLast);
    void* args[] = {ptrs, &part_ptr, &count, &out_ptr, &nlen, &chunk, &ident};
    k->launch(Dim3(unsigned(nparts), unsigned(rows)), Dim3(256), 0, stream, args);
    return out;
  }
  const Kernel* k1 = kernel_for(vec ? ReductionVariant::SplitVec : ReductionVariant::Split);
  void* args1[] = {ptrs, &part_ptr, &nlen, &chunk, &ident};
  k1->launch(Dim3(unsigned(nparts), unsigned(rows)), Dim3(256), 0, stream, args1);
  const Kernel* k2 = kernel_for(ReductionVariant::Final);
  void* args2[] = {&part_ptr, &out_ptr, &nrows, &nparts, &nlen, &ident};
  k2->launch(Dim3(unsigned(rows)), Dim3(256), 0, stream, args2);
  return out;
#else
  MT_ERROR(
      "[{}] got a tensor on {}, but minitensor was built without CUDA; rebuild with the "
      "CUDA toolkit installed, or pass CPU tensors",
      name, dev);
#endif
}

}  // namespace mt::jit
