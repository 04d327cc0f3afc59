/*
 * grammar-int.h: what grammar.c (compiling), grammar-build.c (the
 * expressions) and grammar-match.c (matching, the walk) share: the
 * expression nodes and the compiled automaton.
 */
#ifndef MS_GRAMMAR_INT_H
#define MS_GRAMMAR_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "grammar.h"
#include "ms-hash.h"

/* A distance no finish is reached by (min_dist's "never"). */
#define FAR (INT32_MAX / 4)

/* ---- a growable array ---- */

static inline bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
	if (need <= *cap)
		return true;
	uint32_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, (size_t)c * elem);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

/* ---- building ---- */

enum { NK_SET, NK_SEQ, NK_ALT, NK_REP, NK_REF };

struct node {
	uint8_t kind;
	int32_t a, n;      /* SET: set; SEQ/ALT: kids offset, count; REP: child; REF: rule */
	int32_t min, max;  /* REP */
};

struct set { uint64_t w[4]; };

struct ms_gb {
	struct node *nodes;
	uint32_t n_nodes, cap_nodes;
	int32_t *kids;
	uint32_t n_kids, cap_kids;
	struct set *sets;
	uint32_t n_sets, cap_sets;
	char **names;
	ms_gx *body;
	uint32_t n_rules, cap_rules;
	bool oom;
};

/* ---- the compiled form ---- */

struct gcall { int32_t rule, ret; };

struct gstate {
	uint8_t final, bytes;  /* bytes: some byte class leads on */
	int32_t call_off, n_calls;
};

struct ms_grammar {
	uint8_t cls[256];
	int n_cls;
	int32_t n_states;
	int32_t *next;          /* [state * n_cls + class], -1: none */
	struct gstate *st;
	struct gcall *calls;
	int32_t *start;         /* per rule */
	int32_t *dist;          /* per state: the fewest bytes to finish its rule */
	uint8_t *flags;         /* per state: MS_GST_* (ms_grammar_view) */
	int n_rules;
	int32_t root;
};

/* A hash of n ids (a DFA state's members, a stack). The seed is mixed
 * first: from n itself (small, like the states) and with ms_mix64(0) == 0,
 * [0] and [2, 1] hashed alike, and the matcher's visited set, which keeps
 * hashes only, dropped one of them. */
static inline uint64_t set_hash(const int32_t *s, int n)
{
	uint64_t h = ms_mix64((uint64_t)n + 0x9e3779b97f4a7c15ull);
	for (int i = 0; i < n; i++)
		h = ms_mix64(h ^ (uint64_t)(uint32_t)s[i]);
	return h;
}

#endif
