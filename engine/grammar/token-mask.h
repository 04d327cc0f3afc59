/*
 * token-mask.h: which tokens a grammar allows next.
 *
 * The vocabulary's normal tokens (special ones are the caller's: the
 * harmony frame, end of text) form a byte trie laid out in preorder, so
 * that a walk is one pass over an array that skips a whole subtree when
 * its prefix is refused. A walk starts from a match state (grammar.h) and
 * steps the grammar one byte per trie edge, with one table lookup per byte
 * where the grammar stays inside one rule; a token is allowed when the
 * grammar survives all its bytes. The masks are exact: what feeding each
 * token to the matcher would say.
 *
 * Three things keep a mask cheap on a 201k-token vocabulary:
 * - slices (llguidance's): the trie is cut by the tokens' count of plain
 *   characters (those a JSON string holds as themselves), 1 to 16, and
 *   the rest. A state that takes every string of L plain characters
 *   allows slices 1 .. L whole, from bitsets made with the trie; one that
 *   can take no string of L skips slice L and longer. Inside a JSON string
 *   ~6k tokens of o200k's 201k are walked.
 * - per top state (xgrammar's split): the tokens a stack's top state takes
 *   by its own rule are the same whatever lies below it. They are walked
 *   once per state and grammar and kept, with the trie nodes where that
 *   rule may end: only the tokens past those go to the stack below.
 * - per match state: the mask itself, a bitset, in an LRU bounded in
 *   bytes: inside a string every token of it hits one entry.
 * All three are shared by every request of the grammar (a mutex; the walk
 * runs under it).
 */
#ifndef MS_TOKEN_MASK_H
#define MS_TOKEN_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar.h"
#include "lm.h"
#include "ms-error.h"

struct ms_vocab_trie;

/* The trie of voc's normal tokens with ids below vocab (the model's logits;
 * larger ids and ids voc lacks are never allowed). */
int ms_vocab_trie_new(const struct ms_vocab *voc, int64_t vocab, struct ms_vocab_trie **out,
		      struct ms_err *err);
void ms_vocab_trie_free(struct ms_vocab_trie *v);   /* NULL is fine */
int64_t ms_vocab_trie_vocab(const struct ms_vocab_trie *v);
/* A token's bytes (len 0: special, absent or empty: never a grammar's). */
const uint8_t *ms_vocab_trie_bytes(const struct ms_vocab_trie *v, int32_t id, uint32_t *len);

/* The token that is byte b alone, or -1 (byte-level BPE has all 256). */
int32_t ms_vocab_trie_byte_token(const struct ms_vocab_trie *v, uint8_t b);

struct ms_tmask;

/* g (taken, freed with the mask) over v (must outlive it); cache_bytes:
 * the cache's bound (0: 64 MiB); write: how masks go into logits (the
 * backend's mask_words; NULL: ms_mask_words_ref). Starts with one
 * reference. */
int ms_tmask_new(struct ms_grammar *g, const struct ms_vocab_trie *v, size_t cache_bytes,
		 ms_mask_words_fn *write, struct ms_tmask **out, struct ms_err *err);
struct ms_tmask *ms_tmask_ref(struct ms_tmask *t);
void ms_tmask_unref(struct ms_tmask *t);             /* NULL is fine */
const struct ms_grammar *ms_tmask_grammar(const struct ms_tmask *t);
const struct ms_vocab_trie *ms_tmask_vocab(const struct ms_tmask *t);

/* What one mask may cost: the configurations its walk's grammar steps
 * expand, summed (each step expands at most a few thousand; a JSON
 * schema's masks expand hundreds to a few thousand in all). A grammar
 * ambiguous enough to pass it (nested repetitions of a recursive rule,
 * which the fuzzer found at ~10^9 and minutes a mask) gets -E2BIG, not a
 * stalled engine: the grammar cache refuses such a grammar when its first
 * mask is, and a mask later in a generation ends the body as -ENOMEM does. */
#define MS_TMASK_MAX_WORK (1 << 20)

/* Set logits[i] = -INFINITY for every normal token m refuses and for every
 * special token (vocab entries). -ENOMEM or -E2BIG (past
 * MS_TMASK_MAX_WORK): nothing changed (the caller refuses everything but
 * its ends). */
int ms_tmask_apply(struct ms_tmask *t, const struct ms_gmatch *m, float *logits, int64_t vocab);

/* The allowed set as a bitset into bits[(vocab + 63) / 64] (tests, bench,
 * the grammar cache's first mask); -ENOMEM, -E2BIG as ms_tmask_apply. */
int ms_tmask_bits(struct ms_tmask *t, const struct ms_gmatch *m, uint64_t *bits);

struct ms_tmask_stats {
	uint64_t hits, misses, evictions;
	size_t bytes, entries;
	double walk_s;             /* time spent walking on misses */
	uint64_t tops;             /* top states walked (each once) */
	size_t top_bytes;          /* what they keep */
};

void ms_tmask_get_stats(struct ms_tmask *t, struct ms_tmask_stats *s);

#endif
