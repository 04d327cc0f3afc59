/*
 * kernels-q8.h: the "q8 panel" format, shared by every kernel that
 * multiplies 4-bit / 8-bit integer-coded weights (MXFP4, INTQ) with int8
 * activations (AVX-512 VNNI here, AMX elsewhere).
 *
 * Weights (packed once at load by ms_q8_pack):
 * - a panel is 16 consecutive output rows (lanes 0..15); a last partial
 *   panel is padded with rows of zero-point codes and scale 0. Panels follow
 *   one another at a constant stride, each contiguous, so a row task streams
 *   whole panels;
 * - K is padded to Kp = round_up(K, 32) (codes 0 for MXFP4, the row's zero
 *   point for INTQ; the prepared activations are 0 there);
 * - a block is 32 columns; inside a panel blocks follow in K order, each its
 *   codes then its metadata:
 *   4-bit codes (MXFP4, INTQ 2/3/4 bits): 256 bytes = 4 sub-steps of 8
 *     columns; in sub-step s byte 4 * i + j holds, for lane i, the code of
 *     column 8s + j in its low nibble and of 8s + 4 + j in its high nibble
 *     (`and 0x0F` gives the VNNI operand of columns 8s..8s+3, `srli 4` +
 *     `and` the one of 8s+4..8s+7);
 *   8-bit codes (INTQ 8): 512 bytes = 8 sub-steps of 4 columns, byte
 *     4 * i + j = code of lane i, column 4s + j;
 *   metadata: MXFP4: the 16 lanes' E8M0 bytes; INTQ: 16 fp16 scales then
 *     16 u8 zero points of the group holding the block.
 * - act-order INTQ (one g_idx shared by all rows, each group exactly
 *   group_size columns): columns are sorted stably by group and perm[k']
 *   names the source column of packed column k'; prep gathers through it.
 *
 * Prepared activations (ms_q8_prep, once per call): per token, Kp int8 q,
 * then Kp/32 floats d (the block's step), then Kp/32 int32 s (the sum of the
 * block's q). Default rule per block of 32 values: amax = max |x|,
 * d = amax / 127, q = clamp(lrintf(x * (127 / amax)), -127, 127). In
 * MS_Q8_ACT_POW2 mode a block whose values are all integer multiples of the
 * smallest power of two 2^e with 127 * 2^e >= amax takes d = 2^e and
 * q = x / d exactly (MXFP4-quantized activations always are: W4A4 then
 * computes without rounding); other blocks take the default rule. Two
 * corners, so that no path divides by zero or converts a NaN: a block with
 * amax < 2^-96 (zero included) is zero (d = 0, q = 0), and a block holding
 * an infinity or NaN gets d = NaN (its products are NaN, as in fp32).
 *
 * Product (lane i, block b, token t), the same order in every kernel:
 *   dot = sum_j u(i, j) * q(t, j) in int32, u = the code (INTQ) or
 *         lut12[code] (MXFP4: twice the e2m1 value plus 12);
 *   acc += (float)(dot - zero * s(t, b)) * (scale * d(t, b)),
 * zero = 12 and scale = 2^(e - 128) for MXFP4 (E8M0 byte e), the u8 zero and
 * fp16 scale for INTQ; the sum is an fma in fp32, blocks in K order from 0.
 * dot - zero * s is an exact integer below 2^24, so every kernel that keeps
 * this order gets bitwise the same result (scalar, AVX-512 and any grouping
 * of tokens or rows: results are batch invariant).
 *
 * Error against the fp32 reference kernel: only the int8 rounding of the
 * activations, |x - d q| <= amax_b / 254 * (1 + 2^-14) per element of block
 * b (half a step; the 2^-14 covers the fp32 roundings of 127 / amax, x * it
 * and d), and 0 in blocks the power-of-two rule takes, plus fp32 summation
 * (the reference's, and here one rounding of scale * d and one of the fma
 * per block). So |y - y_ref| <= sum_b amax_b / 254 (1 + 2^-14) sum_{j in b}
 * |w_j| + summation error, which tests/engine/test-kernels-q8.c checks. (Blocks
 * with amax < 2^-96, taken as zero, err by less than 2^-96 per element.)
 * The scalar emulation and the AVX-512 kernels agree bit for bit.
 */
#ifndef MS_KERNELS_Q8_H
#define MS_KERNELS_Q8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define MS_Q8_PANEL 16         /* rows per panel */
#define MS_Q8_BLOCK 32         /* columns per block */
#define MS_Q8_MAGIC 0x38517350u /* "PsQ8" */

enum ms_q8_kind {
	MS_Q8_MXFP4 = 1,  /* e2m1 codes, E8M0 per lane and block */
	MS_Q8_INT4 = 2,   /* INTQ 2, 3 or 4-bit codes, one per nibble */
	MS_Q8_INT8 = 3,   /* INTQ 8-bit codes */
};

enum ms_q8_act {
	MS_Q8_ACT_INT8 = 0, /* the default rule for every block */
	MS_Q8_ACT_POW2 = 1, /* power-of-two step where it is exact (the packer's default) */
};

struct ms_q8_pack {
	uint32_t magic;
	int32_t kind;             /* enum ms_q8_kind */
	int32_t act;              /* enum ms_q8_act: read by prep */
	int32_t bits;             /* INTQ code width (MXFP4: 4) */
	enum ms_wfmt fmt;         /* the source format */
	int64_t rows, cols;       /* the matrix's */
	int64_t kp;               /* cols rounded up to 32 */
	int64_t n_blocks;         /* kp / 32 */
	int64_t n_panels;         /* ceil(rows / 16) */
	int64_t block_bytes;      /* codes + metadata of one block of one panel */
	int64_t panel_bytes;      /* n_blocks * block_bytes */
	const int32_t *perm;      /* [cols] source column of packed column k', or NULL */
	const uint8_t *panels;    /* panel p at panels + p * panel_bytes (64-byte aligned) */
};

