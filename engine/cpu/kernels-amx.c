/*
 * kernels-amx.c: Intel AMX tile kernels for prefill.
 *
 * Built twice (engine/meson.build): for the real tiles (-mamx-tile
 * -mamx-int8 -mamx-bf16: the "amx" kernel set, chosen only where CPUID, XCR0
 * and the kernel's tile permission all allow it), and with -DMS_AMX_SIM on
 * the software tile model of amx-sim.h (the "amx-sim" set: only when forced
 * with --kernels amx-sim, so that the whole daemon and its tests run these
 * code paths on machines without AMX; symbols get a _sim suffix).
 *
 * A token's output never depends on how many tokens share the call (batch
 * invariance): int8 under AMX_MIN_TOKENS tokens runs the AVX-512 VNNI
 * kernel, bitwise the same results; bf16 runs the tiles at any count (fewer
 * than 16 tokens: the prepared rows are zero-padded to 16, whose products
 * cost nothing extra in a tile). An AVX-512 path computing TDPBF16PS's
 * arithmetic was used under 16 tokens before; on a Xeon with AMX it matched
 * the tiles bit for bit but streamed decode's weights at about half the
 * memory bandwidth, where the tiles are not compute-bound even at 1 token.
 *
 * Measured on that Xeon (5th generation, 2 threads, tests/test-amx --bench,
 * 4096 x 2048, GFLOP/s): bf16 tiles 716 / 1216 / 1068 at 16 / 64 / 512
 * tokens (AVX512-BF16 142-162, oneDNN 488-960); int8 tiles for MXFP4 314 /
 * 680 / 484 and INTQ 402 / 654 / 611 (VNNI 539 / 555 / 512 and 526 / 518 /
 * 464), hence the int8 threshold of 32 tokens, between the measured counts
 * where VNNI and the tiles cross. Dequantizing MXFP4 / INTQ weights to bf16
 * per call for the bf16 tiles was tried: 1161-1237 GFLOP/s at 64-512
 * tokens, but batch invariance makes decode take the same path, and there
 * it ran at 32 (MXFP4) and 22 (INTQ) GFLOP/s at 1 token against VNNI's
 * 175 and 161 (every streamed weight dequantized): decode fell from 0.95
 * to 0.42 of the bandwidth roofline, prefill did not gain (0.41 of oneDNN
 * either way), so the q8 formats stay on int8 tiles.
 *
 * int8 (MXFP4, INTQ; formats of kernels-q8.h): weights in q8 panels,
 * activations prepared by the q8 prep. Per 32-column block: the block's
 * codes become the B tile (8 rows x 16 lanes x 4 unsigned bytes; 4-bit
 * codes expanded to bytes, MXFP4 through lut12, 8-bit codes loaded as they
 * are), 16 tokens' int8 values the A tile (16 x 32 bytes, the prepared rows'
 * own stride), TDPBSUD gives the 16 x 16 int32 dots, then the q8 epilogue
 * in fp32 per block, in K order: exactly the integers and float operations
 * of ms_q8_gemmq_ref, hence bitwise its results. Under AMX_MIN_TOKENS
 * tokens: ms_q8_gemmq_avx512vnni (bitwise equal too). The 16 accumulators
 * of a token group stay in registers over all blocks (with them in memory,
 * updated per block, the Xeon's prefill was 0.35 of oneDNN's rate, not
 * 0.41).
 *
 * bf16 (MS_WFMT_BF16): packed at load into VNNI-2 B tiles (per panel of 16
 * rows, per 32 columns: 16 tile rows of 64 bytes, row kp = the 16 rows'
 * columns 2kp, 2kp + 1), activations rounded to bf16 (nearest even); C
 * tiles accumulate over all K with TDPBF16PS.
 * Error against the fp32 reference: the bf16 rounding of activations
 * (nearest of an 8-bit significand: relative 2^-8 per element) plus fp32
 * summation. Matrices of fewer than BF16_MIN_ROWS rows are declined at
 * pack time (too little work for tiles; see bf16_pack).
 *
 * Tiles: 4 accumulators (2 panels x 2 groups of 16 tokens), 2 A, 2 B. A
 * last group shorter than 16 tokens is computed as the last 16 tokens of
 * the call (their results are the same bits whichever group computes
 * them) and only its new tokens are written.
 *
 * Exports: ms_kernels_amx[] (real tiles) and ms_kernels_amx_sim[] (the
 * model), declared in kernels.h; ms_amx_request_perm() and
 * ms_kernels_amx_sim_faults(), declared where they are used (cpu.c,
 * tests/engine/test-amx.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "amx-sim.h"
#include "kernels-q8.h"
#include "kernels.h"
#include "ms-error.h"

#ifdef MS_AMX_SIM
#define AMX_SYM(x) x##_sim
#define AMX_ISA "amx-sim"
#else
#define AMX_SYM(x) x
#define AMX_ISA "amx"
#endif

#define AMX_MIN_TOKENS 32 /* int8: below, the AVX-512 VNNI kernel (measured above) */

