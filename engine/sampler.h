/*
 * sampler.h: choosing the next token from a request's logits, the logprobs
 * reported with it, and stop strings matched on the generated text.
 *
 * Three pieces, each with an init/free pair and no global state:
 *
 *   struct ms_rng        xoshiro256** seeded through splitmix64; one per
 *                        request, so a request's tokens depend only on its
 *                        seed and its own logits, never on its neighbours in
 *                        the batch.
 *   struct ms_sampler    per-request state: the parameters (validated by
 *                        ms_sampling_check), the RNG and the tokens seen so far
 *                        (for the penalties) in a small open-addressing map:
 *                        memory grows with the number of distinct tokens, not
 *                        with the vocabulary.
 *   struct ms_stopper    stop strings with holdback: the caller feeds decoded
 *                        text and gets back exactly the bytes that are safe to
 *                        send.
 *
 * The transforms, in the order ms_sampler_sample applies them (z is the
 * logit of one token):
 *
 *   1. logit_bias          z += bias[id]                 (OpenAI; -100 bans, +100 forces in practice)
 *   2. repetition_penalty  z = z > 0 ? z / r : z * r     (HF / vLLM; every token of prompt and output)
 *   3. presence, frequency z -= p * (c > 0) + f * c      (OpenAI; c = times generated, output only)
 *   4. temperature         t < 1e-5: argmax, ties to the lowest id (vLLM's
 *                          greedy threshold: dividing by less overflows float);
 *                          else z /= t
 *   5. top_k               keep the k largest (ties: lowest ids first)
 *   6. top_p               keep the smallest prefix of the descending order
 *                          (ties: lowest ids first) whose mass reaches top_p,
 *                          at least one token; a mass within 1e-6 of top_p
 *                          counts as reaching it, so that a nucleus that is
 *                          exact on paper does not depend on float rounding
 *   7. min_p               drop tokens with p < min_p * p_max (p_max kept)
 *   8. draw                inverse CDF over the survivors with the request's RNG
 *
 * Bias first: it is the caller's hard constraint, and the penalties act on
 * what the caller asked for. Penalties before temperature: OpenAI and HF
 * define them on logits, independent of how peaked the distribution is made.
 * Temperature before the truncations: top_p and min_p then cut the
 * distribution that is actually sampled (vLLM). top_k, top_p, min_p in
 * llama.cpp's order: each only removes tokens, top_p measures mass within
 * top_k's survivors, and p_max is never removed, so min_p's threshold does not
 * depend on the earlier cuts.
 *
 * Efficiency (vocab 201088; about 0.5 ms a token for top_p 0.9, 0.15 ms for
 * top_k 50 on one core): never a sort of the vocabulary.
 *   - top_k <= 1024: one pass with a k-entry heap (on the stack), then the k
 *     survivors are sorted and finished as a list (top_p a prefix sum).
 *   - top_p: tokens below (1 - top_p) * mass / (vocab - 1) cannot be in the
 *     nucleus; when at most 1024 remain they are sorted as a list, else a
 *     three-pass radix select on the float bits (11/11/10-bit digits, mass
 *     per bucket) finds the boundary value; the same select (counts) serves
 *     a top_k above 1024.
 *   - the passes over the vocabulary use 16-byte vector extensions (SSE2 /
 *     NEON, no ISA flag) with a vector exp (Cephes' expf, within 2 ulp,
 *     exactly 1 at the argmax); the draw finds its block of ids from 256
 *     block sums and scans one block.
 * Which path ran changes the order of the inverse-CDF walk (sorted or by id),
 * never the distribution: a seed reproduces its tokens for the same
 * parameters and logits.
 *
 * Logprobs are the MODEL's: log_softmax of the raw logits, before bias,
 * penalties, temperature and truncation (vLLM's default "raw logprobs"), the
 * sum of exponentials accumulated in double (4 partial sums). So a token
 * forced by a bias of +100 may be reported with a very low logprob. Tokens
 * whose logit is -inf have logprob -inf (the server decides how to print
 * it); a NaN logit is treated as -inf everywhere.
 *
 * Stack: a draw uses about 40 KiB of it (a 1024-entry candidate list and a
 * 2048-bucket histogram), nothing on the heap.
 */
#ifndef MS_SAMPLER_H
#define MS_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

/* ---- RNG ---------------------------------------------------------------- */

struct ms_rng {
	uint64_t s[4];
};

