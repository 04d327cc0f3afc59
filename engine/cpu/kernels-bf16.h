/*
 * kernels-bf16.h: the packed bf16 kernel "avx512bf16-vnni2" for dense bf16
 * matrices (attention projections, lm_head), AVX-512 BF16 VDPBF16PS.
 *
 * Layout: panels of 16 rows; K padded to even (kp2 = ceil(K / 2) pairs);
 * per panel kp2 steps of 64 bytes, lane i's dword = (w[i][2k], w[i][2k+1])
 * as two bf16 (low half = even column): the VNNI-2 operand of VDPBF16PS,
 * so one load feeds 16 rows and no horizontal sum is ever needed.
 * Activations are rounded to bf16 once per call (round to nearest even, as
 * VCVTNE2PS2BF16), stored per token as kp2 dwords of pairs.
 *
 * Error: each activation is rounded to bf16 (relative 2^-9), the products
 * and sums are fp32 with VDPBF16PS's DAZ/FTZ: |y - y_ref| <= 2^-8 sum|w x|
 * plus fp32 summation (tests/engine/test-bf16.c).
 */
#ifndef MS_KERNELS_BF16_H
#define MS_KERNELS_BF16_H

#include "kernels.h"

#define MS_BF16_PANEL 16

struct ms_bf16_pack {
	int64_t rows, cols;
	int64_t kp2;          /* pairs per row (K rounded up to even, halved) */
	int64_t n_panels;
	size_t panel_bytes;   /* kp2 * 64 */
	size_t xs;            /* bytes per token of prepared activations */
	const uint8_t *panels;
};

int ms_bf16_pack(struct ms_wmat *w, void **owned, struct ms_err *err);
void ms_bf16_pack_row(const void *pack, int64_t r, float *out);
size_t ms_bf16_prep_size(const struct ms_wmat *w, int64_t n);
void ms_bf16_prep_avx512(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq);
void ms_bf16_gemmq_avx512(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			  int64_t n, float *y, int64_t ldy);

/* Portable models, bit for bit the AVX-512 ones (tests). */
void ms_bf16_prep_scalar(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq);
void ms_bf16_gemmq_scalar(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			  int64_t n, float *y, int64_t ldy);

#endif