/* Tile numbers (immediates in the instructions). */
#define T_C00 0 /* tokens group 0 x panel 0 */
#define T_C01 1 /* group 0 x panel 1 */
#define T_C10 2 /* group 1 x panel 0 */
#define T_C11 3 /* group 1 x panel 1 */
#define T_A0 4
#define T_A1 5
#define T_B0 6
#define T_B1 7

/* int8: A 16 tokens x 32 bytes, B 8 rows x 64 bytes, C 16 x 16 int32. */
static const _Alignas(64) struct ms_amx_tilecfg q8_cfg = {
	.palette_id = 1,
	.colsb = {64, 64, 64, 64, 32, 32, 64, 64},
	.rows = {16, 16, 16, 16, 16, 16, 8, 8},
};
/* bf16: A 16 tokens x 32 bf16, B 16 pair rows x 64 bytes, C 16 x 16 fp32. */
static const _Alignas(64) struct ms_amx_tilecfg bf16_cfg = {
	.palette_id = 1,
	.colsb = {64, 64, 64, 64, 64, 64, 64, 64},
	.rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

#ifdef MS_AMX_SIM
/* A model fault (a kernel bug: hardware would have raised #UD / #GP) cannot
 * be returned through gemmq: its outputs become NaN and it is counted, so
 * every test comparing results, and ms_kernels_amx_sim_faults, sees it. */
static unsigned long sim_faults;

unsigned long ms_kernels_amx_sim_faults(void);
unsigned long ms_kernels_amx_sim_faults(void)
{
	return __atomic_load_n(&sim_faults, __ATOMIC_RELAXED);
}

static void sim_check(int64_t r0, int64_t r1, int64_t n, float *y, int64_t ldy)
{
	if (!ms_amx_sim_fault())
		return;
	__atomic_fetch_add(&sim_faults, 1, __ATOMIC_RELAXED);
	for (int64_t t = 0; t < n; t++)
		for (int64_t r = r0; r < r1; r++)
			y[t * ldy + r] = __builtin_nanf("");
	ms_amx_sim_clear_fault();
}
#else
static void sim_check(int64_t r0, int64_t r1, int64_t n, float *y, int64_t ldy)
{
	(void)r0, (void)r1, (void)n, (void)y, (void)ldy;
}

/* Linux gives a process the 8 KiB of tile data state only on request
 * (arch/x86 ARCH_REQ_XCOMP_PERM, kernel 5.16+); without it the first tile
 * instruction faults. */
#define MS_ARCH_REQ_XCOMP_PERM 0x1023
#define MS_XFEATURE_XTILEDATA 18

int ms_amx_request_perm(void);
int ms_amx_request_perm(void)
{
	if (syscall(SYS_arch_prctl, MS_ARCH_REQ_XCOMP_PERM, MS_XFEATURE_XTILEDATA) != 0)
		return -errno;
	return 0;
}
#endif

/* Output lanes of panel p inside [.., r1), as a store mask. */
static inline __mmask16 lane_mask(int64_t p, int64_t r1)
{
	int64_t left = r1 - p * 16;
	return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* ---- int8: q8 panels ---- */

/* 2^(e - 128) for 16 E8M0 bytes, exactly (e < 2 gives the subnormals
 * 2^-127, 2^-128), as the q8 reference's scale. */
static inline __m512 e8m0_half(const uint8_t *e)
{
	__m512i ev = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
	__m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(ev, _mm512_set1_epi32(1)), 23);
	__m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), ev);
	__mmask16 big = _mm512_cmpge_epi32_mask(ev, _mm512_set1_epi32(2));
	return _mm512_castsi512_ps(_mm512_mask_blend_epi32(big, sub, normal));
}

