/*
 * fp8.h: e4m3fn codes and the KV cache's fp8 rows, one definition for the
 * host's C and the GPU kernels (as bf16.h), so that every backend stores
 * the same bits for the same keys and values.
 *
 * A KV head of one position (head_dim values) is stored as head_dim e4m3fn
 * codes and one power-of-two scale 2^k (an e8m0 byte, k + 127, as OCP's MX
 * formats write it): value = e4m3(code) * 2^k. k is the least for which the
 * head's largest magnitude fits e4m3's 448, so every head uses the format's
 * whole range and nothing saturates. The scale belongs to one position and
 * head, not to a page: a page-wide scale chosen from the values written so
 * far would make a token's result depend on how its prompt was cut into
 * chunks (and so on the other requests in flight), and one fixed by the
 * page's first position would clip later outliers. It costs one byte per
 * head_dim codes (1.6% at 64).
 *
 * A NaN anywhere in a head sets the scale byte to 0xFF, MX's NaN scale: the
 * whole head reads as NaN, so a NaN propagates through attention as it does
 * with f32 and bf16 caches.
 */
#ifndef MS_FP8_H
#define MS_FP8_H

#include <stdint.h>

#include "bf16.h" /* MS_BF16_FN (host and device), ms_f32_bits */

#define MS_FP8_FN MS_BF16_FN

/* Scale exponents are kept in [-100, 100]: 2^k and the kernels' 2^(k + 8)
 * stay normal floats, and a head of zeros (k 0) or infinities (k 100,
 * saturated codes) still gets a finite scale. */
#define MS_FP8_KMIN (-100)
#define MS_FP8_KMAX 100
#define MS_E8M0_NAN 0xFF

/* x to e4m3fn, round to nearest even, saturating at +-448 (infinities
 * too); NaN gives 0x7F. The same codes as wmat.c's ms_f32_to_fp8_e4m3
 * (tests compare them on every float class), on the bits alone. */
MS_FP8_FN uint8_t ms_fp8_e4m3_rne(float x)
{
	uint32_t u = ms_f32_bits(x), a = u & 0x7FFFFFFFu;
	uint8_t s = (uint8_t)((u >> 24) & 0x80u);
	if (a > 0x7F800000u)
		return (uint8_t)(s | 0x7F);
	if (a >= 0x43E00000u) /* 448 */
		return (uint8_t)(s | 0x7E);
	if (a < 0x3C800000u) { /* below 2^-6: steps of 2^-9; 2^14's ulp is 2^-9,
				* so the add rounds to nearest even there */
		float r = (ms_bits_f32(a) + 0x1p14f) - 0x1p14f;
		return (uint8_t)(s | (uint8_t)(r * 512.0f));
	}
	uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u;
	return (uint8_t)(s | ((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u)));
}

/* e4m3fn code to its value, exactly (0x7F / 0xFF: NaN). */
MS_FP8_FN float ms_fp8_e4m3_f32(uint8_t c)
{
	uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
	float v;
	if (e == 0xFu && m == 7u)
		return ms_bits_f32(0x7FC00000u);
	if (e == 0)
		v = (float)m * 0x1p-9f;
	else
		v = ms_bits_f32(((e + 120u) << 23) | (m << 20));
	return (c & 0x80) ? -v : v;
}

/* 2^(b - 127) for an e8m0 byte of the KV cache (NaN for 0xFF). */
MS_FP8_FN float ms_e8m0_f32(uint8_t b)
{
	return b == MS_E8M0_NAN ? ms_bits_f32(0x7FC00000u) : ms_bits_f32((uint32_t)b << 23);
}

/* The least k with |x| <= 448 * 2^k for a largest magnitude amax (bits of
 * a non-negative float, not NaN), clamped to [KMIN, KMAX]: 448 is 1.75 *
 * 2^8, so k is amax's exponent less 8, one more when its significand
 * passes 1.75. */
MS_FP8_FN int ms_fp8_scale_exp(uint32_t amax)
{
	if (amax == 0)
		return 0;
	int k = (int)(amax >> 23) - 135 + ((amax & 0x7FFFFFu) > 0x600000u);
	return k < MS_FP8_KMIN ? MS_FP8_KMIN : k > MS_FP8_KMAX ? MS_FP8_KMAX : k;
}

/* One head of one position: d values to codes[d]; returns its scale byte. */
MS_FP8_FN uint8_t ms_fp8_kv_head(const float *x, int64_t d, uint8_t *codes)
{
	uint32_t amax = 0;
	int nan = 0;
	for (int64_t i = 0; i < d; i++) {
		uint32_t a = ms_f32_bits(x[i]) & 0x7FFFFFFFu;
		nan |= a > 0x7F800000u;
		amax = a > amax && a <= 0x7F800000u ? a : amax;
	}
	int k = ms_fp8_scale_exp(amax);
	float inv = ms_bits_f32((uint32_t)(127 - k) << 23); /* 2^-k: exact */
	for (int64_t i = 0; i < d; i++)
		codes[i] = ms_fp8_e4m3_rne(x[i] * inv);
	return nan ? (uint8_t)MS_E8M0_NAN : (uint8_t)(k + 127);
}

#endif
