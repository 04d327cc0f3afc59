/*
 * bench-device.c: `moeserve bench` on a backend whose memory is its own
 * (be->host false: `--backend rocm` on a GPU, or rocm-sim): the load time,
 * prefill and decode speed at batch 1, 8 and 32 through the model's forward
 * pass (bench-common.c's engine runs, as the CPU bench), and the share of
 * the device's memory bandwidth a decode step reaches.
 *
 * The bytes a decode step reads are the CPU bench's model
 * (bench_decode_figures): every matrix a product reads (attention, router,
 * lm_head), the embedding rows, and each distinct expert the step's tokens
 * route to. The CPU counts them in its kernels; a device's kernels count
 * nothing, so a counting shim here wraps the backend's operations (the
 * same on any backend; on the CPU it counts what the CPU's counter does):
 * linear adds its matrices' bytes, moe copies the router logits back and
 * picks each token's top-k as backend.h says the kernels do (ties to the
 * lower index). That copy back waits for the device's queue every layer,
 * so the counting run is a replay of the timed one rather than the timed
 * one itself: the same prompts, greedy, so the same tokens and routing,
 * step for step.
 *
 * The bandwidth is the backend's copy_bandwidth (a copy kernel, read and
 * write counted, best of several), taken before the decode runs and after
 * the prefill; the better of the two is the ceiling (a GPU's does not drift
 * as a shared CPU's does). The share is bytes per step / step time / that.
 *
 * rocm-sim runs the kernels on a host model of the GPU: its copy buffer is
 * small (its "bandwidth" is the model's, a check that the path works, not
 * a figure), and main.c gives it small prompt and decode defaults.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "backend.h"
#include "bench-int.h"
#include "ms-clock.h"

/* Sequences decoding at once: a GPU's, and the host model's (at a tenth of
 * a second per token there, 32 sequences would take minutes). */
#define N_DEV_BATCH 3
static const int dev_batch[N_DEV_BATCH] = {1, 8, 32};
static const int sim_batch[N_DEV_BATCH] = {1, 2, 4};

/* Buffer size of the copy kernel: far past a GPU's caches (H200: 60 MB of
 * L2; MI300X: 256 MB of Infinity Cache); small on the host model. */
#define BW_BYTES_DEVICE ((size_t)1 << 30)
#define BW_BYTES_SIM ((size_t)64 << 20)

static bool is_sim(const struct ms_backend *be)
{
	return !strcmp(be->name, "rocm-sim");
}

/* ---- the counting shim ---- */

struct count_shim {
	struct ms_backend_ops ops;         /* the backend's, three of them wrapped */
	const struct ms_backend_ops *real;
	uint64_t bytes;                    /* weight bytes the wrapped calls read */
	int64_t n;                         /* tokens of the staged step */
	float *logits;                     /* one layer's router logits, on the host */
	size_t logits_cap;
	bool *used, *taken;                /* [n_experts]: in the step, by one token */
	int64_t n_experts;
};

static struct count_shim *shim_of(struct ms_backend *be)
{
	return (struct count_shim *)((char *)be->ops - offsetof(struct count_shim, ops));
}

static int shim_step_begin(struct ms_backend *be, const struct ms_step *s, struct ms_err *err)
{
	struct count_shim *c = shim_of(be);
	c->n = s->n;
	return c->real->step_begin(be, s, err);
}

static int shim_linear(struct ms_backend *be, int m, const struct ms_linear *const *l,
		       const float *x, int64_t n, float *const *y, struct ms_err *err)
{
	struct count_shim *c = shim_of(be);
	for (int i = 0; i < m; i++)
		c->bytes += ms_wmat_bytes(&l[i]->w);
	return c->real->linear(be, m, l, x, n, y, err);
}

/* Mark in c->used the experts token row v [E] routes to: its k largest
 * logits, the lower index first among equals. */
static void route_token(struct count_shim *c, const float *v, int64_t E, int64_t k)
{
	memset(c->taken, 0, (size_t)E * sizeof(bool));
	for (int64_t j = 0; j < k && j < E; j++) {
		int64_t best = -1;
		for (int64_t e = 0; e < E; e++)
			if (!c->taken[e] && (best < 0 || v[e] > v[best]))
				best = e;
		c->taken[best] = c->used[best] = true;
	}
}

