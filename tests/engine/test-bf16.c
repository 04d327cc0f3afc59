/*
 * test-bf16.c: the packed VDPBF16PS kernel "avx512bf16-vnni2"
 * (engine/cpu/kernels-bf16.h), on random data of ragged shapes:
 *  - AVX-512 prep and gemmq equal the portable models bit for bit (the
 *    model: RNE conversion, VDPBF16PS odd-then-even FMAs with DAZ/FTZ);
 *  - gemmq stays within the bf16-activation bound of the fp32 reference
 *    (|diff| <= 2^-8 sum|w x| + 1e-6);
 *  - a token's result does not depend on the others in its call, nor on
 *    the split of rows;
 *  - pack_row decodes every row exactly;
 *  - the backend picks it with auto on a CPU with AVX512-BF16, not with
 *    exact, and runs it through its pool.
 * What runs the kernel is `--isa avx512bf16`, a meson test of its own (exit
 * 77 where the CPU lacks AVX512-BF16).
 *
 * `test-bf16 --bench` instead measures GB/s against oneDNN (not a test).
 */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "dense-onednn.h"
#include "isagate.h"
#include "kernels-bf16.h"
#include "kernels.h"
#include "ms-clock.h"

#define TESTUTIL_SEED 77u
#include "testutil.h"

#define BF16_FLAGS (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA | \
		    MS_CPU_AVX512BF16)

static bool have_bf16(void)
{
	return (ms_cpu_detect() & BF16_FLAGS) == BF16_FLAGS;
}

struct tmat {
	struct ms_wmat m;
	uint16_t *w;
	void *pack;
};

static uint16_t f2bf(float f) /* truncation: any bf16 will do for weights */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

static struct tmat make_mat(int64_t rows, int64_t cols)
{
	struct tmat t = {0};
	t.w = malloc((size_t)(rows * cols) * 2);
	for (int64_t i = 0; i < rows * cols; i++)
		t.w[i] = f2bf(frand() * (rnd() % 8 == 0 ? 4.0f : 0.5f));
	t.m = (struct ms_wmat){.fmt = MS_WFMT_BF16, .rows = rows, .cols = cols,
			       .w = (const uint8_t *)t.w, .row_bytes = (size_t)cols * 2};
	struct ms_err err = {0};
	if (ms_bf16_pack(&t.m, &t.pack, &err)) { /* plain abort: --bench runs outside check */
		fprintf(stderr, "pack: %s\n", err.msg);
		abort();
	}
	return t;
}

static void tmat_free(struct tmat *t)
{
	free(t->w);
	free(t->pack);
}

static float *make_x(int64_t n, int64_t K)
{
	float *x = malloc((size_t)(n * K) * sizeof(float));
	for (int64_t i = 0; i < n * K; i++)
		x[i] = frand() * (rnd() % 16 == 0 ? 30.0f : 1.0f);
	return x;
}

static const int64_t shapes[][2] = {{1, 2}, {15, 33}, {17, 100}, {100, 2880},
				    {2051, 33}, {17, 2}, {100, 100}, {2051, 2880}};
#define N_SHAPES (int)(sizeof(shapes) / sizeof(shapes[0]))
static const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17};
#define N_NS (int)(sizeof(ns) / sizeof(ns[0]))

static float *run(const struct ms_wmat *w, const float *x, int64_t n, bool scalar)
{
	void *xq = malloc(ms_bf16_prep_size(w, n));
	float *y = malloc((size_t)(n * w->rows) * sizeof(float));
	if (scalar) {
		ms_bf16_prep_scalar(w, x, w->cols, n, xq);
		ms_bf16_gemmq_scalar(w, 0, w->rows, xq, n, y, w->rows);
	} else {
		ms_bf16_prep_avx512(w, x, w->cols, n, xq);
		ms_bf16_gemmq_avx512(w, 0, w->rows, xq, n, y, w->rows);
	}
	free(xq);
	return y;
}

