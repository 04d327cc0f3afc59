/* grammar-match.c: matching a compiled grammar, and the walk of
 * token-mask.c (grammar.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-int.h"

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
	to->work = 0;
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
	to->work = o->scratch->visits;
	to_single(to, o);
	return to->single || o->n > 0 || o->accept;
}
