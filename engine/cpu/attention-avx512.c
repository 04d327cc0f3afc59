/*
 * attention-avx512.c: the AVX-512 (F, BW, VL) + FMA attention kernel,
 * compiled with its own flags (engine/cpu/meson.build) and chosen at load
 * only when the CPU has all of them (the table of kernel-table.c).
 *
 * A chunk is walked in tiles of 16 keys aligned to absolute positions
 * (attention-chunk.h, shared with the AVX2 kernel); here the 16 dot
 * products of a row and tile (FMA over head_dim, masked tail) are reduced
 * to one vector of scores by a transpose-and-add tree, and exp is Cephes'
 * with scalef.
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attention.h"
#include "fastexp.h"

#define TILE 16

/* The tree's one exp approximation (fastexp.h), 16 lanes with FMA; 2^n by
 * scalef, which also rounds into the subnormals correctly. Below -104 the
 * result rounds to 0 (as expf's does); NaN stays NaN (max/min return their
 * second operand on NaN). */
static inline __m512 exp512(__m512 x)
{
	x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
	x = _mm512_min_ps(_mm512_set1_ps(88.7f), x);
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(MS_EXP_LOG2E)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(MS_EXP_LN2_HI), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(MS_EXP_LN2_LO), r);
	__m512 p = _mm512_set1_ps(MS_EXP_P0);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXP_P1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXP_P2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXP_P3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXP_P4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MS_EXP_P5));
	p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(p, n);
}

#ifndef MS_ATTN_BF16PAIRS /* one definition, in the plain build */
void ms_attn_exp_avx512(const float *x, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i += TILE) {
		__mmask16 m = n - i >= TILE ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, exp512(_mm512_maskz_loadu_ps(m, x + i)));
	}
}
#endif

/* Lane j of the result = the sum of v[j]'s lanes: a transpose-and-add tree
 * (unpack pairs, then 64-bit pairs, then 128-bit quarters twice), 45
 * instructions for 16 sums. Lane j depends only on v[j]. */
static inline __m512 hsum16(const __m512 v[16])
{
	__m512 s[8], u[4], z[2];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
				     _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		__m512d a = _mm512_castps_pd(s[2 * i]), b = _mm512_castps_pd(s[2 * i + 1]);
		u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
				     _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
	}
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++)
		z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
				     _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xDD));
	return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88),
			     _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
}

/* fp8 codes (sign-extended to 16 bits) as fp16 bits: sign, a 0, the
 * exponent and mantissa (attention-chunk.h's fp8_key_scale). */
static inline __m512 fp8_widen(__m128i b)
{
	__m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
	return _mm512_cvtph_ps(_mm256_and_si256(h, _mm256_set1_epi16((short)0xBFFF)));
}

/* 16 stored values from row + e, es bytes each, widened to fp32 (bf16:
 * exactly; fp8: exactly, times 2^-8), and the same under a mask (masked
 * lanes are not read). */
static inline __attribute__((always_inline)) __m512 kv_load(const void *row, int64_t e, int es)
{
	if (es == 1)
		return fp8_widen(_mm_loadu_si128((const __m128i *)((const uint8_t *)row + e)));
	if (es == 4)
		return _mm512_loadu_ps((const float *)row + e);
	__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e));
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) __m512 kv_maskz_load(__mmask16 m, const void *row,
								   int64_t e, int es)
{
	if (es == 1)
		return fp8_widen(_mm_maskz_loadu_epi8(m, (const uint8_t *)row + e));
	if (es == 4)
		return _mm512_maskz_loadu_ps(m, (const float *)row + e);
	__m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + e);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The keys [ja, jb) of a tile in the order their terms are added to the
 * values: ascending; or, for bf16 products, in pairs (2i, 2i+1) with key
 * 2i+1 first, the order of vdpbf16ps. Returns their count. */
static inline int key_order(int ja, int jb, bool pairs, int8_t ord[TILE])
{
	int n = 0;
	ja = ja > 0 ? ja : 0, jb = jb < TILE ? jb : TILE; /* as they are: bounds for the compiler */
	if (!pairs) {
		for (int j = ja; j < jb; j++)
			ord[n++] = (int8_t)j;
		return n;
	}
	for (int j = ja & ~1; j < jb; j += 2) {
		if (j + 1 >= ja && j + 1 < jb)
			ord[n++] = (int8_t)(j + 1);
		if (j >= ja)
			ord[n++] = (int8_t)j;
	}
	return n;
}

/* acc[0 .. nb*16) += sum_t p[ord[t]] * v[ord[t]][.], four vectors at a
 * time where head_dim allows; each lane adds its terms in ord's order. */
static inline __attribute__((always_inline)) void pv_kv(float *acc, const float *p,
							const void *const *v, const int8_t *ord,
							int n, int nb, __mmask16 tail, int es)
{
	int b = 0;
	for (; b + 4 <= nb; b += 4) {
		__m512 a0 = _mm512_load_ps(acc + 16 * b), a1 = _mm512_load_ps(acc + 16 * b + 16);
		__m512 a2 = _mm512_load_ps(acc + 16 * b + 32), a3 = _mm512_load_ps(acc + 16 * b + 48);
		__mmask16 m3 = b + 4 == nb ? tail : 0xFFFF;
		for (int t = 0; t < n; t++) {
			int j = ord[t];
			__m512 pj = _mm512_set1_ps(p[j]);
			int64_t e = 16 * b;
			a0 = _mm512_fmadd_ps(pj, kv_load(v[j], e, es), a0);
			a1 = _mm512_fmadd_ps(pj, kv_load(v[j], e + 16, es), a1);
			a2 = _mm512_fmadd_ps(pj, kv_load(v[j], e + 32, es), a2);
			a3 = _mm512_fmadd_ps(pj, kv_maskz_load(m3, v[j], e + 48, es), a3);
		}
		_mm512_store_ps(acc + 16 * b, a0);
		_mm512_store_ps(acc + 16 * b + 16, a1);
		_mm512_store_ps(acc + 16 * b + 32, a2);
		_mm512_store_ps(acc + 16 * b + 48, a3);
	}
	for (; b < nb; b++) {
		__m512 a0 = _mm512_load_ps(acc + 16 * b);
		__mmask16 m = b + 1 == nb ? tail : 0xFFFF;
		for (int t = 0; t < n; t++)
			a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[ord[t]]),
					     kv_maskz_load(m, v[ord[t]], 16 * b, es), a0);
		_mm512_store_ps(acc + 16 * b, a0);
	}
}

