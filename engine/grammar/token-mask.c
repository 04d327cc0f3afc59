/* token-mask.c: a grammar's allowed tokens, walked and cached (token-mask.h). */
#include "token-mask.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ms-clock.h"
#include "ms-list.h"

#define MAX_TOKEN_BYTES 1024   /* longer tokens are never a grammar's */
#define N_PLAIN 16             /* slices of plain tokens: 1 .. N_PLAIN characters */
#define REST N_PLAIN           /* the last slice: every other token */
#define N_SLICES (N_PLAIN + 1)

/* ---- plain characters: those a JSON string holds as themselves ---- */

/* Their UTF-8 forms (U+0020 and up but " and \, no surrogates): a lead
 * byte range, then the continuation ranges. */
struct utf8_form {
	uint8_t n;
	uint8_t lo[4], hi[4];
};

#define N_FORMS 11

static const struct utf8_form plain_forms[N_FORMS] = {
	{1, {0x20}, {0x21}}, {1, {0x23}, {0x5b}}, {1, {0x5d}, {0x7f}},
	{2, {0xc2, 0x80}, {0xdf, 0xbf}},
	{3, {0xe0, 0xa0, 0x80}, {0xe0, 0xbf, 0xbf}},
	{3, {0xe1, 0x80, 0x80}, {0xec, 0xbf, 0xbf}},
	{3, {0xed, 0x80, 0x80}, {0xed, 0x9f, 0xbf}},
	{3, {0xee, 0x80, 0x80}, {0xef, 0xbf, 0xbf}},
	{4, {0xf0, 0x90, 0x80, 0x80}, {0xf0, 0xbf, 0xbf, 0xbf}},
	{4, {0xf1, 0x80, 0x80, 0x80}, {0xf3, 0xbf, 0xbf, 0xbf}},
	{4, {0xf4, 0x80, 0x80, 0x80}, {0xf4, 0x8f, 0xbf, 0xbf}},
};

static bool form_at(const struct utf8_form *f, const uint8_t *p, uint32_t avail)
{
	if (avail < f->n)
		return false;
	for (int k = 0; k < f->n; k++)
		if (p[k] < f->lo[k] || p[k] > f->hi[k])
			return false;
	return true;
}

/* A token's slice: its count of characters when all are plain and there
 * are N_PLAIN or fewer (slice count - 1), else REST. */
static int token_slice(const uint8_t *p, uint32_t n)
{
	int chars = 0;
	for (uint32_t i = 0; i < n; chars++) {
		int f = 0;
		while (f < N_FORMS && !form_at(&plain_forms[f], p + i, n - i))
			f++;
		if (f == N_FORMS || chars == N_PLAIN)
			return REST;
		i += plain_forms[f].n;
	}
	return chars - 1;
}

/* ---- the trie ---- */

struct tnode {
	uint8_t byte;
	uint16_t depth;     /* 1 for a first byte */
	int32_t end;        /* the index past this node's subtree */
	int32_t tok, ntok;  /* ids[tok .. tok + ntok): tokens spelled exactly here */
};

/* The tokens are cut in slices (llguidance's): those of 1, 2 .. N_PLAIN
 * plain characters, and the rest. Each slice is a trie of its own, laid
 * one after another, its tokens a contiguous run of ids[]; a state that
 * takes every string of L plain characters allows all of slice L at once
 * (a bitset; cum: slices 1 .. L together), one that takes none of them
 * skips it, and only the others are walked. Inside a JSON string that
 * leaves the REST (~6k tokens of 201k on o200k) to walk. */
struct ms_vocab_trie {
	int64_t vocab;
	int32_t n_nodes;
	struct tnode *nodes;
	int32_t *ids;
	uint32_t *off, *len;   /* per id: its bytes in text */
	uint8_t *text;
	int max_depth;
	int32_t byte_tok[256];
	int32_t slice_node[N_SLICES + 1];  /* slice s: nodes [slice_node[s], slice_node[s + 1]) */
	/* slice s's first bytes: their nodes (-1: none), so that a walk tries
	 * a first byte without reading its node (they lie a subtree apart: a
	 * cache miss each) */
	int32_t root[N_SLICES][256];
	size_t words;                      /* of a bitset over the vocabulary */
	uint64_t *cum;                     /* [L - 1]: slices 1 .. L's tokens, L <= N_PLAIN */
};

struct tok_ref { const uint8_t *p; uint32_t n; int32_t id; int slice; };

