/*
 * test-kernels.c: weight-format decoding and the reference kernels.
 *
 * The reference kernels are the definition of correctness for every later
 * kernel, so they are held here to an independent double-precision product
 * on random data of ragged sizes, within 1e-5 relative to the magnitude of
 * the sum (fp32 accumulation over at most a few thousand terms). The ISA
 * kernel sets and row operations are held to them in a test per ISA
 * (`--isa avx512`, `--isa avx2`: exit 77 where the CPU lacks it).
 */
#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "isagate.h"
#include "kernels.h"
#include "pool.h"

#define TESTUTIL_SEED 12345u
#include "testutil.h"
#include "testmats.h"

START_TEST(e2m1_table_and_e8m0)
{
	const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
	for (int i = 0; i < 16; i++) {
		ck_assert_float_eq(ms_e2m1_lut[i], want[i]);
		ck_assert_int_eq(signbit(ms_e2m1_lut[i]) != 0, i >= 8);
	}
	ck_assert_float_eq(ms_e8m0_to_f32(127), 1.0f);
	ck_assert_float_eq(ms_e8m0_to_f32(128), 2.0f);
	ck_assert_float_eq(ms_e8m0_to_f32(120), 1.0f / 128.0f);
	ck_assert_float_eq(ms_e8m0_to_f32(254), ldexpf(1.0f, 127));
	ck_assert_float_eq(ms_e8m0_to_f32(0), ldexpf(1.0f, -127));
}
END_TEST

/* The worked example of gpt-oss.md §3.2: bytes 0x21, 0xF8 with scale 128
 * decode to +1, +2, -0, -12 (low nibble first). */
START_TEST(mxfp4_worked_example_and_nibble_order)
{
	uint8_t blocks[16] = {0x21, 0xF8};
	uint8_t scale = 128;
	struct ms_wmat m = {.fmt = MS_WFMT_MXFP4, .rows = 1, .cols = 32, .w = blocks,
			    .row_bytes = 16, .scales = &scale, .scale_row_bytes = 1};
	float out[32];
	ms_wmat_row_f32(&m, 0, out);
	ck_assert_float_eq(out[0], 1.0f);
	ck_assert_float_eq(out[1], 2.0f);
	ck_assert_float_eq(out[2], 0.0f);
	ck_assert(signbit(out[2]));
	ck_assert_float_eq(out[3], -12.0f);
	for (int i = 4; i < 32; i++)
		ck_assert_float_eq(out[i], 0.0f);
	/* Second group uses the second scale byte. */
	uint8_t b2[32] = {0}, s2[2] = {127, 130};
	b2[16] = 0x7F; /* element 32 = code 0xF (-6), element 33 = code 7 (+6) */
	struct ms_wmat m2 = {.fmt = MS_WFMT_MXFP4, .rows = 1, .cols = 64, .w = b2,
			     .row_bytes = 32, .scales = s2, .scale_row_bytes = 2};
	float o2[64];
	ms_wmat_row_f32(&m2, 0, o2);
	ck_assert_float_eq(o2[32], -48.0f);
	ck_assert_float_eq(o2[33], 48.0f);
}
END_TEST

START_TEST(half_formats)
{
	ck_assert_float_eq(ms_bf16_to_f32(0x3F80), 1.0f);
	ck_assert_float_eq(ms_bf16_to_f32(0xC040), -3.0f);
	ck_assert_float_eq(ms_f16_to_f32(0x3C00), 1.0f);
	ck_assert_float_eq(ms_f16_to_f32(0xC000), -2.0f);
	ck_assert_float_eq(ms_f16_to_f32(0x7BFF), 65504.0f);
	ck_assert_float_eq(ms_f16_to_f32(0x0001), ldexpf(1.0f, -24)); /* smallest subnormal */
	ck_assert_float_eq(ms_f16_to_f32(0x03FF), ldexpf(1023.0f, -24));
	ck_assert(isinf(ms_f16_to_f32(0x7C00)));
	ck_assert(isnan(ms_f16_to_f32(0x7E00)));
	ck_assert(signbit(ms_f16_to_f32(0x8000)));
}
END_TEST

