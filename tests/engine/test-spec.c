/*
 * test-spec.c: speculative decoding. The n-gram drafter against a brute
 * force over the same tokens; the shared cache's bound; and in the engine
 * (the small random model, MS_FIXTURE_RANDOM: 4 layers, 2 sliding with a
 * 32-token window, 16-token pages), output with speculation on equal bit
 * for bit to output with it off: greedy and seeded sampling under every
 * sampler transform and a constraint, alone and among neighbours, across
 * page and window boundaries, with the prefix cache, and when max_tokens,
 * a stop token or a cancellation lands inside a draft.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "backend.h"
#include "engine.h"
#include "model.h"
#include "ngram.h"

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* ---- the drafter against a brute force ---- */

static const int lens_desc[MS_NGRAM_N] = {16, 8, 6, 4, 3, 2};

/* What ms_ngram_draft should give from own alone: at each step the longest
 * indexed length whose last occurrence (next token inside t[0..n)) ends
 * like the sequence does; its confidence = the trailing run of occurrences
 * followed by the last one's token, over all occurrences (times 1/2 for a
 * 2-token match, 3/4 for 3). */
static int brute_draft(const int32_t *t, int64_t n, int32_t *out, float *conf, int max)
{
	int32_t s[4096];
	memcpy(s, t, (size_t)n * sizeof(int32_t));
	float run = 1.0f;
	int j = 0;
	for (; j < max; j++) {
		int64_t end = n + j;
		int32_t tok = -1;
		float p = 0;
		for (int li = 0; li < MS_NGRAM_N && tok < 0; li++) {
			int L = lens_desc[li];
			if (end < L)
				continue;
			int seen = 0, same = 0;
			int32_t last = -1;
			for (int64_t q = L; q < n; q++) {
				if (memcmp(s + q - L, s + end - L, (size_t)L * sizeof(int32_t)))
					continue;
				seen++;
				same = s[q] == last ? same + 1 : 1;
				last = s[q];
			}
			if (seen) {
				tok = last;
				p = (float)same / (float)seen * (L == 2 ? 0.5f : L == 3 ? 0.75f : 1.0f);
			}
		}
		if (tok < 0 || (run *= p) < MS_NGRAM_MIN_CONF)
			break;
		out[j] = s[end] = tok;
		conf[j] = run;
	}
	return j;
}

START_TEST(ngram_matches_brute_force)
{
	uint32_t rs = 7;
	int checked = 0, drafted = 0;
	for (int trial = 0; trial < 60; trial++) {
		int vocab = 2 + trial % 7; /* small vocabularies: many repeats */
		int64_t len = 20 + lcg(&rs) % 300;
		int32_t t[512];
		for (int64_t i = 0; i < len; i++)
			t[i] = (int32_t)(lcg(&rs) % (uint32_t)vocab);
		if (trial % 3 == 0 && len >= 80) /* a copied stretch */
			memcpy(t + len - 40, t + 10, 30 * sizeof(int32_t));
		struct ms_ngram g;
		ms_ngram_init(&g);
		for (int64_t n = 1; n <= len; n += 1 + (int64_t)(lcg(&rs) % 9)) {
			ck_assert_int_eq(ms_ngram_extend(&g, t, n), 0);
			int32_t a[40], b[40];
			float ca[40], cb[40];
			int ka = ms_ngram_draft(&g, NULL, t, n, a, ca, 40);
			int kb = brute_draft(t, n, b, cb, 40);
			ck_assert_msg(ka == kb, "trial %d n %lld: %d tokens, brute force %d", trial,
				      (long long)n, ka, kb);
			for (int j = 0; j < ka; j++) {
				ck_assert_int_eq(a[j], b[j]);
				ck_assert(fabsf(ca[j] - cb[j]) < 1e-6f);
				ck_assert(j == 0 || ca[j] <= ca[j - 1]);
			}
			checked++;
			drafted += ka;
		}
		ms_ngram_free(&g);
	}
	ck_assert(checked > 500 && drafted > 1000);
}
END_TEST

