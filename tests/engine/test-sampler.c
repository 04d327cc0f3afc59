/*
 * test-sampler.c: the sampler and the stop strings. Refusals name the field
 * and the value; greedy is the argmax with ties to the lowest id; top_k,
 * top_p and min_p restrict the support exactly, boundary ties included;
 * the drawn frequencies fit the expected distribution (chi-square at alpha
 * 1e-4, fixed seeds, so the outcome is deterministic); seeds reproduce, per
 * sampler; penalties and logit_bias change exactly the expected logits;
 * logprobs are the raw model's; stop strings never leak, however the text is
 * split. Last, a timing of one draw over a 201088-token vocabulary (printed,
 * not asserted tightly).
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check-run.h"
#include "sampler.h"
#include "ms-clock.h"

/* ---- helpers ------------------------------------------------------------ */

static void sampler_ok(struct ms_sampler *s, const struct ms_sampling *p, int64_t vocab,
		       const int32_t *prompt, size_t n_prompt)
{
	struct ms_err err = {0};
	int rc = ms_sampler_init(s, p, vocab, prompt, n_prompt, 12345, &err);
	ck_assert_msg(rc == 0, "init refused: %s", err.msg);
}

/* Refused by ms_sampling_check and ms_sampler_init, every needle in the
 * message. */
static void refused(const struct ms_sampling *p, int64_t vocab, ...)
{
	struct ms_err err = {0};
	int rc = ms_sampling_check(p, vocab, &err);
	ck_assert_int_eq(rc, -EINVAL);
	va_list ap;
	va_start(ap, vocab);
	for (const char *s; (s = va_arg(ap, const char *));)
		ck_assert_msg(strstr(err.msg, s), "message \"%s\" lacks \"%s\"", err.msg, s);
	va_end(ap);
	struct ms_sampler s;
	struct ms_err err2 = {0};
	ck_assert_int_eq(ms_sampler_init(&s, p, vocab, NULL, 0, 1, &err2), -EINVAL);
	ck_assert_str_eq(err.msg, err2.msg);
	ms_sampler_free(&s);
}

/* Draw n tokens; counts[vocab]. */
static void histogram(struct ms_sampler *s, const float *logits, int64_t vocab, int n,
		      long *counts)
{
	float *work = malloc((size_t)vocab * sizeof(float));
	memset(counts, 0, (size_t)vocab * sizeof(long));
	for (int i = 0; i < n; i++) {
		int32_t t = ms_sampler_sample(s, logits, work, NULL);
		ck_assert(t >= 0 && t < vocab);
		counts[t]++;
	}
	free(work);
}

static const float LN2 = 0.693147182f;

/* ---- validation --------------------------------------------------------- */

START_TEST(check_messages)
{
	struct ms_sampling p;
	struct ms_err err = {0};
	ms_sampling_defaults(&p);
	ck_assert_int_eq(ms_sampling_check(&p, 100, &err), 0);
	p.top_k = -1;
	p.temperature = 0;
	p.top_p = 1e-9f;
	p.min_p = 1;
	p.repetition_penalty = 10;
	p.presence_penalty = -2;
	p.frequency_penalty = 2;
	p.n_logprobs = 20;
	ck_assert_int_eq(ms_sampling_check(&p, 100, &err), 0);

#define BAD(field, value, ...) do { ms_sampling_defaults(&p); p.field = value; \
	refused(&p, 100, #field, __VA_ARGS__, NULL); } while (0)
	BAD(temperature, -0.5f, "-0.5", "[0, 100]");
	BAD(temperature, 150.0f, "150");
	BAD(temperature, NAN, "nan");
	BAD(top_k, -2, "-2");
	BAD(top_p, 0.0f, "0", "(0, 1]");
	BAD(top_p, 1.5f, "1.5");
	BAD(top_p, NAN, "nan");
	BAD(min_p, -0.25f, "-0.25", "[0, 1]");
	BAD(min_p, 1.25f, "1.25");
	BAD(presence_penalty, 2.5f, "2.5", "[-2, 2]");
	BAD(frequency_penalty, -3.0f, "-3");
	BAD(frequency_penalty, INFINITY, "inf");
	BAD(repetition_penalty, 0.0f, "0", "(0, 10]");
	BAD(repetition_penalty, 10.5f, "10.5");
	BAD(repetition_penalty, -1.0f, "-1");
	BAD(n_logprobs, 21, "21", "20");
	BAD(n_logprobs, -2, "-2");
#undef BAD
	struct ms_logit_bias b[3] = {{5, 1.0f}, {100, 2.0f}, {7, 0.0f}};
	ms_sampling_defaults(&p);
	p.logit_bias = b;
	p.n_logit_bias = 3;
	refused(&p, 100, "logit_bias[1]", "token id 100", "[0, 100)", NULL);
	b[1].id = -1;
	refused(&p, 100, "logit_bias[1]", "-1", NULL);
	b[1].id = 99;
	b[2].bias = 150.0f;
	refused(&p, 100, "logit_bias[2]", "token 7", "150", "[-100, 100]", NULL);
	b[2].bias = -100.5f;
	refused(&p, 100, "logit_bias[2]", "-100.5", NULL);
	b[2].bias = -100.0f;
	ck_assert_int_eq(ms_sampling_check(&p, 100, &err), 0);

	/* the prompt's ids are checked when the repetition penalty reads them */
	struct ms_sampler s;
	int32_t prompt[3] = {1, 2, 100};
	ms_sampling_defaults(&p);
	p.repetition_penalty = 1.2f;
	ck_assert_int_eq(ms_sampler_init(&s, &p, 100, prompt, 3, 0, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "prompt token 100 at position 2"), "%s", err.msg);
	ms_sampler_free(&s);
	ms_sampler_free(NULL);
	/* accept refuses ids outside the vocabulary */
	ms_sampling_defaults(&p);
	sampler_ok(&s, &p, 100, NULL, 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 100), -EINVAL);
	ck_assert_int_eq(ms_sampler_accept(&s, -1), -EINVAL);
	ck_assert_int_eq(ms_sampler_accept(&s, 99), 0);
	ms_sampler_free(&s);
}
END_TEST