/* Encode float to the storage of fmt (round to nearest even for halves). */
static void check_gemm_mat(struct mat_buf b, int64_t n);

static void check_gemm(enum ms_wfmt fmt, int64_t rows, int64_t cols, int64_t n)
{
	check_gemm_mat(make_mat(fmt, rows, cols), n);
}

static void check_gemm_mat(struct mat_buf b, int64_t n)
{
	enum ms_wfmt fmt = b.m.fmt;
	int64_t rows = b.m.rows, cols = b.m.cols;
	float *x = malloc((size_t)(n * cols) * sizeof(float));
	float *y = malloc((size_t)(n * rows) * sizeof(float));
	float *row = malloc((size_t)cols * sizeof(float));
	for (int64_t i = 0; i < n * cols; i++)
		x[i] = frand();
	for (int64_t i = 0; i < n * rows; i++)
		y[i] = 1e30f; /* sentinel: rows outside [r0, r1) must stay untouched */
	int64_t r0 = rows / 5, r1 = rows - rows / 7;
	ms_kernels_ref[fmt].gemm(&b.m, r0, r1, x, cols, n, y, rows);
	for (int64_t r = 0; r < rows; r++) {
		ms_wmat_row_f32(&b.m, r, row);
		for (int64_t t = 0; t < n; t++) {
			float got = y[t * rows + r];
			if (r < r0 || r >= r1) {
				ck_assert_float_eq(got, 1e30f);
				continue;
			}
			double want = 0, mag = 0;
			for (int64_t k = 0; k < cols; k++) {
				want += (double)row[k] * x[t * cols + k];
				mag += fabs((double)row[k] * x[t * cols + k]);
			}
			ck_assert_msg(fabs(got - want) <= 1e-5 * (mag + 1.0),
				      "%s %lldx%lld n=%lld: row %lld tok %lld got %.9g want %.9g",
				      ms_wfmt_name(fmt), (long long)rows, (long long)cols, (long long)n,
				      (long long)r, (long long)t, got, want);
		}
	}
	free(x), free(y), free(row);
	free_mat(&b);
}

START_TEST(ref_gemm_matches_double)
{
	const enum ms_wfmt fmts[] = {MS_WFMT_F32, MS_WFMT_F16, MS_WFMT_BF16, MS_WFMT_MXFP4,
				     MS_WFMT_INTQ, MS_WFMT_FP8};
	const int64_t shapes[][2] = {{37, 45}, {64, 64}, {5, 80}, {19, 1100}, {33, 2880}, {1, 1}};
	const int64_t ns[] = {1, 3, 8};
	for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			for (size_t i = 0; i < 3; i++)
				check_gemm(fmts[f], shapes[s][0], shapes[s][1], ns[i]);
}
END_TEST

/* Every INTQ width, with and without per-row g_idx, ragged group counts. */
START_TEST(ref_gemm_intq_widths)
{
	const int bits[] = {2, 3, 4, 8};
	for (int i = 0; i < 4; i++) {
		check_gemm_mat(make_intq(bits[i], 21, 100, 32, false), 3);
		check_gemm_mat(make_intq(bits[i], 13, 1100, 128, true), 2);
		check_gemm_mat(make_intq(bits[i], 8, 96, 96, false), 1); /* one group */
	}
}
END_TEST

/* INTQ decode against codes written independently: W = s * (q - z) with
 * the group from g_idx when given, else k / group_size. */
