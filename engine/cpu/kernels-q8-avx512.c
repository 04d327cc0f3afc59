/*
 * kernels-q8-avx512.c: the q8 panel kernels (kernels-q8.h) with AVX-512
 * VNNI, compiled with their own flags (engine/meson.build).
 *
 * The "VNNI column" design, for any number of tokens. One 64-byte
 * load holds 16 rows x 8 columns of 4-bit codes; `and` / `srli` (MXFP4: and
 * a vpshufb through lut12 + 4) give two u8 operands, each multiplied by a
 * broadcast of 4 activation bytes (vpdpbusd): 16 outputs per instruction,
 * no horizontal sums. One token runs one panel per pass (the panels one
 * sequential stream: one_token_pass). More: a pass runs 2-4 panels at once
 * (2 tokens: 4 panels; 3 or 4 tokens: 2) so each broadcast serves several
 * panels and there are 4-8 independent dot chains; the accumulators of every (token,
 * panel) stay in registers for the whole row. More tokens: groups of 4
 * over the same 4 panels, the later groups finding them in L1/L2.
 *
 * An M-blocked kernel (weights decoded once per block into registers and
 * applied to up to 64 tokens, accumulators in L1) ran here for more than 8
 * tokens until it measured slower than this one at every batch size on
 * 2 Zen 4 cores (4096 x 4096, 2 threads: n = 16 1.15 -> 0.94 ms, n = 64
 * 4.4 -> 3.5 ms, n = 512 MXFP4 31 -> 27 ms, INT4 equal; the 512-token
 * prefill of the GPTQ bench model 0.65 -> 0.81 of oneDNN's bf16 rate).
 *
 * Built twice (engine/meson.build): as is, and with MS_Q8_VBMI, where
 * MXFP4's codes go through vpermb (ms_q8_gemmq_avx512vbmi; measured on 2
 * Zen 4 cores, 1024 x 2048 in cache, 1 thread: 1 token 46.5 -> 53.4 GB/s,
 * 2 tokens 34.3 -> 37.3; 3 and more unchanged, the vpdpbusd then bound).
 *
 * Every (token, row, block) term is computed with the same integer dot
 * and the same fixed epilogue in block order, so results are bitwise
 * those of ms_q8_gemmq_ref whatever n, the grouping of tokens or the split
 * of rows.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels-q8.h"

#define AI static inline __attribute__((always_inline))

AI __m512i bcast4(const int8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/* What the epilogue of one block of one panel needs:
 * - sc: MXFP4: e - 128 as fp32 (scale * d is then scalef(d, sc): the exact
 *   product 2^(e-128) d rounded once, as fl(scale * d); it runs beside the
 *   vpdpbusd instead of on the multiply ports); INTQ: the fp16 scales;
 * - INTQ: the zero points as fp32: the codes go in as they are (unsigned)
 *   and dot - zero * s is one fnmadd on exact fp32 integers per token and
 *   panel. (4-bit codes once had 16 - zero added to them, two vpaddb per
 *   64 bytes of every panel whatever the tokens: measured slower at 1-4
 *   tokens, the same integers.) */
struct bmeta {
	__m512 sc, zf;
};

AI struct bmeta block_meta(int kind, const uint8_t *meta)
{
	struct bmeta m;
	if (kind == MS_Q8_MXFP4) {
		__m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)meta));
		m.sc = _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(128)));
		m.zf = _mm512_setzero_ps();
	} else {
		m.sc = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)meta));
		__m128i z = _mm_loadu_si128((const __m128i *)(meta + 32));
		m.zf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(z));
	}
	return m;
}

/* The two u8 operands of sub-step s of a 4-bit block (columns 8s..8s+3
 * and 8s+4..8s+7): lut12 + 4 for MXFP4, the code for INT4. */
AI void operands4(int kind, const uint8_t *blk, int s, __m512i *lo, __m512i *hi)
{
	const __m512i m0f = _mm512_set1_epi8(0x0F);
	__m512i v = _mm512_loadu_si512(blk + 64 * s);
#ifdef MS_Q8_VBMI
	if (kind == MS_Q8_MXFP4) {
		/* lut12 + 4 four times over: vpermb reads 6 index bits, so the
		 * neighbouring nibble (bits 4-5 of a byte, and what the shift
		 * brings in) picks a copy of the same 16 entries */
		const __m512i lut4 = _mm512_set4_epi32(0x04080A0C, 0x0D0E0F10, 0x1C181614, 0x13121110);
		*lo = _mm512_permutexvar_epi8(v, lut4);
		*hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), lut4);
		return;
	}
