/*
 * attention-avx2.c: the AVX2 + FMA attention kernel (own flags, see
 * engine/cpu/meson.build; chosen by the table of kernel-table.c only where
 * the CPU has both).
 *
 * The AVX-512 kernel's algorithm on 8 lanes (the chunk walk is shared:
 * attention-chunk.h): tiles of 8 keys aligned to
 * absolute positions, 8 dot products reduced to one vector of scores, an
 * online softmax per row (the accumulator rescaled only when the max
 * grows), the values weighted in key order. Masks come from lane-index
 * compares, tails from maskload (which never faults on masked lanes).
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attention.h"
#include "fastexp.h"

#define TILE 8

static inline __m256 pow2i(__m256i k)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

/* exp512's algorithm (attention-avx512.c). AVX2 has no scalef: 2^n is
 * applied in two halves, each a normal number, so a subnormal result is
 * rounded once, by the second product. */
static inline __m256 exp256(__m256 x)
{
	x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
	x = _mm256_min_ps(_mm256_set1_ps(88.7f), x);
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(MS_EXP_LOG2E)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(MS_EXP_LN2_HI), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(MS_EXP_LN2_LO), r);
	__m256 p = _mm256_set1_ps(MS_EXP_P0);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXP_P1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXP_P2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXP_P3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXP_P4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MS_EXP_P5));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	/* NaN input: n converts to INT_MIN; p is NaN and stays so */
	__m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
	return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(_mm256_sub_epi32(ni, n1)));
}

static inline __m256i lanes_below(int64_t k)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void ms_attn_exp_avx2(const float *x, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i += TILE) {
		__m256i m = lanes_below(n - i >= TILE ? TILE : n - i);
		_mm256_maskstore_ps(y + i, m, exp256(_mm256_maskload_ps(x + i, m)));
	}
}

/* Lane j = the sum of v[j]'s lanes (unpack pairs, 64-bit pairs, halves). */
static inline __m256 hsum8(const __m256 v[8])
{
	__m256 s[4], u[2];
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++)
		s[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
				     _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 2
	for (int i = 0; i < 2; i++) {
		__m256d a = _mm256_castps_pd(s[2 * i]), b = _mm256_castps_pd(s[2 * i + 1]);
		u[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
				     _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
	}
	return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
			     _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

static inline float hmax8(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

static inline float hsum8v(__m256 v)
{
	__m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_add_ps(m, _mm_movehl_ps(m, m));
	m = _mm_add_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* fp8 codes (sign-extended to 16 bits) as fp16 bits: sign, a 0, the
 * exponent and mantissa (attention-chunk.h's fp8_key_scale). */
static inline __m256 fp8_widen(__m128i b)
{
	__m128i h = _mm_slli_epi16(_mm_cvtepi8_epi16(b), 7);
	return _mm256_cvtph_ps(_mm_and_si128(h, _mm_set1_epi16((short)0xBFFF)));
}

/* 8 stored values from row + e, es bytes each, widened to fp32 (bf16:
 * exactly; fp8: exactly, times 2^-8), and the lanes of m only (the others
 * 0, never read: AVX2 has no 8- or 16-bit masked load, so such a tail is
 * copied value by value). */
static inline __attribute__((always_inline)) __m256 kv_load(const void *row, int64_t e, int es)
{
	if (es == 1)
		return fp8_widen(_mm_loadl_epi64((const __m128i *)((const uint8_t *)row + e)));
	if (es == 4)
		return _mm256_loadu_ps((const float *)row + e);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + e));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) __m256 kv_maskload(const void *row, int64_t e,
								 __m256i m, int es)
{
	if (es == 4)
		return _mm256_maskload_ps((const float *)row + e, m);
	int n = __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m)));
	if (n == 8)
		return kv_load(row, e, es);
	uint16_t h[8] = {0};
	memcpy(h, (const char *)row + e * es, (size_t)n * (size_t)es);
	return kv_load(h, 0, es);
}

static inline __attribute__((always_inline)) void pv_kv(float *acc, const float *p,
							const void *const *v, int ja, int jb,
							int nb, __m256i tail, int es)
{
	const __m256i all = _mm256_set1_epi32(-1);
	int b = 0;
	for (; b + 4 <= nb; b += 4) {
		__m256 a0 = _mm256_load_ps(acc + 8 * b), a1 = _mm256_load_ps(acc + 8 * b + 8);
		__m256 a2 = _mm256_load_ps(acc + 8 * b + 16), a3 = _mm256_load_ps(acc + 8 * b + 24);
		__m256i m3 = b + 4 == nb ? tail : all;
		for (int j = ja; j < jb; j++) {
			__m256 pj = _mm256_broadcast_ss(p + j);
			int64_t e = 8 * b;
			a0 = _mm256_fmadd_ps(pj, kv_load(v[j], e, es), a0);
			a1 = _mm256_fmadd_ps(pj, kv_load(v[j], e + 8, es), a1);
			a2 = _mm256_fmadd_ps(pj, kv_load(v[j], e + 16, es), a2);
			a3 = _mm256_fmadd_ps(pj, kv_maskload(v[j], e + 24, m3, es), a3);
		}
		_mm256_store_ps(acc + 8 * b, a0);
		_mm256_store_ps(acc + 8 * b + 8, a1);
		_mm256_store_ps(acc + 8 * b + 16, a2);
		_mm256_store_ps(acc + 8 * b + 24, a3);
	}
	for (; b < nb; b++) {
		__m256 a0 = _mm256_load_ps(acc + 8 * b);
		__m256i m = b + 1 == nb ? tail : all;
		for (int j = ja; j < jb; j++)
			a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), kv_maskload(v[j], 8 * b, m, es),
					     a0);
		_mm256_store_ps(acc + 8 * b, a0);
	}
}

