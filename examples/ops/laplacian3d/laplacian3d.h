// SPDX-License-Identifier: MIT
// pde::laplacian3d: the 7-point finite-difference Laplacian as a user's custom op
//   laplacian3d(Tensor u, float h=1.0, str boundary="zero") -> Tensor
// on [N, X, Y, Z] or [X, Y, Z] grids of float32 or float64, boundary "zero" (Dirichlet:
// u is 0 outside) or "periodic". A CPU kernel of plain loops, a CUDA kernel of the user's
// own (laplacian3d.cu, 2.5-D blocking), a fake kernel and an autograd formula that calls
// the op itself (the stencil is self-adjoint for both boundaries).
#pragma once

#include <string>

#include "minitensor.h"

namespace pde {

// Calls the op (registering it on first use).
mt::Tensor laplacian3d(const mt::Tensor& u, double h = 1.0, const std::string& boundary = "zero");
// The registered op, for opcheck and the dispatcher's dump.
const mt::OperatorHandle& laplacian3d_handle();

// The CUDA side, for tests and the bench. Stream (Note [Streaming along x] in
// laplacian3d.cu) is the op's; Tiled (Note [2.5-D blocking]) and Naive are kept for the
// tests and the bench's comparison.
enum class Laplacian3dKernel { Stream, Tiled, Naive };
// The kernel for a dtype (float32/float64), boundary and, for Stream, vector width (16 bytes
// a thread, or 1 point when Z or u's offset does not allow it).
const mt::jit::UserKernel& laplacian3d_kernel(mt::DType dtype, bool periodic,
                                              Laplacian3dKernel which = Laplacian3dKernel::Stream,
                                              bool vector = true);
// Runs `which` on a contiguous CUDA tensor into a new tensor (what the op's CUDA kernel
// does). x_chunk > 0 overrides the planes a Stream or Tiled block walks (the bench's
// comparison); 0 takes laplacian3d_x_chunk's.
mt::Tensor laplacian3d_cuda(const mt::Tensor& u, double h, bool periodic,
                            Laplacian3dKernel which = Laplacian3dKernel::Stream, int x_chunk = 0);
// Checks the arguments the op would launch `which` with for a u of this shape and dtype
// against the kernel compiled for `arch`, without a GPU (throws what launch would).
void laplacian3d_check_launch(int arch, const mt::Tensor& u, double h, bool periodic,
                              Laplacian3dKernel which);
// The x chunk for a grid of n_batch x X x Y x Z on sm_count SMs, for blocks that cover
// tile_z x tile_y points of a plane: enough chunks for blocks_per_sm blocks a SM, none
// thinner than min_planes (the defaults are the tiled kernel's; the stream kernel asks
// for 128 x 8 points in float32, 32 blocks a SM, 4 planes).
int laplacian3d_x_chunk(int64_t n_batch, int64_t X, int64_t Y, int64_t Z, int sm_count,
                        int64_t tile_z = 32, int64_t tile_y = 8, int blocks_per_sm = 8,
                        int min_planes = 8);
// The Stream kernel's vector width for u (contiguous): 16 bytes of points when Z and u's
// storage offset are multiples of it, else 1.
int laplacian3d_vec(const mt::Tensor& u);

}  // namespace pde
