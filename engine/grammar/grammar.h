/*
 * grammar.h: context-free grammars over bytes, compiled for matching
 * (structured outputs). JSON Schema, GBNF, regular
 * expressions and choice lists all build the same expressions here
 * (grammar-json.c, grammar-text.c) and compile them the same way.
 *
 * Each rule compiles to a deterministic automaton over bytes whose edges
 * are byte classes and calls of other rules (a recursive transition
 * network): inside a rule a byte is one table lookup, a call pushes the
 * state to return to. A match state is the set of the stacks still alive
 * (several where the grammar is ambiguous), kept canonical (sorted) so
 * that it can be a cache key (token-mask.c). Limits, each refused at
 * compile with a reason or, at run time, a path that goes no deeper:
 * MS_GRAMMAR_MAX_STATES automaton states, MS_GRAMMAR_MAX_DEPTH nested
 * calls, MS_GRAMMAR_MAX_STACKS stacks alive at once. Left recursion is a
 * compile error.
 */
#ifndef MS_GRAMMAR_H
#define MS_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

#define MS_GRAMMAR_MAX_STATES 200000
#define MS_GRAMMAR_MAX_DEPTH 200
#define MS_GRAMMAR_MAX_STACKS 512
#define MS_GRAMMAR_MAX_REPEAT 4096  /* x{m,n}: n (or m) at most this */

/* ---- building: expressions (ids >= 0; -1 after an allocation failure,
 * which every constructor passes on and compile reports) ---- */

struct ms_gb;
typedef int32_t ms_gx;

int ms_gb_new(struct ms_gb **out);
void ms_gb_free(struct ms_gb *b);                     /* NULL is fine */

ms_gx ms_gb_lit(struct ms_gb *b, const char *s, size_t n);  /* these bytes */
ms_gx ms_gb_str(struct ms_gb *b, const char *s);            /* NUL-terminated */
ms_gx ms_gb_byteset(struct ms_gb *b, const uint64_t set[4]); /* one byte of set */
ms_gx ms_gb_byterange(struct ms_gb *b, uint8_t lo, uint8_t hi);
/* One code point in the union of the n inclusive ranges r[2i]..r[2i+1]
 * (surrogates never), as UTF-8. */
ms_gx ms_gb_cps(struct ms_gb *b, const uint32_t *r, int n);
ms_gx ms_gb_seq(struct ms_gb *b, const ms_gx *xs, int n);    /* n 0: the empty string */
ms_gx ms_gb_seq2(struct ms_gb *b, ms_gx x, ms_gx y);
ms_gx ms_gb_alt(struct ms_gb *b, const ms_gx *xs, int n);    /* n 0: nothing */
ms_gx ms_gb_alt2(struct ms_gb *b, ms_gx x, ms_gx y);
ms_gx ms_gb_rep(struct ms_gb *b, ms_gx x, int min, int max); /* max -1: unbounded */
ms_gx ms_gb_opt(struct ms_gb *b, ms_gx x);
ms_gx ms_gb_empty(struct ms_gb *b);

/* Rules: named, declared before their body (so they can recurse). */
int ms_gb_rule(struct ms_gb *b, const char *name);    /* the id (found or new), -1: OOM */
ms_gx ms_gb_ref(struct ms_gb *b, int rule);
void ms_gb_define(struct ms_gb *b, int rule, ms_gx body);
int ms_gb_find_rule(const struct ms_gb *b, const char *name);  /* -1: none */
bool ms_gb_defined(const struct ms_gb *b, int rule);

/* ---- compiled ---- */

struct ms_grammar;

/* The language of rule root. Errors: a rule used but not defined, left
 * recursion, too many states, out of memory. b stays the caller's. */
int ms_gb_compile(const struct ms_gb *b, int root, struct ms_grammar **out, struct ms_err *err);
void ms_grammar_free(struct ms_grammar *g);           /* NULL is fine */
size_t ms_grammar_states(const struct ms_grammar *g);

/* ---- matching ---- */

