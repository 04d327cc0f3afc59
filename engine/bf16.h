/*
 * bf16.h: float to bfloat16 and back, one definition for the host's C and
 * the GPU kernels (HIP and CUDA compile it for both sides).
 */
#ifndef MS_BF16_H
#define MS_BF16_H

#include <stdint.h>
#include <string.h>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h> /* the device's memcpy */
#define MS_BF16_FN static inline __host__ __device__
#elif defined(__CUDACC__)
#define MS_BF16_FN static inline __host__ __device__
#else
#define MS_BF16_FN static inline
#endif

/* A float's bits and back (memcpy: no aliasing); host and device. */
MS_BF16_FN uint32_t ms_f32_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	return u;
}

MS_BF16_FN float ms_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Round to nearest even by an integer add: infinities pass, a NaN stays a
 * (quiet) NaN, subnormals round like the rest. The KV cache stores this,
 * and oneDNN's bf16 inputs are this. */
MS_BF16_FN uint16_t ms_bf16_rne(float x)
{
	uint32_t u = ms_f32_bits(x);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* What VCVTNE2PS2BF16 gives (SDM "convert_fp32_to_bfloat16"): the same,
 * except that zero and subnormal inputs give a zero of their sign. Scalar
 * code beside that instruction must match it bit for bit. */
MS_BF16_FN uint16_t ms_bf16_rne_daz(float x)
{
	uint32_t u = ms_f32_bits(x);
	if ((u & 0x7F800000u) == 0)
		return (uint16_t)((u >> 16) & 0x8000u);
	return ms_bf16_rne(x);
}

MS_BF16_FN float ms_bf16_f32(uint16_t h)
{
	return ms_bits_f32((uint32_t)h << 16);
}

#endif
