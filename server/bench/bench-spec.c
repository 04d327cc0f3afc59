/*
 * bench-spec.c: `moeserve bench --speculative`, decode with speculation on
 * against the same requests with it off, one engine setting apart, in one
 * run:
 *
 *   repeat      greedy requests run a second time: the shared cache drafts
 *               from the first answers;
 *   accept A    drafts from the known greedy answer with each token replaced
 *               at random with probability 1 - A (A = 1.0, 0.9, 0.7, 0.5):
 *               what verification itself gives, whatever the weights;
 *   no match    fresh random prompts, the n-gram drafter (nothing to match
 *               unless the model repeats itself);
 *   quote       a passage of the model's own text, then its first tokens
 *               again: how much of it the drafter gets back.
 *
 * At batch 1 and 8. Measured: the steps after every request's first token
 * until all are done, the tokens they emitted over their time; forward
 * passes and weight bytes (the CPU's counter) per emitted token; the share
 * of drafted tokens kept and the rate at each draft position.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "bench-int.h"
#include "cpu.h"
#include "engine.h"
#include "ms-clock.h"

#define GEN 128       /* tokens each request makes */
#define PROMPT 32     /* a random prompt's tokens */
#define MAXB 8

struct answer {
	int32_t tok[GEN];
	int64_t n;
	bool done;
};

static void answer_cb(void *ctx, const struct ms_event *ev)
{
	struct answer *a = ctx;
	if (ev->kind == MS_EV_TOKEN && a->n < GEN)
		a->tok[a->n++] = ev->token;
	else if (ev->kind == MS_EV_FINISH)
		a->done = true;
}

/* Drafts from a reference (prompt + answer per request), each token
 * replaced with probability noise. */
struct oracle {
	struct ms_drafter d;
	uint64_t id[MAXB];
	const int32_t *ref[MAXB];
	int64_t n_ref[MAXB];
	double noise;
	uint64_t rng;
	int64_t vocab;
};

static uint32_t next_u32(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 32);
}

static int oracle_draft(void *ctx, uint64_t id, const int32_t *t, int64_t n, int32_t *out, int max)
{
	struct oracle *o = ctx;
	(void)t;
	for (int i = 0; i < MAXB; i++) {
		if (o->id[i] != id)
			continue;
		int k = 0;
		for (; k < max && n + k < o->n_ref[i]; k++) {
			out[k] = o->ref[i][n + k];
			if ((double)next_u32(&o->rng) / 4294967296.0 < o->noise)
				out[k] = (int32_t)((out[k] + 1 + next_u32(&o->rng) % 1000) % o->vocab);
		}
		return k;
	}
	return 0;
}

/* One measured run. */
struct srun {
	double secs, bytes;
	int64_t tokens, steps;
	struct ms_spec_stats spec;    /* its counters' growth */
};

struct bset {                     /* a batch's requests */
	int n;
	int32_t prompt[MAXB][PROMPT + GEN];
	int64_t plen[MAXB];
};

static uint64_t bytes_now(struct ms_backend *b)
{
	struct ms_cpu *c = b->host ? ms_cpu_from(b) : NULL;
	return c ? ms_cpu_bytes_streamed(c) : 0;
}

static void spec_diff(struct ms_spec_stats *d, const struct ms_spec_stats *a,
		      const struct ms_spec_stats *b)
{
	*d = *b;
	d->drafts -= a->drafts, d->draft_tokens -= a->draft_tokens, d->accepted -= a->accepted;
	for (int j = 0; j < MS_SPEC_MAX_TOKENS; j++)
		d->accepted_at[j] -= a->accepted_at[j];
}

/* One engine's run of a set, stepped by the caller: measured from the
 * step after every request has its first token, over its own steps only
 * (so two runs stepped in turn see the same bandwidth). */
struct runner {
	struct ms_engine *e;
	struct ms_backend *b;
	const struct bset *s;
	struct answer ans[MAXB];
	bool measure, measuring, done;
	struct ms_engine_stats st0;
	int64_t tok0;
	struct srun r;
};

static int64_t runner_tokens(const struct runner *rn)
{
	int64_t t = 0;
	for (int i = 0; i < rn->s->n; i++)
		t += rn->ans[i].n;
	return t;
}

