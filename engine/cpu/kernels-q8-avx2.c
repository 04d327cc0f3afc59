/*
 * kernels-q8-avx2.c: the q8 panel kernel (kernels-q8.h) for CPUs with AVX2
 * but without AVX-512 VNNI, compiled with its own flags (engine/meson.build).
 * It reads the same packs and prepared activations as the AVX-512 kernel and
 * computes the same integers and the same epilogue in the same order, so its
 * results are bitwise those of ms_q8_gemmq_ref (tests/engine/test-kernels-q8.c).
 *
 * A 64-byte sub-step of a block (16 lanes x 4 code bytes) is taken as two
 * 32-byte halves, lanes 0-7 and 8-15. Without vpdpbusd, a lane's sum of four
 * u8 x s8 products is vpmaddubsw (pairs into int16) then vpmaddwd by ones
 * (pairs of pairs into int32). vpmaddubsw saturates at 2^15: the 4-bit
 * operands (codes + 16 - zero, or lut12 + 4: at most 31) times |q| <= 127
 * stay far below it (2 x 31 x 127 = 7874); 8-bit codes are split into their
 * two nibbles, dot = 16 dot(high) + dot(low), each exact the same way.
 * MXFP4 scales: 2^(e - 128) built in the exponent bits (no vscalefps here),
 * times d rounded once, as the portable kernel does.
 *
 * Tokens go two at a time over one panel (4 accumulators and 4 dot vectors
 * of the 16 ymm registers); a panel's later token pairs find it in L1/L2.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels-q8.h"

#define AI static inline __attribute__((always_inline))

AI __m256i bcast4(const int8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* What the epilogue of one block needs, per half (lanes 8h .. 8h+7). */
struct bmeta2 {
	__m256 sc[2];    /* the lanes' scales as fp32 */
	__m256 zf[2];    /* INT8: zero points as fp32 */
	__m256i bias[2]; /* INT4: 16 - zero in every byte of a lane's dword */
};

AI struct bmeta2 block_meta(int kind, const uint8_t *meta)
{
	struct bmeta2 m;
#pragma GCC unroll 2
	for (int hh = 0; hh < 2; hh++) {
		if (kind == MS_Q8_MXFP4) {
			__m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(meta + 8 * hh)));
			/* 2^(e - 128): exponent field e - 1 from e = 2 on, else the
			 * subnormals 2^-128 (0x00200000) and 2^-127 */
			__m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
			__m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
			__m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
			m.sc[hh] = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
			m.zf[hh] = _mm256_setzero_ps();
			m.bias[hh] = _mm256_setzero_si256();
		} else {
			m.sc[hh] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(meta + 16 * hh)));
			__m256i z = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(meta + 32 + 8 * hh)));
			if (kind == MS_Q8_INT4) {
				/* zero <= 15: times 0x01010101 puts it in every byte */
				__m256i zr = _mm256_mullo_epi32(z, _mm256_set1_epi32(0x01010101));
				m.bias[hh] = _mm256_sub_epi8(_mm256_set1_epi8(16), zr);
				m.zf[hh] = _mm256_setzero_ps();
			} else {
				m.zf[hh] = _mm256_cvtepi32_ps(z);
				m.bias[hh] = _mm256_setzero_si256();
			}
		}
	}
	return m;
}

/* Sum of four u8 x s8 products per 32-bit lane, exactly (no saturation for
 * the operands above). */
AI __m256i dot4(__m256i u, __m256i a)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

AI void store_rows(float *y, __m256 v, int64_t r, int64_t r_end)
{
	if (r + 8 <= r_end) {
		_mm256_storeu_ps(y, v);
	} else if (r < r_end) {
		const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
		__m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(r_end - r)), idx);
		_mm256_maskstore_ps(y, mask, v);
	}
}

