/*
 * attention-avx512.c: the AVX-512 (F) + FMA attention kernel, compiled with
 * its own flags (engine/meson.build) and chosen at load only when the CPU
 * runs it (ms_attn_select).
 *
 * A chunk is walked in tiles of 16 keys aligned to absolute positions.
 * Per row and tile: 16 dot products (FMA over head_dim, masked tail),
 * reduced to one vector of 16 scores; an online softmax (running max,
 * a 16-lane running sum, the accumulator rescaled only when the max grows);
 * then the values weighted by the probabilities, each step done for the G
 * query heads of a kv head before the next (independent chains the core
 * overlaps). The rows of a block read the same K/V tile (from L1 after the
 * first); its kv heads go one after another over each tile, so memory is
 * read whole positions at a time. Keys outside a row's range
 * are masked, and each lane's arithmetic depends only on its own key, so a
 * row's result does not depend on the other rows of its block.
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attention.h"

#define TILE 16

/* exp(x) = 2^n e^r, n = round(x log2 e), r = x - n ln 2 (ln 2 in two
 * parts, the first exact in few bits), e^r = 1 + r + r^2 P(r) with Cephes'
 * expf polynomial; 2^n by scalef, which also rounds into the subnormals
 * correctly. Below -104 the result rounds to 0 (as expf's does); NaN stays
 * NaN (max/min return their second operand on NaN). */
static inline __m512 exp512(__m512 x)
{
	x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
	x = _mm512_min_ps(_mm512_set1_ps(88.7f), x);
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
	p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(p, n);
}

void ms_attn_exp_avx512(const float *x, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i += TILE) {
		__mmask16 m = n - i >= TILE ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(y + i, m, exp512(_mm512_maskz_loadu_ps(m, x + i)));
	}
}

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

/* acc[0 .. nb*16) += sum_{j in [ja, jb)} p[j] * v[j][.], four vectors at a
 * time where head_dim allows; each lane adds its terms in key order. */
static inline void pv(float *acc, const float *p, const float *const *v, int ja, int jb, int nb,
		      __mmask16 tail)
{
	int b = 0;
	for (; b + 4 <= nb; b += 4) {
		__m512 a0 = _mm512_load_ps(acc + 16 * b), a1 = _mm512_load_ps(acc + 16 * b + 16);
		__m512 a2 = _mm512_load_ps(acc + 16 * b + 32), a3 = _mm512_load_ps(acc + 16 * b + 48);
		__mmask16 m3 = b + 4 == nb ? tail : 0xFFFF;
		for (int j = ja; j < jb; j++) {
			__m512 pj = _mm512_set1_ps(p[j]);
			const float *vr = v[j] + 16 * b;
			a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr), a0);
			a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 16), a1);
			a2 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 32), a2);
			a3 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m3, vr + 48), a3);
		}
		_mm512_store_ps(acc + 16 * b, a0);
		_mm512_store_ps(acc + 16 * b + 16, a1);
		_mm512_store_ps(acc + 16 * b + 32, a2);
		_mm512_store_ps(acc + 16 * b + 48, a3);
	}
	for (; b < nb; b++) {
		__m512 a0 = _mm512_load_ps(acc + 16 * b);
		__mmask16 m = b + 1 == nb ? tail : 0xFFFF;
		for (int j = ja; j < jb; j++)
			a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_maskz_loadu_ps(m, v[j] + 16 * b),
					     a0);
		_mm512_store_ps(acc + 16 * b, a0);
	}
}

/* Scores of one query row against the 16 keys kp[0..16), scaled. */
static inline __m512 scores(const float *q, const float *const *kp, int64_t d, float scale)
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
			dot[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kp[j] + e), dot[j]);
	}
	if (e < d) {
		__mmask16 m = (__mmask16)((1u << (d - e)) - 1);
		__m512 qv = _mm512_maskz_loadu_ps(m, q + e);
#pragma GCC unroll 16
		for (int j = 0; j < TILE; j++)
			dot[j] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kp[j] + e), dot[j]);
	}
	return _mm512_mul_ps(hsum16(dot), _mm512_set1_ps(scale));
}

