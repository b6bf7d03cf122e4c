// SPDX-License-Identifier: MIT
// mha::flash_attn's CUDA kernels: softmax(scale * Q K^T) V over [B, H, S, D] (contiguous),
// never holding the S x S matrix. Compiled by NVRTC through mt::jit::kernel; also compiled
// as host C++ by the test, where grid_emulation.h's threads run them and the PTX below
// (ldmatrix, mma.sync, shuffles) is replaced by C++ stand-ins that exchange registers
// between the 32 threads of a warp, so a fragment-layout mistake fails on a CPU-only CI.
//
// Kernels:
//   flash_attn_fwd<T, D, NW, MW>          tensor cores, T = mt::Half or mt::BFloat16,
//                                         D = 64 or 128, NW warps x 16 MW query rows a block
//   flash_attn_bwd<T, D, BM, NW>          tensor cores, a block of NW warps per 16 NW keys:
//                                         dK, dV in registers, dQ by float atomics
//   flash_attn_bwd_prep<T>                delta = rowsum(dO * O) - grad_lse, a thread a row
//   flash_attn_fwd_generic<T>, flash_attn_bwd_dq_generic<T>, flash_attn_bwd_dkdv_generic<T>:
//                                         a thread a row, any D <= 128, any float dtype
// Causal is top-left aligned (query i sees keys 0..i), as torch's is_causal.

// The 16-bit float types as bits, named as minitensor's launch expects them. This file
// does not include the runtime's common.cuh: the test compiles it as host C++ inside a
// namespace of its own, where common.cuh's include of layout.h (already seen through
// minitensor.h) would be skipped, so the few conversions it needs are written here.
namespace mt {
struct Half {
  unsigned short bits;
};
struct BFloat16 {
  unsigned short bits;
};
}  // namespace mt

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define FA_DEVICE 1
#define FA_UNROLL _Pragma("unroll")
#else
#define FA_DEVICE 0
#define FA_UNROLL
#endif

constexpr int kFaMaxGenericD = 128;  // the generic kernels keep a row of D in registers

// ------------------------------------------------------------------- conversions

__device__ __forceinline__ float fa_bits_float(unsigned u) {
#if FA_DEVICE
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}
__device__ __forceinline__ unsigned fa_float_bits(float f) {
#if FA_DEVICE
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(unsigned, f);
#endif
}

__device__ __forceinline__ float fa_load(float x) { return x; }
__device__ __forceinline__ double fa_load(double x) { return x; }
__device__ __forceinline__ float fa_load(mt::BFloat16 b) {
  return fa_bits_float(unsigned(b.bits) << 16);
}
__device__ __forceinline__ float fa_load(mt::Half h) {
#if FA_DEVICE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  return float(__builtin_bit_cast(_Float16, h.bits));
#endif
}

// float -> 16 bits, round to nearest even.
template <typename T>
__device__ __forceinline__ unsigned short fa_bits16(float f);
template <>
__device__ __forceinline__ unsigned short fa_bits16<mt::Half>(float f) {
#if FA_DEVICE
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return __builtin_bit_cast(unsigned short, _Float16(f));
#endif
}
template <>
__device__ __forceinline__ unsigned short fa_bits16<mt::BFloat16>(float f) {
#if FA_DEVICE
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  unsigned u = fa_float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
#endif
}

template <typename T, typename A>
__device__ __forceinline__ T fa_store(A v) {
  if constexpr (sizeof(T) == 2)
    return T{fa_bits16<T>(float(v))};
  else
    return T(v);
}

// Two floats as one register of two 16-bit values, lo in the low half (the element with
// the smaller column index in an mma fragment).
template <typename T>
__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
  return unsigned(fa_bits16<T>(lo)) | (unsigned(fa_bits16<T>(hi)) << 16);
}

template <typename T>
struct FaIsHalf {
  static constexpr bool value = false;
};
template <>
struct FaIsHalf<mt::Half> {
  static constexpr bool value = true;
};

// The C fragments of two adjacent 16 x 8 tiles (columns 0-7 and 8-15), rounded to 16 bits,
// as the A fragment of one 16 x 16 tile (Note [mma fragments]).
template <typename T>
__device__ __forceinline__ void fa_c_to_a(unsigned (&a)[4], const float (&c0)[4],
                                          const float (&c1)[4]) {
  a[0] = fa_pack<T>(c0[0], c0[1]);
  a[1] = fa_pack<T>(c0[2], c0[3]);
  a[2] = fa_pack<T>(c1[0], c1[1]);
  a[3] = fa_pack<T>(c1[2], c1[3]);
}

// The accumulation type: float, or double for double.
template <typename T>
struct FaAcc {
  using type = float;
};
template <>
struct FaAcc<double> {
  using type = double;
};

__device__ __forceinline__ float fa_exp(float x) { return expf(x); }
__device__ __forceinline__ double fa_exp(double x) { return exp(x); }
__device__ __forceinline__ float fa_log(float x) { return logf(x); }
__device__ __forceinline__ double fa_log(double x) { return log(x); }

// -------------------------------------------- warp-level primitives and their stand-ins

// Note [mma fragments]
// mma.sync.m16n8k16 (row.col, 16-bit inputs, float accumulators): with g = lane / 4 and
// t = lane % 4, a thread holds
//   A (16 x 16, 4 registers of 2 values): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1],
//                                         a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B (16 x 8, 2 registers):              b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   C (16 x 8, 4 floats):                 c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
// so the C fragments of two adjacent 8-column tiles, packed to 16 bits, are the A
// fragment of a 16 x 16 tile: P = softmax(S) goes from one mma to the next in registers.
// ldmatrix.x4 loads four 8 x 8 matrices of 16-bit values from shared memory, lanes 8i..8i+7
// giving the row addresses of matrix i; register i of a thread is matrix i's
// [g][2t, 2t+1], or with .trans [2t, 2t+1][g] (the transposed matrix). A tile stored row
// by row ([m][k] for A, [n][k] for B) loads without .trans; one stored the other way
// round ([k][m], [k][n]) with it.

#if !FA_DEVICE
// The stand-ins: each thread puts its registers (or row address) in a block-wide table,
// the block synchronizes, each thread computes its result from its warp's 32 entries, the
// block synchronizes again. All threads of the block must reach each call (the kernels
// keep their control flow uniform across the block).
struct FaLaneSlot {
  unsigned r[6];
  const void* p;
  float f;
};
inline FaLaneSlot fa_emu_slots[1024];
inline unsigned fa_emu_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned short fa_emu_half(unsigned reg, int hi) {
  return (unsigned short)(hi ? reg >> 16 : reg);
}
#endif

#if !FA_DEVICE
// ldmatrix.x4's stand-in (fa_ldsm_x4 below): row is this thread's row address.
template <bool Trans>
void fa_emu_ldmatrix_x4(unsigned (&r)[4], const unsigned short* row) {
  const unsigned tid = fa_emu_tid(), base = tid & ~31u, lane = tid & 31u;
  fa_emu_slots[tid].p = row;
  __syncthreads();
  const unsigned g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    unsigned short lo, hi;
    if (!Trans) {
      const auto* p = static_cast<const unsigned short*>(fa_emu_slots[base + 8 * i + g].p);
      lo = p[2 * t];
      hi = p[2 * t + 1];
    } else {
      lo = static_cast<const unsigned short*>(fa_emu_slots[base + 8 * i + 2 * t].p)[g];
      hi = static_cast<const unsigned short*>(fa_emu_slots[base + 8 * i + 2 * t + 1].p)[g];
    }
    r[i] = unsigned(lo) | (unsigned(hi) << 16);
  }
  __syncthreads();
}
#endif

// c += A (16 x 16) * B (16 x 8), float accumulators.
template <typename T>
__device__ __forceinline__ void fa_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                       unsigned b1) {
#if FA_DEVICE
  if constexpr (FaIsHalf<T>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  const unsigned tid = fa_emu_tid(), base = tid & ~31u, lane = tid & 31u;
  for (int i = 0; i < 4; ++i) fa_emu_slots[tid].r[i] = a[i];
  fa_emu_slots[tid].r[4] = b0;
  fa_emu_slots[tid].r[5] = b1;
  __syncthreads();
  auto A = [&](unsigned row, unsigned k) {  // Note [mma fragments]
    const FaLaneSlot& s = fa_emu_slots[base + (row % 8) * 4 + (k % 8) / 2];
    return fa_load(T{fa_emu_half(s.r[(row >= 8) + 2 * (k >= 8)], int(k % 2))});
  };
  auto B = [&](unsigned k, unsigned n) {
    const FaLaneSlot& s = fa_emu_slots[base + n * 4 + (k % 8) / 2];
    return fa_load(T{fa_emu_half(s.r[4 + (k >= 8)], int(k % 2))});
  };
  const unsigned g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const unsigned row = g + 8 * (e / 2), col = 2 * t + (e % 2);
    float acc = 0;
    for (unsigned k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    c[e] += acc;
  }
  __syncthreads();
#endif
}

// Max and sum over the 4 threads of a quad (the threads holding one row of a C fragment).
template <bool Max>
__device__ __forceinline__ float fa_quad_reduce(float v) {
#if FA_DEVICE
  for (int o = 1; o <= 2; o <<= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, w) : v + w;
  }
  return v;
#else
  const unsigned tid = fa_emu_tid();
  fa_emu_slots[tid].f = v;
  __syncthreads();
  const unsigned q = tid & ~3u;
  float r = fa_emu_slots[q].f;
  for (unsigned i = 1; i < 4; ++i)
    r = Max ? (r > fa_emu_slots[q + i].f ? r : fa_emu_slots[q + i].f) : r + fa_emu_slots[q + i].f;
  __syncthreads();
  return r;
#endif
}