/* ---- RNG ---------------------------------------------------------------- */

START_TEST(rng_basics)
{
	struct ms_rng a, b, c;
	ms_rng_seed(&a, 0);
	ms_rng_seed(&b, 0);
	ms_rng_seed(&c, 1);
	int differ = 0;
	double mean = 0;
	for (int i = 0; i < 100000; i++) {
		uint64_t x = ms_rng_next_u64(&a);
		ck_assert(x == ms_rng_next_u64(&b));
		differ += x != ms_rng_next_u64(&c);
		double d = ms_rng_next_double(&a);
		ms_rng_next_double(&b);
		ck_assert(d >= 0.0 && d < 1.0);
		mean += d;
	}
	ck_assert_int_gt(differ, 99990);
	mean /= 100000;
	ck_assert_msg(fabs(mean - 0.5) < 0.005, "mean %f", mean);
}
END_TEST

/* ---- greedy ------------------------------------------------------------- */

START_TEST(greedy_argmax)
{
	const float logits[6] = {1.0f, 3.0f, -2.0f, 3.0f, NAN, 2.9f};
	float work[6];
	struct ms_sampling p;
	struct ms_sampler s;
	float temps[3] = {0.0f, 1e-6f, 9.9e-6f};
	for (int t = 0; t < 3; t++) {
		ms_sampling_defaults(&p);
		p.temperature = temps[t];
		p.top_p = 0.1f; /* irrelevant when greedy */
		sampler_ok(&s, &p, 6, NULL, 0);
		for (int i = 0; i < 10; i++)
			ck_assert_int_eq(ms_sampler_sample(&s, logits, work, NULL), 1);
		ms_sampler_free(&s);
	}
	/* top_k 1 at any temperature: the same token */
	ms_sampling_defaults(&p);
	p.top_k = 1;
	p.temperature = 5.0f;
	sampler_ok(&s, &p, 6, NULL, 0);
	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(ms_sampler_sample(&s, logits, work, NULL), 1);
	ms_sampler_free(&s);
	/* everything -inf: a valid id all the same */
	const float dead[3] = {-INFINITY, -INFINITY, -INFINITY};
	ms_sampling_defaults(&p);
	sampler_ok(&s, &p, 3, NULL, 0);
	ck_assert_int_eq(ms_sampler_sample(&s, dead, work, NULL), 0);
	ms_sampler_free(&s);
}
END_TEST

/* ---- support ------------------------------------------------------------ */

/* Which tokens n draws hit: a bit mask over at most 64 tokens. */
static uint64_t support(const struct ms_sampling *p, const float *logits, int64_t vocab, int n)
{
	struct ms_sampler s;
	long counts[64];
	sampler_ok(&s, p, vocab, NULL, 0);
	histogram(&s, logits, vocab, n, counts);
	ms_sampler_free(&s);
	uint64_t m = 0;
	for (int i = 0; i < vocab; i++)
		if (counts[i])
			m |= 1ull << i;
	return m;
}

START_TEST(support_top_k)
{
	const float logits[8] = {0.5f, 2.0f, 3.0f, 3.0f, 3.0f, 1.0f, -1.0f, 2.5f};
	struct ms_sampling p;
	ms_sampling_defaults(&p);
	p.temperature = 3.0f;
	p.top_k = 2; /* ties at the boundary: the lowest ids */
	ck_assert_uint_eq(support(&p, logits, 8, 20000), 0x0C);
	p.top_k = 4;
	ck_assert_uint_eq(support(&p, logits, 8, 20000), 0x9C);
	p.top_k = 8;
	ck_assert_uint_eq(support(&p, logits, 8, 50000), 0xFF);
	p.top_k = 1000; /* larger than the vocabulary: off */
	ck_assert_uint_eq(support(&p, logits, 8, 50000), 0xFF);
	p.top_k = 0;
	ck_assert_uint_eq(support(&p, logits, 8, 50000), 0xFF);
	p.top_k = -1;
	ck_assert_uint_eq(support(&p, logits, 8, 50000), 0xFF);
}
END_TEST

START_TEST(support_top_p)
{
	/* e = exp(z - max) = 1, 1/2, 1/4, 1/4 exactly: p = .5 .25 .125 .125 */
	const float logits[4] = {0.0f, -LN2, -2 * LN2, -2 * LN2};
	struct ms_sampling p;
	ms_sampling_defaults(&p);
	p.top_p = 0.75f; /* reached exactly by the first two */
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0x3);
	p.top_p = 0.76f; /* needs a third; of the two tied, the lower id */
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0x7);
	p.top_p = 0.875f;
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0x7);
	p.top_p = 0.876f;
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0xF);
	p.top_p = 0.5f; /* the top token alone reaches it */
	ck_assert_uint_eq(support(&p, logits, 4, 2000), 0x1);
	p.top_p = 1e-6f; /* at least one token */
	ck_assert_uint_eq(support(&p, logits, 4, 2000), 0x1);
	/* top_p measures the tempered distribution: at t = 2, p ~ .369 .261 .185 .185 */
	p.top_p = 0.7f;
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0x3);
	p.temperature = 2.0f;
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0x7);
	/* top_p within top_k's survivors: .5 .25 renormalized to 2/3 1/3 */
	p.temperature = 1.0f;
	p.top_k = 2;
	p.top_p = 0.66f;
	ck_assert_uint_eq(support(&p, logits, 4, 2000), 0x1);
	p.top_p = 0.67f;
	ck_assert_uint_eq(support(&p, logits, 4, 20000), 0x3);
}
END_TEST