START_TEST(intq_decode_matches_codes)
{
	const int bits[] = {2, 3, 4, 8};
	for (int bi = 0; bi < 4; bi++) {
		for (int with_g = 0; with_g < 2; with_g++) {
			int64_t rows = 7, cols = 77, gs = 16;
			struct mat_buf b = make_intq(bits[bi], rows, cols, gs, with_g);
			float out[77];
			int sb = ms_intq_storage_bits(bits[bi]);
			for (int64_t r = 0; r < rows; r++) {
				ms_wmat_row_f32(&b.m, r, out);
				for (int64_t k = 0; k < cols; k++) {
					/* re-read the code the slow way: bit by bit */
					unsigned q = 0;
					for (int j = 0; j < bits[bi]; j++) {
						int64_t bit = k * sb + j;
						q |= (unsigned)((b.w[r * (int64_t)b.m.row_bytes + bit / 8] >> (bit % 8)) & 1) << j;
					}
					int64_t g = with_g ? b.rows_g[r][k] : k / gs;
					float want = b.fs[r * b.m.n_groups + g] * ((float)q - b.fz[r * b.m.n_groups + g]);
					ck_assert_msg(out[k] == want, "bits %d row %lld col %lld: %g vs %g",
						      bits[bi], (long long)r, (long long)k, out[k], want);
				}
			}
			free_mat(&b);
		}
	}
}
END_TEST

START_TEST(fp8_e4m3_codec)
{
	/* spot values (PyTorch Float8_e4m3fn limits) */
	ck_assert_float_eq(ms_fp8_e4m3_to_f32(0x7E), 448.0f);
	ck_assert_float_eq(ms_fp8_e4m3_to_f32(0x08), ldexpf(1.0f, -6));
	ck_assert_float_eq(ms_fp8_e4m3_to_f32(0x01), ldexpf(1.0f, -9));
	ck_assert_float_eq(ms_fp8_e4m3_to_f32(0x38), 1.0f);
	ck_assert_float_eq(ms_fp8_e4m3_to_f32(0xC0), -2.0f);
	ck_assert(isnan(ms_fp8_e4m3_to_f32(0x7F)) && isnan(ms_fp8_e4m3_to_f32(0xFF)));
	ck_assert(signbit(ms_fp8_e4m3_to_f32(0x80)));
	/* every finite code round-trips */
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7F) == 0x7F)
			continue;
		ck_assert_int_eq(ms_f32_to_fp8_e4m3(ms_fp8_e4m3_to_f32((uint8_t)c)), c);
	}
	/* midpoints between neighbours go to the even code; just off them, to
	 * the nearer one */
	for (int c = 0; c < 0x7E; c++) {
		float lo = ms_fp8_e4m3_to_f32((uint8_t)c), hi = ms_fp8_e4m3_to_f32((uint8_t)(c + 1));
		float mid = (lo + hi) / 2; /* exact: both have few mantissa bits */
		int even = (c & 1) ? c + 1 : c;
		ck_assert_msg(ms_f32_to_fp8_e4m3(mid) == even, "midpoint of %d and %d", c, c + 1);
		ck_assert_int_eq(ms_f32_to_fp8_e4m3(nextafterf(mid, 0.0f)), c);
		ck_assert_int_eq(ms_f32_to_fp8_e4m3(nextafterf(mid, 1e9f)), c + 1);
		ck_assert_int_eq(ms_f32_to_fp8_e4m3(-mid), 0x80 | even);
	}
	/* saturation, NaN */
	ck_assert_int_eq(ms_f32_to_fp8_e4m3(464.0f), 0x7E);
	ck_assert_int_eq(ms_f32_to_fp8_e4m3(1e30f), 0x7E);
	ck_assert_int_eq(ms_f32_to_fp8_e4m3(-1e30f), 0xFE);
	ck_assert_int_eq(ms_f32_to_fp8_e4m3(NAN), 0x7F);
	ck_assert_int_eq(ms_f32_to_fp8_e4m3(ldexpf(1.0f, -11)), 0x00); /* below half the smallest */
}
END_TEST

