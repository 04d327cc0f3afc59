/*
 * test-attention.c: the attention module (engine/cpu/attention.c).
 *
 * The reference kernel is held to an independent double-precision attention
 * (the textbook formula: all scores, the sink in the max and the
 * denominator); every ISA kernel is held to the reference, in a test of
 * its own (`--isa avx512`, `--isa avx2`: exit 77 where the CPU lacks it).
 * Data: a KV pool of random values (never all zero) with shuffled page
 * tables, pages below a sliding window removed (-1: touching one would
 * fault or trip ASan), batches mixing decode tokens of several sequences
 * and prefill runs. Tolerance: values lie in [-1, 1), so an output does
 * too; |got - want| <= 2e-5 (ISA kernel vs reference, fp32 both) and
 * <= 2e-5 (reference vs double), absolute.
 *
 * The fold order is fixed by positions alone, so outputs must be bit for
 * bit the same for 1, 2 and 3 threads, with split-K off, automatic or
 * forced, and for a token alone or in a batch.
 */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "cpu.h"
#include "isagate.h"

#define TESTUTIL_SEED 12345u
#include "testutil.h"

static float nonzero(void)
{
	float x;
	while ((x = frand()) == 0.0f)
		;
	return x;
}

/* ---- a batch over a random paged cache ---- */

struct case_spec {
	int64_t d, nH, nKV, window, page_tokens;
	int nseq;
	const int64_t *len;   /* [nseq] positions written */
	const int64_t *m;     /* [nseq] trailing positions queried (1 = decode) */
	float qscale;         /* scores' spread */
	float sink_lo, sink_hi;
};

struct fixture {
	struct case_spec s;
	struct ms_kv_pool pool;
	int32_t **tables;
	int64_t n;
	int64_t *pos;
	const int32_t **pages;
	float *q, *sinks;
};

/* A random K or V row: heads of magnitudes 1 to 1/8 (so fp8 heads get
 * different scales), a value in 16 a thousand times smaller (fp8's
 * subnormal codes). */
static void random_row(float *x, int64_t kvd, int64_t d)
{
	for (int64_t h = 0; h < kvd / d; h++) {
		float f = 1.0f / (float)(1 << (rnd() % 4));
		for (int64_t e = h * d; e < (h + 1) * d; e++)
			x[e] = nonzero() * f * (rnd() % 16 ? 1.0f : 1e-3f);
	}
}

/* A random batch over a cache of dtype t (random values rounded as the
 * pool stores them). */