/* NT (1 or 2) tokens from t0 over panel p. */
AI void panel_pass(const int kind, const int NT, const struct ms_q8_pack *h, int64_t p,
		   const void *xq, int64_t t0, float *y, int64_t ldy, int64_t r_end)
{
	const int64_t kp = h->kp, nb = h->n_blocks, BB = h->block_bytes;
	const int64_t cb = ms_q8_code_bytes(kind);
	const uint8_t *pan = h->panels + p * h->panel_bytes;
	const __m256i m0f = _mm256_set1_epi8(0x0F);
	const __m256i lut = _mm256_broadcastsi128_si256(
		_mm_set_epi32(0x04080A0C, 0x0D0E0F10, 0x1C181614, 0x13121110));
	const int8_t *q[2];
	const float *d[2];
	const int32_t *s[2];
	__m256 acc[2][2];
	#pragma GCC unroll 2
	for (int t = 0; t < NT; t++) {
		q[t] = ms_q8_xq_q(xq, kp, t0 + t);
		d[t] = ms_q8_xq_d(xq, kp, t0 + t);
		s[t] = ms_q8_xq_s(xq, kp, t0 + t);
		acc[t][0] = acc[t][1] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *blk = pan + b * BB;
		/* the next block's lines, one block ahead of the demand loads */
#pragma GCC unroll 9
		for (int64_t o = 0; o < cb + ms_q8_meta_bytes(kind); o += 64)
			_mm_prefetch((const char *)blk + BB + o, _MM_HINT_T0);
		struct bmeta2 m = block_meta(kind, blk + cb);
		__m256i dot[2][2];
		#pragma GCC unroll 2
		for (int t = 0; t < NT; t++)
			dot[t][0] = dot[t][1] = _mm256_setzero_si256();
		if (kind != MS_Q8_INT8) {
#pragma GCC unroll 4
			for (int ss = 0; ss < 4; ss++) {
				__m256i al[2], ah[2];
				#pragma GCC unroll 2
				for (int t = 0; t < NT; t++) {
					al[t] = bcast4(q[t] + b * 32 + 8 * ss);
					ah[t] = bcast4(q[t] + b * 32 + 8 * ss + 4);
				}
				#pragma GCC unroll 2
				for (int hh = 0; hh < 2; hh++) {
					__m256i v = _mm256_loadu_si256((const __m256i *)(blk + 64 * ss + 32 * hh));
					__m256i l = _mm256_and_si256(v, m0f);
					__m256i u = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
					if (kind == MS_Q8_MXFP4) {
						l = _mm256_shuffle_epi8(lut, l);
						u = _mm256_shuffle_epi8(lut, u);
					} else {
						l = _mm256_add_epi8(l, m.bias[hh]);
						u = _mm256_add_epi8(u, m.bias[hh]);
					}
					#pragma GCC unroll 2
					for (int t = 0; t < NT; t++)
						dot[t][hh] = _mm256_add_epi32(
							dot[t][hh], _mm256_add_epi32(dot4(l, al[t]), dot4(u, ah[t])));
				}
			}
		} else {
#pragma GCC unroll 8
			for (int ss = 0; ss < 8; ss++) {
				__m256i a[2];
				#pragma GCC unroll 2
				for (int t = 0; t < NT; t++)
					a[t] = bcast4(q[t] + b * 32 + 4 * ss);
				#pragma GCC unroll 2
				for (int hh = 0; hh < 2; hh++) {
					__m256i v = _mm256_loadu_si256((const __m256i *)(blk + 64 * ss + 32 * hh));
					__m256i l = _mm256_and_si256(v, m0f);
					__m256i u = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
					#pragma GCC unroll 2
					for (int t = 0; t < NT; t++)
						dot[t][hh] = _mm256_add_epi32(
							dot[t][hh],
							_mm256_add_epi32(dot4(l, a[t]),
									 _mm256_slli_epi32(dot4(u, a[t]), 4)));
				}
			}
		}
		/* acc + (float)(dot - zero * s) * (scale * d), as kernels-q8.h says */
		#pragma GCC unroll 2
		for (int t = 0; t < NT; t++) {
			__m256 dd = _mm256_set1_ps(d[t][b]);
#pragma GCC unroll 2
			for (int hh = 0; hh < 2; hh++) {
				__m256 x;
				if (kind == MS_Q8_INT8)
					x = _mm256_fnmadd_ps(m.zf[hh], _mm256_set1_ps((float)s[t][b]),
							     _mm256_cvtepi32_ps(dot[t][hh]));
				else
					x = _mm256_cvtepi32_ps(_mm256_sub_epi32(
						dot[t][hh], _mm256_set1_epi32(s[t][b] * 16)));
				acc[t][hh] = _mm256_fmadd_ps(x, _mm256_mul_ps(m.sc[hh], dd), acc[t][hh]);
			}
		}
	}
	#pragma GCC unroll 2
	for (int t = 0; t < NT; t++)
#pragma GCC unroll 2
		for (int hh = 0; hh < 2; hh++) {
			int64_t r = p * 16 + 8 * hh;
			store_rows(y + (t0 + t) * ldy + r, acc[t][hh], r, r_end);
		}
}

AI void kernel(const int kind, const struct ms_q8_pack *h, int64_t pa, int64_t pb, const void *xq,
	       int64_t n, float *y, int64_t ldy, int64_t r_end)
{
	for (int64_t p = pa; p < pb; p++) {
		int64_t t = 0;
		for (; t + 2 <= n; t += 2)
			panel_pass(kind, 2, h, p, xq, t, y, ldy, r_end);
		if (t < n)
			panel_pass(kind, 1, h, p, xq, t, y, ldy, r_end);
	}
}

void ms_q8_gemmq_avx2(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		      float *y, int64_t ldy)
{
	const struct ms_q8_pack *h = w->pack;
	int64_t pa = r0 / 16, pb = (r1 + 15) / 16;
	if (n <= 0 || pb <= pa)
		return;
	switch (h->kind) {
	case MS_Q8_MXFP4:
		kernel(MS_Q8_MXFP4, h, pa, pb, xq, n, y, ldy, r1);
		break;
	case MS_Q8_INT4:
		kernel(MS_Q8_INT4, h, pa, pb, xq, n, y, ldy, r1);
		break;
	default:
		kernel(MS_Q8_INT8, h, pa, pb, xq, n, y, ldy, r1);
		break;
	}
}
