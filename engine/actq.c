/* actq.c: see actq.h. */
#include "actq.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

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

static float fp8_round(float v)
{
	v = v > 448.0f ? 448.0f : (v < -448.0f ? -448.0f : v);
	return ms_fp8_e4m3_to_f32(ms_f32_to_fp8_e4m3(v));
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
			for (int64_t k = 0; k < K; k++)
				o[k] = fp8_round(xr[k] / s); /* divide, as the spec says */
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