/* The shared cache stays within its bytes, drafts a recent answer whole,
 * forgets what was overwritten, and never drafts a token that did not
 * follow the matched tokens somewhere it still holds. */
START_TEST(ngram_cache_bounded)
{
	struct ms_err err = {0};
	struct ms_ngram_cache c;
	ck_assert_int_ne(ms_ngram_cache_init(&c, 1000, &err), 0); /* too small: refused by name */
	ck_assert(strstr(err.msg, "1000"));
	const uint64_t bytes = 1 << 20;
	ck_assert_int_eq(ms_ngram_cache_init(&c, bytes, &err), 0);
	ck_assert(c.bytes <= bytes && c.bytes > bytes - 300);
	uint32_t rs = 3;
	int32_t answer[200];
	for (int i = 0; i < 200; i++)
		answer[i] = 1000 + (int32_t)(lcg(&rs) % 50000);
	ms_ngram_cache_add(&c, answer, 200);
	/* a request whose text ends like the answer's start drafts the rest */
	int32_t q[30], out[64];
	float conf[64];
	for (int i = 0; i < 10; i++)
		q[i] = (int32_t)(lcg(&rs) % 500);
	memcpy(q + 10, answer, 20 * sizeof(int32_t));
	int k = ms_ngram_draft(NULL, &c, q, 30, out, conf, 64);
	ck_assert_int_eq(k, 64);
	ck_assert(memcmp(out, answer + 20, 64 * sizeof(int32_t)) == 0);
	/* churn: the ring turns over many times */
	for (int r = 0; r < 100; r++) {
		int32_t x[300];
		for (int i = 0; i < 300; i++)
			x[i] = (int32_t)(lcg(&rs) % 64); /* small alphabet: many collisions of n-grams */
		ms_ngram_cache_add(&c, x, 300);
		ck_assert(c.bytes <= bytes);
	}
	k = ms_ngram_draft(NULL, &c, q, 30, out, conf, 64);
	ck_assert_int_eq(k, 0); /* the answer is gone */
	/* every draft's first token followed its matched suffix in the held ring */
	int drafted = 0;
	for (int trial = 0; trial < 300; trial++) {
		int32_t s[20];
		for (int i = 0; i < 20; i++)
			s[i] = (int32_t)(lcg(&rs) % 64);
		k = ms_ngram_draft(NULL, &c, s, 20, out, conf, 8);
		if (!k)
			continue;
		drafted++;
		bool found = false;
		for (int64_t p = c.head - c.ring_cap + 2; p < c.head && !found; p++)
			if (c.ring[p % c.ring_cap] == out[0] &&
			    c.ring[(p - 1) % c.ring_cap] == s[19] && c.ring[(p - 2) % c.ring_cap] == s[18])
				found = true;
		ck_assert_msg(found, "draft %d after (%d %d) is not in the cache", out[0], s[18], s[19]);
	}
	ck_assert_msg(drafted > 100, "%d of 300 drafted", drafted);
	ms_ngram_cache_free(&c);
}
END_TEST

/* ---- the engine ---- */

struct fixture {
	struct ms_backend *be;
	struct ms_model m;
};

static void load(struct fixture *f)
{
	struct ms_err err = {0};
	const char *dir = getenv("MS_FIXTURE_RANDOM");
	ck_assert_msg(dir != NULL, "MS_FIXTURE_RANDOM not set");
	struct ms_backend_opts o = {.backend = getenv("MS_TEST_BACKEND"), .threads = 2};
	ck_assert_msg(ms_backend_open(&o, &f->be, &err) == 0, "%s", err.msg);
	ck_assert_msg(ms_model_load(&f->m, dir, f->be, &err) == 0, "%s", err.msg);
}

static void unload(struct fixture *f)
{
	ms_model_free(&f->m);
	ms_backend_close(f->be);
}

#define MAXT 256

struct seen {
	int32_t tokens[MAXT];
	struct ms_token_logprobs lp[MAXT];
	int n;
	bool finished;
	enum ms_finish why;
	int64_t cached;
};

