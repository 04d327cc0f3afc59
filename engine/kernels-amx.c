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
 * Tiles pay only when a matrix sees at least AMX_MIN_TOKENS tokens in one
 * call (prefill chunks, experts with many tokens); with fewer, each kernel
 * runs an AVX-512 path with bitwise the same results, so a token's output
 * never depends on how many tokens share the call (batch invariance).
 *
 * int8 (MXFP4, INTQ; formats of kernels-q8.h): weights in q8 panels,
 * activations prepared by the q8 prep. Per 32-column block: the block's
 * codes become the B tile (8 rows x 16 lanes x 4 unsigned bytes; 4-bit
 * codes expanded to bytes, MXFP4 through lut12, 8-bit codes loaded as they
 * are), 16 tokens' int8 values the A tile (16 x 32 bytes, the prepared rows'
 * own stride), TDPBSUD gives the 16 x 16 int32 dots, then the q8 epilogue
 * in fp32 per block, in K order: exactly the integers and float operations
 * of ms_q8_gemmq_ref, hence bitwise its results. Under 16 tokens:
 * ms_q8_gemmq_avx512vnni (bitwise equal too).
 *
 * bf16 (MS_WFMT_BF16): packed at load into VNNI-2 B tiles (per panel of 16
 * rows, per 32 columns: 16 tile rows of 64 bytes, row kp = the 16 rows'
 * columns 2kp, 2kp + 1), activations rounded to bf16 (nearest even); C
 * tiles accumulate over all K with TDPBF16PS. Under 16 tokens an AVX-512
 * path computes TDPBF16PS's arithmetic itself (even and odd products summed
 * apart from zero per 32 columns, then added to the running sum; FMAs under
 * MXCSR FTZ|DAZ with nearest-even rounding), so it matches the tile path bit
 * for bit as the SDM describes it (on the model: tested; on real tiles:
 * as far as the hardware follows its pseudo-code, untested here).
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
 * Exports (declared where they are used: backend.c, tests/test-amx.c):
 * ms_kernels_amx[] and ms_amx_request_perm() (real tiles),
 * ms_kernels_amx_sim[] and ms_kernels_amx_sim_faults() (the model).
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

#define AMX_MIN_TOKENS 16 /* below: the AVX-512 path */
#define TCH 64            /* tokens whose int8 accumulators stay in L1 at once */

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

/* acc[t][16 lanes] = fma((float)(dot - zero * s), scale * d, acc) for the
 * rows of one C tile (c) that map to tokens [ta, tb); row = token - g. */
static inline void q8_epilogue(const int32_t c[16][16], float (*acc)[32], int lane0, int64_t ta,
			       int64_t tb, int64_t g, int64_t c0, const void *xq, int64_t kp,
			       int64_t b, __m512 scale, __m512i zero)
{
	for (int64_t t = ta; t < tb; t++) {
		__m512i dot = _mm512_load_si512((const void *)c[t - g]);
		__m512i corr = _mm512_mullo_epi32(zero, _mm512_set1_epi32(ms_q8_xq_s(xq, kp, t)[b]));
		__m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(dot, corr));
		__m512 sd = _mm512_mul_ps(scale, _mm512_set1_ps(ms_q8_xq_d(xq, kp, t)[b]));
		float *a = acc[t - c0] + lane0;
		_mm512_store_ps(a, _mm512_fmadd_ps(f, sd, _mm512_load_ps(a)));
	}
}

