/*
 * kernels-ref.c: portable C reference kernels, one per weight format.
 *
 * They are the definition of correctness for every optimized kernel (issue
 * 7 tests those against these on random data). Still, they are not naive
 * about memory: each weight row is decoded once per call and reused for all
 * n tokens, so a prefill of n tokens streams the weights once.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

const char *ms_wfmt_name(enum ms_wfmt f)
{
	static const char *names[MS_WFMT_COUNT] = {
		[MS_WFMT_F32] = "f32", [MS_WFMT_F16] = "f16",
		[MS_WFMT_BF16] = "bf16", [MS_WFMT_MXFP4] = "mxfp4",
	};
	return (f >= 0 && f < MS_WFMT_COUNT) ? names[f] : "?";
}

uint64_t ms_wmat_bytes(const struct ms_wmat *m)
{
	uint64_t b = (uint64_t)m->rows * m->row_bytes;
	if (m->fmt == MS_WFMT_MXFP4)
		b += (uint64_t)m->rows * m->scale_row_bytes;
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

void ms_wmat_row_f32(const struct ms_wmat *m, int64_t r, float *out)
{
	const uint8_t *row = m->w + (size_t)r * m->row_bytes;
	int64_t K = m->cols;
	switch (m->fmt) {
	case MS_WFMT_F32:
		memcpy(out, row, (size_t)K * sizeof(float));
		break;
	case MS_WFMT_F16: {
		const uint16_t *p = (const uint16_t *)row;
		for (int64_t k = 0; k < K; k++)
			out[k] = ms_f16_to_f32(p[k]);
		break;
	}
	case MS_WFMT_BF16: {
		const uint16_t *p = (const uint16_t *)row;
		for (int64_t k = 0; k < K; k++)
			out[k] = ms_bf16_to_f32(p[k]);
		break;
	}
	case MS_WFMT_MXFP4: {
		const uint8_t *sc = m->scales + (size_t)r * m->scale_row_bytes;
		for (int64_t k = 0; k < K; k++) {
			uint8_t b = row[k / 2];
			uint8_t code = (k & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 0x0F);
			out[k] = ms_e2m1_lut[code] * ms_e8m0_to_f32(sc[k / 32]);
		}
		break;
	}
	default:
		memset(out, 0, (size_t)K * sizeof(float));
	}
}

/* fp32 dot product with 8 independent partial sums: the fixed association
 * keeps results identical from call to call, and the compiler may vectorise
 * it without changing them (no -ffast-math anywhere). */
static float dot_f32(const float *a, const float *b, int64_t n)
{
	float s[8] = {0};
	int64_t k = 0;
	for (; k + 8 <= n; k += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[k + j] * b[k + j];
	for (; k < n; k++)
		s[k & 7] += a[k] * b[k];
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* Generic path: decode a row to fp32 scratch, then dot it with every token.
 * The scratch lives on the stack in chunks so no allocation is needed. */
#define REF_CHUNK 1024
static void gemm_decode_rows(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x,
			     int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	float row[REF_CHUNK];
	struct ms_wmat part = *w;
	for (int64_t r = r0; r < r1; r++) {
		for (int64_t t = 0; t < n; t++)
			y[t * ldy + r] = 0.0f;
		/* Chunks of REF_CHUNK columns: a multiple of 32, so MXFP4 groups
		 * and byte pairs never straddle a chunk. */
		for (int64_t c0 = 0; c0 < w->cols; c0 += REF_CHUNK) {
			int64_t c1 = c0 + REF_CHUNK < w->cols ? c0 + REF_CHUNK : w->cols;
			part.cols = c1 - c0;
			switch (w->fmt) {
			case MS_WFMT_F32: part.w = w->w + c0 * 4; break;
			case MS_WFMT_F16:
			case MS_WFMT_BF16: part.w = w->w + c0 * 2; break;
			case MS_WFMT_MXFP4:
				part.w = w->w + c0 / 2;
				part.scales = w->scales + c0 / 32;
				break;
			default: break;
			}
			ms_wmat_row_f32(&part, r, row);
			for (int64_t t = 0; t < n; t++)
				y[t * ldy + r] += dot_f32(row, x + t * ldx + c0, c1 - c0);
		}
	}
}

static void gemm_f32(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx,
		     int64_t n, float *y, int64_t ldy)
{
	for (int64_t r = r0; r < r1; r++) {
		const float *row = (const float *)(w->w + (size_t)r * w->row_bytes);
		for (int64_t t = 0; t < n; t++)
			y[t * ldy + r] = dot_f32(row, x + t * ldx, w->cols);
	}
}

const struct ms_kernel ms_kernels_ref[MS_WFMT_COUNT] = {
	[MS_WFMT_F32] = {"ref-f32", "ref", MS_WFMT_F32, 0, gemm_f32},
	[MS_WFMT_F16] = {"ref-f16", "ref", MS_WFMT_F16, 0, gemm_decode_rows},
	[MS_WFMT_BF16] = {"ref-bf16", "ref", MS_WFMT_BF16, 0, gemm_decode_rows},
	[MS_WFMT_MXFP4] = {"ref-mxfp4", "ref", MS_WFMT_MXFP4, 0, gemm_decode_rows},
};