static void on_event(void *ctx, const struct ms_event *ev)
{
	struct seen *s = ctx;
	if (ev->kind == MS_EV_TOKEN) {
		ck_assert(!s->finished && s->n < MAXT);
		s->tokens[s->n] = ev->token;
		if (ev->lp)
			s->lp[s->n] = *ev->lp;
		s->n++;
	} else if (ev->kind == MS_EV_FINISH) {
		s->finished = true;
		s->why = ev->finish;
		s->cached = ev->cached_tokens;
	}
}

/* Drafts from a known answer: the reference tokens of each request id,
 * each drafted token replaced by another with probability noise. */
#define MAXREQ 32
struct oracle {
	struct ms_drafter d;
	uint64_t id[MAXREQ];
	const int32_t *ref[MAXREQ];  /* prompt then answer */
	int64_t n_ref[MAXREQ];
	double noise;
	uint32_t rs;
	int64_t calls;
};

static int oracle_draft(void *ctx, uint64_t id, const int32_t *t, int64_t n, int32_t *out, int max)
{
	struct oracle *o = ctx;
	o->calls++;
	for (int i = 0; i < MAXREQ; i++) {
		if (o->id[i] != id || !o->ref[i])
			continue;
		ck_assert_msg(n <= o->n_ref[i] && !memcmp(t, o->ref[i], (size_t)n * sizeof(int32_t)),
			      "request %llu's tokens left its reference", (unsigned long long)id);
		int k = 0;
		for (; k < max && n + k < o->n_ref[i]; k++) {
			out[k] = o->ref[i][n + k];
			if ((double)(lcg(&o->rs) % 10000) < o->noise * 10000)
				out[k] = (out[k] + 1 + (int32_t)(lcg(&o->rs) % 7)) % 512;
		}
		return k;
	}
	return 0;
}

static void run_until_idle(struct ms_engine *e)
{
	struct ms_err err = {0};
	for (int guard = 0; guard < 100000; guard++) {
		int64_t rc = ms_engine_step(e, &err);
		ck_assert_msg(rc >= 0, "%s", err.msg);
		ck_assert_msg(ms_engine_check(e, &err) == 0, "%s", err.msg);
		struct ms_engine_stats st;
		ms_engine_get_stats(e, &st);
		if (!st.running && !st.waiting)
			return;
	}
	ck_abort_msg("engine did not go idle");
}

static void random_prompt(int32_t *t, int64_t n, uint32_t seed)
{
	for (int64_t i = 0; i < n; i++)
		t[i] = (int32_t)(lcg(&seed) % 512);
}

/* One request's description. */
struct job {
	int32_t prompt[128];
	int64_t n_prompt;
	struct ms_request_params p;
	struct ms_logit_bias bias[4];
	int32_t ref[128 + MAXT];       /* prompt + the answer with speculation off */
	int64_t n_ref;
	struct seen off, on;
};

static void same_output(const struct seen *a, const struct seen *b, const char *what, int k)
{
	ck_assert_msg(a->finished && b->finished, "%s %d: not finished", what, k);
	ck_assert_msg(a->why == b->why, "%s %d: finish %d vs %d", what, k, a->why, b->why);
	ck_assert_msg(a->n == b->n, "%s %d: %d tokens vs %d", what, k, a->n, b->n);
	for (int i = 0; i < a->n; i++) {
		ck_assert_msg(a->tokens[i] == b->tokens[i], "%s %d: token %d: %d vs %d", what, k, i,
			      a->tokens[i], b->tokens[i]);
		const struct ms_token_logprobs *x = &a->lp[i], *y = &b->lp[i];
		bool same = x->token == y->token && x->n_top == y->n_top &&
			    !memcmp(&x->logprob, &y->logprob, sizeof(float));
		for (int t = 0; same && t < x->n_top; t++)
			same = x->top[t].id == y->top[t].id &&
			       !memcmp(&x->top[t].logprob, &y->top[t].logprob, sizeof(float));
		ck_assert_msg(same, "%s %d: token %d's logprobs differ", what, k, i);
	}
}

/* Run the jobs in one engine (on: speculation with the drafter, else
 * off), results into each job's off or on. */