static void fixture_init(struct fixture *f, const struct case_spec *s, enum ms_kv_dtype dt)
{
	memset(f, 0, sizeof(*f));
	f->s = *s;
	struct ms_err err = {0};
	int64_t P = s->page_tokens, kvd = s->nKV * s->d, total = 0;
	for (int i = 0; i < s->nseq; i++)
		total += (s->len[i] + P - 1) / P, f->n += s->m[i];
	int32_t n_pages = (int32_t)total + 3;
	ck_assert_int_eq(ms_kv_pool_init(&f->pool, NULL, n_pages, P, kvd, s->d, dt, &err), 0);
	float *k = malloc((size_t)kvd * sizeof(float)), *v = malloc((size_t)kvd * sizeof(float));
	for (int64_t i = 0; i < (int64_t)n_pages * P; i++) {
		random_row(k, kvd, s->d), random_row(v, kvd, s->d);
		ms_kv_put(&f->pool, (int32_t)(i / P), i % P, k, v);
	}
	free(k), free(v);
	/* shuffled pages, so a sequence's positions are scattered */
	int32_t *perm = malloc((size_t)n_pages * sizeof(int32_t));
	for (int32_t i = 0; i < n_pages; i++)
		perm[i] = i;
	for (int32_t i = n_pages - 1; i > 0; i--) {
		int32_t j = (int32_t)(rnd() % (uint32_t)(i + 1)), t = perm[i];
		perm[i] = perm[j], perm[j] = t;
	}
	f->tables = calloc((size_t)s->nseq, sizeof(*f->tables));
	f->pos = malloc((size_t)f->n * sizeof(int64_t));
	f->pages = malloc((size_t)f->n * sizeof(*f->pages));
	int64_t next = 0, t = 0;
	for (int i = 0; i < s->nseq; i++) {
		int64_t nb = (s->len[i] + P - 1) / P, first = s->len[i] - s->m[i];
		int64_t keep = s->window > 0 && first - s->window + 1 > 0 ? first - s->window + 1 : 0;
		f->tables[i] = malloc((size_t)nb * sizeof(int32_t));
		for (int64_t b = 0; b < nb; b++)
			/* a sliding layer gave back pages wholly below every window */
			f->tables[i][b] = (b + 1) * P <= keep ? -1 : perm[next++];
		for (int64_t p = first; p < s->len[i]; p++, t++) {
			f->pos[t] = p;
			f->pages[t] = f->tables[i];
		}
	}
	free(perm);
	f->q = malloc((size_t)(f->n * s->nH * s->d) * sizeof(float));
	for (int64_t i = 0; i < f->n * s->nH * s->d; i++)
		f->q[i] = nonzero() * s->qscale;
	f->sinks = malloc((size_t)s->nH * sizeof(float));
	for (int64_t h = 0; h < s->nH; h++)
		f->sinks[h] = s->sink_lo + (s->sink_hi - s->sink_lo) * (frand() + 1.0f) / 2.0f;
}

static void fixture_free(struct fixture *f)
{
	for (int i = 0; i < f->s.nseq; i++)
		free(f->tables[i]);
	free(f->tables), free(f->pos), free(f->pages), free(f->q), free(f->sinks);
	ms_kv_pool_free(&f->pool);
}

/* Every run with q and p rounded to bf16 (ms_attn_args.bf16_products) */
static bool g_products;

/* Tokens [t0, t0 + n) of the fixture's batch into out (rows of that
 * batch). */
static void run_part(const struct fixture *f, const struct ms_attn_kernel *k, struct ms_pool *pool,
		     int split, int heads, int64_t t0, int64_t n, float *out)
{
	int64_t qd = f->s.nH * f->s.d;
	struct ms_attn_args a = {
		.n_heads = f->s.nH, .n_kv_heads = f->s.nKV, .head_dim = f->s.d,
		.window = f->s.window, .sinks = f->sinks, .pool = &f->pool, .n = n,
		.pos = f->pos + t0, .pages = f->pages + t0, .q = f->q + t0 * qd, .out = out + t0 * qd,
		.split = split, .heads = heads, .bf16_products = g_products,
	};
	struct ms_attn_ws ws = {0};
	struct ms_err err = {0};
	ck_assert_msg(ms_attn_run(k, pool, &a, &ws, &err) == 0, "%s", err.msg);
	ms_attn_ws_free(&ws);
	ms_attn_ws_free(&ws); /* harmless twice */
}

static float *run(const struct fixture *f, const struct ms_attn_kernel *k, int threads, int split,
		  int heads)
{
	struct ms_pool pool;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_pool_init(&pool, threads, false, &err), 0);
	float *out = malloc((size_t)(f->n * f->s.nH * f->s.d) * sizeof(float));
	run_part(f, k, &pool, split, heads, 0, f->n, out);
	ms_pool_free(&pool);
	return out;
}

