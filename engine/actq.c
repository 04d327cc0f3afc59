/* actq.c: see actq.h. */
#include "actq.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "wmat.h"

const char *ms_actq_name(enum ms_actq_kind k)
{
	switch (k) {
	case MS_ACTQ_NONE: return "none";
	case MS_ACTQ_FP8_STATIC: return "fp8-static";
	case MS_ACTQ_FP8_DYNAMIC: return "fp8-dynamic";
	case MS_ACTQ_MXFP4_DYNAMIC: return "mxfp4-dynamic";
	}
	return "?";
}

/* v saturated to +-448 and rounded to the nearest e4m3 value, ties to even:
 * the value ms_fp8_e4m3_to_f32(ms_f32_to_fp8_e4m3(v)) gives (checked against
 * it over every exponent in tests/quant/test-quant.c), computed on the float's
 * bits without branches so that the compiler vectorizes the row loop (the
 * byte round trip cost a W4A8 model ~10% of its decode step). Normal range
 * (|v| >= 2^-6): the mantissa rounded to 3 bits, a carry moving into the
 * exponent. Below: multiples of 2^-9, by adding and subtracting 2^14
 * (whose ulp is 2^-9; the addition rounds to nearest even). NaN stays NaN. */
static inline float fp8_round(float v)
{
	uint32_t b, sub;
	memcpy(&b, &v, 4);
	uint32_t a = b & 0x7FFFFFFFu;
	/* Saturate on the bits (0x43E00000: 448; above 0x7F800000: NaN) and
	 * select with masks: the loop must hold no branch to be vectorized. */
	uint32_t sat = 0u - (uint32_t)(a - 0x43E00001u < 0x7F800000u - 0x43E00000u);
	a = (a & ~sat) | (0x43E00000u & sat);
	uint32_t nrm = (a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u;
	float fa, fs;
	memcpy(&fa, &a, 4);
	fs = (fa + 0x1p14f) - 0x1p14f;
	memcpy(&sub, &fs, 4);
	uint32_t low = 0u - (uint32_t)(a < 0x3C800000u); /* 0x3C800000: 2^-6 */
	uint32_t nan = 0u - (uint32_t)(a > 0x7F800000u);
	uint32_t r = (sub & low) | (nrm & ~low);
	r = (a & nan) | (r & ~nan);
	r |= b & 0x80000000u;
	memcpy(&v, &r, 4);
	return v;
}

/* e2m1 round to nearest even of |a| <= 6 (grid 0 .5 1 1.5 2 3 4 6): step
 * 0.5 below 2, 1 below 4, 2 up to 6; rintf's ties-to-even on the scaled
 * value picks the code whose mantissa bit is 0. */
static float e2m1_round(float v)
{
	float a = fabsf(v), r;
	if (a >= 6.0f)
		r = 6.0f;
	else if (a < 2.0f)
		r = rintf(a * 2.0f) / 2.0f;
	else if (a < 4.0f)
		r = rintf(a);
	else
		r = rintf(a / 2.0f) * 2.0f;
	return copysignf(r, v);
}

void ms_actq_mxfp4_group(float *v, int64_t n)
{
	float amax = 0;
	for (int64_t i = 0; i < n; i++)
		amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
	if (amax == 0.0f)
		return; /* all zeros stay zeros */
	uint32_t bits;
	memcpy(&bits, &amax, 4);
	bits = (bits + 0x200000u) & 0x7F800000u; /* round the mantissa at 1.75 */
	int E = (int)(bits >> 23) - 127;
	int e = E - 2; /* emax of e2m1 is 2 */
	e = e < -127 ? -127 : (e > 127 ? 127 : e);
	for (int64_t i = 0; i < n; i++)
		v[i] = ldexpf(e2m1_round(ldexpf(v[i], -e)), e);
}

/* o[k] = fp8_round(x[k] / s) (divide, as the spec says); x and o may be the
 * same row. Whole blocks of 64 go through a local buffer: no aliasing and a
 * fixed trip count, so -O2's vectorizer takes them. */
static void fp8_row(const float *x, int64_t K, float s, float *o)
{
	int64_t k = 0;
	for (; k + 64 <= K; k += 64) {
		float t[64];
		for (int i = 0; i < 64; i++)
			t[i] = fp8_round(x[k + i] / s);
		memcpy(o + k, t, sizeof(t));
	}
	for (; k < K; k++)
		o[k] = fp8_round(x[k] / s);
}

void ms_actq_apply(const struct ms_actq *q, const float *x, int64_t ldx, int64_t n, int64_t K,
		   float *xq, float *row_scale)
{
	for (int64_t t = 0; t < n; t++) {
		const float *xr = x + t * ldx;
		float *o = xq + t * K;
		switch (q->kind) {
		case MS_ACTQ_FP8_STATIC:
		case MS_ACTQ_FP8_DYNAMIC: {
			float s = q->scale;
			if (q->kind == MS_ACTQ_FP8_DYNAMIC) {
				float amax = 0;
				for (int64_t k = 0; k < K; k++)
					amax = fabsf(xr[k]) > amax ? fabsf(xr[k]) : amax;
				s = amax > 0 ? amax / 448.0f : 1.0f;
			}
			fp8_row(xr, K, s, o);
			row_scale[t] = s;
			break;
		}
		case MS_ACTQ_MXFP4_DYNAMIC:
			if (o != xr) /* in place is allowed */
				memcpy(o, xr, (size_t)K * sizeof(float));
			for (int64_t k = 0; k < K; k += 32)
				ms_actq_mxfp4_group(o + k, K - k < 32 ? K - k : 32);
			row_scale[t] = 1.0f;
			break;
		default:
			if (o != xr)
				memcpy(o, xr, (size_t)K * sizeof(float));
			row_scale[t] = 1.0f;
		}
	}
}