static void run_jobs(struct fixture *f, struct job *j, int n, bool on, const struct ms_drafter *d,
		     struct ms_engine_stats *st_out, bool prefix_cache)
{
	struct ms_err err = {0};
	struct ms_engine_config cfg = {.spec_off = !on, .drafter = d,
				       .no_prefix_cache = !prefix_cache};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f->m.lm, NULL, &cfg, &err), 0);
	struct oracle *o = d ? d->ctx : NULL;
	for (int i = 0; i < n; i++) {
		struct seen *s = on ? &j[i].on : &j[i].off;
		memset(s, 0, sizeof(*s));
		uint64_t id;
		ck_assert_msg(ms_engine_submit(e, j[i].prompt, j[i].n_prompt, &j[i].p, on_event, s, &id,
					       &err) == 0, "%s", err.msg);
		if (o && i < MAXREQ && j[i].n_ref) {
			o->id[i] = id;
			o->ref[i] = j[i].ref;
			o->n_ref[i] = j[i].n_ref;
		}
	}
	run_until_idle(e);
	if (st_out)
		ms_engine_get_stats(e, st_out);
	ms_engine_free(e);
	for (int i = 0; !on && i < n; i++) {
		memcpy(j[i].ref, j[i].prompt, (size_t)j[i].n_prompt * sizeof(int32_t));
		memcpy(j[i].ref + j[i].n_prompt, j[i].off.tokens, (size_t)j[i].off.n * sizeof(int32_t));
		j[i].n_ref = j[i].n_prompt + j[i].off.n;
	}
}

static void job_init(struct job *j, int64_t n_prompt, uint32_t seed, int64_t max_tokens)
{
	memset(j, 0, sizeof(*j));
	j->n_prompt = n_prompt;
	random_prompt(j->prompt, n_prompt, seed);
	ms_sampling_defaults(&j->p.sampling);
	j->p.sampling.temperature = 0;
	j->p.sampling.n_logprobs = 3;
	j->p.max_tokens = max_tokens;
	j->p.prompt_logprobs = -1;
}

/* Greedy: prompts ending on either side of page boundaries, answers that
 * cross pages and the sliding window, drafts from the answer with
 * mistakes, all in one batch with requests that do not draft. */
START_TEST(greedy_same_on_and_off)
{
	struct fixture f;
	load(&f);
	static struct job j[12];
	const int64_t np[12] = {5, 15, 16, 17, 31, 32, 33, 47, 48, 9, 63, 100};
	for (int i = 0; i < 12; i++)
		job_init(&j[i], np[i], 40 + (uint32_t)i, 40 + 9 * i);
	run_jobs(&f, j, 12, false, NULL, NULL, false);
	for (int pass = 0; pass < 3; pass++) {
		static struct oracle o;
		memset(&o, 0, sizeof(o));
		o.d = (struct ms_drafter){oracle_draft, &o, true};
		o.noise = pass == 0 ? 0.0 : pass == 1 ? 0.15 : 0.5;
		o.rs = 9 + (uint32_t)pass;
		struct ms_engine_stats st;
		/* jobs 9..11 have no reference: neighbours that do not draft */
		for (int i = 9; i < 12; i++)
			j[i].n_ref = 0;
		run_jobs(&f, j, 12, true, &o.d, &st, pass == 2);
		for (int i = 0; i < 12; i++)
			same_output(&j[i].off, &j[i].on, "greedy", i);
		ck_assert(st.spec.drafts > 0 && st.spec.accepted > 0);
		if (pass == 0)
			ck_assert_uint_eq(st.spec.accepted, st.spec.draft_tokens);
		else
			ck_assert(st.spec.accepted < st.spec.draft_tokens);
		uint64_t at = 0;
		for (int k = 0; k < MS_SPEC_MAX_TOKENS; k++)
			at += st.spec.accepted_at[k];
		ck_assert_uint_eq(at, st.spec.accepted);
		ck_assert(st.steps < (pass == 0 ? 200u : 400u));
		for (int i = 9; i < 12; i++) /* restore for the next pass */
			j[i].n_ref = j[i].n_prompt + j[i].off.n;
	}
	/* the n-gram drafter, whatever it drafts */
	run_jobs(&f, j, 12, true, NULL, NULL, true);
	for (int i = 0; i < 12; i++)
		same_output(&j[i].off, &j[i].on, "n-gram", i);
	/* alone, drafting from the answer */
	static struct oracle o1;
	memset(&o1, 0, sizeof(o1));
	o1.d = (struct ms_drafter){oracle_draft, &o1, true};
	run_jobs(&f, &j[4], 1, true, &o1.d, NULL, false);
	same_output(&j[4].off, &j[4].on, "alone", 4);
	unload(&f);
}
END_TEST

