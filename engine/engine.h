/*
 * engine.h: many requests, one model: continuous batching over a paged KV
 * cache with prefix reuse.
 *
 * A request's life: admission to a bounded queue (full: refused) -> its KV
 * pages reserved for the worst case (prompt + max_tokens), so a running
 * request never runs out of memory mid-way and never disturbs another ->
 * chunked prefill (long prompts take several steps, interleaved with the
 * decodes of running requests) -> decode steps, every running request
 * advancing by one token in one batched forward pass -> finish (stop token,
 * stop string, max tokens, context limit, cancellation) -> pages given back
 * at once (published ones stay cached for prefix reuse until evicted).
 * Nothing is preempted: a running request never waits for memory. The
 * queue is bounded twice (max_queue requests, one KV cache's worth of
 * reservations), so a waiting request waits only for the running ones and
 * at most one cache's turnover ahead of it; beyond that submit refuses.
 *
 * The engine runs on its own thread (ms_engine_start) or is stepped by hand
 * (tests). Callbacks run on the engine thread and must be quick.
 */
#ifndef MS_ENGINE_H
#define MS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv-cache.h"
#include "lm.h"
#include "ms-error.h"
#include "sampler.h"
#include "spec.h"

struct ms_engine;

struct ms_engine_config {
	uint64_t kv_cache_bytes;   /* KV pool size; 0: from kv_tokens */
	int64_t kv_tokens;         /* or a budget in tokens of full context (all layers) */
	int max_queue;             /* waiting requests beyond which submit refuses */
	int max_running;           /* sequences decoding together */
	int64_t max_batch_tokens;  /* tokens per forward pass: decodes + prefill chunks */
	int64_t max_context;       /* prompt + generated, per request (<= max_position_embeddings) */
	bool no_prefix_cache;      /* turn prefix reuse off */
	/* speculative decoding (spec.h): drafted tokens verified in the pass */
	bool spec_off;             /* none (--speculative off) */
	int spec_max_tokens;       /* a draft's length at most; 0: MS_SPEC_DEFAULT_TOKENS */
	int64_t spec_cache_bytes;  /* the shared cache of recent answers; 0: the default, < 0: none */
	const struct ms_drafter *drafter; /* NULL: n-gram drafting */
};

/* Defaults for fields left 0. */
void ms_engine_config_defaults(struct ms_engine_config *c, const struct ms_lm *m);

enum ms_finish {
	MS_FINISH_NONE,
	MS_FINISH_STOP,        /* a stop token or a stop string */
	MS_FINISH_LENGTH,      /* max_tokens */
	MS_FINISH_CONTEXT,     /* the context limit */
	MS_FINISH_CANCELLED,
	MS_FINISH_ERROR,
};

const char *ms_finish_name(enum ms_finish f);

/* A constraint on a request's tokens (tool_choice's forced call; grammars):
 * each token is drawn only from what mask leaves (it sets the banned ones
 * to -INFINITY), applied to the logits after logit_bias and the penalties,
 * before temperature's cuts (top_k, top_p, min_p) and the draw; logprobs
 * stay the model's. The engine makes one state per request at submit
 * (init; NULL: out of memory, the submit is refused), tells it each token
 * drawn (accept) and frees it with the request, all on its own thread but
 * init (the submitter's). arg needs to live only until submit returns:
 * init copies what the state needs. mask must leave some token. */
struct ms_constraint {
	void *(*init)(const void *arg);
	void (*mask)(void *state, float *logits, int64_t vocab);
	void (*accept)(void *state, int32_t token);
	void (*free)(void *state);
	const void *arg;
};

struct ms_request_params {
	struct ms_sampling sampling;
	const struct ms_constraint *constraint;  /* or NULL */
	int64_t max_tokens;            /* 0 allowed: prompt only (prompt logprobs) */
	int64_t min_tokens;            /* no stop id is drawn before this many tokens */
	const int32_t *stop_ids;       /* generation stops after emitting one of these */
	int n_stop_ids;
	const char *const *stop;       /* stop strings, matched on the generated text */
	int n_stop;
	int prompt_logprobs;           /* -1: none; else top-N alternatives for echo */
	bool skip_special;             /* leave special tokens out of the text */
};

