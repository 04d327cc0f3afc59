/*
 * bench-common.c: the parts of `moeserve bench` that hold on every backend
 * (bench-int.h): engine runs stepped by hand and timed step by step, the
 * weights' per-step byte model and the roofline share built on it, the
 * FLOP count of a prompt token.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench-int.h"
#include "engine.h"
#include "ms-clock.h"

/* ---- engine runs ---- */

struct counter {
	int64_t tokens;
	bool done;
	double t_first;
};

static void count_cb(void *ctx, const struct ms_event *ev)
{
	struct counter *c = ctx;
	if (ev->kind == MS_EV_TOKEN) {
		if (!c->tokens)
			c->t_first = ms_now_s();
		c->tokens++;
	} else if (ev->kind == MS_EV_FINISH) {
		c->done = true;
	}
}

static void fill(int32_t *t, int64_t n, int64_t vocab, uint32_t seed)
{
	for (int64_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
	}
}


/* The engine runs (bench-int.h). */
int bench_run(struct ms_model *m, int n_seq, int64_t prompt_len, int64_t gen,
	      const struct bench_probe *probe, struct run_stats *st, struct ms_err *err)
{
	return bench_run_with(m, n_seq, prompt_len, gen, NULL, 0, probe, st, err);
}

/* Requests whose events count into cn[]: prompt (len tokens) each, with
 * its own seed, gen tokens at temperature under c. */
static int submit(struct ms_engine *e, int n_seq, const int32_t *const *prompts, int64_t len,
		  int64_t gen, const struct ms_constraint *c, float temperature, struct counter *cn,
		  struct ms_err *err)
{
	struct ms_request_params p = {0};
	ms_sampling_defaults(&p.sampling);
	p.sampling.temperature = temperature;
	p.sampling.has_seed = true;  /* the same draws run after run */
	p.sampling.n_logprobs = -1;
	p.prompt_logprobs = -1;
	p.max_tokens = gen;
	p.constraint = c;
	int rc = 0;
	for (int i = 0; !rc && i < n_seq; i++) {
		p.sampling.seed = 7 + (uint64_t)i;
		rc = ms_engine_submit(e, prompts[i], len, &p, count_cb, &cn[i], NULL, err);
	}
	return rc;
}

/* Step until the n_seq requests of cn[] are done. Measured: the steps where
 * every one was past its prompt and made a token, the first left out as
 * warm-up when others follow. */
static int step_all(struct ms_engine *e, struct counter *cn, int n_seq, int64_t gen,
		    const struct bench_probe *probe, struct run_stats *st, struct ms_err *err)
{
	int64_t decode_steps = 0;
	for (bool all_done = false; !all_done;) {
		bool decoding = true;
		for (int i = 0; i < n_seq; i++)
			decoding &= cn[i].tokens > 0 && !cn[i].done;
		uint64_t b0 = probe && probe->bytes ? probe->bytes(probe->ctx) : 0;
		double s0 = ms_now_s();
		int64_t s = ms_engine_step(e, err);
		double s1 = ms_now_s();
		uint64_t b1 = probe && probe->bytes ? probe->bytes(probe->ctx) : 0;
		if (s < 0)
			return (int)s;
		if (decoding && s == n_seq && (decode_steps++ > 0 || gen < 3)) {
			st->steps++;
			st->tokens += s;
			st->secs += s1 - s0;
			st->counted += (double)(b1 - b0);
			if (probe && probe->after_step)
				probe->after_step(probe->ctx, st);
		}
		all_done = true;
		for (int i = 0; i < n_seq; i++)
			all_done &= cn[i].done;
	}
	return 0;
}

int bench_run_with(struct ms_model *m, int n_seq, int64_t prompt_len, int64_t gen,
		   const struct ms_constraint *c, float temperature, const struct bench_probe *probe,
		   struct run_stats *st, struct ms_err *err)
{
	memset(st, 0, sizeof(*st));
	/* every prompt in one step (the largest CPU run, 16 x 16, fits 256):
	 * prompts split over steps would put the sequences' decode steps out
	 * of phase, and a short run would then have no step where all decode */
	int64_t all = (int64_t)n_seq * prompt_len;
	/* plain decode: one token a request a step (bench --speculative
	 * measures drafts) */
	struct ms_engine_config cfg = {.max_running = n_seq, .no_prefix_cache = true,
				       .spec_off = true, .max_context = prompt_len + gen + 1,
				       .max_batch_tokens = all > 256 ? all : 256};
	cfg.kv_tokens = (prompt_len + gen + 16) * n_seq;
	struct ms_engine *e;
	int rc = ms_engine_init(&e, &m->lm, NULL, &cfg, err);
	if (rc)
		return rc;
	struct counter *cn = calloc((size_t)n_seq, sizeof(*cn));
	int32_t *mem = malloc((size_t)all * sizeof(int32_t));
	const int32_t **prompts = malloc((size_t)n_seq * sizeof(*prompts));
	if (!cn || !mem || !prompts)
		rc = ms_err_set(err, -ENOMEM, "bench: out of memory");
	for (int i = 0; !rc && i < n_seq; i++) {
		fill(mem + i * prompt_len, prompt_len, m->cfg.vocab, 7 + (uint32_t)i);
		prompts[i] = mem + i * prompt_len;
	}
	double t0 = ms_now_s();
	if (!rc)
		rc = submit(e, n_seq, prompts, prompt_len, gen, c, temperature, cn, err);
	if (!rc)
		rc = step_all(e, cn, n_seq, gen, probe, st, err);
	if (!rc)
		st->ttft = cn[0].t_first - t0;
	free(cn);
	free(mem);
	free(prompts);
	ms_engine_free(e);
	return rc;
}

