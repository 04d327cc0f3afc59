/* grammar.c: expressions, their automata, and matching (grammar.h). */
#include "grammar.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ms-hash.h"

/* ---- a growable array ---- */

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
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

int ms_gb_new(struct ms_gb **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void ms_gb_free(struct ms_gb *b)
{
	if (!b)
		return;
	for (uint32_t i = 0; i < b->n_rules; i++)
		free(b->names[i]);
	free(b->names);
	free(b->body);
	free(b->nodes);
	free(b->kids);
	free(b->sets);
	free(b);
}

static ms_gx add_node(struct ms_gb *b, struct node n)
{
	if (b->oom || !grow((void **)&b->nodes, &b->cap_nodes, b->n_nodes + 1, sizeof(n))) {
		b->oom = true;
		return -1;
	}
	b->nodes[b->n_nodes] = n;
	return (ms_gx)b->n_nodes++;
}

static int32_t add_set(struct ms_gb *b, const uint64_t w[4])
{
	for (uint32_t i = 0; i < b->n_sets; i++)  /* few distinct sets: a scan */
		if (!memcmp(b->sets[i].w, w, 32))
			return (int32_t)i;
	if (!grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof(struct set))) {
		b->oom = true;
		return -1;
	}
	memcpy(b->sets[b->n_sets].w, w, 32);
	return (int32_t)b->n_sets++;
}

ms_gx ms_gb_byteset(struct ms_gb *b, const uint64_t set[4])
{
	int32_t s = add_set(b, set);
	return s < 0 ? -1 : add_node(b, (struct node){.kind = NK_SET, .a = s});
}

ms_gx ms_gb_byterange(struct ms_gb *b, uint8_t lo, uint8_t hi)
{
	uint64_t w[4] = {0};
	for (int c = lo; c <= hi; c++)
		w[c >> 6] |= 1ull << (c & 63);
	return ms_gb_byteset(b, w);
}

static ms_gx list_node(struct ms_gb *b, int kind, const ms_gx *xs, int n)
{
	for (int i = 0; i < n; i++)
		if (xs[i] < 0)
			return -1;
	if (b->oom || !grow((void **)&b->kids, &b->cap_kids, b->n_kids + (uint32_t)n, 4)) {
		b->oom = true;
		return -1;
	}
	if (n)
		memcpy(b->kids + b->n_kids, xs, (size_t)n * 4);
	ms_gx r = add_node(b, (struct node){.kind = (uint8_t)kind, .a = (int32_t)b->n_kids, .n = n});
	b->n_kids += (uint32_t)n;
	return r;
}

ms_gx ms_gb_seq(struct ms_gb *b, const ms_gx *xs, int n)
{
	return n == 1 ? xs[0] : list_node(b, NK_SEQ, xs, n);
}

ms_gx ms_gb_alt(struct ms_gb *b, const ms_gx *xs, int n)
{
	return n == 1 ? xs[0] : list_node(b, NK_ALT, xs, n);
}

ms_gx ms_gb_seq2(struct ms_gb *b, ms_gx x, ms_gx y)
{
	ms_gx xs[2] = {x, y};
	return ms_gb_seq(b, xs, 2);
}

ms_gx ms_gb_alt2(struct ms_gb *b, ms_gx x, ms_gx y)
{
	ms_gx xs[2] = {x, y};
	return ms_gb_alt(b, xs, 2);
}

ms_gx ms_gb_empty(struct ms_gb *b)
{
	return list_node(b, NK_SEQ, NULL, 0);
}

ms_gx ms_gb_lit(struct ms_gb *b, const char *s, size_t n)
{
	ms_gx one[64];
	ms_gx acc = ms_gb_empty(b);
	/* in pieces, so that a long literal needs no large array */
	for (size_t at = 0; at < n && acc >= 0; at += 63) {
		int k = 0;
		one[k++] = acc;
		for (size_t i = at; i < n && i < at + 63; i++)
			one[k++] = ms_gb_byterange(b, (uint8_t)s[i], (uint8_t)s[i]);
		acc = list_node(b, NK_SEQ, one, k);
	}
	return acc;
}

ms_gx ms_gb_str(struct ms_gb *b, const char *s)
{
	return ms_gb_lit(b, s, strlen(s));
}

ms_gx ms_gb_rep(struct ms_gb *b, ms_gx x, int min, int max)
{
	if (x < 0)
		return -1;
	return add_node(b, (struct node){.kind = NK_REP, .a = x, .min = min, .max = max});
}

ms_gx ms_gb_opt(struct ms_gb *b, ms_gx x)
{
	return ms_gb_rep(b, x, 0, 1);
}

int ms_gb_rule(struct ms_gb *b, const char *name)
{
	int r = ms_gb_find_rule(b, name);
	if (r >= 0)
		return r;
	if (b->oom || !grow((void **)&b->names, &b->cap_rules, b->n_rules + 1, sizeof(char *))) {
		b->oom = true;
		return -1;
	}
	uint32_t cap = b->cap_rules;
	void *nb = realloc(b->body, (size_t)cap * sizeof(ms_gx));
	char *nm = strdup(name);
	if (!nb || !nm) {
		if (nb)
			b->body = nb;
		free(nm);
		b->oom = true;
		return -1;
	}
	b->body = nb;
	b->names[b->n_rules] = nm;
	b->body[b->n_rules] = -1;
	return (int)b->n_rules++;
}

int ms_gb_find_rule(const struct ms_gb *b, const char *name)
{
	for (uint32_t i = 0; i < b->n_rules; i++)
		if (!strcmp(b->names[i], name))
			return (int)i;
	return -1;
}

bool ms_gb_defined(const struct ms_gb *b, int rule)
{
	return rule >= 0 && (uint32_t)rule < b->n_rules && b->body[rule] >= 0;
}

ms_gx ms_gb_ref(struct ms_gb *b, int rule)
{
	if (rule < 0)
		return -1;
	return add_node(b, (struct node){.kind = NK_REF, .a = rule});
}

void ms_gb_define(struct ms_gb *b, int rule, ms_gx body)
{
	if (rule < 0 || body < 0) {
		b->oom = true;
		return;
	}
	b->body[rule] = body;
}

/* ---- code points as UTF-8 byte sequences ---- */

static int utf8_len(uint32_t c)
{
	return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static void utf8_enc(uint32_t c, uint8_t *o)
{
	int n = utf8_len(c);
	if (n == 1) {
		o[0] = (uint8_t)c;
		return;
	}
	for (int i = n - 1; i > 0; i--, c >>= 6)
		o[i] = (uint8_t)(0x80 | (c & 0x3f));
	o[0] = (uint8_t)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | c);
}