START_TEST(backend_gemm_thread_independent)
{
	struct ms_err err = {0};
	struct ms_cpu b1, b3;
	ck_assert_int_eq(ms_cpu_init(&b1, "auto", 1, &err), 0);
	ck_assert_int_eq(ms_cpu_init(&b3, "auto", 3, &err), 0);
	int64_t rows = 301, cols = 96, n = 5;
	struct mat_buf m = make_mat(MS_WFMT_BF16, rows, cols);
	float *x = malloc((size_t)(n * cols) * sizeof(float)), *bias = malloc((size_t)rows * sizeof(float));
	float *y1 = malloc((size_t)(n * rows) * sizeof(float)), *y3 = malloc((size_t)(n * rows) * sizeof(float));
	for (int64_t i = 0; i < n * cols; i++)
		x[i] = frand();
	for (int64_t i = 0; i < rows; i++)
		bias[i] = frand();
	/* bound as the loader does: the first bf16 candidate may be a packed
	 * kernel (avx512bf16-vnni2), whose gemmq reads only its own copy */
	const struct ms_kernel *k = NULL;
	void *owned = NULL;
	char why[256];
	ck_assert_int_eq(ms_cpu_bind(&b1, &m.m, &k, &owned, why, sizeof(why), &err), 0);
	ms_cpu_gemm(&b1, k, &m.m, x, n, y1, bias);
	ms_cpu_gemm(&b3, k, &m.m, x, n, y3, bias);
	ck_assert_int_eq(memcmp(y1, y3, (size_t)(n * rows) * sizeof(float)), 0);
	/* bias was added */
	float row[96];
	ms_wmat_row_f32(&m.m, 7, row);
	double want = bias[7], mag = 0;
	for (int c = 0; c < cols; c++) {
		want += (double)row[c] * x[2 * cols + c];
		mag += fabs((double)row[c] * x[2 * cols + c]);
	}
	/* bf16 activations (2^-9 relative each) where the kernel rounds them */
	ck_assert(fabs(y1[2 * rows + 7] - want) < (k->rounds_acts ? mag / 256 + 1e-4 : 1e-4));
	free(x), free(bias), free(y1), free(y3);
	if (k->pack_free && owned)
		k->pack_free(owned);
	else
		free(owned);
	free_mat(&m);
	ms_cpu_free(&b1);
	ms_cpu_free(&b3);
}
END_TEST

/* Several matrices in one pool run (ms_cpu_gemm_multi, attention's q,
 * k, v) give, bit for bit, what separate calls give: ragged row counts
 * (a block of one matrix never holds another's rows), with and without
 * bias, on 1 and 3 threads, each format's first kernel (packed or not). */
START_TEST(backend_gemm_multi_equals_separate)
{
	struct ms_err err = {0};
	struct ms_cpu bes[2];
	ck_assert_int_eq(ms_cpu_init(&bes[0], "auto", 1, &err), 0);
	ck_assert_int_eq(ms_cpu_init(&bes[1], "auto", 3, &err), 0);
	const enum ms_wfmt fmts[] = {MS_WFMT_BF16, MS_WFMT_MXFP4, MS_WFMT_F32};
	const int64_t rows[3] = {301, 33, 64}, cols = 160;
	for (int f = 0; f < 3; f++)
		for (int64_t n = 1; n <= 17; n += 8) {
			struct mat_buf m[3];
			const struct ms_kernel *k = NULL;
			void *owned[3] = {0};
			char why[256];
			float *x = malloc((size_t)(n * cols) * sizeof(float));
			for (int64_t i = 0; i < n * cols; i++)
				x[i] = frand();
			float *bias[3], *ys[3], *ym[3];
			for (int i = 0; i < 3; i++) {
				m[i] = make_mat(fmts[f], rows[i], cols);
				const struct ms_kernel *ki;
				ck_assert_int_eq(ms_cpu_bind(&bes[0], &m[i].m, &ki, &owned[i], why,
								 sizeof(why), &err), 0);
				ck_assert(!k || ki == k); /* one kernel for all three */
				k = ki;
				bias[i] = malloc((size_t)rows[i] * sizeof(float));
				for (int64_t r = 0; r < rows[i]; r++)
					bias[i][r] = frand();
				ys[i] = malloc((size_t)(n * rows[i]) * sizeof(float));
				ym[i] = malloc((size_t)(n * rows[i]) * sizeof(float));
			}
			const struct ms_wmat *w[3] = {&m[0].m, &m[1].m, &m[2].m};
			for (int b = 0; b < 2; b++)
				for (int with_bias = 0; with_bias < 2; with_bias++) {
					for (int i = 0; i < 3; i++) {
						ms_cpu_gemm(&bes[0], k, w[i], x, n, ys[i],
								with_bias ? bias[i] : NULL);
						memset(ym[i], 0xA5, (size_t)(n * rows[i]) * sizeof(float));
					}
					ms_cpu_gemm_multi(&bes[b], k, 3, w, x, n, ym,
							      with_bias ? (const float *const *)bias : NULL);
					for (int i = 0; i < 3; i++)
						ck_assert_msg(!memcmp(ys[i], ym[i],
								      (size_t)(n * rows[i]) * sizeof(float)),
							      "%s n=%lld threads %d bias %d: matrix %d differs",
							      k->name, (long long)n, b ? 3 : 1, with_bias, i);
				}
			for (int i = 0; i < 3; i++) {
				if (k->pack_free && owned[i])
					k->pack_free(owned[i]);
				else
					free(owned[i]);
				free_mat(&m[i]);
				free(bias[i]), free(ys[i]), free(ym[i]);
			}
			free(x);
		}
	ms_cpu_free(&bes[0]);
	ms_cpu_free(&bes[1]);
}
END_TEST

