/*
 * bench.c: `moeserve bench`, what the engine does on this machine: load,
 * prefill and decode speed, batching, time to first token, KV and memory
 * use, each measured against a ceiling taken in the same run.
 *
 * Decode on a CPU streams weights. Per step it reads every dense matrix
 * (attention, router, lm_head), one embedding row per token and, per layer,
 * every distinct expert the step's tokens route to. The backend counts the
 * weight bytes its gemms and the MoE really stream (ms_cpu_bytes_streamed);
 * the counter's delta over the measured steps, plus the embedding rows (a
 * lookup, not a gemm), over the step time and over the bandwidth a plain
 * parallel read reaches here, is the roofline share. The static estimate
 * from the tensor groups (uniform routing) is printed next to it.
 *
 * Prefill is compute: its FLOP, counted on the active parameters, per
 * second, against the rate oneDNN's bf16 matmul reaches on the same threads
 * for representative shapes.
 *
 * The bandwidth a decode run is measured against is read between its
 * steps: after every measured step, one parallel read of a 512 MiB buffer
 * (about as long as a step), their bytes over their time. A shared machine's
 * bandwidth drifts (on the VM this was written on, from ~30 to ~65 GB/s
 * within seconds); reads taken in the same moments as the steps compare
 * like with like. The share of the bench's best read (best of 8 passes,
 * before and after each run) is printed beside it. A model smaller than
 * the buffer is measured against the best reads before and after its run
 * (reads between its steps would evict it from the caches).
 *
 * Beside each bandwidth read, the arithmetic the CPUs give at that moment
 * (the bf16 kernel from cache, all threads and one): a step of several
 * tokens is bound by it where the bytes would allow more.
 *
 * Order: the peak RSS of the load; warm-up; decode at 1, 4, 8 and 16
 * sequences, each run between two best-of-8 bandwidth reads and arithmetic
 * probes (the buffer stays resident and is taken out of the RSS);
 * prefill; the peak RSS of the runs; oneDNN right after the prefill; last
 * the optional baseline model, so that it does not count in the RSS.
 *
 * This is the CPU's bench. A backend whose memory is not the host's (a
 * GPU) is measured by bench-device.c instead; the engine runs and the byte
 * model both use are in bench-common.c.
 */
#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sysexits.h>
#include <time.h>

#include "bench-int.h"
#include "cpu.h"
#include "dense-onednn.h"
#include "ms-clock.h"
#include "ms-strbuf.h"

static double peak_rss_bytes(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_maxrss * 1024.0;
}

/* ---- memory bandwidth: every thread sums its share of a big buffer ---- */

/* 32-byte loads, four independent accumulators (server/ is built for
 * generic x86-64; this one function may use AVX2 when the CPU has it). */
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
		a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
		a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	uint64_t s[4];
	_mm256_storeu_si256((__m256i *)s, a0);
	uint64_t t = s[0] + s[1] + s[2] + s[3];
	for (; i < n; i++)
		t += p[i];
	return t;
}

static uint64_t sum_u64(const uint64_t *p, size_t n)
{
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		s0 += p[i];
		s1 += p[i + 1];
		s2 += p[i + 2];
		s3 += p[i + 3];
	}
	for (; i < n; i++)
		s0 += p[i];
	return s0 + s1 + s2 + s3;
}

static void bw_task(void *ctx, int task, int worker)
{
	(void)worker;
	struct bw_job *j = ctx;
	size_t b = (size_t)task * j->per;
	if (b >= j->n)
		return;
	size_t len = b + j->per < j->n ? j->per : j->n - b;
	j->sums[task % 1024] += j->avx2 ? sum_avx2(j->buf + b, len) : sum_u64(j->buf + b, len);
}

/* The buffer: 512 MiB, 16x a 32 MiB last-level cache, filled (so resident)
 * once and kept for every measurement. */
int bench_bw_init(struct bw_job *j, const struct ms_cpu *be)
{
	memset(j, 0, sizeof(*j));
	j->bytes = 512u << 20;
	j->n = j->bytes / sizeof(uint64_t);
	j->buf = malloc(j->bytes);
	if (!j->buf)
		return -ENOMEM;
	for (size_t i = 0; i < j->n; i++)
		j->buf[i] = i;
	j->avx2 = (be->cpu_flags & MS_CPU_AVX2) != 0;
	return 0;
}

