/*
 * kernels-avx512.c: AVX-512 (F, BW, VL) + FMA + F16C kernels, compiled with
 * their own flags (engine/cpu/meson.build) and chosen at start-up only when
 * the CPU and the OS support them (kernel-table.c).
 *
 * Each row of W is streamed once per call and applied to up to four tokens
 * at a time; every token keeps its own accumulators in a fixed order, so a
 * token's result does not depend on how many others share the call (batch
 * invariance, tested).
 *
 * For MXFP4 and INTQ the int8-activation kernels of kernels-q8-avx512.c
 * (VNNI) come first; the fp32 kernels here stay behind them for --exact and
 * for matrices the q8 packer declines.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kernels-bf16.h"
#include "kernels-q8.h"

#define TB 4 /* tokens per pass over a row */
#define AI static inline __attribute__((always_inline))

static inline __m512 load_bf16(const uint16_t *p, __mmask16 m)
{
	__m256i h = _mm256_maskz_loadu_epi16(m, p);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512 load_f16(const uint16_t *p, __mmask16 m)
{
	return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static inline __m512 load_f32(const float *p, __mmask16 m)
{
	return _mm512_maskz_loadu_ps(m, p);
}

/* RB rows against tokens t0..t0+NT-1 (NT <= TB, a constant: MS_DEF_ROWS_GEMM),
 * for a 16-wide loader. Four rows at a time: each token's activations are
 * read once per four rows, not per row (the router at 16 tokens, 32 x
 * 2880: the activations re-read from L2 for every row bounded it). Every
 * (row, token) keeps one accumulator over k in order, then one reduction:
 * the same sums whatever RB. */
#define DEF_DOT_ROWS(NAME, ELEM, LOADW)                                                        \
	AI void NAME(const ELEM *row, size_t rs, int64_t K, const float *x, int64_t ldx,     \
		     int64_t t0, float *y, int64_t ldy, int64_t r, const int RB, const int NT) \
	{                                                                                      \
		__m512 acc[4][TB];                                                             \
		_Pragma("GCC unroll 4") for (int i = 0; i < RB; i++)                           \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				acc[i][t] = _mm512_setzero_ps();                               \
		int64_t k = 0;                                                                 \
		for (; k + 16 <= K; k += 16) {                                                 \
			__m512 xv[TB];                                                         \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				xv[t] = _mm512_loadu_ps(x + (t0 + t) * ldx + k);               \
			_Pragma("GCC unroll 4") for (int i = 0; i < RB; i++) {                 \
				__m512 wv = LOADW((const ELEM *)((const uint8_t *)row + i * rs) + k, \
						  0xFFFF);                                     \
				_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)           \
					acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);    \
			}                                                                      \
		}                                                                              \
		if (k < K) {                                                                   \
			__mmask16 m = (__mmask16)((1u << (K - k)) - 1);                        \
			__m512 xv[TB];                                                         \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				xv[t] = _mm512_maskz_loadu_ps(m, x + (t0 + t) * ldx + k);      \
			_Pragma("GCC unroll 4") for (int i = 0; i < RB; i++) {                 \
				__m512 wv = LOADW((const ELEM *)((const uint8_t *)row + i * rs) + k, m); \
				_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)           \
					acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);    \
			}                                                                      \
		}                                                                              \
		_Pragma("GCC unroll 4") for (int i = 0; i < RB; i++)                           \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				y[(t0 + t) * ldy + r + i] = _mm512_reduce_add_ps(acc[i][t]);   \
	}

/* gemm over rows r0..r1 for one element type and 16-wide loader: four
 * rows a pass, then one. */