static int cmp_tok(const void *a, const void *b)
{
	const struct tok_ref *x = a, *y = b;
	if (x->slice != y->slice)
		return x->slice < y->slice ? -1 : 1;
	uint32_t n = x->n < y->n ? x->n : y->n;
	int c = memcmp(x->p, y->p, n);
	if (c)
		return c;
	return x->n != y->n ? (x->n < y->n ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

/* The preorder array of the sorted tokens (shared prefixes, one node;
 * each slice a trie of its own). */
static int build_nodes(struct ms_vocab_trie *v, const struct tok_ref *t, int32_t n)
{
	size_t cap = 0;
	for (int32_t i = 0; i < n; i++)
		cap += t[i].n;
	v->nodes = malloc((cap + 1) * sizeof(struct tnode));
	v->ids = malloc(((size_t)n + 1) * sizeof(int32_t));
	if (!v->nodes || !v->ids)
		return -ENOMEM;
	int32_t path[MAX_TOKEN_BYTES + 1];  /* node of each depth on the current path */
	uint32_t depth = 0;
	const struct tok_ref *prev = NULL;
	int slice = -1;
	memset(v->root, 0xff, sizeof(v->root));
	for (int32_t i = 0; i < n; i++) {
		uint32_t l = 0;
		if (prev && prev->slice == t[i].slice)
			while (l < prev->n && l < t[i].n && prev->p[l] == t[i].p[l])
				l++;
		while (depth > l)  /* close the nodes past the common prefix */
			v->nodes[path[--depth]].end = v->n_nodes;
		while (slice < t[i].slice)  /* a new slice (empty ones between) */
			v->slice_node[++slice] = v->n_nodes;
		for (; depth < t[i].n; depth++) {
			struct tnode *nd = &v->nodes[v->n_nodes];
			*nd = (struct tnode){t[i].p[depth], (uint16_t)(depth + 1), 0, i, 0};
			if (!depth)
				v->root[slice][nd->byte] = v->n_nodes;
			path[depth] = v->n_nodes++;
		}
		struct tnode *last = &v->nodes[path[depth - 1]];
		if (!last->ntok)
			last->tok = i;
		last->ntok++;
		v->ids[i] = t[i].id;
		if ((int)depth > v->max_depth)
			v->max_depth = (int)depth;
		prev = &t[i];
	}
	while (depth)
		v->nodes[path[--depth]].end = v->n_nodes;
	while (slice < N_SLICES)
		v->slice_node[++slice] = v->n_nodes;
	return 0;
}

/* v->cum: each plain slice's tokens, then the running union. */
static int build_cum(struct ms_vocab_trie *v, const struct tok_ref *t, int32_t n)
{
	size_t w = v->words;
	if (!(v->cum = calloc(N_PLAIN * w, 8)))
		return -ENOMEM;
	for (int32_t i = 0; i < n && t[i].slice < N_PLAIN; i++)
		v->cum[(size_t)t[i].slice * w + (size_t)(t[i].id >> 6)] |= 1ull << (t[i].id & 63);
	for (size_t l = 1; l < N_PLAIN; l++)
		for (size_t k = 0; k < w; k++)
			v->cum[l * w + k] |= v->cum[(l - 1) * w + k];
	return 0;
}

int ms_vocab_trie_new(const struct ms_vocab *voc, int64_t vocab, struct ms_vocab_trie **out,
		      struct ms_err *err)
{
	*out = NULL;
	int32_t n_ids = voc->ops->n_ids(voc->tok);
	int64_t lim = vocab < n_ids ? vocab : n_ids;
	struct ms_vocab_trie *v = calloc(1, sizeof(*v));
	struct tok_ref *t = malloc(((size_t)lim + 1) * sizeof(*t));
	int rc = v && t ? 0 : -ENOMEM;
	if (!rc) {
		v->vocab = vocab;
		v->words = (size_t)(vocab + 63) / 64;
		v->off = calloc((size_t)vocab + 1, 4);
		v->len = calloc((size_t)vocab + 1, 4);
		rc = v->off && v->len ? 0 : -ENOMEM;
	}
	int32_t n = 0;
	size_t bytes = 0;
	for (int b = 0; v && b < 256; b++)
		v->byte_tok[b] = -1;
	for (int32_t id = 0; !rc && id < lim; id++) {
		size_t len;
		const char *b = voc->ops->bytes(voc->tok, id, &len);
		if (!b || !len || len > MAX_TOKEN_BYTES || voc->ops->is_special(voc->tok, id))
			continue;
		t[n++] = (struct tok_ref){(const uint8_t *)b, (uint32_t)len, id,
					  token_slice((const uint8_t *)b, (uint32_t)len)};
		if (len == 1 && v->byte_tok[(uint8_t)b[0]] < 0)
			v->byte_tok[(uint8_t)b[0]] = id;
		bytes += len;
	}
	if (!rc && !(v->text = malloc(bytes + 1)))
		rc = -ENOMEM;
	size_t at = 0;
	for (int32_t i = 0; !rc && i < n; i++) {
		memcpy(v->text + at, t[i].p, t[i].n);
		v->off[t[i].id] = (uint32_t)at;
		v->len[t[i].id] = t[i].n;
		t[i].p = v->text + at;
		at += t[i].n;
	}
	if (!rc) {
		qsort(t, (size_t)n, sizeof(*t), cmp_tok);
		rc = build_nodes(v, t, n);
	}
	if (!rc)
		rc = build_cum(v, t, n);
	free(t);
	if (rc) {
		ms_vocab_trie_free(v);
		return ms_err_set(err, rc, "out of memory building the vocabulary trie");
	}
	*out = v;
	return 0;
}

void ms_vocab_trie_free(struct ms_vocab_trie *v)
{
	if (!v)
		return;
	free(v->nodes);
	free(v->ids);
	free(v->off);
	free(v->len);
	free(v->text);
	free(v->cum);
	free(v);
}

int64_t ms_vocab_trie_vocab(const struct ms_vocab_trie *v)
{
	return v->vocab;
}

const uint8_t *ms_vocab_trie_bytes(const struct ms_vocab_trie *v, int32_t id, uint32_t *len)
{
	if (id < 0 || id >= v->vocab || !v->len[id]) {
		*len = 0;
		return NULL;
	}
	*len = v->len[id];
	return v->text + v->off[id];
}

int32_t ms_vocab_trie_byte_token(const struct ms_vocab_trie *v, uint8_t b)
{
	return v->byte_tok[b];
}

/* ---- the cache ---- */

#define N_BUCKETS 4096

struct entry {
	uint64_t key;
	int32_t *state;
	uint32_t len;
	bool accept;
	uint64_t *bits;
	struct entry *hnext;      /* bucket chain */
	struct ms_list_node link; /* in the LRU */
};

/* Per form of plain character and byte of it, the grammar's classes of
 * that byte range (each once). */
struct form_cls {
	uint8_t n[N_FORMS][4];
	uint8_t c[N_FORMS][4][64];
};

#define UNKNOWN 0xff  /* plain[], dead[]: not worked out yet */

/* What a top state allows whatever is below it (xgrammar's split of a
 * mask): the tokens its rule takes by itself, the same under any stack
 * (kept per state: each is walked once per grammar), and the trie nodes
 * where that rule may end (pop points: the rest of those tokens is for
 * the stack below to take, looked at per mask). */
struct top {
	uint8_t plain;        /* slices 1 .. plain: all allowed (explore) */
	int16_t depth;        /* the deepest stack its walk made, q's frame 1 */
	int32_t n_ids, n_pops;
	int32_t *ids;         /* the other tokens allowed, when few; */
	uint64_t *bits;       /* else as a bitset */
	int32_t *pops;
	size_t bytes;
};

static void top_free(struct top *e)
{
	if (!e)
		return;
	free(e->ids);
	free(e->bits);
	free(e->pops);
	free(e);
}

struct ms_tmask {
	atomic_int refs;
	ms_mask_words_fn *apply;   /* the backend's writer, chosen at its start */
	struct ms_grammar *g;
	const struct ms_vocab_trie *v;
	struct ms_gview gv;
	size_t words, bound;
	pthread_mutex_t lock;
	struct entry *bucket[N_BUCKETS];
	struct ms_list lru;
	struct ms_tmask_stats st;
	struct ms_gwalk *lv;      /* the walk's levels, kept between walks */
	int n_lv;
	/* per state, what strings of plain characters do from it (explore):
	 * all of up to plain[q] characters live, none of dead[q] or more */
	uint8_t *plain, *dead;
	struct form_cls fc;
	struct top **tops;        /* per state, what it allows by itself; NULL: not yet
				   * (their bytes in st.top_bytes, at most bound / 2) */
	uint64_t *tmp;            /* a bitset of scratch */
	struct ms_gwalk ctx;      /* the stack below a rule that ends */
	int32_t *pops;            /* the context-free walk's pop points */
	uint32_t n_pops, cap_pops;
	int rel_depth;            /* its deepest stack */
	bool rel_oom;
	int64_t work;             /* this mask's configurations expanded so far */
	bool over;                /* past MS_TMASK_MAX_WORK: the walk stopped */
};

/* t->fc from the grammar's byte classes. */
static void form_classes(struct ms_tmask *t)
{
	for (int f = 0; f < N_FORMS; f++)
		for (int k = 0; k < plain_forms[f].n; k++) {
			uint8_t *n = &t->fc.n[f][k], *c = t->fc.c[f][k];
			*n = 0;
			for (int b = plain_forms[f].lo[k]; b <= plain_forms[f].hi[k]; b++) {
				uint8_t x = t->gv.cls[b];
				int i = 0;
				while (i < *n && c[i] != x)
					i++;
				if (i == *n)  /* a range is 64 bytes at most */
					c[(*n)++] = x;
			}
		}
}

static void entry_free(struct entry *e)
{
	free(e->state);
	free(e->bits);
	free(e);
}

/* Everything of t (made or half made), its grammar included. */
static void tmask_destroy(struct ms_tmask *t)
{
	for (struct ms_list_node *n = t->lru.head, *next; n; n = next) {
		next = n->next;
		entry_free(ms_list_entry(n, struct entry, link));
	}
	for (int i = 0; t->lv && i < t->n_lv; i++)
		ms_gwalk_free(&t->lv[i]);
	free(t->lv);
	for (int32_t q = 0; t->tops && q < t->gv.n_states; q++)
		top_free(t->tops[q]);
	free(t->tops);
	free(t->tmp);
	free(t->pops);
	ms_gwalk_free(&t->ctx);
	free(t->plain);
	free(t->dead);
	pthread_mutex_destroy(&t->lock);
	ms_grammar_free(t->g);
	free(t);
}

int ms_tmask_new(struct ms_grammar *g, const struct ms_vocab_trie *v, size_t cache_bytes,
		 ms_mask_words_fn *write, struct ms_tmask **out, struct ms_err *err)
{
	struct ms_tmask *t = calloc(1, sizeof(*t));
	*out = NULL;
	if (!t) {
		ms_grammar_free(g);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&t->lock, NULL);
	atomic_init(&t->refs, 1);
	t->g = g;
	t->v = v;
	ms_grammar_view(g, &t->gv);
	size_t ns = (size_t)t->gv.n_states + 1;
	t->n_lv = v->max_depth + 1;
	t->lv = calloc((size_t)t->n_lv, sizeof(*t->lv));
	t->plain = malloc(ns);
	t->dead = malloc(ns);
	t->tops = calloc(ns, sizeof(*t->tops));
	t->tmp = malloc(v->words * 8 + 8);
	if (!t->lv || !t->plain || !t->dead || !t->tops || !t->tmp) {
		tmask_destroy(t);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	memset(t->plain, UNKNOWN, ns);
	memset(t->dead, UNKNOWN, ns);
	form_classes(t);
	t->words = (size_t)(v->vocab + 63) / 64;
	t->bound = cache_bytes ? cache_bytes : (size_t)64 << 20;
	t->apply = write ? write : ms_mask_words_ref;
	for (int i = 0; i < t->n_lv; i++)
		ms_gwalk_init(&t->lv[i], g);
	ms_gwalk_init(&t->ctx, g);
	*out = t;
	return 0;
}

struct ms_tmask *ms_tmask_ref(struct ms_tmask *t)
{
	atomic_fetch_add(&t->refs, 1);
	return t;
}

void ms_tmask_unref(struct ms_tmask *t)
{
	if (t && atomic_fetch_sub(&t->refs, 1) == 1)
		tmask_destroy(t);
}

const struct ms_grammar *ms_tmask_grammar(const struct ms_tmask *t)
{
	return t->g;
}

const struct ms_vocab_trie *ms_tmask_vocab(const struct ms_tmask *t)
{
	return t->v;
}

static size_t entry_bytes(const struct ms_tmask *t, const struct entry *e)
{
	return sizeof(*e) + e->len * 4 + t->words * 8;
}

static void evict(struct ms_tmask *t)
{
	while (t->st.bytes > t->bound && t->lru.tail && t->lru.tail != t->lru.head) {
		struct entry *e = ms_list_entry(t->lru.tail, struct entry, link), **pp = &t->bucket[e->key % N_BUCKETS];
		while (*pp != e)
			pp = &(*pp)->hnext;
		*pp = e->hnext;
		ms_list_unlink(&t->lru, &e->link);
		t->st.bytes -= entry_bytes(t, e);
		t->st.entries--;
		t->st.evictions++;
		entry_free(e);
	}
}

/* ---- what plain characters do from a state ---- */

/* The states a set of strings reaches: few (a string's position). */
#define X_CAP 32

struct xset {
	int32_t s[X_CAP];
	int n;
	bool over;    /* more than X_CAP: incomplete */
};

static void xadd(struct xset *x, int32_t q)
{
	for (int i = 0; i < x->n; i++)
		if (x->s[i] == q)
			return;
	if (x->n == X_CAP)
		x->over = true;
	else
		x->s[x->n++] = q;
}

static bool xsame(const struct xset *a, const struct xset *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++) {
		int k = 0;
		while (k < b->n && b->s[k] != a->s[i])
			k++;
		if (k == b->n)
			return false;
	}
	return true;
}

/* One character further from a set: ok, every plain character has its
 * bytes (and lands where a byte can follow: a token may end there); esc,
 * some state on the way may pop or call (the stack below could then
 * take what the rule refuses). */
struct step {
	const struct ms_tmask *t;
	struct xset *to;
	bool ok, esc;
};

/* Form f's byte k on, from state q. */
static void form_step(struct step *e, int f, int k, int32_t q)
{
	const struct ms_gview *gv = &e->t->gv;
	const struct form_cls *fc = &e->t->fc;
	for (int i = 0; i < fc->n[f][k]; i++) {
		int32_t r = gv->next[(size_t)q * (size_t)gv->n_cls + fc->c[f][k][i]];
		if (r < 0) {
			e->ok = false;
			continue;
		}
		uint8_t fl = gv->flags[r];
		e->esc |= (fl & (MS_GST_FINAL | MS_GST_CALLS)) != 0;
		if (k + 1 < plain_forms[f].n && k < 3) /* k < 3: forms are at most 4 bytes */
			form_step(e, f, k + 1, r);
		else if (fl & MS_GST_BYTES)
			xadd(e->to, r);
		else
			e->ok = false;
	}
}

/* plain[q]: every string of up to that many plain characters (at most
 * N_PLAIN) lives from q by bytes alone, whatever is below q; dead[q]: no
 * string of that many does, and none meets a pop or call on the way (so
 * none lives from q whatever is below); N_PLAIN + 1 when unknown. Each
 * depth's states from the last's, until they repeat (a string's inside:
 * at once) or run out (a maxLength string: past its length). */
static void explore(struct ms_tmask *t, int32_t q)
{
	struct xset a = {.n = 0}, b = {.n = 0}, *x = &a, *y = &b;
	xadd(x, q);
	int plain = N_PLAIN, dead = N_PLAIN + 1;
	bool esc = (t->gv.flags[q] & (MS_GST_FINAL | MS_GST_CALLS)) != 0;
	for (int d = 1; d <= N_PLAIN; d++) {
		struct step e = {t, y, true, false};
		y->n = 0;
		y->over = false;
		for (int i = 0; i < x->n; i++)
			for (int f = 0; f < N_FORMS; f++)
				form_step(&e, f, 0, x->s[i]);
		esc |= e.esc;
		if (!e.ok && plain == N_PLAIN)
			plain = d - 1;
		if (!y->n && !y->over) {
			dead = esc ? dead : d;
			break;
		}
		if (y->over) {  /* beyond this depth: unknown */
			plain = plain < d ? plain : d;
			break;
		}
		if (xsame(x, y) || (plain < N_PLAIN && esc))
			break;  /* the same from here on, or nothing more to learn */
		struct xset *z = x;
		x = y, y = z;
	}
	t->plain[q] = (uint8_t)plain;
	t->dead[q] = (uint8_t)dead;
}

/* ---- the walk ---- */

static void set_tokens(const struct ms_vocab_trie *v, const struct tnode *nd, uint64_t *bits)
{
	for (int32_t k = 0; k < nd->ntok; k++) {
		int32_t id = v->ids[nd->tok + k];
		bits[id >> 6] |= 1ull << (id & 63);
	}
}

/* After a step of the context-free walk that left one plain stack: its
 * deepest stack noted, a pop point where q's rule ends; false when no
 * stack goes on (the tokens here and under are the below's, if any). */
static bool rel_step(struct ms_tmask *t, int32_t node, const struct ms_gwalk *to)
{
	int depth = to->single ? to->nbelow + 1 : 0;
	for (uint32_t at = 0; !to->single && at < to->set.len; at += (uint32_t)to->set.buf[at] + 1)
		depth = to->set.buf[at] > depth ? to->set.buf[at] : depth;
	t->rel_depth = depth > t->rel_depth ? depth : t->rel_depth;
	if (!to->single && to->set.accept) {
		if (t->n_pops == t->cap_pops) {
			uint32_t c = t->cap_pops ? 2 * t->cap_pops : 64;
			int32_t *p = realloc(t->pops, c * sizeof(*p));
			if (!p) {
				t->rel_oom = true;
				return false;
			}
			t->pops = p, t->cap_pops = c;
		}
		t->pops[t->n_pops++] = node;
	}
	return to->single || to->set.n > 0;
}

/* Tokens of nodes [lo, hi) (whole subtrees) into bits, from the walk's
 * level of their parents. One table lookup a byte while the grammar stays
 * in one stack and inside its rule; ms_gwalk_step where it pops, calls or
 * splits. rel: the context-free walk (rel_step). */
static void walk_nodes(struct ms_tmask *t, int32_t lo, int32_t hi, uint64_t *bits, bool rel)
{
	const struct ms_vocab_trie *v = t->v;
	const struct ms_gview gv = t->gv;
	struct ms_gwalk *lv = t->lv;
	for (int32_t i = lo; i < hi && !t->over;) {
		const struct tnode *nd = &v->nodes[i];
		const struct ms_gwalk *from = &lv[nd->depth - 1];
		struct ms_gwalk *to = &lv[nd->depth];
		if (from->single) {
			int32_t q = gv.next[(size_t)from->top * (size_t)gv.n_cls + gv.cls[nd->byte]];
			if (q >= 0 && gv.flags[q] == MS_GST_BYTES) {  /* the common case */
				to->single = true;
				to->top = q;
				to->below = from->below;
				to->nbelow = from->nbelow;
				set_tokens(v, nd, bits);
				i++;
				continue;
			}
			if (q < 0) {
				i = nd->end;
				continue;
			}
		}
		bool live = ms_gwalk_step(from, nd->byte, to);
		if ((t->work += to->work) > MS_TMASK_MAX_WORK) {
			t->over = true;
			return;
		}
		if (!live || (rel && !rel_step(t, i, to))) {
			i = nd->end;
			continue;
		}
		set_tokens(v, nd, bits);
		i++;
	}
}

/* Slice s from lv[0]: each first byte the grammar takes, its subtree. */
static void walk_slice(struct ms_tmask *t, int s, uint64_t *bits, bool rel)
{
	const struct ms_vocab_trie *v = t->v;
	const struct ms_gwalk *w = &t->lv[0];
	const int32_t *row = w->single ? t->gv.next + (size_t)w->top * (size_t)t->gv.n_cls : NULL;
	for (int b = 0; b < 256 && !t->over; b++) {
		int32_t i = v->root[s][b];
		if (i >= 0 && (!row || row[t->gv.cls[b]] >= 0))
			walk_nodes(t, i, v->nodes[i].end, bits, rel);
	}
}

/* The slices that lv[0] walks: past those allowed whole (plain), short of
 * those none of which can live (dead), and the rest. */
static void walk_slices(struct ms_tmask *t, int plain, int dead, uint64_t *bits, bool rel)
{
	for (int l = plain + 1; l <= N_PLAIN && l < dead; l++)
		walk_slice(t, l - 1, bits, rel);
	walk_slice(t, REST, bits, rel);
}

/* t->tmp's tokens as ids (e->ids, when fewer than the bitset's bytes) or
 * the bitset; false: out of memory. */
static bool top_tokens(struct ms_tmask *t, struct top *e)
{
	const uint64_t *b = t->tmp;
	int32_t cap = (int32_t)t->words * 2;
	bool many = false;
	if (!(e->ids = malloc((size_t)cap * 4 + 4)))
		return false;
	for (size_t w = 0; w < t->words && !many; w++)
		for (uint64_t x = b[w]; x && !many; x &= x - 1) {
			many = e->n_ids == cap;
			if (!many)
				e->ids[e->n_ids++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(x));
		}
	if (!many) {
		int32_t *r = realloc(e->ids, (size_t)e->n_ids * 4 + 4);
		e->ids = r ? r : e->ids;
		e->bytes += (size_t)e->n_ids * 4;
		return true;
	}
	free(e->ids);
	e->ids = NULL;
	e->n_ids = 0;
	e->bytes += t->words * 8;
	if ((e->bits = malloc(t->words * 8)))
		memcpy(e->bits, b, t->words * 8);
	return e->bits != NULL;
}

/* q's entry from a walk of the stack [q] alone; NULL: out of memory. */
static struct top *top_walk(struct ms_tmask *t, int32_t q)
{
	memset(t->tmp, 0, t->words * 8);
	t->n_pops = 0;
	t->rel_depth = 1;
	t->rel_oom = false;
	ms_gwalk_single(&t->lv[0], q);
	walk_slices(t, t->plain[q], t->dead[q], t->tmp, true);
	struct top *e = calloc(1, sizeof(*e));
	if (!e || t->rel_oom || t->over)
		return free(e), NULL;
	*e = (struct top){.plain = t->plain[q], .depth = (int16_t)t->rel_depth,
			  .n_pops = (int32_t)t->n_pops, .bytes = sizeof(*e) + t->n_pops * 4};
	e->pops = malloc(t->n_pops * 4 + 4);
	if (!e->pops || !top_tokens(t, e))
		return top_free(e), NULL;
	if (t->n_pops)
		memcpy(e->pops, t->pops, t->n_pops * 4);
	return e;
}

/* q's entry, walked on the first need; NULL: none (out of memory, or
 * the entries' share of the cache spent). */
static struct top *top_get(struct ms_tmask *t, int32_t q)
{
	if (t->tops[q])
		return t->tops[q];
	if (t->st.top_bytes > t->bound / 2)
		return NULL;
	if (t->plain[q] == UNKNOWN)
		explore(t, q);
	struct top *e = top_walk(t, q);
	if (e) {
		t->tops[q] = e;
		t->st.tops++;
		t->st.top_bytes += e->bytes;
	}
	return e;
}

/* The tokens that end the top rule of stack rec (a matcher's record) at
 * one of e's pop points and go on in the stack below. */
static void below_tokens(struct ms_tmask *t, const int32_t *rec, const struct top *e,
			 uint64_t *bits)
{
	const struct ms_vocab_trie *v = t->v;
	ms_gwalk_below(&t->ctx, rec + 1, rec[0] - 1);
	bool alive = ms_gwalk_alive(&t->ctx), stacks = t->ctx.single || t->ctx.set.n > 0;
	for (int32_t k = 0; k < e->n_pops && !t->over; k++) {
		int32_t p = e->pops[k];
		const struct tnode *nd = &v->nodes[p];
		if (alive)
			set_tokens(v, nd, bits);
		if (stacks && nd->end > p + 1 && ms_gwalk_copy(&t->lv[nd->depth], &t->ctx))
			walk_nodes(t, p + 1, nd->end, bits, false);
	}
}

/* m's allowed tokens walked from m as a whole: where entries cannot be
 * used (out of memory, a stack near the depth limit, which the entry's
 * walk from depth 1 would not meet). */
static void walk_direct(struct ms_tmask *t, const struct ms_gmatch *m, int plain, int dead,
			uint64_t *bits)
{
	if (plain)
		memcpy(bits, t->v->cum + (size_t)(plain - 1) * t->v->words, t->words * 8);
	ms_gwalk_from(&t->lv[0], m);
	walk_slices(t, plain, dead, bits, false);
}

/* Stack rec's entry when it can stand for the stack (NULL: walk m whole). */
static struct top *stack_top(struct ms_tmask *t, const int32_t *rec)
{
	int32_t q = rec[rec[0]];
	if (t->plain[q] == UNKNOWN)
		explore(t, q);
	struct top *e = top_get(t, q);
	return e && rec[0] - 1 + e->depth < MS_GRAMMAR_MAX_DEPTH ? e : NULL;
}

/* m's allowed tokens into bits: each stack's, from its top's entry and
 * what ends that rule; the plain slices allowed whole from the trie's
 * bitsets (explore). */
static void walk(struct ms_tmask *t, const struct ms_gmatch *m, uint64_t *bits)
{
	memset(bits, 0, t->words * 8);
	if (!m->n)
		return;
	int plain = 0, dead = 0;
	bool whole = false;
	for (uint32_t at = 0; at < m->len; at += (uint32_t)m->buf[at] + 1) {
		int32_t q = m->buf[at + m->buf[at]];
		whole |= !stack_top(t, m->buf + at);
		plain = t->plain[q] > plain ? t->plain[q] : plain;
		dead = t->dead[q] > dead ? t->dead[q] : dead;
	}
	if (t->over)
		return;
	if (whole) {
		walk_direct(t, m, plain, dead, bits);
		return;
	}
	if (plain)
		memcpy(bits, t->v->cum + (size_t)(plain - 1) * t->v->words, t->words * 8);
	for (uint32_t at = 0; at < m->len && !t->over; at += (uint32_t)m->buf[at] + 1) {
		const struct top *e = t->tops[m->buf[at + m->buf[at]]];
		for (int32_t k = 0; k < e->n_ids; k++)
			bits[e->ids[k] >> 6] |= 1ull << (e->ids[k] & 63);
		for (size_t w = 0; e->bits && w < t->words; w++)
			bits[w] |= e->bits[w];
		if (e->n_pops)
			below_tokens(t, m->buf + at, e, bits);
	}
}

/* The entry of m's state, found or walked (under the lock): 0, -ENOMEM, or
 * -E2BIG when the walk passed MS_TMASK_MAX_WORK. */
static int lookup(struct ms_tmask *t, const struct ms_gmatch *m, struct entry **out)
{
	*out = NULL;
	uint64_t key = ms_gmatch_key(m);
	for (struct entry *e = t->bucket[key % N_BUCKETS]; e; e = e->hnext)
		if (e->key == key && e->len == m->len && e->accept == m->accept &&
		    (!m->len || !memcmp(e->state, m->buf, (size_t)m->len * 4))) {
			t->st.hits++;
			ms_list_unlink(&t->lru, &e->link);
			ms_list_push_front(&t->lru, &e->link);
			*out = e;
			return 0;
		}
	struct entry *e = calloc(1, sizeof(*e));
	if (e) {
		e->state = malloc((size_t)m->len * 4 + 4);
		e->bits = malloc(t->words * 8);
	}
	if (!e || !e->state || !e->bits) {
		if (e)
			entry_free(e);
		return -ENOMEM;
	}
	double t0 = ms_now_s();
	t->work = 0;
	t->over = false;
	walk(t, m, e->bits);
	t->st.walk_s += ms_now_s() - t0;
	if (t->over) {  /* stopped part way: nothing of it is kept */
		entry_free(e);
		return -E2BIG;
	}
	t->st.misses++;
	e->key = key;
	if (m->len)  /* a finished state may have no buffer */
		memcpy(e->state, m->buf, (size_t)m->len * 4);
	e->len = m->len;
	e->accept = m->accept;
	e->hnext = t->bucket[key % N_BUCKETS];
	t->bucket[key % N_BUCKETS] = e;
	ms_list_push_front(&t->lru, &e->link);
	t->st.bytes += entry_bytes(t, e);
	t->st.entries++;
	evict(t);
	*out = e;
	return 0;
}

/* ---- the masks ---- */

int ms_tmask_bits(struct ms_tmask *t, const struct ms_gmatch *m, uint64_t *bits)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e;
	int rc = lookup(t, m, &e);
	if (e)
		memcpy(bits, e->bits, t->words * 8);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* -INFINITY where bits has a 0, for z[0, vocab); ids past the bitset (the
 * logits may be wider than the vocabulary) all refused. */
static void apply_bits(const struct ms_tmask *t, const uint64_t *bits, float *z, int64_t vocab)
{
	int64_t full = vocab / 64, have = full < (int64_t)t->words ? full : (int64_t)t->words;
	t->apply(bits, have, z);
	for (int64_t i = have * 64; i < full * 64; i++)
		z[i] = -INFINITY;
	uint64_t keep = (size_t)full < t->words ? bits[full] : 0;
	for (int64_t i = full * 64; i < vocab; i++)
		if (!(keep >> (i & 63) & 1))
			z[i] = -INFINITY;
}

int ms_tmask_apply(struct ms_tmask *t, const struct ms_gmatch *m, float *z, int64_t vocab)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e;
	int rc = lookup(t, m, &e);
	if (e)
		apply_bits(t, e->bits, z, vocab);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void ms_tmask_get_stats(struct ms_tmask *t, struct ms_tmask_stats *s)
{
	pthread_mutex_lock(&t->lock);
	*s = t->st;
	pthread_mutex_unlock(&t->lock);
}