START_TEST(support_min_p)
{
	/* e = 1, 1/2, 1/2, 1/4 exactly */
	const float logits[5] = {0.0f, -LN2, -LN2, -2 * LN2, -INFINITY};
	struct ms_sampling p;
	ms_sampling_defaults(&p);
	p.min_p = 0.5f; /* p == min_p * p_max is kept */
	ck_assert_uint_eq(support(&p, logits, 5, 20000), 0x7);
	p.min_p = 0.50001f;
	ck_assert_uint_eq(support(&p, logits, 5, 2000), 0x1);
	p.min_p = 0.25f;
	ck_assert_uint_eq(support(&p, logits, 5, 20000), 0xF);
	p.min_p = 1.0f; /* only the maximum, and its ties */
	ck_assert_uint_eq(support(&p, logits, 5, 2000), 0x1);
	const float tied[4] = {1.0f, 3.0f, 3.0f, 2.0f};
	ck_assert_uint_eq(support(&p, tied, 4, 20000), 0x6);
	/* min_p after top_k: p_max is the same maximum */
	p.min_p = 0.25f;
	p.top_k = 3;
	ck_assert_uint_eq(support(&p, logits, 5, 20000), 0x7);
	p.top_k = 0;
	p.top_p = 0.5f; /* top_p (p = .444 .222 .222 .111: two needed), then min_p */
	ck_assert_uint_eq(support(&p, logits, 5, 20000), 0x3);
	p.min_p = 0.6f;
	ck_assert_uint_eq(support(&p, logits, 5, 2000), 0x1);
}
END_TEST

struct ranked {
	double v;
	int id;
};

static int by_rank(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;
	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return x->id - y->id;
}

/* One vocabulary size: logits from 7 values (many ties), near uniform at
 * T = 50 so that every kept token is drawn: 20 draws per kept token. */
static void support_ties_case(int V, const int *ks, int nk, const float *ps, int np)
{
	float *logits = malloc((size_t)V * sizeof(float));
	struct ranked *r = malloc((size_t)V * sizeof(*r));
	long *counts = malloc((size_t)V * sizeof(long));
	struct ms_rng g;
	ms_rng_seed(&g, 99);
	for (int i = 0; i < V; i++)
		logits[i] = (float)(ms_rng_next_u64(&g) % 7) * 0.25f - 1.0f;
	const float T = 50.0f;
	double m = -1.0;
	for (int i = 0; i < V; i++)
		m = logits[i] > m ? logits[i] : m;
	for (int i = 0; i < V; i++) {
		r[i].v = exp(((double)logits[i] - m) / T);
		r[i].id = i;
	}
	qsort(r, (size_t)V, sizeof(r[0]), by_rank);
	double total = 0;
	for (int i = 0; i < V; i++)
		total += r[i].v;

	struct ms_sampling p;
	struct ms_sampler s;
	for (int c = 0; c < nk; c++) {
		ms_sampling_defaults(&p);
		p.temperature = T;
		p.top_k = ks[c];
		sampler_ok(&s, &p, V, NULL, 0);
		histogram(&s, logits, V, 20 * ks[c], counts);
		ms_sampler_free(&s);
		for (int i = 0; i < V; i++) /* rank i < k: drawn; else never */
			ck_assert_msg((counts[r[i].id] > 0) == (i < ks[c]),
				      "V %d top_k %d: rank %d (id %d) drawn %ld times", V, ks[c], i,
				      r[i].id, counts[r[i].id]);
	}
	for (int c = 0; c < np; c++) {
		int keep = 0;
		double acc = 0;
		while (acc < ps[c] * total)
			acc += r[keep++].v;
		/* away from float rounding at the boundary */
		ck_assert(fabs(acc - r[keep - 1].v - ps[c] * total) > 1e-5 * total);
		ck_assert(fabs(acc - ps[c] * total) > 1e-5 * total);
		ms_sampling_defaults(&p);
		p.temperature = T;
		p.top_p = ps[c];
		sampler_ok(&s, &p, V, NULL, 0);
		histogram(&s, logits, V, 20 * keep, counts);
		ms_sampler_free(&s);
		for (int i = 0; i < V; i++)
			ck_assert_msg((counts[r[i].id] > 0) == (i < keep),
				      "V %d top_p %g: rank %d (id %d) drawn %ld times, %d kept", V,
				      (double)ps[c], i, r[i].id, counts[r[i].id], keep);
	}
	free(logits);
	free(r);
	free(counts);
}

/* The same restrictions on larger vocabularies full of ties, against a
 * reference that sorts (value descending, id ascending): 400 tokens take the
 * list paths (a heap for top_k, a sorted nucleus for top_p), 1100 near
 * uniform ones the dense radix selects (more than 1024 survivors). */
START_TEST(support_large_with_ties)
{
	const int ks_small[4] = {2, 37, 150, 399}, ks_big[1] = {1060};
	const float ps_small[4] = {0.05f, 0.3f, 0.61f, 0.97f}, ps_big[1] = {0.97f};
	support_ties_case(400, ks_small, 4, ps_small, 4);
	support_ties_case(1100, ks_big, 1, ps_big, 1);
}
END_TEST

/* ---- goodness of fit ---------------------------------------------------- */

/* chi2.isf(1e-4, df) for df = 1..4 */
static const double CHI2_CRIT[5] = {0, 15.136705, 18.420681, 21.107513, 23.512742};

struct fit_case {
	float t;
	int top_k;
	float top_p, min_p;
};

/* The distribution the sampler should draw from, computed in double. */
static void expected_probs(const float *logits, int n, const struct fit_case *c, double *q)
{
	struct ranked r[16];
	double m = -INFINITY, sum = 0;
	for (int i = 0; i < n; i++)
		m = logits[i] > m ? logits[i] : m;
	for (int i = 0; i < n; i++) {
		r[i].v = exp(((double)logits[i] - m) / c->t);
		r[i].id = i;
	}
	qsort(r, (size_t)n, sizeof(r[0]), by_rank);
	int keep = c->top_k > 0 && c->top_k < n ? c->top_k : n;
	for (int i = 0; i < keep; i++)
		sum += r[i].v;
	double acc = 0;
	int kp = 0;
	while (kp < keep && acc < c->top_p * sum)
		acc += r[kp++].v;
	keep = kp;
	memset(q, 0, (size_t)n * sizeof(double));
	sum = 0;
	for (int i = 0; i < keep; i++)
		if (r[i].v >= c->min_p * r[0].v) {
			q[r[i].id] = r[i].v;
			sum += r[i].v;
		}
	for (int i = 0; i < n; i++)
		q[i] /= sum;
}