static int shim_moe(struct ms_backend *be, const struct ms_moe_desc *d, struct ms_err *err)
{
	struct count_shim *c = shim_of(be);
	const struct ms_moe_w *w = d->w;
	int64_t E = w->n_experts, n = c->n;
	size_t need = (size_t)(n * E) * sizeof(float);
	if (E > c->n_experts)
		return ms_err_set(err, -EINVAL, "bench: %lld experts, the shim was made for %lld",
				  (long long)E, (long long)c->n_experts);
	if (need > c->logits_cap) {
		float *p = realloc(c->logits, need);
		if (!p)
			return ms_err_set(err, -ENOMEM, "bench: out of memory for router logits");
		c->logits = p;
		c->logits_cap = need;
	}
	c->real->to_host(be, c->logits, d->router_logits, need);
	memset(c->used, 0, (size_t)E * sizeof(bool));
	for (int64_t t = 0; t < n; t++)
		route_token(c, c->logits + t * E, E, d->top_k);
	for (int64_t e = 0; e < E; e++)
		if (c->used[e])
			c->bytes += ms_wmat_bytes(&w->gate_up[e]->w) + ms_wmat_bytes(&w->down[e]->w);
	return c->real->moe(be, d, err);
}

static uint64_t shim_bytes(void *ctx)
{
	return ((struct count_shim *)ctx)->bytes;
}

/* The same run as a timed one, with be's operations wrapped by the shim
 * for its duration: its st->counted is the weight bytes of the measured
 * steps. */
static int counted_run(struct ms_model *m, int n_seq, int64_t prompt_len, int64_t gen,
		       struct run_stats *st, struct ms_err *err)
{
	struct ms_backend *be = m->be;
	struct count_shim c = {.ops = *be->ops, .real = be->ops, .n_experts = m->cfg.n_experts};
	c.ops.step_begin = shim_step_begin;
	c.ops.linear = shim_linear;
	c.ops.moe = shim_moe;
	c.used = calloc((size_t)c.n_experts + 1, sizeof(bool));
	c.taken = calloc((size_t)c.n_experts + 1, sizeof(bool));
	int rc;
	if (!c.used || !c.taken) {
		rc = ms_err_set(err, -ENOMEM, "bench: out of memory");
	} else {
		struct bench_probe p = {.bytes = shim_bytes, .ctx = &c};
		be->ops = &c.ops;
		rc = bench_run(m, n_seq, prompt_len, gen, &p, st, err);
		be->ops = c.real;
	}
	free(c.used), free(c.taken), free(c.logits);
	return rc;
}

/* ---- the runs ---- */

struct dev_report {
	struct wbytes w;
	size_t bw_size;              /* the copy kernel's buffer */
	double bw_before, bw_after, bw;
	char bw_why[sizeof(((struct ms_err *)0)->msg)]; /* why there is no bandwidth */
	bool bw_failed;              /* the backend's copy_bandwidth failed */
	struct decode d[N_DEV_BATCH];
	int64_t count_steps[N_DEV_BATCH]; /* measured steps of the counting replay */
	double ttft, prefill_tps, fpt, prefill_gflops;
	struct bench_kv kv;
	double secs;                 /* the bench's own wall time, the load not included */
};

static double bandwidth(struct ms_backend *be, struct dev_report *p)
{
	if (!be->ops->copy_bandwidth) {
		snprintf(p->bw_why, sizeof(p->bw_why), "the %s backend has no copy_bandwidth", be->name);
		return 0;
	}
	struct ms_err err = {0};
	double bw = be->ops->copy_bandwidth(be, p->bw_size, &err);
	if (bw <= 0) {
		snprintf(p->bw_why, sizeof(p->bw_why), "%s", err.msg[0] ? err.msg : "no figure");
		p->bw_failed = true;
	}
	return bw > 0 ? bw : 0;
}

/* Decode at batch dev_batch[i]: timed, then replayed with the shim for
 * its bytes (per step, scaled to the timed run's steps). */
