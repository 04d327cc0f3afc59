/*
 * test-dense.c: dense bf16 matrices through oneDNN (engine/cpu/dense-onednn.c).
 *
 * - On random bf16 matrices of ragged shapes it computes W bf16(x): within
 *   1e-5 of the sum of magnitudes of the double-precision product on the
 *   bf16-rounded activations (fp32 sums in another order), and within the
 *   stated bf16-activation error, 2^-8 of the sum of magnitudes, of the
 *   product on the fp32 activations.
 * - Rows decode from the packed copy exactly (ms_wmat.pack_row).
 * - A measured shape is taken or declined by the rule of dense-onednn.c.
 * - A token's result is the same bits alone and in any batch; results are
 *   the same bits from call to call, for 1 and 3 pool threads, and for any
 *   split of the rows into panel-aligned tasks (moe.c's).
 * - --exact never offers the kernel.
 * - --dense int8 (quant/unquant.c): on the bf16 fixture, attention
 *   projections and lm_head become 8-bit INTQ, a group per 32 columns of a
 *   row (the last one shorter where the row is ragged), zero point 128,
 *   fp16-exact scales within an fp16 step of the group's amax / 127, every
 *   weight within half its group's scale of the bf16 one; the router stays
 *   bf16; inspect's reason says where the matrix came from.
 *
 * MS_DENSE_BENCH=1 prints the measurements for the GPT-OSS-20B shapes and
 * whole-matrix times on the pool (the table in README.md).
 *
 * The oneDNN cases run as `--isa onednn`, a meson test of their own (exit
 * 77 where the CPU or libdnnl lacks native bf16 products).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "benchutil.h"
#include "dense-onednn.h"
#include "isagate.h"
#include "kernels.h"
#include "model.h"
#include "quant.h"
#include "ms-clock.h"

#define TESTUTIL_SEED 777u
#include "testutil.h"

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7FFFu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

struct mat {
	struct ms_wmat w;
	uint16_t *data;
	void *owned;
};

/* rows x cols bf16 with a row stride of cols + pad elements */
static struct mat make_mat(int64_t rows, int64_t cols, int64_t pad)
{
	struct mat m = {0};
	int64_t ld = cols + pad;
	m.data = malloc((size_t)(rows * ld) * sizeof(uint16_t));
	for (int64_t i = 0; i < rows * ld; i++)
		m.data[i] = to_bf16(0.1f * frand());
	m.w = (struct ms_wmat){.fmt = MS_WFMT_BF16, .rows = rows, .cols = cols,
			       .w = (const uint8_t *)m.data, .row_bytes = (size_t)ld * 2};
	return m;
}

static void free_mat(struct mat *m)
{
	free(m->owned);
	free(m->data);
	memset(m, 0, sizeof(*m));
}

/* Pack m, measured or (always) not. */
static int pack_raw(struct mat *m, bool always, struct ms_err *err)
{
	free(m->owned);
	m->owned = NULL;
	m->w.pack = NULL;
	ms_dense_onednn_force(always);
	int rc = ms_kernel_onednn_bf16.pack(&m->w, &m->owned, err);
	ms_dense_onednn_force(false);
	return rc;
}

static int pack_with(struct mat *m, bool always)
{
	struct ms_err err = {0};
	int rc = pack_raw(m, always, &err);
	/* measured, a shape may be declined: oneDNN not faster */
	ck_assert_msg(rc == 0 || (!always && rc == -ENOTSUP), "pack %lldx%lld: %s",
		      (long long)m->w.rows, (long long)m->w.cols, err.msg);
	return rc;
}

/* y [n][rows] through the kernel's prep and gemmq over all rows */
static void run_kernel(const struct ms_wmat *w, const float *x, int64_t n, float *y)
{
	const struct ms_kernel *k = &ms_kernel_onednn_bf16;
	void *xq = malloc(k->prep_size(w, n));
	k->prep(w, x, w->cols, n, xq);
	k->gemmq(w, 0, w->rows, xq, n, y, w->rows);
	free(xq);
}