/* Scores of one query row against the 16 keys kp[0..16), scaled. */
static inline __attribute__((always_inline)) __m512 scores_kv(const float *q,
							      const void *const *kp, int64_t d,
							      float scale, int es)
{
	__m512 dot[TILE];
#pragma GCC unroll 16
	for (int j = 0; j < TILE; j++)
		dot[j] = _mm512_setzero_ps();
	int64_t e = 0;
	for (; e + 16 <= d; e += 16) {
		__m512 qv = _mm512_loadu_ps(q + e);
#pragma GCC unroll 16
		for (int j = 0; j < TILE; j++)
			dot[j] = _mm512_fmadd_ps(qv, kv_load(kp[j], e, es), dot[j]);
	}
	if (e < d) {
		__mmask16 m = (__mmask16)((1u << (d - e)) - 1);
		__m512 qv = _mm512_maskz_loadu_ps(m, q + e);
#pragma GCC unroll 16
		for (int j = 0; j < TILE; j++)
			dot[j] = _mm512_fmadd_ps(qv, kv_maskz_load(m, kp[j], e, es), dot[j]);
	}
	return _mm512_mul_ps(hsum16(dot), _mm512_set1_ps(scale));
}

/* A vector of head_dim at index b of nb: all lanes, the tail's, or none
 * (past the end: the grouped kernels run four at a time). */
static inline __mmask16 dim_mask(int b, int nb, __mmask16 tail)
{
	return b < nb - 1 ? 0xFFFF : b == nb - 1 ? tail : 0;
}

/* Scores of the G query rows q[g * d ..] (G a multiple of 4 here) against
 * the 16 keys kp[], scaled, into out[16 * g ..]: four rows and four keys
 * at a time, so each K vector is loaded and widened once for four rows
 * (scores_kv reloads it per row). Per (row, key) the same FMAs in the same
 * order and the same reduction tree as scores_kv: the same bits. */
static inline __attribute__((always_inline)) void scores4_kv(const float *q, int G,
							      const void *const *kp, int64_t d,
							      float scale, int es, float *out)
{
	const int nb = (int)((d + 15) / 16);
	const __mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : 0xFFFF;
	for (int g0 = 0; g0 < G; g0 += 4) {
		for (int jq = 0; jq < TILE; jq += 4) {
			__m512 acc[16];
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				acc[i] = _mm512_setzero_ps();
			for (int b = 0; b < nb; b++) {
				__mmask16 m = dim_mask(b, nb, tail);
				__m512 qv[4];
#pragma GCC unroll 4
				for (int gg = 0; gg < 4; gg++)
					qv[gg] = _mm512_maskz_loadu_ps(m, q + (g0 + gg) * d + 16 * b);
#pragma GCC unroll 4
				for (int jj = 0; jj < 4; jj++) {
					__m512 kv = kv_maskz_load(m, kp[jq + jj], 16 * b, es);
#pragma GCC unroll 4
					for (int gg = 0; gg < 4; gg++)
						acc[4 * gg + jj] = _mm512_fmadd_ps(qv[gg], kv, acc[4 * gg + jj]);
				}
			}
			/* lane 4 * gg + jj: row g0 + gg, key jq + jj */
			__m512 sc = _mm512_mul_ps(hsum16(acc), _mm512_set1_ps(scale));
			_mm_store_ps(out + 16 * (g0 + 0) + jq, _mm512_extractf32x4_ps(sc, 0));
			_mm_store_ps(out + 16 * (g0 + 1) + jq, _mm512_extractf32x4_ps(sc, 1));
			_mm_store_ps(out + 16 * (g0 + 2) + jq, _mm512_extractf32x4_ps(sc, 2));
			_mm_store_ps(out + 16 * (g0 + 3) + jq, _mm512_extractf32x4_ps(sc, 3));
		}
	}
}

static inline __attribute__((always_inline)) void scores_g_kv(const float *q, int G,
							       const void *const *kp, int64_t d,
							       float scale, int es, float *out)
{
	int G4 = G - G % 4;
	scores4_kv(q, G4, kp, d, scale, es, out);
	for (int g = G4; g < G; g++)
		_mm512_store_ps(out + 16 * g, scores_kv(q + g * d, kp, d, scale, es));
}

/* acc[g * ld ..] += sum_t p[16 * g + ord[t]] * v[ord[t]][.] for the G
 * rows (G a multiple of 4 here), four rows and four vectors of head_dim at
 * a time, so each V vector is loaded and widened once for four rows. Each
 * lane adds its terms in ord's order, as pv_kv does: the same bits. */
static inline __attribute__((always_inline)) void pv4_kv(float *acc, int64_t ld, int G,
							  const float *p, const void *const *v,
							  const int8_t *ord, int n, int nb,
							  __mmask16 tail, int es)
{
	for (int g0 = 0; g0 < G; g0 += 4) {
		for (int b = 0; b < nb; b += 4) {
			__m512 a[4][4];
			__mmask16 m[4];
#pragma GCC unroll 4
			for (int bb = 0; bb < 4; bb++) {
				m[bb] = dim_mask(b + bb, nb, tail);
#pragma GCC unroll 4
				for (int gg = 0; gg < 4; gg++)
					a[gg][bb] = _mm512_maskz_load_ps(m[bb], acc + (g0 + gg) * ld + 16 * (b + bb));
			}
			for (int t = 0; t < n; t++) {
				int j = ord[t];
				__m512 vv[4];
#pragma GCC unroll 4
				for (int bb = 0; bb < 4; bb++)
					vv[bb] = kv_maskz_load(m[bb], v[j], 16 * (b + bb), es);
#pragma GCC unroll 4
				for (int gg = 0; gg < 4; gg++) {
					__m512 pj = _mm512_set1_ps(p[16 * (g0 + gg) + j]);
#pragma GCC unroll 4
					for (int bb = 0; bb < 4; bb++)
						a[gg][bb] = _mm512_fmadd_ps(pj, vv[bb], a[gg][bb]);
				}
			}
#pragma GCC unroll 4
			for (int bb = 0; bb < 4; bb++)
#pragma GCC unroll 4
				for (int gg = 0; gg < 4; gg++)
					_mm512_mask_store_ps(acc + (g0 + gg) * ld + 16 * (b + bb), m[bb],
							     a[gg][bb]);
		}
	}
}

