/*
 * testmats.h: random weight matrices of every format for the kernel tests
 * (include after testutil.h, whose random stream they draw from): values
 * O(1), ragged sizes allowed, INTQ with and without a g_idx map.
 */
#ifndef MS_TESTMATS_H
#define MS_TESTMATS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wmat.h"

static inline uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7FFF + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
static inline uint16_t to_f16(float f) /* normal range only, enough for [-1, 1) data */
{
	if (f == 0)
		return 0;
	uint16_t s = f < 0 ? 0x8000 : 0;
	int e;
	float m = frexpf(fabsf(f), &e); /* f = m 2^e, m in [0.5, 1) */
	if (e - 1 < -14)
		return s; /* flush tiny values: not produced by the tests' data */
	uint32_t man = (uint32_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
	uint32_t ex = (uint32_t)(e - 1 + 15);
	if (man == 1024) {
		man = 0;
		ex++;
	}
	return (uint16_t)(s | (ex << 10) | man);
}

struct mat_buf {
	struct ms_wmat m;
	uint8_t *w, *s;
	float *fs, *fz;
	int32_t *gidx;
	const int32_t **rows_g;
};

static inline void free_mat(struct mat_buf *b)
{
	free(b->w), free(b->s), free(b->fs), free(b->fz), free(b->gidx), free(b->rows_g);
}

/* INTQ of the given width with random codes, fp16-like scales, zeros in
 * range; with_gidx: a random (non-monotone) group per column, shared by all
 * rows but every third row, which uses group k / gs. */
static inline struct mat_buf make_intq(int bits, int64_t rows, int64_t cols, int64_t gs, bool with_gidx)
{
	struct mat_buf b = {0};
	int sb = ms_intq_storage_bits(bits);
	size_t rb = (size_t)((cols * sb + 7) / 8);
	int64_t G = (cols + gs - 1) / gs;
	b.w = calloc((size_t)rows * rb, 1);
	b.fs = malloc((size_t)(rows * G) * sizeof(float));
	b.fz = malloc((size_t)(rows * G) * sizeof(float));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols; k++) {
			uint32_t q = rnd() & ((1u << bits) - 1);
			int64_t bit = k * sb;
			b.w[(size_t)r * rb + (size_t)(bit / 8)] |= (uint8_t)(q << (bit % 8));
		}
	for (int64_t i = 0; i < rows * G; i++) {
		b.fs[i] = 0.01f + 0.1f * (float)(rnd() % 1000) / 1000.0f;
		b.fz[i] = (float)(rnd() % (1u << bits)) + ((rnd() & 1) ? 1.0f : 0.0f);
	}
	if (with_gidx) {
		b.gidx = malloc((size_t)cols * sizeof(int32_t));
		for (int64_t k = 0; k < cols; k++)
			b.gidx[k] = (int32_t)(rnd() % (uint32_t)G);
		b.rows_g = malloc((size_t)rows * sizeof(*b.rows_g));
		int32_t *nat = malloc((size_t)cols * sizeof(int32_t));
		for (int64_t k = 0; k < cols; k++)
			nat[k] = (int32_t)(k / gs);
		for (int64_t r = 0; r < rows; r++)
			b.rows_g[r] = (r % 3 == 2) ? nat : b.gidx;
		/* nat is kept alive through s (freed with the matrix) */
		b.s = (uint8_t *)nat;
	}
	b.m = (struct ms_wmat){.fmt = MS_WFMT_INTQ, .rows = rows, .cols = cols, .w = b.w,
			       .row_bytes = rb, .bits = bits, .group_size = gs, .n_groups = G,
			       .fscale = b.fs, .fzero = b.fz,
			       .row_g_idx = (const int32_t *const *)b.rows_g};
	return b;
}

/* Random matrix of the given format; MXFP4 with random codes and scales
 * near 2^0 so values stay O(1). */
static inline struct mat_buf make_mat(enum ms_wfmt fmt, int64_t rows, int64_t cols)
{
	struct mat_buf b = {0};
	size_t es = fmt == MS_WFMT_F32 ? 4 : 2;
	if (fmt == MS_WFMT_MXFP4) {
		int64_t g = (cols + 31) / 32;
		b.w = calloc((size_t)(rows * g * 16), 1);
		b.s = malloc((size_t)(rows * g));
		for (int64_t r = 0; r < rows; r++)
			for (int64_t k = 0; k < cols; k++) {
				uint8_t code = (uint8_t)(rnd() & 15);
				b.w[r * g * 16 + k / 2] |= (k & 1) ? (uint8_t)(code << 4) : code;
			}
		for (int64_t i = 0; i < rows * g; i++)
			b.s[i] = (uint8_t)(124 + rnd() % 5);
		b.m = (struct ms_wmat){.fmt = fmt, .rows = rows, .cols = cols, .w = b.w,
				       .row_bytes = (size_t)g * 16, .scales = b.s,
				       .scale_row_bytes = (size_t)g};
		return b;
	}
	if (fmt == MS_WFMT_INTQ)
		return make_intq(4, rows, cols, 32, true);
	if (fmt == MS_WFMT_FP8) {
		b.w = malloc((size_t)(rows * cols));
		b.fs = malloc((size_t)rows * sizeof(float));
		for (int64_t i = 0; i < rows * cols; i++) {
			uint8_t c = (uint8_t)rnd();
			b.w[i] = (c & 0x7F) == 0x7F ? 0x10 : c; /* no NaN codes */
		}
		for (int64_t r = 0; r < rows; r++)
			b.fs[r] = 0.001f + 0.01f * (float)(rnd() % 100) / 100.0f;
		b.m = (struct ms_wmat){.fmt = fmt, .rows = rows, .cols = cols, .w = b.w,
				       .row_bytes = (size_t)cols, .fscale = b.fs};
		return b;
	}
	b.w = malloc((size_t)(rows * cols) * es);
	for (int64_t i = 0; i < rows * cols; i++) {
		float v = frand();
		if (fmt == MS_WFMT_F32)
			memcpy(b.w + i * 4, &v, 4);
		else {
			uint16_t h = fmt == MS_WFMT_BF16 ? to_bf16(v) : to_f16(v);
			memcpy(b.w + i * 2, &h, 2);
		}
	}
	b.m = (struct ms_wmat){.fmt = fmt, .rows = rows, .cols = cols, .w = b.w,
			       .row_bytes = (size_t)cols * es};
	return b;
}

#endif
