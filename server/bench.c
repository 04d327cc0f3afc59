/*
 * bench.c: `moeserve bench`, what the engine does on this machine: prefill
 * and decode speed, batching, time to first token, KV and memory use, and
 * decode against the memory-bandwidth roofline measured in the same run.
 *
 * Decode on a CPU streams weights: per token, every dense matrix, the
 * active experts and one embedding row. bytes_per_token / time_per_token,
 * over the bandwidth a plain parallel read achieves here, is the roofline
 * share.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sysexits.h>
#include <time.h>

#include "bench.h"
#include "engine.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- memory bandwidth: every thread sums its share of a big buffer ---- */

struct bw_job {
	const uint64_t *buf;
	size_t n, per;
	uint64_t sums[1024];
};

static void bw_task(void *ctx, int task, int worker)
{
	(void)worker;
	struct bw_job *j = ctx;
	size_t b = (size_t)task * j->per, e = b + j->per < j->n ? b + j->per : j->n;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	for (size_t i = b; i + 4 <= e; i += 4) {
		s0 += j->buf[i];
		s1 += j->buf[i + 1];
		s2 += j->buf[i + 2];
		s3 += j->buf[i + 3];
	}
	j->sums[task % 1024] += s0 + s1 + s2 + s3;
}

static double measure_bandwidth(struct ms_backend *be)
{
	size_t bytes = 512u << 20; /* well past any last-level cache */
	size_t n = bytes / sizeof(uint64_t);
	uint64_t *buf = malloc(bytes);
	if (!buf)
		return 0;
	for (size_t i = 0; i < n; i++)
		buf[i] = i;
	static struct bw_job j;
	memset(&j, 0, sizeof(j));
	j.buf = buf;
	j.n = n;
	int tasks = be->pool.n_threads * 8;
	j.per = (n + (size_t)tasks - 1) / (size_t)tasks;
	double best = 0;
	for (int rep = 0; rep < 5; rep++) {
		double t0 = now_s();
		ms_pool_run(&be->pool, tasks, bw_task, &j);
		double bw = (double)bytes / (now_s() - t0);
		best = bw > best ? bw : best;
	}
	volatile uint64_t sink = j.sums[0];
	(void)sink;
	free(buf);
	return best;
}

/* ---- engine runs ---- */

struct counter {
	int64_t tokens;
	bool done;
	double t_first, t_last;
};