#endif
	__m512i l = _mm512_and_si512(v, m0f);
	__m512i u = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
	if (kind == MS_Q8_MXFP4) {
		/* lut12 + 4: a bias of 16 on the operand (dot - 12 s = dot' - 16 s) */
		const __m512i lut = _mm512_set4_epi32(0x04080A0C, 0x0D0E0F10, 0x1C181614, 0x13121110);
		l = _mm512_shuffle_epi8(lut, l);
		u = _mm512_shuffle_epi8(lut, u);
	}
	*lo = l;
	*hi = u;
}

/* Per token and block: MXFP4's correction -16 s, the dot's start; or, for
 * INTQ, s as fp32. Both were formed once by the prep (ms_q8_xq_fill_c):
 * here a broadcast load, no arithmetic, where each pass over a few panels
 * used to form them again (a shift and a negation, or a conversion, per
 * token and block: measured in cache, 1 thread, alternating runs, MXFP4
 * 3-16 tokens +1-3%). */
struct tcorr {
	__m512i cs;
	__m512 sf;
};

AI struct tcorr token_corr(int kind, const uint32_t *c)
{
	struct tcorr r;
	int32_t v;
	memcpy(&v, c, 4);
	if (kind != MS_Q8_MXFP4) {
		r.sf = _mm512_castsi512_ps(_mm512_set1_epi32(v));
		r.cs = _mm512_setzero_si512();
	} else {
		r.cs = _mm512_set1_epi32(v);
		r.sf = _mm512_setzero_ps();
	}
	return r;
}

/* acc + (float)(dot - zero * s) * (scale * d): the integer is exact and
 * below 2^24 however it is formed, so every variant is the same value. */
AI __m512 epilogue(int kind, __m512i dot, struct tcorr c, struct bmeta m, __m512 d, __m512 acc)
{
	__m512 x, sd;
	if (kind != MS_Q8_MXFP4)
		x = _mm512_fnmadd_ps(m.zf, c.sf, _mm512_cvtepi32_ps(dot));
	else
		x = _mm512_cvtepi32_ps(dot); /* the correction is in dot's start */
	if (kind == MS_Q8_MXFP4)
		sd = _mm512_scalef_ps(d, m.sc);
	else
		sd = _mm512_mul_ps(m.sc, d);
	return _mm512_fmadd_ps(x, sd, acc);
}

AI void store_rows(float *y, __m512 v, int64_t r, int64_t r_end)
{
	if (r + 16 <= r_end)
		_mm512_storeu_ps(y, v);
	else
		_mm512_mask_storeu_ps(y, (__mmask16)((1u << (r_end - r)) - 1), v);
}

/* ---- decode: NT tokens x P panels, accumulators in registers ---- */

