/*
 * wmat.c: the weight formats' scalar decoders (see wmat.h): what every
 * backend's loader and the portable reference kernels decode with.
 */
#include <math.h>
#include <string.h>

#include "wmat.h"

const char *ms_wfmt_name(enum ms_wfmt f)
{
	static const char *names[MS_WFMT_COUNT] = {
		[MS_WFMT_F32] = "f32", [MS_WFMT_F16] = "f16",
		[MS_WFMT_BF16] = "bf16", [MS_WFMT_MXFP4] = "mxfp4",
		[MS_WFMT_INTQ] = "intq", [MS_WFMT_FP8] = "fp8",
	};
	return (f >= 0 && f < MS_WFMT_COUNT) ? names[f] : "?";
}

uint64_t ms_wmat_bytes(const struct ms_wmat *m)
{
	if (m->pack)
		return m->pack_bytes;
	uint64_t b = (uint64_t)m->rows * m->row_bytes;
	if (m->fmt == MS_WFMT_MXFP4)
		b += (uint64_t)m->rows * m->scale_row_bytes;
	if (m->fmt == MS_WFMT_INTQ)
		b += (uint64_t)m->rows * (uint64_t)m->n_groups * 2 * sizeof(float);
	if (m->fmt == MS_WFMT_FP8)
		b += (uint64_t)m->rows * sizeof(float);
	return b;
}

float ms_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
	union { uint32_t u; float f; } v;
	if (exp == 0x1F) {
		v.u = sign | 0x7F800000u | (man << 13); /* inf / nan */
	} else if (exp == 0) {
		/* zero or subnormal: man * 2^-24 is exact in fp32 */
		float f = ldexpf((float)man, -24);
		return sign ? -f : f;
	} else {
		v.u = sign | ((exp + 112) << 23) | (man << 13);
	}
	return v.f;
}

const float ms_e2m1_lut[16] = {
	+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
	-0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

float ms_e8m0_to_f32(uint8_t e)
{
	return ldexpf(1.0f, (int)e - 127);
}

float ms_fp8_e4m3_to_f32(uint8_t b)
{
	int e = (b >> 3) & 0xF, m = b & 7;
	float v;
	if (e == 0xF && m == 7)
		return NAN; /* 0x7F / 0xFF: the only NaNs; e4m3fn has no infinity */
	if (e == 0)
		v = ldexpf((float)m, -9); /* subnormal: m * 2^-9 */
	else
		v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
	return (b & 0x80) ? -v : v;
}

uint8_t ms_f32_to_fp8_e4m3(float x)
{
	if (isnan(x))
		return 0x7F;
	uint8_t sign = signbit(x) ? 0x80 : 0;
	float a = fabsf(x);
	if (a >= 448.0f)
		return sign | 0x7E;
	if (a < 0.015625f) { /* below 2^-6: subnormal steps of 2^-9 */
		/* rintf rounds half to even in the default rounding mode; a
		 * result of 8 is 2^-6, the smallest normal, encoded as 0x08. */
		return sign | (uint8_t)rintf(a * 512.0f);
	}
	int ex;
	float f = frexpf(a, &ex);  /* a = f * 2^ex, f in [0.5, 1) */
	int E = ex - 1 + 7;        /* biased exponent of a = (2f) * 2^(ex-1) */
	int M = (int)rintf((2.0f * f - 1.0f) * 8.0f);
	if (M == 8) {              /* mantissa overflowed into the exponent */
		M = 0;
		E++;
	}
	uint8_t code = (uint8_t)((E << 3) | M);
	return sign | (code > 0x7E ? 0x7E : code);
}

void ms_wmat_row_range_f32(const struct ms_wmat *m, int64_t r, int64_t c0, int64_t c1,
			   float *out)
{
	const uint8_t *row = m->w + (size_t)r * m->row_bytes;
	switch (m->fmt) {
	case MS_WFMT_F32:
		memcpy(out, row + c0 * 4, (size_t)(c1 - c0) * sizeof(float));
		break;
	case MS_WFMT_F16: {
		const uint16_t *p = (const uint16_t *)row;
		for (int64_t k = c0; k < c1; k++)
			out[k - c0] = ms_f16_to_f32(p[k]);
		break;
	}
	case MS_WFMT_BF16: {
		const uint16_t *p = (const uint16_t *)row;
		for (int64_t k = c0; k < c1; k++)
			out[k - c0] = ms_bf16_to_f32(p[k]);
		break;
	}
	case MS_WFMT_MXFP4: {
		const uint8_t *sc = m->scales + (size_t)r * m->scale_row_bytes;
		for (int64_t k = c0; k < c1; k++) {
			uint8_t b = row[k / 2];
			uint8_t code = (k & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 0x0F);
			out[k - c0] = ms_e2m1_lut[code] * ms_e8m0_to_f32(sc[k / 32]);
		}
		break;
	}
	case MS_WFMT_INTQ: {
		int sb = ms_intq_storage_bits(m->bits);
		unsigned mask = (1u << m->bits) - 1;
		const float *s = m->fscale + (size_t)r * (size_t)m->n_groups;
		const float *z = m->fzero + (size_t)r * (size_t)m->n_groups;
		const int32_t *gi = m->row_g_idx ? m->row_g_idx[r] : NULL;
		for (int64_t k = c0; k < c1; k++) {
			int64_t bit = k * sb;
			unsigned q = (row[bit / 8] >> (bit % 8)) & mask;
			int64_t g = gi ? gi[k] : k / m->group_size;
			/* (q - z) is exact in fp32; one rounding, as the reference */
			out[k - c0] = s[g] * ((float)q - z[g]);
		}
		break;
	}
	case MS_WFMT_FP8: {
		float sc = m->fscale[r];
		for (int64_t k = c0; k < c1; k++)
			out[k - c0] = ms_fp8_e4m3_to_f32(row[k]) * sc;
		break;
	}
	default:
		memset(out, 0, (size_t)(c1 - c0) * sizeof(float));
	}
}

void ms_wmat_row_f32(const struct ms_wmat *m, int64_t r, float *out)
{
	if (!m->w && m->pack_row) {
		/* the rows were released after packing */
		m->pack_row(m->pack, r, out);
		return;
	}
	ms_wmat_row_range_f32(m, r, 0, m->cols, out);
}
