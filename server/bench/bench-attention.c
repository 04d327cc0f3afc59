/*
 * bench-attention.c: `bench --attention --context N[,N...]`: one full
 * layer's attention alone, as a decode step at depth N calls it (one query
 * token per sequence, batch 1 and 8, each sequence its own pages), on the
 * backend's kernel and threads, with the KV cache in f32, bf16 and fp8;
 * then a prefill chunk at that depth (the last 256 positions of one
 * sequence querying it all), bf16 cache: compute-bound where decode is
 * memory-bound, so its figure is GFLOP/s.
 *
 * Decode at depth reads every sequence's whole cache each step; whether
 * the kernel streams it at the memory's pace is what this isolates from
 * the rest of the step. The dtypes alternate round by round in one
 * process (a shared machine's bandwidth drifts), a bandwidth read beside
 * each round; per depth, batch and dtype it prints the median time of a
 * call, the KV bytes it reads over that time, and that rate as a share of
 * the bandwidth.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "attention.h"
#include "bench-int.h"
#include "cpu.h"
#include "ms-clock.h"

#define ATT_ROUNDS 5
#define ATT_CALLS 5 /* timed calls per round, after one untimed */

static const int att_batch[2] = {1, 8};

static int att_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of v[0..n) (n odd); v is reordered. */
static double att_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), att_cmp);
	return v[n / 2];
}

/* One dtype's cache: batch sequences of ctx positions, pages shuffled (a
 * pool's free list scatters them), and the step's queries: the last nq
 * positions of each sequence. */
struct att_case {
	struct ms_kv_pool pool;
	int32_t *pages;      /* [batch][pages per sequence] */
	const int32_t **rows;
	int64_t *pos;
	float *q, *out, *sinks;
};

static uint32_t att_rand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

static float att_value(uint64_t *s)
{
	return ((float)(att_rand(s) & 0xFFFF) + 1.0f) / 32768.0f - 1.0f;
}

static void att_case_free(struct att_case *c)
{
	ms_kv_pool_free(&c->pool);
	free(c->pages), free(c->rows), free(c->pos), free(c->q), free(c->out), free(c->sinks);
	memset(c, 0, sizeof(*c));
}

static int att_case_init(struct att_case *c, struct ms_backend *b, const struct ms_model_config *cf,
			 int64_t ctx, int batch, int nq, enum ms_kv_dtype dt, struct ms_err *err)
{
	memset(c, 0, sizeof(*c));
	int64_t nt = (int64_t)batch * nq;
	int64_t P = MS_KV_PAGE_TOKENS, per = (ctx + 1 + P - 1) / P, kvd = cf->n_kv_heads * cf->head_dim;
	int64_t n_pages = per * batch, qd = cf->n_heads * cf->head_dim;
	if (kvd > 1024)
		return ms_err_set(err, -ENOTSUP, "bench --attention: kv_dim %lld (at most 1024)",
				  (long long)kvd);
	/* the backend's memory, as the engine's pool has it */
	int rc = ms_kv_pool_init(&c->pool, b, (int32_t)n_pages, P, kvd, cf->head_dim, dt, err);
	if (rc)
		return rc;
	c->pages = malloc((size_t)n_pages * sizeof(int32_t));
	c->rows = malloc((size_t)nt * sizeof(*c->rows));
	c->pos = malloc((size_t)nt * sizeof(int64_t));
	c->q = malloc((size_t)(nt * qd) * sizeof(float));
	c->out = malloc((size_t)(nt * qd) * sizeof(float));
	c->sinks = malloc((size_t)cf->n_heads * sizeof(float));
	if (!c->pages || !c->rows || !c->pos || !c->q || !c->out || !c->sinks) {
		att_case_free(c);
		return ms_err_set(err, -ENOMEM, "bench --attention: out of memory");
	}
	uint64_t s = 42;
	float row[1024];
	for (int64_t i = 0; i < n_pages * P; i++) {
		for (int64_t e = 0; e < kvd && e < 1024; e++)
			row[e] = att_value(&s);
		ms_kv_put(&c->pool, (int32_t)(i / P), i % P, row, row);
	}
	for (int64_t i = 0; i < n_pages; i++)
		c->pages[i] = (int32_t)i;
	for (int64_t i = n_pages - 1; i > 0; i--) {
		int64_t j = att_rand(&s) % (uint64_t)(i + 1);
		int32_t t = c->pages[i];
		c->pages[i] = c->pages[j], c->pages[j] = t;
	}
	for (int64_t t = 0; t < nt; t++)
		c->rows[t] = c->pages + t / nq * per, c->pos[t] = ctx - nq + 1 + t % nq;
	for (int64_t i = 0; i < nt * qd; i++)
		c->q[i] = att_value(&s);
	for (int64_t h = 0; h < cf->n_heads; h++)
		c->sinks[h] = att_value(&s);
	return 0;
}