/* lo..hi (one encoded length, split so that each byte position is a range). */
static void utf8_pieces(struct ms_gb *b, uint32_t lo, uint32_t hi, ms_gx *alts, int *na, int cap)
{
	int n = utf8_len(lo);
	if (n != utf8_len(hi)) {
		uint32_t top = n == 1 ? 0x7f : n == 2 ? 0x7ff : 0xffff;
		utf8_pieces(b, lo, top, alts, na, cap);
		utf8_pieces(b, top + 1, hi, alts, na, cap);
		return;
	}
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m) {
				utf8_pieces(b, lo, lo | m, alts, na, cap);
				utf8_pieces(b, (lo | m) + 1, hi, alts, na, cap);
				return;
			}
			if ((hi & m) != m) {
				utf8_pieces(b, lo, (hi & ~m) - 1, alts, na, cap);
				utf8_pieces(b, hi & ~m, hi, alts, na, cap);
				return;
			}
		}
	}
	uint8_t el[4], eh[4];
	utf8_enc(lo, el);
	utf8_enc(hi, eh);
	ms_gx xs[4];
	for (int i = 0; i < n; i++)
		xs[i] = ms_gb_byterange(b, el[i], eh[i]);
	if (*na < cap)
		alts[(*na)++] = ms_gb_seq(b, xs, n);
	else
		b->oom = true;
}

ms_gx ms_gb_cps(struct ms_gb *b, const uint32_t *r, int n)
{
	int cap = 64 * (n + 1), na = 0;
	ms_gx *alts = malloc((size_t)cap * sizeof(ms_gx));
	if (!alts) {
		b->oom = true;
		return -1;
	}
	for (int i = 0; i < n; i++) {
		uint32_t lo = r[2 * i], hi = r[2 * i + 1] > 0x10ffff ? 0x10ffff : r[2 * i + 1];
		/* no surrogates: cut D800..DFFF out */
		if (lo <= 0xdfff && hi >= 0xd800) {
			if (lo < 0xd800)
				utf8_pieces(b, lo, 0xd7ff, alts, &na, cap);
			if (hi > 0xdfff)
				utf8_pieces(b, 0xe000, hi, alts, &na, cap);
		} else if (lo <= hi) {
			utf8_pieces(b, lo, hi, alts, &na, cap);
		}
	}
	ms_gx x = ms_gb_alt(b, alts, na);
	free(alts);
	return x;
}

/* ---- the NFA (Thompson), all rules in one ---- */

enum { E_EPS, E_SET, E_CALL };

struct edge { int32_t kind, arg, to, next; };

struct nfa {
	int32_t *head;
	uint32_t n, cap;
	struct edge *e;
	uint32_t ne, cap_e;
	bool oom, big;
};

static int32_t nfa_state(struct nfa *a)
{
	if (a->n >= MS_GRAMMAR_MAX_STATES * 4) {
		a->big = true;
		return 0;
	}
	if (!grow((void **)&a->head, &a->cap, a->n + 1, 4)) {
		a->oom = true;
		return 0;
	}
	a->head[a->n] = -1;
	return (int32_t)a->n++;
}

static void nfa_edge(struct nfa *a, int32_t from, int kind, int32_t arg, int32_t to)
{
	if (a->oom || a->big)
		return;
	if (!grow((void **)&a->e, &a->cap_e, a->ne + 1, sizeof(struct edge))) {
		a->oom = true;
		return;
	}
	a->e[a->ne] = (struct edge){kind, arg, to, a->head[from]};
	a->head[from] = (int32_t)a->ne++;
}

/* x from state s; returns its end state. */
static int32_t nfa_build(const struct ms_gb *b, struct nfa *a, ms_gx x, int32_t s)
{
	if (a->oom || a->big)
		return s;
	const struct node *nd = &b->nodes[x];
	int32_t e;
	switch (nd->kind) {
	case NK_SET:
	case NK_REF:
		e = nfa_state(a);
		nfa_edge(a, s, nd->kind == NK_SET ? E_SET : E_CALL, nd->a, e);
		return e;
	case NK_SEQ:
		for (int i = 0; i < nd->n; i++)
			s = nfa_build(b, a, b->kids[nd->a + i], s);
		return s;
	case NK_ALT:
		e = nfa_state(a);
		for (int i = 0; i < nd->n; i++) {
			int32_t k = nfa_state(a);
			nfa_edge(a, s, E_EPS, 0, k);
			nfa_edge(a, nfa_build(b, a, b->kids[nd->a + i], k), E_EPS, 0, e);
		}
		return e;
	default: /* NK_REP */
		for (int i = 0; i < nd->min; i++)
			s = nfa_build(b, a, nd->a, s);
		if (nd->max < 0) {
			int32_t loop = nfa_state(a);
			nfa_edge(a, s, E_EPS, 0, loop);
			nfa_edge(a, nfa_build(b, a, nd->a, loop), E_EPS, 0, loop);
			return loop;
		}
		e = nfa_state(a);
		for (int i = nd->min; i < nd->max; i++) {
			nfa_edge(a, s, E_EPS, 0, e);
			s = nfa_build(b, a, nd->a, s);
		}
		nfa_edge(a, s, E_EPS, 0, e);
		return e;
	}
}

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

void ms_grammar_free(struct ms_grammar *g)
{
	if (!g)
		return;
	free(g->next);
	free(g->st);
	free(g->calls);
	free(g->start);
	free(g->dist);
	free(g->flags);
	free(g);
}

size_t ms_grammar_states(const struct ms_grammar *g)
{
	return (size_t)g->n_states;
}

/* Byte classes: bytes no set tells apart share one. */
static void byte_classes(const struct ms_gb *b, struct ms_grammar *g)
{
	uint16_t c[256] = {0}, map[512];
	int n = 1;
	for (uint32_t s = 0; s < b->n_sets; s++) {
		for (int i = 0; i < 512; i++)
			map[i] = 0xffff;
		int m = 0;
		for (int x = 0; x < 256; x++) {
			int in = (int)(b->sets[s].w[x >> 6] >> (x & 63)) & 1;
			int k = c[x] * 2 + in;
			if (map[k] == 0xffff)
				map[k] = (uint16_t)m++;
			c[x] = map[k];
		}
		n = m;
	}
	for (int x = 0; x < 256; x++)
		g->cls[x] = (uint8_t)c[x];
	g->n_cls = n;
}

/* The subset construction's working state. */
struct dfa_build {
	const struct ms_gb *b;
	struct nfa *a;
	struct ms_grammar *g;
	int32_t *accept;         /* per rule, its NFA accept state */
	int32_t *mark;           /* per NFA state, a stamp */
	int32_t stamp;
	int32_t *members;        /* every DFA state's NFA set, back to back */
	uint32_t n_members, cap_members;
	int32_t *moff, *mlen, *mrule;  /* per DFA state */
	uint32_t cap_states;
	int32_t *table;          /* hash -> DFA state */
	uint32_t table_cap;
	struct gcall *calls;
	uint32_t n_calls, cap_calls;
	uint64_t *clsmask;       /* per set: its classes, 4 words */
	int32_t *one;            /* per NFA state s: the DFA state of closure({s}), or -1 */
	uint8_t *imp;            /* per NFA state: a byte or call leaves it, or it accepts */
	bool oom, big;
};

