/*
 * kernels-avx2.c: AVX2 + FMA + F16C kernels for the float formats, built
 * with their own flags; see kernels-avx512.c for the scheme (one pass over
 * each row for up to four tokens, each token's accumulation independent of
 * the others). MXFP4 and INTQ: the q8 panel kernel of kernels-q8-avx2.c
 * (int8 activations); what its packer declines, and FP8, fall back to the
 * reference kernels.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "kernels-q8.h"

#define TB 4

static inline float hsum8(__m256 v)
{
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	a = _mm_add_ss(a, _mm_movehdup_ps(a));
	return _mm_cvtss_f32(a);
}

static inline __m256 load_bf16(const uint16_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __m256 load_f16(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* RB rows against tokens t0..t0+NT-1 (VLOAD(p) loads eight weights from p
 * as floats, SCALAR(e) converts one, for the tail); RB and NT are
 * constants (MS_DEF_ROWS_GEMM). The tail is an explicit fmaf: left to
 * contraction, GCC fused it in some (RB, NT) instances and not others, and
 * a token's result then depended on its batch. Two rows at a time (16
 * registers): each token's activations are read once per two rows. Every
 * (row, token) keeps its own accumulator in k order: the same sums
 * whatever RB. */
#define DEF_DOT_ROWS(NAME, ELEM, VLOAD, SCALAR)                                                \
	static inline __attribute__((always_inline)) void NAME(                               \
		const ELEM *row, size_t rs, int64_t K, const float *x, int64_t ldx, int64_t t0,   \
		float *y, int64_t ldy, int64_t r, const int RB, const int NT)                  \
	{                                                                                      \
		__m256 acc[2][TB];                                                             \
		float tail[2][TB] = {{0}};                                                     \
		_Pragma("GCC unroll 2") for (int i = 0; i < RB; i++)                           \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				acc[i][t] = _mm256_setzero_ps();                               \
		int64_t k = 0;                                                                 \
		for (; k + 8 <= K; k += 8) {                                                   \
			__m256 xv[TB];                                                         \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				xv[t] = _mm256_loadu_ps(x + (t0 + t) * ldx + k);               \
			_Pragma("GCC unroll 2") for (int i = 0; i < RB; i++) {                 \
				__m256 wv = VLOAD((const ELEM *)((const uint8_t *)row + i * rs) + k); \
				_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)           \
					acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);    \
			}                                                                      \
		}                                                                              \
		for (; k < K; k++)                                                             \
			_Pragma("GCC unroll 2") for (int i = 0; i < RB; i++)                   \
				_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)           \
					tail[i][t] = fmaf(SCALAR(((const ELEM *)((const uint8_t *)row + \
										 i * rs))[k]), \
							  x[(t0 + t) * ldx + k], tail[i][t]);  \
		_Pragma("GCC unroll 2") for (int i = 0; i < RB; i++)                           \
			_Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)                   \
				y[(t0 + t) * ldy + r + i] = hsum8(acc[i][t]) + tail[i][t];     \
	}

/* gemm over rows r0..r1 for one element type: two rows a pass, then one. */
#define DEF_GEMM(NAME, ELEM, VLOAD, SCALAR)                                                    \
	DEF_DOT_ROWS(NAME##_rows, ELEM, VLOAD, SCALAR)                                         \
	MS_DEF_ROWS_GEMM(NAME, ELEM, NAME##_rows, 2)

#define AS_F32(v) (v)
DEF_GEMM(gemm_bf16, uint16_t, load_bf16, ms_bf16_to_f32)
DEF_GEMM(gemm_f16, uint16_t, load_f16, ms_f16_to_f32)
DEF_GEMM(gemm_f32, float, _mm256_loadu_ps, AS_F32)

#define AVX2_FLAGS (MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C)

const struct ms_kernel ms_kernels_avx2[MS_K_AVX2_COUNT + 1] = {
	/* int8 activations on the q8 panels (kernels-q8-avx2.c; the error
	 * kernels-q8.h states), bitwise the AVX-512 VNNI kernel's results;
	 * a matrix the packer declines goes to the reference kernel */
	[MS_K_AVX2_Q8_MXFP4] = {.name = "avx2-q8-mxfp4", .isa = "avx2", .fmt = MS_WFMT_MXFP4,
	 .cpu_flags = AVX2_FLAGS, .pack = ms_q8_pack, .prep_size = ms_q8_prep_size, .prep = ms_q8_prep,
	 .gemmq = ms_q8_gemmq_avx2, .row_align = MS_Q8_PANEL, .rounds_acts = true},
	[MS_K_AVX2_Q8_INTQ] = {.name = "avx2-q8-intq", .isa = "avx2", .fmt = MS_WFMT_INTQ,
	 .cpu_flags = AVX2_FLAGS, .pack = ms_q8_pack, .prep_size = ms_q8_prep_size, .prep = ms_q8_prep,
	 .gemmq = ms_q8_gemmq_avx2, .row_align = MS_Q8_PANEL, .rounds_acts = true},
	[MS_K_AVX2_F32] = {.name = "avx2-f32", .isa = "avx2", .fmt = MS_WFMT_F32,
	 .cpu_flags = AVX2_FLAGS, .gemm = gemm_f32},
	[MS_K_AVX2_F16] = {.name = "avx2-f16", .isa = "avx2", .fmt = MS_WFMT_F16,
	 .cpu_flags = AVX2_FLAGS, .gemm = gemm_f16},
	[MS_K_AVX2_BF16] = {.name = "avx2-bf16", .isa = "avx2", .fmt = MS_WFMT_BF16,
	 .cpu_flags = AVX2_FLAGS, .gemm = gemm_bf16},
	[MS_K_AVX2_COUNT] = {0},
};