#define DEF_GEMM(NAME, ELEM, LOADW)                                                            \
	DEF_DOT_ROWS(NAME##_rows, ELEM, LOADW)                                                 \
	MS_DEF_ROWS_GEMM(NAME, ELEM, NAME##_rows, 4)

DEF_GEMM(gemm_bf16, uint16_t, load_bf16)
DEF_GEMM(gemm_f16, uint16_t, load_f16)
DEF_GEMM(gemm_f32, float, load_f32)

/* Row r (codes row, scales sc) against tokens t0..t0+NT-1 (MS_CALL_NT4). */
AI void mxfp4_row(const struct ms_wmat *w, const uint8_t *row, const uint8_t *sc, const float *x,
		  int64_t ldx, int64_t t0, float *y, int64_t ldy, int64_t r, const int NT)
{
	int64_t K = w->cols, full = K / 32;
	const __m512 lut = _mm512_loadu_ps(ms_e2m1_lut);
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	__m512 acc[TB];
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		acc[t] = _mm512_setzero_ps();
	for (int64_t g = 0; g < full; g++) {
		__m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + g * 16)));
		__m512 we = _mm512_permutexvar_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)), lut);
		__m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
		__m512 s = _mm512_set1_ps(ms_e8m0_to_f32(sc[g]));
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++) {
			const float *xp = x + (t0 + t) * ldx + g * 32;
			__m512 a = _mm512_loadu_ps(xp), c = _mm512_loadu_ps(xp + 16);
			__m512 xe = _mm512_permutex2var_ps(a, even, c);
			__m512 xo = _mm512_permutex2var_ps(a, odd, c);
			__m512 gs = _mm512_fmadd_ps(wo, xo, _mm512_mul_ps(we, xe));
			acc[t] = _mm512_fmadd_ps(gs, s, acc[t]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		y[(t0 + t) * ldy + r] = _mm512_reduce_add_ps(acc[t]);
	if (full * 32 < K) { /* a partial last group: scalar */
		float tail_w[32];
		int64_t c0 = full * 32, m = K - c0;
		float s = ms_e8m0_to_f32(sc[full]);
		for (int64_t k = 0; k < m; k++) {
			uint8_t byte = row[(c0 + k) / 2];
			tail_w[k] = ms_e2m1_lut[(k & 1) ? byte >> 4 : byte & 15];
		}
		for (int t = 0; t < NT; t++) {
			const float *xp = x + (t0 + t) * ldx + c0;
			float sum = 0;
			for (int64_t k = 0; k < m; k++)
				sum += tail_w[k] * xp[k];
			y[(t0 + t) * ldy + r] += sum * s;
		}
	}
}

/* MXFP4: per 32-column group, the 16 bytes give the even columns (low
 * nibbles) and the odd ones (high nibbles); the e2m1 values come from a
 * 16-entry table by permutation, the token's even and odd columns by a
 * two-source permutation; the group's sum is scaled by 2^(e-127) once. */
static void gemm_mxfp4(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx,
		       int64_t n, float *y, int64_t ldy)
{
	for (int64_t r = r0; r < r1; r++) {
		const uint8_t *row = w->w + (size_t)r * w->row_bytes;
		const uint8_t *sc = w->scales + (size_t)r * w->scale_row_bytes;
		for (int64_t t0 = 0; t0 < n; t0 += TB) {
			int nt = (int)(n - t0 < TB ? n - t0 : TB);
			MS_CALL_NT4(nt, mxfp4_row, w, row, sc, x, ldx, t0, y, ldy, r);
		}
	}
}

/* ---- fp32 kernels for INTQ and FP8: a row is decoded to fp32 in chunks
 * (each weight rounded exactly as ms_wmat_row_f32 rounds it), then applied
 * to up to TB tokens at a time ---- */

#define DEC_CHUNK 1024 /* columns decoded at once (a multiple of 16) */

static inline __mmask16 mask_first(int64_t m)
{
	return m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1);
}

/* INTQ columns [c0, c1) of row r (c0 a multiple of 16): W = s * (q - z),
 * the subtraction and the product rounded separately, as the reference. */
static void intq_chunk(const struct ms_wmat *w, int64_t r, int64_t c0, int64_t c1, float *out)
{
	const int sb = ms_intq_storage_bits(w->bits);
	const uint8_t *row = w->w + (size_t)r * w->row_bytes;
	const float *s = w->fscale + (size_t)r * (size_t)w->n_groups;
	const float *z = w->fzero + (size_t)r * (size_t)w->n_groups;
	const int32_t *gi = w->row_g_idx ? w->row_g_idx[r] : NULL;
	const int64_t gs = w->group_size;
	/* element e of 16 consecutive codes: byte e * sb / 8, bit (e * sb) % 8 */
	int32_t bi[16], sh[16];
	for (int e = 0; e < 16; e++) {
		bi[e] = e * sb / 8;
		sh[e] = (e * sb) % 8;
	}
	const __m512i vbi = _mm512_loadu_si512(bi), vsh = _mm512_loadu_si512(sh);
	const __m512i cmask = _mm512_set1_epi32((1 << w->bits) - 1);
	for (int64_t k = c0; k < c1; k += 16) {
		__mmask16 m = mask_first(c1 - k);
		int64_t nbytes = ((c1 - k < 16 ? c1 - k : 16) * sb + 7) / 8;
		__m128i raw = _mm_maskz_loadu_epi8(mask_first(nbytes), row + k * sb / 8);
		__m512i codes = _mm512_and_si512(
			_mm512_srlv_epi32(_mm512_permutexvar_epi32(vbi, _mm512_cvtepu8_epi32(raw)), vsh),
			cmask);
		__m512 sv, zv;
		if (!gi && k / gs == (k + 15) / gs) {
			sv = _mm512_set1_ps(s[k / gs]);
			zv = _mm512_set1_ps(z[k / gs]);
		} else {
			__m512i g;
			if (gi) {
				g = _mm512_maskz_loadu_epi32(m, gi + k);
			} else {
				int32_t gg[16];
				for (int e = 0; e < 16; e++)
					gg[e] = (int32_t)((k + e) / gs);
				g = _mm512_maskz_mov_epi32(m, _mm512_loadu_si512(gg));
			}
			sv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, g, s, 4);
			zv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, g, z, 4);
		}
		__m512 v = _mm512_mul_ps(sv, _mm512_sub_ps(_mm512_cvtepi32_ps(codes), zv));
		_mm512_mask_storeu_ps(out + (k - c0), m, v);
	}
}