/* The epsilon closure of set[0..n) into out: its important states only
 * (those with a byte or a call, and accepts; the rest, passed through, do
 * nothing a DFA state would tell apart: without them every path that ends
 * an alternative is the same state), no duplicates, in no order, each
 * marked with d->stamp (intern compares sets by those marks). */
static int closure(struct dfa_build *d, const int32_t *set, int n, int32_t *out)
{
	int32_t stamp = ++d->stamp;
	int k = 0, sp = 0;
	int32_t *stack = out + d->a->n; /* out has room for 2 * n_nfa */
	for (int i = 0; i < n; i++)
		if (d->mark[set[i]] != stamp) {
			d->mark[set[i]] = stamp;
			stack[sp++] = set[i];
		}
	while (sp) {
		int32_t s = stack[--sp];
		if (d->imp[s])
			out[k++] = s;
		for (int32_t e = d->a->head[s]; e >= 0; e = d->a->e[e].next)
			if (d->a->e[e].kind == E_EPS && d->mark[d->a->e[e].to] != stamp) {
				d->mark[d->a->e[e].to] = stamp;
				stack[sp++] = d->a->e[e].to;
			}
	}
	return k;
}

/* The seed is mixed first: from n itself (small, like the states) and with
 * ms_mix64(0) == 0, [0] and [2, 1] hashed alike, and the matcher's visited
 * set, which keeps hashes only, dropped one of them. */
static uint64_t set_hash(const int32_t *s, int n)
{
	uint64_t h = ms_mix64((uint64_t)n + 0x9e3779b97f4a7c15ull);
	for (int i = 0; i < n; i++)
		h = ms_mix64(h ^ (uint64_t)(uint32_t)s[i]);
	return h;
}

static bool table_grow(struct dfa_build *d);

/* A set's hash whatever its order (closures come unsorted). */
static uint64_t members_hash(const int32_t *s, int n)
{
	uint64_t h = 0;
	for (int i = 0; i < n; i++)
		h += ms_mix64((uint64_t)(uint32_t)s[i] + 0x9e3779b97f4a7c15ull);
	return ms_mix64(h ^ (uint64_t)n);
}

/* DFA state q's NFA set is the last closure's (n important states, all
 * marked by it). */
static bool same_members(const struct dfa_build *d, int32_t q, int n)
{
	if (d->mlen[q] != n)
		return false;
	const int32_t *m = d->members + d->moff[q];
	for (int i = 0; i < n; i++)
		if (d->mark[m[i]] != d->stamp)
			return false;
	return true;
}

/* The DFA state of NFA set s[0..n), the last closure, in rule r (found or
 * added); -1 on failure. */
static int32_t intern(struct dfa_build *d, const int32_t *s, int n, int rule)
{
	struct ms_grammar *g = d->g;
	if ((uint32_t)g->n_states * 2 >= d->table_cap && !table_grow(d))
		return -1;
	uint32_t mask = d->table_cap - 1, h = (uint32_t)members_hash(s, n) & mask;
	for (;; h = (h + 1) & mask) {
		int32_t q = d->table[h];
		if (q < 0)
			break;
		if (same_members(d, q, n))
			return q;
	}
	if (g->n_states >= MS_GRAMMAR_MAX_STATES) {
		d->big = true;
		return -1;
	}
	uint32_t q = (uint32_t)g->n_states;
	if (!grow((void **)&d->members, &d->cap_members, d->n_members + (uint32_t)n, 4)) {
		d->oom = true;
		return -1;
	}
	if (q + 1 > d->cap_states) {
		uint32_t c = d->cap_states ? d->cap_states * 2 : 64;
		int32_t *o = realloc(d->moff, c * 4), *l = o ? realloc(d->mlen, c * 4) : NULL;
		if (o)
			d->moff = o;
		if (l)
			d->mlen = l;
		int32_t *r = l ? realloc(d->mrule, c * 4) : NULL;
		if (r)
			d->mrule = r;
		if (!r) {
			d->oom = true;
			return -1;
		}
		d->cap_states = c;
	}
	memcpy(d->members + d->n_members, s, (size_t)n * 4);
	d->moff[q] = (int32_t)d->n_members;
	d->mlen[q] = n;
	d->mrule[q] = rule;
	d->n_members += (uint32_t)n;
	d->table[h] = (int32_t)q;
	g->n_states++;
	return (int32_t)q;
}

static bool table_grow(struct dfa_build *d)
{
	uint32_t cap = d->table_cap ? d->table_cap * 2 : 1024;
	int32_t *t = malloc(cap * 4);
	if (!t) {
		d->oom = true;
		return false;
	}
	memset(t, 0xff, cap * 4);
	for (int32_t q = 0; q < d->g->n_states; q++) {
		uint32_t h = (uint32_t)members_hash(d->members + d->moff[q], d->mlen[q]) & (cap - 1);
		while (t[h] >= 0)
			h = (h + 1) & (cap - 1);
		t[h] = q;
	}
	free(d->table);
	d->table = t;
	d->table_cap = cap;
	return true;
}

/* State q's byte edges and calls (it is complete afterwards). pairs:
 * (class, target) of every byte edge, grouped by class by a counting sort;
 * memo: the runs of targets met in this state (a stamp per state). */
struct run_memo { uint64_t h; int32_t lo, len, t; uint32_t stamp; };

struct pairs {
	int32_t *p, *sorted, *cnt;
	uint32_t n, cap, cap_sorted;
	struct run_memo *memo;
	uint32_t memo_cap, stamp;
};

static bool pair_add(struct pairs *p, int32_t c, int32_t to)
{
	if (!grow((void **)&p->p, &p->cap, p->n * 2 + 2, 4))
		return false;
	p->p[2 * p->n] = c;
	p->p[2 * p->n + 1] = to;
	p->n++;
	return true;
}

static bool member_edges(struct dfa_build *d, int32_t q, struct pairs *pr, uint8_t *fin)
{
	const struct nfa *a = d->a;
	int rule = d->mrule[q];
	for (int i = 0; i < d->mlen[q]; i++) {
		int32_t s = d->members[d->moff[q] + i];
		*fin |= s == d->accept[rule];
		for (int32_t e = a->head[s]; e >= 0; e = a->e[e].next) {
			const struct edge *ed = &a->e[e];
			if (ed->kind == E_SET) {
				const uint64_t *cm = d->clsmask + 4 * ed->arg;
				for (int w = 0; w < 4; w++)  /* the set's classes, bit by bit */
					for (uint64_t x = cm[w]; x; x &= x - 1)
						if (!pair_add(pr, w * 64 + __builtin_ctzll(x), ed->to))
							return false;
			} else if (ed->kind == E_CALL) {
				if (!grow((void **)&d->calls, &d->cap_calls, d->n_calls + 1, sizeof(struct gcall)))
					return false;
				d->calls[d->n_calls++] = (struct gcall){ed->arg, ed->to};
			}
		}
	}
	return true;
}