static void count_cb(void *ctx, const struct ms_event *ev)
{
	struct counter *c = ctx;
	if (ev->kind == MS_EV_TOKEN) {
		double t = now_s();
		if (!c->tokens)
			c->t_first = t;
		c->t_last = t;
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

/* n_seq requests of prompt_len tokens generating gen tokens each; returns
 * decode tokens/s over the span where all were decoding (aggregate) and the
 * first request's time to first token. */
static int run(struct ms_model *m, int n_seq, int64_t prompt_len, int64_t gen, double *decode_tps,
	       double *ttft, struct ms_err *err)
{
	struct ms_engine_config cfg = {.max_running = n_seq, .no_prefix_cache = true,
				       .max_context = prompt_len + gen + 1,
				       .max_batch_tokens = prompt_len > 256 ? prompt_len : 256};
	cfg.kv_tokens = (prompt_len + gen + 16) * n_seq;
	struct ms_engine *e;
	int rc = ms_engine_init(&e, m, NULL, &cfg, err);
	if (rc)
		return rc;
	struct counter *c = calloc((size_t)n_seq, sizeof(*c));
	int32_t *prompt = malloc((size_t)prompt_len * sizeof(int32_t));
	struct ms_request_params p = {0};
	ms_sampling_defaults(&p.sampling);
	p.sampling.temperature = 0;
	p.sampling.n_logprobs = -1;
	p.prompt_logprobs = -1;
	p.max_tokens = gen;
	double t0 = now_s();
	for (int i = 0; !rc && i < n_seq; i++) {
		fill(prompt, prompt_len, m->cfg.vocab, 7 + (uint32_t)i);
		rc = ms_engine_submit(e, prompt, prompt_len, &p, count_cb, &c[i], NULL, err);
	}
	bool all_done = false;
	while (!rc && !all_done) {
		int64_t s = ms_engine_step(e, err);
		if (s < 0)
			rc = (int)s;
		all_done = true;
		for (int i = 0; i < n_seq; i++)
			all_done &= c[i].done;
	}
	if (!rc) {
		/* decode span: from the last first-token to the first last-token */
		double start = 0, end = 1e300;
		int64_t toks = 0;
		for (int i = 0; i < n_seq; i++) {
			start = c[i].t_first > start ? c[i].t_first : start;
			end = c[i].t_last < end ? c[i].t_last : end;
		}
		/* tokens each request made in that span ~ (gen - 1) for all */
		toks = (int64_t)n_seq * (gen - 1);
		*decode_tps = end > start ? (double)toks / (end - start) : 0;
		*ttft = c[0].t_first - t0;
	}
	free(c);
	free(prompt);
	ms_engine_free(e);
	return rc;
}

/* Weight bytes one decode token streams. */
static double bytes_per_token(const struct ms_model *m)
{
	double b = 0;
	for (int i = 0; i < m->n_groups; i++) {
		const struct ms_tensor_group *g = &m->groups[i];
		if (!strcmp(g->name, "embedding"))
			b += (double)g->bytes / (double)m->cfg.vocab; /* one row */
		else if (!strncmp(g->name, "experts", 7))
			b += (double)g->bytes * (double)m->cfg.top_k / (double)m->cfg.n_experts;
		else
			b += (double)g->bytes;
	}
	return b;
}

int ms_cmd_bench(struct ms_model *m, struct ms_backend *be, const struct ms_bench_opts *o)
{
	struct ms_err err = {0};
	double prefill_tps = 0, ttft = 0, dec1 = 0, dummy = 0, b4 = 0, b8 = 0, b16 = 0;
	int rc = run(m, 1, o->prompt_tokens, 2, &dummy, &ttft, &err);
	if (!rc)
		prefill_tps = (double)o->prompt_tokens / ttft;
	if (!rc)
		rc = run(m, 1, 16, o->decode_tokens, &dec1, &dummy, &err);
	if (!rc)
		rc = run(m, 4, 16, o->decode_tokens, &b4, &dummy, &err);
	if (!rc)
		rc = run(m, 8, 16, o->decode_tokens, &b8, &dummy, &err);
	if (!rc)
		rc = run(m, 16, 16, o->decode_tokens, &b16, &dummy, &err);
	if (rc) {
		fprintf(stderr, "moeserve: error: bench: %s\n", err.msg);
		return EX_SOFTWARE;
	}
	/* peak RSS of the model and the runs, before the bandwidth buffer */
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double rss = (double)ru.ru_maxrss * 1024.0;
	double bw = measure_bandwidth(be);
	double bpt = bytes_per_token(m);
	double share = bw > 0 ? bpt * dec1 / bw : 0;
	int64_t kvd = m->cfg.n_kv_heads * m->cfg.head_dim;
	double kv_bpt = 2.0 * (double)kvd * sizeof(float) * (double)m->cfg.n_layers;
	if (!o->json_only) {
		printf("moeserve bench: %s (%s kernels, %d threads)\n", o->model, be->isa,
		       be->pool.n_threads);
		printf("  memory bandwidth (parallel read)   %10.2f GB/s\n", bw / 1e9);
		printf("  prefill (%lld-token prompt)         %10.1f tokens/s\n",
		       (long long)o->prompt_tokens, prefill_tps);
		printf("  time to first token                %10.4f s\n", ttft);
		printf("  decode, batch 1                    %10.1f tokens/s\n", dec1);
		printf("  decode, 4 sequences (aggregate)    %10.1f tokens/s\n", b4);
		printf("  decode, 8 sequences (aggregate)    %10.1f tokens/s\n", b8);
		printf("  decode, 16 sequences (aggregate)   %10.1f tokens/s\n", b16);
		printf("  weight bytes per decode token      %10.0f\n", bpt);
		printf("  decode roofline share              %10.3f\n", share);
		printf("  KV bytes per token (all layers)    %10.0f\n", kv_bpt);
		printf("  peak RSS                           %10.1f MiB\n", rss / 1048576.0);
	}
	printf("{\"prefill_tokens_per_s\":%.3f,\"decode_tokens_per_s\":%.3f,"
	       "\"decode_roofline_share\":%.4f,\"batch4_tokens_per_s\":%.3f,"
	       "\"batch8_tokens_per_s\":%.3f,\"batch16_tokens_per_s\":%.3f,\"ttft_s\":%.6f,"
	       "\"kv_bytes_per_token\":%.0f,\"peak_rss_bytes\":%.0f,\"bandwidth_bytes_per_s\":%.0f,"
	       "\"weight_bytes_per_token\":%.0f,\"threads\":%d,\"kernels\":\"%s\"}\n",
	       prefill_tps, dec1, share, b4, b8, b16, ttft, kv_bpt, rss, bw, bpt, be->pool.n_threads,
	       be->isa);
	return EX_OK;
}