START_TEST(chi_square_fit)
{
	const float logits[5] = {0.5f, -2.0f, 1.0f, -0.5f, 0.0f}; /* sorted order is not id order */
	const struct fit_case cases[] = {
		{1.0f, 0, 1.0f, 0.0f},   {0.5f, 0, 1.0f, 0.0f},  {2.0f, 0, 1.0f, 0.0f},
		{0.7f, 3, 1.0f, 0.0f},   {1.3f, 0, 0.8f, 0.0f},  {1.0f, 4, 0.9f, 0.0f},
		{1.0f, 0, 1.0f, 0.2f},   {3.0f, 0, 0.95f, 0.3f}, {0.25f, 0, 1.0f, 0.0f},
	};
	enum { N = 200000 };
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		double q[5];
		long counts[5];
		expected_probs(logits, 5, &cases[c], q);
		struct ms_sampling p;
		struct ms_sampler s;
		ms_sampling_defaults(&p);
		p.temperature = cases[c].t;
		p.top_k = cases[c].top_k;
		p.top_p = cases[c].top_p;
		p.min_p = cases[c].min_p;
		p.seed = 1000 + c;
		p.has_seed = true;
		sampler_ok(&s, &p, 5, NULL, 0);
		histogram(&s, logits, 5, N, counts);
		ms_sampler_free(&s);
		double stat = 0;
		int df = -1;
		for (int i = 0; i < 5; i++) {
			if (q[i] == 0) {
				ck_assert_msg(counts[i] == 0, "case %zu: token %d outside the support drawn",
					      c, i);
				continue;
			}
			double e = q[i] * N;
			stat += (counts[i] - e) * (counts[i] - e) / e;
			df++;
		}
		printf("chi-square case %zu (t %g, top_k %d, top_p %g, min_p %g): %.3f, df %d, "
		       "critical %.3f\n", c, (double)cases[c].t, cases[c].top_k,
		       (double)cases[c].top_p, (double)cases[c].min_p, stat, df,
		       df > 0 ? CHI2_CRIT[df] : 0.0);
		ck_assert_int_ge(df, 1);
		ck_assert_msg(stat < CHI2_CRIT[df], "case %zu: chi-square %f >= %f (df %d)", c, stat,
			      CHI2_CRIT[df], df);
	}
}
END_TEST

/* ---- seeds -------------------------------------------------------------- */

static void run_alone(uint64_t seed, bool has_seed, uint64_t fallback, const float *logits,
		      int64_t vocab, int n, int32_t *out)
{
	struct ms_sampling p;
	struct ms_sampler s;
	struct ms_err err = {0};
	float *work = malloc((size_t)vocab * sizeof(float));
	ms_sampling_defaults(&p);
	p.seed = seed;
	p.has_seed = has_seed;
	p.top_p = 0.95f;
	ck_assert_int_eq(ms_sampler_init(&s, &p, vocab, NULL, 0, fallback, &err), 0);
	for (int i = 0; i < n; i++)
		out[i] = ms_sampler_sample(&s, logits, work, NULL);
	ms_sampler_free(&s);
	free(work);
}

START_TEST(seed_reproducible)
{
	enum { V = 64, N = 500 };
	float logits[V];
	for (int i = 0; i < V; i++)
		logits[i] = sinf((float)i) * 2.0f;
	int32_t a1[N], a2[N], b1[N], f1[N], ai[N], bi[N];
	run_alone(42, true, 1, logits, V, N, a1);
	run_alone(42, true, 2, logits, V, N, a2); /* the fallback is unused */
	run_alone(43, true, 1, logits, V, N, b1);
	run_alone(0, false, 42, logits, V, N, f1); /* the fallback seeds it */
	ck_assert_mem_eq(a1, a2, sizeof(a1));
	ck_assert_mem_eq(a1, f1, sizeof(a1));
	ck_assert(memcmp(a1, b1, sizeof(a1)) != 0);

	/* interleaved, with different logits for the other: each sampler's
	 * sequence is what it is alone */
	float other[V];
	for (int i = 0; i < V; i++)
		other[i] = -logits[i];
	int32_t b_alone[N];
	run_alone(43, true, 0, other, V, N, b_alone);
	struct ms_sampling p;
	struct ms_sampler sa, sb;
	float work[V];
	ms_sampling_defaults(&p);
	p.top_p = 0.95f;
	p.has_seed = true;
	p.seed = 42;
	sampler_ok(&sa, &p, V, NULL, 0);
	p.seed = 43;
	sampler_ok(&sb, &p, V, NULL, 0);
	for (int i = 0; i < N; i++) {
		ai[i] = ms_sampler_sample(&sa, logits, work, NULL);
		bi[i] = ms_sampler_sample(&sb, other, work, NULL);
		if (i % 3 == 0) /* accept draws nothing from the RNG */
			ck_assert_int_eq(ms_sampler_accept(&sb, bi[i]), 0);
	}
	ms_sampler_free(&sa);
	ms_sampler_free(&sb);
	ck_assert_mem_eq(ai, a1, sizeof(ai));
	ck_assert_mem_eq(bi, b_alone, sizeof(bi));
}
END_TEST

/* ---- penalties and bias ------------------------------------------------- */

static int32_t greedy_next(struct ms_sampler *s, const float *logits, float *work)
{
	return ms_sampler_sample(s, logits, work, NULL);
}

