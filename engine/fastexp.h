/*
 * fastexp.h: the one exp approximation of the tree's hot paths.
 *
 * Cephes' expf: x = n ln2 + r with n = round(x log2 e), ln2 in two parts
 * (the first exact in few bits, so n * LN2_HI is exact), e^r = 1 + r +
 * r^2 P(r) with a degree-5 P on |r| <= ln2 / 2, then 2^n. Without FMA,
 * within 1.28 ulp of the exact value for every float in [-87, 88]
 * (tests/models/test-model.c checks 1.5); exactly 1 at 0.
 *
 * Every user computes this formula with these constants: the experts'
 * SwiGLU (ms_exp_clamped below, vectorized by the compiler), the sampler's
 * softmax (engine/sampler.c, 4 lanes), attention's online softmax
 * (engine/cpu/attention-avx512.c, -avx2.c, with FMA). They differ only in
 * what they do outside the normal range, as each says. The reference paths
 * (the reference attention kernel, the router's softmax over k) use libm's
 * expf: they are the definitions the approximation is tested against.
 */
#ifndef MS_FASTEXP_H
#define MS_FASTEXP_H

#include <stdint.h>
#include <string.h>

#define MS_EXP_LOG2E 1.44269504088896341f
#define MS_EXP_LN2_HI 0.693359375f
#define MS_EXP_LN2_LO (-2.12194440e-4f)   /* ln 2 = LN2_HI + LN2_LO */
#define MS_EXP_P0 1.9875691500e-4f
#define MS_EXP_P1 1.3981999507e-3f
#define MS_EXP_P2 8.3334519073e-3f
#define MS_EXP_P3 4.1665795894e-2f
#define MS_EXP_P4 1.6666665459e-1f
#define MS_EXP_P5 5.0000001201e-1f
/* round-to-nearest of a float below 2^22 in magnitude: add and subtract */
#define MS_EXP_ROUND 12582912.0f          /* 1.5 * 2^23 */

/* Float bits as a signed integer and back (the clamps below compare and
 * select on these: a floating-point compare would be kept as a branch and
 * stop the compiler from vectorizing the loops that use them). */
static inline int32_t ms_f2i(float f)
{
	int32_t i;
	memcpy(&i, &f, 4);
	return i;
}

static inline float ms_i2f(int32_t i)
{
	float f;
	memcpy(&f, &i, 4);
	return f;
}

/* min(x, c) for c >= 0 by the bits (int order = float order for x >= 0;
 * a negative x is a negative int; above 0x7F800000 are the NaNs, which
 * stay NaN as with a float compare). */
static inline float ms_min_pos(float x, float c)
{
	int32_t b = ms_f2i(x);
	int32_t m = 0 - (int32_t)((b > ms_f2i(c)) & (b <= 0x7F800000));
	return ms_i2f((ms_f2i(c) & m) | (b & ~m));
}

/* max(x, -c) for c >= 0, likewise. */
static inline float ms_max_neg(float x, float c)
{
	int32_t b = ms_f2i(x), a = b & INT32_MAX, nc = ms_f2i(c) | INT32_MIN;
	int32_t m = 0 - (int32_t)((b < 0) & (a > ms_f2i(c)) & (a <= 0x7F800000));
	return ms_i2f((nc & m) | (b & ~m));
}

/* e^r for |r| <= ln2 / 2: the polynomial, in the order every user keeps. */
static inline float ms_exp_poly(float r)
{
	float p = MS_EXP_P0;
	p = p * r + MS_EXP_P1;
	p = p * r + MS_EXP_P2;
	p = p * r + MS_EXP_P3;
	p = p * r + MS_EXP_P4;
	p = p * r + MS_EXP_P5;
	return p * (r * r) + (r + 1.0f);
}

/* e^x with x clamped to [-87, 88], where 2^n stays a normal float: in
 * gate / (1 + e^x) that changes nothing above e^-87 and, past e^88, leaves
 * |gate| / e^88 (below 1e-30 for any |gate| < 1e8) where the exact value
 * underflows to 0. NaN gives 1 (the caller's gate carries the NaN on).
 * Branch-free, so a loop that calls it vectorizes (glibc's expf is a
 * call). */
static inline float ms_exp_clamped(float x)
{
	x = ms_max_neg(ms_min_pos(x, 88.0f), 87.0f);
	int32_t nan = 0 - (int32_t)((ms_f2i(x) & INT32_MAX) > 0x7F800000);
	x = ms_i2f(ms_f2i(x) & ~nan); /* NaN -> 0: the conversion below needs a number */
	float n = (x * MS_EXP_LOG2E + MS_EXP_ROUND) - MS_EXP_ROUND;
	float r = x - n * MS_EXP_LN2_HI;
	r = r - n * MS_EXP_LN2_LO;
	return ms_exp_poly(r) * ms_i2f(((int32_t)n + 127) << 23);
}

#endif
