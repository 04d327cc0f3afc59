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
	for (int64_t r = r0; r < r1; r++) {
		for (int64_t t = 0; t < n; t++)
			y[t * ldy + r] = 0.0f;
		for (int64_t c0 = 0; c0 < w->cols; c0 += REF_CHUNK) {
			int64_t c1 = c0 + REF_CHUNK < w->cols ? c0 + REF_CHUNK : w->cols;
			ms_wmat_row_range_f32(w, r, c0, c1, row);
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

const struct ms_kernel ms_kernels_ref[MS_WFMT_COUNT + 1] = {
	[MS_WFMT_F32] = {.name = "ref-f32", .isa = "ref", .fmt = MS_WFMT_F32,
	 .cpu_flags = 0, .gemm = gemm_f32},
	[MS_WFMT_F16] = {.name = "ref-f16", .isa = "ref", .fmt = MS_WFMT_F16,
	 .cpu_flags = 0, .gemm = gemm_decode_rows},
	[MS_WFMT_BF16] = {.name = "ref-bf16", .isa = "ref", .fmt = MS_WFMT_BF16,
	 .cpu_flags = 0, .gemm = gemm_decode_rows},
	[MS_WFMT_MXFP4] = {.name = "ref-mxfp4", .isa = "ref", .fmt = MS_WFMT_MXFP4,
	 .cpu_flags = 0, .gemm = gemm_decode_rows},
	[MS_WFMT_INTQ] = {.name = "ref-intq", .isa = "ref", .fmt = MS_WFMT_INTQ,
	 .cpu_flags = 0, .gemm = gemm_decode_rows},
	[MS_WFMT_FP8] = {.name = "ref-fp8", .isa = "ref", .fmt = MS_WFMT_FP8,
	 .cpu_flags = 0, .gemm = gemm_decode_rows},
	[MS_WFMT_COUNT] = {0},
};