/* Block b of one panel: the B tile (into bt, 8 x 64 bytes, or the packed
 * codes themselves for 8-bit ones), the 16 lanes' scales and zero points. */
static inline const uint8_t *q8_block(const struct ms_q8_pack *pk, const uint8_t *blk, uint8_t *bt,
				      __m512 *scale, __m512i *zero)
{
	int64_t cb = ms_q8_code_bytes(pk->kind);
	const uint8_t *meta = blk + cb;
	if (pk->kind == MS_Q8_MXFP4) {
		*scale = e8m0_half(meta);
		*zero = _mm512_set1_epi32(12);
	} else {
		*scale = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)meta));
		*zero = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(meta + 32)));
	}
	if (pk->kind == MS_Q8_INT8)
		return blk; /* 8 sub-steps of 4 columns: already B-tile rows */
	const __m512i lo4 = _mm512_set1_epi8(0x0F);
	const __m512i lut = pk->kind == MS_Q8_MXFP4
				    ? _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ms_q8_lut12))
				    : _mm512_set_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
						      15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
						      15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
						      15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	for (int s = 0; s < 4; s++) {
		__m512i v = _mm512_loadu_si512((const void *)(blk + 64 * s));
		__m512i lo = _mm512_and_si512(v, lo4);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
		_mm512_store_si512((void *)(bt + 128 * s), _mm512_shuffle_epi8(lut, lo));
		_mm512_store_si512((void *)(bt + 128 * s + 64), _mm512_shuffle_epi8(lut, hi));
	}
	return bt;
}

/* One block's tile product for 16 tokens (rows g..g+15 of the prepared
 * activations) and one panel: C = A x B, stored to ct. Tile numbers are
 * immediates, hence a macro. */
#define Q8_ISSUE(tc, ta, tb, xq_g, b, bp, ct)                                                   \
	do {                                                                                   \
		MS_TILE_LOADD(ta, (xq_g) + 32 * (b), xs);                                      \
		MS_TILE_LOADD(tb, (bp)[b], 64);                                                \
		MS_TILE_ZERO(tc);                                                              \
		MS_TILE_DPBSUD(tc, ta, tb);                                                    \
		MS_TILE_STORED(tc, ct, 64);                                                    \
	} while (0)

/* Block b's epilogue for 16 tokens held in registers: acc[i] =
 * fma((float)(dot - zero * s), scale * d, acc[i]), the q8 reference's
 * operations in its order. (float)(dot - zero * s) is computed as
 * fnmadd(zero, s, (float)dot): dot, zero * s and their difference are
 * integers below 2^24 in magnitude (|dot|, |zero * s| <= 32 * 128 * 255),
 * so both forms are exact and equal, and the FMA saves the integer
 * multiply. d and sm: token 0's per-block d and s, tokens tstride bytes
 * apart. (Copying a group's d and s into one table first, per panel,
 * measured 20% slower on a Xeon with AMX.) */
