/*
 * bench-int.h: what the two halves of `moeserve bench` share (inside
 * server/ only): the engine runs that time prefill and decode, the per-step
 * byte model of the weights, and the JSON line's writers. bench.c measures
 * the CPU (its bandwidth read, its arithmetic, oneDNN); bench-device.c a
 * backend whose memory is its own (a GPU: its copy kernel's bandwidth).
 * bench-common.c holds the shared code; nothing here names a backend.
 * bench-structured.c measures structured outputs (--structured).
 */
#ifndef MS_BENCH_INT_H
#define MS_BENCH_INT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench.h"
#include "ms-error.h"
#include "ms-strbuf.h"

struct ms_backend;

/* ---- engine runs ---- */

struct run_stats {
	double ttft;           /* first request: submit to its first token */
	int64_t steps;         /* measured decode steps */
	int64_t tokens;        /* tokens they made (steps x sequences) */
	double secs;           /* their time */
	double counted;        /* weight bytes the probe counted over them */
	double bw_bytes;       /* bandwidth reads interleaved with those steps: bytes */
	double bw_secs;        /* and their time */
};

/* What a run does around its measured steps (each member optional). */
struct bench_probe {
	/* weight bytes streamed so far (the CPU's counter, the device's
	 * counting shim); read before and after every step */
	uint64_t (*bytes)(void *ctx);
	/* after every measured step, outside its time (the CPU's bandwidth
	 * read between steps) */
	void (*after_step)(void *ctx, struct run_stats *st);
	void *ctx;
};

/* n_seq requests of prompt_len tokens generating gen tokens each, stepped by
 * hand on m's backend. Measured decode steps: those where every request was
 * past its prompt and each made one token; the first is left out as warm-up
 * when others follow. probe may be NULL. */
int bench_run(struct ms_model *m, int n_seq, int64_t prompt_len, int64_t gen,
	      const struct bench_probe *probe, struct run_stats *st, struct ms_err *err);

struct ms_constraint;

/* The same with every request under constraint c (NULL: none), drawn at
 * temperature (0: greedy, as bench_run; each request its own seed). */
int bench_run_with(struct ms_model *m, int n_seq, int64_t prompt_len, int64_t gen,
		   const struct ms_constraint *c, float temperature, const struct bench_probe *probe,
		   struct run_stats *st, struct ms_err *err);

/* Decode at depth: one prefill of a ctx-token context (pre: its time as
 * ttft; chunk tokens a step), then for each batches[i] that many requests
 * on that context (shared through the prefix cache, a token of their own
 * each) making gen tokens: st[i] as bench_run's. */
int bench_context_runs(struct ms_model *m, int64_t ctx, int64_t gen, int64_t chunk,
		       const int *batches, int n_batches, const struct bench_probe *probe,
		       struct run_stats *pre, struct run_stats *st, struct ms_err *err);

/* ---- what the weights weigh ---- */

struct wbytes {
	double embed_row;   /* one embedding row (a lookup per token) */
	double dense;       /* attention, router, lm_head: read once per step */
	double expert;      /* one expert's gate_up + down in one layer */
	double total;       /* every group: the resident weights after repacking */
};

struct wbytes bench_weight_bytes(const struct ms_model *m);

/* Expected distinct experts per layer for n tokens routed uniformly. */
double bench_distinct_experts(const struct ms_model *m, int64_t n);

/* One decode measurement at batch n: rates, bytes and the roofline share. */
struct decode {
	int n;
	double tps;            /* aggregate tokens/s */
	double step_s;         /* time per step */
	double bytes;          /* weight bytes per step: counted + embedding rows */
	double bytes_static;   /* the groups' estimate, uniform routing */
	double experts;        /* distinct experts per layer the bytes imply */
	double share, share_static;
	double bw;             /* the bandwidth they are measured against */
	double share_peak;     /* the share of the run's best read instead */
	bool between;          /* bw was read between the steps */
	double ar_all, ar_one; /* bf16 GFLOP/s from cache next to the run: all threads, one */
	bool counted;          /* bytes come from the backend's counter */
};

/* bw: the bandwidth read between the run's steps when it was, else the
 * given one; peak: the best read of the whole bench. */
void bench_decode_figures(const struct ms_model *m, const struct wbytes *w,
			  const struct run_stats *st, int n, double bw, double peak,
			  struct decode *d);

/* FLOP of one prompt token on the active parameters (bench-common.c). */
double bench_flop_per_token(const struct ms_model *m);

/* Prompt of each sequence of a decode run (16 tokens or fewer). */
int64_t bench_decode_prompt(const struct ms_bench_opts *o);

/* The device bench (bench-device.c): ms_cmd_bench for a backend whose
 * memory is not the host's. */
int bench_device(struct ms_model *m, struct ms_backend *be, const struct ms_bench_opts *o);

/* `bench --structured` (bench-structured.c): grammar compile, token masks
 * and constrained decode, on any backend. */
int bench_structured(struct ms_model *m, const struct ms_bench_opts *o);

/* `bench --speculative` (bench-spec.c): decode with speculation on
 * against off, per scenario and batch. */
int bench_speculative(struct ms_model *m, struct ms_backend *b, const struct ms_bench_opts *o);