/* One parallel read of the whole buffer: its time in seconds. */
double bench_bw_pass(struct ms_cpu *be, struct bw_job *j)
{
	int tasks = be->pool.n_threads * 8;
	j->per = (j->n + (size_t)tasks - 1) / (size_t)tasks;
	double t0 = ms_now_s();
	ms_pool_run(&be->pool, tasks, bw_task, j);
	return ms_now_s() - t0;
}

/* Best of 8 parallel reads of the whole buffer, in bytes/s. */
double bench_bw_measure(struct ms_cpu *be, struct bw_job *j)
{
	int tasks = be->pool.n_threads * 8;
	j->per = (j->n + (size_t)tasks - 1) / (size_t)tasks;
	double best = 0;
	for (int rep = 0; rep < 8; rep++) {
		double t0 = ms_now_s();
		ms_pool_run(&be->pool, tasks, bw_task, j);
		double bw = (double)j->bytes / (ms_now_s() - t0);
		best = bw > best ? bw : best;
	}
	volatile uint64_t sink = j->sums[0];
	(void)sink;
	return best;
}

/* ---- vector arithmetic: the bf16 kernel from cache ---- */

/* A shared machine's arithmetic drifts as its bandwidth does, and not
 * together with it: on the VM this was written on, one thread's vdpbf16ps
 * rate moved between ~140 and ~227 GFLOP/s, and two threads reached 0.9x to
 * 1.6x one thread (vCPUs that share a physical core with each other or with
 * a neighbour). A decode step of several tokens is bound by arithmetic where
 * the bytes would allow more, so each run prints the rate the backend's bf16
 * kernel reaches at 16 tokens on a 256 x 2048 matrix read from cache (L2),
 * on every thread and on the calling thread alone, taken next to the
 * bandwidth reads: what the CPUs gave at that moment. */
struct arith {
	struct ms_wmat w;
	const struct ms_kernel *k;
	void *owned;
	uint16_t *rows;
	float *x, *y;
	void *xq;
};

#define ARITH_ROWS 256
#define ARITH_COLS 2048
#define ARITH_TOKENS 16

static void arith_free(struct arith *a)
{
	if (a->owned && a->k && a->k->pack_free)
		a->k->pack_free(a->owned);
	else
		free(a->owned);
	free(a->rows), free(a->x), free(a->y), free(a->xq);
	memset(a, 0, sizeof(*a));
}

/* -1, with a->k NULL, when the backend has no bf16 kernel it can run this
 * way (the probe is then left out, not an error of the bench). */
static int arith_init(struct arith *a, struct ms_cpu *be)
{
	memset(a, 0, sizeof(*a));
	a->rows = malloc((size_t)ARITH_ROWS * ARITH_COLS * sizeof(uint16_t));
	a->x = malloc((size_t)ARITH_TOKENS * ARITH_COLS * sizeof(float));
	a->y = malloc((size_t)ARITH_TOKENS * ARITH_ROWS * sizeof(float));
	if (!a->rows || !a->x || !a->y) {
		arith_free(a);
		return -1;
	}
	/* random values of either sign (a fixed LCG: the same every run) */
	uint32_t r = 12345;
	for (size_t i = 0; i < (size_t)ARITH_ROWS * ARITH_COLS; i++) {
		r = r * 1664525u + 1013904223u;
		/* bf16 of magnitude 2^-7 to 2^-5 */
		a->rows[i] = (uint16_t)(0x3C00u + (r >> 24) + ((r >> 8) & 0x8000u));
	}
	for (size_t i = 0; i < (size_t)ARITH_TOKENS * ARITH_COLS; i++) {
		r = r * 1664525u + 1013904223u;
		a->x[i] = (float)((int32_t)(r >> 8) - (1 << 23)) / (float)(1 << 23);
	}
	a->w = (struct ms_wmat){.fmt = MS_WFMT_BF16, .rows = ARITH_ROWS, .cols = ARITH_COLS,
				.w = (const uint8_t *)a->rows,
				.row_bytes = ARITH_COLS * sizeof(uint16_t)};
	char why[256];
	struct ms_err err = {0};
	if (ms_cpu_bind(be, &a->w, &a->k, &a->owned, why, sizeof(why), &err) || !a->k ||
	    (a->k->whole && a->k->whole(&a->w, ARITH_TOKENS))) {
		arith_free(a);
		return -1;
	}
	if (a->k->gemmq) {
		a->xq = malloc(a->k->prep_size(&a->w, ARITH_TOKENS));
		if (!a->xq) {
			arith_free(a);
			return -1;
		}
		a->k->prep(&a->w, a->x, ARITH_COLS, ARITH_TOKENS, a->xq);
	}
	return 0;
}