START_TEST(conversion_matches_scalar)
{
	/* specials, denormals, ties, and random bits */
	const int64_t K = 4096 + 7;
	struct tmat t = make_mat(1, K);
	float *x = malloc((size_t)K * sizeof(float));
	const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u,
				    0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFBFFFFFu,
				    0x3F808000u, 0x3F818000u, 0x3F808001u, 0x7F7FFFFFu, 0x7F7F8000u,
				    0x00FF8000u, 0x007FFFFFu};
	for (int64_t k = 0; k < K; k++) {
		uint32_t u = k < 17 ? special[k] : (rnd() << 8) ^ rnd();
		memcpy(&x[k], &u, 4);
	}
	void *a = calloc(1, ms_bf16_prep_size(&t.m, 1)), *b = calloc(1, ms_bf16_prep_size(&t.m, 1));
	ms_bf16_prep_scalar(&t.m, x, K, 1, a);
	ms_bf16_prep_avx512(&t.m, x, K, 1, b);
	const uint16_t *qa = a, *qb = b;
	for (size_t i = 0; i < ms_bf16_prep_size(&t.m, 1) / 2; i++)
		ck_assert_msg(qa[i] == qb[i], "element %zu: scalar %04x avx512 %04x (x %08x)", i,
			      qa[i], qb[i], i < (size_t)K ? *(const uint32_t *)&x[i] : 0u);
	free(a), free(b), free(x);
	tmat_free(&t);
}
END_TEST

START_TEST(avx512_matches_scalar_and_bound)
{
	for (int s = 0; s < N_SHAPES; s++) {
		int64_t R = shapes[s][0], K = shapes[s][1];
		struct tmat t = make_mat(R, K);
		for (int c = 0; c < N_NS; c++) {
			int64_t n = ns[c];
			if (R * K > 1000000 && n > 5)
				continue; /* the scalar model is slow */
			float *x = make_x(n, K);
			float *ya = run(&t.m, x, n, false), *ys = run(&t.m, x, n, true);
			float *yr = malloc((size_t)(n * R) * sizeof(float));
			ms_kernels_ref[MS_WFMT_BF16].gemm(&t.m, 0, R, x, K, n, yr, R);
			for (int64_t tt = 0; tt < n; tt++)
				for (int64_t r = 0; r < R; r++) {
					float a = ya[tt * R + r];
					ck_assert_msg(!memcmp(&a, &ys[tt * R + r], 4),
						      "%lldx%lld n %lld t %lld r %lld: avx512 %a scalar %a",
						      (long long)R, (long long)K, (long long)n, (long long)tt,
						      (long long)r, a, ys[tt * R + r]);
					double sa = 0;
					for (int64_t k = 0; k < K; k++)
						sa += fabs((double)ms_bf16_to_f32(t.w[r * K + k]) *
							   x[tt * K + k]);
					double bound = sa / 256.0 + 1e-6;
					ck_assert_msg(fabs((double)a - yr[tt * R + r]) <= bound,
						      "%lldx%lld n %lld t %lld r %lld: %g vs ref %g (bound %g)",
						      (long long)R, (long long)K, (long long)n, (long long)tt,
						      (long long)r, a, yr[tt * R + r], bound);
				}
			free(x), free(ya), free(ys), free(yr);
		}
		tmat_free(&t);
	}
}
END_TEST

START_TEST(batch_and_split_invariance)
{
	for (int s = 0; s < N_SHAPES; s++) {
		int64_t R = shapes[s][0], K = shapes[s][1];
		struct tmat t = make_mat(R, K);
		float *x = make_x(17, K);
		float *all = run(&t.m, x, 17, false);
		for (int c = 0; c < N_NS; c++) {
			int64_t n = ns[c];
			float *yb = run(&t.m, x, n, false);
			ck_assert_msg(!memcmp(yb, all, (size_t)(n * R) * sizeof(float)),
				      "%lldx%lld: n %lld differs from n 17", (long long)R, (long long)K,
				      (long long)n);
			free(yb);
		}
		for (int64_t tt = 0; tt < 17; tt++) {
			float *y1 = run(&t.m, x + tt * K, 1, false);
			ck_assert_msg(!memcmp(y1, all + tt * R, (size_t)R * sizeof(float)),
				      "%lldx%lld: token %lld alone differs", (long long)R, (long long)K,
				      (long long)tt);
			free(y1);
		}
		/* row blocks of 16, 32, 48, ... panels */
		void *xq = malloc(ms_bf16_prep_size(&t.m, 5));
		float *ys = malloc((size_t)(5 * R) * sizeof(float));
		ms_bf16_prep_avx512(&t.m, x, K, 5, xq);
		for (int64_t r = 0, blk = 16; r < R; blk += 16) {
			int64_t r1 = r + blk < R ? r + blk : R;
			ms_bf16_gemmq_avx512(&t.m, r, r1, xq, 5, ys, R);
			r = r1;
		}
		ck_assert(!memcmp(ys, all, (size_t)(5 * R) * sizeof(float)));
		free(xq), free(ys), free(x), free(all);
		tmat_free(&t);
	}
}
END_TEST