static void check_against_double(const struct mat *m, const float *x, int64_t n, const float *y,
				 const char *what)
{
	int64_t rows = m->w.rows, K = m->w.cols, ld = (int64_t)m->w.row_bytes / 2;
	/* every row of small matrices; of big ones a stride that still visits
	 * every panel, and the whole last panel */
	int64_t step = rows * K > 400000 ? 7 : 1;
	for (int64_t r = 0; r < rows; r += (r >= rows - 64 ? 1 : step)) {
		const uint16_t *row = m->data + r * ld;
		for (int64_t t = 0; t < n; t++) {
			double want_b = 0, want = 0, mag = 0;
			for (int64_t k = 0; k < K; k++) {
				double wv = ms_bf16_to_f32(row[k]), xv = x[t * K + k];
				double xb = ms_bf16_to_f32(to_bf16(x[t * K + k]));
				want_b += wv * xb;
				want += wv * xv;
				mag += fabs(wv * xv);
			}
			double got = y[t * rows + r];
			ck_assert_msg(fabs(got - want_b) <= 1e-5 * (mag + 1e-3),
				      "%s %lldx%lld n %lld tok %lld row %lld: %.9g vs W bf16(x) %.9g",
				      what, (long long)rows, (long long)K, (long long)n, (long long)t,
				      (long long)r, got, want_b);
			ck_assert_msg(fabs(got - want) <= ldexp(1.0, -8) * mag + 1e-6,
				      "%s %lldx%lld n %lld tok %lld row %lld: %.9g vs W x %.9g",
				      what, (long long)rows, (long long)K, (long long)n, (long long)t,
				      (long long)r, got, want);
		}
	}
}

START_TEST(matches_reference_on_ragged_shapes)
{
	const int64_t Ns[] = {1, 17, 100, 2048 + 3}, Ks[] = {32, 100, 2880};
	const int64_t ns[] = {1, 3, 16, 64, 65};
	float *x = malloc(65 * 2880 * sizeof(float));
	float *y = malloc((size_t)(65 * 2051) * sizeof(float));
	for (size_t a = 0; a < 4; a++)
		for (size_t b = 0; b < 3; b++) {
			/* a padded row stride on one shape: rows need not be dense */
			struct mat m = make_mat(Ns[a], Ks[b], a == 2 && b == 1 ? 12 : 0);
			for (int64_t i = 0; i < 65 * Ks[b]; i++)
				x[i] = frand();
			pack_with(&m, true);
			/* rows decode from the pack (so the loader can drop the
			 * unpacked ones) */
			if (m.w.pack_row) {
				float *row = malloc((size_t)Ks[b] * sizeof(float));
				int64_t ld = (int64_t)(m.w.row_bytes / 2);
				for (int64_t r = 0; r < Ns[a]; r++) {
					m.w.pack_row(m.w.pack, r, row);
					for (int64_t k = 0; k < Ks[b]; k++)
						ck_assert(row[k] == ms_bf16_to_f32(m.data[r * ld + k]));
				}
				free(row);
			}
			for (size_t c = 0; c < 5; c++) {
				run_kernel(&m.w, x, ns[c], y);
				check_against_double(&m, x, ns[c], y, "onednn");
			}
			free_mat(&m);
		}
	free(x), free(y);
}
END_TEST

/* A token gives the same bits alone and in a batch of any size (oneDNN's
 * M-blocking and our 64-token chunks must not change a row's sums). Twice:
 * with the chunk padding the pack-time check chose for this CPU (none where
 * oneDNN computes a row alike for every M, as on AVX512-BF16; 16-ish where
 * small M run on AVX-512 and larger on AMX tiles), and with short chunks
 * forced through a 17-row primitive, the padded path, whatever this CPU;
 * both give the same bits. */
