/*
 * spec.h: speculative decoding without a draft model: what to draft and
 * how much.
 *
 * A decoding request's draft (ngram.h: its own tokens and the shared cache
 * of recent answers, or a caller's struct ms_drafter) runs as extra
 * positions of the batched forward pass; the engine then draws each
 * position's token with the request's sampler and keeps the drafted tokens
 * up to the first draw that differs (engine.c). How many tokens each
 * request drafts in a step is chosen here, to maximize the tokens a step
 * is expected to give per second of the pass:
 *
 *   value of a request's j-th drafted token = conf_j * a^(j+1), where conf
 *     is the drafter's confidence and a the request's acceptance so far
 *     (accepted / tried positions, recent steps weighted more, starting
 *     from the engine-wide rate);
 *   cost of a pass of n tokens = what decode steps of n tokens took on
 *     this machine and model (learned online; unmeasured sizes
 *     interpolated, and above the largest seen grown as steps with prompt
 *     chunks grow, an optimistic guess that gets drafts of that size
 *     tried and measured; an optimistic prior slope where nothing is
 *     known);
 *   the drafted tokens of all requests are taken in order of value and the
 *     count with the best (expected tokens) / cost is kept, so drafts that
 *     keep failing, or a batch large enough that a pass is no longer bound
 *     by reading the weights, draft nothing.
 * Only the engine thread uses a struct ms_spec.
 */
#ifndef MS_SPEC_H
#define MS_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "ms-error.h"
#include "ngram.h"

#define MS_SPEC_MAX_TOKENS 64          /* a draft's length at most */
#define MS_SPEC_DEFAULT_TOKENS 32      /* --spec-max-tokens when not set */
#define MS_SPEC_DEFAULT_CACHE (64ull << 20) /* --spec-cache-bytes when not set */

/* Drafts from elsewhere than the n-gram indexes (the bench's acceptance
 * sweep, tests): up to max tokens to follow t[0..n) of request id. */
struct ms_drafter {
	int (*draft)(void *ctx, uint64_t id, const int32_t *t, int64_t n, int32_t *out, int max);
	void *ctx;
	bool run_all;  /* run every drafted token, whatever it is worth (tests of
			* verification, apart from the choice of lengths) */
};

struct ms_spec_config {
	bool off;                      /* no speculation at all */
	int max_tokens;                /* 1..MS_SPEC_MAX_TOKENS */
	uint64_t cache_bytes;          /* the shared cache; 0: none */
	const struct ms_drafter *drafter; /* or NULL: ngram.h */
};

/* Counters, as /metrics shows them. */
struct ms_spec_stats {
	uint64_t drafts, draft_tokens, accepted;
	uint64_t accepted_at[MS_SPEC_MAX_TOKENS]; /* drafts whose j-th token was kept */
	uint64_t cache_bytes, cache_tokens;       /* the shared cache's size, tokens added */
	uint64_t index_bytes;                     /* the running requests' own indexes */
};

/* One request's side. */
struct ms_spec_req {
	struct ms_ngram own;
	int32_t *draft;                /* [max_tokens] this step's proposal */
	float *value;                  /* [max_tokens] each drafted token's expected worth */
	int n_prop, n_draft;           /* proposed; chosen to run */
	double acc, tried;             /* recent accepted / tried positions */
};

struct ms_spec {
	struct ms_spec_config cfg;
	struct ms_ngram_cache cache;
	int64_t n_max;                 /* the largest pass */
	double *cost;                  /* [n_max + 1] seconds of a decode step of n tokens; 0: not seen */
	double *est;                   /* [n_max + 1] the estimate for every n (dirty: to redo) */
	double *cost_all, *est_all;    /* the same over all steps, prompt chunks included */
	int warmup;                    /* steps not measured so far */
	bool dirty;
	int *taken;                    /* [max_reqs] scratch of ms_spec_choose */
	int max_reqs;
	double rate;                   /* the engine-wide acceptance */
	struct ms_spec_stats stats;
};

/* For passes of at most n_max tokens and max_reqs drafting requests. */
int ms_spec_init(struct ms_spec *s, const struct ms_spec_config *cfg, int64_t n_max, int max_reqs,
		 struct ms_err *err);
void ms_spec_free(struct ms_spec *s);

int ms_spec_req_init(struct ms_spec_req *r, const struct ms_spec *s);
void ms_spec_req_free(struct ms_spec *s, struct ms_spec_req *r);

/* Propose r's draft after t[0..n) (request id), at most max tokens. */
void ms_spec_propose(struct ms_spec *s, struct ms_spec_req *r, uint64_t id, const int32_t *t,
		     int64_t n, int max);

/* Choose n_draft for each of the n (<= max_reqs) proposals in reqs, in a pass that
 * already has n0 tokens worth base expected tokens, at most budget more. */
void ms_spec_choose(struct ms_spec *s, struct ms_spec_req *const *reqs, int n, int64_t n0,
		    double base, int64_t budget);

/* r's draft of n_draft tokens kept its first `kept`; `tried` positions
 * were decided (kept, and the one that differed unless the request
 * finished first). */
void ms_spec_verified(struct ms_spec *s, struct ms_spec_req *r, int kept, int tried);

/* A step of n tokens (some of a prompt: prompt) took seconds. */
void ms_spec_record(struct ms_spec *s, int64_t n, bool prompt, double seconds);
/* What a pass of n tokens is expected to take (seconds, or prior units
 * before any pass was seen). */
double ms_spec_cost(const struct ms_spec *s, int64_t n);

/* A finished request's tokens (n_prompt of them its prompt) for the
 * shared cache. */
void ms_spec_finished(struct ms_spec *s, const int32_t *t, int64_t n_prompt, int64_t n);

#endif