/* Submit the set's requests (the oracle told their ids when given). */
static int runner_start(struct runner *rn, struct oracle *o, struct ms_err *err)
{
	struct ms_request_params p = {0};
	ms_sampling_defaults(&p.sampling);
	p.sampling.temperature = 0;
	p.sampling.n_logprobs = -1;
	p.prompt_logprobs = -1;
	p.max_tokens = GEN;
	memset(rn->ans, 0, sizeof(rn->ans));
	memset(&rn->r, 0, sizeof(rn->r));
	rn->measuring = rn->done = false;
	for (int i = 0; i < rn->s->n; i++) {
		uint64_t id;
		int rc = ms_engine_submit(rn->e, rn->s->prompt[i], rn->s->plen[i], &p, answer_cb,
					  &rn->ans[i], &id, err);
		if (rc)
			return rc;
		if (o)
			o->id[i] = id;
	}
	return 0;
}

static int runner_step(struct runner *rn, struct ms_err *err)
{
	bool started = true, done = true;
	for (int i = 0; i < rn->s->n; i++)
		started &= rn->ans[i].n > 0, done &= rn->ans[i].done;
	if ((rn->done = done)) {
		struct ms_engine_stats st1;
		ms_engine_get_stats(rn->e, &st1);
		rn->r.tokens = runner_tokens(rn) - rn->tok0;
		rn->r.steps = (int64_t)(st1.steps - rn->st0.steps);
		spec_diff(&rn->r.spec, &rn->st0.spec, &st1.spec);
		return 0;
	}
	if (started && rn->measure && !rn->measuring) {
		rn->measuring = true;
		ms_engine_get_stats(rn->e, &rn->st0);
		rn->tok0 = runner_tokens(rn);
	}
	double t0 = ms_now_s();
	uint64_t b0 = bytes_now(rn->b);
	int64_t rc = ms_engine_step(rn->e, err);
	if (rn->measuring) {
		rn->r.secs += ms_now_s() - t0;
		rn->r.bytes += (double)(bytes_now(rn->b) - b0);
	}
	return rc < 0 ? (int)rc : 0;
}

/* Step runners [0, n) in turn until all are done. */
static int run_turns(struct runner *rn, int n, struct ms_err *err)
{
	for (bool left = true; left;) {
		left = false;
		for (int i = 0; i < n; i++) {
			if (rn[i].done)
				continue;
			int rc = runner_step(&rn[i], err);
			if (rc)
				return rc;
			left |= !rn[i].done;
		}
	}
	return 0;
}

/* One unmeasured run of the set on e (answers into ans, when given). */
static int run_once(struct runner *rn, struct answer *ans, struct ms_err *err)
{
	rn->measure = false;
	int rc = runner_start(rn, NULL, err);
	if (!rc)
		rc = run_turns(rn, 1, err);
	if (!rc && ans)
		memcpy(ans, rn->ans, sizeof(rn->ans));
	return rc;
}

static int new_engine(struct ms_model *m, bool on, const struct ms_drafter *d,
		      struct ms_engine **e, struct ms_err *err)
{
	struct ms_engine_config cfg = {.max_running = MAXB, .no_prefix_cache = true,
				       .max_context = 2 * (PROMPT + GEN) + 64,
				       .kv_tokens = (2 * (PROMPT + GEN) + 64) * (MAXB + 1),
				       .spec_off = !on, .drafter = d};
	return ms_engine_init(e, &m->lm, NULL, &cfg, err);
}

enum scen { REPEAT, ACC10, ACC09, ACC07, ACC05, NOMATCH, QUOTE, N_SCEN };
static const char *const scen_name[N_SCEN] = {"repeat", "accept_1.0", "accept_0.9",
					      "accept_0.7", "accept_0.5", "no_match", "quote"};
static const double scen_acc[N_SCEN] = {0, 1.0, 0.9, 0.7, 0.5, 0, 0};

struct result {
	struct srun off, on;
};

static void random_prompts(struct bset *s, int n, int64_t vocab, uint64_t seed)
{
	s->n = n;
	for (int i = 0; i < n; i++) {
		s->plen[i] = PROMPT;
		uint64_t r = seed + 977 * (uint64_t)i;
		for (int k = 0; k < PROMPT; k++)
			s->prompt[i][k] = (int32_t)(next_u32(&r) % (uint32_t)vocab);
	}
}