START_TEST(penalties_flip_argmax)
{
	struct ms_sampling p;
	struct ms_sampler s;
	float work[4];
	const float logits[4] = {2.0f, 1.875f, -1.0f, -1.25f};
	int32_t prompt[2] = {0, 2};

	/* presence: generated tokens only, never the prompt's */
	ms_sampling_defaults(&p);
	p.temperature = 0;
	p.presence_penalty = 0.25f;
	sampler_ok(&s, &p, 4, prompt, 2);
	ck_assert_int_eq(greedy_next(&s, logits, work), 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 0), 0);
	ck_assert_int_eq(greedy_next(&s, logits, work), 1);
	ck_assert_int_eq(ms_sampler_accept(&s, 0), 0); /* presence does not grow */
	ck_assert_int_eq(ms_sampler_accept(&s, 1), 0);
	ck_assert_int_eq(greedy_next(&s, logits, work), 0); /* 1.75 vs 1.625 */
	ck_assert_uint_eq(ms_sampler_count(&s, 0), 2);
	ck_assert_uint_eq(ms_sampler_count(&s, 2), 0);
	ms_sampler_free(&s);

	/* frequency: 2 - c/16 against 1.875; c = 2 is a tie, to the lower id */
	ms_sampling_defaults(&p);
	p.temperature = 0;
	p.frequency_penalty = 0.0625f;
	sampler_ok(&s, &p, 4, prompt, 2);
	for (int c = 0; c < 4; c++) {
		ck_assert_int_eq(greedy_next(&s, logits, work), c < 3 ? 0 : 1);
		ck_assert_int_eq(ms_sampler_accept(&s, 0), 0);
	}
	ms_sampler_free(&s);

	/* repetition (HF): the prompt counts; positive logits divided,
	 * negative ones multiplied */
	ms_sampling_defaults(&p);
	p.temperature = 0;
	p.repetition_penalty = 1.5f;
	sampler_ok(&s, &p, 4, prompt, 1); /* prompt: token 0 */
	ck_assert_int_eq(greedy_next(&s, logits, work), 1); /* 2 / 1.5 < 1.875 */
	ms_sampler_free(&s);
	const float neg[2] = {-1.0f, -1.25f};
	int32_t p0 = 0;
	sampler_ok(&s, &p, 2, &p0, 1);
	ck_assert_int_eq(greedy_next(&s, neg, work), 1); /* -1.5 < -1.25 */
	ms_sampler_free(&s);
	sampler_ok(&s, &p, 2, NULL, 0);
	ck_assert_int_eq(greedy_next(&s, neg, work), 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 0), 0); /* generated tokens count too */
	ck_assert_int_eq(greedy_next(&s, neg, work), 1);
	ms_sampler_free(&s);
}
END_TEST

START_TEST(penalties_exact_logits)
{
	enum { V = 8 };
	const float logits[V] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f, 1.0f, -0.5f};
	float out[V];
	struct ms_sampling p;
	struct ms_sampler s;
	struct ms_logit_bias b[3] = {{6, -4.0f}, {5, 1.0f}, {6, 0.5f}}; /* 6 twice: last wins */
	int32_t prompt[3] = {1, 2, 1};
	ms_sampling_defaults(&p);
	p.repetition_penalty = 2.0f;
	p.presence_penalty = 0.5f;
	p.frequency_penalty = 0.25f;
	p.logit_bias = b;
	p.n_logit_bias = 3;
	sampler_ok(&s, &p, V, prompt, 3);
	b[0].bias = 99.0f; /* the sampler kept its own copy */
	ck_assert_int_eq(ms_sampler_accept(&s, 3), 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 3), 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 3), 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 4), 0);
	ck_assert_int_eq(ms_sampler_accept(&s, 6), 0);
	ms_sampler_adjust(&s, logits, out);
	const float want[V] = {
		2.0f,                          /* untouched */
		-2.0f,                         /* prompt: -1 * 2 */
		0.25f,                         /* prompt: 0.5 / 2 */
		3.0f / 2 - 0.5f - 0.25f * 3,   /* generated 3 times */
		-2.0f * 2 - 0.5f - 0.25f,      /* generated once, negative */
		1.0f,                          /* bias +1, never seen */
		(1.0f + 0.5f) / 2 - 0.75f,     /* bias, then repetition, then presence+frequency */
		-0.5f,
	};
	for (int i = 0; i < V; i++)
		ck_assert_msg(out[i] == want[i], "token %d: %g, want %g", i, (double)out[i],
			      (double)want[i]);
	ms_sampler_free(&s);

	/* no penalty: nothing is tracked, adjust is the identity plus bias */
	ms_sampling_defaults(&p);
	sampler_ok(&s, &p, V, prompt, 3);
	ck_assert_int_eq(ms_sampler_accept(&s, 3), 0);
	ck_assert_uint_eq(ms_sampler_count(&s, 3), 0);
	ck_assert_uint_eq(s.seen.n, 0);
	ms_sampler_adjust(&s, logits, out);
	ck_assert_mem_eq(out, logits, sizeof(out));
	ms_sampler_free(&s);
	/* presence only: the prompt is not stored */
	p.presence_penalty = 1.0f;
	sampler_ok(&s, &p, V, prompt, 3);
	ck_assert_uint_eq(s.seen.n, 0);
	ms_sampler_free(&s);
}
END_TEST

START_TEST(logit_bias_extremes)
{
	const float logits[4] = {5.0f, 0.0f, 0.0f, 1.0f};
	struct ms_sampling p;
	struct ms_logit_bias ban = {0, -100.0f}, force = {2, 100.0f};
	long counts[4];
	struct ms_sampler s;
	ms_sampling_defaults(&p);
	p.temperature = 2.0f;
	p.logit_bias = &ban;
	p.n_logit_bias = 1;
	sampler_ok(&s, &p, 4, NULL, 0);
	histogram(&s, logits, 4, 50000, counts);
	ms_sampler_free(&s);
	ck_assert_int_eq(counts[0], 0);
	ck_assert(counts[1] > 0 && counts[2] > 0 && counts[3] > 0);
	p.logit_bias = &force;
	sampler_ok(&s, &p, 4, NULL, 0);
	histogram(&s, logits, 4, 50000, counts);
	ms_sampler_free(&s);
	ck_assert_int_eq(counts[2], 50000);
	/* greedy follows the bias too */
	p.temperature = 0;
	p.logit_bias = &ban;
	float work[4];
	sampler_ok(&s, &p, 4, NULL, 0);
	ck_assert_int_eq(ms_sampler_sample(&s, logits, work, NULL), 3);
	ms_sampler_free(&s);
}
END_TEST

/* ---- logprobs ----------------------------------------------------------- */