/* One round of 24 products, in GFLOP/s: on the pool, or on the calling
 * thread alone; 0 if the pool's gemm could not run. */
static double arith_round(struct ms_cpu *be, const struct arith *a, bool alone)
{
	double t0 = ms_now_s();
	for (int i = 0; i < 24; i++) {
		if (alone)
			ms_kernel_run(a->k, &a->w, 0, ARITH_ROWS, a->xq, a->x, ARITH_COLS, ARITH_TOKENS,
				      a->y, ARITH_ROWS);
		else if (ms_cpu_gemm(be, a->k, &a->w, a->x, ARITH_TOKENS, a->y, NULL))
			return 0;
	}
	return 2.0 * ARITH_ROWS * ARITH_COLS * ARITH_TOKENS * 24 / (ms_now_s() - t0) / 1e9;
}

/* Best of 5 rounds after a warming one: on the pool (all) and on the
 * calling thread alone, the helpers asleep (one). 0 without a probe. */
static void arith_measure(struct ms_cpu *be, const struct arith *a, double *all, double *one)
{
	double *best[2] = {all, one};
	*all = *one = 0;
	for (int alone = 0; a->k && alone < 2; alone++) {
		if (alone) {
			/* the helpers spin ~50-80 us after a job before they sleep */
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
		for (int rep = 0; rep < 6; rep++) {
			double g = arith_round(be, a, alone);
			if (rep > 0 && g > *best[alone])
				*best[alone] = g;
		}
	}
}

/* ---- engine runs (bench-common.c) with the CPU's probes ---- */

struct cpu_probe {
	struct ms_cpu *be;
	struct bw_job *bwj;
};

static uint64_t cpu_bytes(void *ctx)
{
	return ms_cpu_bytes_streamed(((struct cpu_probe *)ctx)->be);
}

/* One read of the bandwidth buffer after every measured step: the ceiling
 * the machine offered while it ran. */
static void cpu_read_between(void *ctx, struct run_stats *st)
{
	struct cpu_probe *p = ctx;
	if (p->bwj) {
		st->bw_secs += bench_bw_pass(p->be, p->bwj);
		st->bw_bytes += (double)p->bwj->bytes;
	}
}

/* bench_run with the backend's byte counter and, with bwj, a bandwidth read
 * between the measured steps. */
static int run(struct ms_model *m, struct ms_cpu *be, int n_seq, int64_t prompt_len,
	       int64_t gen, struct bw_job *bwj, struct run_stats *st, struct ms_err *err)
{
	struct cpu_probe cp = {be, bwj};
	struct bench_probe p = {cpu_bytes, cpu_read_between, &cp};
	return bench_run(m, n_seq, prompt_len, gen, &p, st, err);
}

/* ---- the in-process baseline: same model, another kernel set ---- */

struct baseline {
	double load_s;
	struct decode d1, d8;
};

static int run_baseline(const struct ms_bench_opts *o, struct ms_cpu *be, double bw,
			struct baseline *b, struct ms_err *err)
{
	struct ms_cpu bb;
	struct ms_cpu_opts bo = {.kernels = o->baseline, .threads = be->pool.n_threads,
				     .exact = be->exact};
	int rc = ms_cpu_init_opts(&bb, &bo, err);
	if (rc)
		return rc;
	ms_cpu_set_numa(&bb, be->numa_interleave ? MS_NUMA_INTERLEAVE : MS_NUMA_OFF);
	struct ms_model bm;
	double t0 = ms_now_s();
	rc = ms_model_load(&bm, o->model, ms_cpu_backend(&bb), err);
	b->load_s = ms_now_s() - t0;
	if (!rc) {
		int64_t gen = o->baseline_tokens > 0 ? o->baseline_tokens : o->decode_tokens / 2;
		gen = gen < 3 ? 3 : gen;
		struct wbytes w = bench_weight_bytes(&bm);
		struct run_stats st;
		int64_t pl = bench_decode_prompt(o);
		rc = run(&bm, &bb, 1, pl, 2, NULL, &st, err); /* warm-up */
		if (!rc && !(rc = run(&bm, &bb, 1, pl, gen, NULL, &st, err)))
			bench_decode_figures(&bm, &w, &st, 1, bw, bw, &b->d1);
		if (!rc && !(rc = run(&bm, &bb, 8, pl, gen, NULL, &st, err)))
			bench_decode_figures(&bm, &w, &st, 8, bw, bw, &b->d8);
		ms_model_free(&bm);
	}
	ms_cpu_free(&bb);
	return rc;
}

/* ---- the runs ---- */

static const int batch[4] = {1, 4, 8, 16};

/* What the runs measured: decode at each batch between bandwidth reads and
 * arithmetic probes (reads and probes i and i + 1 bracket run i), the
 * prefill, the peak RSS. */
struct runs {
	struct run_stats pre, st[4];
	double bws[5], ar_all[5], ar_one[5];
	double rss;
};

/* Refuse an unknown or unsupported baseline set now, not after the runs. */
static int check_baseline(const struct ms_bench_opts *o)
{
	if (!o->baseline)
		return EX_OK;
	struct ms_err err = {0};
	struct ms_cpu tb;
	struct ms_cpu_opts tbo = {.kernels = o->baseline, .threads = 1};
	if (ms_cpu_init_opts(&tb, &tbo, &err)) {
		fprintf(stderr, "moeserve: error: bench --baseline: %s\n", err.msg);
		return EX_USAGE;
	}
	ms_cpu_free(&tb);
	return EX_OK;
}

/* Warm-up, the decode runs, the prefill; an exit status. load_rss: the
 * peak RSS of the load. */
static int measure(struct ms_model *m, struct ms_cpu *be, const struct ms_bench_opts *o,
		   const struct wbytes *w, double load_rss, struct runs *r)
{
	struct ms_err err = {0};
	memset(r, 0, sizeof(*r));
	/* The bandwidth buffer stays resident through the runs, so that each
	 * decode run is measured against reads taken right before and after it
	 * (a shared machine's bandwidth drifts); its bytes are taken out of the
	 * peak RSS below. */
	static struct bw_job bwj;
	if (bench_bw_init(&bwj, be)) {
		fprintf(stderr, "moeserve: error: bench: out of memory for the bandwidth buffer\n");
		return EX_OSERR;
	}
	struct run_stats warm;
	struct arith ar;
	(void)arith_init(&ar, be); /* none: ar.k NULL, the probe left out */
	/* warm-up: fault in the weights a forward pass uses (a short prompt
	 * routes to nearly every expert) and the scratch buffers */
	int64_t warm_len = o->prompt_tokens < 32 ? o->prompt_tokens : 32;
	/* Reads between the steps only for a model larger than the buffer:
	 * its steps stream from DRAM anyway, while a smaller one would be
	 * evicted from the caches by every read and measured slower than it
	 * runs (its roofline share says little either way). */
	struct bw_job *between = w->total >= (double)bwj.bytes ? &bwj : NULL;
	int rc = run(m, be, 1, warm_len, 2, NULL, &warm, &err);
	for (int i = 0; !rc && i < 4; i++) {
		r->bws[i] = bench_bw_measure(be, &bwj);
		arith_measure(be, &ar, &r->ar_all[i], &r->ar_one[i]);
		rc = run(m, be, batch[i], bench_decode_prompt(o), o->decode_tokens, between, &r->st[i],
			 &err);
	}
	if (!rc) {
		r->bws[4] = bench_bw_measure(be, &bwj);
		arith_measure(be, &ar, &r->ar_all[4], &r->ar_one[4]);
		rc = run(m, be, 1, o->prompt_tokens, 2, NULL, &r->pre, &err);
	}
	/* peak RSS of the model and the runs: from the load, or later less the
	 * bandwidth buffer (resident since before the first run) */
	double rss = peak_rss_bytes() - (double)bwj.bytes;
	r->rss = rss > load_rss ? rss : load_rss;
	free(bwj.buf);
	arith_free(&ar);
	if (rc) {
		fprintf(stderr, "moeserve: error: bench: %s\n", err.msg);
		return EX_SOFTWARE;
	}
	return EX_OK;
}

/* ---- the figures ---- */

/* Everything the table and the JSON line print. */
struct report {
	int threads;
	struct wbytes w;
	double load_rss, rss, rss_ratio;
	double bw, bw_min;          /* the best and the worst bandwidth read */
	struct decode d[4];
	double ttft, prefill_tps, fpt, prefill_gflops;
	int64_t H, I2;              /* the oneDNN shapes' N */
	struct ms_onednn_rate dh, df;
	double onednn, prefill_ratio;
	struct baseline base;
	bool have_base;
	double sp1, sp8;            /* decode speedups over the baseline, batch 1 and 8 */
	struct bench_kv kv;
	struct bench_target tg[6];
	int n_tg, n_pass;
	struct bench_ctx ctx[MS_BENCH_MAX_CONTEXTS]; /* --context */
	int n_ctx;
};

static void decode_report(const struct ms_model *m, const struct runs *r, struct report *p)
{
	p->bw = 0, p->bw_min = 1e300;
	for (int i = 0; i < 5; i++) {
		p->bw = r->bws[i] > p->bw ? r->bws[i] : p->bw;
		p->bw_min = r->bws[i] < p->bw_min ? r->bws[i] : p->bw_min;
	}
	for (int i = 0; i < 4; i++) {
		struct decode *d = &p->d[i];
		bench_decode_figures(m, &p->w, &r->st[i], batch[i],
			       r->bws[i] > r->bws[i + 1] ? r->bws[i] : r->bws[i + 1], p->bw, d);
		/* the arithmetic next to the run: the better of before and after */
		d->ar_all = r->ar_all[i] > r->ar_all[i + 1] ? r->ar_all[i] : r->ar_all[i + 1];
		d->ar_one = r->ar_one[i] > r->ar_one[i + 1] ? r->ar_one[i] : r->ar_one[i + 1];
	}
}

static void prefill_report(const struct ms_model *m, struct ms_cpu *be,
			   const struct ms_bench_opts *o, const struct runs *r, struct report *p)
{
	p->ttft = r->pre.ttft;
	p->prefill_tps = p->ttft > 0 ? (double)o->prompt_tokens / p->ttft : 0;
	p->fpt = bench_flop_per_token(m);
	double head_flop = 2.0 * (double)m->cfg.vocab * (double)m->cfg.hidden;
	p->prefill_gflops = p->ttft > 0 ? (p->fpt * (double)o->prompt_tokens + head_flop) / p->ttft / 1e9
					: 0;
	/* oneDNN on the prefill's shapes: M = 512 rows, K = hidden, N = hidden
	 * (attention-like) and N = 2 x intermediate (gate_up); FLOP-weighted */
	int64_t H = m->cfg.hidden, I2 = 2 * m->cfg.intermediate;
	p->H = H, p->I2 = I2;
	ms_dense_onednn_ceiling(&be->pool, 512, H, H, &p->dh);
	ms_dense_onednn_ceiling(&be->pool, 512, H, I2, &p->df);
	p->onednn = 0;
	if (p->dh.gflops > 0 && p->df.gflops > 0) {
		double fh = 2.0 * 512 * (double)H * (double)H, ff = 2.0 * 512 * (double)H * (double)I2;
		p->onednn = (fh + ff) / 1e9 / (fh / 1e9 / p->dh.gflops + ff / 1e9 / p->df.gflops);
	}
	p->prefill_ratio = p->onednn > 0 ? p->prefill_gflops / p->onednn : 0;
}

/* --context: decode and prefill at depth, against the runs above. */
static int context_report(struct ms_model *m, struct ms_cpu *be, const struct ms_bench_opts *o,
			  struct report *p)
{
	struct cpu_probe cp = {be, NULL};
	struct bench_probe probe = {cpu_bytes, NULL, &cp};
	struct bench_short s = {{p->d[0].tps, p->d[2].tps}, p->prefill_tps, p->bw};
	struct ms_err err = {0};
	if (bench_contexts(m, o, &p->w, &probe, &s, p->ctx, &err)) {
		fprintf(stderr, "moeserve: error: bench: %s\n", err.msg);
		return EX_SOFTWARE;
	}
	p->n_ctx = o->n_contexts;
	return EX_OK;
}

static void baseline_report(const struct ms_bench_opts *o, struct ms_cpu *be, struct report *p)
{
	if (!o->baseline)
		return;
	struct ms_err err = {0};
	if (run_baseline(o, be, p->bw, &p->base, &err))
		fprintf(stderr, "moeserve: error: bench --baseline %s: %s\n", o->baseline, err.msg);
	else
		p->have_base = true;
	p->sp1 = p->have_base && p->base.d1.tps > 0 ? p->d[0].tps / p->base.d1.tps : 0;
	p->sp8 = p->have_base && p->base.d8.tps > 0 ? p->d[2].tps / p->base.d8.tps : 0;
}

static void targets(const struct ms_bench_opts *o, struct report *p)
{
	const struct bench_target tg[] = {
		{"decode batch 1, roofline share", "decode_b1", "", p->d[0].share, 0.85, false, false, false},
		{"decode batch 8, roofline share", "decode_b8", "", p->d[2].share, 0.75, false, false, false},
		{"decode batch 16, roofline share", "decode_b16", "", p->d[3].share, 0.75, false, false, false},
		{"prefill GFLOP/s over oneDNN's", "prefill", "", p->prefill_ratio, 0.50, false, false, false},
		{"load time, repacking included", "load_time", " s", o->load_seconds, 10.0, true, false, false},
		{"peak RSS over resident weights", "load_rss", "", p->rss_ratio, 1.2, true, false, false},
	};
	_Static_assert(sizeof(tg) == sizeof(p->tg), "report.tg is the targets' size");
	memcpy(p->tg, tg, sizeof(tg));
	p->n_tg = (int)(sizeof(tg) / sizeof(tg[0]));
	p->n_pass = bench_targets_judge(p->tg, p->n_tg);
}

/* ---- the table ---- */

static void print_decode(const struct ms_model *m, const struct report *p)
{
	for (int i = 0; i < 4; i++) {
		const struct decode *d = &p->d[i];
		printf("  decode, batch %-2d                     %10.1f tokens/s  %8.2f ms/step\n",
		       d->n, d->tps, d->step_s * 1e3);
		printf("    weight bytes per step (%s)    %10.1f MB  (static estimate %.1f MB)\n",
		       d->counted ? "counted" : "static ", d->bytes / 1e6, d->bytes_static / 1e6);
		printf("    distinct experts per layer         %10.2f     (uniform routing %.2f)\n",
		       d->experts, bench_distinct_experts(m, d->n));
		printf("    roofline share                     %10.3f     (static estimate %.3f; at %.2f GB/s,\n"
		       "                                                  %s; %.3f of the peak)\n",
		       d->share, d->share_static, d->bw / 1e9,
		       d->between ? "read between its steps" : "best read next to the run",
		       d->share_peak);
		if (d->ar_all > 0)
			printf("    arithmetic next to the run         %10.1f GFLOP/s  (bf16, %d tokens, from "
			       "cache; one thread %.1f%s)\n",
			       d->ar_all, ARITH_TOKENS, d->ar_one,
			       p->threads > 1 && d->ar_all < 1.2 * d->ar_one ?
				       ": the threads share their arithmetic, several tokens a step are "
				       "bound by it" : "");
	}
}

static void print_table(const struct ms_model *m, const struct ms_cpu *be,
			const struct ms_bench_opts *o, const struct report *p)
{
	printf("moeserve bench: %s (%s kernels, %d threads)\n", o->model, be->isa, p->threads);
	printf("  load, repacking included             %10.3f s\n", o->load_seconds);
	printf("  peak RSS after load                  %10.1f MiB\n", p->load_rss / 1048576.0);
	printf("  resident weight bytes (repacked)     %10.1f MiB\n", p->w.total / 1048576.0);
	printf("  memory bandwidth (parallel read)     %10.2f GB/s  (%.2f to %.2f over the run)\n",
	       p->bw / 1e9, p->bw_min / 1e9, p->bw / 1e9);
	printf("  prefill (%lld-token prompt)           %10.1f tokens/s\n",
	       (long long)o->prompt_tokens, p->prefill_tps);
	printf("    FLOP per token (active params)     %10.1f MFLOP\n", p->fpt / 1e6);
	printf("    achieved                           %10.1f GFLOP/s\n", p->prefill_gflops);
	if (p->onednn > 0) {
		printf("    oneDNN bf16 matmul 512x%lldx%lld    %10.1f GFLOP/s\n", (long long)p->H,
		       (long long)p->H, p->dh.gflops);
		printf("    oneDNN bf16 matmul 512x%lldx%lld    %10.1f GFLOP/s  (%s)\n", (long long)p->H,
		       (long long)p->I2, p->df.gflops, p->df.why);
		printf("    share of oneDNN's rate             %10.3f\n", p->prefill_ratio);
	} else {
		printf("    oneDNN matmul                      unavailable: %s\n",
		       p->dh.why[0] ? p->dh.why : p->df.why);
	}
	printf("  time to first token                  %10.4f s\n", p->ttft);
	print_decode(m, p);
	bench_contexts_print(p->ctx, p->n_ctx, o->prompt_tokens);
	bench_kv_print(&p->kv);
	printf("  peak RSS (load and runs)             %10.1f MiB\n", p->rss / 1048576.0);
	if (p->have_base) {
		printf("  baseline: %s kernels (loaded in %.2f s)\n", o->baseline, p->base.load_s);
		printf("    decode, batch 1                    %10.1f tokens/s  speedup %.2fx\n",
		       p->base.d1.tps, p->sp1);
		printf("    decode, batch 8                    %10.1f tokens/s  speedup %.2fx\n",
		       p->base.d8.tps, p->sp8);
	}
	bench_targets_print("speed", p->tg, p->n_tg);
	bench_contexts_targets_print(p->ctx, p->n_ctx);
}

/* ---- the JSON line (writers in bench-int.h) ---- */

/* The original keys, then load and decode at batch 1. */
static void json_head(struct ms_strbuf *j, const struct ms_cpu *be,
		      const struct ms_bench_opts *o, const struct report *p)
{
	const struct decode *d = &p->d[0];
	jnum(j, "prefill_tokens_per_s", p->prefill_tps, 3);
	jnum(j, "decode_tokens_per_s", d->tps, 3);
	jnum(j, "decode_roofline_share", d->share, 4);
	jnum(j, "batch4_tokens_per_s", p->d[1].tps, 3);
	jnum(j, "batch8_tokens_per_s", p->d[2].tps, 3);
	jnum(j, "batch16_tokens_per_s", p->d[3].tps, 3);
	jnum(j, "ttft_s", p->ttft, 6);
	bench_kv_json(j, &p->kv);
	jnum(j, "peak_rss_bytes", p->rss, 0);
	jnum(j, "bandwidth_bytes_per_s", p->bw, 0);
	jnum(j, "weight_bytes_per_token", d->bytes_static, 0);
	jint(j, "threads", p->threads);
	jstr(j, "kernels", be->isa);
	jnum(j, "load_s", o->load_seconds, 4);
	jnum(j, "load_peak_rss_bytes", p->load_rss, 0);
	jnum(j, "weight_bytes", p->w.total, 0);
	jnum(j, "peak_rss_over_weight_bytes", p->rss_ratio, 4);
	jstr(j, "bytes_source", d->counted ? "counter" : "static");
	jnum(j, "decode_step_s", d->step_s, 6);
	jnum(j, "decode_bytes_per_token", d->bytes, 0);
	jnum(j, "decode_roofline_share_static", d->share_static, 4);
	jnum(j, "decode_experts_per_layer", d->experts, 3);
	jnum(j, "decode_bandwidth_bytes_per_s", d->bw, 0);
	jnum(j, "decode_roofline_share_of_peak", d->share_peak, 4);
	jnum(j, "decode_arith_gflops", d->ar_all, 1);
	jnum(j, "decode_arith_gflops_1thread", d->ar_one, 1);
	jnum(j, "bandwidth_min_bytes_per_s", p->bw_min, 0);
}

/* Decode at the other batches, prefill, the baseline, the targets. */
static void json_tail(struct ms_strbuf *j, const struct ms_bench_opts *o, const struct report *p)
{
	for (int i = 1; i < 4; i++) {
		const struct decode *d = &p->d[i];
		jnum_batch(j, d->n, "step_s", d->step_s, 6);
		jnum_batch(j, d->n, "bytes_per_step", d->bytes, 0);
		jnum_batch(j, d->n, "bytes_per_step_static", d->bytes_static, 0);
		jnum_batch(j, d->n, "experts_per_layer", d->experts, 3);
		jnum_batch(j, d->n, "roofline_share", d->share, 4);
		jnum_batch(j, d->n, "bandwidth_bytes_per_s", d->bw, 0);
		jnum_batch(j, d->n, "roofline_share_of_peak", d->share_peak, 4);
		jnum_batch(j, d->n, "arith_gflops", d->ar_all, 1);
		jnum_batch(j, d->n, "arith_gflops_1thread", d->ar_one, 1);
	}
	jint(j, "prefill_tokens", (long long)o->prompt_tokens);
	jnum(j, "prefill_flop_per_token", p->fpt, 0);
	jnum(j, "prefill_gflops", p->prefill_gflops, 3);
	jnum(j, "onednn_gflops", p->onednn, 3);
	jnum(j, "onednn_gflops_hidden", p->dh.gflops, 3);
	jnum(j, "onednn_gflops_gate_up", p->df.gflops, 3);
	jnum(j, "prefill_over_onednn", p->prefill_ratio, 4);
	if (p->have_base) {
		jstr(j, "baseline_kernels", o->baseline);
		jnum(j, "baseline_load_s", p->base.load_s, 4);
		jnum(j, "baseline_decode_tokens_per_s", p->base.d1.tps, 3);
		jnum(j, "baseline_batch8_tokens_per_s", p->base.d8.tps, 3);
		jnum(j, "speedup_decode", p->sp1, 3);
		jnum(j, "speedup_batch8", p->sp8, 3);
	}
	bench_contexts_json(j, p->ctx, p->n_ctx);
	bench_targets_json(j, p->tg, p->n_tg);
}

/* The one JSON line, whole or not at all. */
static bool print_json(const struct ms_cpu *be, const struct ms_bench_opts *o,
		       const struct report *p)
{
	struct ms_strbuf j = {0};
	ms_strbuf_str(&j, "{");
	json_head(&j, be, o, p);
	json_tail(&j, o, p);
	ms_strbuf_str(&j, "}");
	return bench_json_line(&j);
}

int ms_cmd_bench(struct ms_model *m, struct ms_backend *b, const struct ms_bench_opts *o)
{
	/* structured outputs: the engine's runs, on any backend */
	if (o->structured)
		return bench_structured(m, o);
	if (o->speculative)
		return bench_speculative(m, b, o);
	/* A GPU's memory is its own: its bandwidth is its copy kernel's, and
	 * its bench is bench-device.c's. */
	if (!b->host && o->n_contexts) {
		fprintf(stderr, "moeserve: error: bench --context measures the cpu backend only (this "
			"is %s)\n", b->name);
		return EX_USAGE;
	}
	if (!b->host)
		return bench_device(m, b, o);
	/* The roofline and the baseline are the CPU's: its bandwidth probe and
	 * its kernel sets. */
	struct ms_cpu *be = ms_cpu_from(b);
	if (!be) {
		fprintf(stderr, "moeserve: error: bench measures the cpu backend (this is %s)\n",
			b->name);
		return EX_USAGE;
	}
	if (o->attention)
		return bench_attention(m, b, o);
	struct report p = {.threads = be->pool.n_threads};
	/* nothing has run since the caller loaded the model */
	p.load_rss = peak_rss_bytes();
	int ex = check_baseline(o);
	if (ex)
		return ex;
	p.w = bench_weight_bytes(m);
	struct runs r;
	if ((ex = measure(m, be, o, &p.w, p.load_rss, &r)))
		return ex;
	p.rss = r.rss;
	decode_report(m, &r, &p);
	prefill_report(m, be, o, &r, &p);
	baseline_report(o, be, &p);
	if ((ex = context_report(m, be, o, &p)))
		return ex;
	bench_kv_figures(m, &p.kv);
	p.rss_ratio = p.w.total > 0 ? p.rss / p.w.total : 0;
	targets(o, &p);
	if (!o->json_only)
		print_table(m, be, o, &p);
	if (!print_json(be, o, &p))
		return EX_OSERR;
	return p.have_base || !o->baseline ? EX_OK : EX_SOFTWARE;
}