static inline void q8_epilogue16(const int32_t c[16][16], __m512 acc[16], const float *d,
				 const int32_t *sm, long tstride, int64_t b, __m512 scale, __m512 zf)
{
	for (int i = 0; i < 16; i++) {
		const float *dt = (const float *)((const char *)d + i * tstride);
		const int32_t *st = (const int32_t *)((const char *)sm + i * tstride);
		__m512 f = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)c[i]));
		f = _mm512_fnmadd_ps(zf, _mm512_set1_ps((float)st[b]), f);
		acc[i] = _mm512_fmadd_ps(f, _mm512_mul_ps(scale, _mm512_set1_ps(dt[b])), acc[i]);
	}
}

/* AMX_MIN_TOKENS or more: per panel of 16 rows, its blocks' B tiles expanded
 * once (and the scales and zero points as vectors), then per group of 16
 * tokens a pass over the blocks whose 16 accumulators stay in registers,
 * the next block's tile product issued before this block's epilogue. */
static void q8_gemmq(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		     float *y, int64_t ldy)
{
	const struct ms_q8_pack *pk = w->pack;
	int64_t kp = pk->kp, nb = pk->n_blocks, bb = pk->block_bytes;
	/* one panel's expanded B tiles, scales, zero points and B pointers */
	size_t ex_bytes = (size_t)nb * (512 + 64 + 64 + sizeof(void *)) + 64;
	uint8_t *ex = n < AMX_MIN_TOKENS ? NULL : aligned_alloc(64, (ex_bytes + 63) / 64 * 64);
	if (!ex) { /* few tokens, or no memory: bitwise the same results */
		ms_q8_gemmq_avx512vnni(w, r0, r1, xq, n, y, ldy);
		return;
	}
	float *scv = (float *)(ex + (size_t)nb * 512), *zfv = scv + nb * 16;
	const uint8_t **bp = (const uint8_t **)(zfv + nb * 16);
	long xs = (long)ms_q8_xq_stride(kp);
	_Alignas(64) int32_t ct[2][16][16];
	MS_TILE_LOADCONFIG(&q8_cfg);
	for (int64_t p = r0 / 16; p < (r1 + 15) / 16; p++) {
		const uint8_t *pan = pk->panels + p * pk->panel_bytes;
		for (int64_t b = 0; b < nb; b++) {
			__m512 sc;
			__m512i z;
			bp[b] = q8_block(pk, pan + b * bb, ex + b * 512, &sc, &z);
			_mm512_store_ps(scv + b * 16, sc);
			_mm512_store_ps(zfv + b * 16, _mm512_cvtepi32_ps(z));
		}
		__mmask16 lanes = lane_mask(p, r1);
		for (int64_t t0 = 0; t0 < n; t0 += 16) {
			/* a last group shorter than 16: the call's last 16 tokens */
			int64_t g = t0 < n - 16 ? t0 : n - 16;
			const int8_t *xg = ms_q8_xq_q(xq, kp, g);
			const float *dg = ms_q8_xq_d(xq, kp, g);
			const int32_t *sg = ms_q8_xq_s(xq, kp, g);
			__m512 acc[16];
			for (int i = 0; i < 16; i++)
				acc[i] = _mm512_setzero_ps();
			Q8_ISSUE(T_C00, T_A0, T_B0, xg, 0, bp, ct[0]);
			for (int64_t b = 0; b < nb; b += 2) {
				if (b + 1 < nb)
					Q8_ISSUE(T_C01, T_A1, T_B1, xg, b + 1, bp, ct[1]);
				q8_epilogue16(ct[0], acc, dg, sg, xs, b, _mm512_load_ps(scv + b * 16),
					      _mm512_load_ps(zfv + b * 16));
				if (b + 1 >= nb)
					break;
				if (b + 2 < nb)
					Q8_ISSUE(T_C00, T_A0, T_B0, xg, b + 2, bp, ct[0]);
				q8_epilogue16(ct[1], acc, dg, sg, xs, b + 1,
					      _mm512_load_ps(scv + (b + 1) * 16),
					      _mm512_load_ps(zfv + (b + 1) * 16));
			}
			for (int64_t t = t0; t < t0 + 16 && t < n; t++)
				_mm512_mask_storeu_ps(y + t * ldy + p * 16, lanes, acc[t - g]);
		}
	}
	MS_TILE_RELEASE();
	free(ex);
	sim_check(r0, r1, n, y, ldy);
}