// Whether b holds in any thread of the warp.
__device__ __forceinline__ bool fa_warp_any(bool b) {
#if FA_DEVICE
  return __any_sync(0xffffffffu, b);
#else
  const unsigned tid = fa_emu_tid();
  fa_emu_slots[tid].f = b ? 1.f : 0.f;
  __syncthreads();
  bool r = false;
  for (unsigned i = tid & ~31u; i < (tid & ~31u) + 32; ++i) r = r || fa_emu_slots[i].f != 0.f;
  __syncthreads();
  return r;
#endif
}

// v from the thread whose lane is this one's xor 1.
__device__ __forceinline__ float fa_shfl_xor1(float v) {
#if FA_DEVICE
  return __shfl_xor_sync(0xffffffffu, v, 1);
#else
  const unsigned tid = fa_emu_tid();
  fa_emu_slots[tid].f = v;
  __syncthreads();
  const float r = fa_emu_slots[tid ^ 1u].f;
  __syncthreads();
  return r;
#endif
}

// p[0..3] += v[0..3] in global memory (16-byte aligned): one vector reduction on sm_90,
// four atomics before.
__device__ __forceinline__ void fa_red4(float* p, const float (&v)[4]) {
#if FA_DEVICE && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]), "f"(v[1]),
               "f"(v[2]), "f"(v[3])
               : "memory");
#else
  for (int i = 0; i < 4; ++i) atomicAdd(p + i, v[i]);
#endif
}

// Adds a 16 x 8 C fragment (Note [mma fragments]) times `mul` to rows row0.., columns
// col0.. of a float matrix of row stride ld whose rows past n_rows are not there: lanes 2i
// and 2i + 1 swap halves so each holds four consecutive values of one row.
__device__ __forceinline__ void fa_red_fragment(float* m, long long ld, int row0, int col0,
                                                int n_rows, const float (&c)[4], float mul) {
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const bool odd = t & 1;
  const float r0 = fa_shfl_xor1(odd ? c[0] : c[2]), r1 = fa_shfl_xor1(odd ? c[1] : c[3]);
  const float v[4] = {(odd ? r0 : c[0]) * mul, (odd ? r1 : c[1]) * mul, (odd ? c[2] : r0) * mul,
                      (odd ? c[3] : r1) * mul};
  const int row = row0 + g + (odd ? 8 : 0);
  if (row < n_rows) fa_red4(m + row * ld + col0 + 2 * (t & ~1), v);
}

// 2^x by the special-function unit's ex2.approx.ftz (relative error about 2^-22; 2^-inf
// = 0): exp2f would add a range fix-up of three or four instructions around each of the
// forward's 64 exponentials a thread a tile.
__device__ __forceinline__ float fa_exp2(float x) {
#if FA_DEVICE
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}
constexpr float kFaLog2e = 1.4426950408889634f;
constexpr float kFaLn2 = 0.6931471805599453f;

// Shared-memory addresses as bytes: the shared window's 32-bit address on the device (one
// register, and the compiler folds constant offsets into ldmatrix's and cp.async's
// immediates), the host pointer's value under the emulation.
#if FA_DEVICE
using FaSAddr = unsigned;
__device__ __forceinline__ FaSAddr fa_saddr(const void* p) {
  return unsigned(__cvta_generic_to_shared(p));
}
#else
using FaSAddr = unsigned long long;
inline FaSAddr fa_saddr(const void* p) { return reinterpret_cast<unsigned long long>(p); }
#endif

template <bool Trans>
__device__ __forceinline__ void fa_ldsm_x4(unsigned (&r)[4], FaSAddr a) {
#if FA_DEVICE
  if (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  fa_emu_ldmatrix_x4<Trans>(r, reinterpret_cast<const unsigned short*>(a));
#endif
}

// Note [Tile copies]
// A tile of Rows x D 16-bit values goes from global to shared memory (row stride D + 8,
// Note [Padded rows]) in 16-byte chunks, D / 8 a row: thread tid copies chunk tid % (D / 8)
// of rows tid / (D / 8) + i * Threads / (D / 8). FaCopyLane holds a thread's first chunk's
// offsets, computed once a kernel, so a tile's copy is Rows * D / (8 * Threads) unrolled
// steps of a pointer plus a constant: no division, multiplication or loop control per tile.
// Rows at or past the matrix's end are zeros.
struct FaCopyLane {
  int row;       // the thread's first row within the tile
  int src;       // its first chunk's offset in a [rows, D] matrix, in elements
  unsigned dst;  // and in the padded tile, in bytes
};
template <int D, int Threads>
__device__ __forceinline__ FaCopyLane fa_copy_lane() {
  constexpr int kChunks = D / 8;
  static_assert(Threads % kChunks == 0, "a pass copies whole rows");
  const int tid = int(threadIdx.x), r = tid / kChunks, cc = tid % kChunks;
  return {r, r * D + cc * 8, unsigned((r * (D + 8) + cc * 8) * 2)};
}

// Copies rows row0.. of the [n_rows, D] matrix src into the tile at dst, with cp.async
// (Async: the copies run in the background until fa_async_wait(); rows past the end are
// zero-filled by a source size of 0) or by plain 16-byte loads and stores.
struct alignas(16) FaVec16 {
  unsigned x, y, z, w;
};
struct alignas(8) FaF2 {
  float x, y;
};
template <int D, int Rows, int Threads, bool Async>
__device__ __forceinline__ void fa_copy_tile(FaSAddr dst, const unsigned short* src, int row0,
                                             int n_rows, const FaCopyLane& lane) {
  constexpr int kStep = Threads / (D / 8);  // rows a pass
  static_assert(Rows % kStep == 0, "every thread copies as many chunks");
  const unsigned short* from = src + (long long)row0 * D + lane.src;
  const FaSAddr to = dst + lane.dst;
  const int left = n_rows - row0 - lane.row;  // this thread's rows in the matrix
  FA_UNROLL
  for (int i = 0; i < Rows / kStep; ++i) {
    const bool in = i * kStep < left;
    const unsigned short* f = in ? from + i * kStep * D : src;
    const FaSAddr d = to + FaSAddr(i * kStep * (D + 8) * 2);
#if FA_DEVICE
    if (Async)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(f),
                   "r"(in ? 16 : 0));
    else
#endif
    {
      FaVec16 v = {0, 0, 0, 0};
      if (in) v = *reinterpret_cast<const FaVec16*>(f);
#if FA_DEVICE  // d is a shared-window address, not a generic pointer
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(d), "r"(v.x), "r"(v.y),
                   "r"(v.z), "r"(v.w)
                   : "memory");
#else
      *reinterpret_cast<FaVec16*>(d) = v;
#endif
    }
  }
#if FA_DEVICE
  if (Async) asm volatile("cp.async.commit_group;");