/* Any seed, 0 included: the state is filled by splitmix64 and never all 0. */
void ms_rng_seed(struct ms_rng *r, uint64_t seed);
uint64_t ms_rng_next_u64(struct ms_rng *r);
/* Uniform in [0, 1), 53 random bits. */
double ms_rng_next_double(struct ms_rng *r);

/* ---- parameters --------------------------------------------------------- */

#define MS_LOGPROBS_MAX 20        /* OpenAI's top_logprobs limit */
#define MS_TEMPERATURE_MAX 100.0f
#define MS_LOGIT_BIAS_MAX 100.0f  /* |bias| */
#define MS_GREEDY_TEMPERATURE 1e-5f /* below: argmax */

struct ms_logit_bias {
	int32_t id;
	float bias;   /* [-100, 100], added to the logit */
};

/* A request's sampling parameters, plain values owned by the caller (the
 * sampler copies what it keeps). ms_sampling_defaults gives OpenAI's
 * defaults: every transform off, temperature 1. */
struct ms_sampling {
	float temperature;          /* [0, 100]; < 1e-5: greedy */
	int32_t top_k;              /* <= 0: off (-1 and 0 both accepted); > vocab: off */
	float top_p;                /* (0, 1]; 1: off */
	float min_p;                /* [0, 1]; 0: off */
	uint64_t seed;              /* used when has_seed */
	bool has_seed;              /* else the engine's fallback seed */
	float presence_penalty;     /* [-2, 2]; 0: off */
	float frequency_penalty;    /* [-2, 2]; 0: off */
	float repetition_penalty;   /* (0, 10]; 1: off */
	const struct ms_logit_bias *logit_bias; /* (n_logit_bias) or NULL; a repeated id: the last wins */
	size_t n_logit_bias;
	int n_logprobs;             /* -1: none; 0..20: the chosen token's logprob and this many alternatives */
};

void ms_sampling_defaults(struct ms_sampling *p);

/* 0, or -EINVAL with a message naming the field and its value (NaN is out
 * of every range). vocab: the number of token ids, for logit_bias ids. */
int ms_sampling_check(const struct ms_sampling *p, int64_t vocab, struct ms_err *err);

/* ---- logprobs ----------------------------------------------------------- */

struct ms_logprob {
	int32_t id;
	float logprob;
};

struct ms_token_logprobs {
	int32_t token;                        /* the token reported on */
	float logprob;                        /* its log-probability under the raw logits */
	int n_top;                            /* entries of top[] filled */
	struct ms_logprob top[MS_LOGPROBS_MAX]; /* descending logprob, ties: lower id first */
};

/* Logprob of `token` under log_softmax(logits) and the n_top (0..20) most
 * likely tokens: prompt logprobs (echo). 0, or -EINVAL for a token outside
 * [0, vocab) or n_top outside [0, 20]. */
int ms_logprobs_of(const float *logits, int64_t vocab, int32_t token, int n_top,
		   struct ms_token_logprobs *out);

/* ---- per-request sampler ------------------------------------------------ */

/* Open-addressing map token id -> times generated; a prompt-only token is
 * present with count 0. Only filled when a penalty needs it: the prompt only
 * for repetition_penalty != 1, the output for any penalty. */
struct ms_tokset {
	int32_t *ids;       /* (cap) -1: empty slot */
	uint32_t *counts;   /* (cap) */
	uint32_t cap;       /* 0 or a power of two; load <= 1/2 */
	uint32_t n;
};

/* Fields are private; embed it in the request and use the functions. */
struct ms_sampler {
	struct ms_sampling p;         /* copy; p.logit_bias points at bias below */
	int64_t vocab;
	struct ms_rng rng;
	struct ms_logit_bias *bias;   /* (n_bias) owned, one entry per id */
	size_t n_bias;
	bool track_prompt;            /* repetition penalty: prompt tokens count */
	bool track_output;            /* any penalty: generated tokens count */
	struct ms_tokset seen;
	uint64_t n_accepted;          /* tokens passed to ms_sampler_accept */
};

/* Validate p (ms_sampling_check) and set up a request's sampler. prompt:
 * the request's prompt ids (n_prompt), for the repetition penalty, each in
 * [0, vocab). The RNG is seeded with p->seed when p->has_seed, else with
 * fallback_seed (the engine's choice, e.g. from its own RNG). Nothing of p
 * or prompt is referenced after the call. 0, -EINVAL (message) or -ENOMEM. */
