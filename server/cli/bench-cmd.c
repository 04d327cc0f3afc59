/*
 * bench-cmd.c: the command line of `moeserve bench`: its options (from the
 * table) into the bench's (server/bench/bench.h), the model loaded the one
 * way every command loads it, and the load timed; server/bench runs the
 * measurements.
 */
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "load.h"

/* The bench options that do not go together. */
static int bench_opts_check(const struct ms_bench_opts *bo)
{
	if (bo->tokenizer && !bo->structured)
		return ms_cli_usage("bench", "%s", "--tokenizer goes with --structured");
	if (bo->structured && bo->baseline)
		return ms_cli_usage("bench", "%s", "--baseline does not go with --structured");
	if (bo->structured && bo->n_contexts)
		return ms_cli_usage("bench", "%s", "--context does not go with --structured");
	if (bo->attention && (!bo->n_contexts || bo->structured || bo->baseline))
		return ms_cli_usage("bench", "%s", "--attention needs --context and goes with neither "
				    "--structured nor --baseline");
	return 0;
}

/* The table's fields into the bench's (0: the backend's default, chosen
 * once it is open). */
static void bench_opts(const struct ms_cli_options *o, const char *model, struct ms_bench_opts *bo)
{
	const struct ms_cli_bench *b = &o->bench;
	*bo = (struct ms_bench_opts){
		.model = model, .prompt_tokens = b->prompt_tokens, .decode_tokens = b->decode_tokens,
		.json_only = b->json, .baseline = b->baseline, .baseline_tokens = b->baseline_tokens,
		.structured = b->structured, .tokenizer = b->tokenizer, .attention = b->attention,
		.n_contexts = b->contexts.n, .speculative = b->speculative,
	};
	memcpy(bo->contexts, b->contexts.v, sizeof(bo->contexts));
}

/* Defaults that need the backend and the model; EX_USAGE for a --context
 * the model's context cannot hold. */
static int bench_fit(struct ms_bench_opts *bo, const struct ms_cli_model *lm)
{
	const struct ms_model *m = &lm->m;
	/* rocm-sim runs the kernels on a host model of the GPU, thousands of
	 * times slower than one: defaults that finish in seconds */
	bool sim = !strcmp(lm->be->name, "rocm-sim");
	if (!bo->prompt_tokens)
		bo->prompt_tokens = sim ? 8 : 512;
	if (!bo->decode_tokens)
		bo->decode_tokens = sim ? 3 : 32;
	if (bo->prompt_tokens + 2 > m->cfg.max_pos)
		bo->prompt_tokens = m->cfg.max_pos - 2;
	for (int i = 0; i < bo->n_contexts; i++)
		if (bo->contexts[i] + bo->decode_tokens + 2 > m->cfg.max_pos) {
			fprintf(stderr, "moeserve: error: bench --context %lld: with %lld decode tokens "
				"it passes the model's context of %lld positions\n",
				(long long)bo->contexts[i], (long long)bo->decode_tokens,
				(long long)m->cfg.max_pos);
			return EX_USAGE;
		}
	return EX_OK;
}

/* Load (timed), fit, run; an exit status. */
static int bench(struct ms_cli_options *o, struct ms_bench_opts *bo)
{
	struct ms_cli_model lm;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ex = ms_cli_load(o, bo->model, &lm);
	if (ex)
		return ex;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	bo->load_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	ex = bench_fit(bo, &lm);
	if (ex == EX_OK)
		ex = ms_cmd_bench(&lm.m, lm.be, bo);
	ms_cli_model_free(&lm);
	return ex;
}

int ms_cmd_bench_main(int argc, char **argv)
{
	struct ms_cli_options o;
	int ex = ms_cli_parse(MS_CLI_BENCH, argc, argv, &o);
	if (ex != MS_CLI_GO_ON)
		return ex;
	struct ms_bench_opts bo;
	bench_opts(&o, o.s.model ? o.s.model : ms_cli_default_model(), &bo);
	ex = bench_opts_check(&bo);
	if (!ex)
		ex = bench(&o, &bo);
	ms_cli_options_free(&o);
	return ex;
}