/* The textbook attention in double. */
static double *naive(const struct fixture *f)
{
	int64_t d = f->s.d, nH = f->s.nH, G = nH / f->s.nKV, P = f->s.page_tokens;
	double *out = malloc((size_t)(f->n * nH * d) * sizeof(double));
	double *s = malloc(4096 * sizeof(double));
	for (int64_t t = 0; t < f->n; t++)
		for (int64_t h = 0; h < nH; h++) {
			int64_t pos = f->pos[t], kvo = (h / G) * d;
			int64_t lo = f->s.window > 0 && pos - f->s.window + 1 > 0 ? pos - f->s.window + 1 : 0;
			const float *q = f->q + (t * nH + h) * d;
			double mx = f->sinks[h];
			for (int64_t p = lo; p <= pos; p++) {
				int32_t pg = f->pages[t][p / P];
				double dot = 0;
				for (int64_t e = 0; e < d; e++)
					dot += (double)q[e] * ms_kv_get(&f->pool, false, pg, p % P, kvo + e);
				s[p - lo] = dot / sqrt((double)d);
				mx = s[p - lo] > mx ? s[p - lo] : mx;
			}
			double den = exp(f->sinks[h] - mx);
			for (int64_t p = lo; p <= pos; p++)
				den += (s[p - lo] = exp(s[p - lo] - mx));
			double *o = out + (t * nH + h) * d;
			for (int64_t e = 0; e < d; e++)
				o[e] = 0;
			for (int64_t p = lo; p <= pos; p++) {
				int32_t pg = f->pages[t][p / P];
				for (int64_t e = 0; e < d; e++)
					o[e] += s[p - lo] / den * ms_kv_get(&f->pool, true, pg, p % P, kvo + e);
			}
		}
	free(s);
	return out;
}

/* ---- the cases ---- */

static const int64_t L_mixed[] = {1, 17, 300, 2000, 513, 64, 1999};
static const int64_t M_mixed[] = {1, 17, 1, 1, 40, 9, 3};
static const int64_t L_long[] = {2000, 1031};
static const int64_t M_long[] = {1, 1};
static const int64_t L_pre[] = {777};
static const int64_t M_pre[] = {70};
static const int64_t L_short[] = {1, 2, 5};
static const int64_t M_short[] = {1, 2, 3};