int ms_sampler_init(struct ms_sampler *s, const struct ms_sampling *p, int64_t vocab,
		    const int32_t *prompt, size_t n_prompt, uint64_t fallback_seed,
		    struct ms_err *err);
/* NULL and a zeroed struct are fine. */
void ms_sampler_free(struct ms_sampler *s);

/* Choose the next token from logits (vocab floats, untouched). work: the
 * caller's scratch of vocab floats (one per thread is enough: nothing is
 * kept in it between calls). lp (may be NULL): when p.n_logprobs >= 0 it gets
 * the chosen token's raw logprob and p.n_logprobs alternatives; when
 * n_logprobs is -1 it gets the token, logprob NaN and no alternatives.
 * Consumes one RNG draw unless the choice is certain (greedy, top_k 1, no
 * finite logit). Does not record the
 * token: call ms_sampler_accept. Returns the id, in [0, vocab). */
int32_t ms_sampler_sample(struct ms_sampler *s, const float *logits, float *work,
			  struct ms_token_logprobs *lp);
/* The same, with mask(ctx, z, vocab) applied to the adjusted logits z
 * before the draw (engine.h's struct ms_constraint); NULL: none. */
int32_t ms_sampler_sample_masked(struct ms_sampler *s, const float *logits, float *work,
				 struct ms_token_logprobs *lp,
				 void (*mask)(void *ctx, float *z, int64_t vocab), void *ctx);

/* Steps 1-3 only: logits with bias and penalties, into out (vocab floats),
 * as ms_sampler_sample sees them before temperature (tests, debugging). */
void ms_sampler_adjust(const struct ms_sampler *s, const float *logits, float *out);

/* Record a generated token (after each sample, and for tokens the engine
 * forces). 0, -EINVAL for an id outside [0, vocab), or -ENOMEM. */
int ms_sampler_accept(struct ms_sampler *s, int32_t id);

/* Times id was generated (0 when untracked: no penalty asks for it). */
uint32_t ms_sampler_count(const struct ms_sampler *s, int32_t id);

/* ---- stop strings ------------------------------------------------------- */

/* Feed the generated text in deltas of any size; get back the bytes that
 * can be sent. A stop string completes at its last byte; the first one to
 * complete wins (ties: the one that started earlier, then the lower index),
 * so the result is the same however the text is split: with "ab" and "abc",
 * text "abc" stops at "ab". Text before it is emitted, the stop string and
 * everything after are dropped (include_stop: the stop string is emitted
 * too, as vLLM's include_stop_str_in_output). Bytes that could still begin a
 * stop string are held back, at most (longest stop - 1); matching is on
 * bytes, so a stop string split inside a UTF-8 character is still never
 * emitted. */
struct ms_stopper {
	char **stops;        /* (n) owned copies */
	size_t *lens;        /* (n) */
	size_t n;
	size_t max_len;      /* longest stop string */
	bool include_stop;
	char *buf;           /* pending text buf[0..len) */
	size_t len, cap;
	size_t n_out;        /* bytes handed out by the last call, dropped at the next */
	bool stopped;
	int matched;         /* index of the stop string that matched, or -1 */
};

/* stops: n non-empty strings (NUL-terminated, copied). n = 0 is fine: all
 * text passes. 0, -EINVAL (an empty stop string, named by index) or
 * -ENOMEM. */
int ms_stopper_init(struct ms_stopper *st, const char *const *stops, size_t n, bool include_stop,
		    struct ms_err *err);
/* NULL and a zeroed struct are fine. */
void ms_stopper_free(struct ms_stopper *st);

/* Append text (len bytes) to the generated text. On return the bytes that
 * may be sent now are ms_stopper_text(st)[0..*emit_len), valid until the
 * next call; *stopped is set once a stop string has matched (then
 * ms_stopper_matched names it), after which every push emits nothing.
 * 0 or -ENOMEM. */
int ms_stopper_push(struct ms_stopper *st, const char *text, size_t len, size_t *emit_len,
		    bool *stopped);

/* Generation ended for another reason (eos, length...): the held-back tail
 * is released, at ms_stopper_text(st)[0..*emit_len). Nothing after a stop. */
void ms_stopper_finish(struct ms_stopper *st, size_t *emit_len);

/* The start of the bytes the last push/finish released. */
const char *ms_stopper_text(const struct ms_stopper *st);

/* The stop string that matched (the stopper's copy, valid until
 * ms_stopper_free), or NULL. */
const char *ms_stopper_matched(const struct ms_stopper *st);

#endif