static inline __attribute__((always_inline)) void pv_g_kv(float *acc, int64_t ld, int G,
							   const float *p, const void *const *v,
							   int ja, int jb, int nb, __mmask16 tail,
							   int es, bool pairs)
{
	int8_t ord[TILE];
	int n = key_order(ja, jb, pairs, ord), G4 = G - G % 4;
	pv4_kv(acc, ld, G4, p, v, ord, n, nb, tail, es);
	for (int g = G4; g < G; g++)
		pv_kv(acc + g * ld, p + 16 * g, v, ord, n, nb, tail, es);
}

/* The shared chunk walk (attention-chunk.h) on 16 lanes. */
typedef __m512 vf;
typedef __mmask16 vkmask, vtail;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_load(const float *p) { return _mm512_load_ps(p); }
static inline void v_store(float *p, vf v) { _mm512_store_ps(p, v); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_exp(vf x) { return exp512(x); }
/* The sum of 16 lanes in a fixed tree (lanes l + l+8, then + l+4, + l+2,
 * + l+1), written out rather than _mm512_reduce_add_ps, whose tree is the
 * compiler's: lane_chunk below sums its rows' lanes in this same order. */
static inline float v_hsum(vf v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
				 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
	return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}
static inline vkmask key_mask(int ja, int jb)
{
	return (__mmask16)(((1u << jb) - 1) & ~((1u << ja) - 1));
}
static inline vtail head_tail(int64_t d)
{
	return d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : 0xFFFF;
}
static inline float masked_max(vkmask m, vf s) { return _mm512_mask_reduce_max_ps(m, s); }
static inline vf mask_zero(vkmask m, vf x) { return _mm512_maskz_mov_ps(m, x); }
#define KV_ES 4
#define K_SCORES_G(q, G, kh, d, s, out) scores_g_kv(q, G, kh, d, s, 4, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 4, false)
#define CHUNK_FN chunk_avx512
#include "attention-chunk.h"
#define KV_ES 2
#define K_SCORES_G(q, G, kh, d, s, out) scores_g_kv(q, G, kh, d, s, 2, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 2, false)
#define CHUNK_FN chunk_avx512_bf16
#include "attention-chunk.h"
#define KV_ES 1
#define KV_FP8 1
#define K_SCORES_G(q, G, kh, d, s, out) scores_g_kv(q, G, kh, d, s, 1, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 1, false)
#define CHUNK_FN chunk_avx512_fp8
#include "attention-chunk.h"

/* ---- many rows a kv head: query rows in lanes ---- */

/*
 * When a kv head has 16 or more query rows in a chunk (a prefill block:
 * tokens x the head's query heads), the walk above spends most of its time
 * reducing each row's dot products across lanes. Here the lanes hold 16
 * rows instead: a tile's K and V rows are widened once into scratch, each
 * score is FMAs of a row vector of Q^T by a broadcast K value, the online
 * softmax is lane-wise, and the values are FMAs of the probabilities by
 * broadcast V values into O^T.
 *
 * Bit for bit what the walk computes for each row (a token alone is
 * computed by the walk, in a batch by this; attention.h promises the same
 * output): a score is the same 16 chains of FMAs over head_dim's vectors
 * (zero-padded past d, as the walk's masked loads are) summed in
 * hsum16's tree; the max, exp, rescale and the lane sums of l follow the
 * walk's operations per key slot; each output value is the same chain of
 * FMAs over the keys in order; rows and keys out of range are left
 * untouched by masks, not added as zeros.
 */

/* hsum16's tree for one dot product whose 16 partial sums are x[0..16):
 * lanes 4k and 4k+2, 4k+1 and 4k+3, then those two, then the four
 * quarters in pairs (hsum16 above, traced per output lane). */
static inline __m512 score_tree(const __m512 x[16])
{
	__m512 q[4];
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		q[k] = _mm512_add_ps(_mm512_add_ps(x[4 * k], x[4 * k + 2]),
				     _mm512_add_ps(x[4 * k + 1], x[4 * k + 3]));
	return _mm512_add_ps(_mm512_add_ps(q[0], q[1]), _mm512_add_ps(q[2], q[3]));
}

/* v_hsum's tree over 16 vectors (lane-wise): x[l] + x[l+8], + l+4, + l+2,
 * + l+1. */
static inline __m512 lsum_tree(const float *x)
{
	__m512 a[8], b[4];
#pragma GCC unroll 8
	for (int l = 0; l < 8; l++)
		a[l] = _mm512_add_ps(_mm512_load_ps(x + 16 * l), _mm512_load_ps(x + 16 * (l + 8)));
#pragma GCC unroll 4
	for (int l = 0; l < 4; l++)
		b[l] = _mm512_add_ps(a[l], a[l + 4]);
	return _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3]));
}

/* Scratch of lane_chunk, in floats from c->tmp (MS_ATTN_TMP_FLOATS). */
struct lane_ws {
	float *qt;  /* [nb * 16][16] Q^T: dimension e, row lane */
	float *ot;  /* [nb * 16][16] O^T */
	float *kf;  /* [16][nb * 16] the tile's K rows of the head, widened */
	float *vf;  /* [16][nb * 16] and V */
	float *lj;  /* [16][16] running sum per key slot (the walk's lsum lanes) */
	float *pj;  /* [16][16] a tile's probabilities, key slot j */
	float *sk, *sv; /* [16] fp8: the tile's key scales */
};