/* Bytes of a block's codes and of its metadata. */
static inline int64_t ms_q8_code_bytes(int kind)
{
	return kind == MS_Q8_INT8 ? 512 : 256;
}
static inline int64_t ms_q8_meta_bytes(int kind)
{
	return kind == MS_Q8_MXFP4 ? 16 : 48;
}

/* The prepared activations of token t: q [kp], d [kp/32], s [kp/32] and
 * c [kp/32]: s as the kernels' dot needs it, formed once per token and
 * block here rather than in every pass over a few panels (ms_q8_xq_fill_c). */
static inline size_t ms_q8_xq_stride(int64_t kp)
{
	return (size_t)kp + (size_t)(kp / MS_Q8_BLOCK) * 12;
}
static inline const int8_t *ms_q8_xq_q(const void *xq, int64_t kp, int64_t t)
{
	return (const int8_t *)xq + (size_t)t * ms_q8_xq_stride(kp);
}
static inline const float *ms_q8_xq_d(const void *xq, int64_t kp, int64_t t)
{
	return (const float *)(ms_q8_xq_q(xq, kp, t) + kp);
}
static inline const int32_t *ms_q8_xq_s(const void *xq, int64_t kp, int64_t t)
{
	return (const int32_t *)(ms_q8_xq_d(xq, kp, t) + kp / MS_Q8_BLOCK);
}
static inline const uint32_t *ms_q8_xq_c(const void *xq, int64_t kp, int64_t t)
{
	return (const uint32_t *)(ms_q8_xq_s(xq, kp, t) + kp / MS_Q8_BLOCK);
}

/* c of token t from its s, by the pack's kind: MXFP4, the int32 -16 s
 * (the dot over lut12 + 4 starts there, so the epilogue's integer is the
 * block's sum itself); INTQ and INT8, s as fp32 (exact: |s| <= 32 * 127),
 * what the epilogue multiplies the zero point by. Every prep fills it. */
static inline void ms_q8_xq_fill_c(int kind, void *xq, int64_t kp, int64_t t)
{
	const int32_t *s = ms_q8_xq_s(xq, kp, t);
	uint32_t *c = (uint32_t *)ms_q8_xq_c(xq, kp, t);
	for (int64_t b = 0; b < kp / MS_Q8_BLOCK; b++) {
		if (kind == MS_Q8_MXFP4) {
			c[b] = (uint32_t)(-16 * s[b]);
		} else {
			float f = (float)s[b];
			memcpy(&c[b], &f, 4);
		}
	}
}

/* The twice-e2m1-plus-12 table of MXFP4 codes (unsigned for vpdpbusd). */
extern const uint8_t ms_q8_lut12[16];

struct ms_err;

/* Pack w (MXFP4, or INTQ with 2, 3, 4 or 8-bit codes) into one malloc'd
 * buffer (*owned, the caller's to free) and set w->pack, w->pack_bytes and
 * w->pack_row. -ENOTSUP with the reason when the format cannot take it: an
 * INTQ scale not exactly an fp16, a zero point not an integer in [0, 15]
 * ([0, 255] for 8-bit codes), a group size neither a multiple of 32 nor
 * >= cols, or g_idx that differ between rows or give a group other than
 * group_size columns. Thread-safe (packs may run in parallel). */
int ms_q8_pack(struct ms_wmat *w, void **owned, struct ms_err *err);

/* Change the activation rule of a pack made by ms_q8_pack (owned is the
 * buffer it returned). */
void ms_q8_set_act(void *owned, enum ms_q8_act act);

/* Decode row r of a q8 pack to fp32, exactly as ms_wmat_row_f32 does from
 * the rows it was packed from (w->pack_row). */
void ms_q8_pack_row(const void *pack, int64_t r, float *out);

/* Prepared-activation bytes for n tokens, and the portable prep. */
size_t ms_q8_prep_size(const struct ms_wmat *w, int64_t n);
void ms_q8_prep(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq);

/* Portable scalar gemmq: the integer math and the epilogue above, exactly.
 * Rows [r0, r1): r0 a multiple of 16, r1 too or == rows. */
void ms_q8_gemmq_ref(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		     float *y, int64_t ldy);

/* AVX-512 (F, BW, VL, VNNI) versions, bitwise equal to the portable ones;
 * call only when the CPU has those extensions (kernels-q8-avx512.c). */
void ms_q8_prep_avx512(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq);
void ms_q8_gemmq_avx512vnni(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			    int64_t n, float *y, int64_t ldy);

/* The same with AVX512-VBMI (kernels-q8-avx512.c built with MS_Q8_VBMI):
 * MXFP4's codes go through vpermb on a 64-byte table, which ignores the
 * bits above the nibble, so the two `and`s and the second shuffle of the
 * VNNI version drop out (4-bit INT and INT8 unchanged). Bitwise the same. */
void ms_q8_gemmq_avx512vbmi(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			    int64_t n, float *y, int64_t ldy);

/* AVX2 (+ FMA, F16C) version of the gemmq, bitwise equal to the portable
 * one, for CPUs without AVX-512 VNNI (kernels-q8-avx2.c); its prep is the
 * portable ms_q8_prep. */
void ms_q8_gemmq_avx2(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		      float *y, int64_t ldy);

#endif