static void chunk_avx512(const struct ms_attn_chunk *c)
{
	const int64_t d = c->d, ld = c->ld, k0 = c->k0, k1 = c->k1;
	const int nb = (int)((d + 15) / 16), R = c->nq * c->nkv * c->G, G = c->G;
	const __mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : 0xFFFF;
	float *lsum = c->tmp;          /* [R][16] running sums, one per lane */
	float *pr = c->tmp + 16 * R;   /* [G][16] a token's scores, then probabilities */
	float *al = c->tmp + 32 * R;   /* [G][16] rescale factors (1: none) */
	const float *kp[TILE], *vp[TILE];
	for (int r = 0; r < R; r++) {
		c->m[r] = -INFINITY;
		_mm512_store_ps(lsum + 16 * r, _mm512_setzero_ps());
		memset(c->acc + r * ld, 0, (size_t)ld * sizeof(float));
	}
	for (int64_t t0 = k0 - k0 % TILE; t0 < k1; t0 += TILE) {
		for (int j = 0; j < TILE; j++) {
			int64_t p = t0 + j;
			bool in = p >= k0 && p < k1;
			kp[j] = in ? c->k[p - k0] : c->zero;
			vp[j] = in ? c->v[p - k0] : c->zero;
		}
		for (int i = 0; i < c->nq; i++) {
			int64_t a = c->lo[i] > t0 ? c->lo[i] : t0;
			int64_t b = c->hi[i] + 1 < t0 + TILE ? c->hi[i] + 1 : t0 + TILE;
			a = a > k0 ? a : k0;
			b = b < k1 ? b : k1;
			if (a >= b)
				continue;
			int ja = (int)(a - t0), jb = (int)(b - t0);
			__mmask16 mask = (__mmask16)(((1u << jb) - 1) & ~((1u << ja) - 1));
			for (int hh = 0; hh < c->nkv; hh++) {
				/* kv head hh of the item: its G query heads */
				const float *kh[TILE], *vh[TILE];
				for (int j = 0; j < TILE; j++)
					kh[j] = kp[j] + hh * d, vh[j] = vp[j] + hh * d;
				const float *qi = c->q + i * c->ldq + (int64_t)hh * G * d;
				int r0 = (i * c->nkv + hh) * G;
				float *m = c->m + r0, *ls = lsum + 16 * r0;
				/* Three passes over the group's heads, each a set of
				 * independent chains the core can overlap: scores, the
				 * online softmax, the weighted values. */
				for (int g = 0; g < G; g++)
					_mm512_store_ps(pr + 16 * g, scores(qi + g * d, kh, d, c->scale));
				for (int g = 0; g < G; g++) {
					__m512 s = _mm512_load_ps(pr + 16 * g);
					float mt = _mm512_mask_reduce_max_ps(mask, s), mo = m[g];
					float mn = mt > mo ? mt : mo;
					/* Rescale only when the max grows (and not from the
					 * empty state, where everything is 0). */
					bool grow = mt > mo && mo != -INFINITY;
					__m512 alpha = grow ? exp512(_mm512_set1_ps(mo - mn)) : _mm512_set1_ps(1.0f);
					__m512 p = _mm512_maskz_mov_ps(mask, exp512(_mm512_sub_ps(s, _mm512_set1_ps(mn))));
					__m512 l = _mm512_load_ps(ls + 16 * g);
					l = grow ? _mm512_fmadd_ps(l, alpha, p) : _mm512_add_ps(l, p);
					_mm512_store_ps(ls + 16 * g, l);
					_mm512_store_ps(pr + 16 * g, p);
					_mm512_store_ps(al + 16 * g, alpha);
					m[g] = mn;
				}
				for (int g = 0; g < G; g++) {
					float *acc = c->acc + (int64_t)(r0 + g) * ld;
					if (al[16 * g] != 1.0f) {
						__m512 alpha = _mm512_load_ps(al + 16 * g);
						for (int bb = 0; bb < nb; bb++)
							_mm512_store_ps(acc + 16 * bb,
									_mm512_mul_ps(_mm512_load_ps(acc + 16 * bb), alpha));
					}
					pv(acc, pr + 16 * g, vh, ja, jb, nb, tail);
				}
			}
		}
	}
	for (int r = 0; r < R; r++)
		if (c->m[r] != -INFINITY)
			c->l[r] = _mm512_reduce_add_ps(_mm512_load_ps(lsum + 16 * r));
}

const struct ms_attn_kernel ms_attn_avx512 = {
	"avx512-attn", "avx512", MS_CPU_AVX512F | MS_CPU_FMA, chunk_avx512,
};