static void lane_ws_init(const struct ms_attn_chunk *c, int nb, struct lane_ws *w)
{
	float *t = c->tmp;
	w->qt = t, t += nb * 256;
	w->ot = t, t += nb * 256;
	w->kf = t, t += nb * 256;
	w->vf = t, t += nb * 256;
	w->lj = t, t += 256;
	w->pj = t, t += 256;
	w->sk = t, t += 16;
	w->sv = t;
}

/* Token i's keys in the chunk, relative to k0: [*a, *b), or [1, 0) when it
 * has none here (no lane compare holds). */
static inline void row_keys(const struct ms_attn_chunk *c, int i, int32_t *a, int32_t *b)
{
	int64_t lo = c->lo[i] > c->k0 ? c->lo[i] : c->k0;
	int64_t hi = c->hi[i] + 1 < c->k1 ? c->hi[i] + 1 : c->k1;
	*a = lo < hi ? (int32_t)(lo - c->k0) : 1;
	*b = lo < hi ? (int32_t)(hi - c->k0) : 0;
}

/* The rows [x0, x0 + 16) of kv head hh (x = token * G + query head):
 * Q^T into w->qt (zeros past d and past the rows), each lane's key range
 * relative to k0 into ra, rb. */
static void lane_rows(const struct ms_attn_chunk *c, int hh, int x0, int nl, int nb,
		      const struct lane_ws *w, int32_t *ra, int32_t *rb)
{
	memset(w->qt, 0, (size_t)nb * 256 * sizeof(float));
	for (int x = 0; x < 16; x++) {
		if (x >= nl) {
			ra[x] = 1, rb[x] = 0; /* no key */
			continue;
		}
		int i = (x0 + x) / c->G, g = (x0 + x) % c->G;
		const float *q = c->q + i * c->ldq + ((int64_t)hh * c->G + g) * c->d;
		for (int64_t e = 0; e < c->d; e++)
			w->qt[e * 16 + x] = q[e];
		row_keys(c, i, &ra[x], &rb[x]);
	}
}

/* Key p + TILE's rows of kv head hh (es bytes a value) into L2 while the
 * tile of key p is read, as the walk does; nothing past the chunk. */
static inline void next_tile_prefetch(const struct ms_attn_chunk *c, int hh, int64_t p, int es)
{
	if (p < c->k0 || p + TILE >= c->k1)
		return;
	kv_prefetch_l2((const char *)c->k[p + TILE - c->k0] + hh * c->d * es,
		       (const char *)c->v[p + TILE - c->k0] + hh * c->d * es, c->d * es);
}

/* Key j of the tile at t0 (absolute), kv head hh, widened as the walk's
 * loads widen it (zeros for a key outside the chunk and past d). */
static inline __attribute__((always_inline)) void lane_widen(const struct ms_attn_chunk *c, int hh,
							     int64_t t0, int nb, int es,
							     const struct lane_ws *w)
{
	const __mmask16 tail = head_tail(c->d);
	for (int j = 0; j < TILE; j++) {
		int64_t p = t0 + j;
		bool in = p >= c->k0 && p < c->k1;
		const char *kr = in ? (const char *)c->k[p - c->k0] + hh * c->d * es : NULL;
		const char *vr = in ? (const char *)c->v[p - c->k0] + hh * c->d * es : NULL;
		for (int b = 0; b < nb; b++) {
			__mmask16 m = in ? dim_mask(b, nb, tail) : 0;
			_mm512_store_ps(w->kf + j * nb * 16 + 16 * b, kv_maskz_load(m, kr, 16 * b, es));
			_mm512_store_ps(w->vf + j * nb * 16 + 16 * b, kv_maskz_load(m, vr, 16 * b, es));
		}
		if (es == 1) {
			w->sk[j] = in ? fp8_key_scale(c->ks[p - c->k0][hh]) : 0.0f;
			w->sv[j] = in ? fp8_key_scale(c->vs[p - c->k0][hh]) : 0.0f;
		}
		next_tile_prefetch(c, hh, p, es);
	}
}

/* Score of every lane's row against key j: hsum16's chains and tree. */
static inline __m512 lane_score(const struct lane_ws *w, int j, int nb, float scale)
{
	__m512 x[16];
#pragma GCC unroll 16
	for (int l = 0; l < 16; l++)
		x[l] = _mm512_setzero_ps();
	const float *k = w->kf + j * nb * 16;
	for (int b = 0; b < nb; b++)
#pragma GCC unroll 16
		for (int l = 0; l < 16; l++)
			x[l] = _mm512_fmadd_ps(_mm512_load_ps(w->qt + (16 * b + l) * 16),
					       _mm512_set1_ps(k[16 * b + l]), x[l]);
	return _mm512_mul_ps(score_tree(x), _mm512_set1_ps(scale));
}

/* O^T += the tile's probabilities times its V rows, key by key in order,
 * each key only into the lanes whose range holds it. */
static inline void lane_pv(const struct lane_ws *w, int nb, const __mmask16 *km)
{
	for (int b = 0; b < nb; b++) {
		__m512 o[16];
#pragma GCC unroll 16
		for (int l = 0; l < 16; l++)
			o[l] = _mm512_load_ps(w->ot + (16 * b + l) * 16);
		for (int j = 0; j < TILE; j++) {
			if (!km[j])
				continue;
			__m512 p = _mm512_load_ps(w->pj + 16 * j);
			const float *v = w->vf + j * nb * 16 + 16 * b;
#pragma GCC unroll 16
			for (int l = 0; l < 16; l++)
				o[l] = _mm512_mask3_fmadd_ps(p, _mm512_set1_ps(v[l]), o[l], km[j]);
		}
#pragma GCC unroll 16
		for (int l = 0; l < 16; l++)
			_mm512_store_ps(w->ot + (16 * b + l) * 16, o[l]);
	}
}

/* Per key slot j of the tile at t0, the lanes whose range [ra, rb) holds
 * it; returns their union. */