START_TEST(pack_row_exact)
{
	for (int s = 0; s < N_SHAPES; s++) {
		int64_t R = shapes[s][0], K = shapes[s][1];
		struct tmat t = make_mat(R, K);
		ck_assert_ptr_eq(t.m.pack_row, ms_bf16_pack_row);
		ck_assert_uint_eq(t.m.pack_bytes, (size_t)((R + 15) / 16) * (size_t)((K + 1) / 2) * 64);
		float *row = malloc((size_t)K * sizeof(float));
		for (int64_t r = 0; r < R; r++) {
			t.m.pack_row(t.m.pack, r, row);
			for (int64_t k = 0; k < K; k++)
				ck_assert(row[k] == ms_bf16_to_f32(t.w[r * K + k]));
		}
		free(row);
		tmat_free(&t);
	}
}
END_TEST

START_TEST(backend_auto_and_exact)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_int_eq(ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = 2}, &err), 0);
	const struct ms_kernel *k0 = ms_cpu_find_kernel(&be, MS_WFMT_BF16);
	/* first where the CPU has AVX512-BF16 (after the tile kernel where AMX
	 * runs), nowhere else: the choice is checked either way */
	bool amx = !strcmp(be.isa, "amx");
	if (have_bf16())
		ck_assert_str_eq(k0->name, amx ? "amx-bf16" : "avx512bf16-vnni2");
	else
		ck_assert_str_ne(k0->name, "avx512bf16-vnni2");
	ms_cpu_free(&be);
	ck_assert_int_eq(ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = 2, .exact = true},
					      &err), 0);
	for (int i = 0; i < be.n_kernels[MS_WFMT_BF16]; i++)
		ck_assert_str_ne(be.kernels[MS_WFMT_BF16][i]->name, "avx512bf16-vnni2");
	ms_cpu_free(&be);
}
END_TEST

/* Bound by auto (where AMX runs, its tile kernel declines this matrix: too
 * few rows for tiles), then through the pool: the kernel's own bits. */
START_TEST(backend_binds_and_runs_it)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_int_eq(ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = 2}, &err), 0);
	struct tmat t = make_mat(100, 100);
	free(t.pack);
	t.m.pack = NULL;
	const struct ms_kernel *k = NULL;
	char why[256];
	ck_assert_int_eq(ms_cpu_bind(&be, &t.m, &k, &t.pack, why, sizeof(why), &err), 0);
	ck_assert_str_eq(k->name, "avx512bf16-vnni2");
	float *x = make_x(3, 100), *y = malloc(300 * sizeof(float));
	ms_cpu_gemm(&be, k, &t.m, x, 3, y, NULL);
	float *yd = run(&t.m, x, 3, false);
	ck_assert(!memcmp(y, yd, 300 * sizeof(float)));
	free(x), free(y), free(yd);
	tmat_free(&t);
	ms_cpu_free(&be);
}
END_TEST

/* ---- --bench: GB/s vs oneDNN through ms_cpu_gemm, not a test ---- */