#endif
}
__device__ __forceinline__ void fa_async_wait() {
#if FA_DEVICE
  asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

// Note [Padded rows]
// A tile of D 16-bit values a row is stored with a stride of D + 8 values (D * 2 + 16
// bytes): the eight row addresses of one ldmatrix matrix then fall 16 bytes apart modulo
// 128, on eight different groups of four banks, so the load has no bank conflict (with a
// stride of D the eight rows would sit on the same banks).

// This lane's row address for an ldmatrix.x4 of the 16 x 16 block at the origin of a 16-bit
// matrix of row stride ld, as a byte offset (Note [mma fragments]); lanes 8i..8i+7 address
// matrix i's rows. RowsFirst: matrices 0-3 are (rows 0-7, columns 0-7), (rows 8-15, 0-7),
// (0-7, 8-15), (8-15, 8-15), which gives an A fragment of a tile stored [m][k] and, with
// .trans, the B fragments of two 8-column tiles of B stored [k][n]. Otherwise matrix 1 is
// (0-7, 8-15) and matrix 2 (8-15, 0-7): the B fragments of B stored [n][k] and, with
// .trans, an A fragment of A stored [k][m]. A block at (row0, col0) adds
// (row0 * ld + col0) * 2, a constant in the kernels' unrolled loops.
template <bool RowsFirst>
__device__ __forceinline__ unsigned fa_ldsm_off(int ld) {
  const int lane = int(threadIdx.x % 32), i = lane / 8, r = lane % 8;
  const int row = r + 8 * (RowsFirst ? i % 2 : i / 2), col = 8 * (RowsFirst ? i / 2 : i % 2);
  return unsigned((row * ld + col) * 2);
}

// ------------------------------------------------------------ tensor-core forward

// Note [Forward tiling]
// A block of NW warps takes 16 * MW * NW query rows (warp w MW tiles of 16 rows) of one
// (b, h) and streams 64-key tiles of K and V through shared memory. Per tile, each warp
// computes its 16 MW x 64 scores with mma (B = K, rows [n][k], no transpose), rescales its
// running max and sum (online softmax in base 2, the row spread over a quad), and adds P V
// (P from the score registers, V through ldmatrix.trans). The next K and V tile is copied
// with cp.async into the other half of a double buffer while the tensor cores work on this
// one (one __syncthreads a tile). Causal blocks stop at the tile that holds their last
// row's diagonal; blocks are issued last query block first, so the longest ones start
// first. Each K or V fragment a warp loads with ldmatrix feeds its MW row tiles, so MW = 2
// halves the shared-memory reads per mma. Q's fragments stay in registers when they fit
// (16 MW D / 64 registers a thread: MW = 2 at D = 64, 1 at D = 128); at D = 128 with
// MW = 2 Q stays in shared memory and is read again each tile, as FlashAttention-2 does.
//
// What keeps the loop short (the mma.sync rate leaves about 12 issue slots an mma, and a
// tile has 32 MW mma a warp): every ldmatrix address is a per-thread base plus a constant,
// the copies are unrolled (Note [Tile copies]), the scale is folded into the exponent
// (p = 2^(s c - m c), one fma and one ex2 a score; the max is taken over the raw scores, so
// a negative scale negates Q's fragments instead), and the key masks run only on the tiles
// that need them (past Sk, or a causal diagonal).
constexpr int kFaBN = 64;
constexpr float kFaRescaleSlack = 8.f;  // Note [Lazy rescaling]

template <int D, int MW>
constexpr bool fa_fwd_q_in_regs() {
  return D * MW <= 128;
}

template <typename T, int D, int NW, int MW>
constexpr int flash_attn_fwd_smem() {
  // Two K and V tiles; Q is staged in the same space first when it goes to registers.
  return 4 * kFaBN * (D + 8) * 2 + (fa_fwd_q_in_regs<D, MW>() ? 0 : 16 * MW * NW * (D + 8) * 2);
}

// One tile's online softmax for a warp's MW row tiles of scores s (raw q . k): the running
// max m (scaled, base 2), the per-thread partial sums l and the output o rescaled; s
// becomes P. Masked: keys at or past Sk and, causal, keys after the query are left out.
// DeferO: o is left alone (a wgmma may still be adding to it) and the factors go to alpha;
// returns whether the warp rescaled.
template <bool Masked, int D, int MW, int BN = kFaBN, bool DeferO = false>
__device__ __forceinline__ bool fa_fwd_softmax(float (&s)[MW][BN / 8][4], float (&m)[MW][2],
                                               float (&l)[MW][2], float (&o)[MW][D / 8][4], float c,
                                               int n0, int w0, int Sk, int causal,
                                               float (*alpha)[2] = nullptr) {
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const float neg_inf = fa_bits_float(0xff800000u);
  float mnew[MW][2];
  bool grow = false;
  FA_UNROLL
  for (int mi = 0; mi < MW; ++mi) {
    float mx[2] = {neg_inf, neg_inf};
    FA_UNROLL
    for (int i = 0; i < BN / 8; ++i) FA_UNROLL
    for (int e = 0; e < 4; ++e) {
      if (Masked) {
        const int col = n0 + 8 * i + 2 * t + (e % 2), row = w0 + 16 * mi + g + 8 * (e / 2);
        if (col >= Sk || (causal && col > row)) s[mi][i][e] = neg_inf;
      }
      mx[e / 2] = fmaxf(mx[e / 2], s[mi][i][e]);
    }
    FA_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float r = fa_quad_reduce<true>(mx[h]);
      mnew[mi][h] = fmaxf(m[mi][h], r == neg_inf ? neg_inf : r * c);
      grow = grow || mnew[mi][h] > m[mi][h] + kFaRescaleSlack;
    }
  }
  // Note [Lazy rescaling]
  // The max subtracted before the exponential need not be the row's true max, only close
  // enough above it that nothing overflows: the warp keeps its rows' old max until one of
  // them grows by more than 2^8 (p stays below 256, the sums in float32), and only then
  // rescales its sums and outputs. After the first tiles that is rare, and the rescaling
  // (a multiply per output value, D / 2 a row) drops out of most tiles. A row whose keys
  // are all masked so far keeps max -inf and subtracts 0 (its p are 0).
  const bool rescale = fa_warp_any(grow);
  FA_UNROLL
  for (int mi = 0; mi < MW; ++mi) {
    float msub[2];
    FA_UNROLL
    for (int h = 0; h < 2; ++h) {
      if (rescale) {
        const float ms = mnew[mi][h] == neg_inf ? 0.f : mnew[mi][h];
        const float a = fa_exp2(m[mi][h] - ms);
        l[mi][h] *= a;
        if constexpr (DeferO) {
          alpha[mi][h] = a;
        } else {
          FA_UNROLL
          for (int i = 0; i < D / 8; ++i) {
            o[mi][i][2 * h] *= a;
            o[mi][i][2 * h + 1] *= a;
          }
        }
        m[mi][h] = mnew[mi][h];
      }
      msub[h] = m[mi][h] == neg_inf ? 0.f : m[mi][h];
    }
    float rs[2] = {0.f, 0.f};
    FA_UNROLL
    for (int i = 0; i < BN / 8; ++i) FA_UNROLL
    for (int e = 0; e < 4; ++e) {
      float p = fa_exp2(fmaf(s[mi][i][e], c, -msub[e / 2]));
      if (Masked && s[mi][i][e] == neg_inf) p = 0.f;  // also when c = 0
      s[mi][i][e] = p;
      rs[e / 2] += p;
    }
    l[mi][0] += rs[0];
    l[mi][1] += rs[1];
  }
  return rescale;
}

template <typename T, int D, int NW, int MW>
__device__ __forceinline__ void flash_attn_fwd_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
    float* __restrict__ lse, int Sq, int Sk, float scale_log2, int causal, unsigned short* smem) {
  constexpr int BM = 16 * MW * NW, LD = D + 8, Threads = 32 * NW;
  constexpr bool kQRegs = fa_fwd_q_in_regs<D, MW>();
  constexpr unsigned kTile = kFaBN * LD * 2;  // bytes of one K or V tile
  static_assert(!kQRegs || BM <= 4 * kFaBN, "Q is staged in the K and V space");
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int qb = int(gridDim.x - 1 - blockIdx.x), q0 = qb * BM, w0 = q0 + 16 * MW * warp;
  const long long bh = blockIdx.y;
  const auto* qg = reinterpret_cast<const unsigned short*>(q) + bh * Sq * D;
  const auto* kg = reinterpret_cast<const unsigned short*>(k) + bh * Sk * D;
  const auto* vg = reinterpret_cast<const unsigned short*>(v) + bh * Sk * D;
  // A negative scale: the max is over the raw scores, so negate Q instead (exactly).
  const unsigned qsign = scale_log2 < 0.f ? 0x80008000u : 0u;
  const float c = scale_log2 < 0.f ? -scale_log2 : scale_log2;

  // This thread's ldmatrix offsets (bytes): Q as A ([m][k], the warp's rows), K as B
  // ([n][k]), V as B stored [k][n] (.trans).
  const unsigned qa_off = fa_ldsm_off<true>(LD) + unsigned(16 * MW * warp * LD * 2);
  const unsigned kb_off = fa_ldsm_off<false>(LD), vb_off = fa_ldsm_off<true>(LD);
  const FaCopyLane cl = fa_copy_lane<D, Threads>();
  const FaSAddr sq = fa_saddr(smem);                               // Q (kept there unless kQRegs)
  const FaSAddr skv = sq + (kQRegs ? 0u : unsigned(BM * LD * 2));  // 2 x (K tile, V tile)

  fa_copy_tile<D, BM, Threads, false>(sq, qg, q0, Sq, cl);
  __syncthreads();
  unsigned qf[kQRegs ? MW : 1][D / 16][4];
  if constexpr (kQRegs) {
    FA_UNROLL
    for (int mi = 0; mi < MW; ++mi) FA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      fa_ldsm_x4<false>(qf[mi][kk], sq + qa_off + unsigned((16 * mi * LD + 16 * kk) * 2));
      FA_UNROLL
      for (int e = 0; e < 4; ++e) qf[mi][kk][e] ^= qsign;
    }
    __syncthreads();  // Q is in registers; its space takes the first tiles
  }
  fa_copy_tile<D, kFaBN, Threads, true>(skv, kg, 0, Sk, cl);
  fa_copy_tile<D, kFaBN, Threads, true>(skv + kTile, vg, 0, Sk, cl);

  float o[MW][D / 8][4];
  const float neg_inf = fa_bits_float(0xff800000u);
  float m[MW][2], l[MW][2];
  FA_UNROLL
  for (int mi = 0; mi < MW; ++mi) {
    FA_UNROLL
    for (int i = 0; i < D / 8; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.f;
    m[mi][0] = m[mi][1] = neg_inf;
    l[mi][0] = l[mi][1] = 0.f;
  }

  const int n_end = causal ? (q0 + BM < Sk ? q0 + BM : Sk) : Sk;
  for (int n0 = 0, buf = 0; n0 < n_end; n0 += kFaBN, buf ^= 1) {
    fa_async_wait();
    __syncthreads();  // this tile has landed; every warp is done with the other buffer
    const FaSAddr ks = skv + unsigned(buf) * 2 * kTile, vs = ks + kTile;
    if (n0 + kFaBN < n_end) {
      const FaSAddr next = skv + unsigned(buf ^ 1) * 2 * kTile;
      fa_copy_tile<D, kFaBN, Threads, true>(next, kg, n0 + kFaBN, Sk, cl);
      fa_copy_tile<D, kFaBN, Threads, true>(next + kTile, vg, n0 + kFaBN, Sk, cl);
    }

    // S = Q K^T: each B fragment of K feeds the warp's MW row tiles.
    float s[MW][kFaBN / 8][4];
    FA_UNROLL
    for (int mi = 0; mi < MW; ++mi) FA_UNROLL
    for (int i = 0; i < kFaBN / 8; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.f;
    FA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned qs[kQRegs ? 1 : MW][4];
      if constexpr (!kQRegs) {
        FA_UNROLL
        for (int mi = 0; mi < MW; ++mi) {
          fa_ldsm_x4<false>(qs[mi], sq + qa_off + unsigned((16 * mi * LD + 16 * kk) * 2));
          FA_UNROLL
          for (int e = 0; e < 4; ++e) qs[mi][e] ^= qsign;
        }
      }
      FA_UNROLL
      for (int nn = 0; nn < kFaBN / 16; ++nn) {
        unsigned b[4];
        fa_ldsm_x4<false>(b, ks + kb_off + unsigned((16 * nn * LD + 16 * kk) * 2));
        FA_UNROLL
        for (int mi = 0; mi < MW; ++mi) {
          const unsigned(&a)[4] = kQRegs ? qf[kQRegs ? mi : 0][kk] : qs[kQRegs ? 0 : mi];
          fa_mma<T>(s[mi][2 * nn], a, b[0], b[1]);
          fa_mma<T>(s[mi][2 * nn + 1], a, b[2], b[3]);
        }
      }
    }

    // The online softmax; the masks only where a key of the tile is past Sk or, causal,
    // after one of the warp's queries (a warp-uniform branch).
    if (n0 + kFaBN > Sk || (causal && n0 + kFaBN - 1 > w0))
      fa_fwd_softmax<true, D, MW>(s, m, l, o, c, n0, w0, Sk, causal);
    else
      fa_fwd_softmax<false, D, MW>(s, m, l, o, c, n0, w0, Sk, causal);

    // O += P V: P's C fragments are A fragments (Note [mma fragments]).
    FA_UNROLL
    for (int j = 0; j < kFaBN / 16; ++j) {
      unsigned pa[MW][4];
      FA_UNROLL
      for (int mi = 0; mi < MW; ++mi) fa_c_to_a<T>(pa[mi], s[mi][2 * j], s[mi][2 * j + 1]);
      FA_UNROLL
      for (int dd = 0; dd < D / 16; ++dd) {
        unsigned b[4];
        fa_ldsm_x4<true>(b, vs + vb_off + unsigned((16 * j * LD + 16 * dd) * 2));
        FA_UNROLL
        for (int mi = 0; mi < MW; ++mi) {
          fa_mma<T>(o[mi][2 * dd], pa[mi], b[0], b[1]);
          fa_mma<T>(o[mi][2 * dd + 1], pa[mi], b[2], b[3]);
        }
      }
    }
  }

  auto* og = reinterpret_cast<unsigned*>(out);
  FA_UNROLL
  for (int mi = 0; mi < MW; ++mi) FA_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int row = w0 + 16 * mi + g + 8 * h;
    const float lt = fa_quad_reduce<false>(l[mi][h]);
    const float inv = lt > 0.f ? 1.f / lt : 0.f;
    if (row < Sq) {
      unsigned* orow = og + ((bh * Sq + row) * D) / 2;
      FA_UNROLL
      for (int i = 0; i < D / 8; ++i)
        orow[4 * i + t] = fa_pack<T>(o[mi][i][2 * h] * inv, o[mi][i][2 * h + 1] * inv);
      if (t == 0) lse[bh * Sq + row] = lt > 0.f ? (m[mi][h] + log2f(lt)) * kFaLn2 : neg_inf;
    }
  }
}