/* ---- bf16: VNNI-2 tiles ---- */

#define BF16_MAGIC 0x54423631u /* "16BT" */
#define BF16_MIN_ROWS 256      /* fewer: declined (see bf16_pack) */

struct bf16_pack {
	uint32_t magic;
	int64_t rows, cols;
	int64_t kp;          /* cols rounded up to 32 */
	int64_t n_tiles;     /* kp / 32 per panel */
	int64_t n_panels;    /* ceil(rows / 16) */
	int64_t panel_bytes; /* n_tiles * 1024 */
	const uint8_t *panels; /* 64-byte aligned */
};

/* Byte offset of the pair holding (row i of the panel, column k) in its
 * panel: tile k / 32, tile row (k % 32) / 2, lane i, element k % 2. */
static inline size_t bf16_off(int64_t i, int64_t k)
{
	return (size_t)(k / 32) * 1024 + (size_t)((k % 32) / 2) * 64 + (size_t)i * 4 + (size_t)(k % 2) * 2;
}

static void bf16_pack_row(const void *pack, int64_t r, float *out)
{
	const struct bf16_pack *pk = pack;
	const uint8_t *pan = pk->panels + (r / 16) * pk->panel_bytes;
	for (int64_t k = 0; k < pk->cols; k++) {
		uint16_t h;
		memcpy(&h, pan + bf16_off(r % 16, k), 2);
		out[k] = ms_bf16_to_f32(h);
	}
}

static int bf16_pack(struct ms_wmat *w, void **owned, struct ms_err *err)
{
	*owned = NULL;
	if (w->fmt != MS_WFMT_BF16 || !w->w)
		return ms_err_set(err, -ENOTSUP, "not bf16 rows");
	if (w->rows <= 0 || w->cols <= 0 || w->cols > (INT64_C(1) << 40) || w->rows > (INT64_C(1) << 40))
		return ms_err_set(err, -ENOTSUP, "shape %lld x %lld", (long long)w->rows,
				  (long long)w->cols);
	/* A few rows: the tile setup and the bf16 conversion of the inputs
	 * cost more than the product saves; the next candidate takes them.
	 * (The MoE router, whose top-k flips under rounded inputs, is kept
	 * on fp32 activations by its matrix's exact_acts, whatever its size.) */
	if (w->rows < BF16_MIN_ROWS)
		return ms_err_set(err, -ENOTSUP, "%lld rows: below %d, too little work for tiles",
				  (long long)w->rows, BF16_MIN_ROWS);
	int64_t kp = (w->cols + 31) / 32 * 32, np = (w->rows + 15) / 16;
	int64_t panel_bytes = kp / 32 * 1024;
	size_t head = (sizeof(struct bf16_pack) + 63) / 64 * 64;
	if ((uint64_t)np > (SIZE_MAX - head) / (uint64_t)panel_bytes)
		return ms_err_set(err, -ENOMEM, "bf16 tiles: %lld x %lld too large", (long long)w->rows,
				  (long long)w->cols);
	size_t bytes = head + (size_t)np * (size_t)panel_bytes;
	uint8_t *buf = aligned_alloc(64, bytes);
	if (!buf)
		return ms_err_set(err, -ENOMEM, "bf16 tiles: out of memory (%zu bytes)", bytes);
	uint8_t *data = buf + head;
	/* Zeros where rows or columns are padding: they add nothing. */
	memset(data, 0, (size_t)np * (size_t)panel_bytes);
	for (int64_t r = 0; r < w->rows; r++) {
		const uint8_t *src = w->w + (size_t)r * w->row_bytes;
		uint8_t *pan = data + (r / 16) * panel_bytes;
		for (int64_t k = 0; k + 1 < w->cols; k += 2)
			memcpy(pan + bf16_off(r % 16, k), src + 2 * k, 4);
		if (w->cols % 2)
			memcpy(pan + bf16_off(r % 16, w->cols - 1), src + 2 * (w->cols - 1), 2);
	}
	struct bf16_pack *pk = (struct bf16_pack *)buf;
	*pk = (struct bf16_pack){.magic = BF16_MAGIC, .rows = w->rows, .cols = w->cols, .kp = kp,
				 .n_tiles = kp / 32, .n_panels = np, .panel_bytes = panel_bytes,
				 .panels = data};
	w->pack = pk;
	w->pack_bytes = (size_t)np * (size_t)panel_bytes;
	w->pack_row = bf16_pack_row;
	*owned = buf;
	return 0;
}

