// SPDX-License-Identifier: MIT
// float32 loops of the exp-bound CPU ops (exp, sigmoid, SiLU and its fused backward, GELU) with an
// AVX-512 exp of their own (Note [AVX-512 exp] in vec_exp.cpp), used where the CPU has
// AVX-512 (F, DQ), and AVX2 loops for exp and sigmoid (Note [AVX2 exp and sigmoid]) where it
// has AVX2 and FMA only; elsewhere the portable loops of kernels/cpu/math.h run (ISA clones).
// Each loop runs over n contiguous elements; o may be x (or g).
#pragma once

#include <cstdint>

namespace mt::cpu {

// Which loops run: AVX-512 (F, DQ), AVX2 with FMA (exp, sigmoid and their folded forms:
// Note [AVX2 exp and sigmoid] in vec_exp.cpp; silu, gelu and silu_backward run the portable
// loops there) or the portable ISA-clone loops.
enum class VecIsa : int { Portable = 0, Avx2 = 1, Avx512 = 2 };
// The widest the CPU has (Portable where this build has no x86 loops).
VecIsa vec_exp_widest();
// The loops that run: the widest the CPU has, at most the cap below (by default Avx512, or
// MT_VEC_EXP=avx2 or portable in the environment when the library loads).
VecIsa vec_exp_isa();
// Caps the loops at cap (Portable: the ISA-clone loops only); returns the previous cap. For
// A/B benchmarks and the tests, which compare every level the CPU has.
VecIsa set_vec_exp_isa(VecIsa cap);

// Whether the AVX-512 loops run: the CPU has them and the cap allows them (the default).
bool vec_exp_active();
// Caps the loops at Avx512 (true) or Portable (false); returns whether the previous cap
// was above Portable.
bool set_vec_exp_enabled(bool enabled);

// The loops behind cpu::unary's float32 exp, sigmoid and silu and cpu::silu_backward:
// those of vec_exp_isa().
void exp_f32_loop(float* o, const float* x, int64_t n);
// e^-x, bitwise what exp_f32_loop gives for -x (the tile evaluator's exp(-x) in one pass).
void exp_neg_f32_loop(float* o, const float* x, int64_t n);
// x / (c + e^-x), bitwise what exp_neg_f32_loop, then c + e, then x / that give one loop
// at a time (the tile evaluator's SiLU-shaped expressions in one pass).
void div_c_plus_exp_neg_f32_loop(float* o, const float* x, float c, int64_t n);
void sigmoid_f32_loop(float* o, const float* x, int64_t n);
// sigmoid(x c) and e^(x c), bitwise what a loop of x * c and then sigmoid_f32_loop or
// exp_f32_loop give (the tile evaluator's scaled sigmoid and exp in one pass).
void sigmoid_mul_c_f32_loop(float* o, const float* x, float c, int64_t n);
void exp_mul_c_f32_loop(float* o, const float* x, float c, int64_t n);
void silu_f32_loop(float* o, const float* x, int64_t n);
void gelu_f32_loop(float* o, const float* x, int64_t n);
void silu_backward_f32_loop(float* o, const float* g, const float* x, int64_t n);

}  // namespace mt::cpu