// ----------------------------------------------------------- tensor-core backward

// Note [Backward tiling]
// FlashAttention-2's backward: a block of NW warps owns 16 NW keys of one (b, h) (warp w
// keys 16w..16w+15; NW = 8 by default, or 4: 8 halves the dQ atomics and the Q and dO
// reloads a key) and walks the query blocks of BM rows that see them. Per query block it
// recomputes S^T = K Q^T (keys as the mma's rows, so P^T comes out as the A fragment of
// dV += P^T dO), P^T = exp2(S^T * scale * log2(e) - lse * log2(e)), dP^T = V dO^T,
// dS^T = P^T (dP^T - delta), dK += dS^T Q; dK and dV stay in registers for the whole walk.
// dQ += dS K needs dS with queries as rows: dS^T goes through shared memory and each warp
// adds its share of the BM x D product to a float32 dQ with atomics (sm_90: one 4-float
// vector reduction a lane per 16 x 8 tile). Nothing of size S x S is stored.
// Q, dO, lse and delta of the next query block are copied by cp.async into the other half
// of a double buffer while this one is worked on (Note [Tile copies]); rows past Sq arrive
// as zeros, which give p = 1 but dP = 0 and dS = 0, so they add nothing. Keys past Sk and,
// causal, keys after a query are masked only on the steps that have such keys.
template <typename T, int D, int BM, int NW>
constexpr int flash_attn_bwd_smem() {
  return (2 * 16 * NW * (D + 8) + 4 * BM * (D + 8) + 16 * NW * (BM + 8)) * 2 + 4 * BM * 4;
}

// Copies lse[row0..] and delta[row0..] (BM floats each, zeros past n_rows) into shared
// memory, 4 bytes a cp.async (rows of a head need not be 16-byte aligned).
template <int BM, int Threads>
__device__ __forceinline__ void fa_copy_rows(float* lses, float* dels, const float* lse,
                                             const float* delta, int row0, int n_rows) {
  FA_UNROLL
  for (int j = 0; j < (2 * BM + Threads - 1) / Threads; ++j) {
    const int i = int(threadIdx.x) + j * Threads, r = i % BM;
    if (i >= 2 * BM) break;
    const bool in = row0 + r < n_rows;
    const float* from = (i < BM ? lse : delta) + (in ? row0 + r : 0);
    float* to = (i < BM ? lses : dels) + r;
#if FA_DEVICE
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(fa_saddr(to)), "l"(from),
                 "r"(in ? 4 : 0));
#else
    *to = in ? *from : 0.f;
#endif
  }
#if FA_DEVICE
  asm volatile("cp.async.commit_group;");
#endif
}

// One step's P^T and dS^T from S^T (raw k . q) and dP^T, in place, for a warp's 16 keys
// and BM queries (columns); Masked: keys past Sk and, causal, keys after the query get 0.
template <bool Masked, int BM>
__device__ __forceinline__ void fa_bwd_p_ds(float (&st)[BM / 8][4], float (&dpt)[BM / 8][4],
                                            const float* lses, const float* dels, float c, int m0,
                                            int key0, int Sk, int causal) {
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  FA_UNROLL
  for (int i = 0; i < BM / 8; ++i) {
    const FaF2 l2 = *reinterpret_cast<const FaF2*>(lses + 8 * i + 2 * t);
    const FaF2 d2 = *reinterpret_cast<const FaF2*>(dels + 8 * i + 2 * t);
    FA_UNROLL
    for (int e = 0; e < 4; ++e) {
      const float lq = (e % 2 ? l2.y : l2.x) * kFaLog2e, dq = e % 2 ? d2.y : d2.x;
      float p = fa_exp2(fmaf(st[i][e], c, -lq));
      if (Masked) {
        const int qc = m0 + 8 * i + 2 * t + (e % 2), kr = key0 + g + 8 * (e / 2);
        if (kr >= Sk || (causal && kr > qc)) p = 0.f;
      }
      st[i][e] = p;
      dpt[i][e] = p * (dpt[i][e] - dq);
    }
  }
}

