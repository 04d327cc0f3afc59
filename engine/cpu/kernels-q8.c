/*
 * kernels-q8.c: the q8 panel format (kernels-q8.h): the packer, the
 * portable activation prep and the scalar gemmq that defines, bit for bit,
 * what the vectorized kernels compute.
 */
#include "kernels-q8.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bf16.h"
#include "ms-error.h"

#define Q8_HUGE_PAGE ((size_t)2 << 20)
#define Q8_HUGE_MIN ((size_t)4 << 20) /* packs from this size on use huge pages */

const uint8_t ms_q8_lut12[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

static int64_t up(int64_t v, int64_t a)
{
	return (v + a - 1) / a * a;
}

/* fp16 bits of f when f is exactly an fp16 value (normal, subnormal or
 * zero); false otherwise. */
static bool f32_to_f16_exact(float f, uint16_t *h)
{
	if (!isfinite(f))
		return false;
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	float a = fabsf(f);
	if (a == 0.0f) {
		*h = sign;
		return true;
	}
	if (a > 65504.0f)
		return false;
	uint32_t c;
	if (a < 0x1p-14f) {
		/* subnormal: a must be m * 2^-24, m < 1024 (exact in fp32) */
		float m = a * 0x1p24f;
		if (m != floorf(m))
			return false;
		c = (uint32_t)m;
	} else {
		uint32_t u = ms_f32_bits(a), e = (u >> 23) - 127 + 15, man = u & 0x7FFFFF;
		if (man & 0x1FFF)
			return false; /* more than 10 mantissa bits */
		c = (e << 10) | (man >> 13);
	}
	*h = (uint16_t)(sign | c);
	return ms_f16_to_f32(*h) == f; /* belt and braces */
}

/* ---- packing ---- */

struct pack_ctx {
	const struct ms_wmat *w;
	struct ms_q8_pack *h;
	uint8_t *panels;
	const int32_t *perm;      /* NULL: natural order */
	int sb;                   /* INTQ storage bits per code */
	unsigned mask;            /* INTQ code mask */
	int64_t gs;               /* INTQ group size (natural order after perm) */
	uint8_t *codes;           /* scratch: one row's codes [kp] */
	uint16_t *hs;             /* scratch: one row's fp16 scales [n_groups] */
	uint8_t *zs;              /* scratch: one row's zero points [n_groups] */
	int32_t *bgroup;          /* INTQ: the group of each block [n_blocks] */
};

/* The group of packed block b: groups are whole blocks (group size a
 * multiple of 32, or one group >= cols), in packed order also with perm. */
static int64_t block_group(const struct pack_ctx *c, int64_t b)
{
	return c->gs >= c->w->cols ? 0 : b * MS_Q8_BLOCK / c->gs;
}

/* One source code of row r (storage layout of ms_wmat_row_f32). */
static unsigned src_code(const struct ms_wmat *w, const uint8_t *row, int sb, unsigned mask,
			 int64_t k)
{
	if (w->fmt == MS_WFMT_MXFP4)
		return (k & 1) ? row[k / 2] >> 4 : row[k / 2] & 0x0F;
	int64_t bit = k * sb;
	return (row[bit / 8] >> (bit % 8)) & mask;
}

/* Nibbles n0..n3 of x (bits 0-15) into the low nibbles of bytes 0..3. */
static uint32_t spread16(uint32_t x)
{
	x = (x | (x << 8)) & 0x00FF00FFu;
	return (x | (x << 4)) & 0x0F0F0F0Fu;
}

/* Store one lane's 32 codes c[0..31] of a block (u8 each) into the block's
 * code bytes. */
static void put_block_codes(int kind, uint8_t *blk, int lane, const uint8_t *c)
{
	if (kind == MS_Q8_INT8) {
		for (int s = 0; s < 8; s++)
			memcpy(blk + 64 * s + 4 * lane, c + 4 * s, 4);
		return;
	}
	for (int s = 0; s < 4; s++)
		for (int j = 0; j < 4; j++)
			blk[64 * s + 4 * lane + j] = (uint8_t)(c[8 * s + j] | (c[8 * s + 4 + j] << 4));
}

/* Checks and converts row r's INTQ scales and zeros; -ENOTSUP with the
 * reason. */
static int row_meta(struct pack_ctx *c, int64_t r, struct ms_err *err)
{
	const struct ms_wmat *w = c->w;
	int64_t G = w->n_groups;
	int zmax = w->bits == 8 ? 255 : 15;
	for (int64_t g = 0; g < G; g++) {
		float s = w->fscale[r * G + g], z = w->fzero[r * G + g];
		if (!f32_to_f16_exact(s, &c->hs[g]))
			return ms_err_set(err, -ENOTSUP,
					  "row %lld group %lld: scale %.9g is not exactly an fp16 value",
					  (long long)r, (long long)g, (double)s);
		if (!(z >= 0.0f && z <= (float)zmax && z == floorf(z)))
			return ms_err_set(err, -ENOTSUP,
					  "row %lld group %lld: zero point %.9g is not an integer in [0, %d]",
					  (long long)r, (long long)g, (double)z, zmax);
		c->zs[g] = (uint8_t)z;
	}
	return 0;
}

/* Row r's codes in packed column order, padded to kp (MXFP4: 0; INTQ: the
 * zero point of the last block's group), into c->codes. */
static void row_codes(struct pack_ctx *c, int64_t r)
{
	const struct ms_wmat *w = c->w;
	const struct ms_q8_pack *h = c->h;
	const uint8_t *row = w->w + (size_t)r * w->row_bytes;
	int64_t K = w->cols;
	if (c->perm) {
		for (int64_t k = 0; k < K; k++)
			c->codes[k] = (uint8_t)src_code(w, row, c->sb, c->mask, c->perm[k]);
	} else if (w->fmt == MS_WFMT_INTQ && c->sb == 8) {
		memcpy(c->codes, row, (size_t)K);
	} else if (c->sb == 4 || w->fmt == MS_WFMT_MXFP4) {
		for (int64_t k = 0; k + 1 < K; k += 2) {
			c->codes[k] = row[k / 2] & c->mask & 0x0F;
			c->codes[k + 1] = (row[k / 2] >> 4) & c->mask;
		}
		if (K & 1)
			c->codes[K - 1] = row[K / 2] & c->mask & 0x0F;
	} else {
		for (int64_t k = 0; k < K; k++)
			c->codes[k] = (uint8_t)src_code(w, row, c->sb, c->mask, k);
	}
	uint8_t pad = h->kind == MS_Q8_MXFP4 ? 0 : c->zs[c->bgroup[h->n_blocks - 1]];
	memset(c->codes + K, pad, (size_t)(h->kp - K));
}

/* Pack lane `lane` of panel p from row r. */
static void pack_lane(struct pack_ctx *c, uint8_t *pan, int lane, int64_t r)
{
	const struct ms_wmat *w = c->w;
	const struct ms_q8_pack *h = c->h;
	int64_t nb = h->n_blocks, BB = h->block_bytes, cb = ms_q8_code_bytes(h->kind);
	/* Fast path for the common layouts: whole blocks of 4-bit codes in
	 * natural order straight from the row, 8 codes (one 32-bit word) at a
	 * time; the rest through the per-row code buffer. */
	bool fast = !c->perm && (w->fmt == MS_WFMT_MXFP4 || c->sb == 4);
	int64_t full = fast ? w->cols / MS_Q8_BLOCK : 0;
	if (full < nb)
		row_codes(c, r);
	const uint8_t *row = w->w + (size_t)r * w->row_bytes;
	uint32_t m32 = c->mask == 7 ? 0x77777777u : 0xFFFFFFFFu;
	for (int64_t b = 0; b < nb; b++) {
		uint8_t *blk = pan + b * BB;
		if (b < full) {
			for (int s = 0; s < 4; s++) {
				uint32_t v;
				memcpy(&v, row + 16 * b + 4 * s, 4);
				v &= m32;
				uint32_t o = spread16(v & 0xFFFF) | (spread16(v >> 16) << 4);
				memcpy(blk + 64 * s + 4 * lane, &o, 4);
			}
		} else {
			put_block_codes(h->kind, blk, lane, c->codes + b * MS_Q8_BLOCK);
		}
		uint8_t *meta = blk + cb;
		if (h->kind == MS_Q8_MXFP4) {
			meta[lane] = w->scales[(size_t)r * w->scale_row_bytes + (size_t)b];
		} else {
			int32_t g = c->bgroup[b];
			memcpy(meta + 2 * lane, &c->hs[g], 2);
			meta[32 + lane] = c->zs[g];
		}
	}
}

/* A padding lane: codes 0 (MXFP4) or zero point 0 with code 0 and scale 0
 * (INTQ), so it contributes 0 and its row is never written. */
static void pad_lane(const struct ms_q8_pack *h, uint8_t *pan, int lane)
{
	int64_t cb = ms_q8_code_bytes(h->kind);
	for (int64_t b = 0; b < h->n_blocks; b++) {
		uint8_t *blk = pan + b * h->block_bytes;
		for (int64_t s = 0; s < cb / 64; s++)
			memset(blk + 64 * s + 4 * lane, 0, 4);
		uint8_t *meta = blk + cb;
		if (h->kind == MS_Q8_MXFP4) {
			meta[lane] = 0;
		} else {
			memset(meta + 2 * lane, 0, 2);
			meta[32 + lane] = 0;
		}
	}
}

/* Act-order: the columns sorted stably by group, when every row shares one
 * g_idx whose groups hold group_size columns each (the last: the rest).
 * *perm = NULL when that order is the natural one. */
static int make_perm(const struct ms_wmat *w, int32_t **perm, struct ms_err *err)
{
	*perm = NULL;
	if (!w->row_g_idx)
		return 0;
	int64_t K = w->cols, G = w->n_groups, gs = w->group_size;
	const int32_t *g0 = w->row_g_idx[0];
	for (int64_t r = 1; r < w->rows; r++)
		if (w->row_g_idx[r] != g0 && memcmp(w->row_g_idx[r], g0, (size_t)K * sizeof(int32_t)))
			return ms_err_set(err, -ENOTSUP,
					  "rows 0 and %lld use different g_idx (a matrix spliced from "
					  "differently ordered parts)", (long long)r);
	int64_t *cnt = calloc((size_t)G + 1, sizeof(*cnt));
	if (!cnt)
		return ms_err_set(err, -ENOMEM, "out of memory for the act-order permutation");
	bool natural = true;
	for (int64_t k = 0; k < K; k++) {
		if (g0[k] < 0 || g0[k] >= G) {
			free(cnt);
			return ms_err_set(err, -ENOTSUP, "g_idx[%lld] = %d is not a group in [0, %lld)",
					  (long long)k, g0[k], (long long)G);
		}
		cnt[g0[k] + 1]++;
		natural &= g0[k] == (gs >= K ? 0 : k / gs);
	}
	for (int64_t g = 0; g < G; g++) {
		int64_t want = K - g * gs < gs ? K - g * gs : gs;
		want = want < 0 ? 0 : want;
		if (cnt[g + 1] != want) {
			long long have = (long long)cnt[g + 1];
			free(cnt);
			return ms_err_set(err, -ENOTSUP,
					  "act-order group %lld has %lld columns, not %lld (group size %lld)",
					  (long long)g, have, (long long)want, (long long)gs);
		}
	}
	if (natural) {
		free(cnt);
		return 0;
	}
	int32_t *p = malloc((size_t)K * sizeof(int32_t));
	if (!p) {
		free(cnt);
		return ms_err_set(err, -ENOMEM, "out of memory for the act-order permutation");
	}
	for (int64_t g = 0; g < G; g++)
		cnt[g + 1] += cnt[g];
	for (int64_t k = 0; k < K; k++)
		p[cnt[g0[k]]++] = (int32_t)k; /* stable: k ascending within a group */
	free(cnt);
	*perm = p;
	return 0;
}

int ms_q8_pack(struct ms_wmat *w, void **owned, struct ms_err *err)
{
	*owned = NULL;
	int kind, bits = 4;
	if (w->fmt == MS_WFMT_MXFP4) {
		kind = MS_Q8_MXFP4;
	} else if (w->fmt == MS_WFMT_INTQ && (w->bits == 2 || w->bits == 3 || w->bits == 4)) {
		kind = MS_Q8_INT4;
		bits = w->bits;
	} else if (w->fmt == MS_WFMT_INTQ && w->bits == 8) {
		kind = MS_Q8_INT8;
		bits = 8;
	} else {
		return ms_err_set(err, -ENOTSUP, "q8 panels take MXFP4 and 2/3/4/8-bit INTQ, not %s%s",
				  ms_wfmt_name(w->fmt), w->fmt == MS_WFMT_INTQ ? " of this width" : "");
	}
	if (w->rows <= 0 || w->cols <= 0 || !w->w)
		return ms_err_set(err, -ENOTSUP, "q8 panels: empty matrix or rows not resident");
	int64_t K = w->cols;
	if (kind != MS_Q8_MXFP4) {
		int64_t gs = w->group_size;
		if (gs <= 0 || (gs % MS_Q8_BLOCK && gs < K))
			return ms_err_set(err, -ENOTSUP,
					  "group size %lld is neither a multiple of 32 nor >= the %lld columns",
					  (long long)gs, (long long)K);
		if (w->n_groups < (K + gs - 1) / gs)
			return ms_err_set(err, -ENOTSUP, "%lld groups of %lld cannot cover %lld columns",
					  (long long)w->n_groups, (long long)gs, (long long)K);
	}
	int32_t *perm = NULL;
	if (kind != MS_Q8_MXFP4) {
		int rc = make_perm(w, &perm, err);
		if (rc)
			return rc;
	}
	int64_t kp = up(K, MS_Q8_BLOCK), nb = kp / MS_Q8_BLOCK, np = (w->rows + 15) / 16;
	int64_t BB = ms_q8_code_bytes(kind) + ms_q8_meta_bytes(kind), PB = nb * BB;
	size_t hdr = (size_t)up((int64_t)sizeof(struct ms_q8_pack), 64);
	size_t perm_b = perm ? (size_t)up(K * (int64_t)sizeof(int32_t), 64) : 0;
	size_t total = (hdr + perm_b + (size_t)(np * PB) + 63) / 64 * 64;
	/* Decode streams the panels from DRAM: on 4 KiB pages the TLB walks
	 * cost ~10% of the bandwidth (measured: 30 vs 34 GB/s on 2 Zen 4
	 * cores), so a pack of 4 MiB or more asks for transparent huge pages,
	 * 2 MiB aligned (the slack of the alignment is address space, never
	 * touched; the tail past the last whole huge page stays on 4 KiB).
	 * Not from 2 MiB: that put the bench model's down projections (2.2
	 * MiB, a third of the expert bytes) on huge pages too and made their
	 * rows ~2-3% faster per byte, but the kernel's compaction for the
	 * extra huge-page faults doubled the load's system time (MXFP4 bench
	 * model: 1.5-1.8 -> 2.4-3.7 s). A refusal only costs that speed. */
	bool huge = total >= Q8_HUGE_MIN;
	uint8_t *buf = NULL;
	if (posix_memalign((void **)&buf, huge ? Q8_HUGE_PAGE : 64, total))
		buf = NULL;
	if (buf && huge)
		(void)madvise(buf, total / Q8_HUGE_PAGE * Q8_HUGE_PAGE, MADV_HUGEPAGE);
	struct pack_ctx c = {.w = w, .perm = perm, .sb = ms_intq_storage_bits(bits),
			     .mask = kind == MS_Q8_MXFP4 ? 0xF : (1u << bits) - 1,
			     .gs = kind == MS_Q8_MXFP4 ? MS_Q8_BLOCK : w->group_size};
	c.codes = malloc((size_t)kp);
	c.hs = malloc((size_t)(w->n_groups > 0 ? w->n_groups : 1) * sizeof(uint16_t));
	c.zs = malloc((size_t)(w->n_groups > 0 ? w->n_groups : 1));
	c.bgroup = malloc((size_t)nb * sizeof(int32_t));
	int rc = 0;
	if (!buf || !c.codes || !c.hs || !c.zs || !c.bgroup) {
		rc = ms_err_set(err, -ENOMEM, "out of memory for %zu bytes of q8 panels", total);
		goto out;
	}
	struct ms_q8_pack *h = (struct ms_q8_pack *)buf;
	memset(h, 0, hdr);
	*h = (struct ms_q8_pack){.magic = MS_Q8_MAGIC, .kind = kind, .act = MS_Q8_ACT_POW2,
				 .bits = bits, .fmt = w->fmt, .rows = w->rows, .cols = K, .kp = kp,
				 .n_blocks = nb, .n_panels = np, .block_bytes = BB, .panel_bytes = PB};
	if (perm) {
		memcpy(buf + hdr, perm, (size_t)K * sizeof(int32_t));
		h->perm = (const int32_t *)(buf + hdr);
	}
	h->panels = buf + hdr + perm_b;
	c.h = h;
	for (int64_t b = 0; b < nb; b++)
		c.bgroup[b] = (int32_t)block_group(&c, b);
	c.panels = buf + hdr + perm_b;
	for (int64_t p = 0; p < np && !rc; p++) {
		uint8_t *pan = c.panels + p * PB;
		for (int lane = 0; lane < 16; lane++) {
			int64_t r = p * 16 + lane;
			if (r >= w->rows) {
				pad_lane(h, pan, lane);
				continue;
			}
			if (kind != MS_Q8_MXFP4 && (rc = row_meta(&c, r, err)))
				break;
			pack_lane(&c, pan, lane, r);
		}
	}
	if (!rc) {
		w->pack = h;
		w->pack_bytes = (size_t)(np * PB);
		w->pack_row = ms_q8_pack_row;
		*owned = buf;
		buf = NULL;
	}
out:
	free(buf);
	free(perm);
	free(c.codes);
	free(c.hs);
	free(c.zs);
	free(c.bgroup);
	return rc;
}

void ms_q8_set_act(void *owned, enum ms_q8_act act)
{
	((struct ms_q8_pack *)owned)->act = act;
}

/* One lane's code of packed column kk. */
static unsigned packed_code(const struct ms_q8_pack *h, const uint8_t *pan, int lane, int64_t kk)
{
	const uint8_t *blk = pan + (kk / MS_Q8_BLOCK) * h->block_bytes;
	int c = (int)(kk % MS_Q8_BLOCK);
	if (h->kind == MS_Q8_INT8)
		return blk[64 * (c / 4) + 4 * lane + (c % 4)];
	uint8_t v = blk[64 * (c / 8) + 4 * lane + (c % 4)];
	return (c % 8) < 4 ? v & 0x0F : v >> 4;
}

void ms_q8_pack_row(const void *pack, int64_t r, float *out)
{
	const struct ms_q8_pack *h = pack;
	const uint8_t *pan = h->panels + (r / 16) * h->panel_bytes;
	int lane = (int)(r % 16);
	int64_t cb = ms_q8_code_bytes(h->kind);
	for (int64_t kk = 0; kk < h->cols; kk++) {
		const uint8_t *meta = pan + (kk / MS_Q8_BLOCK) * h->block_bytes + cb;
		unsigned code = packed_code(h, pan, lane, kk);
		float v;
		if (h->kind == MS_Q8_MXFP4) {
			v = ms_e2m1_lut[code] * ms_e8m0_to_f32(meta[lane]);
		} else {
			uint16_t hs;
			memcpy(&hs, meta + 2 * lane, 2);
			/* the same two roundings as ms_wmat_row_f32 on the source */
			v = ms_f16_to_f32(hs) * ((float)code - (float)meta[32 + lane]);
		}
		out[h->perm ? h->perm[kk] : kk] = v;
	}
}

/* ---- activation prep ---- */

size_t ms_q8_prep_size(const struct ms_wmat *w, int64_t n)
{
	const struct ms_q8_pack *h = w->pack;
	return (size_t)n * ms_q8_xq_stride(h->kp);
}

#define Q8_TINY_BITS 0x0F800000u /* 2^-96: smaller blocks are zero */
#define Q8_INF_BITS 0x7F800000u

/* One block of 32 values (gathered, zero padded) to q, d, s. */
static void prep_block(const float *x, int act, int8_t *q, float *d, int32_t *s)
{
	uint32_t abits = 0;
	for (int j = 0; j < 32; j++) {
		uint32_t a = ms_f32_bits(x[j]) & 0x7FFFFFFFu;
		abits = a > abits ? a : abits;
	}
	*s = 0;
	if (abits >= Q8_INF_BITS || abits < Q8_TINY_BITS) {
		memset(q, 0, 32);
		*d = abits >= Q8_INF_BITS ? ms_bits_f32(0x7FC00000u) : 0.0f;
		return;
	}
	float amax = ms_bits_f32(abits);
	int32_t qi[32], sum = 0;
	if (act == MS_Q8_ACT_POW2) {
		/* smallest e with 127 * 2^e >= amax: from amax = 1.m * 2^(ex-127),
		 * 1.m <= 127/64 <=> m <= 0x7E0000 */
		int32_t e = (int32_t)(abits >> 23) - 133 + ((abits & 0x7FFFFF) > 0x7E0000);
		float d2 = ms_bits_f32((uint32_t)(e + 127) << 23), inv2 = ms_bits_f32((uint32_t)(127 - e) << 23);
		bool exact = true;
		for (int j = 0; j < 32; j++) {
			qi[j] = (int32_t)lrintf(x[j] * inv2);
			exact &= (float)qi[j] * d2 == x[j];
		}
		if (exact) {
			for (int j = 0; j < 32; j++) {
				q[j] = (int8_t)qi[j];
				sum += qi[j];
			}
			*d = d2;
			*s = sum;
			return;
		}
	}
	float inv = 127.0f / amax;
	for (int j = 0; j < 32; j++) {
		long v = lrintf(x[j] * inv);
		v = v > 127 ? 127 : v < -127 ? -127 : v;
		q[j] = (int8_t)v;
		sum += (int32_t)v;
	}
	*d = amax / 127.0f;
	*s = sum;
}

void ms_q8_prep(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	const struct ms_q8_pack *h = w->pack;
	int64_t K = h->cols, kp = h->kp, nb = h->n_blocks;
	float buf[MS_Q8_BLOCK];
	for (int64_t t = 0; t < n; t++) {
		const float *xt = x + t * ldx;
		int8_t *q = (int8_t *)ms_q8_xq_q(xq, kp, t);
		float *d = (float *)ms_q8_xq_d(xq, kp, t);
		int32_t *s = (int32_t *)ms_q8_xq_s(xq, kp, t);
		for (int64_t b = 0; b < nb; b++) {
			for (int j = 0; j < MS_Q8_BLOCK; j++) {
				int64_t k = b * MS_Q8_BLOCK + j;
				buf[j] = k < K ? xt[h->perm ? h->perm[k] : k] : 0.0f;
			}
			prep_block(buf, h->act, q + b * MS_Q8_BLOCK, d + b, s + b);
		}
		ms_q8_xq_fill_c(h->kind, xq, kp, t);
	}
}

/* ---- scalar gemmq ---- */

/* 2^(e - 128) exactly (e = 0, 1 give the subnormals 2^-128, 2^-127). */
static float mx_scale(uint8_t e)
{
	return e >= 2 ? ms_bits_f32((uint32_t)(e - 1) << 23) : ms_bits_f32(0x00200000u << e);
}

void ms_q8_gemmq_ref(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		     float *y, int64_t ldy)
{
	const struct ms_q8_pack *h = w->pack;
	int64_t kp = h->kp, nb = h->n_blocks, cb = ms_q8_code_bytes(h->kind);
	for (int64_t p = r0 / 16; p * 16 < r1; p++) {
		const uint8_t *pan = h->panels + p * h->panel_bytes;
		for (int64_t t = 0; t < n; t++) {
			const int8_t *q = ms_q8_xq_q(xq, kp, t);
			const float *d = ms_q8_xq_d(xq, kp, t);
			const int32_t *s = ms_q8_xq_s(xq, kp, t);
			float acc[16] = {0};
			for (int64_t b = 0; b < nb; b++) {
				const uint8_t *meta = pan + b * h->block_bytes + cb;
				const int8_t *qb = q + b * MS_Q8_BLOCK;
				for (int i = 0; i < 16; i++) {
					int32_t dot = 0;
					for (int j = 0; j < MS_Q8_BLOCK; j++) {
						unsigned c = packed_code(h, pan, i, b * MS_Q8_BLOCK + j);
						int32_t u = h->kind == MS_Q8_MXFP4 ? ms_q8_lut12[c] : (int32_t)c;
						dot += u * qb[j];
					}
					float scale;
					int32_t zero;
					if (h->kind == MS_Q8_MXFP4) {
						scale = mx_scale(meta[i]);
						zero = 12;
					} else {
						uint16_t hs;
						memcpy(&hs, meta + 2 * i, 2);
						scale = ms_f16_to_f32(hs);
						zero = meta[32 + i];
					}
					float sd = scale * d[b];
					acc[i] = fmaf((float)(dot - zero * s[b]), sd, acc[i]);
				}
			}
			for (int i = 0; i < 16 && p * 16 + i < r1; i++)
				y[t * ldy + p * 16 + i] = acc[i];
		}
	}
}