AI void reg_pass(const int kind, const int P, const int NT, const struct ms_q8_pack *h, int64_t p0,
		 int64_t pe, const void *xq, int64_t t0, float *y, int64_t ldy, int64_t r_end)
{
	const int64_t kp = h->kp, nb = h->n_blocks, BB = h->block_bytes;
	const int64_t cb = ms_q8_code_bytes(kind);
	const uint8_t *pan[4];
	const int8_t *q[4];
	const float *d[4];
	const uint32_t *cr[4]; /* the tokens' corrections (ms_q8_xq_c) */
	__m512 acc[4][4];
#pragma GCC unroll 4
	for (int p = 0; p < P; p++)
		pan[p] = h->panels + (p0 + p) * h->panel_bytes;
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++) {
		q[t] = ms_q8_xq_q(xq, kp, t0 + t);
		d[t] = ms_q8_xq_d(xq, kp, t0 + t);
		cr[t] = ms_q8_xq_c(xq, kp, t0 + t);
#pragma GCC unroll 4
		for (int p = 0; p < P; p++)
			acc[t][p] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		__m512i dot[4][4];
		struct bmeta m[4];
		/* The next block of every panel, one block ahead: the demand loads
		 * of a pass wait behind its arithmetic in the reorder window, and
		 * this puts the next lines in flight early (measured on 2 Zen 4
		 * cores: 89-95% -> 96-100% of streaming bandwidth; further ahead
		 * is worse). A prefetch past the last panel does not fault. */
#pragma GCC unroll 4
		for (int p = 0; p < P; p++)
#pragma GCC unroll 9
			for (int64_t o = 0; o < ms_q8_code_bytes(kind) + ms_q8_meta_bytes(kind); o += 64)
				_mm_prefetch((const char *)pan[p] + (b + 1) * BB + o, _MM_HINT_T0);
		/* And the same block of the next pass's panels (P panels on, while
		 * they are this task's), into L2: a panel is one short stream
		 * (~18 KB at K = 2048), over before the hardware prefetcher has
		 * ramped up, so each pass would start on cold misses (measured,
		 * 4096 x 2048, 2 Zen 4 threads, alternating runs: 2-4 tokens
		 * 0.17-0.21 -> 0.14-0.18 ms, 1 token unchanged). */
#pragma GCC unroll 4
		for (int p = 0; p < P; p++)
			if (p0 + P + p < pe)
#pragma GCC unroll 9
				for (int64_t o = 0; o < ms_q8_code_bytes(kind) + ms_q8_meta_bytes(kind);
				     o += 64)
					_mm_prefetch((const char *)pan[p] + P * h->panel_bytes + b * BB + o,
						     _MM_HINT_T1);
#pragma GCC unroll 4
		for (int p = 0; p < P; p++)
			m[p] = block_meta(kind, pan[p] + b * BB + cb);
		/* MXFP4: the dot starts at -16 s, so that the epilogue's integer
		 * is the sum itself (the same exact integer as dot - 16 s; one
		 * instruction less per token and panel) */
		struct tcorr c[4];
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++) {
			c[t] = token_corr(kind, cr[t] + b);
#pragma GCC unroll 4
			for (int p = 0; p < P; p++)
				dot[t][p] = c[t].cs;
		}
		if (kind != MS_Q8_INT8) {
#pragma GCC unroll 4
			for (int ss = 0; ss < 4; ss++) {
				__m512i al[4], ah[4];
#pragma GCC unroll 4
				for (int t = 0; t < NT; t++) {
					al[t] = bcast4(q[t] + b * 32 + 8 * ss);
					ah[t] = bcast4(q[t] + b * 32 + 8 * ss + 4);
				}
#pragma GCC unroll 4
				for (int p = 0; p < P; p++) {
					__m512i lo, hi;
					operands4(kind, pan[p] + b * BB, ss, &lo, &hi);
#pragma GCC unroll 4
					for (int t = 0; t < NT; t++) {
						dot[t][p] = _mm512_dpbusd_epi32(dot[t][p], lo, al[t]);
						dot[t][p] = _mm512_dpbusd_epi32(dot[t][p], hi, ah[t]);
					}
				}
			}
		} else {
#pragma GCC unroll 8
			for (int ss = 0; ss < 8; ss++) {
				__m512i a[4];
#pragma GCC unroll 4
				for (int t = 0; t < NT; t++)
					a[t] = bcast4(q[t] + b * 32 + 4 * ss);
#pragma GCC unroll 4
				for (int p = 0; p < P; p++) {
					__m512i v = _mm512_loadu_si512(pan[p] + b * BB + 64 * ss);
#pragma GCC unroll 4
					for (int t = 0; t < NT; t++)
						dot[t][p] = _mm512_dpbusd_epi32(dot[t][p], v, a[t]);
				}
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++) {
			__m512 dd = _mm512_set1_ps(d[t][b]);
#pragma GCC unroll 4
			for (int p = 0; p < P; p++)
				acc[t][p] = epilogue(kind, dot[t][p], c[t], m[p], dd, acc[t][p]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
		for (int p = 0; p < P; p++) {
			int64_t r = (p0 + p) * 16;
			if (r < r_end)
				store_rows(y + (t0 + t) * ldy + r, acc[t][p], r, r_end);
		}
}

/* One token: one panel per pass, so that a task's panels are read as one
 * sequential stream, which the hardware prefetcher follows (no software
 * prefetch; the 4-panel passes above read four streams 16 KB apart and
 * need it). The block's integer dot is split over four chains (vpdpbusd's
 * latency) and summed once: the same exact integer. Measured on 2 Zen 4
 * cores, 4096 x 2048, alternating runs: MXFP4 0.88 -> 0.93 of the
 * streaming bandwidth at ~33 GB/s and 0.68 -> 0.78 at 50-60 GB/s; INT4
 * 0.91 -> 0.93 and 0.71 -> 0.87. From 2 tokens the 4-panel passes stay
 * ahead (at 3-4 tokens this loses a quarter: the broadcasts and the
 * operands then serve a single panel). */
AI void one_token_pass(const int kind, const struct ms_q8_pack *h, int64_t p0, const void *xq,
		       float *y, int64_t r_end)
{
	const int64_t kp = h->kp, nb = h->n_blocks, BB = h->block_bytes;
	const int64_t cb = ms_q8_code_bytes(kind);
	const uint8_t *pan = h->panels + p0 * h->panel_bytes;
	const int8_t *q = ms_q8_xq_q(xq, kp, 0);
	const float *d = ms_q8_xq_d(xq, kp, 0);
	const uint32_t *cr = ms_q8_xq_c(xq, kp, 0);
	__m512 acc = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *blk = pan + b * BB;
		const int8_t *qb = q + b * 32;
		struct bmeta m = block_meta(kind, blk + cb);
		struct tcorr c = token_corr(kind, cr + b);
		__m512i dt[4] = {c.cs, _mm512_setzero_si512(), _mm512_setzero_si512(),
				 _mm512_setzero_si512()};
		if (kind != MS_Q8_INT8) {
#pragma GCC unroll 4
			for (int ss = 0; ss < 4; ss++) {
				__m512i lo, hi;
				operands4(kind, blk, ss, &lo, &hi);
				int c0 = 2 * (ss & 1);
				dt[c0] = _mm512_dpbusd_epi32(dt[c0], lo, bcast4(qb + 8 * ss));
				dt[c0 + 1] = _mm512_dpbusd_epi32(dt[c0 + 1], hi, bcast4(qb + 8 * ss + 4));
			}
		} else {
#pragma GCC unroll 8
			for (int ss = 0; ss < 8; ss++)
				dt[ss % 4] = _mm512_dpbusd_epi32(
					dt[ss % 4], _mm512_loadu_si512(blk + 64 * ss), bcast4(qb + 4 * ss));
		}
		__m512i dot = _mm512_add_epi32(_mm512_add_epi32(dt[0], dt[1]),
					       _mm512_add_epi32(dt[2], dt[3]));
		acc = epilogue(kind, dot, c, m, _mm512_set1_ps(d[b]), acc);
	}
	int64_t r = p0 * 16;
	if (r < r_end)
		store_rows(y + r, acc, r, r_end);
}

/* Panels [pa, pb) for tokens [t0, t0 + NT), P panels per pass (then 1). */
AI void reg_rows(const int kind, const int P, const int NT, const struct ms_q8_pack *h, int64_t pa,
		 int64_t pb, int64_t pe, const void *xq, int64_t t0, float *y, int64_t ldy,
		 int64_t r_end)
{
	int64_t p = pa;
	for (; p + P <= pb; p += P)
		reg_pass(kind, P, NT, h, p, pe, xq, t0, y, ldy, r_end);
	for (; p < pb; p++)
		reg_pass(kind, 1, NT, h, p, pe, xq, t0, y, ldy, r_end);
}

AI void reg_kernel(const int kind, const struct ms_q8_pack *h, int64_t pa, int64_t pb,
		   const void *xq, int64_t n, float *y, int64_t ldy, int64_t r_end)
{
	/* More than 4 tokens: groups of 4 over a few panels at a time, so the
	 * later groups find those panels' weights in L1/L2. */
	const int64_t PG = 4;
	if (n == 1) {
		for (int64_t p = pa; p < pb; p++)
			one_token_pass(kind, h, p, xq, y, r_end);
		return;
	}
	for (int64_t g0 = pa; g0 < pb; g0 += PG) {
		int64_t g1 = g0 + PG < pb ? g0 + PG : pb, t = 0;
		for (; n - t >= 4; t += 4)
			reg_rows(kind, 2, 4, h, g0, g1, pb, xq, t, y, ldy, r_end);
		switch (n - t) {
		case 3:
			reg_rows(kind, 2, 3, h, g0, g1, pb, xq, t, y, ldy, r_end);
			break;
		case 2:
			reg_rows(kind, 4, 2, h, g0, g1, pb, xq, t, y, ldy, r_end);
			break;
		case 1:
			reg_rows(kind, 4, 1, h, g0, g1, pb, xq, t, y, ldy, r_end);
			break;
		default:
			break;
		}
	}
}

#define DEF_KIND(NAME, KIND)                                                                   \
	static void NAME(const struct ms_q8_pack *h, int64_t pa, int64_t pb, const void *xq,  \
			 int64_t n, float *y, int64_t ldy, int64_t r_end)                     \
	{                                                                                      \
		reg_kernel(KIND, h, pa, pb, xq, n, y, ldy, r_end);                             \
	}

DEF_KIND(gemmq_mxfp4, MS_Q8_MXFP4)
DEF_KIND(gemmq_int4, MS_Q8_INT4)
DEF_KIND(gemmq_int8, MS_Q8_INT8)

#ifdef MS_Q8_VBMI
#define Q8_GEMMQ ms_q8_gemmq_avx512vbmi
#else
#define Q8_GEMMQ ms_q8_gemmq_avx512vnni
#endif

void Q8_GEMMQ(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n, float *y,
	      int64_t ldy)
{
	const struct ms_q8_pack *h = w->pack;
	int64_t pa = r0 / 16, pb = (r1 + 15) / 16;
	if (n <= 0 || pb <= pa)
		return;
	switch (h->kind) {
	case MS_Q8_MXFP4:
		gemmq_mxfp4(h, pa, pb, xq, n, y, ldy, r1);
		break;
	case MS_Q8_INT4:
		gemmq_int4(h, pa, pb, xq, n, y, ldy, r1);
		break;
	default:
		gemmq_int8(h, pa, pb, xq, n, y, ldy, r1);
		break;
	}
}

#ifndef MS_Q8_VBMI /* the prep is built once, with the VNNI version */

/* ---- activation prep, bitwise the portable one ---- */

AI int32_t hmax_epu32(__m512i v)
{
	return (int32_t)_mm512_reduce_max_epu32(v);
}

void ms_q8_prep_avx512(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	const struct ms_q8_pack *h = w->pack;
	const int64_t K = h->cols, kp = h->kp, nb = h->n_blocks;
	const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF);
	const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
	for (int64_t t = 0; t < n; t++) {
		const float *xt = x + t * ldx;
		int8_t *q = (int8_t *)ms_q8_xq_q(xq, kp, t);
		float *d = (float *)ms_q8_xq_d(xq, kp, t);
		int32_t *s = (int32_t *)ms_q8_xq_s(xq, kp, t);
		for (int64_t b = 0; b < nb; b++) {
			int64_t k0 = b * 32;
			__mmask16 m0 = K - k0 >= 16 ? 0xFFFF : (__mmask16)((1u << (K - k0)) - 1);
			__mmask16 m1 = K - k0 >= 32 ? 0xFFFF :
				       K - k0 <= 16 ? 0 : (__mmask16)((1u << (K - k0 - 16)) - 1);
			__m512 x0, x1;
			if (h->perm) {
				__m512i i0 = _mm512_maskz_loadu_epi32(m0, h->perm + k0);
				__m512i i1 = _mm512_maskz_loadu_epi32(m1, h->perm + k0 + 16);
				x0 = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, i0, xt, 4);
				x1 = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, i1, xt, 4);
			} else {
				x0 = _mm512_maskz_loadu_ps(m0, xt + k0);
				x1 = _mm512_maskz_loadu_ps(m1, xt + k0 + 16);
			}
			__m512i a = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(x0), absm),
						     _mm512_and_si512(_mm512_castps_si512(x1), absm));
			uint32_t abits = (uint32_t)hmax_epu32(a);
			int8_t *qb = q + k0;
			if (abits >= 0x7F800000u || abits < 0x0F800000u) {
				memset(qb, 0, 32);
				uint32_t nanb = 0x7FC00000u;
				float nanf;
				memcpy(&nanf, &nanb, 4);
				d[b] = abits >= 0x7F800000u ? nanf : 0.0f;
				s[b] = 0;
				continue;
			}
			float amax;
			memcpy(&amax, &abits, 4);
			__m512i q0, q1;
			bool done = false;
			if (h->act == MS_Q8_ACT_POW2) {
				int32_t e = (int32_t)(abits >> 23) - 133 + ((abits & 0x7FFFFF) > 0x7E0000);
				uint32_t db = (uint32_t)(e + 127) << 23, ib = (uint32_t)(127 - e) << 23;
				float d2, inv2;
				memcpy(&d2, &db, 4);
				memcpy(&inv2, &ib, 4);
				__m512 vi = _mm512_set1_ps(inv2), vd = _mm512_set1_ps(d2);
				q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vi));
				q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vi));
				__mmask16 e0 = _mm512_cmp_ps_mask(_mm512_mul_ps(_mm512_cvtepi32_ps(q0), vd), x0, _CMP_EQ_OQ);
				__mmask16 e1 = _mm512_cmp_ps_mask(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), vd), x1, _CMP_EQ_OQ);
				if (e0 == 0xFFFF && e1 == 0xFFFF) {
					d[b] = d2;
					done = true;
				}
			}
			if (!done) {
				__m512 vi = _mm512_set1_ps(127.0f / amax);
				q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vi));
				q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vi));
				q0 = _mm512_max_epi32(_mm512_min_epi32(q0, lim), nlim);
				q1 = _mm512_max_epi32(_mm512_min_epi32(q1, lim), nlim);
				d[b] = amax / 127.0f;
			}
			_mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(q0));
			_mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(q1));
			s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
		}
		ms_q8_xq_fill_c(h->kind, xq, kp, t);
	}
}

#endif /* MS_Q8_VBMI */
