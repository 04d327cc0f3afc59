/*
 * spec.c: how many tokens each request drafts; see spec.h.
 */
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Before a size is measured, a pass of n tokens is taken to cost
 * 1 + PRIOR_SLOPE * (n - 1) passes of one. On the bench checkpoint (2
 * threads) one sequence's pass of n tokens costs 2.0x a decode step for
 * 4 tokens, 2.7x for 8, 3.8x for 16, 5.9x for 32 (a mixture of experts'
 * union of experts grows with n), and in a batch of 8 an extra token far
 * less: the prior is the optimistic end of that, so that a size not yet
 * seen is tried once, measured, and then costed as it is. */
#define PRIOR_SLOPE 0.1
#define PRIOR_WEIGHT 2.0   /* positions the engine-wide rate counts for */
#define PRIOR_RATE 0.7     /* the engine-wide rate before any draft, and where it drifts back */
#define FORGET 0.95        /* a request's acceptance: recent steps count more */
#define DRIFT_FORGET 0.99  /* the same, a step nothing of it ran */
#define COST_EMA 0.2       /* weight of a new measurement of a pass's time */
#define WARMUP_STEPS 4     /* an engine's first steps, not measured */
/* A drafted token worth less is not run: a step's time is noisy, and an
 * estimate that a token costs almost nothing in a large batch would
 * otherwise run drafts that are nearly always thrown away. */
#define MIN_VALUE 0.25f

static double prior(int64_t n)
{
	return 1.0 + PRIOR_SLOPE * (double)(n - 1);
}