static void q8_gemmq(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		     float *y, int64_t ldy)
{
	if (n < AMX_MIN_TOKENS) {
		ms_q8_gemmq_avx512vnni(w, r0, r1, xq, n, y, ldy);
		return;
	}
	const struct ms_q8_pack *pk = w->pack;
	int64_t kp = pk->kp, nb = pk->n_blocks, bb = pk->block_bytes;
	long xs = (long)ms_q8_xq_stride(kp);
	int64_t p_end = (r1 + 15) / 16;
	_Alignas(64) uint8_t bt[2][512];
	_Alignas(64) int32_t ct[4][16][16];
	_Alignas(64) float acc[TCH][32];
	MS_TILE_LOADCONFIG(&q8_cfg);
	for (int64_t p0 = r0 / 16; p0 < p_end; p0 += 2) {
		bool two_p = p0 + 1 < p_end;
		const uint8_t *pan0 = pk->panels + p0 * pk->panel_bytes;
		const uint8_t *pan1 = two_p ? pan0 + pk->panel_bytes : pan0;
		for (int64_t c0 = 0; c0 < n; c0 += TCH) {
			int64_t c1 = c0 + TCH < n ? c0 + TCH : n;
			memset(acc, 0, sizeof(acc));
			for (int64_t b = 0; b < nb; b++) {
				__m512 sc0, sc1 = _mm512_setzero_ps();
				__m512i z0, z1 = _mm512_setzero_si512();
				const uint8_t *b0 = q8_block(pk, pan0 + b * bb, bt[0], &sc0, &z0);
				const uint8_t *b1 = two_p ? q8_block(pk, pan1 + b * bb, bt[1], &sc1, &z1) : b0;
				MS_TILE_LOADD(T_B0, b0, 64);
				if (two_p)
					MS_TILE_LOADD(T_B1, b1, 64);
				for (int64_t t0 = c0; t0 < c1; t0 += 32) {
					bool two_g = t0 + 16 < c1;
					int64_t g0 = t0 < n - 16 ? t0 : n - 16;
					int64_t g1 = t0 + 16 < n - 16 ? t0 + 16 : n - 16;
					MS_TILE_LOADD(T_A0, ms_q8_xq_q(xq, kp, g0) + 32 * b, xs);
					MS_TILE_ZERO(T_C00);
					MS_TILE_DPBSUD(T_C00, T_A0, T_B0);
					MS_TILE_STORED(T_C00, ct[0], 64);
					if (two_p) {
						MS_TILE_ZERO(T_C01);
						MS_TILE_DPBSUD(T_C01, T_A0, T_B1);
						MS_TILE_STORED(T_C01, ct[1], 64);
					}
					if (two_g) {
						MS_TILE_LOADD(T_A1, ms_q8_xq_q(xq, kp, g1) + 32 * b, xs);
						MS_TILE_ZERO(T_C10);
						MS_TILE_DPBSUD(T_C10, T_A1, T_B0);
						MS_TILE_STORED(T_C10, ct[2], 64);
						if (two_p) {
							MS_TILE_ZERO(T_C11);
							MS_TILE_DPBSUD(T_C11, T_A1, T_B1);
							MS_TILE_STORED(T_C11, ct[3], 64);
						}
					}
					int64_t e0 = t0 + 16 < c1 ? t0 + 16 : c1;
					q8_epilogue(ct[0], acc, 0, t0, e0, g0, c0, xq, kp, b, sc0, z0);
					if (two_p)
						q8_epilogue(ct[1], acc, 16, t0, e0, g0, c0, xq, kp, b, sc1, z1);
					if (two_g) {
						int64_t e1 = t0 + 32 < c1 ? t0 + 32 : c1;
						q8_epilogue(ct[2], acc, 0, t0 + 16, e1, g1, c0, xq, kp, b, sc0, z0);
						if (two_p)
							q8_epilogue(ct[3], acc, 16, t0 + 16, e1, g1, c0, xq, kp, b,
								    sc1, z1);
					}
				}
			}
			for (int64_t t = c0; t < c1; t++) {
				_mm512_mask_storeu_ps(y + t * ldy + p0 * 16, lane_mask(p0, r1), _mm512_load_ps(acc[t - c0]));
				if (two_p)
					_mm512_mask_storeu_ps(y + t * ldy + (p0 + 1) * 16, lane_mask(p0 + 1, r1),
							      _mm512_load_ps(acc[t - c0] + 16));
			}
		}
	}
	MS_TILE_RELEASE();
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

static size_t bf16_prep_size(const struct ms_wmat *w, int64_t n)
{
	int64_t kp = (w->cols + 31) / 32 * 32;
	return (size_t)(n > 0 ? n : 1) * (size_t)kp * 2;
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

/* Row t: kp bf16 values (zeros past cols), stride kp. */
static void bf16_prep(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	int64_t K = w->cols, kp = (K + 31) / 32 * 32;
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

#define TB 4 /* tokens per pass of the AVX-512 path */

/* TDPBF16PS's arithmetic on AVX-512 for n < 16 tokens; the caller sets
 * MXCSR to FTZ | DAZ | nearest (not inlined: the FP operations must stay
 * between the MXCSR writes, which the compiler does not order them by). */
static __attribute__((noinline)) void bf16_small(const struct bf16_pack *pk, int64_t r0,
						 int64_t r1, const uint16_t *xb, int64_t n, float *y,
						 int64_t ldy)
{
	int64_t kp = pk->kp;
	const __m512i hi16 = _mm512_set1_epi32((int)0xFFFF0000u);
	for (int64_t p = r0 / 16; p < (r1 + 15) / 16; p++) {
		const uint8_t *pan = pk->panels + p * pk->panel_bytes;
		for (int64_t t0 = 0; t0 < n; t0 += TB) {
			int nt = (int)(n - t0 < TB ? n - t0 : TB);
			__m512 c[TB];
			for (int t = 0; t < nt; t++)
				c[t] = _mm512_setzero_ps();
			for (int64_t j = 0; j < pk->n_tiles; j++) {
				__m512 te[TB], to[TB];
				for (int t = 0; t < nt; t++)
					te[t] = to[t] = _mm512_setzero_ps();
				for (int kq = 0; kq < 16; kq++) {
					__m512i bv = _mm512_load_si512((const void *)(pan + j * 1024 + kq * 64));
					__m512 be = _mm512_castsi512_ps(_mm512_slli_epi32(bv, 16));
					__m512 bo = _mm512_castsi512_ps(_mm512_and_si512(bv, hi16));
					for (int t = 0; t < nt; t++) {
						uint32_t pr;
						memcpy(&pr, xb + (t0 + t) * kp + j * 32 + 2 * kq, 4);
						__m512i pv = _mm512_set1_epi32((int)pr);
						__m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(pv, 16));
						__m512 ao = _mm512_castsi512_ps(_mm512_and_si512(pv, hi16));
						te[t] = _mm512_fmadd_ps(ae, be, te[t]);
						to[t] = _mm512_fmadd_ps(ao, bo, to[t]);
					}
				}
				for (int t = 0; t < nt; t++)
					c[t] = _mm512_add_ps(c[t], _mm512_add_ps(te[t], to[t]));
			}
			for (int t = 0; t < nt; t++)
				_mm512_mask_storeu_ps(y + (t0 + t) * ldy + p * 16, lane_mask(p, r1), c[t]);
		}
	}
}

static void bf16_gemmq(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		       float *y, int64_t ldy)
{
	const struct bf16_pack *pk = w->pack;
	const uint16_t *xb = xq;
	if (n < AMX_MIN_TOKENS) {
		unsigned csr = _mm_getcsr();
		/* FTZ (bit 15) and DAZ (bit 6) on, rounding (bits 13-14) nearest */
		_mm_setcsr((csr & ~0x6000u) | 0x8040u);
		bf16_small(pk, r0, r1, xb, n, y, ldy);
		_mm_setcsr(csr);
		return;
	}
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
			int64_t g0 = t0 < n - 16 ? t0 : n - 16;
			int64_t g1 = t0 + 16 < n - 16 ? t0 + 16 : n - 16;
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

extern const struct ms_kernel AMX_SYM(ms_kernels_amx)[];
const struct ms_kernel AMX_SYM(ms_kernels_amx)[] = {
	{.name = AMX_ISA "-bf16", .isa = AMX_ISA, .fmt = MS_WFMT_BF16, .cpu_flags = AMX_FLAGS,
	 .pack = bf16_pack, .prep_size = bf16_prep_size, .prep = bf16_prep, .gemmq = bf16_gemmq,
	 .row_align = 16, .rounds_acts = true},
	{.name = AMX_ISA "-mxfp4", .isa = AMX_ISA, .fmt = MS_WFMT_MXFP4, .cpu_flags = AMX_FLAGS,
	 .pack = ms_q8_pack, .prep_size = ms_q8_prep_size, .prep = ms_q8_prep_avx512,
	 .gemmq = q8_gemmq, .row_align = 16, .rounds_acts = true},
	{.name = AMX_ISA "-intq", .isa = AMX_ISA, .fmt = MS_WFMT_INTQ, .cpu_flags = AMX_FLAGS,
	 .pack = ms_q8_pack, .prep_size = ms_q8_prep_size, .prep = ms_q8_prep_avx512,
	 .gemmq = q8_gemmq, .row_align = 16, .rounds_acts = true},
	{0},
};