static double tps(const struct srun *r)
{
	return r->secs > 0 ? (double)r->tokens / r->secs : 0;
}

/* The greedy answers of the set: the quote's passage, the oracle's
 * reference (after each prompt in s). */
static int greedy_answers(struct ms_model *m, struct ms_backend *b, struct bset *s, bool quote,
			  struct ms_err *err)
{
	static struct runner rn;
	static struct answer ans[MAXB];
	memset(&rn, 0, sizeof(rn));
	rn.b = b, rn.s = s;
	int rc = new_engine(m, false, NULL, &rn.e, err);
	if (rc)
		return rc;
	rc = run_once(&rn, ans, err);
	ms_engine_free(rn.e);
	for (int i = 0; !rc && i < s->n; i++) {
		memcpy(s->prompt[i] + PROMPT, ans[i].tok, (size_t)ans[i].n * sizeof(int32_t));
		if (quote) { /* the passage, then its first 8 tokens again */
			memmove(s->prompt[i], s->prompt[i] + PROMPT, (size_t)GEN * sizeof(int32_t));
			memcpy(s->prompt[i] + GEN, s->prompt[i], 8 * sizeof(int32_t));
			s->plen[i] = GEN + 8;
		}
	}
	return rc;
}

/* One scenario at batch n: off and on, each on a fresh engine, stepped in
 * turn (a shared machine's bandwidth drifts within seconds: both runs see
 * the same). */
static int scenario(struct ms_model *m, struct ms_backend *b, enum scen sc, int n,
		    struct result *res, struct ms_err *err)
{
	static struct bset s;
	static struct oracle o;
	static struct runner rn[2];
	random_prompts(&s, n, m->cfg.vocab, sc == NOMATCH ? 0xfeed : 0xbeef);
	bool oracle = sc >= ACC10 && sc <= ACC05;
	int rc = 0;
	if (sc == QUOTE || oracle)
		rc = greedy_answers(m, b, &s, sc == QUOTE, err);
	memset(&o, 0, sizeof(o));
	o.d = (struct ms_drafter){oracle_draft, &o, false};
	o.noise = 1.0 - scen_acc[sc];
	o.rng = 12345;
	o.vocab = m->cfg.vocab;
	for (int i = 0; i < n; i++)
		o.ref[i] = s.prompt[i], o.n_ref[i] = PROMPT + GEN;
	memset(rn, 0, sizeof(rn));
	for (int k = 0; !rc && k < 2; k++) {
		rn[k].b = b, rn[k].s = &s;
		rc = new_engine(m, k == 1, oracle ? &o.d : NULL, &rn[k].e, err);
		if (!rc && sc == REPEAT) /* the first answers, unmeasured */
			rc = run_once(&rn[k], NULL, err);
		rn[k].measure = true;
		if (!rc)
			rc = runner_start(&rn[k], k == 1 && oracle ? &o : NULL, err);
	}
	if (!rc)
		rc = run_turns(rn, 2, err);
	res->off = rn[0].r, res->on = rn[1].r;
	for (int k = 0; k < 2; k++)
		if (rn[k].e)
			ms_engine_free(rn[k].e);
	return rc;
}

static double per_tok(double x, const struct srun *r)
{
	return r->tokens ? x / (double)r->tokens : 0;
}

static double kept(const struct srun *r)
{
	return r->spec.draft_tokens ? (double)r->spec.accepted / (double)r->spec.draft_tokens : 0;
}

static void print_row(enum scen sc, int n, const struct result *r)
{
	printf("%-11s %5d %9.1f %9.1f %6.2fx %8.3f %8.3f %9.1f %9.1f %6.3f  ", scen_name[sc], n,
	       tps(&r->off), tps(&r->on), tps(&r->off) > 0 ? tps(&r->on) / tps(&r->off) : 0,
	       per_tok((double)r->off.steps, &r->off) * n, per_tok((double)r->on.steps, &r->on) * n,
	       per_tok(r->off.bytes, &r->off) / 1e6, per_tok(r->on.bytes, &r->on) / 1e6,
	       kept(&r->on));
	for (int j = 0; j < 8; j++)
		printf("%s%.2f", j ? " " : "",
		       r->on.spec.drafts ? (double)r->on.spec.accepted_at[j] / (double)r->on.spec.drafts : 0);
	printf("\n");
}