/* The DFA state after the NFA targets pr->sorted[lo, lo + k). Most runs
 * are one NFA state, most of those met before (the pieces of a UTF-8
 * character all end where the next one starts): each state's closure is
 * taken once. Most classes of a state lead to the same targets (every
 * letter inside a string), in the same order (the counting sort is
 * stable): a run seen before in this state gives its state again. */
static int32_t run_target(struct dfa_build *d, struct pairs *pr, int32_t lo, int k, int32_t *buf,
			  int rule)
{
	const int32_t *run = pr->sorted + lo;
	if (k == 1 && d->one[run[0]] >= 0)
		return d->one[run[0]];
	uint64_t h = set_hash(run, k);
	uint32_t mask = pr->memo_cap - 1, i = (uint32_t)h & mask;
	for (; pr->memo[i].stamp == pr->stamp; i = (i + 1) & mask) {
		const struct run_memo *m = &pr->memo[i];
		if (m->h == h && m->len == k && !memcmp(pr->sorted + m->lo, run, (size_t)k * 4))
			return m->t;
	}
	int32_t t = intern(d, buf, closure(d, run, k, buf), rule);
	pr->memo[i] = (struct run_memo){h, lo, k, t, pr->stamp};
	if (k == 1)
		d->one[run[0]] = t;
	return t;
}

static void expand_state(struct dfa_build *d, int32_t q, int32_t *buf, struct pairs *pr)
{
	struct ms_grammar *g = d->g;
	int rule = d->mrule[q], n_cls = g->n_cls;
	uint8_t fin = 0, bytes = 0;
	uint32_t call0 = d->n_calls;
	pr->n = 0;
	if (!member_edges(d, q, pr, &fin) || !grow((void **)&pr->sorted, &pr->cap_sorted, pr->n + 1, 4)) {
		d->oom = true;
		return;
	}
	/* group targets by class */
	for (int c = 0; c <= n_cls; c++)
		pr->cnt[c] = 0;
	for (uint32_t i = 0; i < pr->n; i++)
		pr->cnt[pr->p[2 * i] + 1]++;
	for (int c = 0; c < n_cls; c++)
		pr->cnt[c + 1] += pr->cnt[c];
	for (uint32_t i = 0; i < pr->n; i++)
		pr->sorted[pr->cnt[pr->p[2 * i]]++] = pr->p[2 * i + 1];
	/* cnt[c] is now the end of class c's run */
	pr->stamp++;
	for (int c = 0; c < n_cls && !d->oom && !d->big; c++) {
		int32_t lo = c ? pr->cnt[c - 1] : 0, t = -1;
		if (pr->cnt[c] > lo) {
			t = run_target(d, pr, lo, pr->cnt[c] - lo, buf, rule);
			bytes = 1;
		}
		g->next[(size_t)q * (size_t)n_cls + (size_t)c] = t;
	}
	/* calls: one per callee, the union of the return points */
	uint32_t w = call0;
	for (uint32_t i = call0; i < d->n_calls && !d->oom && !d->big; i++) {
		if (d->calls[i].rule < 0)
			continue;
		int k = 0;
		pr->sorted[k++] = d->calls[i].ret;
		for (uint32_t j = i + 1; j < d->n_calls; j++)
			if (d->calls[j].rule == d->calls[i].rule) {
				pr->sorted[k++] = d->calls[j].ret;
				d->calls[j].rule = -1;
			}
		int32_t r = d->calls[i].rule;
		d->calls[w++] = (struct gcall){r, intern(d, buf, closure(d, pr->sorted, k, buf), rule)};
	}
	d->n_calls = w;
	g->st[q] = (struct gstate){fin, bytes, (int32_t)call0, (int32_t)(w - call0)};
}

/* Room for the tables of states up to n (they grow as states appear). */
static bool state_room(struct dfa_build *d, uint32_t *cap)
{
	struct ms_grammar *g = d->g;
	uint32_t need = (uint32_t)g->n_states;
	if (need <= *cap)
		return true;
	uint32_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	int32_t *nx = realloc(g->next, (size_t)c * (size_t)g->n_cls * 4);
	if (nx)
		g->next = nx;
	struct gstate *st = nx ? realloc(g->st, c * sizeof(*st)) : NULL;
	if (st)
		g->st = st;
	if (!st)
		return d->oom = true, false;
	*cap = c;
	return true;
}

static int dfa_build_all(struct dfa_build *d, struct ms_err *err)
{
	struct ms_grammar *g = d->g;
	int32_t *buf = malloc((size_t)d->a->n * 2 * 4 + 8);
	int32_t *rstart = malloc((size_t)g->n_rules * 4 + 4);
	struct pairs pr = {.cnt = malloc((size_t)(g->n_cls + 1) * 4), .memo_cap = 512};
	pr.memo = calloc(pr.memo_cap, sizeof(*pr.memo));  /* 2x the classes at most */
	d->one = malloc((size_t)d->a->n * 4 + 4);
	bool ok = buf && rstart && pr.cnt && pr.memo && d->one;
	if (ok)
		memset(d->one, 0xff, (size_t)d->a->n * 4);
	uint32_t cap = 0;
	for (int r = 0; ok && r < g->n_rules; r++) {
		int32_t s = g->start[r];
		rstart[r] = intern(d, buf, closure(d, &s, 1, buf), r);
		ok = rstart[r] >= 0;
	}
	for (int32_t q = 0; ok && q < g->n_states; q++) {
		if (!state_room(d, &cap))
			break;
		expand_state(d, q, buf, &pr);
		ok = !d->oom && !d->big && state_room(d, &cap);
	}
	if (ok)
		memcpy(g->start, rstart, (size_t)g->n_rules * 4);
	free(rstart);
	free(buf);
	free(pr.p);
	free(pr.sorted);
	free(pr.cnt);
	free(pr.memo);
	free(d->one);
	if (d->big)
		return ms_err_set(err, -E2BIG, "the grammar needs more than %d automaton states",
				  MS_GRAMMAR_MAX_STATES);
	if (!ok || d->oom)
		return ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	return 0;
}

/* ---- left recursion ---- */

/* The states of rule r reachable from its start by calls of nullable
 * rules only: visit each (calls of r's states are to other rules'
 * starts). Marks nullable[r] when one is final; records callees in
 * left[r * n_rules + callee]. */
static void left_reach(const struct ms_grammar *g, int r, const uint8_t *nullable, uint8_t *seen,
		       int32_t *todo, uint8_t *left, uint8_t *is_null)
{
	int sp = 0;
	todo[sp++] = g->start[r];
	seen[g->start[r]] = 1;
	while (sp) {
		int32_t q = todo[--sp];
		if (g->st[q].final)
			*is_null = 1;
		for (int i = 0; i < g->st[q].n_calls; i++) {
			const struct gcall *c = &g->calls[g->st[q].call_off + i];
			left[(size_t)r * (size_t)g->n_rules + (size_t)c->rule] = 1;
			if (nullable[c->rule] && !seen[c->ret]) {
				seen[c->ret] = 1;
				todo[sp++] = c->ret;
			}
		}
	}
}