static inline __attribute__((always_inline)) __m256 scores_kv(const float *q,
							      const void *const *kp, int64_t d,
							      float scale, int es)
{
	__m256 dot[TILE];
#pragma GCC unroll 8
	for (int j = 0; j < TILE; j++)
		dot[j] = _mm256_setzero_ps();
	int64_t e = 0;
	for (; e + 8 <= d; e += 8) {
		__m256 qv = _mm256_loadu_ps(q + e);
#pragma GCC unroll 8
		for (int j = 0; j < TILE; j++)
			dot[j] = _mm256_fmadd_ps(qv, kv_load(kp[j], e, es), dot[j]);
	}
	if (e < d) {
		__m256i m = lanes_below(d - e);
		__m256 qv = _mm256_maskload_ps(q + e, m);
#pragma GCC unroll 8
		for (int j = 0; j < TILE; j++)
			dot[j] = _mm256_fmadd_ps(qv, kv_maskload(kp[j], e, m, es), dot[j]);
	}
	return _mm256_mul_ps(hsum8(dot), _mm256_set1_ps(scale));
}

/* The lanes of head_dim's last vector. */
static inline __m256i head_tail(int64_t d)
{
	return d % 8 ? lanes_below(d % 8) : _mm256_set1_epi32(-1);
}

/* A vector of head_dim at index b of nb: a full one (kv_load), the tail's
 * (kv_maskload on tail), or none (b >= nb: the grouped kernels go two or
 * more at a time). */
enum blk { BLK_FULL, BLK_TAIL, BLK_NONE };
static inline enum blk blk_kind(int b, int nb, bool ragged)
{
	return b >= nb ? BLK_NONE : b == nb - 1 && ragged ? BLK_TAIL : BLK_FULL;
}

static inline __attribute__((always_inline)) __m256 kv_blk(const void *row, int b, enum blk k,
							    __m256i tail, int es)
{
	return k == BLK_FULL ? kv_load(row, 8 * b, es)
	       : k == BLK_TAIL ? kv_maskload(row, 8 * b, tail, es)
			       : _mm256_setzero_ps();
}

/* Scores of the G query rows q[g * d ..] (G a multiple of 4 here) against
 * the 8 keys kp[], scaled, into out[16 * g ..]: four rows and two keys at
 * a time, so each K vector is loaded and widened once for four rows
 * (scores_kv widens it per row). Per (row, key) the same FMAs in the same
 * order and the same tree (hsum8 adds every lane's vector alike) as
 * scores_kv: the same bits, whichever path a row takes. */
static inline __attribute__((always_inline)) void scores4_kv(const float *q, int G,
							      const void *const *kp, int64_t d,
							      float scale, int es, float *out)
{
	const int nb = (int)((d + 7) / 8);
	const bool ragged = d % 8 != 0;
	const __m256i tail = head_tail(d);
	for (int g0 = 0; g0 < G; g0 += 4) {
		for (int jq = 0; jq < TILE; jq += 2) {
			__m256 acc[8]; /* lane 2 * gg + jj: row g0 + gg, key jq + jj */
#pragma GCC unroll 8
			for (int i = 0; i < 8; i++)
				acc[i] = _mm256_setzero_ps();
			for (int b = 0; b < nb; b++) {
				enum blk kind = blk_kind(b, nb, ragged);
				__m256 qv[4];
#pragma GCC unroll 4
				for (int gg = 0; gg < 4; gg++) {
					const float *qr = q + (g0 + gg) * d + 8 * b;
					qv[gg] = kind == BLK_FULL ? _mm256_loadu_ps(qr) : _mm256_maskload_ps(qr, tail);
				}
#pragma GCC unroll 2
				for (int jj = 0; jj < 2; jj++) {
					__m256 kv = kv_blk(kp[jq + jj], b, kind, tail, es);
#pragma GCC unroll 4
					for (int gg = 0; gg < 4; gg++)
						acc[2 * gg + jj] = _mm256_fmadd_ps(qv[gg], kv, acc[2 * gg + jj]);
				}
			}
			__m256 sc = _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale));
			__m128 lo = _mm256_castps256_ps128(sc), hi = _mm256_extractf128_ps(sc, 1);
			_mm_storel_pi((__m64 *)(out + 16 * (g0 + 0) + jq), lo);
			_mm_storeh_pi((__m64 *)(out + 16 * (g0 + 1) + jq), lo);
			_mm_storel_pi((__m64 *)(out + 16 * (g0 + 2) + jq), hi);
			_mm_storeh_pi((__m64 *)(out + 16 * (g0 + 3) + jq), hi);
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
		_mm256_store_ps(out + 16 * g, scores_kv(q + g * d, kp, d, scale, es));
}

