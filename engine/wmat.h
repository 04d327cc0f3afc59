/*
 * wmat.h: weight matrices as every backend sees them.
 *
 * A scheme (quant/) turns checkpoint tensors into ms_wmat views, zero-copy
 * where the on-disk layout is already what a kernel reads; a backend binds
 * each to its kernel (the CPU's may pack a copy of its own). The scalar
 * decoders below are the formats' definitions, shared by loaders, the
 * reference kernels and tests.
 */
#ifndef MS_WMAT_H
#define MS_WMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ms_wfmt {
	MS_WFMT_F32,
	MS_WFMT_F16,
	MS_WFMT_BF16,
	MS_WFMT_MXFP4,  /* OCP MX: e2m1 codes, 2 per byte (low nibble first),
			 * one E8M0 scale per 32 consecutive columns */
	MS_WFMT_INTQ,   /* GPTQ/AWQ after repacking: unsigned `bits`-wide codes
			 * along each row (LSB first; 3-bit codes take 4 bits),
			 * W = scale * (code - zero) per (row, group) */
	MS_WFMT_FP8,    /* e4m3fn bytes, W = fp8 * scale[row] */
	MS_WFMT_COUNT,
};

const char *ms_wfmt_name(enum ms_wfmt f);

/* A weight matrix W [rows = out features, cols = in features]. Every row is
 * self-contained (its codes, scales and zeros are addressed by row), so rows
 * of two matrices can be spliced into one (quant/ fuses gate and up). */
struct ms_wmat {
	enum ms_wfmt fmt;
	int64_t rows, cols;
	const uint8_t *w;         /* row r starts at w + r * row_bytes */
	size_t row_bytes;
	const uint8_t *scales;    /* MXFP4: row r's E8M0 bytes at scales + r * scale_row_bytes */
	size_t scale_row_bytes;
	/* INTQ */
	int bits;                 /* code width: 2, 3, 4 or 8 */
	int64_t group_size;       /* columns per group (natural order) */
	int64_t n_groups;         /* groups per row */
	const float *fscale;      /* INTQ: [rows][n_groups]; FP8: [rows] */
	const float *fzero;       /* INTQ: [rows][n_groups], the zero point as a float */
	const int32_t *const *row_g_idx; /* INTQ: row r's group of column k is
					  * row_g_idx[r][k]; NULL: k / group_size */
	/* A kernel's own copy of the matrix, made once at load by its pack
	 * function (blocked, scales inline); NULL for kernels that read the
	 * rows above directly. The rows above stay valid either way. */
	/* Only kernels that keep fp32 activations may take it: set by a model
	 * for a matrix whose outputs are decisions (the MoE router: rounding
	 * its input flips which experts run). */
	bool exact_acts;
	const void *pack;
	size_t pack_bytes;        /* bytes a packed kernel streams per pass */
	/* Decode row r from the packed copy (set by pack functions that can):
	 * once it is set, the loader may release the rows above (w = NULL). */
	void (*pack_row)(const void *pack, int64_t r, float *out);
};

/* Bits a stored INTQ code occupies (3-bit codes are kept in nibbles). */
static inline int ms_intq_storage_bits(int bits)
{
	return bits == 3 ? 4 : bits;
}

/* Bytes a kernel streams to read the whole matrix once. */
uint64_t ms_wmat_bytes(const struct ms_wmat *m);

/* ---- scalar format helpers, shared by kernels, loaders and tests ---- */

static inline float ms_bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
	return v.f;
}

float ms_f16_to_f32(uint16_t h);

/* e2m1 value of a 4-bit code (bit 3 = sign). */
extern const float ms_e2m1_lut[16];

/* 2^(e - 127) for an E8M0 byte, exactly (e = 0xFF treated as 2^128, as the
 * reference code does: it applies no NaN rule). */
float ms_e8m0_to_f32(uint8_t e);

/* Decode row r of W into out[cols] as fp32. */
void ms_wmat_row_f32(const struct ms_wmat *m, int64_t r, float *out);
/* Decode columns [c0, c1) of row r into out[0 .. c1-c0), from the rows
 * (never the packed copy). */
void ms_wmat_row_range_f32(const struct ms_wmat *m, int64_t r, int64_t c0, int64_t c1,
			   float *out);

/* e4m3fn (bias 7, no infinities, 0x7F/0xFF NaN, max 448) to fp32, exactly. */
float ms_fp8_e4m3_to_f32(uint8_t b);

/* fp32 to e4m3fn, round to nearest even; finite values beyond 448 saturate
 * to +-448 (callers clamp first anyway, as every activation quantizer
 * does), NaN gives 0x7F. */
uint8_t ms_f32_to_fp8_e4m3(float x);

#endif