static const struct case_spec cases[] = {
	/* d, nH, nKV, window, page, nseq, len, m, qscale, sink range */
	{64, 8, 2, 0, 16, 7, L_mixed, M_mixed, 1.0f, -2.0f, 1.0f},
	{64, 64, 8, 128, 16, 7, L_mixed, M_mixed, 4.0f, -2.0f, 2.0f},
	{64, 64, 8, 0, 64, 2, L_long, M_long, 3.0f, 5.0f, 12.0f},     /* sinks dominate */
	{8, 1, 1, 0, 7, 7, L_mixed, M_mixed, 8.0f, -30.0f, -20.0f},   /* sinks vanish */
	{8, 4, 1, 100, 7, 7, L_mixed, M_mixed, 2.0f, -1.0f, 1.0f},
	{20, 4, 1, 3000, 13, 7, L_mixed, M_mixed, 2.0f, 0.0f, 3.0f},  /* window > context */
	{20, 8, 2, 5, 16, 7, L_mixed, M_mixed, 1.0f, -1.0f, 1.0f},    /* window < a run */
	{80, 32, 8, 0, 32, 1, L_pre, M_pre, 2.0f, -3.0f, 3.0f},
	{80, 8, 2, 257, 5, 7, L_mixed, M_mixed, 6.0f, -1.0f, 4.0f},
	{12, 32, 8, 0, 3, 3, L_short, M_short, 1.0f, -1.0f, 1.0f},
	{64, 1, 1, 0, 256, 2, L_long, M_long, 10.0f, -1.0f, 1.0f},
	{64, 4, 1, 1, 16, 7, L_mixed, M_mixed, 1.0f, -1.0f, 1.0f},    /* window 1: the token itself */
	{36, 12, 2, 0, 16, 7, L_mixed, M_mixed, 2.0f, -1.0f, 1.0f},   /* G 6: four rows, then two */
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* The kernels, the ISA ones with their vector exp: the loop tests' _i is
 * a row (the reference's in the portable run, an ISA's in its own). */
enum { K_REF, K_AVX512, K_AVX512BF16, K_AVX2 };
static const struct {
	const struct ms_attn_kernel *k;
	const char *exp_name;
	void (*exp)(const float *, float *, int64_t);
} kernels[] = {
	[K_REF] = {&ms_attn_ref, NULL, NULL},
	[K_AVX512] = {&ms_attn_avx512, "exp512", ms_attn_exp_avx512},
	[K_AVX512BF16] = {&ms_attn_avx512bf16, "exp512", ms_attn_exp_avx512},
	[K_AVX2] = {&ms_attn_avx2, "exp256", ms_attn_exp_avx2},
};

/* Every stored dtype: each kernel reads bf16 and fp8 rows widened exactly
 * (fp8 times its power-of-two scale), so the same tolerances hold against
 * a reference on the same stored values. */
static const enum ms_kv_dtype dtypes[] = {MS_KV_F32, MS_KV_BF16, MS_KV_FP8};
#define N_DTYPES 3

START_TEST(reference_matches_double)
{
	double worst = 0;
	for (int c = 0; c < N_DTYPES * N_CASES; c++) {
		struct fixture f;
		fixture_init(&f, &cases[c % N_CASES], dtypes[c / N_CASES]);
		float *got = run(&f, &ms_attn_ref, 2, 0, 0);
		double *want = naive(&f);
		for (int64_t i = 0; i < f.n * f.s.nH * f.s.d; i++) {
			double e = fabs(got[i] - want[i]);
			worst = e > worst ? e : worst;
			ck_assert_msg(e <= 2e-5, "case %d elem %lld: %.9g vs %.9g", c, (long long)i,
				      got[i], want[i]);
		}
		free(got), free(want);
		fixture_free(&f);
	}
	printf("attention: reference vs double, %d cases, f32, bf16 and fp8 caches: max |diff| %.3g\n",
	       N_CASES, worst);
}
END_TEST

START_TEST(isa_kernels_match_reference)
{
	const struct ms_attn_kernel *k = kernels[_i].k;
	double worst = 0;
	int64_t outputs = 0;
	for (int c = 0; c < N_DTYPES * N_CASES; c++) {
		struct fixture f;
		fixture_init(&f, &cases[c % N_CASES], dtypes[c / N_CASES]);
		float *want = run(&f, &ms_attn_ref, 1, 0, 0);
		float *got = run(&f, k, 3, 0, 0);
		for (int64_t i = 0; i < f.n * f.s.nH * f.s.d; i++) {
			double e = fabs((double)got[i] - want[i]);
			worst = e > worst ? e : worst;
			ck_assert_msg(e <= 2e-5, "%s case %d (%s) elem %lld: %.9g vs ref %.9g", k->name,
				      c % N_CASES, ms_kv_dtype_name(dtypes[c / N_CASES]), (long long)i,
				      got[i], want[i]);
		}
		outputs += f.n * f.s.nH;
		free(got), free(want);
		fixture_free(&f);
	}
	printf("attention: %s vs reference, %d cases x f32/bf16/fp8 caches, %lld (token, head) "
	       "outputs: max |diff| %.3g\n", k->name, N_CASES, (long long)outputs, worst);
}
END_TEST

/* Bit-for-bit: threads, split-K, kv heads per item, batch composition. */
static void check_invariance(const struct ms_attn_kernel *k, const struct case_spec *cs,
			     enum ms_kv_dtype t)
{
	struct fixture f;
	fixture_init(&f, cs, t);
	size_t bytes = (size_t)(f.n * f.s.nH * f.s.d) * sizeof(float);
	float *base = run(&f, k, 1, 1, 1);
	const int threads[] = {1, 2, 3, 2, 3, 3, 1, 2, 3};
	const int splits[] = {0, 0, 0, 2, 3, 7, 5, 1, 4};
	const int heads[] = {0, 0, 0, 1, 0, (int)cs->nKV, (int)cs->nKV, (int)cs->nKV, 1};
	for (int i = 0; i < 9; i++) {
		float *o = run(&f, k, threads[i], splits[i], heads[i]);
		ck_assert_msg(memcmp(o, base, bytes) == 0, "%s: %d threads split %d heads %d differs",
			      k->name, threads[i], splits[i], heads[i]);
		free(o);
	}
	/* each token alone */
	struct ms_pool pool;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_pool_init(&pool, 2, false, &err), 0);
	float *alone = malloc(bytes);
	for (int64_t t = 0; t < f.n; t++)
		run_part(&f, k, &pool, 0, 0, t, 1, alone);
	ck_assert_msg(memcmp(alone, base, bytes) == 0, "%s: a token alone differs", k->name);
	ms_pool_free(&pool);
	free(alone), free(base);
	fixture_free(&f);
}