static inline __mmask16 tile_key_masks(const struct ms_attn_chunk *c, int64_t t0, __m512i ra,
				       __m512i rb, __mmask16 km[TILE])
{
	__mmask16 rows = 0;
	for (int j = 0; j < TILE; j++) {
		__m512i p = _mm512_set1_epi32((int32_t)(t0 + j - c->k0));
		km[j] = _mm512_cmpge_epi32_mask(p, ra) & _mm512_cmplt_epi32_mask(p, rb);
		rows |= km[j];
	}
	return rows;
}

/* From the tile's max mt and the running max mo: the new max *mn, the
 * lanes where it grew from a non-empty state (*grow), and the factor that
 * rescales their sums (1 elsewhere), as the walk decides per row. */
static inline __m512 tile_alpha(__m512 mt, __m512 mo, __mmask16 rows, __m512 *mn, __mmask16 *grow)
{
	*mn = _mm512_max_ps(mt, mo);
	*grow = _mm512_cmp_ps_mask(mt, mo, _CMP_GT_OQ) &
		_mm512_cmp_ps_mask(mo, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ) & rows;
	return _mm512_mask_blend_ps(*grow, _mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(mo, *mn)));
}

/* O^T's n vectors times alpha, when a lane's max grew. */
static inline void ot_rescale(float *ot, int n, __mmask16 grow, __m512 alpha)
{
	if (grow)
		for (int e = 0; e < n; e++)
			_mm512_store_ps(ot + 16 * e, _mm512_mul_ps(_mm512_load_ps(ot + 16 * e), alpha));
}

/* One tile for the 16 lanes: scores, the online softmax, the values. */
static inline __attribute__((always_inline)) void lane_tile(const struct ms_attn_chunk *c,
							    const struct lane_ws *w, int nb,
							    int64_t t0, __m512i ra, __m512i rb,
							    __m512 *m, int es)
{
	__mmask16 km[TILE], rows = tile_key_masks(c, t0, ra, rb, km);
	if (!rows)
		return;
	__m512 mt = _mm512_set1_ps(-INFINITY), s[TILE];
	for (int j = 0; j < TILE; j++) {
		if (!km[j])
			continue;
		s[j] = lane_score(w, j, nb, c->scale);
		if (es == 1)
			s[j] = _mm512_mul_ps(s[j], _mm512_set1_ps(w->sk[j]));
		mt = _mm512_mask_max_ps(mt, km[j], mt, s[j]);
	}
	__m512 mo = *m, mn;
	__mmask16 grow;
	__m512 alpha = tile_alpha(mt, mo, rows, &mn, &grow);
	for (int j = 0; j < TILE; j++) {
		__m512 p = km[j] ? _mm512_maskz_mov_ps(km[j], exp512(_mm512_sub_ps(s[j], mn)))
				 : _mm512_setzero_ps();
		__m512 l = _mm512_load_ps(w->lj + 16 * j);
		_mm512_store_ps(w->lj + 16 * j, _mm512_mask_mov_ps(l, rows, _mm512_fmadd_ps(l, alpha, p)));
		if (es == 1)
			p = _mm512_mul_ps(p, _mm512_set1_ps(w->sv[j]));
		_mm512_store_ps(w->pj + 16 * j, p);
	}
	ot_rescale(w->ot, nb * 16, grow, alpha);
	lane_pv(w, nb, km);
	*m = _mm512_mask_mov_ps(mo, rows, mn);
}

/* Out: each lane's (m, l, acc) into its row; rows without a key here keep
 * m = -inf and their l and acc are not written (the contract). */
static void lane_store(const struct ms_attn_chunk *c, const float *ot, const float *lj, int hh,
		       int x0, int nl, __m512 m)
{
	float mv[16] __attribute__((aligned(64))), lv[16] __attribute__((aligned(64)));
	_mm512_store_ps(mv, m);
	_mm512_store_ps(lv, lsum_tree(lj));
	for (int x = 0; x < nl; x++) {
		int i = (x0 + x) / c->G, g = (x0 + x) % c->G;
		int64_t r = ((int64_t)i * c->nkv + hh) * c->G + g;
		c->m[r] = mv[x];
		if (mv[x] == -INFINITY)
			continue;
		c->l[r] = lv[x];
		for (int64_t e = 0; e < c->ld; e++)  /* ld = nb * 16: O^T's padding is 0 */
			c->acc[r * c->ld + e] = ot[e * 16 + x];
	}
}

/* A 16-row block's start: O^T (n floats) and the key slots' sums zeroed,
 * the running max empty, the rows' key ranges as vectors. */
static inline void block_begin(float *ot, size_t n, float *lj, const int32_t *ra, const int32_t *rb,
			       __m512 *m, __m512i *va, __m512i *vb)
{
	memset(ot, 0, n * sizeof(float));
	memset(lj, 0, 256 * sizeof(float));
	*m = _mm512_set1_ps(-INFINITY);
	*va = _mm512_load_si512(ra), *vb = _mm512_load_si512(rb);
}

static inline __attribute__((always_inline)) void lane_chunk(const struct ms_attn_chunk *c, int es)
{
	const int nb = (int)((c->d + 15) / 16), rows = c->nq * c->G;
	struct lane_ws w;
	lane_ws_init(c, nb, &w);
	int32_t ra[16] __attribute__((aligned(64))), rb[16] __attribute__((aligned(64)));
	for (int hh = 0; hh < c->nkv; hh++)
		for (int x0 = 0; x0 < rows; x0 += 16) {
			int nl = rows - x0 < 16 ? rows - x0 : 16;
			lane_rows(c, hh, x0, nl, nb, &w, ra, rb);
			__m512 m;
			__m512i va, vb;
			block_begin(w.ot, (size_t)nb * 256, w.lj, ra, rb, &m, &va, &vb);
			for (int64_t t0 = c->k0 - c->k0 % TILE; t0 < c->k1; t0 += TILE) {
				lane_widen(c, hh, t0, nb, es, &w);
				lane_tile(c, &w, nb, t0, va, vb, &m, es);
			}
			lane_store(c, w.ot, w.lj, hh, x0, nl, m);
		}
}

