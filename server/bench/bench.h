/* bench.h: `moeserve bench` (see bench.c). */
#ifndef MS_BENCH_H
#define MS_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

#define MS_BENCH_MAX_CONTEXTS 4

struct ms_bench_opts {
	const char *model;
	int64_t prompt_tokens;    /* prefill prompt (512) */
	int64_t decode_tokens;    /* tokens per decode run */
	bool json_only;
	double load_seconds;      /* the caller's ms_model_load, repacking included */
	const char *baseline;     /* kernel set for an in-process baseline, or NULL */
	int64_t baseline_tokens;  /* decode tokens per baseline run (0: decode_tokens / 2) */
	bool structured;          /* grammars, masks, constrained decode instead */
	const char *tokenizer;    /* --structured: the vocabulary (NULL: the model's) */
	int64_t contexts[MS_BENCH_MAX_CONTEXTS]; /* --context: decode at these depths too */
	int n_contexts;
	bool attention;           /* only one layer's attention at those depths */
	bool speculative;         /* speculative decoding on and off: repeat, acceptance sweep, no match */
};

/* Runs everything and prints a table and one JSON line; returns an exit
 * status. */
int ms_cmd_bench(struct ms_model *m, struct ms_backend *be, const struct ms_bench_opts *o);

#endif