/* FP8 e4m3fn columns [c0, c1) of row r: exponent and mantissa placed in an
 * fp16 (bias 15 instead of 7: a factor 2^-8 for normals and subnormals
 * alike), converted, times 2^8, the sign from bit 7; 0x7F / 0xFF are NaN;
 * then times the row scale (one rounding, as the reference). */
static void fp8_chunk(const struct ms_wmat *w, int64_t r, int64_t c0, int64_t c1, float *out)
{
	const uint8_t *row = w->w + (size_t)r * w->row_bytes;
	const __m512 sc = _mm512_set1_ps(w->fscale[r]), two8 = _mm512_set1_ps(256.0f);
	const __m512 qnan = _mm512_set1_ps(NAN);
	for (int64_t k = c0; k < c1; k += 16) {
		__mmask16 m = mask_first(c1 - k);
		__m128i raw = _mm_maskz_loadu_epi8(m, row + k);
		__m256i h = _mm256_and_si256(_mm256_cvtepu8_epi16(raw), _mm256_set1_epi16(0x7F));
		__mmask16 isnan = _mm256_cmpeq_epi16_mask(h, _mm256_set1_epi16(0x7F));
		__m512 v = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_slli_epi16(h, 7)), two8);
		__m512i sign = _mm512_slli_epi32(_mm512_and_si512(_mm512_cvtepu8_epi32(raw), _mm512_set1_epi32(0x80)), 24);
		v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
		v = _mm512_mask_mov_ps(v, isnan, qnan);
		_mm512_mask_storeu_ps(out + (k - c0), m, _mm512_mul_ps(v, sc));
	}
}

typedef void (*chunk_fn)(const struct ms_wmat *w, int64_t r, int64_t c0, int64_t c1, float *out);

/* A decoded chunk (L columns from c0) of row r against tokens t0..t0+NT-1
 * (MS_CALL_NT4). */
AI void chunk_tokens(const float *buf, int64_t L, int64_t c0, const float *x, int64_t ldx,
		     int64_t t0, float *y, int64_t ldy, int64_t r, const int NT)
{
	__m512 acc[TB];
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		acc[t] = _mm512_setzero_ps();
	for (int64_t k = 0; k < L; k += 16) {
		__mmask16 m = mask_first(L - k);
		__m512 wv = _mm512_maskz_loadu_ps(m, buf + k);
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++)
			acc[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + (t0 + t) * ldx + c0 + k),
						 acc[t]);
	}
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++) {
		float v = _mm512_reduce_add_ps(acc[t]);
		float *o = &y[(t0 + t) * ldy + r];
		*o = c0 ? *o + v : v;
	}
}

static inline void gemm_chunked(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x,
				int64_t ldx, int64_t n, float *y, int64_t ldy, chunk_fn dec)
{
	_Alignas(64) float buf[DEC_CHUNK];
	int64_t K = w->cols;
	for (int64_t r = r0; r < r1; r++) {
		for (int64_t c0 = 0; c0 < K; c0 += DEC_CHUNK) {
			int64_t c1 = c0 + DEC_CHUNK < K ? c0 + DEC_CHUNK : K, L = c1 - c0;
			dec(w, r, c0, c1, buf);
			for (int64_t t0 = 0; t0 < n; t0 += TB) {
				int nt = (int)(n - t0 < TB ? n - t0 : TB);
				MS_CALL_NT4(nt, chunk_tokens, buf, L, c0, x, ldx, t0, y, ldy, r);
			}
		}
	}
}