START_TEST(batch_invariant)
{
	const int64_t shapes[][2] = {{100, 2880}, {64, 32}, {17, 100}, {130, 300}};
	const int64_t ns[] = {2, 3, 17, 64, 65, 130};
	for (size_t s = 0; s < 4; s++) {
		int64_t rows = shapes[s][0], K = shapes[s][1];
		float *x = malloc((size_t)(130 * K) * sizeof(float));
		float *y = malloc((size_t)(130 * rows) * sizeof(float));
		float *y1 = malloc((size_t)rows * sizeof(float));
		float *yp[2] = {malloc((size_t)(130 * rows) * sizeof(float)),
				malloc((size_t)(130 * rows) * sizeof(float))};
		for (int64_t i = 0; i < 130 * K; i++)
			x[i] = frand();
		struct mat m = make_mat(rows, K, 0);
		for (int v = 0; v < 2; v++) {
			ms_dense_onednn_pad_to(v ? 17 : 1); /* repacks m */
			int rc = pack_with(&m, true);
			ms_dense_onednn_pad_to(1);
			if (rc) { /* declined: the kernel is not used on this CPU */
				memset(yp[v], 0, (size_t)(130 * rows) * sizeof(float));
				continue;
			}
			int64_t pads = ms_dense_onednn_pads_to(&m.w);
			printf("batch_invariant %lldx%lld: short chunks padded to %lld%s\n", (long long)rows,
			       (long long)K, (long long)pads, v ? " (at least 17 forced)" : "");
			fflush(stdout);
			ck_assert(pads >= (v ? 17 : 1) && pads <= 64);
			for (size_t c = 0; c < 6; c++) {
				run_kernel(&m.w, x, ns[c], y);
				for (int64_t t = 0; t < ns[c]; t += 1 + t / 8) {
					run_kernel(&m.w, x + t * K, 1, y1);
					ck_assert_msg(!memcmp(y1, y + t * rows, (size_t)rows * sizeof(float)),
						      "%lldx%lld: token %lld alone differs from it in a batch of %lld",
						      (long long)rows, (long long)K, (long long)t, (long long)ns[c]);
				}
			}
			/* the last n: 130 tokens, the long chunk and a short one */
			memcpy(yp[v], y, (size_t)(130 * rows) * sizeof(float));
			check_against_double(&m, x, 130, y, "onednn");
		}
		free_mat(&m);
		ck_assert_msg(!memcmp(yp[0], yp[1], (size_t)(130 * rows) * sizeof(float)),
			      "%lldx%lld: padded chunks give other bits", (long long)rows, (long long)K);
		free(x), free(y), free(y1), free(yp[0]), free(yp[1]);
	}
}
END_TEST

/* A measured shape is taken exactly when the stored timings say so. */
START_TEST(measured_choice_follows_the_rule)
{
	ck_assert_ptr_null(ms_kernel_onednn_bf16.whole); /* rows always split over the pool */
	const int64_t shapes[][2] = {{130, 2880}, {8, 96}, {5, 80}, {512, 256}};
	for (size_t s = 0; s < 4; s++) {
		struct mat m = make_mat(shapes[s][0], shapes[s][1], 0);
		int rc = pack_with(&m, false);
		struct ms_dense_measure ms[64];
		int nm = ms_dense_onednn_measurements(ms, 64);
		bool seen = false;
		for (int i = 0; i < nm && i < 64; i++) {
			if (ms[i].rows != shapes[s][0] || ms[i].cols != shapes[s][1])
				continue;
			seen = true;
			double so = 0, sd = 0;
			for (int j = 0; j < MS_ONEDNN_N_MEASURED; j++) {
				ck_assert(ms[i].ours[j] > 0 && ms[i].onednn[j] > 0);
				so += ms[i].ours[j], sd += ms[i].onednn[j];
			}
			ck_assert_int_eq(ms[i].chosen, sd < 0.95 * so);
			ck_assert_int_eq(ms[i].chosen, rc == 0);
			ck_assert_int_eq(ms[i].rows_timed, shapes[s][0] < 1024 ? shapes[s][0] : 1024);
		}
		ck_assert(seen);
		/* the second matrix of a shape reuses the measurement */
		struct mat m2 = make_mat(shapes[s][0], shapes[s][1], 0);
		ck_assert_int_eq(pack_with(&m2, false), rc);
		ck_assert_int_eq(ms_dense_onednn_measurements(ms, 0), nm);
		free_mat(&m);
		free_mat(&m2);
	}
}
END_TEST

/* Through the backend: bind, then gemm with bias on 1 and 3 threads, twice
 * each; and moe.c's way, gemmq on panel-aligned row blocks of any split. */