/* A mask that bans every third token id, shifting with each token taken. */
struct shift_state {
	int32_t n;
};

static void *shift_init(const void *arg)
{
	(void)arg;
	return calloc(1, sizeof(struct shift_state));
}

static void shift_mask(void *st, float *logits, int64_t vocab)
{
	struct shift_state *s = st;
	for (int64_t v = 0; v < vocab; v++)
		if ((v + s->n) % 3 == 0)
			logits[v] = -INFINITY;
}

static void shift_accept(void *st, int32_t tok)
{
	struct shift_state *s = st;
	ck_assert((tok + s->n) % 3 != 0);
	s->n++;
}

static const struct ms_constraint shift = {shift_init, shift_mask, shift_accept, free, NULL};

/* Seeded sampling: the same tokens with speculation on and off, for many
 * seeds under every transform, and a constraint. */
START_TEST(seeded_same_on_and_off)
{
	struct fixture f;
	load(&f);
	static struct job j[24];
	for (int i = 0; i < 24; i++) {
		job_init(&j[i], 10 + 5 * i, 300 + (uint32_t)i, 48);
		struct ms_sampling *s = &j[i].p.sampling;
		s->has_seed = true;
		s->seed = 1000 + (uint64_t)i;
		s->temperature = 0.4f + 0.1f * (float)(i % 8);
		switch (i % 6) {
		case 0: s->top_p = 0.9f; break;
		case 1: s->top_k = 20; s->min_p = 0.05f; break;
		case 2: s->presence_penalty = 0.8f; s->frequency_penalty = 0.5f; break;
		case 3: s->repetition_penalty = 1.3f; s->top_p = 0.95f; break;
		case 4:
			j[i].bias[0] = (struct ms_logit_bias){7, 4.0f};
			j[i].bias[1] = (struct ms_logit_bias){11, -100.0f};
			j[i].bias[2] = (struct ms_logit_bias){300, 2.5f};
			s->logit_bias = j[i].bias;
			s->n_logit_bias = 3;
			break;
		default: j[i].p.constraint = &shift; s->min_p = 0.02f; break;
		}
	}
	run_jobs(&f, j, 24, false, NULL, NULL, true);
	static struct oracle o;
	memset(&o, 0, sizeof(o));
	o.d = (struct ms_drafter){oracle_draft, &o, true};
	o.noise = 0.2;
	o.rs = 77;
	struct ms_engine_stats st;
	run_jobs(&f, j, 24, true, &o.d, &st, true);
	for (int i = 0; i < 24; i++)
		same_output(&j[i].off, &j[i].on, "seeded", i);
	ck_assert(st.spec.accepted > 200);
	unload(&f);
}
END_TEST

/* max_tokens and a stop token inside an accepted draft end the request
 * where they would without one; a cancellation ends it between steps with
 * a prefix of the answer. */