/* acc[g * ld ..] += sum_j p[16 * g + j] * v[j][.] over keys [ja, jb) in
 * order, for the G rows (G a multiple of 4 here), four rows and two
 * vectors of head_dim at a time, so each V vector is widened once for four
 * rows. Each lane's chain is pv_kv's: the same bits. */
static inline __attribute__((always_inline)) void pv4_kv(float *acc, int64_t ld, int G,
							  const float *p, const void *const *v,
							  int ja, int jb, int nb, __m256i tail,
							  int es)
{
	const bool ragged = _mm256_movemask_ps(_mm256_castsi256_ps(tail)) != 0xFF;
	for (int g0 = 0; g0 < G; g0 += 4) {
		for (int b = 0; b < nb; b += 2) {
			enum blk k0 = blk_kind(b, nb, ragged), k1 = blk_kind(b + 1, nb, ragged);
			float *a0p = acc + g0 * ld + 8 * b;
			__m256 a[4][2];
#pragma GCC unroll 4
			for (int gg = 0; gg < 4; gg++) {
				a[gg][0] = _mm256_load_ps(a0p + gg * ld);
				a[gg][1] = k1 == BLK_NONE ? _mm256_setzero_ps()
							  : _mm256_load_ps(a0p + gg * ld + 8);
			}
			for (int j = ja; j < jb; j++) {
				__m256 v0 = kv_blk(v[j], b, k0, tail, es);
				__m256 v1 = kv_blk(v[j], b + 1, k1, tail, es);
#pragma GCC unroll 4
				for (int gg = 0; gg < 4; gg++) {
					__m256 pj = _mm256_broadcast_ss(p + 16 * (g0 + gg) + j);
					a[gg][0] = _mm256_fmadd_ps(pj, v0, a[gg][0]);
					a[gg][1] = _mm256_fmadd_ps(pj, v1, a[gg][1]);
				}
			}
#pragma GCC unroll 4
			for (int gg = 0; gg < 4; gg++) {
				_mm256_store_ps(a0p + gg * ld, a[gg][0]);
				if (k1 != BLK_NONE)
					_mm256_store_ps(a0p + gg * ld + 8, a[gg][1]);
			}
		}
	}
}

static inline __attribute__((always_inline)) void pv_g_kv(float *acc, int64_t ld, int G,
							   const float *p, const void *const *v,
							   int ja, int jb, int nb, __m256i tail,
							   int es)
{
	int G4 = G - G % 4;
	pv4_kv(acc, ld, G4, p, v, ja, jb, nb, tail, es);
	for (int g = G4; g < G; g++)
		pv_kv(acc + g * ld, p + 16 * g, v, ja, jb, nb, tail, es);
}

/* The shared chunk walk (attention-chunk.h) on 8 lanes. */
typedef __m256 vf;
typedef __m256 vkmask;
typedef __m256i vtail;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_load(const float *p) { return _mm256_load_ps(p); }
static inline void v_store(float *p, vf v) { _mm256_store_ps(p, v); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf v_exp(vf x) { return exp256(x); }
static inline float v_hsum(vf v) { return hsum8v(v); }
static inline vkmask key_mask(int ja, int jb)
{
	return _mm256_castsi256_ps(_mm256_andnot_si256(lanes_below(ja), lanes_below(jb)));
}
static inline float masked_max(vkmask m, vf s)
{
	return hmax8(_mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, m));
}
static inline vf mask_zero(vkmask m, vf x) { return _mm256_and_ps(m, x); }
#define KV_ES 4
#define K_SCORES_G(q, G, kh, d, s, out) scores_g_kv(q, G, kh, d, s, 4, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 4)
#define CHUNK_FN chunk_avx2
#include "attention-chunk.h"
#define KV_ES 2
#define K_SCORES_G(q, G, kh, d, s, out) scores_g_kv(q, G, kh, d, s, 2, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 2)
#define CHUNK_FN chunk_avx2_bf16
#include "attention-chunk.h"
#define KV_ES 1
#define KV_FP8 1
#define K_SCORES_G(q, G, kh, d, s, out) scores_g_kv(q, G, kh, d, s, 1, out)
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t) pv_g_kv(acc, ld, G, p, vh, ja, jb, nb, t, 1)
#define CHUNK_FN chunk_avx2_fp8
#include "attention-chunk.h"

const struct ms_attn_kernel ms_attn_avx2 = {
	"avx2-attn", "avx2", MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C, chunk_avx2, chunk_avx2_bf16,
	chunk_avx2_fp8, NULL,
};