START_TEST(deterministic_across_calls_threads_and_splits)
{
	struct ms_err err = {0};
	struct ms_cpu b1, b3;
	ck_assert_int_eq(ms_cpu_init(&b1, "auto", 1, &err), 0);
	ck_assert_int_eq(ms_cpu_init(&b3, "auto", 3, &err), 0);
	int64_t rows = 1000, K = 777;
	struct mat m = make_mat(rows, K, 0);
	const struct ms_kernel *k = NULL;
	/* oneDNN is a bf16 candidate, behind avx512bf16-vnni2 where the CPU
	 * has AVX512-BF16 (tests/engine/test-bf16.c): bind it directly */
	ck_assert_ptr_nonnull(strstr(ms_cpu_kernel_reason(&b1, MS_WFMT_BF16), "oneDNN"));
	ms_dense_onednn_force(true);
	k = &ms_kernel_onednn_bf16;
	int rc = k->pack(&m.w, &m.owned, &err);
	ms_dense_onednn_force(false);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_str_eq(k->name, "onednn-bf16");
	const int64_t ns[] = {1, 3, 4, 64, 130};
	float *x = malloc(130 * K * sizeof(float)), *bias = malloc(rows * sizeof(float));
	float *y[4];
	for (int i = 0; i < 4; i++)
		y[i] = malloc(130 * rows * sizeof(float));
	for (int64_t i = 0; i < 130 * K; i++)
		x[i] = frand();
	for (int64_t i = 0; i < rows; i++)
		bias[i] = frand();
	for (size_t c = 0; c < 5; c++) {
		int64_t n = ns[c];
		size_t bytes = (size_t)(n * rows) * sizeof(float);
		ms_cpu_gemm(&b1, k, &m.w, x, n, y[0], bias);
		ms_cpu_gemm(&b1, k, &m.w, x, n, y[1], bias);
		ms_cpu_gemm(&b3, k, &m.w, x, n, y[2], bias);
		ck_assert_msg(!memcmp(y[0], y[1], bytes), "n %lld: two calls differ", (long long)n);
		ck_assert_msg(!memcmp(y[0], y[2], bytes), "n %lld: 1 vs 3 threads", (long long)n);
		/* blocks of 64, 128, 192 rows, then the rest, without bias */
		void *xq = malloc(k->prep_size(&m.w, n));
		k->prep(&m.w, x, K, n, xq);
		k->gemmq(&m.w, 0, rows, xq, n, y[3], rows);
		int64_t r = 0, blk = 64;
		while (r < rows) {
			int64_t r1 = r + blk < rows ? r + blk : rows;
			k->gemmq(&m.w, r, r1, xq, n, y[2], rows);
			r = r1;
			blk += 64;
		}
		free(xq);
		ck_assert_msg(!memcmp(y[2], y[3], bytes), "n %lld: row split changed results",
			      (long long)n);
		for (int64_t t = 0; t < n; t++)
			for (int64_t i = 0; i < rows; i++)
				ck_assert(y[0][t * rows + i] == y[3][t * rows + i] + bias[i]);
	}
	for (int i = 0; i < 4; i++)
		free(y[i]);
	free(x), free(bias);
	free_mat(&m);
	ms_cpu_free(&b1);
	ms_cpu_free(&b3);
}
END_TEST

START_TEST(exact_never_offers_it)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	struct ms_cpu_opts o = {.kernels = "auto", .threads = 1, .exact = true};
	ck_assert_int_eq(ms_cpu_init_opts(&be, &o, &err), 0);
	for (int i = 0; i < be.n_kernels[MS_WFMT_BF16]; i++)
		ck_assert(be.kernels[MS_WFMT_BF16][i] != &ms_kernel_onednn_bf16);
	ms_cpu_free(&be);
	/* nor does a set below avx512 */
	if (ms_cpu_init(&be, "avx2", 1, &err) == 0) {
		ck_assert(ms_cpu_find_kernel(&be, MS_WFMT_BF16) != &ms_kernel_onednn_bf16);
		ms_cpu_free(&be);
	}
}
END_TEST

static bool is_f16_value(float f)
{
	if (f == 0.0f)
		return true;
	int e;
	float m = frexpf(fabsf(f), &e); /* f = m 2^e, m in [0.5, 1) */
	if (e - 1 < -14)                 /* subnormal fp16: a multiple of 2^-24 */
		return ldexpf(fabsf(f), 24) == floorf(ldexpf(fabsf(f), 24));
	return ldexpf(m, 11) == floorf(ldexpf(m, 11)) && fabsf(f) <= 65504.0f;
}