static int left_recursion(const struct ms_grammar *g, const struct ms_gb *b, struct ms_err *err)
{
	int nr = g->n_rules, rc = 0;
	uint8_t *nullable = calloc((size_t)nr, 1), *seen = calloc((size_t)g->n_states, 1);
	uint8_t *left = calloc((size_t)nr * (size_t)nr, 1), *color = calloc((size_t)nr, 1);
	int32_t *todo = malloc((size_t)g->n_states * 4 + 4), *path = malloc((size_t)nr * 8 + 8);
	if (!nullable || !seen || !left || !color || !todo || !path)
		rc = ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	for (bool more = true; !rc && more;) {
		more = false;
		memset(left, 0, (size_t)nr * (size_t)nr);
		for (int r = 0; r < nr; r++) {
			memset(seen, 0, (size_t)g->n_states);
			uint8_t was = nullable[r];
			left_reach(g, r, nullable, seen, todo, left, &nullable[r]);
			more |= nullable[r] != was;
		}
	}
	/* a cycle in "r may call s before any byte" (depth-first, colors) */
	for (int r0 = 0; !rc && r0 < nr; r0++) {
		if (color[r0])
			continue;
		int sp = 0;
		path[sp++] = r0, path[sp++] = 0;
		color[r0] = 1;
		while (sp && !rc) {
			int r = path[sp - 2], i = path[sp - 1]++;
			if (i == nr) {
				color[r] = 2;
				sp -= 2;
			} else if (left[(size_t)r * (size_t)nr + (size_t)i]) {
				if (color[i] == 1)
					rc = ms_err_set(err, -EINVAL, "rule \"%s\" is left-recursive (it can "
							"reach itself before matching a byte)", b->names[i]);
				else if (!color[i])
					color[i] = 1, path[sp++] = i, path[sp++] = 0;
			}
		}
	}
	free(nullable);
	free(seen);
	free(left);
	free(color);
	free(todo);
	free(path);
	return rc;
}

/* ---- the fewest bytes to a finish ---- */

#define FAR (INT32_MAX / 4)

/* Each state's distinct byte successors, compressed (most classes of a
 * state lead to one place): off[q] .. off[q + 1] in to. */
struct succ { int32_t *off, *to; };

static bool succ_build(const struct ms_grammar *g, struct succ *sc)
{
	int32_t n = g->n_states;
	int32_t *seen = malloc((size_t)n * 4 + 4);
	uint32_t cap = (uint32_t)n * 2 + 16, k = 0;
	sc->off = malloc((size_t)n * 4 + 8);
	sc->to = malloc(cap * 4);
	bool ok = seen && sc->off && sc->to;
	for (int32_t q = 0; ok && q < n; q++)
		seen[q] = -1;
	for (int32_t q = 0; ok && q < n; q++) {
		sc->off[q] = (int32_t)k;
		const int32_t *row = g->next + (size_t)q * (size_t)g->n_cls;
		for (int c = 0; ok && c < g->n_cls; c++) {
			int32_t t = row[c];
			if (t < 0 || seen[t] == q)
				continue;
			seen[t] = q;
			ok = grow((void **)&sc->to, &cap, k + 1, 4);
			if (ok)
				sc->to[k++] = t;
		}
	}
	if (ok)
		sc->off[n] = (int32_t)k;
	free(seen);
	return ok;
}

/* dist[q]: the fewest bytes from q to its rule's end, a call costing its
 * callee's dist from the start; relaxed to a fixed point (states are
 * numbered breadth-first from the starts, so a backward pass carries
 * most of it at once). */
static int min_dist(struct ms_grammar *g, struct ms_err *err)
{
	int32_t n = g->n_states;
	struct succ sc = {0};
	g->dist = malloc((size_t)n * 4 + 4);
	if (!g->dist || !succ_build(g, &sc)) {
		free(sc.off);
		free(sc.to);
		return ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	}
	for (int32_t q = 0; q < n; q++)
		g->dist[q] = g->st[q].final ? 0 : FAR;
	for (bool more = true; more;) {
		more = false;
		for (int32_t q = n - 1; q >= 0; q--) {
			int32_t d = g->dist[q];
			for (int32_t i = sc.off[q]; i < sc.off[q + 1]; i++)
				if (g->dist[sc.to[i]] + 1 < d)
					d = g->dist[sc.to[i]] + 1;
			for (int i = 0; i < g->st[q].n_calls; i++) {
				const struct gcall *c = &g->calls[g->st[q].call_off + i];
				int32_t v = g->dist[g->start[c->rule]] + g->dist[c->ret];
				if (v < d)
					d = v;
			}
			if (d < g->dist[q]) {
				g->dist[q] = d;
				more = true;
			}
		}
	}
	free(sc.off);
	free(sc.to);
	return 0;
}

int64_t ms_gmatch_min_bytes(const struct ms_gmatch *m)
{
	if (m->accept)
		return 0;
	int64_t best = INT64_MAX;
	for (uint32_t at = 0; at < m->len; at += (uint32_t)m->buf[at] + 1) {
		int64_t s = 0;
		for (int i = 1; i <= m->buf[at]; i++)
			s += m->g->dist[m->buf[at + i]];
		if (s < best && s < FAR)  /* FAR and over: this stack never finishes */
			best = s;
	}
	return best;
}

/* ---- the walk's view ---- */

static int state_flags(struct ms_grammar *g, struct ms_err *err)
{
	if (!(g->flags = malloc((size_t)g->n_states + 1)))
		return ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	for (int32_t q = 0; q < g->n_states; q++)
		g->flags[q] = (uint8_t)((g->st[q].bytes ? MS_GST_BYTES : 0) |
					(g->st[q].final ? MS_GST_FINAL : 0) |
					(g->st[q].n_calls ? MS_GST_CALLS : 0));
	return 0;
}

void ms_grammar_view(const struct ms_grammar *g, struct ms_gview *v)
{
	*v = (struct ms_gview){.next = g->next, .cls = g->cls, .flags = g->flags,
			       .n_cls = g->n_cls, .n_states = g->n_states};
}

/* ---- compile ---- */