/* At least 16 rows: a call of fewer tokens gets zero rows up to a tile. */
static size_t bf16_prep_size(const struct ms_wmat *w, int64_t n)
{
	int64_t kp = (w->cols + 31) / 32 * 32;
	return (size_t)(n > 16 ? n : 16) * (size_t)kp * 2;
}

/* fp32 to bf16, round to nearest even; NaN stays a (quiet) NaN. */
static inline __m256i f32_bf16(__m512 x)
{
	__m512i u = _mm512_castps_si512(x);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
	r = _mm512_srli_epi32(r, 16);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
	return _mm512_cvtepi32_epi16(r);
}

/* Row t: kp bf16 values (zeros past cols), stride kp; rows n..15 zero. */
static void bf16_prep(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	int64_t K = w->cols, kp = (K + 31) / 32 * 32;
	if (n < 16)
		memset((uint16_t *)xq + n * kp, 0, (size_t)((16 - n) * kp) * 2);
	for (int64_t t = 0; t < n; t++) {
		const float *xt = x + t * ldx;
		uint16_t *o = (uint16_t *)xq + t * kp;
		for (int64_t k = 0; k < kp; k += 16) {
			int64_t left = K - k;
			__mmask16 m = left >= 16 ? (__mmask16)0xFFFF
					  : left > 0 ? (__mmask16)((1u << left) - 1) : (__mmask16)0;
			_mm256_storeu_si256((__m256i *)(o + k), f32_bf16(_mm512_maskz_loadu_ps(m, xt + k)));
		}
	}
}

