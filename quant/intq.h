/*
 * intq.h: the INTQ layout GPTQ and AWQ are repacked into (shared by
 * gptq.c and awq.c; see MS_WFMT_INTQ in engine/cpu/kernels.h).
 */
#ifndef MS_INTQ_H
#define MS_INTQ_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

/* Columns per scale of the int8 dense weights (--dense int8). */
#define MS_DENSE_INT8_GROUP 32

/* Allocate l's codes [N][K] (bits wide, packed LSB first; zero-filled when
 * zero_codes, else the caller writes every byte), scales and zeros [N][G]
 * (the caller writes them all; ms_quant_buf_alloc) and set l->w to
 * describe them. */
int ms_intq_alloc(struct ms_qlinear *l, int64_t N, int64_t K, int bits, int64_t group_size,
		  int64_t G, bool zero_codes, const char *prefix, struct ms_err *err);

static inline void ms_intq_put(struct ms_qlinear *l, int64_t n, int64_t k, uint32_t q)
{
	int sb = ms_intq_storage_bits(l->lin.w.bits);
	int64_t bit = k * sb;
	uint8_t *row = (uint8_t *)l->owned[0] + (size_t)n * l->lin.w.row_bytes;
	row[bit / 8] |= (uint8_t)(q << (bit % 8));
}

/* Element i of a little-endian int32 tensor that may sit misaligned in the
 * mapping. */
static inline uint32_t ms_rd_u32(const void *base, size_t i)
{
	uint32_t v;
	memcpy(&v, (const uint8_t *)base + 4 * i, 4);
	return v;
}

/* Value j of a little-endian bitstream of `bits`-wide values laid over the
 * 32-bit words base[word0 + w * stride] (w = 0, 1, ...): GPTQ packs along
 * K with stride N, along N with stride 1. Values may straddle two words
 * (3-bit). */
static inline uint32_t ms_bitstream_get(const void *base, size_t word0, size_t stride,
					int bits, int64_t j)
{
	int64_t bit = j * bits;
	size_t w = (size_t)(bit / 32);
	int off = (int)(bit % 32);
	uint64_t v = ms_rd_u32(base, word0 + w * stride);
	if (off + bits > 32)
		v |= (uint64_t)ms_rd_u32(base, word0 + (w + 1) * stride) << 32;
	return (uint32_t)(v >> off) & ((1u << bits) - 1);
}

/* Read a [G, N] float scales tensor (any float dtype) into l's fscale
 * transposed to [N][G], refusing non-finite values. */
int ms_intq_read_scales(struct ms_qlinear *l, const struct ms_checkpoint *ck, const char *name,
			int64_t G, int64_t N, struct ms_err *err);

#endif