START_TEST(logprobs_raw)
{
	enum { V = 50 };
	float logits[V], work[V];
	double lse = 0, m = -INFINITY;
	for (int i = 0; i < V; i++) {
		logits[i] = 3.0f * sinf(0.7f * (float)i);
		m = logits[i] > m ? logits[i] : m;
	}
	for (int i = 0; i < V; i++)
		lse += exp(logits[i] - m);
	lse = m + log(lse);

	struct ms_sampling p;
	struct ms_sampler s;
	struct ms_logit_bias b = {7, 50.0f};
	int32_t prompt[2] = {1, 2};
	ms_sampling_defaults(&p);
	p.temperature = 0.3f;
	p.top_p = 0.5f;
	p.repetition_penalty = 1.3f;
	p.presence_penalty = 1.0f;
	p.logit_bias = &b;
	p.n_logit_bias = 1;
	p.n_logprobs = 5;
	sampler_ok(&s, &p, V, prompt, 2);
	for (int step = 0; step < 20; step++) {
		struct ms_token_logprobs lp;
		int32_t t = ms_sampler_sample(&s, logits, work, &lp);
		ck_assert_int_eq(t, 7); /* the bias decides */
		ck_assert_int_eq(lp.token, 7);
		ck_assert_msg(fabs(lp.logprob - (logits[7] - lse)) < 1e-5, "%g vs %g",
			      (double)lp.logprob, logits[7] - lse);
		ck_assert_int_eq(lp.n_top, 5);
		for (int j = 0; j < 5; j++) {
			ck_assert(fabs(lp.top[j].logprob - (logits[lp.top[j].id] - lse)) < 1e-5);
			if (j)
				ck_assert(lp.top[j].logprob <= lp.top[j - 1].logprob);
		}
		ck_assert_int_eq(ms_sampler_accept(&s, t), 0);
	}
	ms_sampler_free(&s);

	/* the whole distribution sums to 1; ranks agree with the logits */
	double total = 0;
	for (int i = 0; i < V; i++) {
		struct ms_token_logprobs lp;
		ck_assert_int_eq(ms_logprobs_of(logits, V, i, 20, &lp), 0);
		total += exp(lp.logprob);
		ck_assert_int_eq(lp.n_top, 20);
		for (int j = 1; j < 20; j++)
			ck_assert(logits[lp.top[j].id] <= logits[lp.top[j - 1].id]);
		int rank = 0; /* tokens strictly above i */
		for (int k = 0; k < V; k++)
			rank += logits[k] > logits[i];
		if (rank < 20)
			ck_assert(lp.top[rank].logprob == lp.logprob);
	}
	ck_assert_msg(fabs(total - 1.0) < 1e-5, "sum %.9f", total);

	/* ties in the top list: lower id first; -inf has logprob -inf */
	const float tied[6] = {1.0f, 2.0f, 1.0f, 2.0f, -INFINITY, 2.0f};
	struct ms_token_logprobs lp;
	ck_assert_int_eq(ms_logprobs_of(tied, 6, 4, 4, &lp), 0);
	ck_assert(isinf(lp.logprob) && lp.logprob < 0);
	const int32_t order[4] = {1, 3, 5, 0};
	for (int j = 0; j < 4; j++)
		ck_assert_int_eq(lp.top[j].id, order[j]);
	ck_assert(lp.top[0].logprob == lp.top[2].logprob);
	double z = 3 * exp(2.0) + 2 * exp(1.0);
	ck_assert(fabs(lp.top[0].logprob - (2.0 - log(z))) < 1e-6);
	/* more alternatives than tokens; n_top 0; refusals */
	ck_assert_int_eq(ms_logprobs_of(tied, 3, 0, 20, &lp), 0);
	ck_assert_int_eq(lp.n_top, 3);
	ck_assert_int_eq(ms_logprobs_of(tied, 6, 2, 0, &lp), 0);
	ck_assert_int_eq(lp.n_top, 0);
	ck_assert(fabs(lp.logprob - (1.0 - log(z))) < 1e-6);
	ck_assert_int_eq(ms_logprobs_of(tied, 6, 6, 0, &lp), -EINVAL);
	ck_assert_int_eq(ms_logprobs_of(tied, 6, 0, 21, &lp), -EINVAL);

	/* the same logprobs at any temperature; none asked: NaN, no list */
	float t_lp[3];
	const float temps[3] = {0.0f, 0.5f, 5.0f};
	for (int c = 0; c < 3; c++) {
		ms_sampling_defaults(&p);
		p.temperature = temps[c];
		p.n_logprobs = 0;
		p.has_seed = true;
		sampler_ok(&s, &p, 6, NULL, 0);
		do {
			ms_sampler_sample(&s, tied, work, &lp);
		} while (lp.token != 1);
		ck_assert_int_eq(lp.n_top, 0);
		t_lp[c] = lp.logprob;
		ms_sampler_free(&s);
	}
	ck_assert(t_lp[0] == t_lp[1] && t_lp[1] == t_lp[2]);
	ms_sampling_defaults(&p);
	sampler_ok(&s, &p, 6, NULL, 0);
	lp.n_top = 7;
	ms_sampler_sample(&s, tied, work, &lp);
	ck_assert(isnan(lp.logprob));
	ck_assert_int_eq(lp.n_top, 0);
	ms_sampler_free(&s);
}
END_TEST

/* ---- stop strings ------------------------------------------------------- */

/* Reference: the stop that ends first (then starts first, then lowest index)
 * on the whole text; returns the index or -1 and the emitted length. */
static int stop_reference(const char *text, const char *const *stops, int n, bool include,
			  size_t *out_len)
{
	size_t len = strlen(text);
	for (size_t end = 1; end <= len; end++) {
		int best = -1;
		size_t best_start = 0;
		for (int j = 0; j < n; j++) {
			size_t l = strlen(stops[j]);
			if (l <= end && !memcmp(text + end - l, stops[j], l) &&
			    (best < 0 || end - l < best_start)) {
				best = j;
				best_start = end - l;
			}
		}
		if (best >= 0) {
			*out_len = include ? end : best_start;
			return best;
		}
	}
	*out_len = len;
	return -1;
}

/* Feed text in pieces cut where mask has a bit (bit i: a cut after byte i),
 * checking as it goes; returns the emitted text (malloc'd). */