template <typename T, int D, int BM, int NW>
__device__ __forceinline__ void flash_attn_bwd_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq, T* __restrict__ dk, T* __restrict__ dv, int Sq, int Sk, float scale,
    int causal, unsigned short* smem) {
  constexpr int BN = 16 * NW, Threads = 32 * NW, LD = D + 8, LDS = BM + 8;
  constexpr unsigned kQTile = BM * LD * 2;  // bytes of one Q or dO tile
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int n0 = int(blockIdx.x) * BN;
  const long long bh = blockIdx.y;
  const auto* qg = reinterpret_cast<const unsigned short*>(q) + bh * Sq * D;
  const auto* dog = reinterpret_cast<const unsigned short*>(dout) + bh * Sq * D;
  const auto* kg = reinterpret_cast<const unsigned short*>(k) + bh * Sk * D;
  const auto* vg = reinterpret_cast<const unsigned short*>(v) + bh * Sk * D;
  unsigned short* ks = smem;
  unsigned short* vs = ks + BN * LD;
  unsigned short* qd = vs + BN * LD;                       // 2 x (Q tile, dO tile)
  unsigned short* dss = qd + 4 * BM * LD;                  // dS^T: [key][query]
  float* rows = reinterpret_cast<float*>(dss + BN * LDS);  // 2 x (lse, delta)
  const float c = scale * kFaLog2e;
  const float* lse_h = lse + bh * Sq;
  const float* delta_h = delta + bh * Sq;

  // This thread's ldmatrix offsets (bytes): K and V as A ([m][k], the warp's keys), Q and
  // dO as B ([n][k]) and as B stored [k][n] (.trans), dS^T as A stored [k][m] (.trans), K
  // as B stored [k][n] (.trans).
  const FaSAddr sk = fa_saddr(ks), sv = fa_saddr(vs), sqd = fa_saddr(qd), sds = fa_saddr(dss);
  const unsigned a_off = fa_ldsm_off<true>(LD) + unsigned(16 * warp * LD * 2);
  const unsigned b_off = fa_ldsm_off<false>(LD), bt_off = fa_ldsm_off<true>(LD);
  const unsigned at_off = fa_ldsm_off<false>(LDS);
  const FaCopyLane cl = fa_copy_lane<D, Threads>();

  const int m_begin = causal ? n0 / BM * BM : 0;
  fa_copy_tile<D, BN, Threads, true>(sk, kg, n0, Sk, cl);
  fa_copy_tile<D, BN, Threads, true>(sv, vg, n0, Sk, cl);
  if (m_begin < Sq) {
    fa_copy_tile<D, BM, Threads, true>(sqd, qg, m_begin, Sq, cl);
    fa_copy_tile<D, BM, Threads, true>(sqd + kQTile, dog, m_begin, Sq, cl);
    fa_copy_rows<BM, Threads>(rows, rows + BM, lse_h, delta_h, m_begin, Sq);
  }

  float dkacc[D / 8][4], dvacc[D / 8][4];
  FA_UNROLL
  for (int i = 0; i < D / 8; ++i) FA_UNROLL
  for (int e = 0; e < 4; ++e) dkacc[i][e] = dvacc[i][e] = 0.f;
  const int key0 = n0 + 16 * warp;

  for (int m0 = m_begin, buf = 0; m0 < Sq; m0 += BM, buf ^= 1) {
    fa_async_wait();
    __syncthreads();  // this block's Q, dO, lse, delta landed; the last step's dS^T is read
    const FaSAddr qs = sqd + unsigned(buf) * 2 * kQTile, dos = qs + kQTile;
    const float* lses = rows + buf * 2 * BM;
    const float* dels = lses + BM;
    if (m0 + BM < Sq) {
      const FaSAddr nq = sqd + unsigned(buf ^ 1) * 2 * kQTile;
      fa_copy_tile<D, BM, Threads, true>(nq, qg, m0 + BM, Sq, cl);
      fa_copy_tile<D, BM, Threads, true>(nq + kQTile, dog, m0 + BM, Sq, cl);
      float* nr = rows + (buf ^ 1) * 2 * BM;
      fa_copy_rows<BM, Threads>(nr, nr + BM, lse_h, delta_h, m0 + BM, Sq);
    }

    // S^T and dP^T, 16 keys x BM queries a warp.
    float st[BM / 8][4], dpt[BM / 8][4];
    FA_UNROLL
    for (int i = 0; i < BM / 8; ++i) FA_UNROLL
    for (int e = 0; e < 4; ++e) st[i][e] = dpt[i][e] = 0.f;
    FA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned ka[4], va[4];
      fa_ldsm_x4<false>(ka, sk + a_off + unsigned(32 * kk));
      fa_ldsm_x4<false>(va, sv + a_off + unsigned(32 * kk));
      FA_UNROLL
      for (int nn = 0; nn < BM / 16; ++nn) {
        unsigned b[4];
        fa_ldsm_x4<false>(b, qs + b_off + unsigned((16 * nn * LD + 16 * kk) * 2));
        fa_mma<T>(st[2 * nn], ka, b[0], b[1]);
        fa_mma<T>(st[2 * nn + 1], ka, b[2], b[3]);
        fa_ldsm_x4<false>(b, dos + b_off + unsigned((16 * nn * LD + 16 * kk) * 2));
        fa_mma<T>(dpt[2 * nn], va, b[0], b[1]);
        fa_mma<T>(dpt[2 * nn + 1], va, b[2], b[3]);
      }
    }
    // P^T and dS^T in place (a warp-uniform branch for the masks); dS^T to shared memory.
    if (key0 + 16 > Sk || (causal && key0 + 15 > m0))
      fa_bwd_p_ds<true, BM>(st, dpt, lses, dels, c, m0, key0, Sk, causal);
    else
      fa_bwd_p_ds<false, BM>(st, dpt, lses, dels, c, m0, key0, Sk, causal);
    auto* d32 = reinterpret_cast<unsigned*>(dss);
    FA_UNROLL
    for (int i = 0; i < BM / 8; ++i) {
      d32[((16 * warp + g) * LDS + 8 * i + 2 * t) / 2] = fa_pack<T>(dpt[i][0], dpt[i][1]);
      d32[((16 * warp + g + 8) * LDS + 8 * i + 2 * t) / 2] = fa_pack<T>(dpt[i][2], dpt[i][3]);
    }
    // dV += P^T dO and dK += dS^T Q (A from registers, B = dO, Q stored [q][d]: .trans).
    FA_UNROLL
    for (int j = 0; j < BM / 16; ++j) {
      unsigned pa[4], da[4];
      fa_c_to_a<T>(pa, st[2 * j], st[2 * j + 1]);
      fa_c_to_a<T>(da, dpt[2 * j], dpt[2 * j + 1]);
      FA_UNROLL
      for (int dd = 0; dd < D / 16; ++dd) {
        unsigned b[4];
        fa_ldsm_x4<true>(b, dos + bt_off + unsigned((16 * j * LD + 16 * dd) * 2));
        fa_mma<T>(dvacc[2 * dd], pa, b[0], b[1]);
        fa_mma<T>(dvacc[2 * dd + 1], pa, b[2], b[3]);
        fa_ldsm_x4<true>(b, qs + bt_off + unsigned((16 * j * LD + 16 * dd) * 2));
        fa_mma<T>(dkacc[2 * dd], da, b[0], b[1]);
        fa_mma<T>(dkacc[2 * dd + 1], da, b[2], b[3]);
      }
    }
    __syncthreads();  // dS^T complete
    // dQ[m0.., :] += scale * dS K: (BM / 16) x (D / 16) tasks of 16 x 16, shared by the warps.
    constexpr int kTasks = (BM / 16) * (D / 16);
    static_assert(kTasks % NW == 0, "every warp takes as many dQ tasks");
    float* dqb = dq + bh * Sq * D;
    FA_UNROLL
    for (int task = 0; task < kTasks / NW; ++task) {
      const int mt = (warp + NW * task) / (D / 16), dd = (warp + NW * task) % (D / 16);
      float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      FA_UNROLL
      for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned a[4], b[4];
        // dS (queries as rows) is dS^T stored [key][query]: A stored [k][m], .trans.
        fa_ldsm_x4<true>(a, sds + at_off + unsigned((16 * kk * LDS + 16 * mt) * 2));
        fa_ldsm_x4<true>(b, sk + bt_off + unsigned((16 * kk * LD + 16 * dd) * 2));
        fa_mma<T>(acc[0], a, b[0], b[1]);
        fa_mma<T>(acc[1], a, b[2], b[3]);
      }
      fa_red_fragment(dqb, D, m0 + 16 * mt, 16 * dd, Sq, acc[0], scale);
      fa_red_fragment(dqb, D, m0 + 16 * mt, 16 * dd + 8, Sq, acc[1], scale);
    }
  }

  auto* dkg = reinterpret_cast<unsigned*>(dk);
  auto* dvg = reinterpret_cast<unsigned*>(dv);
  FA_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + g + 8 * h;
    if (key < Sk) {
      const long long base = ((bh * Sk + key) * D) / 2;
      FA_UNROLL
      for (int i = 0; i < D / 8; ++i) {
        dkg[base + 4 * i + t] = fa_pack<T>(dkacc[i][2 * h] * scale, dkacc[i][2 * h + 1] * scale);
        dvg[base + 4 * i + t] = fa_pack<T>(dvacc[i][2 * h], dvacc[i][2 * h + 1]);
      }
    }
  }
}

#if FA_DEVICE
extern __shared__ __align__(16) unsigned short fa_smem[];

template <typename T, int D, int NW, int MW>
__global__ void __launch_bounds__(32 * NW)
    flash_attn_fwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, float* __restrict__ lse, int Sq, int Sk, float scale_log2,
                   int causal) {
  flash_attn_fwd_body<T, D, NW, MW>(q, k, v, out, lse, Sq, Sk, scale_log2, causal, fa_smem);
}

// D = 64 with 4 warps: at most 168 registers, so 3 blocks fit an SM (Note [Backward tiling]).
template <typename T, int D, int BM, int NW>
__global__ void __launch_bounds__(32 * NW, D == 64 && NW == 4 ? 3 : 1)
    flash_attn_bwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   const T* __restrict__ dout, const float* __restrict__ lse,
                   const float* __restrict__ delta, float* __restrict__ dq, T* __restrict__ dk,
                   T* __restrict__ dv, int Sq, int Sk, float scale, int causal) {
  flash_attn_bwd_body<T, D, BM, NW>(q, k, v, dout, lse, delta, dq, dk, dv, Sq, Sk, scale, causal,
                                    fa_smem);
}
#endif

// ------------------------------------------------------ Hopper forward (sm_90a, wgmma)

// Note [wgmma layouts]
// wgmma.mma_async.m64nNk16 (16-bit A and B, float accumulators) is issued by a warpgroup of
// 4 warps (128 threads). With w = warp % 4, g = lane / 4, t = lane % 4 (PTX ISA, "Register
// Fragments" and "Shared Memory Matrix Layout" of the asynchronous warpgroup MMA):
//   D (64 x N, N / 2 floats a thread): d[i][e] = D[16w + g + 8 (e / 2)][8i + 2t + e % 2],
//     i < N / 8: warp w holds rows 16w..16w+15 as the C fragments of N / 8 mma.sync tiles.
//   A in registers (64 x 16, 4 registers): warp w's rows 16w..16w+15 as an mma.sync A
//     fragment (Note [mma fragments]), so a D fragment packed to 16 bits is an A fragment.
//   A or B in shared memory: a 64-bit matrix descriptor, bits 0-13 the start address >> 4,
//     16-29 the leading-dimension byte offset (LBO) >> 4, 32-45 the stride-dimension byte
//     offset (SBO) >> 4, 49-51 a base offset (0 when swizzle atoms start at their
//     alignment), 62-63 the swizzle (0 none, 1 128-byte, 2 64-byte, 3 32-byte). K-major
//     (imm-trans 0: A [m][k], B [n][k], K contiguous) or MN-major (imm-trans 1: N
//     contiguous, B stored [k][n]).
// The 128-byte swizzle stores 16-bit elements in atoms of 8 rows of 128 bytes (1024 bytes,
// 1024-aligned): element (r, c) of an atom [8][64] is at byte r * 128 + 2c with the 16-byte
// chunk index (address bits 4-6) xor-ed with the row (bits 7-9). K-major, a row is one M
// or N index, 8-row groups are SBO bytes apart, and the next k16 step starts 32 bytes
// further (the swizzle applies to the address, so the atom must be 1024-aligned). MN-major,
// a row is one K index (64 N values), 8-row groups are SBO apart and 64-column atoms LBO
// apart. Here every tile of R rows x D values (Q, K, V: rows are queries or keys) is stored
// as D / 64 column blocks of R x 128 bytes (fa_sw128_offset): K-major for Q (A) and K (B,
// rows = n), MN-major for V (B = V, k = key, n = d), so one copy serves all three.

constexpr int kFaSm90Rows = 64;  // query rows a warpgroup

template <int D, int BN, int NWG, bool Overlap>
constexpr int flash_attn_fwd_sm90_smem() {
  // 1024 bytes of slack to align the tiles to the swizzle atom, Q, two K tiles, two V tiles
  // (three when Overlap: Note [Overlapped tiles]).
  return 1024 + kFaSm90Rows * NWG * D * 2 + (Overlap ? 5 : 4) * BN * D * 2;
}

// The byte offset of 16-byte chunk c (of D / 8) of row r in a tile of Rows rows stored
// 128-byte swizzled (Note [wgmma layouts]).
template <int Rows>
__device__ __forceinline__ unsigned fa_sw128_offset(int r, int c) {
  return unsigned((c / 8) * Rows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16);
}