/* The context's pages are published by its prefill and then shared: each
 * decode request is the context plus one token of its own, so the prefix
 * cache gives it every full page of the context and only that token runs
 * before it decodes (all requests in phase from their first step). */
int bench_context_runs(struct ms_model *m, int64_t ctx, int64_t gen, int64_t chunk,
		       const int *batches, int n_batches, const struct bench_probe *probe,
		       struct run_stats *pre, struct run_stats *st, struct ms_err *err)
{
	int max_b = 1;
	for (int i = 0; i < n_batches; i++)
		max_b = batches[i] > max_b ? batches[i] : max_b;
	/* admission reserves every request's whole context, shared or not:
	 * the pool is sized for that, and only what is written is touched */
	struct ms_engine_config cfg = {.max_running = max_b, .max_context = ctx + gen + 2,
				       .spec_off = true,
				       .max_batch_tokens = chunk > 256 ? chunk : 256,
				       .kv_tokens = (ctx + gen + 32) * (max_b + 1)};
	struct ms_engine *e;
	int rc = ms_engine_init(&e, &m->lm, NULL, &cfg, err);
	if (rc)
		return rc;
	struct counter *cn = calloc((size_t)max_b, sizeof(*cn));
	int32_t *mem = malloc((size_t)max_b * (size_t)(ctx + 1) * sizeof(int32_t));
	const int32_t **prompts = malloc((size_t)max_b * sizeof(*prompts));
	if (!cn || !mem || !prompts)
		rc = ms_err_set(err, -ENOMEM, "bench: out of memory");
	for (int i = 0; !rc && i < max_b; i++) {
		prompts[i] = mem + (int64_t)i * (ctx + 1);
		fill(mem + (int64_t)i * (ctx + 1), ctx, m->cfg.vocab, 99); /* the same context */
		mem[(int64_t)i * (ctx + 1) + ctx] = (int32_t)((i + 1) % m->cfg.vocab);
	}
	memset(pre, 0, sizeof(*pre));
	double t0 = ms_now_s();
	if (!rc)
		rc = submit(e, 1, prompts, ctx, 1, NULL, 0, cn, err);
	if (!rc)
		rc = step_all(e, cn, 1, 1, NULL, pre, err);
	if (!rc)
		pre->ttft = cn[0].t_first - t0;
	for (int b = 0; !rc && b < n_batches; b++) {
		memset(cn, 0, (size_t)max_b * sizeof(*cn));
		memset(&st[b], 0, sizeof(st[b]));
		rc = submit(e, batches[b], prompts, ctx + 1, gen, NULL, 0, cn, err);
		if (!rc)
			rc = step_all(e, cn, batches[b], gen, probe, &st[b], err);
	}
	free(cn);
	free(mem);
	free(prompts);
	ms_engine_free(e);
	return rc;
}

/* ---- what the weights weigh ---- */

/* The tensor groups' bytes (the resident weights, repacked or uploaded),
 * split the way a decode step reads them. */
struct wbytes bench_weight_bytes(const struct ms_model *m)
{
	struct wbytes w = {0};
	double experts = 0;
	for (int i = 0; i < m->n_groups; i++) {
		const struct ms_tensor_group *g = &m->groups[i];
		w.total += (double)g->bytes;
		if (!strcmp(g->name, "embedding"))
			w.embed_row = (double)g->bytes / (double)m->cfg.vocab;
		else if (!strncmp(g->name, "experts", 7))
			experts += (double)g->bytes;
		else
			w.dense += (double)g->bytes;
	}
	w.expert = experts / (double)(m->cfg.n_layers * m->cfg.n_experts);
	return w;
}

/* E (1 - (1 - k/E)^n): each of n tokens picks k of E. */
double bench_distinct_experts(const struct ms_model *m, int64_t n)
{
	double E = (double)m->cfg.n_experts, k = (double)m->cfg.top_k;
	return E * (1.0 - pow(1.0 - k / E, (double)n));
}

/* Bytes per step: counted (the probe's delta over the measured steps, plus
 * the embedding rows: a lookup, not a product) when there is a count, else
 * the static estimate; over the step time, over bw, the roofline share. */
