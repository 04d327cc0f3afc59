/* grammar.c: expressions compiled into automata (grammar.h); the
 * builders are grammar-build.c's, matching grammar-match.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-int.h"

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
	uint64_t work;           /* closure visits and member edges so far */
	bool oom, big, slow;
};

/* The closures' visits a compilation may take: a request's grammar is
 * compiled on its HTTP thread, and some regexes of a few hundred bytes
 * (".{60}" after ".*") reach the state bound only after ~10^8 visits,
 * seconds of CPU and 100+ MB. The largest schema of
 * tests/grammar/structured_schemas.json takes 4 x 10^5. Counted: closure visits
 * and the (class, target) pairs of each state's members. */
#define MS_GRAMMAR_MAX_WORK (8u << 20)

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
	d->work += (uint64_t)n;
	while (sp) {
		int32_t s = stack[--sp];
		d->work++;
		if (d->imp[s])
			out[k++] = s;
		for (int32_t e = d->a->head[s]; e >= 0; e = d->a->e[e].next)
			if (d->a->e[e].kind == E_EPS && d->mark[d->a->e[e].to] != stamp) {
				d->mark[d->a->e[e].to] = stamp;
				stack[sp++] = d->a->e[e].to;
			}
	}
	if (d->work > MS_GRAMMAR_MAX_WORK)
		d->slow = d->big = true;  /* stops the build as the state bound does */
	return k;
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
	if (n) /* the empty set (a dead state) may come first: members still NULL */
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
	/* sorted holds the byte edges' targets, then one callee's return
	 * points: room for the larger of the two */
	bool ok = member_edges(d, q, pr, &fin);
	uint32_t n_calls = d->n_calls - call0, room = pr->n > n_calls ? pr->n : n_calls;
	if (!ok || !grow((void **)&pr->sorted, &pr->cap_sorted, room + 1, 4)) {
		d->oom = true;
		return;
	}
	d->work += pr->n;
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
	if (d->slow)
		return ms_err_set(err, -E2BIG, "the grammar is too complex to compile (over %u "
				  "automaton steps; a shorter or less ambiguous pattern would do)",
				  MS_GRAMMAR_MAX_WORK);
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
		       int32_t *stack, uint8_t *left, uint8_t *is_null)
{
	int sp = 0;
	stack[sp++] = g->start[r];
	seen[g->start[r]] = 1;
	while (sp) {
		int32_t q = stack[--sp];
		if (g->st[q].final)
			*is_null = 1;
		for (int i = 0; i < g->st[q].n_calls; i++) {
			const struct gcall *c = &g->calls[g->st[q].call_off + i];
			left[(size_t)r * (size_t)g->n_rules + (size_t)c->rule] = 1;
			if (nullable[c->rule] && !seen[c->ret]) {
				seen[c->ret] = 1;
				stack[sp++] = c->ret;
			}
		}
	}
}

static int left_recursion(const struct ms_grammar *g, const struct ms_gb *b, struct ms_err *err)
{
	int nr = g->n_rules, rc = 0;
	uint8_t *nullable = calloc((size_t)nr, 1), *seen = calloc((size_t)g->n_states, 1);
	uint8_t *left = calloc((size_t)nr * (size_t)nr, 1), *color = calloc((size_t)nr, 1);
	int32_t *stack = malloc((size_t)g->n_states * 4 + 4), *path = malloc((size_t)nr * 8 + 8);
	if (!nullable || !seen || !left || !color || !stack || !path)
		rc = ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	for (bool more = true; !rc && more;) {
		more = false;
		memset(left, 0, (size_t)nr * (size_t)nr);
		for (int r = 0; r < nr; r++) {
			memset(seen, 0, (size_t)g->n_states);
			uint8_t was = nullable[r];
			left_reach(g, r, nullable, seen, stack, left, &nullable[r]);
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
	free(stack);
	free(path);
	return rc;
}

/* ---- the fewest bytes to a finish ---- */

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

/* A grammar with no sentence (a regex "[]x") would leave the sampler no
 * allowed token: refused here, not served as an answer cut at once. */
static int some_sentence(const struct ms_grammar *g, struct ms_err *err)
{
	struct ms_gmatch m;
	if (ms_gmatch_init(&m, g))
		return ms_err_set(err, -ENOMEM, "out of memory compiling the grammar");
	bool none = ms_gmatch_min_bytes(&m) == INT64_MAX;
	ms_gmatch_free(&m);
	return none ? ms_err_set(err, -EINVAL, "the grammar matches no text at all") : 0;
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
	if (!rc)
		rc = some_sentence(g, err);
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