/* The median of ATT_CALLS calls, in seconds, each after a read of the
 * bandwidth buffer: in a decode step the weights stream between two calls
 * of a layer, so its KV comes from memory, not from the last call's cache. */
static double att_time(struct ms_cpu *be, const struct ms_model_config *cf, struct att_case *c,
		       int64_t n, bool bf16p, struct bw_job *bwj, struct ms_err *err)
{
	struct ms_attn_args a = {
		.n_heads = cf->n_heads, .n_kv_heads = cf->n_kv_heads, .head_dim = cf->head_dim,
		.sinks = c->sinks, .pool = &c->pool, .n = n, .pos = c->pos, .pages = c->rows,
		.q = c->q, .out = c->out, .bf16_products = bf16p,
	};
	double t[ATT_CALLS];
	if (ms_attn_run(be->attn, &be->pool, &a, &be->attn_ws, err))
		return -1;
	for (int i = 0; i < ATT_CALLS; i++) {
		bench_bw_pass(be, bwj);
		double t0 = ms_now_s();
		ms_attn_run(be->attn, &be->pool, &a, &be->attn_ws, err);
		t[i] = ms_now_s() - t0;
	}
	return att_median(t, ATT_CALLS);
}

struct att_fig {
	double s[ATT_ROUNDS], bw[ATT_ROUNDS];
};

static void att_print(int64_t ctx, int batch, const char *dt, double bytes, const struct att_fig *f)
{
	double s[ATT_ROUNDS], share[ATT_ROUNDS];
	for (int r = 0; r < ATT_ROUNDS; r++)
		s[r] = f->s[r], share[r] = bytes / f->s[r] / f->bw[r];
	double ms = att_median(s, ATT_ROUNDS) * 1e3, sh = att_median(share, ATT_ROUNDS);
	printf("  context %6lld, batch %d, %-5s  %9.3f ms  %8.2f GB/s of KV  roofline share %.3f\n",
	       (long long)ctx, batch, dt, ms, bytes / (ms / 1e3) / 1e9, sh);
}

#define ATT_VARIANTS 4

/* The variants a depth times: each KV dtype, and the bf16 cache again with
 * bf16 products (where the kernel has them). */
static const struct {
	enum ms_kv_dtype dt;
	bool bf16p;
	const char *name;
} att_var[ATT_VARIANTS] = {
	{MS_KV_F32, false, "f32"}, {MS_KV_BF16, false, "bf16"}, {MS_KV_BF16, true, "bf16p"},
	{MS_KV_FP8, false, "fp8"},
};

/* Depth by depth, batch by batch: the variants' rounds interleaved. */
static int att_depth(struct ms_backend *b, struct ms_cpu *be, const struct ms_model_config *cf,
		     int64_t ctx, struct bw_job *bwj, struct ms_strbuf *j, struct ms_err *err)
{
	int vi[ATT_VARIANTS], nv = 0; /* the variants this kernel runs */
	for (int v = 0; v < ATT_VARIANTS; v++)
		if (!att_var[v].bf16p || be->attn->chunk_bf16_products)
			vi[nv++] = v;
	for (int bi = 0; bi < 2; bi++) {
		int batch = att_batch[bi];
		struct att_case c[ATT_VARIANTS];
		struct att_fig f[ATT_VARIANTS];
		for (int d = 0; d < nv; d++)
			if (att_case_init(&c[d], b, cf, ctx, batch, 1, att_var[vi[d]].dt, err)) {
				while (d--)
					att_case_free(&c[d]);
				return -1;
			}
		int rc = 0;
		for (int r = 0; r < ATT_ROUNDS && !rc; r++)
			for (int d = 0; d < nv && !rc; d++) {
				f[d].bw[r] = bench_bw_measure(be, bwj);
				if ((f[d].s[r] = att_time(be, cf, &c[d], batch, att_var[vi[d]].bf16p, bwj,
							  err)) < 0)
					rc = -1;
			}
		for (int d = 0; d < nv && !rc; d++) {
			double bytes = ms_kv_geom_bytes(&(struct ms_kv_geom){
				.n_layers = 1, .kv_dim = c[d].pool.kv_dim, .head_dim = cf->head_dim,
				.dtype = att_var[vi[d]].dt}, ctx + 1) * batch;
			att_print(ctx, batch, att_var[vi[d]].name, bytes, &f[d]);
			char key[64];
			double s[ATT_ROUNDS];
			memcpy(s, f[d].s, sizeof(s));
			snprintf(key, sizeof(key), "attn_ctx%lld_batch%d_%s_ms", (long long)ctx, batch,
				 att_var[vi[d]].name);
			jnum(j, key, att_median(s, ATT_ROUNDS) * 1e3, 4);
		}
		for (int d = 0; d < nv; d++)
			att_case_free(&c[d]);
		if (rc)
			return rc;
	}
	return 0;
}