/* The ISA kernel sets (--kernels NAME) with their builds of the row
 * operations, and the portable row operations (no kernel set): a loop
 * test's _i is a row. The gates: what kernels-avx512.c's and
 * kernels-avx2.c's sets need at least (the row operations' builds need
 * less). */
#define AVX512_SET (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA | MS_CPU_F16C)
#define AVX2_SET (MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C)
enum { ISA_GENERIC, ISA_AVX512, ISA_AVX2 };
static const struct {
	const char *name;
	int plain; /* its fp32-activation kernels of the formats below */
	const struct ms_rowops *rowops;
} isa_sets[] = {
	[ISA_GENERIC] = {"generic", 0, &ms_rowops_generic},
	[ISA_AVX512] = {"avx512", 4, &ms_rowops_avx512},
	[ISA_AVX2] = {"avx2", 3, &ms_rowops_avx2},
};

/* An ISA kernel set against the reference, on random data of ragged and
 * round sizes and 1..9 tokens: within 1e-5 of the sum of magnitudes (fp32
 * sums in another order); and a token's result is the same bits whether it
 * is computed alone or with others (batch invariance). */
START_TEST(isa_kernels_match_reference)
{
	const enum ms_wfmt fmts[] = {MS_WFMT_F32, MS_WFMT_F16, MS_WFMT_BF16, MS_WFMT_MXFP4};
	const int64_t shapes[][2] = {{37, 45}, {64, 64}, {5, 80}, {19, 1100}, {8, 2880}, {3, 7}, {2, 33}};
	const int n_shapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
	int tested = 0;
	struct ms_err err = {0};
	struct ms_cpu be;
	/* exact: the plain fp32-activation kernels (the packed ones that
	 * round activations have their own suites: kernels-q8, amx, dense) */
	struct ms_cpu_opts bo = {.kernels = isa_sets[_i].name, .threads = 1, .exact = true};
	ck_assert_msg(ms_cpu_init_opts(&be, &bo, &err) == 0, "%s", err.msg);
	for (size_t f = 0; f < 4; f++)
	for (int ki = 0; ki < be.n_kernels[fmts[f]]; ki++) {
		const struct ms_kernel *k = be.kernels[fmts[f]][ki];
		if (!strcmp(k->isa, "ref") || !k->gemm)
			continue; /* the reference itself, or a packed kernel */
		for (int sh = 0; sh < n_shapes; sh++) {
			int64_t rows = shapes[sh][0], cols = shapes[sh][1], n = 1 + (int64_t)(sh % 9);
			struct mat_buf b = make_mat(fmts[f], rows, cols);
			float *x = malloc((size_t)(9 * cols) * sizeof(float));
			float *y = malloc((size_t)(9 * rows) * sizeof(float));
			float *y1 = malloc((size_t)rows * sizeof(float));
			float *row = malloc((size_t)cols * sizeof(float));
			for (int64_t i = 0; i < 9 * cols; i++)
				x[i] = frand();
			k->gemm(&b.m, 0, rows, x, cols, n, y, rows);
			for (int64_t t = 0; t < n; t++) {
				k->gemm(&b.m, 0, rows, x + t * cols, cols, 1, y1, rows);
				for (int64_t r = 0; r < rows; r++) {
					ms_wmat_row_f32(&b.m, r, row);
					double want = 0, mag = 0;
					for (int64_t c = 0; c < cols; c++) {
						want += (double)row[c] * x[t * cols + c];
						mag += fabs((double)row[c] * x[t * cols + c]);
					}
					float got = y[t * rows + r];
					ck_assert_msg(fabs(got - want) <= 1e-5 * (mag + 1.0),
						      "%s %lldx%lld tok %lld row %lld: %g vs %g", k->name,
						      (long long)rows, (long long)cols, (long long)t,
						      (long long)r, got, want);
					ck_assert_msg(memcmp(&got, &y1[r], sizeof(float)) == 0,
						      "%s: token %lld differs alone and in a batch", k->name,
						      (long long)t);
				}
			}
			tested++;
			free(x), free(y), free(y1), free(row);
			free_mat(&b);
		}
	}
	ms_cpu_free(&be);
	/* every plain kernel of the set was exercised */
	ck_assert_int_ge(tested, isa_sets[_i].plain * n_shapes);
}
END_TEST