START_TEST(dense_int8_requantizes_attention_and_lm_head)
{
	const char *dir = getenv("MS_FIXTURE_BF16");
	ck_assert_msg(dir != NULL, "MS_FIXTURE_BF16 is not set (run through meson test)");
	struct ms_err err = {0};
	struct ms_cpu be[2];
	struct ms_model m[2];
	for (int i = 0; i < 2; i++) {
		/* exact: plain kernels, so the INTQ rows and scales stay readable */
		struct ms_cpu_opts o = {.kernels = "auto", .threads = 2, .exact = true,
					    .dense_int8 = i == 1};
		ck_assert_int_eq(ms_cpu_init_opts(&be[i], &o, &err), 0);
		ck_assert_msg(ms_model_load(&m[i], dir, ms_cpu_backend(&be[i]), &err) == 0, "%s", err.msg);
	}
	char name[96];
	int checked = 0;
	for (int64_t L = 0; L <= m[0].cfg.n_layers; L++)
		for (int j = 0; j < 5; j++) {
			static const char *proj[] = {"q_proj", "k_proj", "v_proj", "o_proj", "router"};
			if (L == m[0].cfg.n_layers && j > 0)
				break;
			if (L == m[0].cfg.n_layers)
				snprintf(name, sizeof(name), "lm_head");
			else if (j < 4)
				snprintf(name, sizeof(name), "model.layers.%lld.self_attn.%s", (long long)L,
					 proj[j]);
			else
				snprintf(name, sizeof(name), "model.layers.%lld.mlp.router", (long long)L);
			const struct ms_qlinear *a = ms_model_find_linear(&m[0], name);
			const struct ms_qlinear *q = ms_model_find_linear(&m[1], name);
			ck_assert(a && q);
			ck_assert_int_eq(a->lin.w.fmt, MS_WFMT_BF16);
			if (j == 4) { /* the router is left alone */
				ck_assert_int_eq(q->lin.w.fmt, MS_WFMT_BF16);
				continue;
			}
			ck_assert_msg(q->lin.w.fmt == MS_WFMT_INTQ, "%s not requantized", name);
			ck_assert_int_eq(q->lin.w.bits, 8);
			int64_t K = a->lin.w.cols, G = (K + 31) / 32;
			ck_assert_int_eq(q->lin.w.n_groups, G);
			ck_assert_int_eq(q->lin.w.group_size, 32);
			ck_assert_ptr_nonnull(strstr(q->why, "requantized from bf16"));
			float *ra = malloc((size_t)K * sizeof(float)), *rq = malloc((size_t)K * sizeof(float));
			for (int64_t r = 0; r < a->lin.w.rows; r++) {
				ms_wmat_row_f32(&a->lin.w, r, ra);
				ms_wmat_row_f32(&q->lin.w, r, rq);
				for (int64_t g = 0; g < G; g++) {
					float amax = 0, s = q->lin.w.fscale[r * G + g];
					int64_t k1 = (g + 1) * 32 < K ? (g + 1) * 32 : K;
					for (int64_t k = g * 32; k < k1; k++)
						amax = fmaxf(amax, fabsf(ra[k]));
					ck_assert_float_eq(q->lin.w.fzero[r * G + g], 128.0f);
					ck_assert_msg(is_f16_value(s), "%s row %lld group %lld: scale %.9g is "
						      "not an fp16 value", name, (long long)r, (long long)g,
						      (double)s);
					ck_assert(fabsf(s - amax / 127.0f) <= ldexpf(amax / 127.0f, -11));
					for (int64_t k = g * 32; k < k1; k++)
						ck_assert_msg(fabsf(rq[k] - ra[k]) <= 0.5f * s * (1.0f + 0x1p-10f),
							      "%s [%lld, %lld]: %g from %g (scale %g)", name,
							      (long long)r, (long long)k, (double)rq[k],
							      (double)ra[k], (double)s);
				}
			}
			free(ra), free(rq);
			checked++;
		}
	ck_assert_int_eq(checked, 4 * (int)m[0].cfg.n_layers + 1);
	for (int i = 0; i < 2; i++) {
		ms_model_free(&m[i]);
		ms_cpu_free(&be[i]);
	}
}
END_TEST

/* ---- MS_DENSE_BENCH=1: the numbers behind the choice ---- */

static double time_gemm(struct ms_cpu *be, const struct ms_kernel *k, const struct ms_wmat *w,
			const float *x, int64_t n, float *y)
{
	return bu_best_gemm_s(be, k, w, x, n, y, 6, 1);
}