// Copies rows row0.. of the [n_rows, D] matrix src into the swizzled tile at dst with
// cp.async (rows past n_rows zero-filled): thread tid copies chunk tid % (D / 8) of rows
// tid / (D / 8) + i * Threads / (D / 8), all at the same swizzle (the step is a multiple of 8).
template <int D, int Rows, int Threads>
__device__ __forceinline__ void fa_copy_tile_sw128(FaSAddr dst, const unsigned short* src, int row0,
                                                   int n_rows) {
  constexpr int kChunks = D / 8, kStep = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && kStep % 8 == 0 && Rows % kStep == 0,
                "every thread copies as many chunks, at one swizzle");
  const int tid = int(threadIdx.x), r0 = tid / kChunks, c = tid % kChunks;
  const unsigned short* from = src + ((long long)row0 + r0) * D + c * 8;
  const FaSAddr to = dst + fa_sw128_offset<Rows>(r0, c);
  const int left = n_rows - row0 - r0;
  FA_UNROLL
  for (int i = 0; i < Rows / kStep; ++i) {
    const bool in = i * kStep < left;
    const unsigned short* f = in ? from + (long long)i * kStep * D : src;
    const FaSAddr d = to + FaSAddr(i * kStep * 128);
#if FA_DEVICE
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(f),
                 "r"(in ? 16 : 0));
#else
    FaVec16 v = {0, 0, 0, 0};
    if (in) v = *reinterpret_cast<const FaVec16*>(f);
    *reinterpret_cast<FaVec16*>(d) = v;
#endif
  }
#if FA_DEVICE
  asm volatile("cp.async.commit_group;");
#endif
}

// Flips the sign of every value of a tile of n_bytes (a negative scale: Note [Forward
// tiling] negates Q instead), 16 bytes a thread a step.
template <int Threads>
__device__ __forceinline__ void fa_negate_tile(FaSAddr tile, int n_bytes) {
  for (int off = int(threadIdx.x) * 16; off < n_bytes; off += Threads * 16) {
#if FA_DEVICE
    asm volatile(
        "{\n.reg .b32 a, b, c, d;\n"
        "ld.shared.v4.b32 {a, b, c, d}, [%0];\n"
        "xor.b32 a, a, 0x80008000;\nxor.b32 b, b, 0x80008000;\n"
        "xor.b32 c, c, 0x80008000;\nxor.b32 d, d, 0x80008000;\n"
        "st.shared.v4.b32 [%0], {a, b, c, d};\n}" ::"r"(tile + unsigned(off))
        : "memory");
#else
    FaVec16& v = *reinterpret_cast<FaVec16*>(tile + FaSAddr(off));
    v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;
#endif
  }
}