int ms_spec_init(struct ms_spec *s, const struct ms_spec_config *cfg, int64_t n_max, int max_reqs,
		 struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	if (s->cfg.max_tokens < 1 || s->cfg.max_tokens > MS_SPEC_MAX_TOKENS)
		return ms_err_set(err, -EINVAL, "the draft length at most (--spec-max-tokens) is %d, "
				  "outside [1, %d]", s->cfg.max_tokens, MS_SPEC_MAX_TOKENS);
	s->n_max = n_max;
	s->rate = PRIOR_RATE;
	s->max_reqs = max_reqs;
	s->cost = calloc((size_t)(4 * (n_max + 1)), sizeof(double));
	s->taken = calloc((size_t)(max_reqs > 0 ? max_reqs : 1), sizeof(int));
	if (!s->cost || !s->taken) {
		ms_spec_free(s);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	s->est = s->cost + n_max + 1;
	s->cost_all = s->est + n_max + 1;
	s->est_all = s->cost_all + n_max + 1;
	int rc = s->cfg.off ? 0 : ms_ngram_cache_init(&s->cache, s->cfg.cache_bytes, err);
	if (rc) {
		ms_spec_free(s);
		return rc;
	}
	s->stats.cache_bytes = s->cache.bytes;
	s->dirty = true;
	return 0;
}

void ms_spec_free(struct ms_spec *s)
{
	ms_ngram_cache_free(&s->cache);
	free(s->cost);
	free(s->taken);
	s->cost = s->est = s->cost_all = s->est_all = NULL;
	s->taken = NULL;
}

int ms_spec_req_init(struct ms_spec_req *r, const struct ms_spec *s)
{
	memset(r, 0, sizeof(*r));
	ms_ngram_init(&r->own);
	if (s->cfg.off)
		return 0;
	r->draft = malloc((size_t)s->cfg.max_tokens * sizeof(int32_t));
	r->value = malloc((size_t)s->cfg.max_tokens * sizeof(float));
	return r->draft && r->value ? 0 : -ENOMEM;
}

void ms_spec_req_free(struct ms_spec *s, struct ms_spec_req *r)
{
	s->stats.index_bytes -= ms_ngram_bytes(&r->own);
	ms_ngram_free(&r->own);
	free(r->draft);
	free(r->value);
	memset(r, 0, sizeof(*r));
}

void ms_spec_propose(struct ms_spec *s, struct ms_spec_req *r, uint64_t id, const int32_t *t,
		     int64_t n, int max)
{
	r->n_prop = r->n_draft = 0;
	max = max < s->cfg.max_tokens ? max : s->cfg.max_tokens;
	if (s->cfg.off || max <= 0)
		return;
	int k;
	if (s->cfg.drafter) {
		k = s->cfg.drafter->draft(s->cfg.drafter->ctx, id, t, n, r->draft, max);
		k = k < 0 ? 0 : k > max ? max : k;
		for (int j = 0; j < k; j++)
			r->value[j] = 1.0f;
	} else {
		size_t before = ms_ngram_bytes(&r->own);
		(void)ms_ngram_extend(&r->own, t, n); /* out of memory: drafts from what it has */
		s->stats.index_bytes += ms_ngram_bytes(&r->own) - before;
		k = ms_ngram_draft(&r->own, &s->cache, t, n, r->draft, r->value, max);
	}
	double a = (r->acc + PRIOR_WEIGHT * s->rate) / (r->tried + PRIOR_WEIGHT), aj = a;
	for (int j = 0; j < k; j++, aj *= a)
		r->value[j] = (float)(r->value[j] * aj);
	r->n_prop = k;
}

/* out[n] for every n in [1, nm] from the sizes measured in cost (0: not
 * measured): linear between them; outside them base's shape (its ratio
 * below the first, its growth above the last); never less than a
 * smaller size. base NULL: the prior. */
static void fill(const double *cost, const double *base, int64_t nm, double *out)
{
	int64_t lo = -1;
#define BASE(k) (base ? base[k] : prior(k))
	for (int64_t n = 1; n <= nm; n++) {
		if (!cost[n])
			continue;
		for (int64_t m = lo < 0 ? 1 : lo + 1; m < n; m++)
			out[m] = lo < 0 ? cost[n] * BASE(m) / BASE(n)
					: cost[lo] + (cost[n] - cost[lo]) * (double)(m - lo) / (double)(n - lo);
		out[n] = cost[n];
		lo = n;
	}
	for (int64_t n = lo < 0 ? 1 : lo + 1; n <= nm; n++)
		out[n] = lo < 0 ? BASE(n) : base ? cost[lo] + base[n] - base[lo]
					       : cost[lo] * prior(n) / prior(lo);
#undef BASE
	for (int64_t n = 2; n <= nm; n++)
		out[n] = out[n] > out[n - 1] ? out[n] : out[n - 1];
}

/* est from the decode steps (what a drafted token really costs: a row to
 * draw), above the largest size they have reached growing as all steps
 * do, prompt chunks included. A prompt token costs less than a drafted
 * one, so that growth is optimistic: drafts of the next size up are tried,
 * measured, and kept only if they pay. */
static void estimate(struct ms_spec *s)
{
	fill(s->cost_all, NULL, s->n_max, s->est_all);
	fill(s->cost, s->est_all, s->n_max, s->est);
	s->dirty = false;
}

double ms_spec_cost(const struct ms_spec *s, int64_t n)
{
	if (s->dirty)
		estimate((struct ms_spec *)s);
	n = n < 1 ? 1 : n > s->n_max ? s->n_max : n;
	return s->est[n];
}

static void ema(double *c, double seconds)
{
	*c = *c ? (1 - COST_EMA) * *c + COST_EMA * seconds : seconds;
}

void ms_spec_record(struct ms_spec *s, int64_t n, bool prompt, double seconds)
{
	/* an engine's first steps touch its KV pages and scratch for the
	 * first time: far slower than any later step of their size */
	if (s->warmup < WARMUP_STEPS) {
		s->warmup++;
		return;
	}
	if (n < 1 || n > s->n_max || !(seconds > 0))
		return;
	ema(&s->cost_all[n], seconds);
	if (!prompt)
		ema(&s->cost[n], seconds);
	s->dirty = true;
}

/* The request whose next proposed token is worth most, or -1. */
static int next_best(struct ms_spec_req *const *reqs, int n, const int *taken)
{
	int best = -1;
	for (int i = 0; i < n; i++)
		if (taken[i] < reqs[i]->n_prop && reqs[i]->value[taken[i]] >= MIN_VALUE &&
		    (best < 0 || reqs[i]->value[taken[i]] > reqs[best]->value[taken[best]]))
			best = i;
	return best;
}

void ms_spec_choose(struct ms_spec *s, struct ms_spec_req *const *reqs, int n, int64_t n0,
		    double base, int64_t budget)
{
	int *taken = s->taken;
	n = n < s->max_reqs ? n : s->max_reqs;
	if (s->cfg.drafter && s->cfg.drafter->run_all) {
		for (int i = 0; i < n; i++) {
			int64_t k = reqs[i]->n_prop < budget ? reqs[i]->n_prop : budget;
			k = k < s->n_max - n0 ? k : s->n_max - n0;
			reqs[i]->n_draft = (int)(k > 0 ? k : 0);
			budget -= reqs[i]->n_draft, n0 += reqs[i]->n_draft;
		}
		return;
	}
	memset(taken, 0, (size_t)n * sizeof(*taken));
	double worth = base, best = base / ms_spec_cost(s, n0);
	int64_t m = 0, best_m = 0;
	for (int i; m < budget && n0 + m < s->n_max && (i = next_best(reqs, n, taken)) >= 0;) {
		worth += reqs[i]->value[taken[i]++];
		m++;
		double rate = worth / ms_spec_cost(s, n0 + m);
		if (rate > best) {
			best = rate;
			best_m = m;
		}
	}
	/* the engine-wide rate changes only where drafts run: with none, it
	 * drifts back to the prior, so that a bad phase does not end
	 * speculation for good */
	if (!best_m)
		s->rate += (1 - DRIFT_FORGET) * (PRIOR_RATE - s->rate);
	memset(taken, 0, (size_t)n * sizeof(*taken));
	for (int64_t k = 0; k < best_m; k++)
		taken[next_best(reqs, n, taken)]++;
	for (int i = 0; i < n; i++) {
		reqs[i]->n_draft = taken[i];
		/* a request whose drafts are declined forgets why, slowly: its
		 * acceptance drifts back to the engine's, so it tries again
		 * (every few dozen steps while they keep failing) */
		if (!taken[i])
			reqs[i]->acc *= DRIFT_FORGET, reqs[i]->tried *= DRIFT_FORGET;
	}
}

void ms_spec_verified(struct ms_spec *s, struct ms_spec_req *r, int kept, int tried)
{
	r->acc = FORGET * r->acc + kept;
	r->tried = FORGET * r->tried + tried;
	if (tried > 0)
		s->rate = 0.9 * s->rate + 0.1 * (double)kept / (double)tried;
	s->stats.drafts++;
	s->stats.draft_tokens += (uint64_t)r->n_draft;
	s->stats.accepted += (uint64_t)kept;
	for (int j = 0; j < kept && j < MS_SPEC_MAX_TOKENS; j++)
		s->stats.accepted_at[j]++;
}

void ms_spec_finished(struct ms_spec *s, const int32_t *t, int64_t n_prompt, int64_t n)
{
	if (s->cfg.off || !s->cache.cap || n <= n_prompt)
		return;
	int64_t from = n_prompt > MS_NGRAM_TAIL ? n_prompt - MS_NGRAM_TAIL : 0;
	ms_ngram_cache_add(&s->cache, t + from, n - from);
	s->stats.cache_tokens += (uint64_t)(n - from);
}