START_TEST(results_do_not_depend_on_threads_split_or_batch)
{
	const struct ms_attn_kernel *k = kernels[_i].k;
	check_invariance(k, &cases[2], MS_KV_F32);  /* decode, 2000 keys: splits */
	check_invariance(k, &cases[1], MS_KV_F32);  /* mixed, sliding */
	check_invariance(k, &cases[7], MS_KV_F32);  /* one long prefill run */
	check_invariance(k, &cases[10], MS_KV_F32); /* 2 items, 2000 keys: auto splits */
	check_invariance(k, &cases[2], MS_KV_BF16);
	check_invariance(k, &cases[1], MS_KV_BF16);
	check_invariance(k, &cases[10], MS_KV_FP8);
	check_invariance(k, &cases[1], MS_KV_FP8);
	/* prefill blocks computed with query rows in lanes (avx512) against
	 * the same tokens alone: ragged head_dim, G 1 and 6, windows */
	check_invariance(k, &cases[7], MS_KV_BF16);
	check_invariance(k, &cases[7], MS_KV_FP8);
	check_invariance(k, &cases[12], MS_KV_BF16);
	check_invariance(k, &cases[5], MS_KV_F32);
	check_invariance(k, &cases[8], MS_KV_FP8);
	check_invariance(k, &cases[3], MS_KV_BF16);
}
END_TEST

/* bf16 products (q and p rounded to bf16) on a bf16 cache: a kernel
 * against the reference kernel doing the same rounding, and the same bits
 * whatever the threads, split and batch (a token alone goes through the
 * walk's FMAs, a block through vdpbf16ps). The tolerance is looser than
 * isa_kernels_match_reference's: p is rounded after exp, and the kernels'
 * exps differ in the last bit, which moves a p to the neighbouring bf16
 * now and then, and the kernels add in pairs. */
START_TEST(bf16_products)
{
	const struct ms_attn_kernel *k = kernels[_i].k;
	g_products = true;
	double worst = 0, worst_rel = 0;
	for (int c = 0; c < N_CASES; c++) {
		struct fixture f;
		fixture_init(&f, &cases[c], MS_KV_BF16);
		float *want = run(&f, &ms_attn_ref, 1, 0, 0);
		float *got = run(&f, k, 3, 0, 0);
		double big = 0;
		for (int64_t i = 0; i < f.n * f.s.nH * f.s.d; i++)
			big = fabs(want[i]) > big ? fabs(want[i]) : big;
		for (int64_t i = 0; i < f.n * f.s.nH * f.s.d; i++) {
			double e = fabs((double)got[i] - want[i]);
			worst = e > worst ? e : worst;
			worst_rel = e / big > worst_rel ? e / big : worst_rel;
			ck_assert_msg(e <= 4e-3 * big, "%s case %d elem %lld: %.9g vs ref %.9g", k->name, c,
				      (long long)i, got[i], want[i]);
		}
		free(got), free(want);
		fixture_free(&f);
	}
	printf("attention: %s with bf16 products vs the reference's: max |diff| %.3g (%.3g of the "
	       "largest output)\n", k->name, worst, worst_rel);
	check_invariance(k, &cases[2], MS_KV_BF16);
	check_invariance(k, &cases[1], MS_KV_BF16);
	check_invariance(k, &cases[7], MS_KV_BF16);
	check_invariance(k, &cases[12], MS_KV_BF16);
	check_invariance(k, &cases[3], MS_KV_BF16);
	g_products = false;
}
END_TEST