static void json_row(struct ms_strbuf *j, enum scen sc, int n, const struct result *r)
{
	char k[96];
#define KEY(what) (snprintf(k, sizeof(k), "spec_%s_batch%d_%s", scen_name[sc], n, what), k)
	jnum(j, KEY("tokens_per_s_off"), tps(&r->off), 3);
	jnum(j, KEY("tokens_per_s_on"), tps(&r->on), 3);
	jnum(j, KEY("ratio"), tps(&r->off) > 0 ? tps(&r->on) / tps(&r->off) : 0, 4);
	jnum(j, KEY("passes_per_token_on"), per_tok((double)r->on.steps, &r->on) * n, 4);
	jnum(j, KEY("weight_bytes_per_token_off"), per_tok(r->off.bytes, &r->off), 0);
	jnum(j, KEY("weight_bytes_per_token_on"), per_tok(r->on.bytes, &r->on), 0);
	jnum(j, KEY("acceptance"), kept(&r->on), 4);
#undef KEY
}

/* The targets: on/off ratios at batch 1 (no match at 8 too). */
static const struct {
	enum scen sc;
	int bi;
	double min;
} targets[] = {
	{REPEAT, 0, 3.0}, {ACC10, 0, 3.0}, {ACC09, 0, 2.0}, {NOMATCH, 0, 0.97}, {NOMATCH, 1, 0.97},
};

static void targets_out(struct ms_strbuf *j, struct result res[N_SCEN][2], bool print)
{
	const int batches[2] = {1, MAXB};
	for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
		const struct result *r = &res[targets[i].sc][targets[i].bi];
		double x = tps(&r->off) > 0 ? tps(&r->on) / tps(&r->off) : 0;
		bool ok = x >= targets[i].min;
		char k[96];
		snprintf(k, sizeof(k), "pass_spec_%s_batch%d", scen_name[targets[i].sc],
			 batches[targets[i].bi]);
		if (j)
			jbool(j, k, ok);
		if (print)
			printf("target: %s at batch %d: %.2fx on/off (>= %.2fx): %s\n",
			       scen_name[targets[i].sc], batches[targets[i].bi], x, targets[i].min,
			       ok ? "met" : "NOT met");
	}
}

int bench_speculative(struct ms_model *m, struct ms_backend *b, const struct ms_bench_opts *o)
{
	static struct result res[N_SCEN][2];
	const int batches[2] = {1, MAXB};
	struct ms_err err = {0};
	for (int bi = 0; bi < 2; bi++)
		for (int sc = 0; sc < N_SCEN; sc++)
			if (scenario(m, b, (enum scen)sc, batches[bi], &res[sc][bi], &err)) {
				fprintf(stderr, "moeserve: error: bench --speculative: %s\n", err.msg);
				return EX_SOFTWARE;
			}
	if (!o->json_only) {
		printf("speculative decoding, %d tokens a request (greedy), off against on; passes "
		       "and weight MB per emitted token; kept: drafted tokens kept; then the rate "
		       "of drafts whose j-th token was kept, j = 0..7\n", GEN);
		printf("%-11s %5s %9s %9s %7s %8s %8s %9s %9s %6s  %s\n", "scenario", "batch",
		       "tok/s off", "tok/s on", "ratio", "pass off", "pass on", "MB/t off", "MB/t on",
		       "kept", "kept at position");
		for (int bi = 0; bi < 2; bi++)
			for (int sc = 0; sc < N_SCEN; sc++)
				print_row((enum scen)sc, batches[bi], &res[sc][bi]);
		targets_out(NULL, res, true);
	}
	struct ms_strbuf j = {0};
	ms_strbuf_str(&j, "{");
	for (int bi = 0; bi < 2; bi++)
		for (int sc = 0; sc < N_SCEN; sc++)
			json_row(&j, (enum scen)sc, batches[bi], &res[sc][bi]);
	targets_out(&j, res, false);
	ms_strbuf_str(&j, "}");
	return bench_json_line(&j) ? EX_OK : EX_OSERR;
}
