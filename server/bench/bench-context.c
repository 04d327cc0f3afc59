/*
 * bench-context.c: `moeserve bench --context N[,N...]`: decode at batch 1
 * and 8 after N tokens of context and the prefill of that N-token prompt,
 * against the short-context runs of the same bench (bench-int.h).
 *
 * A decode step at depth reads the weights and every sequence's KV cache:
 * its bytes are the weights the backend counts plus the KV the attention
 * reads (each sequence its whole context in full layers, the window in
 * sliding ones, at the cache's dtype), and the roofline share is measured
 * on their sum.
 */
#include <stdio.h>
#include <string.h>

#include "bench-int.h"
#include "engine.h"

static const int ctx_batch[2] = {1, 8};

/* Prefill chunk of the context runs: what a server would step at once,
 * bounded so that a 32k prompt's activations stay far below its KV. */
#define CTX_CHUNK 2048

/* The figures of one context's runs against the short-context ones. */
static void ctx_figures(const struct ms_model *m, const struct wbytes *w,
			const struct bench_short *s, const struct run_stats *pre,
			const struct run_stats *st, struct bench_ctx *c)
{
	c->prefill_tps = pre->ttft > 0 ? (double)c->ctx / pre->ttft : 0;
	c->prefill_ratio = s->prefill_tps > 0 ? c->prefill_tps / s->prefill_tps : 0;
	for (int i = 0; i < 2; i++) {
		struct decode *d = &c->d[i];
		bench_decode_figures(m, w, &st[i], ctx_batch[i], s->bw, s->bw, d);
		c->kv_bytes[i] = ms_kv_geom_bytes(&m->lm.kv, c->ctx) * ctx_batch[i];
		c->bytes[i] = d->bytes + c->kv_bytes[i];
		c->share[i] = d->step_s > 0 && d->bw > 0 ? c->bytes[i] / d->step_s / d->bw : 0;
		c->ratio[i] = s->tps[i] > 0 ? d->tps / s->tps[i] : 0;
	}
}

int bench_contexts(struct ms_model *m, const struct ms_bench_opts *o, const struct wbytes *w,
		   const struct bench_probe *probe, const struct bench_short *s,
		   struct bench_ctx *out, struct ms_err *err)
{
	for (int k = 0; k < o->n_contexts; k++) {
		struct run_stats pre, st[2];
		struct bench_ctx *c = &out[k];
		memset(c, 0, sizeof(*c));
		c->ctx = o->contexts[k];
		int rc = bench_context_runs(m, c->ctx, o->decode_tokens, CTX_CHUNK, ctx_batch, 2, probe,
					    &pre, st, err);
		if (rc)
			return ms_err_prefix(err, "--context %lld: ", (long long)c->ctx);
		ctx_figures(m, w, s, &pre, st, c);
	}
	return 0;
}

void bench_contexts_print(const struct bench_ctx *c, int n, int64_t short_prompt)
{
	for (int k = 0; k < n; k++, c++) {
		printf("  context %lld tokens (prefill in chunks of %d)\n", (long long)c->ctx,
		       CTX_CHUNK);
		printf("    prefill                            %10.1f tokens/s  (%.3f of the %lld-token "
		       "rate)\n", c->prefill_tps, c->prefill_ratio, (long long)short_prompt);
		for (int i = 0; i < 2; i++) {
			const struct decode *d = &c->d[i];
			printf("    decode, batch %d                    %10.1f tokens/s  (%.3f of the "
			       "short-context rate)\n", ctx_batch[i], d->tps, c->ratio[i]);
			printf("      bytes per step                   %10.1f MB  (weights %.1f, KV %.1f)\n",
			       c->bytes[i] / 1e6, d->bytes / 1e6, c->kv_bytes[i] / 1e6);
			printf("      roofline share                   %10.3f     (at %.2f GB/s)\n",
			       c->share[i], d->bw / 1e9);
		}
	}
}

/* "ctxN_what", or with a batch "ctxN_batchB_what". */
static const char *ctx_key(char *k, size_t n, int64_t ctx, int batch, const char *what)
{
	if (batch)
		snprintf(k, n, "ctx%lld_batch%d_%s", (long long)ctx, batch, what);
	else
		snprintf(k, n, "ctx%lld_%s", (long long)ctx, what);
	return k;
}

static int ctx_targets(const struct bench_ctx *c, int n, struct bench_target *t);

void bench_contexts_json(struct ms_strbuf *j, const struct bench_ctx *c, int n)
{
	char k[96];
	struct bench_target t[2 * MS_BENCH_MAX_CONTEXTS];
	int nt = ctx_targets(c, n, t);
	for (int i = 0; i < nt; i++) {
		snprintf(k, sizeof(k), "pass_%s", t[i].json);
		jbool(j, k, t[i].pass);
	}
	for (int i = 0; i < n; i++, c++) {
		jnum(j, ctx_key(k, sizeof(k), c->ctx, 0, "prefill_tokens_per_s"), c->prefill_tps, 3);
		jnum(j, ctx_key(k, sizeof(k), c->ctx, 0, "prefill_over_short"), c->prefill_ratio, 4);
		for (int b = 0; b < 2; b++) {
			int B = ctx_batch[b];
			jnum(j, ctx_key(k, sizeof(k), c->ctx, B, "tokens_per_s"), c->d[b].tps, 3);
			jnum(j, ctx_key(k, sizeof(k), c->ctx, B, "over_short"), c->ratio[b], 4);
			jnum(j, ctx_key(k, sizeof(k), c->ctx, B, "bytes_per_step"), c->bytes[b], 0);
			jnum(j, ctx_key(k, sizeof(k), c->ctx, B, "kv_bytes_per_step"), c->kv_bytes[b], 0);
			jnum(j, ctx_key(k, sizeof(k), c->ctx, B, "roofline_share"), c->share[b], 4);
		}
	}
}

/* Issue 24's targets where this run measured their depth: decode at batch
 * 1 at 8,192 tokens >= 0.8 of the short-context rate, at 32,768 >= 0.6;
 * the 8,192-token prefill >= 0.8 of the short prompt's rate. */
static int ctx_targets(const struct bench_ctx *c, int n, struct bench_target *t)
{
	int k = 0;
	for (int i = 0; i < n; i++, c++) {
		if (c->ctx == 8192) {
			t[k++] = (struct bench_target){"decode at 8k context / short", "ctx8192_decode", "",
						       c->ratio[0], 0.8, false, false, false};
			t[k++] = (struct bench_target){"prefill of 8k tokens / short", "ctx8192_prefill", "",
						       c->prefill_ratio, 0.8, false, false, false};
		} else if (c->ctx == 32768) {
			t[k++] = (struct bench_target){"decode at 32k context / short", "ctx32768_decode",
						       "", c->ratio[0], 0.6, false, false, false};
		}
	}
	bench_targets_judge(t, k);
	return k;
}

void bench_contexts_targets_print(const struct bench_ctx *c, int n)
{
	struct bench_target t[2 * MS_BENCH_MAX_CONTEXTS];
	int k = ctx_targets(c, n, t);
	if (k)
		bench_targets_print("context depth", t, k);
}