static void bench(void)
{
	/* GPT-OSS-20B: q, k/v, o, router, lm_head (its first 8192 rows: the
	 * measurement times 1024 rows of any matrix) */
	const int64_t shapes[][2] = {{4096, 2880}, {512, 2880}, {2880, 4096}, {32, 2880},
				     {8192, 2880}};
	const char *names[] = {"q", "k/v", "o", "router", "lm_head (8192 rows)"};
	struct ms_err err = {0};
	struct ms_cpu be;
	if (ms_cpu_init(&be, "auto", 0, &err))
		return;
	printf("pack-time measurement (1 thread, leading <= 1024 rows, hot), us per call:\n");
	printf("%-22s %6s %10s %10s %10s\n", "shape", "n", "avx512", "oneDNN", "ratio");
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct mat m = make_mat(shapes[s][0], shapes[s][1], 0);
		pack_raw(&m, false, &err);
		struct ms_dense_measure ms[64];
		int nm = ms_dense_onednn_measurements(ms, 64);
		for (int i = 0; i < nm && i < 64; i++) {
			if (ms[i].rows != shapes[s][0] || ms[i].cols != shapes[s][1])
				continue;
			for (int j = 0; j < MS_ONEDNN_N_MEASURED; j++)
				printf("%-22s %6lld %10.1f %10.1f %10.2f\n", names[s],
				       (long long)MS_ONEDNN_MEASURE_N[j], 1e6 * ms[i].ours[j],
				       1e6 * ms[i].onednn[j], ms[i].ours[j] / ms[i].onednn[j]);
			printf("%-22s chosen: %s\n", names[s], ms[i].chosen ? "oneDNN" : "avx512");
		}
		free_mat(&m);
	}
	printf("\nwhole matrix on the pool (%d threads), us per gemm, best of 5:\n",
	       be.pool.n_threads);
	printf("%-22s %6s %10s %10s %10s\n", "shape", "n", "avx512", "oneDNN", "ratio");
	float *x = malloc(64 * 4096 * sizeof(float)), *y = malloc((size_t)64 * 8192 * sizeof(float));
	for (int i = 0; i < 64 * 4096; i++)
		x[i] = frand();
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct mat m = make_mat(shapes[s][0], shapes[s][1], 0);
		if (pack_raw(&m, true, &err)) {
			printf("%s: %s\n", names[s], err.msg);
			free_mat(&m);
			continue;
		}
		struct ms_wmat plain = m.w;
		plain.pack = NULL;
		const struct ms_kernel *ours = NULL;
		for (const struct ms_kernel *k = ms_kernels_avx512; k->name; k++)
			if (k->fmt == MS_WFMT_BF16)
				ours = k;
		const int64_t ns[] = {1, 4, 16, 64};
		for (int j = 0; j < 4; j++) {
			double a = time_gemm(&be, ours, &plain, x, ns[j], y);
			double b = time_gemm(&be, &ms_kernel_onednn_bf16, &m.w, x, ns[j], y);
			printf("%-22s %6lld %10.1f %10.1f %10.2f\n", names[s], (long long)ns[j], 1e6 * a,
			       1e6 * b, a / b);
		}
		free_mat(&m);
	}
	free(x), free(y);
	ms_cpu_free(&be);
}

static void add_portable(Suite *s)
{
	TCase *t8 = tcase_create("int8");
	tcase_set_timeout(t8, 600);
	tcase_add_test(t8, dense_int8_requantizes_attention_and_lm_head);
	suite_add_tcase(s, t8);
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, exact_never_offers_it);
	suite_add_tcase(s, tc);
}

static void add_onednn(TCase *tc, int arg)
{
	(void)arg;
	tcase_add_test(tc, matches_reference_on_ragged_shapes);
	tcase_add_test(tc, batch_invariant);
	tcase_add_test(tc, measured_choice_follows_the_rule);
	tcase_add_test(tc, deterministic_across_calls_threads_and_splits);
}

/* Beyond the kernel's flags: without native bf16 products (CPU or
 * libdnnl) the kernel is never used, and nothing runs it. */
static const char *no_native_bf16(void)
{
	return ms_dense_onednn_usable(ms_cpu_detect()) ? NULL
		: "native bf16 products in libdnnl (its ISA, capped by ONEDNN_MAX_CPU_ISA)";
}

int main(int argc, char **argv)
{
	if (ms_dense_onednn_usable(ms_cpu_detect()) && getenv("MS_DENSE_BENCH")) {
		bench();
		return 0;
	}
	const struct isa_gate gates[] = {
		{"onednn", ms_kernel_onednn_bf16.cpu_flags, no_native_bf16, add_onednn, 0},
	};
	return isa_run(argc, argv, "dense", add_portable, ISA_GATES(gates), 600);
}