static int check_rules(const struct ms_gb *b, int root, struct ms_err *err)
{
	if (b->oom)
		return ms_err_set(err, -ENOMEM, "out of memory building the grammar");
	if (root < 0 || (uint32_t)root >= b->n_rules)
		return ms_err_set(err, -EINVAL, "the grammar has no root rule");
	for (uint32_t i = 0; i < b->n_nodes; i++) {
		const struct node *n = &b->nodes[i];
		if (n->kind == NK_REF && !ms_gb_defined(b, n->a))
			return ms_err_set(err, -EINVAL, "rule \"%s\" is used but not defined",
					  b->names[n->a]);
		if (n->kind == NK_REP && (n->min < 0 || (n->max >= 0 && n->max < n->min) ||
					  n->min > MS_GRAMMAR_MAX_REPEAT || n->max > MS_GRAMMAR_MAX_REPEAT))
			return ms_err_set(err, -E2BIG, "a repetition {%d,%d} is out of range (counts "
					  "up to %d)", n->min, n->max, MS_GRAMMAR_MAX_REPEAT);
	}
	return 0;
}

/* d->imp: the NFA states a DFA state is made of (closure). */
static void mark_important(struct dfa_build *d, uint32_t n_rules)
{
	const struct nfa *a = d->a;
	for (uint32_t s = 0; s < a->n; s++)
		for (int32_t e = a->head[s]; e >= 0 && !d->imp[s]; e = a->e[e].next)
			d->imp[s] = a->e[e].kind != E_EPS;
	for (uint32_t r = 0; r < n_rules; r++)
		if (d->accept[r] >= 0)
			d->imp[d->accept[r]] = 1;
}

static int build_nfa(const struct ms_gb *b, struct nfa *a, int32_t *start, int32_t *accept,
		     struct ms_err *err)
{
	for (uint32_t r = 0; r < b->n_rules; r++) {
		start[r] = nfa_state(a);
		accept[r] = b->body[r] >= 0 ? nfa_build(b, a, b->body[r], start[r]) : start[r];
		/* undefined rules are unused (checked): they match nothing */
		if (b->body[r] < 0)
			accept[r] = -1;
	}
	if (a->big)
		return ms_err_set(err, -E2BIG, "the grammar is too large (over %d automaton states)",
				  MS_GRAMMAR_MAX_STATES);
	return a->oom ? ms_err_set(err, -ENOMEM, "out of memory compiling the grammar") : 0;
}