START_TEST(backend_rejects_unknown_kernel_set)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_int_lt(ms_cpu_init(&be, "sse9", 1, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "sse9"));
	ck_assert_ptr_nonnull(strstr(err.msg, "ref"));
}
END_TEST

/* The row operations (engine/cpu/rowops.c): each build (portable, and one per
 * ISA) gives the bits of the scalar formulas of rowops.h, on ragged
 * widths. */
static void rmsnorm_scalar(float *y, const float *x, const float *w, int64_t H, double eps)
{
	double s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= H; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += (double)x[i + j] * (double)x[i + j];
	for (; i < H; i++)
		s[0] += (double)x[i] * (double)x[i];
	double ss = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	float r = (float)(1.0 / sqrt(ss / (double)H + eps));
	for (i = 0; i < H; i++)
		y[i] = w[i] * (x[i] * r);
}

START_TEST(rowops_match_scalar)
{
	const struct ms_rowops *ro = isa_sets[_i].rowops;
	const int64_t widths[] = {1, 7, 8, 45, 64, 2049, 2880};
	for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++) {
		int64_t H = widths[wi];
		float *x = malloc((size_t)H * sizeof(float)), *w = malloc((size_t)H * sizeof(float));
		float *y = malloc((size_t)H * sizeof(float)), *y0 = malloc((size_t)H * sizeof(float));
		for (int64_t i = 0; i < H; i++)
			x[i] = 40.0f * frand(), w[i] = 1.0f + frand();
		ro->rmsnorm(y, x, w, H, 1e-5);
		rmsnorm_scalar(y0, x, w, H, 1e-5);
		ck_assert_msg(memcmp(y, y0, (size_t)H * sizeof(float)) == 0,
			      "rowops %s: rmsnorm of %lld differs", isa_sets[_i].name, (long long)H);
		/* in place */
		memcpy(y, x, (size_t)H * sizeof(float));
		ro->rmsnorm(y, y, w, H, 1e-5);
		ck_assert(memcmp(y, y0, (size_t)H * sizeof(float)) == 0);
		/* the residual add */
		memcpy(y, x, (size_t)H * sizeof(float));
		ro->add(y, w, H);
		for (int64_t i = 0; i < H; i++)
			ck_assert(y[i] == x[i] + w[i]);
		free(x), free(w), free(y), free(y0);
	}
	const int64_t dims[][2] = {{1, 2}, {3, 6}, {2, 64}, {5, 130}, {8, 64}};
	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		int64_t nh = dims[di][0], d = dims[di][1], half = d / 2;
		float *v = malloc((size_t)(nh * d) * sizeof(float));
		float *v0 = malloc((size_t)(nh * d) * sizeof(float));
		float *cs = malloc((size_t)half * sizeof(float)), *sn = malloc((size_t)half * sizeof(float));
		for (int64_t i = 0; i < nh * d; i++)
			v[i] = v0[i] = 3.0f * frand();
		for (int64_t i = 0; i < half; i++)
			cs[i] = frand(), sn[i] = frand();
		ro->rope(cs, sn, v, nh, d);
		for (int64_t h = 0; h < nh; h++)
			for (int64_t i = 0; i < half; i++) {
				float a = v0[h * d + i], b = v0[h * d + half + i];
				float lo = a * cs[i] - b * sn[i], hi = b * cs[i] + a * sn[i];
				ck_assert_msg(memcmp(&lo, &v[h * d + i], 4) == 0 &&
					      memcmp(&hi, &v[h * d + half + i], 4) == 0,
					      "rowops %s: rope %lldx%lld head %lld pair %lld",
					      isa_sets[_i].name, (long long)nh, (long long)d, (long long)h,
					      (long long)i);
			}
		free(v), free(v0), free(cs), free(sn);
	}
}
END_TEST