enum ms_event_kind {
	MS_EV_PROMPT_TOKEN,   /* one prompt position's logprob (prompt_logprobs >= 0) */
	MS_EV_TOKEN,          /* a generated token and the text it completes */
	MS_EV_FINISH,         /* last event of a request: it is freed right after */
};

struct ms_event {
	enum ms_event_kind kind;
	uint64_t id;
	int32_t token;                       /* PROMPT_TOKEN and TOKEN */
	int64_t index;                       /* position in the prompt / in the output */
	const char *text;                    /* TOKEN: text now safe to emit (may be empty); FINISH: held-back tail */
	size_t text_len;
	const struct ms_token_logprobs *lp;  /* or NULL (first prompt token, logprobs off) */
	enum ms_finish finish;               /* FINISH */
	const char *stop_string;             /* FINISH by a stop string */
	const char *error;                   /* FINISH_ERROR */
	int64_t prompt_tokens, cached_tokens, completion_tokens;
	double queue_s, ttft_s, e2e_s;       /* FINISH: waiting, to first token, submit to finish */
};

typedef void (*ms_engine_cb)(void *ctx, const struct ms_event *ev);

/* The engine drives m (a loaded model's ms_lm, which must outlive it);
 * text may be NULL (no text: events carry token ids only, and stop strings
 * are refused). */
int ms_engine_init(struct ms_engine **out, const struct ms_lm *m, const struct ms_text *text,
		   const struct ms_engine_config *cfg, struct ms_err *err);
/* Cancels what is left (FINISH_CANCELLED events), stops the thread, frees. */
void ms_engine_free(struct ms_engine *e);

/* Run the loop on a thread of its own. */
int ms_engine_start(struct ms_engine *e, struct ms_err *err);

/* Queue a request. Refused (with a reason, nothing queued) when the queue is
 * full (-EBUSY: max_queue requests wait), the queue already holds a whole KV
 * cache's worth of reservations (-EAGAIN: retry later), the prompt plus
 * max_tokens exceed the context (-E2BIG) or the whole KV cache (-ENOSPC:
 * it can never run), a parameter is out of range (-EINVAL), or the model's
 * mapped weights were lost (-EIO: its file shrank; nothing runs again). */
int ms_engine_submit(struct ms_engine *e, const int32_t *prompt, int64_t n_prompt,
		     const struct ms_request_params *p, ms_engine_cb cb, void *ctx, uint64_t *id,
		     struct ms_err *err);

/* Stop request id within one step (any thread); unknown or finished ids
 * are ignored. */
void ms_engine_cancel(struct ms_engine *e, uint64_t id);

/* One scheduling step (for hand-stepped engines). Returns the number of
 * tokens processed (0 when idle), or a negative error. */
int64_t ms_engine_step(struct ms_engine *e, struct ms_err *err);

struct ms_engine_stats {
	int waiting, running;
	int32_t kv_pages, kv_pages_held, kv_pages_cached, kv_pages_reserved;
	uint64_t prefix_hit_pages, evictions;
	uint64_t prompt_tokens, generation_tokens, cached_tokens;
	uint64_t steps;
	double kv_usage;  /* held pages / all pages */
	int retry_after_s; /* a refused request's likely wait (s, 1..60): engine.c's retry_after */
	struct ms_spec_stats spec;
};

void ms_engine_get_stats(struct ms_engine *e, struct ms_engine_stats *s);

/* Check the engine's accounting (tests): every page held is referenced by
 * exactly the sequences that hold it, reservations cover what is held,
 * counts add up. Returns 0 or -EFAULT with the first violation. */
int ms_engine_check(struct ms_engine *e, struct ms_err *err);

/* The context a request may fill, prompt and generation together
 * (ms_engine_config's max_context once defaulted): what a server
 * advertises. */
int64_t ms_engine_max_context(const struct ms_engine *e);

/* KV pages a sequence needs at most for `positions` (the reservation). */
int64_t ms_engine_pages_for(const struct ms_engine *e, int64_t positions);

#endif
