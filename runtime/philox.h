// SPDX-License-Identifier: MIT
// Philox4x32-10, the counter-based generator of cuRAND and PyTorch, in one header compiled
// three ways: as host C++ (runtime/tensor.cpp's rand and randn), by NVRTC (embedded as
// "philox.h" for kernels/cuda_device/random.cu) and as host C++ again under the tests' CPU
// emulation of the device code. It uses no header and no standard type, so NVRTC needs
// nothing from a toolkit to compile it.
//
// Note [The random stream]
// Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11):
// a 10-round keyed bijection of a 128-bit counter. minitensor keys it with the 64-bit seed
// (key = {low 32 bits, high 32 bits}), so two seeds are two different permutations, not
// shifted copies of one stream, and gives element i of a draw the counter
// {low 32, high 32 of (offset + i), 0, 0}, where offset is the generator's position
// (Generator::advance reserves one counter an element). Element i of rand takes as many
// high bits of the first 64 output bits as its dtype has significand bits (53 float64, 24
// float32, 11 float16, 8 bfloat16: philox_uniform_bits), so the value is exact in the dtype
// and below 1 (rounding 53 bits to nearest made 1.0 about 261 times a million in float16);
// element i of randn takes a 53-bit uniform from each 64-bit half and makes one normal by
// Box-Muller. So a value depends only on (seed,
// offset + i): the CPU and the GPU draw the same numbers whatever the launch shape. The
// known-answer vectors of the Random123 distribution are checked in tests/test_runtime.cpp.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define MT_PHILOX_FN __host__ __device__ __forceinline__
#else
#define MT_PHILOX_FN inline
#endif

namespace mt {

static_assert(sizeof(unsigned int) == 4 && sizeof(unsigned long long) == 8,
              "Philox4x32 needs 32-bit unsigned int and 64-bit unsigned long long");

// Four 32-bit words: a counter or an output block.
struct Philox4x32 {
  unsigned int v[4];
};

// The Philox4x32-10 block function of the paper (its multipliers and Weyl key increments).
MT_PHILOX_FN Philox4x32 philox4x32_10(Philox4x32 c, unsigned int k0, unsigned int k1) {
  const unsigned int kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  const unsigned int kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += kW0, k1 += kW1;
    const unsigned long long p0 = (unsigned long long)kM0 * c.v[0];
    const unsigned long long p1 = (unsigned long long)kM1 * c.v[2];
    const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
    c = Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
  }
  return c;
}

// The 128 random bits of counter `counter` of the stream of `seed` (Note [The random stream]).
MT_PHILOX_FN Philox4x32 philox_block(unsigned long long seed, unsigned long long counter) {
  return philox4x32_10(Philox4x32{{(unsigned int)counter, (unsigned int)(counter >> 32), 0u, 0u}},
                       (unsigned int)seed, (unsigned int)(seed >> 32));
}

// A double in [0, 1) from two output words: their `bits` (1 to 53) high bits times
// 2^-bits, so exact in any floating type of at least `bits` significand bits: converting it
// to that type never rounds it up to 1.
MT_PHILOX_FN double philox_uniform(unsigned int lo, unsigned int hi, int bits) {
  const unsigned long long word = ((unsigned long long)hi << 32) | lo;
  return double(word >> (64 - bits)) / double(1ull << bits);
}

// The 53-bit uniform of randn (and of rand in float64).
MT_PHILOX_FN double philox_uniform01(unsigned int lo, unsigned int hi) {
  return philox_uniform(lo, hi, 53);
}

// The significand bits of the floating types rand fills, by their size in bytes and, for
// two bytes, whether the type is bfloat16 (8 bits) or float16 (11): the bits of
// philox_uniform for rand in that type, on the CPU (runtime/tensor.cpp) and the GPU
// (kernels/cuda_device/random.cu) alike.
MT_PHILOX_FN int philox_uniform_bits(int bytes, bool bfloat16) {
  return bytes == 8 ? 53 : bytes == 4 ? 24 : bfloat16 ? 8 : 11;
}

}  // namespace mt