static char *stop_run(const char *text, const char *const *stops, int n, bool include,
		      uint64_t mask, int *matched)
{
	struct ms_stopper st;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_stopper_init(&st, stops, (size_t)n, include, &err), 0);
	size_t len = strlen(text), max_len = 0, ref_len;
	for (int j = 0; j < n; j++)
		max_len = strlen(stops[j]) > max_len ? strlen(stops[j]) : max_len;
	int ref = stop_reference(text, stops, n, include, &ref_len);
	char *out = malloc(len + 3); /* the text, "zz" pushed at the end, NUL */
	size_t n_out = 0, fed = 0, start = 0;
	bool stopped = false;
	for (size_t i = 0; i < len; i++) {
		if (i + 1 < len && !(mask >> i & 1))
			continue;
		size_t emit;
		ck_assert_int_eq(ms_stopper_push(&st, text + start, i + 1 - start, &emit, &stopped), 0);
		fed = i + 1;
		memcpy(out + n_out, ms_stopper_text(&st), emit);
		n_out += emit;
		start = i + 1;
		/* never more than the reference, never a byte of the stop */
		ck_assert_msg(n_out <= ref_len && !memcmp(out, text, n_out),
			      "text \"%s\": emitted %zu bytes, reference %zu", text, n_out, ref_len);
		if (!stopped) /* the holdback is bounded */
			ck_assert_msg(fed - n_out <= (max_len ? max_len - 1 : 0),
				      "text \"%s\": %zu bytes held", text, fed - n_out);
	}
	size_t emit;
	/* after a stop, nothing more: neither pushes nor finish */
	ck_assert_int_eq(ms_stopper_push(&st, "zz", 2, &emit, &stopped), 0);
	if (ref >= 0) {
		ck_assert(stopped);
		ck_assert_uint_eq(emit, 0);
	} else {
		memcpy(out + n_out, ms_stopper_text(&st), emit);
		n_out += emit;
		ck_assert(!stopped); /* no stop string has a 'z' */
	}
	ms_stopper_finish(&st, &emit);
	if (ref >= 0) {
		ck_assert_uint_eq(emit, 0);
		ck_assert_str_eq(ms_stopper_matched(&st), stops[ref]);
	} else {
		ck_assert_ptr_null(ms_stopper_matched(&st));
		memcpy(out + n_out, ms_stopper_text(&st), emit);
		n_out += emit;
	}
	out[n_out] = 0;
	*matched = st.matched;
	ms_stopper_free(&st);
	return out;
}

/* Every way of cutting text (up to 2^(len-1)), each against the reference
 * and the expected output. */
static void stop_case(const char *text, const char *const *stops, int n, bool include,
		      const char *want, int want_matched)
{
	size_t len = strlen(text), ref_len;
	int ref = stop_reference(text, stops, n, include, &ref_len);
	ck_assert_int_eq(ref, want_matched);
	ck_assert_uint_eq(ref_len, strlen(want));
	uint64_t n_masks = len > 1 ? 1ull << (len - 1 < 14 ? len - 1 : 14) : 1;
	for (uint64_t mask = 0; mask < n_masks; mask++) {
		int matched;
		char *out = stop_run(text, stops, n, include, mask, &matched);
		if (ref < 0) /* "zz" was appended after the text */
			ck_assert_msg(strlen(out) == len + 2 && !memcmp(out, text, len) &&
				      !strcmp(out + len, "zz"), "\"%s\" -> \"%s\"", text, out);
		else
			ck_assert_msg(!strcmp(out, want), "\"%s\" cut 0x%llx -> \"%s\", want \"%s\"",
				      text, (unsigned long long)mask, out, want);
		ck_assert_int_eq(matched, want_matched);
		free(out);
	}
}

START_TEST(stop_strings_splits)
{
	const char *ab_abc[2] = {"ab", "abc"}, *abc_ab[2] = {"abc", "ab"};
	stop_case("xxabcyy", ab_abc, 2, false, "xx", 0);
	stop_case("xxabcyy", abc_ab, 2, false, "xx", 1); /* "ab" completes first */
	stop_case("xxacabyy", ab_abc, 2, false, "xxac", 0);
	const char *aab[1] = {"aab"};
	stop_case("aaab", aab, 1, false, "a", 0);
	stop_case("aaaab", aab, 1, false, "aa", 0);
	stop_case("aabaab", aab, 1, false, "", 0);
	stop_case("aaaxaa", aab, 1, false, "aaaxaa", -1); /* held "aa" released at finish */
	const char *bc_abcd[2] = {"abcd", "bc"};
	stop_case("zabcd", bc_abcd, 2, false, "za", 1);
	const char *ab_b[2] = {"b", "ab"}; /* both end at byte 2: the earlier start */
	stop_case("xab", ab_b, 2, false, "x", 1);
	const char *same[2] = {"ab", "ab"};
	stop_case("xab", same, 2, false, "x", 0);
	const char *tag[1] = {"</s>"};
	stop_case("a</b><</s>x", tag, 1, false, "a</b><", 0);
	stop_case("a</b></", tag, 1, false, "a</b></", -1);
	const char *utf[2] = {"\xc3\xa9!", "\xe2\x82\xac\xe2\x82\xac"}; /* "é!", "€€" */
	stop_case("caf\xc3\xa9\xc3\xa9!x", utf, 2, false, "caf\xc3\xa9", 0);
	stop_case("1\xe2\x82\xac 2\xe2\x82\xac\xe2\x82\xac", utf, 2, false, "1\xe2\x82\xac 2", 1);
	const char *inc[2] = {"ab", "xyz"};
	stop_case("12abab", inc, 2, true, "12ab", 0);
	stop_case("1xyxyz9", inc, 2, true, "1xyxyz", 1);
	stop_case("abc", inc, 0, false, "abc", -1); /* no stop strings */
	stop_case("", aab, 1, false, "", -1);
}
END_TEST