#define ATT_PREFILL 256 /* query tokens of a prefill chunk (the engine's batch) */

/* A prefill chunk at depth ctx, bf16 cache, with f32 products and, where
 * the kernel has them, bf16 products, alternating: the median call, and
 * its arithmetic (4 flops per query head, key and head_dim value) as
 * GFLOP/s. */
static int att_prefill(struct ms_backend *b, struct ms_cpu *be, const struct ms_model_config *cf,
		       int64_t ctx, struct bw_job *bwj, struct ms_strbuf *j, struct ms_err *err)
{
	int nq = ctx + 1 < ATT_PREFILL ? (int)ctx + 1 : ATT_PREFILL;
	struct att_case c;
	if (att_case_init(&c, b, cf, ctx, 1, nq, MS_KV_BF16, err))
		return -1;
	double s[2][ATT_ROUNDS], keys = 0;
	for (int t = 0; t < nq; t++)
		keys += (double)(ctx - nq + 2 + t);
	double flop = 4.0 * keys * (double)(cf->n_heads * cf->head_dim);
	int rc = 0, np = be->attn->chunk_bf16_products ? 2 : 1;
	for (int r = 0; r < ATT_ROUNDS && !rc; r++)
		for (int p = 0; p < np && !rc; p++)
			if ((s[p][r] = att_time(be, cf, &c, nq, p == 1, bwj, err)) < 0)
				rc = -1;
	for (int p = 0; p < np && !rc; p++) {
		double ms = att_median(s[p], ATT_ROUNDS) * 1e3;
		printf("  context %6lld, prefill %d tokens, bf16, %s products %9.3f ms  %7.1f GFLOP/s\n",
		       (long long)ctx, nq, p ? "bf16" : "f32", ms, flop / ms / 1e6);
		char key[64];
		snprintf(key, sizeof(key), "attn_ctx%lld_prefill_bf16%s_ms", (long long)ctx, p ? "p" : "");
		jnum(j, key, ms, 4);
	}
	att_case_free(&c);
	return rc;
}

int bench_attention(struct ms_model *m, struct ms_backend *b, const struct ms_bench_opts *o)
{
	struct ms_cpu *be = ms_cpu_from(b);
	struct ms_err err = {0};
	static struct bw_job bwj;
	if (bench_bw_init(&bwj, be)) {
		fprintf(stderr, "moeserve: error: bench --attention: out of memory\n");
		return EX_SOFTWARE;
	}
	if (!o->json_only)
		printf("moeserve bench --attention: %lld heads, %lld kv heads, head_dim %lld (%s, %d "
		       "threads; %s products on bf16), one full layer: decode, then a prefill chunk\n",
		       (long long)m->cfg.n_heads, (long long)m->cfg.n_kv_heads, (long long)m->cfg.head_dim,
		       be->attn->name, be->pool.n_threads, be->attn_bf16_products ? "bf16" : "f32");
	struct ms_strbuf j = {0};
	ms_strbuf_str(&j, "{");
	jstr(&j, "attention_kernel", be->attn->name);
	int rc = 0;
	for (int i = 0; i < o->n_contexts && !rc; i++) {
		rc = att_depth(b, be, &m->cfg, o->contexts[i], &bwj, &j, &err);
		if (!rc)
			rc = att_prefill(b, be, &m->cfg, o->contexts[i], &bwj, &j, &err);
	}
	free(bwj.buf);
	if (rc) {
		ms_strbuf_free(&j);
		fprintf(stderr, "moeserve: error: bench --attention: %s\n", err.msg);
		return EX_SOFTWARE;
	}
	ms_strbuf_str(&j, "}");
	return bench_json_line(&j) ? EX_OK : EX_SOFTWARE;
}