struct ms_gmatch {
	const struct ms_grammar *g;
	int32_t *buf;       /* stacks, each [depth, bottom .. top], sorted */
	uint32_t len, cap;
	int n;              /* stacks alive (each can take a byte) */
	bool accept;        /* the bytes so far are a sentence */
	struct ms_gscratch *scratch;
};

int ms_gmatch_init(struct ms_gmatch *m, const struct ms_grammar *g);
void ms_gmatch_free(struct ms_gmatch *m);
int ms_gmatch_copy(struct ms_gmatch *dst, const struct ms_gmatch *src);  /* dst uninitialised */
/* Consume bytes: true, or false with m unchanged when they are not a
 * prefix of a sentence from here. -ENOMEM shows as false with m intact. */
bool ms_gmatch_feed(struct ms_gmatch *m, const void *bytes, size_t n);
/* Some byte can still follow. */
static inline bool ms_gmatch_open(const struct ms_gmatch *m) { return m->n > 0; }
/* The fewest bytes that finish a sentence from here (0: finished;
 * INT64_MAX: none can). */
int64_t ms_gmatch_min_bytes(const struct ms_gmatch *m);
/* A 64-bit key of the state (equal states, equal keys). */
uint64_t ms_gmatch_key(const struct ms_gmatch *m);
bool ms_gmatch_equal(const struct ms_gmatch *a, const struct ms_gmatch *b);

/* Whole-string test: is s a sentence? (tests, fuzzing) */
bool ms_grammar_accepts(const struct ms_grammar *g, const void *s, size_t n);

/* ---- the walk of token-mask.c: one byte from a state to the next, into
 * caller-owned buffers, without the copy of the state ---- */

struct ms_gwalk {
	/* either one stack (below[0..nbelow) then top) or a full set */
	const int32_t *below;
	int nbelow;
	int32_t top;
	bool single;
	struct ms_gmatch set;   /* when !single; its buffer kept across uses */
	int work;               /* configurations the last step into it expanded */
};

void ms_gwalk_init(struct ms_gwalk *w, const struct ms_grammar *g);
void ms_gwalk_free(struct ms_gwalk *w);
/* w from m (m must outlive w's use). */
void ms_gwalk_from(struct ms_gwalk *w, const struct ms_gmatch *m);
/* to = from after byte c; false: nothing survives (to undefined). */
bool ms_gwalk_step(const struct ms_gwalk *from, uint8_t c, struct ms_gwalk *to);
/* Some stack alive or the sentence complete (a token may end here). */
bool ms_gwalk_alive(const struct ms_gwalk *w);

/* A walk from one stack [q] alone: what q's rule does whatever lies below
 * it (token-mask.c's context-free part). Where that rule ends, w's set is
 * complete (accept): the rest is the stack below's. */
void ms_gwalk_single(struct ms_gwalk *w, int32_t q);
/* w = where a stack below[0..n) (bottom first, its top the state a rule
 * returns to) leads without a byte: what follows when the rule above it
 * ends. n 0: the sentence is complete. */
void ms_gwalk_below(struct ms_gwalk *w, const int32_t *below, int n);
/* dst = src (dst initialised; a single stack's below stays src's: src
 * must not change while dst is used); false: out of memory (dst dead). */
bool ms_gwalk_copy(struct ms_gwalk *dst, const struct ms_gwalk *src);

/* The automaton's tables, read-only while g lives: a walk that stays in
 * one stack steps them itself (one lookup a byte) and calls ms_gwalk_step
 * only where the state reached is not plain MS_GST_BYTES. */
#define MS_GST_BYTES 1   /* some byte leads on */
#define MS_GST_FINAL 2   /* its rule may end here (a pop, or the sentence complete) */
#define MS_GST_CALLS 4   /* it calls a rule */

struct ms_gview {
	const int32_t *next;    /* [state * n_cls + cls[byte]]: the state after, -1: none */
	const uint8_t *cls;     /* [256]: each byte's class */
	const uint8_t *flags;   /* per state: MS_GST_* */
	int32_t n_cls, n_states;
};

void ms_grammar_view(const struct ms_grammar *g, struct ms_gview *v);

#endif