static int bench(int argc, char **argv)
{
	if (!have_bf16()) {
		printf("bench: this CPU lacks AVX512-BF16\n");
		return 0;
	}
	/* the shape: 4096 x 4096, or BF16_BENCH_R x BF16_BENCH_K; BF16_BENCH_HOT=1:
	 * one copy, from cache with a small shape (the arithmetic rate) */
	const char *er = getenv("BF16_BENCH_R"), *ek = getenv("BF16_BENCH_K");
	const int64_t R = er ? atoll(er) : 4096, K = ek ? atoll(ek) : 4096;
	if (R <= 0 || K <= 0) {
		printf("bench: bad BF16_BENCH_R / BF16_BENCH_K\n");
		return 1;
	}
	const size_t total = (size_t)576 << 20;
	const int th = argc > 2 ? atoi(argv[2]) : 2;
	struct ms_cpu be;
	struct ms_err err = {0};
	if (ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = th}, &err)) {
		printf("bench: %s\n", err.msg);
		return 1;
	}
	const bool hot = getenv("BF16_BENCH_HOT") && atoi(getenv("BF16_BENCH_HOT"));
	int copies = hot ? 1 : (int)(total / ((size_t)R * K * 2)) + 1;
	struct tmat *ts = malloc((size_t)copies * sizeof(*ts));
	struct ms_wmat *wo = malloc((size_t)copies * sizeof(*wo));
	void **ob = malloc((size_t)copies * sizeof(*ob));
	const uint8_t **pan = malloc((size_t)copies * sizeof(*pan));
	bool onednn = ms_dense_onednn_usable(be.cpu_flags);
	for (int c = 0; c < copies; c++) {
		ts[c] = make_mat(R, K);
		pan[c] = ((const struct ms_bf16_pack *)ts[c].pack)->panels;
		wo[c] = ts[c].m;
		wo[c].pack = NULL;
		wo[c].pack_row = NULL;
		ob[c] = NULL;
		if (onednn) {
			ms_dense_onednn_force(true);
			if (ms_kernel_onednn_bf16.pack(&wo[c], &ob[c], &err)) {
				printf("bench: onednn: %s\n", err.msg);
				onednn = false;
			}
			ms_dense_onednn_force(false);
		}
	}
	const struct ms_kernel *kb = NULL;
	for (const struct ms_kernel *k = ms_kernels_avx512; k->name; k++)
		if (!strcmp(k->name, "avx512bf16-vnni2"))
			kb = k;
	const int64_t nsb[] = {1, 2, 4, 8, 16, 32, 64, 512};
	size_t bytes = ts[0].m.pack_bytes;
	for (int ni = 0; ni < 8; ni++) {
		int64_t n = nsb[ni];
		float *x = make_x(n, K), *y = malloc((size_t)(n * R) * sizeof(float));
		int reps = n <= 8 ? copies : (n <= 64 ? 8 : 2), tries = n <= 8 ? 24 : 4;
		double best = 1e30, bo = 1e30, sbest = 1e30;
		struct tu_bw_job j = {.bufs = pan, .bytes = bytes};
		for (int it = 0; it < tries; it++) {
			double t0 = ms_now_s();
			if (n <= 8)
				ms_pool_run(&be.pool, copies, tu_bw_task, &j);
			double t1 = ms_now_s();
			for (int c = 0; c < reps; c++)
				ms_cpu_gemm(&be, kb, &ts[c % copies].m, x, n, y, NULL);
			double t2 = ms_now_s();
			if (onednn)
				for (int c = 0; c < reps; c++)
					ms_cpu_gemm(&be, &ms_kernel_onednn_bf16, &wo[c % copies], x, n, y,
							NULL);
			double t3 = ms_now_s();
			sbest = fmin(sbest, (t1 - t0) / copies);
			best = fmin(best, (t2 - t1) / reps);
			bo = fmin(bo, (t3 - t2) / reps);
		}
		double gflop = 2.0 * (double)R * K * (double)n / 1e9;
		printf("bf16 %lldx%lld %d thr n %3lld: vnni2 %8.3f ms %5.1f GB/s %6.1f GFLOP/s | "
		       "onednn %8.3f ms %5.1f GB/s %6.1f GFLOP/s",
		       (long long)R, (long long)K, th, (long long)n, best * 1e3, bytes / best / 1e9,
		       gflop / best, bo * 1e3, bytes / bo / 1e9, gflop / bo);
		if (n <= 8)
			printf(" | streaming %5.1f GB/s (vnni2 %3.0f%%)", bytes / sbest / 1e9,
			       100.0 * sbest / best);
		printf("\n");
		fflush(stdout);
		free(x), free(y);
	}
	for (int c = 0; c < copies; c++) {
		tmat_free(&ts[c]);
		if (ob[c])
			ms_kernel_onednn_bf16.pack_free ? ms_kernel_onednn_bf16.pack_free(ob[c]) : free(ob[c]);
	}
	free(ts), free(wo), free(ob), free(pan);
	ms_cpu_free(&be);
	return 0;
}

static void add_portable(Suite *s)
{
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, pack_row_exact);
	tcase_add_test(tc, backend_auto_and_exact);
	suite_add_tcase(s, tc);
}

static void add_bf16(TCase *tc, int arg)
{
	(void)arg;
	tcase_add_test(tc, conversion_matches_scalar);
	tcase_add_test(tc, avx512_matches_scalar_and_bound);
	tcase_add_test(tc, batch_and_split_invariance);
	tcase_add_test(tc, backend_binds_and_runs_it);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--bench"))
		return bench(argc, argv);
	static const struct isa_gate gates[] = {{"avx512bf16", BF16_FLAGS, NULL, add_bf16, 0}};
	return isa_run(argc, argv, "bf16", add_portable, ISA_GATES(gates), 600);
}