static int decode_run(struct ms_model *m, const struct ms_bench_opts *o, int i,
		      struct dev_report *p, struct ms_err *err)
{
	struct run_stats st, cnt;
	int n = is_sim(m->be) ? sim_batch[i] : dev_batch[i];
	int64_t pl = bench_decode_prompt(o);
	int rc = bench_run(m, n, pl, o->decode_tokens, NULL, &st, err);
	rc = rc ? rc : counted_run(m, n, pl, o->decode_tokens, &cnt, err);
	if (rc)
		return rc;
	p->count_steps[i] = cnt.steps;
	st.counted = cnt.steps > 0 ? cnt.counted / (double)cnt.steps * (double)st.steps : 0;
	bench_decode_figures(m, &p->w, &st, n, 0, 0, &p->d[i]);
	return 0;
}

/* Bandwidth, warm-up, decode at each batch, prefill, bandwidth again. */
static int dev_measure(struct ms_model *m, const struct ms_bench_opts *o, struct dev_report *p,
		       struct ms_err *err)
{
	struct ms_backend *be = m->be;
	double t0 = ms_now_s();
	p->bw_size = is_sim(be) ? BW_BYTES_SIM : BW_BYTES_DEVICE;
	p->bw_before = bandwidth(be, p);
	/* warm-up: the first launches of every kernel, the scratch buffers */
	struct run_stats st;
	int64_t warm_len = o->prompt_tokens < 32 ? o->prompt_tokens : 32;
	int rc = bench_run(m, 1, warm_len, 2, NULL, &st, err);
	for (int i = 0; !rc && i < N_DEV_BATCH; i++)
		rc = decode_run(m, o, i, p, err);
	if (!rc)
		rc = bench_run(m, 1, o->prompt_tokens, 2, NULL, &st, err);
	if (rc)
		return rc;
	p->ttft = st.ttft;
	if (!p->bw_failed)
		p->bw_after = bandwidth(be, p);
	p->bw = p->bw_before > p->bw_after ? p->bw_before : p->bw_after;
	p->secs = ms_now_s() - t0;
	return 0;
}

/* The shares against the run's bandwidth, the prefill's rates. */
static void dev_figures(const struct ms_model *m, const struct ms_bench_opts *o,
			struct dev_report *p)
{
	for (int i = 0; i < N_DEV_BATCH; i++) {
		struct decode *d = &p->d[i];
		d->bw = d->share_peak = 0;
		if (p->bw > 0 && d->step_s > 0) {
			d->bw = p->bw;
			d->share = d->bytes / d->step_s / p->bw;
			d->share_static = d->bytes_static / d->step_s / p->bw;
		}
	}
	p->prefill_tps = p->ttft > 0 ? (double)o->prompt_tokens / p->ttft : 0;
	p->fpt = bench_flop_per_token(m);
	double head_flop = 2.0 * (double)m->cfg.vocab * (double)m->cfg.hidden;
	p->prefill_gflops = p->ttft > 0 ? (p->fpt * (double)o->prompt_tokens + head_flop) / p->ttft / 1e9
					: 0;
	bench_kv_figures(m, &p->kv);
}

/* ---- the table and the JSON line ---- */

static void print_dev_table(const struct ms_model *m, const struct ms_backend *be,
			    const struct ms_bench_opts *o, const struct dev_report *p)
{
	printf("moeserve bench: %s on %s (%s; %s)\n", o->model, be->name,
	       be->device ? be->device : "?", be->kernels ? be->kernels : "?");
	printf("  load, upload included                %10.3f s\n", o->load_seconds);
	printf("  weight bytes on the device           %10.1f MiB\n", p->w.total / 1048576.0);
	if (p->bw > 0)
		printf("  copy bandwidth (copy kernel, %4zu MiB) %9.2f GB/s  (before %.2f, after %.2f)\n",
		       p->bw_size >> 20, p->bw / 1e9, p->bw_before / 1e9, p->bw_after / 1e9);
	else
		printf("  copy bandwidth                       unavailable: %s\n", p->bw_why);
	printf("  prefill (%lld-token prompt)           %10.1f tokens/s  (%.1f GFLOP/s on the "
	       "active parameters)\n", (long long)o->prompt_tokens, p->prefill_tps, p->prefill_gflops);
	printf("  time to first token                  %10.4f s\n", p->ttft);
	for (int i = 0; i < N_DEV_BATCH; i++) {
		const struct decode *d = &p->d[i];
		printf("  decode, batch %-2d                     %10.1f tokens/s  %8.3f ms/step\n", d->n,
		       d->tps, d->step_s * 1e3);
		printf("    weight bytes per step (%s)    %10.1f MB  (static estimate %.1f MB)\n",
		       d->counted ? "counted" : "static ", d->bytes / 1e6, d->bytes_static / 1e6);
		printf("    distinct experts per layer         %10.2f     (uniform routing %.2f)\n",
		       d->experts, bench_distinct_experts(m, d->n));
		printf("    share of the copy bandwidth        %10.3f     (static estimate %.3f)\n",
		       d->share, d->share_static);
	}
	bench_kv_print(&p->kv);
	printf("  bench time (load not included)       %10.1f s\n", p->secs);
}