/* ---- decode at depth (bench-context.c) ---- */

/* The short-context figures a context's runs are compared with: decode at
 * batch 1 and 8, the --prompt-tokens prefill, the bandwidth. */
struct bench_short {
	double tps[2];
	double prefill_tps;
	double bw;
};

/* One --context N: its prefill, decode at batch 1 and 8, and what a decode
 * step read (weights counted + the KV the attention reads). */
struct bench_ctx {
	int64_t ctx;
	double prefill_tps, prefill_ratio;
	struct decode d[2];
	double kv_bytes[2], bytes[2], share[2], ratio[2];
};

int bench_contexts(struct ms_model *m, const struct ms_bench_opts *o, const struct wbytes *w,
		   const struct bench_probe *probe, const struct bench_short *s,
		   struct bench_ctx *out, struct ms_err *err);
void bench_contexts_print(const struct bench_ctx *c, int n, int64_t short_prompt);
/* Its keys: ctxN_prefill_*, ctxN_batchB_*, and pass_ctx* for the targets. */
void bench_contexts_json(struct ms_strbuf *j, const struct bench_ctx *c, int n);
/* Issue 24's targets at the depths measured (none: nothing printed). */
void bench_contexts_targets_print(const struct bench_ctx *c, int n);

/* ---- the JSON line ---- */

/* JSON has no NaN or infinity: such a figure (nothing measured) is 0. */
static inline double fin(double x)
{
	return isfinite(x) ? x : 0;
}

/* The separator before a key: none right after the opening brace. */
static inline const char *sep(const struct ms_strbuf *j)
{
	return j->len > 1 ? "," : "";
}

static inline void jnum(struct ms_strbuf *j, const char *key, double v, int decimals)
{
	ms_strbuf_printf(j, "%s\"%s\":%.*f", sep(j), key, decimals, fin(v));
}

static inline void jint(struct ms_strbuf *j, const char *key, long long v)
{
	ms_strbuf_printf(j, "%s\"%s\":%lld", sep(j), key, v);
}

/* "batch<n>_<what>": one decode run's figure */
static inline void jnum_batch(struct ms_strbuf *j, int n, const char *what, double v,
			      int decimals)
{
	char k[64];
	snprintf(k, sizeof(k), "batch%d_%s", n, what);
	jnum(j, k, v, decimals);
}

static inline void jbool(struct ms_strbuf *j, const char *key, bool v)
{
	ms_strbuf_printf(j, "%s\"%s\":%s", sep(j), key, v ? "true" : "false");
}

static inline void jstr(struct ms_strbuf *j, const char *key, const char *v)
{
	ms_strbuf_printf(j, "%s\"%s\":\"", sep(j), key);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			ms_strbuf_add(j, "\\", 1);
		ms_strbuf_add(j, (unsigned char)*v < 0x20 ? "?" : v, 1);
	}
	ms_strbuf_str(j, "\"");
}

/* What the KV cache costs at the model's dtype, as both benches print it
 * (bench-common.c). */
struct bench_kv {
	const char *dtype;       /* "bf16", "f32" */
	const char *products;    /* attention's products on it: "bf16", "f32" */
	double bytes_per_token;  /* a position, all layers */
	double tokens_per_gib;   /* of a long context; 0: every layer slides */
};
void bench_kv_figures(const struct ms_model *m, struct bench_kv *kv);
void bench_kv_print(const struct bench_kv *kv);
/* kv_bytes_per_token, kv_dtype, kv_tokens_per_gib, attn_products */
void bench_kv_json(struct ms_strbuf *j, const struct bench_kv *kv);

/* ---- the CPU's memory bandwidth (bench.c) ---- */

struct ms_cpu;

/* Every thread sums its share of a 512 MiB buffer (buf: free it). */
struct bw_job {
	uint64_t *buf;
	size_t bytes, n, per;
	bool avx2;
	uint64_t sums[1024];
};
int bench_bw_init(struct bw_job *j, const struct ms_cpu *be);
/* One parallel read of the buffer: its time in seconds. */
double bench_bw_pass(struct ms_cpu *be, struct bw_job *j);
/* Best of 8 parallel reads of the buffer, in bytes/s. */
double bench_bw_measure(struct ms_cpu *be, struct bw_job *j);

/* `bench --attention` (bench-attention.c): one layer's attention alone at
 * each --context depth, f32 and bf16 KV. */
int bench_attention(struct ms_model *m, struct ms_backend *b, const struct ms_bench_opts *o);

/* Print j as the bench's last line and free it; false when it ran out of
 * memory (said on stderr). */
bool bench_json_line(struct ms_strbuf *j);

/* An issue's target: value against threshold (under it when below_is_good,
 * at most it when at_most too; at least it otherwise). */
struct bench_target {
	const char *name, *json, *unit;
	double value, threshold;
	bool below_is_good, at_most;
	bool pass;
};

/* Sets each pass; the count that pass. */
int bench_targets_judge(struct bench_target *t, int n);
/* The table's lines under "targets (WHAT; informational)": what they measure. */
void bench_targets_print(const char *what, const struct bench_target *t, int n);
/* pass_JSON per target, targets_passed, targets. */
void bench_targets_json(struct ms_strbuf *j, const struct bench_target *t, int n);

#endif