void bench_decode_figures(const struct ms_model *m, const struct wbytes *w,
			  const struct run_stats *st, int n, double bw, double peak,
			  struct decode *d)
{
	memset(d, 0, sizeof(*d));
	d->n = n;
	d->between = st->bw_secs > 0;
	d->bw = d->between ? st->bw_bytes / st->bw_secs : bw;
	bw = d->bw;
	if (st->steps <= 0 || st->secs <= 0)
		return;
	d->tps = (double)st->tokens / st->secs;
	d->step_s = st->secs / (double)st->steps;
	double L = (double)m->cfg.n_layers;
	d->bytes_static = w->dense + n * w->embed_row + L * bench_distinct_experts(m, n) * w->expert;
	d->counted = st->counted > 0;
	d->bytes = d->counted ? st->counted / (double)st->steps + n * w->embed_row : d->bytes_static;
	d->experts = w->expert > 0 ? (d->bytes - w->dense - n * w->embed_row) / (L * w->expert) : 0;
	if (bw > 0) {
		d->share = d->bytes / d->step_s / bw;
		d->share_static = d->bytes_static / d->step_s / bw;
	}
	if (peak > 0)
		d->share_peak = d->bytes / d->step_s / peak;
}

/* FLOP of one prompt token, counted on the active parameters, 2 per weight:
 * the attention projections q, k, v, o, the router and the token's top_k
 * experts (gate_up 2I x H, down H x I) in every layer:
 *   2 * L * (2*H*nH*d + 2*H*nKV*d + E*H + top_k*3*H*I).
 * The head (2 * V * H) runs only for the rows whose logits are wanted (the
 * last prompt token) and is added once per prompt; attention scores, norms
 * and activations are not counted. */
double bench_flop_per_token(const struct ms_model *m)
{
	const struct ms_model_config *c = &m->cfg;
	double H = (double)c->hidden, q = (double)(c->n_heads * c->head_dim);
	double kv = (double)(c->n_kv_heads * c->head_dim), I = (double)c->intermediate;
	return 2.0 * (double)c->n_layers *
	       (2 * H * q + 2 * H * kv + (double)c->n_experts * H + (double)c->top_k * 3 * H * I);
}

/* Prompt of each sequence of a decode run: 16 tokens, fewer when the
 * prefill prompt is shorter (slow kernels on a big model: the decode runs'
 * prompts would take longer than their decode steps). */
int64_t bench_decode_prompt(const struct ms_bench_opts *o)
{
	return o->prompt_tokens < 16 ? o->prompt_tokens : 16;
}


void bench_kv_figures(const struct ms_model *m, struct bench_kv *kv)
{
	double grow = ms_kv_geom_bytes_per_position(&m->lm.kv);
	*kv = (struct bench_kv){.dtype = ms_kv_dtype_name(m->lm.kv.dtype),
				.products = ms_attn_products_name(m->be, m->lm.kv.dtype),
				.bytes_per_token = ms_kv_geom_bytes(&m->lm.kv, 1),
				.tokens_per_gib = grow > 0 ? 1073741824.0 / grow : 0};
}

void bench_kv_print(const struct bench_kv *kv)
{
	printf("  KV bytes per token (all layers)      %10.0f  (%s; %s attention products)\n",
	       kv->bytes_per_token, kv->dtype, kv->products);
	if (kv->tokens_per_gib > 0)
		printf("  KV: tokens of context per GiB        %10.0f\n", kv->tokens_per_gib);
}

void bench_kv_json(struct ms_strbuf *j, const struct bench_kv *kv)
{
	jnum(j, "kv_bytes_per_token", kv->bytes_per_token, 0);
	jstr(j, "kv_dtype", kv->dtype);
	jnum(j, "kv_tokens_per_gib", kv->tokens_per_gib, 0);
	jstr(j, "attn_products", kv->products);
}

bool bench_json_line(struct ms_strbuf *j)
{
	const char *line = ms_strbuf_cstr(j);
	if (line)
		printf("%s\n", line);
	else
		fprintf(stderr, "moeserve: error: bench: out of memory for the JSON line\n");
	ms_strbuf_free(j);
	return line != NULL;
}

int bench_targets_judge(struct bench_target *t, int n)
{
	int n_pass = 0;
	for (int i = 0; i < n; i++) {
		t[i].pass = !t[i].below_is_good ? t[i].value >= t[i].threshold
			    : t[i].at_most ? t[i].value <= t[i].threshold : t[i].value < t[i].threshold;
		n_pass += t[i].pass;
	}
	return n_pass;
}

void bench_targets_print(const char *what, const struct bench_target *t, int n)
{
	printf("  targets (%s; informational)\n", what);
	for (int i = 0; i < n; i++)
		printf("    %-40s %9.3f%s %s %.2f%s  %s\n", t[i].name, t[i].value, t[i].unit,
		       !t[i].below_is_good ? ">=" : t[i].at_most ? "<=" : "< ", t[i].threshold, t[i].unit,
		       t[i].pass ? "PASS" : "BELOW");
}

void bench_targets_json(struct ms_strbuf *j, const struct bench_target *t, int n)
{
	int n_pass = 0;
	for (int i = 0; i < n; i++) {
		char k[64];
		snprintf(k, sizeof(k), "pass_%s", t[i].json);
		jbool(j, k, t[i].pass);
		n_pass += t[i].pass;
	}
	jint(j, "targets_passed", n_pass);
	jint(j, "targets", n);
}