START_TEST(limits_inside_a_draft)
{
	struct fixture f;
	load(&f);
	static struct job j[3];
	job_init(&j[0], 20, 501, 60);
	run_jobs(&f, j, 1, false, NULL, NULL, false);
	static struct oracle o;
	memset(&o, 0, sizeof(o));
	o.d = (struct ms_drafter){oracle_draft, &o, true};
	/* max_tokens: every length from 1 */
	for (int64_t mt = 1; mt <= 12; mt++) {
		j[1] = j[0];
		j[1].p.max_tokens = mt;
		run_jobs(&f, &j[1], 1, true, &o.d, NULL, false);
		ck_assert_int_eq(j[1].on.n, mt);
		ck_assert_int_eq(j[1].on.why, MS_FINISH_LENGTH);
		ck_assert(!memcmp(j[1].on.tokens, j[0].off.tokens, (size_t)mt * sizeof(int32_t)));
	}
	/* a stop token: the answer's 10th token (its first occurrence) */
	int32_t stop = j[0].off.tokens[9];
	int first = 0;
	while (j[0].off.tokens[first] != stop)
		first++;
	j[1] = j[0];
	j[1].p.stop_ids = &stop;
	j[1].p.n_stop_ids = 1;
	run_jobs(&f, &j[1], 1, true, &o.d, NULL, false);
	ck_assert_int_eq(j[1].on.why, MS_FINISH_STOP);
	ck_assert_int_eq(j[1].on.n, first + 1);
	ck_assert(!memcmp(j[1].on.tokens, j[0].off.tokens, (size_t)(first + 1) * sizeof(int32_t)));
	/* a cancellation after three steps (drafts of 4: not done by then) */
	struct ms_err err = {0};
	struct ms_engine_config cfg = {.drafter = &o.d, .spec_max_tokens = 4};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	uint64_t id;
	memset(&j[2].on, 0, sizeof(j[2].on));
	ck_assert_int_eq(ms_engine_submit(e, j[0].prompt, j[0].n_prompt, &j[0].p, on_event, &j[2].on,
					  &id, &err), 0);
	o.id[0] = id;
	o.ref[0] = j[0].ref;
	o.n_ref[0] = j[0].n_ref;
	for (int s = 0; s < 3; s++)
		ck_assert(ms_engine_step(e, &err) >= 0);
	ck_assert(j[2].on.n > 2); /* drafts ran */
	ms_engine_cancel(e, id);
	run_until_idle(e);
	ck_assert_int_eq(j[2].on.why, MS_FINISH_CANCELLED);
	ck_assert(j[2].on.n < 60);
	ck_assert(!memcmp(j[2].on.tokens, j[0].off.tokens, (size_t)j[2].on.n * sizeof(int32_t)));
	ms_engine_free(e);
	unload(&f);
}
END_TEST

/* Rejected positions never reach the prefix cache: after answers with many
 * rejections, requests whose prompts extend them reuse their pages and
 * give what a fresh engine without a cache gives. */
START_TEST(prefix_cache_sees_only_kept_positions)
{
	struct fixture f;
	load(&f);
	static struct job a[4], b[4];
	for (int i = 0; i < 4; i++)
		job_init(&a[i], 14 + 16 * i, 900 + (uint32_t)i, 70);
	run_jobs(&f, a, 4, false, NULL, NULL, false);
	struct ms_err err = {0};
	static struct oracle o;
	memset(&o, 0, sizeof(o));
	o.d = (struct ms_drafter){oracle_draft, &o, true};
	o.noise = 0.4;
	o.rs = 5;
	struct ms_engine_config cfg = {.drafter = &o.d};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	for (int i = 0; i < 4; i++) {
		uint64_t id;
		memset(&a[i].on, 0, sizeof(a[i].on));
		ck_assert_int_eq(ms_engine_submit(e, a[i].prompt, a[i].n_prompt, &a[i].p, on_event,
						  &a[i].on, &id, &err), 0);
		o.id[i] = id, o.ref[i] = a[i].ref, o.n_ref[i] = a[i].n_ref;
	}
	run_until_idle(e);
	/* b: a's prompt and most of its answer, then new tokens */
	for (int i = 0; i < 4; i++) {
		job_init(&b[i], 0, 0, 20);
		int64_t n = a[i].n_prompt + 60;
		memcpy(b[i].prompt, a[i].ref, (size_t)(n < 128 ? n : 120) * sizeof(int32_t));
		b[i].n_prompt = n < 128 ? n : 120;
		memset(&b[i].on, 0, sizeof(b[i].on));
		ck_assert_int_eq(ms_engine_submit(e, b[i].prompt, b[i].n_prompt, &b[i].p, on_event,
						  &b[i].on, NULL, &err), 0);
	}
	run_until_idle(e);
	ms_engine_free(e);
	run_jobs(&f, b, 4, false, NULL, NULL, false);
	int64_t reused = 0;
	for (int i = 0; i < 4; i++) {
		same_output(&a[i].off, &a[i].on, "first", i);
		same_output(&b[i].off, &b[i].on, "extended", i);
		reused += b[i].on.cached;
	}
	ck_assert(reused >= 4 * 48); /* the pages were reused */
	unload(&f);
}
END_TEST