// Shared memory written by this thread's generic-proxy stores (cp.async, st.shared) is made
// visible to the async proxy that wgmma reads it through; a barrier must follow.
__device__ __forceinline__ void fa_fence_proxy_async() {
#if FA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// A shared-memory address as the descriptor's window offset: the device's shared window
// address itself; under the emulation, the offset from fa_emu_window (the test's shared
// memory, 1024-aligned like the device's window).
#if FA_DEVICE
__device__ __forceinline__ unsigned fa_window(FaSAddr a) { return a; }
#else
inline unsigned long long fa_emu_window = 0;
inline unsigned fa_window(FaSAddr a) { return unsigned(a - fa_emu_window); }
#endif

// A 128-byte-swizzled matrix descriptor (Note [wgmma layouts]) for the matrix at a. A
// later k step or tile adds its byte offset >> 4 to the descriptor (the address field
// holds the window's 18 bits >> 4, so it never carries into the next field).
__device__ __forceinline__ unsigned long long fa_wgmma_desc(FaSAddr a, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((fa_window(a) & 0x3FFFFu) >> 4) |
         ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

#if !FA_DEVICE
// The stand-in for wgmma.mma_async (fa_wgmma_ss and fa_wgmma_rs below): every thread of
// the block puts its A registers and descriptors in a table, the block synchronizes, each
// thread computes its own D elements from its warpgroup's entries and from the emulated
// shared memory read as the descriptors say (fa_emu_desc_addr), the block synchronizes
// again. Descriptors that differ within a warpgroup, or a base offset, count as errors
// (fa_emu_wgmma_errors, which the test checks).
struct FaWgSlot {
  unsigned a[4];
  unsigned long long da, db;
};
inline FaWgSlot fa_emu_wg[1024];
inline int fa_emu_wgmma_errors = 0;

// The window offset of 16-bit element (mn, k) (mn: the M or N index, k < 16) of the matrix
// a descriptor gives, K-major or MN-major: the PTX ISA's canonical layouts (in elements of
// 16 bytes, T = 8 values): K-major ((8, m), (T, 2k)) : ((W / 16 T, SBO), (1, T)), MN-major
// ((T, W / 16, m), (8, k)) : ((1, T, LBO), (W / 16 T, SBO)) for swizzle width W = 128, 64
// or 32 bytes, then the swizzle xors address bits 4.. with bits 7.. (3, 2 or 1 bits); without
// swizzle K-major ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO)), MN-major ((T, 1, m), (8, k)) :
// ((1, T, SBO), (1T, LBO)).
inline unsigned fa_emu_desc_addr(unsigned long long desc, int mn, int k, bool k_major) {
  const unsigned start = unsigned(desc & 0x3FFFu) << 4;
  const unsigned lbo = unsigned((desc >> 16) & 0x3FFFu) << 4;
  const unsigned sbo = unsigned((desc >> 32) & 0x3FFFu) << 4;
  const unsigned mode = unsigned(desc >> 62), m = unsigned(mn), kk = unsigned(k);
  if (mode == 0)
    return k_major ? start + (m % 8) * 16 + (m / 8) * sbo + (kk % 8) * 2 + (kk / 8) * lbo
                   : start + (m % 8) * 2 + (m / 8) * sbo + (kk % 8) * 16 + (kk / 8) * lbo;
  const unsigned W = mode == 1 ? 128u : mode == 2 ? 64u : 32u, per_row = W / 2;
  const unsigned a =
      k_major ? start + (m % 8) * W + (m / 8) * sbo + kk * 2
              : start + (m % per_row) * 2 + (m / per_row) * lbo + (kk % 8) * W + (kk / 8) * sbo;
  return a ^ (((a >> 7) & (W / 16 - 1)) << 4);
}

template <typename T, int N>
void fa_emu_wgmma(float (&d)[N / 8][4], const unsigned* a_regs, unsigned long long da,
                  unsigned long long db, bool trans_b, int accumulate) {
  const unsigned tid = fa_emu_tid(), wg0 = tid & ~127u, lane = tid & 31u, w = (tid & 127u) / 32;
  FaWgSlot& mine = fa_emu_wg[tid];
  for (int i = 0; i < 4; ++i) mine.a[i] = a_regs ? a_regs[i] : 0u;
  mine.da = da;
  mine.db = db;
  __syncthreads();
  if (tid == wg0) {
    for (unsigned j = wg0; j < wg0 + 128; ++j)
      if (fa_emu_wg[j].db != db || (!a_regs && fa_emu_wg[j].da != da))
        __atomic_fetch_add(&fa_emu_wgmma_errors, 1, __ATOMIC_RELAXED);
    if (((db >> 49) & 7) != 0 || (!a_regs && ((da >> 49) & 7) != 0))
      __atomic_fetch_add(&fa_emu_wgmma_errors, 1, __ATOMIC_RELAXED);
  }
  const auto* window = reinterpret_cast<const unsigned char*>(fa_emu_window);
  auto at = [&](unsigned off) {
    return fa_load(T{*reinterpret_cast<const unsigned short*>(window + off)});
  };
  auto A = [&](unsigned row, unsigned k) {
    if (!a_regs) return at(fa_emu_desc_addr(da, int(row), int(k), true));
    const FaWgSlot& s = fa_emu_wg[wg0 + (row / 16) * 32 + (row % 8) * 4 + (k % 8) / 2];
    return fa_load(T{fa_emu_half(s.a[(row % 16 >= 8) + 2 * (k >= 8)], int(k % 2))});
  };
  const unsigned g = lane / 4, t = lane % 4;
  for (int i = 0; i < N / 8; ++i)
    for (int e = 0; e < 4; ++e) {
      const unsigned row = 16 * w + g + 8 * (e / 2), col = 8 * unsigned(i) + 2 * t + (e % 2);
      float acc = 0;
      for (unsigned k = 0; k < 16; ++k)
        acc += A(row, k) * at(fa_emu_desc_addr(db, int(col), int(k), !trans_b));
      d[i][e] = (accumulate ? d[i][e] : 0.f) + acc;
    }
  __syncthreads();
}
#endif

// wgmma's ordering: fence before the first wgmma that reads registers written since (the
// accumulators, A), commit the issued ones as a group, wait until at most N groups are
// pending. fa_wgmma_regs keeps the compiler from moving accesses of accumulators across
// those points (the asm statements do not name them).
__device__ __forceinline__ void fa_wgmma_fence() {
#if FA_DEVICE && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void fa_wgmma_commit() {
#if FA_DEVICE && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void fa_wgmma_wait() {
#if FA_DEVICE && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}
template <int R>
__device__ __forceinline__ void fa_wgmma_regs(float (&d)[R][4]) {
#if FA_DEVICE
  FA_UNROLL
  for (int i = 0; i < R; ++i) FA_UNROLL
  for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
#else
  (void)d;  // the emulation runs wgmma at issue: nothing to order
#endif
}

// The accumulators of m64n64 (32 registers) and m64n128 (64) as asm operands.
#define FA_WG_R32                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA_WG_R64                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define FA_WG_X4(i) "+f"(x[i][0]), "+f"(x[i][1]), "+f"(x[i][2]), "+f"(x[i][3])
#define FA_WG_X16(i) FA_WG_X4(i), FA_WG_X4(i + 1), FA_WG_X4(i + 2), FA_WG_X4(i + 3)
#define FA_WG_X32 FA_WG_X16(0), FA_WG_X16(4)
#define FA_WG_X64 FA_WG_X16(0), FA_WG_X16(4), FA_WG_X16(8), FA_WG_X16(12)
// d (64 x N) = A B, or += when acc: A and B from shared memory, both K-major.
#define FA_WGMMA_SS(N, TY, R, X, IA, IB, IS)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS                                    \
               ", 0;\n"                                                                    \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " R ", %" #IA \
               ", %" #IB ", p, 1, 1, 0, 0;\n}"                                             \
               : X                                                                         \
               : "l"(da), "l"(db), "r"(acc))
// d (64 x N) = A B, or += when acc: A from registers (AR, their operand numbers), B from
// shared memory, MN-major.
#define FA_WGMMA_RS(N, TY, R, X, AR, IB, IS)                                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS                                            \
               ", 0;\n"                                                                            \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " R ", " AR ", %" #IB \
               ", p, 1, 1, 1;\n}"                                                                  \
               : X                                                                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc))

// d = A B (+ d when acc) with A = Q and B = K from shared memory (descriptors da, db).
template <typename T, int N>
__device__ __forceinline__ void fa_wgmma_ss(float (&x)[N / 8][4], unsigned long long da,
                                            unsigned long long db, int acc) {
#if !FA_DEVICE
  fa_emu_wgmma<T, N>(x, nullptr, da, db, false, acc);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(N == 64 || N == 128, "the kernels use m64n64k16 and m64n128k16");
  if constexpr (N == 64 && FaIsHalf<T>::value)
    FA_WGMMA_SS(64, "f16", FA_WG_R32, FA_WG_X32, 32, 33, 34);
  else if constexpr (N == 64)
    FA_WGMMA_SS(64, "bf16", FA_WG_R32, FA_WG_X32, 32, 33, 34);
  else if constexpr (FaIsHalf<T>::value)
    FA_WGMMA_SS(128, "f16", FA_WG_R64, FA_WG_X64, 64, 65, 66);
  else
    FA_WGMMA_SS(128, "bf16", FA_WG_R64, FA_WG_X64, 64, 65, 66);
#else
  __trap();  // only the sm_90a target has wgmma; flash_attn_fwd_sm90 refuses others
#endif
}

// d = A B (+ d when acc) with A = P from registers and B = V from shared memory (N-major).
template <typename T, int N>
__device__ __forceinline__ void fa_wgmma_rs(float (&x)[N / 8][4], const unsigned (&a)[4],
                                            unsigned long long db, int acc) {
#if !FA_DEVICE
  fa_emu_wgmma<T, N>(x, a, 0, db, true, acc);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(N == 64 || N == 128, "the kernels use m64n64k16 and m64n128k16");
  if constexpr (N == 64 && FaIsHalf<T>::value)
    FA_WGMMA_RS(64, "f16", FA_WG_R32, FA_WG_X32, "{%32, %33, %34, %35}", 36, 37);
  else if constexpr (N == 64)
    FA_WGMMA_RS(64, "bf16", FA_WG_R32, FA_WG_X32, "{%32, %33, %34, %35}", 36, 37);
  else if constexpr (FaIsHalf<T>::value)
    FA_WGMMA_RS(128, "f16", FA_WG_R64, FA_WG_X64, "{%64, %65, %66, %67}", 68, 69);
  else
    FA_WGMMA_RS(128, "bf16", FA_WG_R64, FA_WG_X64, "{%64, %65, %66, %67}", 68, 69);
#else
  __trap();
#endif
}

// Note [Hopper forward]
// flash_attn_fwd_sm90<T, D, BN, NWG>: Note [Forward tiling] on Hopper's warpgroup MMA. A
// block of NWG warpgroups takes 64 NWG query rows of one (b, h) (warpgroup w rows 64w..,
// its warp w' rows 16w'.. of the block) and streams BN-key tiles of K and V through shared
// memory, double-buffered by cp.async into the 128-byte swizzled layout (Note [wgmma
// layouts]; each thread copies its own 16-byte chunks, fences them for the async proxy, and
// one barrier a tile publishes them). Per tile each warpgroup computes S = Q K^T with D / 16
// wgmma.m64nBNk16 (A = Q, B = K, both K-major from shared memory), waits, runs the online
// softmax of the mma.sync kernels on the accumulators (fa_fwd_softmax: a warp's rows are
// laid out as there, Note [Lazy rescaling]), packs P to 16 bits as A fragments, and adds
// P V with BN / 16 wgmma.m64nDk16 (A = P from registers, B = V read MN-major). Causal
// blocks stop at their diagonal; blocks run last query block first. Not yet: TMA copies
// with an mbarrier pipeline, a producer warpgroup (setmaxnreg), the softmax of one tile
// overlapped with the GEMMs of the next.
template <typename T, int D, int BN, int NWG, bool Overlap>
__device__ __forceinline__ void flash_attn_fwd_sm90_body(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
    float* __restrict__ lse, int Sq, int Sk, float scale_log2, int causal, unsigned short* smem) {
  constexpr int BM = kFaSm90Rows * NWG, Threads = 128 * NWG;
  constexpr unsigned kQBytes = BM * D * 2, kTile = BN * D * 2;  // multiples of 1024
  static_assert(D % 64 == 0 && (BN == 64 || BN == 128), "tiles of whole swizzle atoms");
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int wg = warp / 4;
  const int qb = int(gridDim.x - 1 - blockIdx.x), q0 = qb * BM, w0 = q0 + 16 * warp;
  const long long bh = blockIdx.y;
  const auto* qg = reinterpret_cast<const unsigned short*>(q) + bh * Sq * D;
  const auto* kg = reinterpret_cast<const unsigned short*>(k) + bh * Sk * D;
  const auto* vg = reinterpret_cast<const unsigned short*>(v) + bh * Sk * D;
  const float c = scale_log2 < 0.f ? -scale_log2 : scale_log2;

  // Shared memory: Q, two K tiles, then two V tiles (three when Overlap).
  const FaSAddr sq = (fa_saddr(smem) + 1023) & ~FaSAddr(1023);
  const FaSAddr sk = sq + kQBytes, sv = sk + 2 * kTile;
  fa_copy_tile_sw128<D, BM, Threads>(sq, qg, q0, Sq);
  fa_copy_tile_sw128<D, BN, Threads>(sk, kg, 0, Sk);
  fa_copy_tile_sw128<D, BN, Threads>(sv, vg, 0, Sk);
  if (scale_log2 < 0.f) {  // the max is over the raw scores: negate Q (exactly)
    fa_async_wait();
    __syncthreads();
    fa_negate_tile<Threads>(sq, int(kQBytes));
  }
  // Descriptors: Q rows 64 wg.. (K-major); K K-major and V MN-major, whose 64-column atoms
  // are BN * 128 bytes apart. A later tile or k step adds its byte offset >> 4.
  const unsigned long long dq = fa_wgmma_desc(sq + unsigned(wg * kFaSm90Rows * 128), 16, 1024);
  const unsigned long long dk = fa_wgmma_desc(sk, 16, 1024);
  const unsigned long long dv = fa_wgmma_desc(sv, BN * 128, 1024);

  float o[1][D / 8][4];
  const float neg_inf = fa_bits_float(0xff800000u);
  float m[1][2] = {{neg_inf, neg_inf}}, l[1][2] = {{0.f, 0.f}};
  FA_UNROLL
  for (int i = 0; i < D / 8; ++i) o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.f;

  // S = Q K^T for the tile in K buffer kb: columns 16 kk.. of Q and K are in 64-column
  // block kk / 4 (BM or BN rows of 128 bytes), 32 bytes a k16 step within it.
  auto qk = [&](float(&s)[1][BN / 8][4], int kb) {
    FA_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned step = unsigned(kk % 4) * 2;
      fa_wgmma_ss<T, BN>(s[0], dq + unsigned(kk / 4) * (BM * 8) + step,
                         dk + unsigned(kb) * (kTile / 16) + unsigned(kk / 4) * (BN * 8) + step,
                         kk > 0);
    }
  };
  // O += P V for the tile in V buffer vb: keys 16 j.. are two 8-row groups, 2048 bytes.
  auto pv = [&](const unsigned(&pa)[BN / 16][4], int vb) {
    FA_UNROLL
    for (int j = 0; j < BN / 16; ++j)
      fa_wgmma_rs<T, D>(o[0], pa[j], dv + unsigned(vb) * (kTile / 16) + unsigned(j) * 128, 1);
  };
  // One tile's online softmax; the masks only where a key is past Sk or, causal, after one
  // of the warp's queries (a warp-uniform branch). With alpha, O is left to the caller.
  auto softmax = [&](float(&s)[1][BN / 8][4], int n0, float(*alpha)[2]) {
    const bool masked = n0 + BN > Sk || (causal && n0 + BN - 1 > w0);
    if constexpr (Overlap)
      return masked
                 ? fa_fwd_softmax<true, D, 1, BN, true>(s, m, l, o, c, n0, w0, Sk, causal, alpha)
                 : fa_fwd_softmax<false, D, 1, BN, true>(s, m, l, o, c, n0, w0, Sk, causal, alpha);
    else
      return masked ? fa_fwd_softmax<true, D, 1, BN>(s, m, l, o, c, n0, w0, Sk, causal)
                    : fa_fwd_softmax<false, D, 1, BN>(s, m, l, o, c, n0, w0, Sk, causal);
  };

  const int n_end = causal ? (q0 + BM < Sk ? q0 + BM : Sk) : Sk;
  if constexpr (!Overlap) {
    for (int n0 = 0, buf = 0; n0 < n_end; n0 += BN, buf ^= 1) {
      fa_async_wait();
      fa_fence_proxy_async();
      __syncthreads();  // this tile (and Q) landed; every warpgroup is done with the other
      if (n0 + BN < n_end) {
        fa_copy_tile_sw128<D, BN, Threads>(sk + unsigned(buf ^ 1) * kTile, kg, n0 + BN, Sk);
        fa_copy_tile_sw128<D, BN, Threads>(sv + unsigned(buf ^ 1) * kTile, vg, n0 + BN, Sk);
      }
      float s[1][BN / 8][4];
      fa_wgmma_fence();
      qk(s, buf);
      fa_wgmma_commit();
      fa_wgmma_wait<0>();
      fa_wgmma_regs(s[0]);
      softmax(s, n0, nullptr);
      unsigned pa[BN / 16][4];  // P's accumulators are A fragments
      FA_UNROLL
      for (int j = 0; j < BN / 16; ++j) fa_c_to_a<T>(pa[j], s[0][2 * j], s[0][2 * j + 1]);
      fa_wgmma_regs(o[0]);
      fa_wgmma_fence();
      pv(pa, buf);
      fa_wgmma_commit();
      fa_wgmma_wait<0>();
      fa_wgmma_regs(o[0]);
    }
  } else {
    // Note [Overlapped tiles]
    // S of tile j is issued together with P V of tile j - 1, and the softmax of tile j runs
    // while that P V is still on the tensor cores: the wait for S is wait_group 1; O is
    // rescaled (when the lazy rescaling asks) only after wait_group 0, and P of tile j
    // replaces P of tile j - 1 in registers only then. Tile j's V is read one tile after
    // its K, so V has three buffers (j + 1 is copied while j - 1 is read) and K two.
    unsigned pa[BN / 16][4];
    int kb = 0, vb = 0;  // tile j's K and V buffers
    for (int n0 = 0; n0 < n_end; n0 += BN) {
      const int vnext = vb == 2 ? 0 : vb + 1, vprev = vb == 0 ? 2 : vb - 1;
      fa_async_wait();
      fa_fence_proxy_async();
      __syncthreads();  // tile j landed; every warpgroup is done with K j - 1 and V j - 2
      if (n0 + BN < n_end) {
        fa_copy_tile_sw128<D, BN, Threads>(sk + unsigned(kb ^ 1) * kTile, kg, n0 + BN, Sk);
        fa_copy_tile_sw128<D, BN, Threads>(sv + unsigned(vnext) * kTile, vg, n0 + BN, Sk);
      }
      float s[1][BN / 8][4];
      fa_wgmma_regs(o[0]);
      fa_wgmma_fence();
      qk(s, kb);
      fa_wgmma_commit();
      if (n0 > 0) pv(pa, vprev);  // tile j - 1's P V
      fa_wgmma_commit();
      fa_wgmma_wait<1>();
      fa_wgmma_regs(s[0]);
      float alpha[1][2];
      const bool rescale = softmax(s, n0, alpha);
      fa_wgmma_wait<0>();
      fa_wgmma_regs(o[0]);
      if (rescale) {
        FA_UNROLL
        for (int i = 0; i < D / 8; ++i) {
          o[0][i][0] *= alpha[0][0];
          o[0][i][1] *= alpha[0][0];
          o[0][i][2] *= alpha[0][1];
          o[0][i][3] *= alpha[0][1];
        }
      }
      FA_UNROLL
      for (int j = 0; j < BN / 16; ++j) fa_c_to_a<T>(pa[j], s[0][2 * j], s[0][2 * j + 1]);
      kb ^= 1;
      vb = vnext;
    }
    fa_wgmma_regs(o[0]);
    fa_wgmma_fence();
    pv(pa, vb == 0 ? 2 : vb - 1);  // the last tile's P V
    fa_wgmma_commit();
    fa_wgmma_wait<0>();
    fa_wgmma_regs(o[0]);
  }

  auto* og = reinterpret_cast<unsigned*>(out);
  FA_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int row = w0 + g + 8 * h;
    const float lt = fa_quad_reduce<false>(l[0][h]);
    const float inv = lt > 0.f ? 1.f / lt : 0.f;
    if (row < Sq) {
      unsigned* orow = og + ((bh * Sq + row) * D) / 2;
      FA_UNROLL
      for (int i = 0; i < D / 8; ++i)
        orow[4 * i + t] = fa_pack<T>(o[0][i][2 * h] * inv, o[0][i][2 * h + 1] * inv);
      if (t == 0) lse[bh * Sq + row] = lt > 0.f ? (m[0][h] + log2f(lt)) * kFaLn2 : neg_inf;
    }
  }
}