static void gemm_intq(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx,
		      int64_t n, float *y, int64_t ldy)
{
	gemm_chunked(w, r0, r1, x, ldx, n, y, ldy, intq_chunk);
}

static void gemm_fp8(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx,
		     int64_t n, float *y, int64_t ldy)
{
	gemm_chunked(w, r0, r1, x, ldx, n, y, ldy, fp8_chunk);
}

#define AVX512_FLAGS (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA | MS_CPU_F16C)

const struct ms_kernel ms_kernels_avx512[MS_K_AVX512_COUNT + 1] = {
	/* int8 activations (kernels-q8.h states their error); the choice
	 * table puts them first for their formats, and the fp32 kernels take
	 * what they decline */
	[MS_K_AVX512VBMI_Q8_MXFP4] = {.name = "avx512vbmi-q8-mxfp4", .isa = "avx512", .fmt = MS_WFMT_MXFP4,
	 .cpu_flags = AVX512_FLAGS | MS_CPU_AVX512VNNI | MS_CPU_AVX512VBMI, .pack = ms_q8_pack,
	 .prep_size = ms_q8_prep_size, .prep = ms_q8_prep_avx512, .gemmq = ms_q8_gemmq_avx512vbmi,
	 .row_align = MS_Q8_PANEL, .rounds_acts = true},
	[MS_K_AVX512VNNI_Q8_MXFP4] = {.name = "avx512vnni-q8-mxfp4", .isa = "avx512", .fmt = MS_WFMT_MXFP4,
	 .cpu_flags = AVX512_FLAGS | MS_CPU_AVX512VNNI, .pack = ms_q8_pack,
	 .prep_size = ms_q8_prep_size, .prep = ms_q8_prep_avx512, .gemmq = ms_q8_gemmq_avx512vnni,
	 .row_align = MS_Q8_PANEL, .rounds_acts = true},
	[MS_K_AVX512VNNI_Q8_INTQ] = {.name = "avx512vnni-q8-intq", .isa = "avx512", .fmt = MS_WFMT_INTQ,
	 .cpu_flags = AVX512_FLAGS | MS_CPU_AVX512VNNI, .pack = ms_q8_pack,
	 .prep_size = ms_q8_prep_size, .prep = ms_q8_prep_avx512, .gemmq = ms_q8_gemmq_avx512vnni,
	 .row_align = MS_Q8_PANEL, .rounds_acts = true},
	/* bf16 activations through VDPBF16PS on 16-row panels (kernels-bf16.h
	 * states its error): first for dense bf16 matrices, ahead of oneDNN
	 * (kernel-table.c), which streams M = 1 at ~70% of the bandwidth */
	[MS_K_AVX512BF16_VNNI2] = {.name = "avx512bf16-vnni2", .isa = "avx512", .fmt = MS_WFMT_BF16,
	 .cpu_flags = AVX512_FLAGS | MS_CPU_AVX512BF16, .pack = ms_bf16_pack,
	 .prep_size = ms_bf16_prep_size, .prep = ms_bf16_prep_avx512, .gemmq = ms_bf16_gemmq_avx512,
	 .row_align = MS_BF16_PANEL, .rounds_acts = true},
	[MS_K_AVX512_F32] = {.name = "avx512-f32", .isa = "avx512", .fmt = MS_WFMT_F32,
	 .cpu_flags = AVX512_FLAGS, .gemm = gemm_f32},
	[MS_K_AVX512_F16] = {.name = "avx512-f16", .isa = "avx512", .fmt = MS_WFMT_F16,
	 .cpu_flags = AVX512_FLAGS, .gemm = gemm_f16},
	[MS_K_AVX512_BF16] = {.name = "avx512-bf16", .isa = "avx512", .fmt = MS_WFMT_BF16,
	 .cpu_flags = AVX512_FLAGS, .gemm = gemm_bf16},
	[MS_K_AVX512_MXFP4] = {.name = "avx512-mxfp4", .isa = "avx512", .fmt = MS_WFMT_MXFP4,
	 .cpu_flags = AVX512_FLAGS, .gemm = gemm_mxfp4},
	[MS_K_AVX512_INTQ] = {.name = "avx512-intq", .isa = "avx512", .fmt = MS_WFMT_INTQ,
	 .cpu_flags = AVX512_FLAGS, .gemm = gemm_intq},
	[MS_K_AVX512_FP8] = {.name = "avx512-fp8", .isa = "avx512", .fmt = MS_WFMT_FP8,
	 .cpu_flags = AVX512_FLAGS, .gemm = gemm_fp8},
	[MS_K_AVX512_COUNT] = {0},
};