START_TEST(stop_strings_random)
{
	struct ms_rng g;
	ms_rng_seed(&g, 7);
	for (int it = 0; it < 3000; it++) {
		char text[17], stop_buf[3][5];
		const char *stops[3];
		int n = 1 + (int)(ms_rng_next_u64(&g) % 3);
		size_t len = ms_rng_next_u64(&g) % 17;
		for (size_t i = 0; i < len; i++)
			text[i] = (char)('a' + ms_rng_next_u64(&g) % 3);
		text[len] = 0;
		for (int j = 0; j < n; j++) {
			size_t l = 1 + ms_rng_next_u64(&g) % 4;
			for (size_t i = 0; i < l; i++)
				stop_buf[j][i] = (char)('a' + ms_rng_next_u64(&g) % 3);
			stop_buf[j][l] = 0;
			stops[j] = stop_buf[j];
		}
		bool include = ms_rng_next_u64(&g) % 4 == 0;
		size_t ref_len;
		int ref = stop_reference(text, stops, n, include, &ref_len);
		for (int k = 0; k < 4; k++) {
			/* byte by byte, whole, and two random cuttings */
			uint64_t mask = k == 0 ? ~0ull : k == 1 ? 0 : ms_rng_next_u64(&g);
			int matched;
			char *out = stop_run(text, stops, n, include, mask, &matched);
			ck_assert_int_eq(matched, ref);
			ck_assert_msg(!memcmp(out, text, ref_len) && strlen(out) == ref_len +
				      (ref < 0 ? 2 : 0), "\"%s\" -> \"%s\"", text, out);
			free(out);
		}
	}
}
END_TEST

START_TEST(stop_strings_refusals)
{
	struct ms_stopper st;
	struct ms_err err = {0};
	const char *bad[3] = {"ok", "", "x"};
	ck_assert_int_eq(ms_stopper_init(&st, bad, 3, false, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "stop[1]"), "%s", err.msg);
	ms_stopper_free(&st);
	ms_stopper_free(NULL);
	/* a long delta: only the possible start of a stop string is held */
	const char *s[1] = {"STOP"};
	ck_assert_int_eq(ms_stopper_init(&st, s, 1, false, &err), 0);
	size_t emit;
	bool stopped;
	ck_assert_int_eq(ms_stopper_push(&st, "hello world ST", 14, &emit, &stopped), 0);
	ck_assert_uint_eq(emit, 12);
	ck_assert(!memcmp(ms_stopper_text(&st), "hello world ", 12));
	ck_assert_int_eq(ms_stopper_push(&st, "OX", 2, &emit, &stopped), 0);
	ck_assert(!stopped);
	ck_assert_uint_eq(emit, 4);
	ck_assert(!memcmp(ms_stopper_text(&st), "STOX", 4));
	ck_assert_int_eq(ms_stopper_push(&st, "S", 1, &emit, &stopped), 0);
	ck_assert_uint_eq(emit, 0);
	ms_stopper_finish(&st, &emit);
	ck_assert_uint_eq(emit, 1);
	ck_assert(ms_stopper_text(&st)[0] == 'S');
	ms_stopper_free(&st);
}
END_TEST

/* ---- speed -------------------------------------------------------------- */

START_TEST(speed_201088)
{
	enum { V = 201088, N = 30 };
	float *logits = malloc(V * sizeof(float)), *work = malloc(V * sizeof(float));
	struct ms_rng g;
	ms_rng_seed(&g, 5);
	for (int i = 0; i < V; i++) { /* a peaked, long-tailed distribution */
		double u = ms_rng_next_double(&g) + 1e-12;
		logits[i] = (float)(-4.0 * log(u)) - 10.0f;
	}
	struct {
		const char *name;
		float t, top_p;
		int top_k, n_logprobs;
		float pres;
	} cfg[] = {
		{"top_p 0.9", 1.0f, 0.9f, 0, -1, 0},
		{"top_p 0.9 + logprobs 5 + penalties", 0.8f, 0.9f, 0, 5, 0.5f},
		{"top_k 50", 1.0f, 1.0f, 50, -1, 0},
		{"plain", 1.0f, 1.0f, 0, -1, 0},
		{"greedy", 0.0f, 1.0f, 0, -1, 0},
	};
	for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
		struct ms_sampling p;
		struct ms_sampler s;
		struct ms_token_logprobs lp;
		ms_sampling_defaults(&p);
		p.temperature = cfg[c].t;
		p.top_p = cfg[c].top_p;
		p.top_k = cfg[c].top_k;
		p.n_logprobs = cfg[c].n_logprobs;
		p.presence_penalty = cfg[c].pres;
		sampler_ok(&s, &p, V, NULL, 0);
		double t0 = ms_now_s();
		for (int i = 0; i < N; i++) {
			int32_t t = ms_sampler_sample(&s, logits, work, &lp);
			ck_assert(t >= 0 && t < V);
			ck_assert_int_eq(ms_sampler_accept(&s, t), 0);
		}
		double ms = (ms_now_s() - t0) / N * 1e3;
		printf("sample over %d tokens, %s: %.3f ms\n", V, cfg[c].name, ms);
		ck_assert_msg(ms < 500.0, "%s: %.1f ms per token", cfg[c].name, ms); /* gross only */
		ms_sampler_free(&s);
	}
	free(logits);
	free(work);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sampler");
	TCase *tc = tcase_create("parameters");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, check_messages);
	tcase_add_test(tc, rng_basics);
	suite_add_tcase(s, tc);
	tc = tcase_create("support");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, greedy_argmax);
	tcase_add_test(tc, support_top_k);
	tcase_add_test(tc, support_top_p);
	tcase_add_test(tc, support_min_p);
	tcase_add_test(tc, support_large_with_ties);
	suite_add_tcase(s, tc);
	tc = tcase_create("distribution");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, chi_square_fit);
	tcase_add_test(tc, seed_reproducible);
	suite_add_tcase(s, tc);
	tc = tcase_create("penalties");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, penalties_flip_argmax);
	tcase_add_test(tc, penalties_exact_logits);
	tcase_add_test(tc, logit_bias_extremes);
	tcase_add_test(tc, logprobs_raw);
	suite_add_tcase(s, tc);
	tc = tcase_create("stop");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, stop_strings_splits);
	tcase_add_test(tc, stop_strings_random);
	tcase_add_test(tc, stop_strings_refusals);
	suite_add_tcase(s, tc);
	tc = tcase_create("speed");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, speed_201088);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