#ifdef MS_ATTN_BF16PAIRS
/* ---- bf16 products (built again with -mavx512bf16: meson.build) ----
 *
 * chunk_bf16_products of attention.h on a bf16 cache: q and the
 * probabilities rounded to bf16 (vcvtne2ps2bf16: ties to even, subnormal
 * inputs to 0) before their products, as GPU flash attention computes
 * from bf16 inputs. A prefill block's products are then vdpbf16ps on
 * pairs, twice the multiply-adds of an f32 FMA a cycle, which an 8k
 * prompt's attention needs on two cores (docs/numerics.md).
 *
 * What a score and an output value are, bit for bit, whichever of the two
 * paths below computes them:
 * - a score: per lane l, a chain over head_dim's 32-value chunks c of the
 *   pair (32c+2l, 32c+2l+1), the odd product added first, then the even,
 *   each add rounded once (vdpbf16ps; a product of two bf16 is exact in
 *   f32, so each step equals an FMA); then hsum16's tree, times the scale;
 * - l: the f32 probabilities, summed per key slot as the f32 kernel does;
 * - an output value: a chain over the tile's keys in pairs (2i, 2i+1) in
 *   order, key 2i+1's term first; a key out of a row's range adds nothing.
 * The walk (one token: decode) computes these with f32 FMAs on values
 * split from the pairs; the lane kernel (prefill blocks) with vdpbf16ps.
 * vdpbf16ps also flushes subnormal sums to 0 and the FMAs do not, so the
 * two could differ only where a partial sum falls below 2^-126.
 */

/* The 32 values of chunk cc from 16-bit elements at row (zeros past d),
 * as 16 dwords: pair l = values 2l (low half) and 2l+1 (high). */
static inline __m512i bf16_chunk(const void *row, int cc, int64_t d)
{
	int64_t left = d - 32 * cc;
	__mmask32 m = left >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
	return _mm512_maskz_loadu_epi16(m, (const uint16_t *)row + 32 * cc);
}

/* q's chunk cc rounded to bf16 pairs (zeros past d). */
static inline __m512i q_pairs(const float *q, int cc, int64_t d)
{
	int64_t left = d - 32 * cc;
	__mmask16 m0 = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
	__mmask16 m1 = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
	return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, q + 32 * cc + 16),
					    _mm512_maskz_loadu_ps(m0, q + 32 * cc));
}

