/*
 * ngram.h: drafting without a draft model, from what was already seen.
 *
 * An n-gram index maps the last N tokens (N in MS_NGRAM_LENS, longest
 * first) to the token that followed them most recently, where, how often
 * the n-gram was seen and how often that same token followed it. Drafting
 * walks forward one token at a time: the longest n-gram ending at the
 * current end (the request's tokens, then the draft so far) that either
 * index knows proposes its next token, with the confidence same / seen
 * (halved for a match of 2 tokens, 3/4 for 3);
 * the walk stops at the first end no index knows, or where the product of
 * confidences falls below MS_NGRAM_MIN_CONF (the continuation has become
 * uncertain). So a long match drafts long, a repeated loop drafts around
 * the loop, and an n-gram seen with different continuations stops it.
 *
 * Two indexes are asked:
 *   struct ms_ngram      one request's prompt and output (grows with it,
 *                        at most 2 * MS_NGRAM_N slots per token);
 *   struct ms_ngram_cache  recent requests' prompt tails and answers,
 *                        shared by all requests, in a fixed number of
 *                        bytes: a ring of tokens (the oldest overwritten)
 *                        and a fixed table whose entries for overwritten
 *                        tokens are ignored and replaced.
 * Both check a hit against the tokens themselves, so a hash collision
 * never drafts. Only the engine thread uses them.
 */
#ifndef MS_NGRAM_H
#define MS_NGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

#define MS_NGRAM_N 6                 /* n-gram lengths indexed */
#define MS_NGRAM_MAX_LEN 16          /* the longest */
#define MS_NGRAM_MIN_CONF 0.2f       /* a draft stops below this confidence */
#define MS_NGRAM_TAIL 1024           /* prompt tokens a finished request adds to the cache */

/* One n-gram: the token that followed it last (at pos) and its counts. */
struct ms_ngram_slot {
	uint64_t key;                    /* 0: empty */
	int64_t pos;                     /* where the next token is, in its source */
	int32_t tok;                     /* that token */
	uint16_t seen, same;             /* times seen; times in a row tok followed */
};

struct ms_ngram {
	struct ms_ngram_slot *slot;
	size_t cap, n;                   /* slots (a power of two), used */
	int64_t indexed;                 /* tokens [0, indexed) are in */
};

struct ms_ngram_cache {
	int32_t *ring;                   /* [ring_cap]: token p at ring[p % ring_cap] */
	int64_t ring_cap, head;          /* tokens ever added: [head - ring_cap, head) kept */
	struct ms_ngram_slot *slot;
	size_t cap;                      /* slots */
	uint64_t bytes;                  /* what ring and table take */
};

void ms_ngram_init(struct ms_ngram *g);
void ms_ngram_free(struct ms_ngram *g);
/* Index tokens [g->indexed, n) of t (t[0..n) the whole sequence so far).
 * -ENOMEM leaves the index as it was, still usable. */
int ms_ngram_extend(struct ms_ngram *g, const int32_t *t, int64_t n);
/* Bytes the index holds. */
size_t ms_ngram_bytes(const struct ms_ngram *g);

/* A cache of at most `bytes` (table and ring; 0: no cache). */
int ms_ngram_cache_init(struct ms_ngram_cache *c, uint64_t bytes, struct ms_err *err);
void ms_ngram_cache_free(struct ms_ngram_cache *c);
/* Add one finished sequence (a separator first, so that no n-gram spans
 * two of them). */
void ms_ngram_cache_add(struct ms_ngram_cache *c, const int32_t *t, int64_t n);

/* Up to max tokens to follow t[0..n) (conf[j]: the confidence of the
 * draft up to and including out[j], non-increasing), from own (NULL: none,
 * it must have indexed t) and the cache (NULL: none). Returns how many. */
int ms_ngram_draft(const struct ms_ngram *own, const struct ms_ngram_cache *c, const int32_t *t,
		   int64_t n, int32_t *out, float *conf, int max);

#endif