static void json_dev(struct ms_strbuf *j, const struct ms_backend *be,
		     const struct ms_bench_opts *o, const struct dev_report *p)
{
	jstr(j, "backend", be->name);
	jstr(j, "device", be->device ? be->device : "");
	jstr(j, "kernels", be->kernels ? be->kernels : "");
	jnum(j, "load_s", o->load_seconds, 4);
	jnum(j, "weight_bytes", p->w.total, 0);
	jnum(j, "bandwidth_bytes_per_s", p->bw, 0);
	jnum(j, "bandwidth_before_bytes_per_s", p->bw_before, 0);
	jnum(j, "bandwidth_after_bytes_per_s", p->bw_after, 0);
	jint(j, "bandwidth_copy_bytes", (long long)p->bw_size);
	jint(j, "prefill_tokens", (long long)o->prompt_tokens);
	jnum(j, "prefill_tokens_per_s", p->prefill_tps, 3);
	jnum(j, "prefill_flop_per_token", p->fpt, 0);
	jnum(j, "prefill_gflops", p->prefill_gflops, 3);
	jnum(j, "ttft_s", p->ttft, 6);
	jint(j, "decode_tokens", (long long)o->decode_tokens);
	jnum(j, "decode_tokens_per_s", p->d[0].tps, 3);
	jnum(j, "decode_roofline_share", p->d[0].share, 4);
	jstr(j, "bytes_source", p->d[0].counted ? "counter" : "static");
	for (int i = 0; i < N_DEV_BATCH; i++) {
		const struct decode *d = &p->d[i];
		jnum_batch(j, d->n, "tokens_per_s", d->tps, 3);
		jnum_batch(j, d->n, "step_s", d->step_s, 6);
		jnum_batch(j, d->n, "bytes_per_step", d->bytes, 0);
		jnum_batch(j, d->n, "bytes_per_step_static", d->bytes_static, 0);
		jnum_batch(j, d->n, "experts_per_layer", d->experts, 3);
		jnum_batch(j, d->n, "roofline_share", d->share, 4);
		jnum_batch(j, d->n, "roofline_share_static", d->share_static, 4);
	}
	bench_kv_json(j, &p->kv);
	jnum(j, "bench_s", p->secs, 3);
}

int bench_device(struct ms_model *m, struct ms_backend *be, const struct ms_bench_opts *o)
{
	if (o->baseline) {
		fprintf(stderr, "moeserve: error: bench --baseline: a kernel set of the cpu backend "
			"(not with --backend %s)\n", be->name);
		return EX_USAGE;
	}
	struct dev_report p = {.w = bench_weight_bytes(m)};
	struct ms_err err = {0};
	if (dev_measure(m, o, &p, &err)) {
		fprintf(stderr, "moeserve: error: bench: %s\n", err.msg);
		return EX_SOFTWARE;
	}
	dev_figures(m, o, &p);
	if (!o->json_only)
		print_dev_table(m, be, o, &p);
	struct ms_strbuf j = {0};
	ms_strbuf_str(&j, "{");
	json_dev(&j, be, o, &p);
	ms_strbuf_str(&j, "}");
	bool line = bench_json_line(&j);
	if (p.bw_failed)
		fprintf(stderr, "moeserve: error: bench: copy bandwidth: %s\n", p.bw_why);
	return !line ? EX_OSERR : p.bw_failed ? EX_SOFTWARE : EX_OK;
}