static void bf16_gemmq(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		       float *y, int64_t ldy)
{
	const struct bf16_pack *pk = w->pack;
	const uint16_t *xb = xq;
	if (n <= 0 || r1 <= r0)
		return;
	/* token groups over nt >= 16 prepared rows; outputs for the n real ones */
	int64_t nt = n > 16 ? n : 16;
	int64_t kp = pk->kp, p_end = (r1 + 15) / 16;
	long xs = (long)(kp * 2);
	_Alignas(64) float ct[4][16][16];
	MS_TILE_LOADCONFIG(&bf16_cfg);
	for (int64_t p0 = r0 / 16; p0 < p_end; p0 += 2) {
		bool two_p = p0 + 1 < p_end;
		const uint8_t *pan0 = pk->panels + p0 * pk->panel_bytes;
		const uint8_t *pan1 = pan0 + pk->panel_bytes;
		for (int64_t t0 = 0; t0 < n; t0 += 32) {
			bool two_g = t0 + 16 < n;
			int64_t g0 = t0 < nt - 16 ? t0 : nt - 16;
			int64_t g1 = t0 + 16 < nt - 16 ? t0 + 16 : nt - 16;
			const uint16_t *a0 = xb + g0 * kp, *a1 = xb + g1 * kp;
			MS_TILE_ZERO(T_C00);
			MS_TILE_ZERO(T_C01);
			MS_TILE_ZERO(T_C10);
			MS_TILE_ZERO(T_C11);
			for (int64_t j = 0; j < pk->n_tiles; j++) {
				MS_TILE_LOADD(T_A0, a0 + 32 * j, xs);
				MS_TILE_LOADD(T_B0, pan0 + j * 1024, 64);
				MS_TILE_DPBF16PS(T_C00, T_A0, T_B0);
				if (two_p) {
					MS_TILE_LOADD(T_B1, pan1 + j * 1024, 64);
					MS_TILE_DPBF16PS(T_C01, T_A0, T_B1);
				}
				if (two_g) {
					MS_TILE_LOADD(T_A1, a1 + 32 * j, xs);
					MS_TILE_DPBF16PS(T_C10, T_A1, T_B0);
					if (two_p)
						MS_TILE_DPBF16PS(T_C11, T_A1, T_B1);
				}
			}
			MS_TILE_STORED(T_C00, ct[0], 64);
			MS_TILE_STORED(T_C01, ct[1], 64);
			MS_TILE_STORED(T_C10, ct[2], 64);
			MS_TILE_STORED(T_C11, ct[3], 64);
			int64_t e0 = t0 + 16 < n ? t0 + 16 : n, e1 = t0 + 32 < n ? t0 + 32 : n;
			for (int64_t t = t0; t < e0; t++) {
				_mm512_mask_storeu_ps(y + t * ldy + p0 * 16, lane_mask(p0, r1),
						      _mm512_load_ps(ct[0][t - g0]));
				if (two_p)
					_mm512_mask_storeu_ps(y + t * ldy + (p0 + 1) * 16, lane_mask(p0 + 1, r1),
							      _mm512_load_ps(ct[1][t - g0]));
			}
			if (two_g)
				for (int64_t t = t0 + 16; t < e1; t++) {
					_mm512_mask_storeu_ps(y + t * ldy + p0 * 16, lane_mask(p0, r1),
							      _mm512_load_ps(ct[2][t - g1]));
					if (two_p)
						_mm512_mask_storeu_ps(y + t * ldy + (p0 + 1) * 16,
								      lane_mask(p0 + 1, r1),
								      _mm512_load_ps(ct[3][t - g1]));
				}
		}
	}
	MS_TILE_RELEASE();
	sim_check(r0, r1, n, y, ldy);
}

/* ---- the kernel set ---- */

#define AVX512_VNNI_FLAGS                                                                      \
	(MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_AVX512VNNI | MS_CPU_FMA |  \
	 MS_CPU_F16C)
#ifdef MS_AMX_SIM
#define AMX_FLAGS AVX512_VNNI_FLAGS
#else
#define AMX_FLAGS                                                                              \
	(AVX512_VNNI_FLAGS | MS_CPU_AVX512BF16 | MS_CPU_AMX_TILE | MS_CPU_AMX_INT8 |            \
	 MS_CPU_AMX_BF16)
#endif

const struct ms_kernel AMX_SYM(ms_kernels_amx)[MS_K_AMX_COUNT + 1] = {
	[MS_K_AMX_BF16] = {.name = AMX_ISA "-bf16", .isa = AMX_ISA, .fmt = MS_WFMT_BF16,
	 .cpu_flags = AMX_FLAGS, .pack = bf16_pack, .prep_size = bf16_prep_size, .prep = bf16_prep,
	 .gemmq = bf16_gemmq, .row_align = 16, .rounds_acts = true},
	[MS_K_AMX_MXFP4] = {.name = AMX_ISA "-mxfp4", .isa = AMX_ISA, .fmt = MS_WFMT_MXFP4,
	 .cpu_flags = AMX_FLAGS, .pack = ms_q8_pack, .prep_size = ms_q8_prep_size,
	 .prep = ms_q8_prep_avx512, .gemmq = q8_gemmq, .row_align = 16, .rounds_acts = true},
	[MS_K_AMX_INTQ] = {.name = AMX_ISA "-intq", .isa = AMX_ISA, .fmt = MS_WFMT_INTQ,
	 .cpu_flags = AMX_FLAGS, .pack = ms_q8_pack, .prep_size = ms_q8_prep_size,
	 .prep = ms_q8_prep_avx512, .gemmq = q8_gemmq, .row_align = 16, .rounds_acts = true},
	[MS_K_AMX_COUNT] = {0},
};