/* The pairs' odd (high) and even (low) halves as f32, exactly. */
static inline __m512 pair_odd(__m512i w)
{
	return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xFFFF0000u)));
}
static inline __m512 pair_even(__m512i w)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* x rounded to bf16 and back to f32. */
static inline __m512 round_bf16(__m512 x)
{
	__m256i h = (__m256i)_mm512_cvtneps_pbh(x);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One (row, key) chain step over chunk cc: odd product, then even. */
static inline __m512 pair_fma(__m512 qo, __m512 qe, __m512i k, __m512 acc)
{
	return _mm512_fmadd_ps(qe, pair_even(k), _mm512_fmadd_ps(qo, pair_odd(k), acc));
}

/* The walk's scores of G rows against the tile's 16 keys, scaled, into
 * out[16 * g ..]: four rows and four keys at a time (lane 4gg+jj of
 * hsum16: row gg, key jj), each K chunk loaded once for four rows and the
 * rows' rounded halves once per tile. */
static void scores_bf16p_g(const float *q, int G, const void *const *kp, int64_t d, float scale,
			   float *out)
{
	const int ncp = (int)((d + 31) / 32);
	__m512 qh[ncp][4][2];
	int g0 = 0;
	for (; g0 + 4 <= G; g0 += 4) {
		for (int cc = 0; cc < ncp; cc++)
			for (int gg = 0; gg < 4; gg++) {
				__m512i w = q_pairs(q + (g0 + gg) * d, cc, d);
				qh[cc][gg][0] = pair_odd(w), qh[cc][gg][1] = pair_even(w);
			}
		for (int jq = 0; jq < TILE; jq += 4) {
			__m512 acc[16];
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				acc[i] = _mm512_setzero_ps();
			for (int cc = 0; cc < ncp; cc++)
#pragma GCC unroll 4
				for (int jj = 0; jj < 4; jj++) {
					__m512i k = bf16_chunk(kp[jq + jj], cc, d);
#pragma GCC unroll 4
					for (int gg = 0; gg < 4; gg++)
						acc[4 * gg + jj] = pair_fma(qh[cc][gg][0], qh[cc][gg][1], k,
									    acc[4 * gg + jj]);
				}
			__m512 sc = _mm512_mul_ps(hsum16(acc), _mm512_set1_ps(scale));
			_mm_store_ps(out + 16 * (g0 + 0) + jq, _mm512_extractf32x4_ps(sc, 0));
			_mm_store_ps(out + 16 * (g0 + 1) + jq, _mm512_extractf32x4_ps(sc, 1));
			_mm_store_ps(out + 16 * (g0 + 2) + jq, _mm512_extractf32x4_ps(sc, 2));
			_mm_store_ps(out + 16 * (g0 + 3) + jq, _mm512_extractf32x4_ps(sc, 3));
		}
	}
	for (; g0 < G; g0++) {
		__m512 dot[TILE];
#pragma GCC unroll 16
		for (int j = 0; j < TILE; j++)
			dot[j] = _mm512_setzero_ps();
		for (int cc = 0; cc < ncp; cc++) {
			__m512i w = q_pairs(q + g0 * d, cc, d);
			__m512 qo = pair_odd(w), qe = pair_even(w);
#pragma GCC unroll 16
			for (int j = 0; j < TILE; j++)
				dot[j] = pair_fma(qo, qe, bf16_chunk(kp[j], cc, d), dot[j]);
		}
		_mm512_store_ps(out + 16 * g0, _mm512_mul_ps(hsum16(dot), _mm512_set1_ps(scale)));
	}
}

#define KV_ES 2
#define K_SCORES_G(q, G, kh, d, s, out) scores_bf16p_g(q, G, kh, d, s, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 2, true)
#define K_ROUND_P(p) round_bf16(p)
#define CHUNK_FN chunk_avx512_bf16p
#include "attention-chunk.h"

/* The lane kernel on pairs: its scratch, in floats from c->tmp. */
struct pair_ws {
	uint32_t *qp; /* [ncp * 16][16] rows' q pairs: pair 16c+l, row lane */
	float *ot;    /* [ncp * 32][16] O^T */
	uint16_t *kb; /* [16][ncp * 32] the tile's K rows of the head, zero-padded */
	uint32_t *vp; /* [8][ncp * 32] V as pairs across keys: dword e of pair i
		       * holds key 2i's value e (low half), key 2i+1's (high) */
	float *lj;    /* [16][16] running sum per key slot (the walk's lsum lanes) */
	uint32_t *pp; /* [8][16] a tile's probabilities as pairs of keys, row lane */
};

static void pair_ws_init(const struct ms_attn_chunk *c, int ncp, struct pair_ws *w)
{
	float *t = c->tmp;
	w->qp = (uint32_t *)t, t += ncp * 512;
	w->ot = t, t += ncp * 512;
	w->kb = (uint16_t *)t, t += ncp * 512;
	w->vp = (uint32_t *)t, t += ncp * 512;
	w->lj = t, t += 256;
	w->pp = (uint32_t *)t;
}

/* The rows [x0, x0 + 16) of kv head hh: their q pairs (zeros past d and
 * the rows) and key ranges, as lane_rows. */
static void pair_rows(const struct ms_attn_chunk *c, int hh, int x0, int nl, int ncp,
		      const struct pair_ws *w, int32_t *ra, int32_t *rb)
{
	memset(w->qp, 0, (size_t)ncp * 256 * sizeof(uint32_t));
	for (int x = 0; x < 16; x++) {
		if (x >= nl) {
			ra[x] = 1, rb[x] = 0; /* no key */
			continue;
		}
		int i = (x0 + x) / c->G, g = (x0 + x) % c->G;
		const float *q = c->q + i * c->ldq + ((int64_t)hh * c->G + g) * c->d;
		for (int cc = 0; cc < ncp; cc++) {
			uint32_t u[16] __attribute__((aligned(64)));
			_mm512_store_si512(u, q_pairs(q, cc, c->d));
			for (int l = 0; l < 16; l++)
				w->qp[(16 * cc + l) * 16 + x] = u[l];
		}
		row_keys(c, i, &ra[x], &rb[x]);
	}
}

/* Key p's row of head hh in rows (K or V), or NULL outside the chunk. */
static inline const void *pair_row(const struct ms_attn_chunk *c, int hh, int64_t p,
				   const void *const *rows)
{
	return p >= c->k0 && p < c->k1 ? (const uint16_t *)rows[p - c->k0] + hh * c->d : NULL;
}

/* The tile at t0's K rows into kb and V pairs into vp (zeros outside the
 * chunk and past d); the next tile's rows into L2, as the walk does. */
static void pair_widen(const struct ms_attn_chunk *c, int hh, int64_t t0, int ncp,
		       const struct pair_ws *w)
{
	const int dp = ncp * 32;
	const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
					    39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
	const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
	const __m512i zero = _mm512_setzero_si512();
	for (int i = 0; i < 8; i++) {
		const void *k0 = pair_row(c, hh, t0 + 2 * i, c->k), *k1 = pair_row(c, hh, t0 + 2 * i + 1, c->k);
		const void *v0 = pair_row(c, hh, t0 + 2 * i, c->v), *v1 = pair_row(c, hh, t0 + 2 * i + 1, c->v);
		for (int cc = 0; cc < ncp; cc++) {
			__m512i a = v0 ? bf16_chunk(v0, cc, c->d) : zero, b = v1 ? bf16_chunk(v1, cc, c->d) : zero;
			_mm512_store_si512(w->kb + 2 * i * dp + 32 * cc, k0 ? bf16_chunk(k0, cc, c->d) : zero);
			_mm512_store_si512(w->kb + (2 * i + 1) * dp + 32 * cc, k1 ? bf16_chunk(k1, cc, c->d) : zero);
			_mm512_store_si512(w->vp + i * dp + 32 * cc, _mm512_permutex2var_epi16(a, lo, b));
			_mm512_store_si512(w->vp + i * dp + 32 * cc + 16, _mm512_permutex2var_epi16(a, hi, b));
		}
	}
	for (int j = 0; j < TILE; j++)
		next_tile_prefetch(c, hh, t0 + j, 2);
}

/* Score of every lane's row against key j: the chains and tree above. */
static inline __m512 pair_score(const struct pair_ws *w, int j, int ncp, float scale)
{
	__m512 x[16];
#pragma GCC unroll 16
	for (int l = 0; l < 16; l++)
		x[l] = _mm512_setzero_ps();
	const uint32_t *k = (const uint32_t *)(w->kb + j * ncp * 32);
	for (int cc = 0; cc < ncp; cc++)
#pragma GCC unroll 16
		for (int l = 0; l < 16; l++)
			x[l] = _mm512_dpbf16_ps(x[l], (__m512bh)_mm512_load_si512(w->qp + (16 * cc + l) * 16),
						(__m512bh)_mm512_set1_epi32((int)k[16 * cc + l]));
	return _mm512_mul_ps(score_tree(x), _mm512_set1_ps(scale));
}

/* O^T += the tile's probabilities times its V rows, pair by pair in order
 * (key 2i+1 first, inside vdpbf16ps), in the lanes whose range holds
 * either key (the other's probability is 0 and adds nothing). */
static inline void pair_pv(const struct pair_ws *w, int ncp, const __mmask16 *km)
{
	const int dp = ncp * 32;
	for (int b = 0; b < 2 * ncp; b++) {
		__m512 o[16];
#pragma GCC unroll 16
		for (int l = 0; l < 16; l++)
			o[l] = _mm512_load_ps(w->ot + (16 * b + l) * 16);
		for (int i = 0; i < 8; i++) {
			__mmask16 m = km[2 * i] | km[2 * i + 1];
			if (!m)
				continue;
			__m512bh p = (__m512bh)_mm512_load_si512(w->pp + 16 * i);
			const uint32_t *v = w->vp + i * dp + 16 * b;
#pragma GCC unroll 16
			for (int l = 0; l < 16; l++)
				o[l] = _mm512_mask_dpbf16_ps(o[l], m, p, (__m512bh)_mm512_set1_epi32((int)v[l]));
		}
#pragma GCC unroll 16
		for (int l = 0; l < 16; l++)
			_mm512_store_ps(w->ot + (16 * b + l) * 16, o[l]);
	}
}

/* The tile's probabilities of keys 2i and 2i+1 as bf16 pairs, row lane:
 * l sums them in f32 first, as the walk does. */
static inline void pair_probs(const struct pair_ws *w, int i, __m512 pe, __m512 po)
{
	const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
					     23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	__m512i b = (__m512i)_mm512_cvtne2ps_pbh(po, pe);
	_mm512_store_si512(w->pp + 16 * i, _mm512_permutexvar_epi16(idx, b));
}

/* One tile for the 16 lanes: scores, the online softmax, the values. */
static void pair_tile(const struct ms_attn_chunk *c, const struct pair_ws *w, int ncp, int64_t t0,
		      __m512i ra, __m512i rb, __m512 *m)
{
	__mmask16 km[TILE], rows = tile_key_masks(c, t0, ra, rb, km);
	if (!rows)
		return;
	__m512 mt = _mm512_set1_ps(-INFINITY), s[TILE];
	for (int j = 0; j < TILE; j++) {
		if (!km[j])
			continue;
		s[j] = pair_score(w, j, ncp, c->scale);
		mt = _mm512_mask_max_ps(mt, km[j], mt, s[j]);
	}
	__m512 mo = *m, mn;
	__mmask16 grow;
	__m512 alpha = tile_alpha(mt, mo, rows, &mn, &grow);
	__m512 pk[2];
	for (int j = 0; j < TILE; j++) {
		__m512 p = km[j] ? _mm512_maskz_mov_ps(km[j], exp512(_mm512_sub_ps(s[j], mn)))
				 : _mm512_setzero_ps();
		__m512 l = _mm512_load_ps(w->lj + 16 * j);
		_mm512_store_ps(w->lj + 16 * j, _mm512_mask_mov_ps(l, rows, _mm512_fmadd_ps(l, alpha, p)));
		pk[j & 1] = p;
		if (j & 1)
			pair_probs(w, j / 2, pk[0], pk[1]);
	}
	ot_rescale(w->ot, ncp * 32, grow, alpha);
	pair_pv(w, ncp, km);
	*m = _mm512_mask_mov_ps(mo, rows, mn);
}

static void pair_chunk(const struct ms_attn_chunk *c)
{
	const int ncp = (int)((c->d + 31) / 32), rows = c->nq * c->G;
	struct pair_ws w;
	pair_ws_init(c, ncp, &w);
	int32_t ra[16] __attribute__((aligned(64))), rb[16] __attribute__((aligned(64)));
	for (int hh = 0; hh < c->nkv; hh++)
		for (int x0 = 0; x0 < rows; x0 += 16) {
			int nl = rows - x0 < 16 ? rows - x0 : 16;
			pair_rows(c, hh, x0, nl, ncp, &w, ra, rb);
			__m512 m;
			__m512i va, vb;
			block_begin(w.ot, (size_t)ncp * 512, w.lj, ra, rb, &m, &va, &vb);
			for (int64_t t0 = c->k0 - c->k0 % TILE; t0 < c->k1; t0 += TILE) {
				pair_widen(c, hh, t0, ncp, &w);
				pair_tile(c, &w, ncp, t0, va, vb, &m);
			}
			lane_store(c, w.ot, w.lj, hh, x0, nl, m);
		}
}
#endif /* MS_ATTN_BF16PAIRS */

/* Rows in lanes where a kv head has at least a vector of them in the
 * chunk (a prefill block); else the walk. The same bits either way. */
static inline bool rows_in_lanes(const struct ms_attn_chunk *c)
{
	return c->nq * c->G >= 16;
}

static inline void lane_or_walk(const struct ms_attn_chunk *c, int es, ms_attn_chunk_fn walk)
{
	if (rows_in_lanes(c))
		lane_chunk(c, es);
	else
		walk(c);
}

static void chunk_avx512_f32_pick(const struct ms_attn_chunk *c)
{
	lane_or_walk(c, 4, chunk_avx512);
}
static void chunk_avx512_bf16_pick(const struct ms_attn_chunk *c)
{
	lane_or_walk(c, 2, chunk_avx512_bf16);
}
static void chunk_avx512_fp8_pick(const struct ms_attn_chunk *c)
{
	lane_or_walk(c, 1, chunk_avx512_fp8);
}

#ifdef MS_ATTN_BF16PAIRS
static void chunk_avx512_bf16p_pick(const struct ms_attn_chunk *c)
{
	if (rows_in_lanes(c))
		pair_chunk(c);
	else
		chunk_avx512_bf16p(c);
}

const struct ms_attn_kernel ms_attn_avx512bf16 = {
	/* the same file built with AVX512-BF16 too (meson.build) */
	"avx512bf16-attn", "avx512",
	MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA | MS_CPU_AVX512BF16,
	chunk_avx512_f32_pick, chunk_avx512_bf16_pick, chunk_avx512_fp8_pick, chunk_avx512_bf16p_pick,
};
#else
const struct ms_attn_kernel ms_attn_avx512 = {
	/* every flag of its library (meson.build): the compiler may use BW and
	 * VL instructions anywhere in this file */
	"avx512-attn", "avx512", MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA,
	chunk_avx512_f32_pick, chunk_avx512_bf16_pick, chunk_avx512_fp8_pick, NULL,
};
#endif