/* A greedy request run again drafts from the first answer (the shared
 * cache), keeps most of it, and gives the same tokens in fewer passes. */
START_TEST(repeat_drafts_from_the_cache)
{
	struct fixture f;
	load(&f);
	static struct job j[2];
	job_init(&j[0], 30, 4242, 64);
	j[1] = j[0];
	struct ms_err err = {0};
	struct ms_engine_config cfg = {.no_prefix_cache = true, .spec_cache_bytes = 1 << 20};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	struct ms_engine_stats s0, s1, s2;
	ms_engine_get_stats(e, &s0);
	ck_assert(s0.spec.cache_bytes > 0 && s0.spec.cache_bytes <= 1 << 20);
	ck_assert_int_eq(ms_engine_submit(e, j[0].prompt, 30, &j[0].p, on_event, &j[0].on, NULL, &err), 0);
	run_until_idle(e);
	ms_engine_get_stats(e, &s1);
	ck_assert_int_eq(ms_engine_submit(e, j[1].prompt, 30, &j[1].p, on_event, &j[1].on, NULL, &err), 0);
	run_until_idle(e);
	ms_engine_get_stats(e, &s2);
	same_output(&j[0].on, &j[1].on, "repeat", 0);
	uint64_t acc = s2.spec.accepted - s1.spec.accepted;
	ck_assert_msg(acc >= 40, "the repeat kept %llu drafted tokens", (unsigned long long)acc);
	ck_assert(s2.steps - s1.steps < (s1.steps - s0.steps) / 2);
	ck_assert(s2.spec.cache_tokens > s1.spec.cache_tokens);
	ck_assert_uint_eq(s2.spec.cache_bytes, s0.spec.cache_bytes);
	ms_engine_free(e);
	unload(&f);
}
END_TEST

/* Drafts that are always wrong stop being run: a request drafts a few
 * times, learns, and decodes one token a step, with the same output. */
START_TEST(failing_drafts_stop)
{
	struct fixture f;
	load(&f);
	static struct job j[1];
	job_init(&j[0], 24, 77, 120);
	run_jobs(&f, j, 1, false, NULL, NULL, false);
	static struct oracle o;
	memset(&o, 0, sizeof(o));
	o.d = (struct ms_drafter){oracle_draft, &o, false};
	o.noise = 1.0;
	o.rs = 3;
	struct ms_engine_stats st;
	run_jobs(&f, j, 1, true, &o.d, &st, false);
	same_output(&j[0].off, &j[0].on, "failing", 0);
	ck_assert_uint_eq(st.spec.accepted, 0);
	ck_assert(o.calls >= 100); /* it was asked every step */
	/* how often it tries again depends on this machine's costs: rarely */
	ck_assert_msg(st.spec.drafts >= 1 && st.spec.draft_tokens * 6 <= st.steps,
		      "%llu drafts of %llu tokens in %llu steps", (unsigned long long)st.spec.drafts,
		      (unsigned long long)st.spec.draft_tokens, (unsigned long long)st.steps);
	unload(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("spec");
	TCase *d = tcase_create("drafter");
	tcase_add_test(d, ngram_matches_brute_force);
	tcase_add_test(d, ngram_cache_bounded);
	suite_add_tcase(s, d);
	TCase *tc = tcase_create("engine");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, greedy_same_on_and_off);
	tcase_add_test(tc, seeded_same_on_and_off);
	tcase_add_test(tc, limits_inside_a_draft);
	tcase_add_test(tc, prefix_cache_sees_only_kept_positions);
	tcase_add_test(tc, repeat_drafts_from_the_cache);
	tcase_add_test(tc, failing_drafts_stop);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