int ms_gb_compile(const struct ms_gb *b, int root, struct ms_grammar **out, struct ms_err *err)
{
	*out = NULL;
	int rc = check_rules(b, root, err);
	if (rc)
		return rc;
	struct ms_grammar *g = calloc(1, sizeof(*g));
	struct nfa a = {0};
	struct dfa_build d = {.b = b, .a = &a, .g = g};
	int32_t *nstart = malloc((b->n_rules + 1) * 4);
	d.accept = malloc((b->n_rules + 1) * 4);
	if (!g || !nstart || !d.accept)
		rc = ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	if (!rc)
		rc = build_nfa(b, &a, nstart, d.accept, err);
	if (!rc) {
		byte_classes(b, g);
		g->n_rules = (int)b->n_rules;
		g->root = root;
		g->start = malloc(b->n_rules * 4);
		d.mark = calloc(a.n + 1, 4);
		d.clsmask = calloc((size_t)b->n_sets * 4 + 4, 8);
		d.imp = calloc(a.n + 1, 1);
		if (!g->start || !d.mark || !d.clsmask || !d.imp)
			rc = ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	}
	if (!rc)
		mark_important(&d, b->n_rules);
	if (!rc) {
		for (uint32_t s = 0; s < b->n_sets; s++)
			for (int x = 0; x < 256; x++)
				if (b->sets[s].w[x >> 6] >> (x & 63) & 1)
					d.clsmask[4 * s + (g->cls[x] >> 6)] |= 1ull << (g->cls[x] & 63);
		for (uint32_t r = 0; r < b->n_rules; r++)
			g->start[r] = nstart[r];  /* NFA starts; dfa_build_all maps them */
		rc = dfa_build_all(&d, err);
	}
	if (!rc) {
		g->calls = d.calls;
		d.calls = NULL;
		rc = left_recursion(g, b, err);
	}
	if (!rc)
		rc = min_dist(g, err);
	if (!rc)
		rc = state_flags(g, err);
	free(nstart);
	free(d.accept);
	free(d.mark);
	free(d.clsmask);
	free(d.imp);
	free(d.members);
	free(d.moff);
	free(d.mlen);
	free(d.mrule);
	free(d.table);
	free(d.calls);
	free(a.head);
	free(a.e);
	if (rc) {
		ms_grammar_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

/* ---- matching ---- */

#define VIS_CAP 8192  /* configurations seen in one step, a power of two */
#define VIS_MIN 64    /* the table's first size: most steps see a few */

/* A matcher's working memory, made on its first step: small, so that a
 * copy of a state costs little (tool-force copies one per candidate byte
 * when it closes a body). */
struct ms_gscratch {
	uint64_t *vis;          /* the configurations seen this step (hashes) */
	uint32_t *vis_gen;      /* their stamps: gen marks this step's */
	uint32_t vis_cap;       /* VIS_MIN .. VIS_CAP, doubled at half full */
	uint32_t gen;
	int32_t stk[MS_GRAMMAR_MAX_DEPTH + 2];
	int32_t *tmp;
	uint32_t tmp_cap;
	uint32_t *order;
	uint32_t order_cap;
	int32_t *spare[2];      /* feed's buffers, kept between feeds */
	uint32_t spare_cap[2];
	int visits;
};

static struct ms_gscratch *scratch_new(void)
{
	struct ms_gscratch *s = calloc(1, sizeof(*s));
	if (s) {
		s->vis = malloc(VIS_MIN * sizeof(*s->vis));
		s->vis_gen = calloc(VIS_MIN, sizeof(*s->vis_gen));
		s->vis_cap = VIS_MIN;
		s->gen = 1;
	}
	if (s && (!s->vis || !s->vis_gen)) {
		free(s->vis);
		free(s->vis_gen);
		free(s);
		s = NULL;
	}
	return s;
}

static void scratch_free(struct ms_gscratch *s)
{
	if (!s)
		return;
	free(s->vis);
	free(s->vis_gen);
	free(s->tmp);
	free(s->order);
	free(s->spare[0]);
	free(s->spare[1]);
	free(s);
}

/* Insert hash h, stamped gen, into a table of cap slots (not full). */
static void vis_put(uint64_t *vis, uint32_t *vgen, uint32_t cap, uint64_t h, uint32_t gen)
{
	uint32_t i = (uint32_t)h & (cap - 1);
	while (vgen[i] == gen)
		i = (i + 1) & (cap - 1);
	vgen[i] = gen;
	vis[i] = h;
}

/* The table twice the size, this step's entries kept; false: no memory. */
static bool vis_grow(struct ms_gscratch *s)
{
	uint32_t cap = s->vis_cap * 2;
	uint64_t *v = malloc(cap * sizeof(*v));
	uint32_t *g = calloc(cap, sizeof(*g));
	if (!v || !g) {
		free(v);
		free(g);
		return false;
	}
	for (uint32_t i = 0; i < s->vis_cap; i++)
		if (s->vis_gen[i] == s->gen)
			vis_put(v, g, cap, s->vis[i], s->gen);
	free(s->vis);
	free(s->vis_gen);
	s->vis = v, s->vis_gen = g, s->vis_cap = cap;
	return true;
}

/* Seen this step already? (marks it) */
static bool visited(struct ms_gscratch *s, const int32_t *stk, int depth)
{
	if ((uint32_t)s->visits * 2 >= s->vis_cap && (s->vis_cap >= VIS_CAP || !vis_grow(s)))
		return true;  /* full: go no further */
	uint64_t h = set_hash(stk, depth) | 1;
	uint32_t mask = s->vis_cap - 1, i = (uint32_t)h & mask;
	for (;; i = (i + 1) & mask) {  /* at most half full: ends */
		if (s->vis_gen[i] != s->gen) {
			s->vis_gen[i] = s->gen;
			s->vis[i] = h;
			s->visits++;
			return false;
		}
		if (s->vis[i] == h)
			return true;
	}
}

static bool out_push(struct ms_gmatch *o, const int32_t *stk, int depth)
{
	if (o->n >= MS_GRAMMAR_MAX_STACKS ||
	    !grow((void **)&o->buf, &o->cap, o->len + (uint32_t)depth + 1, 4))
		return false;
	o->buf[o->len++] = depth;
	memcpy(o->buf + o->len, stk, (size_t)depth * 4);
	o->len += (uint32_t)depth;
	o->n++;
	return true;
}

/* Every configuration stk[0..depth) leads to without a byte: stacks whose
 * top takes a byte into o, a finished root as o->accept. */
static void expand(const struct ms_grammar *g, struct ms_gscratch *s, int32_t *stk, int depth,
		   struct ms_gmatch *o)
{
	if (s->visits > VIS_CAP / 2 || visited(s, stk, depth))
		return;
	int32_t q = stk[depth - 1];
	const struct gstate *st = &g->st[q];
	if (st->bytes)
		out_push(o, stk, depth);
	for (int i = 0; i < st->n_calls; i++) {
		const struct gcall *c = &g->calls[st->call_off + i];
		const struct gstate *r = &g->st[c->ret];
		if (r->final && !r->bytes && !r->n_calls) {
			/* a tail call: nothing is left to do here, so no frame */
			stk[depth - 1] = g->start[c->rule];
			expand(g, s, stk, depth, o);
		} else if (depth < MS_GRAMMAR_MAX_DEPTH) {
			stk[depth - 1] = c->ret;
			stk[depth] = g->start[c->rule];
			expand(g, s, stk, depth + 1, o);
		}
		stk[depth - 1] = q;
	}
	if (st->final) {
		if (depth == 1)
			o->accept = true;
		else
			expand(g, s, stk, depth - 1, o);
		stk[depth - 1] = q;
	}
}

static int cmp_rec(const int32_t *a, const int32_t *b)
{
	if (a[0] != b[0])
		return a[0] < b[0] ? -1 : 1;
	for (int i = 1; i <= a[0]; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	return 0;
}

static const int32_t *sort_base;

static int cmp_off(const void *x, const void *y)
{
	return cmp_rec(sort_base + *(const uint32_t *)x, sort_base + *(const uint32_t *)y);
}

/* Sort o's stacks (canonical form; few stacks, so rarely any work). */
static bool canon(struct ms_gmatch *o, struct ms_gscratch *s)
{
	if (o->n < 2)
		return true;
	if (!grow((void **)&s->order, &s->order_cap, (uint32_t)o->n, 4) ||
	    !grow((void **)&s->tmp, &s->tmp_cap, o->len, 4))
		return false;
	bool sorted = true;
	for (uint32_t at = 0, i = 0; at < o->len; at += (uint32_t)o->buf[at] + 1, i++) {
		s->order[i] = at;
		if (i && cmp_rec(o->buf + s->order[i - 1], o->buf + at) > 0)
			sorted = false;
	}
	if (sorted)
		return true;
	sort_base = o->buf;  /* one engine thread sorts at a time per state */
	qsort(s->order, (size_t)o->n, 4, cmp_off);
	uint32_t w = 0;
	for (int i = 0; i < o->n; i++) {
		const int32_t *r = o->buf + s->order[i];
		memcpy(s->tmp + w, r, (size_t)(r[0] + 1) * 4);
		w += (uint32_t)r[0] + 1;
	}
	memcpy(o->buf, s->tmp, w * 4);
	return true;
}

/* A new step: nothing seen yet, o empty. */
static void step_begin(struct ms_gscratch *s, struct ms_gmatch *o)
{
	o->len = 0;
	o->n = 0;
	o->accept = false;
	s->gen++;
	s->visits = 0;
	if (!s->gen) { /* wrapped: forget every stamp */
		memset(s->vis_gen, 0, s->vis_cap * sizeof(*s->vis_gen));
		s->gen = 1;
	}
}

/* o = the stacks of buf[0..len) (n of them) after byte c. */
static void step_set(const struct ms_grammar *g, struct ms_gscratch *s, const int32_t *buf,
		     uint32_t len, uint8_t c, struct ms_gmatch *o)
{
	step_begin(s, o);
	int cl = g->cls[c];
	for (uint32_t at = 0; at < len; at += (uint32_t)buf[at] + 1) {
		int depth = buf[at];
		int32_t t = g->next[(size_t)buf[at + depth] * (size_t)g->n_cls + (size_t)cl];
		if (t < 0)
			continue;
		memcpy(s->stk, buf + at + 1, (size_t)depth * 4);
		s->stk[depth - 1] = t;
		expand(g, s, s->stk, depth, o);
	}
}

int ms_gmatch_init(struct ms_gmatch *m, const struct ms_grammar *g)
{
	memset(m, 0, sizeof(*m));
	m->g = g;
	m->scratch = scratch_new();
	if (!m->scratch)
		return -ENOMEM;
	m->scratch->stk[0] = g->start[g->root];
	expand(g, m->scratch, m->scratch->stk, 1, m);
	if (!canon(m, m->scratch)) {
		ms_gmatch_free(m);
		return -ENOMEM;
	}
	return 0;
}

void ms_gmatch_free(struct ms_gmatch *m)
{
	free(m->buf);
	scratch_free(m->scratch);
	memset(m, 0, sizeof(*m));
}

int ms_gmatch_copy(struct ms_gmatch *dst, const struct ms_gmatch *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->g = src->g;
	dst->buf = malloc((src->len + 1) * 4);  /* the scratch: on the first feed */
	if (!dst->buf)
		return -ENOMEM;
	if (src->len)  /* a finished state may have no buffer at all */
		memcpy(dst->buf, src->buf, src->len * 4);
	dst->len = dst->cap = src->len;
	dst->cap = src->len + 1;
	dst->n = src->n;
	dst->accept = src->accept;
	return 0;
}

/* Feed's two working states, on the scratch's spare buffers (kept there
 * between feeds: a token costs no allocation). */
static void feed_take(struct ms_gscratch *s, struct ms_gmatch *a, struct ms_gmatch *b)
{
	a->buf = s->spare[0], a->cap = s->spare_cap[0];
	b->buf = s->spare[1], b->cap = s->spare_cap[1];
}

static void feed_keep(struct ms_gscratch *s, struct ms_gmatch *a, struct ms_gmatch *b)
{
	s->spare[0] = a->buf, s->spare_cap[0] = a->cap;
	s->spare[1] = b->buf, s->spare_cap[1] = b->cap;
}

bool ms_gmatch_feed(struct ms_gmatch *m, const void *bytes, size_t n)
{
	const uint8_t *p = bytes;
	if (!n)
		return true;
	if (!m->scratch && !(m->scratch = scratch_new()))
		return false;
	struct ms_gmatch a = {.g = m->g}, b = {.g = m->g};
	feed_take(m->scratch, &a, &b);
	const struct ms_gmatch *cur = m;
	struct ms_gmatch *nx = &a;
	bool ok = true;
	for (size_t i = 0; ok && i < n; i++) {
		step_set(m->g, m->scratch, cur->buf, cur->len, p[i], nx);
		ok = nx->n || (nx->accept && i + 1 == n);
		cur = nx;
		nx = nx == &a ? &b : &a;
	}
	struct ms_gmatch *res = (struct ms_gmatch *)cur;
	if (ok && !canon(res, m->scratch))
		ok = false;
	if (ok) {
		/* the result's buffer becomes m's, m's old one a spare */
		int32_t *old = m->buf;
		uint32_t old_cap = m->cap;
		m->buf = res->buf, m->cap = res->cap;
		m->len = res->len, m->n = res->n, m->accept = res->accept;
		res->buf = old, res->cap = old_cap;
	}
	feed_keep(m->scratch, &a, &b);
	return ok;
}

uint64_t ms_gmatch_key(const struct ms_gmatch *m)
{
	return set_hash(m->buf, (int)m->len) ^ (m->accept ? 0x9e3779b97f4a7c15ull : 0);
}

bool ms_gmatch_equal(const struct ms_gmatch *a, const struct ms_gmatch *b)
{
	return a->len == b->len && a->accept == b->accept &&
	       (!a->len || !memcmp(a->buf, b->buf, (size_t)a->len * 4));
}

bool ms_grammar_accepts(const struct ms_grammar *g, const void *s, size_t n)
{
	struct ms_gmatch m;
	if (ms_gmatch_init(&m, g))
		return false;
	bool ok = ms_gmatch_feed(&m, s, n) && m.accept;
	ms_gmatch_free(&m);
	return ok;
}

/* ---- the walk ---- */

void ms_gwalk_init(struct ms_gwalk *w, const struct ms_grammar *g)
{
	memset(w, 0, sizeof(*w));
	w->set.g = g;
}

void ms_gwalk_free(struct ms_gwalk *w)
{
	free(w->set.buf);
	scratch_free(w->set.scratch);
	memset(w, 0, sizeof(*w));
}

static void to_single(struct ms_gwalk *w, const struct ms_gmatch *m)
{
	w->single = m->n == 1 && !m->accept;
	if (w->single) {
		w->nbelow = m->buf[0] - 1;
		w->below = m->buf + 1;
		w->top = m->buf[m->buf[0]];
	}
}

void ms_gwalk_from(struct ms_gwalk *w, const struct ms_gmatch *m)
{
	to_single(w, m);
	if (!w->single) {
		w->below = NULL;
		w->set.n = m->n;
		w->set.accept = m->accept;
		w->set.len = 0;
		if (grow((void **)&w->set.buf, &w->set.cap, m->len + 1, 4)) {
			if (m->len)  /* a finished state may have no buffer */
				memcpy(w->set.buf, m->buf, (size_t)m->len * 4);
			w->set.len = m->len;
		} else {
			w->set.n = 0;
		}
	}
}

void ms_gwalk_single(struct ms_gwalk *w, int32_t q)
{
	static const int32_t none[1];
	w->single = true;
	w->top = q;
	w->below = none;  /* memcpy of nothing from it still wants a pointer */
	w->nbelow = 0;
}

void ms_gwalk_below(struct ms_gwalk *w, const int32_t *below, int n)
{
	struct ms_gmatch *o = &w->set;
	w->single = false;
	o->len = 0;
	o->n = 0;
	o->accept = !n;
	if (!n || (!o->scratch && !(o->scratch = scratch_new())))
		return;
	step_begin(o->scratch, o);
	memcpy(o->scratch->stk, below, (size_t)n * 4);
	expand(o->g, o->scratch, o->scratch->stk, n, o);
	to_single(w, o);
}

bool ms_gwalk_copy(struct ms_gwalk *dst, const struct ms_gwalk *src)
{
	struct ms_gmatch *o = &dst->set;
	dst->single = src->single;
	dst->top = src->top;
	dst->below = src->below;
	dst->nbelow = src->nbelow;
	if (src->single)
		return true;
	o->len = 0;
	o->n = 0;
	o->accept = src->set.accept;
	if (!grow((void **)&o->buf, &o->cap, src->set.len + 1, 4))
		return false;
	if (src->set.len)
		memcpy(o->buf, src->set.buf, (size_t)src->set.len * 4);
	o->len = src->set.len;
	o->n = src->set.n;
	return true;
}

bool ms_gwalk_alive(const struct ms_gwalk *w)
{
	return w->single || w->set.n > 0 || w->set.accept;
}

bool ms_gwalk_step(const struct ms_gwalk *from, uint8_t c, struct ms_gwalk *to)
{
	const struct ms_grammar *g = to->set.g;
	if (from->single) {
		int32_t t = g->next[(size_t)from->top * (size_t)g->n_cls + g->cls[c]];
		if (t < 0)
			return false;
		if (g->flags[t] == MS_GST_BYTES) {  /* the common case: one lookup */
			to->single = true;
			to->below = from->below;
			to->nbelow = from->nbelow;
			to->top = t;
			return true;
		}
	}
	struct ms_gmatch *o = &to->set;
	if (!o->scratch && !(o->scratch = scratch_new()))
		return false;
	if (from->single) {
		/* one stack: rebuild it as a record for step_set */
		uint32_t need = (uint32_t)from->nbelow + 2;
		if (!grow((void **)&o->scratch->tmp, &o->scratch->tmp_cap, need, 4))
			return false;
		int32_t *r = o->scratch->tmp;
		r[0] = from->nbelow + 1;
		memcpy(r + 1, from->below, (size_t)from->nbelow * 4);
		r[from->nbelow + 1] = from->top;
		int32_t rec[MS_GRAMMAR_MAX_DEPTH + 2];
		memcpy(rec, r, need * 4);
		step_set(g, o->scratch, rec, need, c, o);
	} else {
		step_set(g, o->scratch, from->set.buf, from->set.len, c, o);
	}
	to_single(to, o);
	return to->single || o->n > 0 || o->accept;
}