/* The vector exps against expf, in ulps (subnormal results: in units of
 * the smallest subnormal). */
static void check_exp(const char *name, void (*fn)(const float *, float *, int64_t))
{
	int64_t n = 1 << 20;
	float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		x[i] = i < n / 2 ? -104.0f * (float)i / (float)(n / 2) /* the softmax range */
				 : 88.0f * frand();
	fn(x, y, n);
	int64_t worst = 0;
	for (int64_t i = 0; i < n; i++) {
		float w = expf(x[i]);
		int32_t a, b;
		memcpy(&a, &y[i], 4), memcpy(&b, &w, 4);
		int64_t u = llabs((int64_t)a - b);
		worst = u > worst ? u : worst;
		ck_assert_msg(u <= 3, "%s(%.9g) = %.9g, expf %.9g", name, x[i], y[i], w);
	}
	const float sp[] = {-INFINITY, 0.0f, -0.0f, -200.0f, NAN};
	float ys[5];
	fn(sp, ys, 5);
	ck_assert(ys[0] == 0.0f && ys[1] == 1.0f && ys[2] == 1.0f && ys[3] == 0.0f && isnan(ys[4]));
	printf("attention: %s vs expf over [-104, 88]: max %lld ulp\n", name, (long long)worst);
	free(x), free(y);
}

START_TEST(vector_exp_is_accurate)
{
	check_exp(kernels[_i].exp_name, kernels[_i].exp);
}
END_TEST

START_TEST(selection)
{
	unsigned all = MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C | MS_CPU_AVX512F | MS_CPU_AVX512BW |
		       MS_CPU_AVX512VL;
	ck_assert_ptr_eq(ms_attn_select("ref", all), &ms_attn_ref);
	ck_assert_ptr_eq(ms_attn_select("avx512", all), &ms_attn_avx512);
	ck_assert_ptr_eq(ms_attn_select("amx", all), &ms_attn_avx512);
	ck_assert_ptr_eq(ms_attn_select("avx2", all), &ms_attn_avx2);
	ck_assert_ptr_eq(ms_attn_select("avx512", MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C),
			 &ms_attn_avx2);
	/* the AVX2 kernel widens fp8 through F16C */
	ck_assert_ptr_eq(ms_attn_select("avx2", MS_CPU_AVX2 | MS_CPU_FMA), &ms_attn_ref);
	ck_assert_ptr_eq(ms_attn_select("avx512", MS_CPU_AVX2), &ms_attn_ref);
	ck_assert_ptr_eq(ms_attn_select("avx2", 0), &ms_attn_ref);
	ck_assert_ptr_eq(ms_attn_select(NULL, all), &ms_attn_avx512);
	/* bf16 products where the CPU multiplies bf16 pairs */
	ck_assert_ptr_eq(ms_attn_select(NULL, all | MS_CPU_AVX512BF16), &ms_attn_avx512bf16);
	ck_assert_ptr_eq(ms_attn_select("avx2", all | MS_CPU_AVX512BF16), &ms_attn_avx2);
	ck_assert_ptr_nonnull(ms_attn_ref.chunk_bf16_products);
	ck_assert_ptr_null(ms_attn_avx512.chunk_bf16_products);
	ck_assert_ptr_null(ms_attn_avx2.chunk_bf16_products);
}
END_TEST