#if FA_DEVICE
template <typename T, int D, int BN, int NWG, bool Overlap>
__global__ void __launch_bounds__(128 * NWG, 1)
    flash_attn_fwd_sm90(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        T* __restrict__ out, float* __restrict__ lse, int Sq, int Sk,
                        float scale_log2, int causal) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(
      sizeof(T) == 0,
      "flash_attn_fwd_sm90 uses wgmma: compile it for sm_90a (KernelSpec::arch_specific)");
#else
  flash_attn_fwd_sm90_body<T, D, BN, NWG, Overlap>(q, k, v, out, lse, Sq, Sk, scale_log2, causal,
                                                   fa_smem);
#endif
}
#endif

// ------------------------------------------------------------------ generic kernels

// delta[r] = sum_d dout[r, d] * out[r, d] - grad_lse[r]: a warp a row.
template <typename T, typename A = typename FaAcc<T>::type>
__global__ void flash_attn_bwd_prep(const T* __restrict__ out, const T* __restrict__ dout,
                                    const A* __restrict__ grad_lse, A* __restrict__ delta,
                                    long long rows, int D) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  A s = 0;
  for (int d = 0; d < D; ++d) s += A(fa_load(out[r * D + d])) * A(fa_load(dout[r * D + d]));
  delta[r] = s - grad_lse[r];
}

// A thread a query row: online softmax over every key, the output row in registers.
template <typename T, typename A = typename FaAcc<T>::type>
__global__ void flash_attn_fwd_generic(const T* __restrict__ q, const T* __restrict__ k,
                                       const T* __restrict__ v, T* __restrict__ out,
                                       A* __restrict__ lse, long long rows, int Sq, int Sk, int D,
                                       double scale, bool causal) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const long long bh = r / Sq;
  const int i = int(r % Sq);
  const T* qr = q + r * D;
  const T* kb = k + bh * Sk * D;
  const T* vb = v + bh * Sk * D;
  A acc[kFaMaxGenericD];
  for (int d = 0; d < D; ++d) acc[d] = 0;
  A m = A(fa_bits_float(0xff800000u)), l = 0;
  const int n = causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
  for (int j = 0; j < n; ++j) {
    A s = 0;
    for (int d = 0; d < D; ++d) s += A(fa_load(qr[d])) * A(fa_load(kb[(long long)j * D + d]));
    s *= A(scale);
    const A mn = s > m ? s : m;
    const A alpha = fa_exp(m - mn), p = fa_exp(s - mn);
    l = l * alpha + p;
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * alpha + p * A(fa_load(vb[(long long)j * D + d]));
    m = mn;
  }
  for (int d = 0; d < D; ++d) out[r * D + d] = fa_store<T>(l > 0 ? acc[d] / l : A(0));
  lse[r] = l > 0 ? m + fa_log(l) : A(fa_bits_float(0xff800000u));
}

// s = q . k and dp = o . v over D values (the generic backward's score and dP).
template <typename T, typename A>
__device__ __forceinline__ void fa_dot2(const T* q, const T* k, const T* o, const T* v, int D, A& s,
                                        A& dp) {
  s = 0;
  dp = 0;
  for (int d = 0; d < D; ++d) {
    s += A(fa_load(q[d])) * A(fa_load(k[d]));
    dp += A(fa_load(o[d])) * A(fa_load(v[d]));
  }
}

// dQ: a thread a query row.
template <typename T, typename A = typename FaAcc<T>::type>
__global__ void flash_attn_bwd_dq_generic(const T* __restrict__ q, const T* __restrict__ k,
                                          const T* __restrict__ v, const T* __restrict__ dout,
                                          const A* __restrict__ lse, const A* __restrict__ delta,
                                          T* __restrict__ dq, long long rows, int Sq, int Sk, int D,
                                          double scale, bool causal) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const long long bh = r / Sq;
  const int i = int(r % Sq);
  const T* kb = k + bh * Sk * D;
  const T* vb = v + bh * Sk * D;
  A acc[kFaMaxGenericD];
  for (int d = 0; d < D; ++d) acc[d] = 0;
  const int n = causal ? (i + 1 < Sk ? i + 1 : Sk) : Sk;
  for (int j = 0; j < n; ++j) {
    A s, dp;
    fa_dot2(q + r * D, kb + (long long)j * D, dout + r * D, vb + (long long)j * D, D, s, dp);
    const A ds = fa_exp(s * A(scale) - lse[r]) * (dp - delta[r]);
    for (int d = 0; d < D; ++d) acc[d] += ds * A(fa_load(kb[(long long)j * D + d]));
  }
  for (int d = 0; d < D; ++d) dq[r * D + d] = fa_store<T>(acc[d] * A(scale));
}

// dK and dV: a thread a key row.
template <typename T, typename A = typename FaAcc<T>::type>
__global__ void flash_attn_bwd_dkdv_generic(const T* __restrict__ q, const T* __restrict__ k,
                                            const T* __restrict__ v, const T* __restrict__ dout,
                                            const A* __restrict__ lse, const A* __restrict__ delta,
                                            T* __restrict__ dk, T* __restrict__ dv, long long rows,
                                            int Sq, int Sk, int D, double scale, bool causal) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const long long bh = r / Sk;
  const int j = int(r % Sk);
  const T* qb = q + bh * Sq * D;
  const T* ob = dout + bh * Sq * D;
  A gk[kFaMaxGenericD], gv[kFaMaxGenericD];
  for (int d = 0; d < D; ++d) gk[d] = gv[d] = 0;
  for (int i = causal ? j : 0; i < Sq; ++i) {
    A s, dp;
    fa_dot2(qb + (long long)i * D, k + r * D, ob + (long long)i * D, v + r * D, D, s, dp);
    const long long ri = bh * Sq + i;
    const A p = fa_exp(s * A(scale) - lse[ri]), ds = p * (dp - delta[ri]);
    for (int d = 0; d < D; ++d) {
      gv[d] += p * A(fa_load(ob[(long long)i * D + d]));
      gk[d] += ds * A(fa_load(qb[(long long)i * D + d]));
    }
  }
  for (int d = 0; d < D; ++d) {
    dk[r * D + d] = fa_store<T>(gk[d] * A(scale));
    dv[r * D + d] = fa_store<T>(gv[d]);
  }
}
