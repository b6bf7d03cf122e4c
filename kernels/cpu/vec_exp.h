// SPDX-License-Identifier: MIT
// float32 loops of the exp-bound CPU ops (exp, sigmoid, SiLU and its fused backward, GELU) with an
// AVX-512 exp of their own (Note [AVX-512 exp] in vec_exp.cpp), used where the CPU has
// AVX-512 (F, DQ); elsewhere the portable loops of kernels/cpu/math.h run (ISA clones).
// Each loop runs over n contiguous elements; o may be x (or g).
#pragma once

#include <cstdint>

namespace mt::cpu {

// Whether the AVX-512 loops run: the CPU has them and they are enabled (the default).
bool vec_exp_active();
// Turns the AVX-512 loops off (false) or back on where the CPU has them; returns the
// previous setting. For A/B benchmarks (tools/bench_cpu) and the tests, which compare both.
bool set_vec_exp_enabled(bool enabled);

// The loops behind cpu::unary's float32 exp, sigmoid and silu and cpu::silu_backward:
// the AVX-512 ones when vec_exp_active(), else the portable ones.
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