/* The sink softmax (kept for tests): probabilities with the sink's share
 * dropped. */
START_TEST(sink_softmax_values)
{
	float s[3] = {1.0f, 2.0f, 3.0f};
	ms_sink_softmax(s, 3, 0.5f);
	double den = exp(1) + exp(2) + exp(3) + exp(0.5);
	for (int i = 0; i < 3; i++)
		ck_assert(fabs(s[i] - exp(i + 1) / den) < 1e-6);
}
END_TEST

START_TEST(bad_shapes_are_refused)
{
	struct ms_kv_pool kv;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_kv_pool_init(&kv, NULL, 2, 4, 16, 4, MS_KV_F32, &err), 0);
	struct ms_pool pool;
	ck_assert_int_eq(ms_pool_init(&pool, 1, false, &err), 0);
	struct ms_attn_ws ws = {0};
	struct ms_attn_args a = {.n_heads = 6, .n_kv_heads = 4, .head_dim = 4, .pool = &kv, .n = 1};
	ck_assert_int_eq(ms_attn_run(&ms_attn_ref, &pool, &a, &ws, &err), -EINVAL);
	a.n_heads = 8, a.n_kv_heads = 2, a.head_dim = 4; /* 8 floats, the pool has 16 */
	ck_assert_int_eq(ms_attn_run(&ms_attn_ref, &pool, &a, &ws, &err), -EINVAL);
	a.n_kv_heads = 4, a.heads = 3; /* not a divisor of 4 */
	ck_assert_int_eq(ms_attn_run(&ms_attn_ref, &pool, &a, &ws, &err), -EINVAL);
	a.heads = 0, a.n = 0; /* nothing to do */
	ck_assert_int_eq(ms_attn_run(&ms_attn_ref, &pool, &a, &ws, &err), 0);
	struct ms_kv_pool kb;
	ck_assert_int_eq(ms_kv_pool_init(&kb, NULL, 2, 4, 16, 4, MS_KV_BF16, &err), 0);
	a.pool = &kb, a.bf16_products = true; /* a kernel without them */
	ck_assert_int_eq(ms_attn_run(&ms_attn_avx2, &pool, &a, &ws, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "avx2-attn has no bf16 products"));
	ms_kv_pool_free(&kb);
	ms_attn_ws_free(&ws);
	ms_pool_free(&pool);
	ms_kv_pool_free(&kv);
}
END_TEST

static void add_portable(Suite *s)
{
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, selection);
	tcase_add_test(tc, sink_softmax_values);
	tcase_add_test(tc, bad_shapes_are_refused);
	tcase_add_test(tc, reference_matches_double);
	tcase_add_loop_test(tc, results_do_not_depend_on_threads_split_or_batch, K_REF, K_REF + 1);
	suite_add_tcase(s, tc);
}

/* Kernel k's cases: its exp, against the reference, invariance. */
static void add_isa(TCase *tc, int k)
{
	tcase_add_loop_test(tc, vector_exp_is_accurate, k, k + 1);
	tcase_add_loop_test(tc, isa_kernels_match_reference, k, k + 1);
	tcase_add_loop_test(tc, results_do_not_depend_on_threads_split_or_batch, k, k + 1);
	if (kernels[k].k->chunk_bf16_products)
		tcase_add_loop_test(tc, bf16_products, k, k + 1);
}

int main(int argc, char **argv)
{
	/* each ISA kernel's gate: the flags it declares */
	const struct isa_gate gates[] = {
		{"avx512", ms_attn_avx512.cpu_flags, NULL, add_isa, K_AVX512},
		{"avx512bf16", ms_attn_avx512bf16.cpu_flags, NULL, add_isa, K_AVX512BF16},
		{"avx2", ms_attn_avx2.cpu_flags, NULL, add_isa, K_AVX2},
	};
	return isa_run(argc, argv, "attention", add_portable, ISA_GATES(gates), 600);
}
