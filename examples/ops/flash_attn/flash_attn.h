// SPDX-License-Identifier: MIT
// mha::flash_attn: fused scaled-dot-product attention as a user's custom op
//   flash_attn(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None)
//       -> (Tensor out, Tensor lse)
// q [B, H, Sq, D], k and v [B, H, Sk, D]: out = softmax(scale * q k^T) v ([B, H, Sq, D]),
// lse = logsumexp over keys of scale * q k^T ([B, H, Sq], float32, float64 for float64
// inputs), scale 1 / sqrt(D) by default; causal: query i sees keys 0..i (top-left, as
// torch's is_causal). float16 and bfloat16 (float32 accumulation), float32, float64; other
// layouts are made contiguous. On CUDA, float16/bfloat16 with D = 64 or 128 take the
// tensor-core kernels (FlashAttention-2's scheme, nothing of size S x S stored); other
// dtypes and D <= 128 a generic kernel. Gradients for q, k, v (from out's and lse's).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "minitensor.h"

namespace mha {

std::tuple<mt::Tensor, mt::Tensor> flash_attn(const mt::Tensor& q, const mt::Tensor& k,
                                              const mt::Tensor& v, bool causal = false,
                                              std::optional<double> scale = std::nullopt);
const mt::OperatorHandle& flash_attn_handle();

// The CUDA forward and backward with the kernel family forced (tests, bench): generic
// false takes the tensor-core kernels (float16/bfloat16, D 64 or 128 only).
std::tuple<mt::Tensor, mt::Tensor> flash_attn_cuda(const mt::Tensor& q, const mt::Tensor& k,
                                                   const mt::Tensor& v, bool causal,
                                                   std::optional<double> scale, bool generic);
// dq, dk, dv from the gradients of out and lse (either may be undefined), on the inputs'
// device; on CUDA, generic as above.
std::tuple<mt::Tensor, mt::Tensor, mt::Tensor> flash_attn_backward(
    const mt::Tensor& grad_out, const mt::Tensor& grad_lse, const mt::Tensor& q,
    const mt::Tensor& k, const mt::Tensor& v, const mt::Tensor& out, const mt::Tensor& lse,
    bool causal, std::optional<double> scale, bool generic = false);

// Every CUDA kernel the op launches, for the tests (CUBIN compiles).
std::vector<mt::jit::UserKernel> flash_attn_kernels();
// Checks the arguments of every launch the op makes for tensors of these shapes and dtype
// (forward and backward, tensor-core kernels when generic is false) against the kernels
// compiled for `arch`, without a GPU.
void flash_attn_check_launch(int arch, const mt::Tensor& q, const mt::Tensor& k,
                             const mt::Tensor& v, bool causal, bool generic);
// The block sizes of the tensor-core kernels for one choice of the two tuned parameters
// (Note [Tuned tiles] in flash_attn.cpp): 16-row tiles a forward warp (2 or 1) and warps a
// backward block (8 or 4, 16 keys each). Gives query rows a forward block, threads a
// forward block, query rows a backward step, warps a backward block, and the dynamic shared
// memory of each.
struct FlashAttnTiles {
  int fwd_rows, fwd_threads, fwd_smem, bwd_rows, bwd_warps, bwd_smem;
};
FlashAttnTiles flash_attn_tiles(int head_dim, int fwd_row_tiles = 2, int bwd_warps = 8);
// The autotuner's key for the forward or backward of these inputs on CUDA (the tuner adds
// the device): "mha::flash_attn fwd float16 D64 causal Sq4096 Sk4096 BH64". Ask
// mt::jit::autotuner().choice(key, device) which candidate it took.
std::string flash_attn_tune_key(const mt::Tensor& q, const mt::Tensor& k, bool causal,
                                bool backward);
// The candidates' names, the default first: {"fwd_row_tiles=2", "fwd_row_tiles=1"} and
// {"bwd_warps=8", "bwd_warps=4"}. MHA_FLASH_ATTN_FWD_ROW_TILES=1|2 and
// MHA_FLASH_ATTN_BWD_WARPS=4|8 force one (MT_AUTOTUNE_FORCE=<name> too; MT_AUTOTUNE=0 takes
// the default).
std::vector<std::string> flash_attn_candidates(bool backward);
// The Hopper forward (Note [Hopper forward] in flash_attn.cu: wgmma, its CUBIN sm_90a):
// query rows a block, threads a block (128 a warpgroup), keys a tile, dynamic shared
// memory; overlap: the softmax of a tile beside the previous tile's P V (Note [Overlapped
// tiles]). Opt-in: MHA_FLASH_ATTN_FWD_KERNEL=sm90 (overlapped) or sm90-serial runs it on a
// compute capability 9.0 GPU (an error elsewhere), =mma or unset the mma.sync forward
// (Note [Forward kernel choice] in flash_attn.cpp).
struct FlashAttnSm90Tiles {
  int rows, threads, keys, smem;
};
FlashAttnSm90Tiles flash_attn_sm90_tiles(int head_dim, bool overlap = true);
// Its kernels (float16, bfloat16 x D 64, 128 x overlapped, serial), for the tests (CUBIN
// compiles for sm_90a).
std::vector<mt::jit::UserKernel> flash_attn_sm90_kernels();
// Registers a thread of the tensor-core forward and backward kernels for dtype t (float16
// or bfloat16) and head_dim (64 or 128) as compiled for cuda:0 (compiles them if needed);
// fwd_sm90: the (overlapped) wgmma forward's on a compute capability 9.0 device, else -1.
struct FlashAttnRegisters {
  int fwd, bwd, fwd_sm90;
};
FlashAttnRegisters flash_attn_registers(mt::DType t, int head_dim);

}  // namespace mha