static void count_task(void *ctx, int task, int worker)
{
	(void)worker;
	__atomic_fetch_add(&((int *)ctx)[task], 1, __ATOMIC_RELAXED);
}

START_TEST(pool_runs_every_task_once)
{
	struct ms_err err = {0};
	struct ms_pool p;
	ck_assert_int_eq(ms_pool_init(&p, 4, true, &err), 0);
	ck_assert_int_eq(p.n_threads, 4);
	int *hits = calloc(1000, sizeof(int));
	for (int rep = 0; rep < 50; rep++)
		ms_pool_run(&p, 1000, count_task, hits);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(hits[i], 50);
	free(hits);
	ms_pool_free(&p);
	ms_pool_free(&p); /* a second free is harmless */
}
END_TEST

static void add_portable(Suite *s)
{
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, e2m1_table_and_e8m0);
	tcase_add_test(tc, mxfp4_worked_example_and_nibble_order);
	tcase_add_test(tc, half_formats);
	tcase_add_test(tc, ref_gemm_matches_double);
	tcase_add_test(tc, ref_gemm_intq_widths);
	tcase_add_test(tc, intq_decode_matches_codes);
	tcase_add_test(tc, fp8_e4m3_codec);
	tcase_add_test(tc, backend_gemm_thread_independent);
	tcase_add_test(tc, backend_gemm_multi_equals_separate);
	tcase_add_test(tc, backend_rejects_unknown_kernel_set);
	tcase_add_test(tc, pool_runs_every_task_once);
	tcase_add_loop_test(tc, rowops_match_scalar, ISA_GENERIC, ISA_GENERIC + 1);
	suite_add_tcase(s, tc);
}

/* ISA set i's cases: its kernels, its row operations. */
static void add_isa(TCase *tc, int i)
{
	tcase_add_loop_test(tc, isa_kernels_match_reference, i, i + 1);
	tcase_add_loop_test(tc, rowops_match_scalar, i, i + 1);
}

int main(int argc, char **argv)
{
	static const struct isa_gate gates[] = {
		{"avx512", AVX512_SET, NULL, add_isa, ISA_AVX512},
		{"avx2", AVX2_SET, NULL, add_isa, ISA_AVX2},
	};
	return isa_run(argc, argv, "kernels", add_portable, ISA_GATES(gates), 120);
}
