/* token-mask.c: a grammar's allowed tokens, walked and cached (token-mask.h). */
#include "token-mask.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ms-clock.h"

#define MAX_TOKEN_BYTES 1024   /* longer tokens are never a grammar's */

/* ---- the trie ---- */

struct tnode {
	uint8_t byte;
	uint16_t depth;     /* 1 for a first byte */
	int32_t end;        /* the index past this node's subtree */
	int32_t tok, ntok;  /* ids[tok .. tok + ntok): tokens spelled exactly here */
};

struct ms_vocab_trie {
	int64_t vocab;
	int32_t n_nodes;
	struct tnode *nodes;
	int32_t *ids;
	uint32_t *off, *len;   /* per id: its bytes in text */
	uint8_t *text;
	int max_depth;
	int32_t byte_tok[256];
};

struct tok_ref { const uint8_t *p; uint32_t n; int32_t id; };

static int cmp_tok(const void *a, const void *b)
{
	const struct tok_ref *x = a, *y = b;
	uint32_t n = x->n < y->n ? x->n : y->n;
	int c = memcmp(x->p, y->p, n);
	if (c)
		return c;
	return x->n != y->n ? (x->n < y->n ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

/* The preorder array of the sorted tokens (shared prefixes, one node). */
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
	for (int32_t i = 0; i < n; i++) {
		uint32_t l = 0;
		if (prev)
			while (l < prev->n && l < t[i].n && prev->p[l] == t[i].p[l])
				l++;
		while (depth > l)  /* close the nodes past the common prefix */
			v->nodes[path[--depth]].end = v->n_nodes;
		for (; depth < t[i].n; depth++) {
			struct tnode *nd = &v->nodes[v->n_nodes];
			*nd = (struct tnode){t[i].p[depth], (uint16_t)(depth + 1), 0, i, 0};
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
	return 0;
}

int ms_vocab_trie_new(const struct ms_tokenizer *tok, int64_t vocab, struct ms_vocab_trie **out,
		      struct ms_err *err)
{
	*out = NULL;
	int32_t n_ids = ms_tokenizer_n_ids(tok);
	int64_t lim = vocab < n_ids ? vocab : n_ids;
	struct ms_vocab_trie *v = calloc(1, sizeof(*v));
	struct tok_ref *t = malloc(((size_t)lim + 1) * sizeof(*t));
	int rc = v && t ? 0 : -ENOMEM;
	if (!rc) {
		v->vocab = vocab;
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
		const char *b = ms_tokenizer_bytes(tok, id, &len);
		if (!b || !len || len > MAX_TOKEN_BYTES || ms_tokenizer_is_special(tok, id))
			continue;
		t[n++] = (struct tok_ref){(const uint8_t *)b, (uint32_t)len, id};
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
	struct entry *hnext, *prev, *next;  /* bucket chain; LRU list (head: newest) */
};

struct ms_tmask {
	atomic_int refs;
	struct ms_grammar *g;
	const struct ms_vocab_trie *v;
	size_t words, bound;
	pthread_mutex_t lock;
	struct entry *bucket[N_BUCKETS];
	struct entry *head, *tail;
	struct ms_tmask_stats st;
	struct ms_gwalk *lv;      /* the walk's levels, kept between walks */
	int n_lv;
};

int ms_tmask_new(struct ms_grammar *g, const struct ms_vocab_trie *v, size_t cache_bytes,
		 struct ms_tmask **out, struct ms_err *err)
{
	struct ms_tmask *t = calloc(1, sizeof(*t));
	*out = NULL;
	if (t)
		t->lv = calloc((size_t)v->max_depth + 1, sizeof(*t->lv));
	if (!t || !t->lv) {
		if (t)
			free(t->lv);
		free(t);
		ms_grammar_free(g);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	atomic_init(&t->refs, 1);
	t->g = g;
	t->v = v;
	t->words = (size_t)(v->vocab + 63) / 64;
	t->bound = cache_bytes ? cache_bytes : (size_t)64 << 20;
	t->n_lv = v->max_depth + 1;
	for (int i = 0; i < t->n_lv; i++)
		ms_gwalk_init(&t->lv[i], g);
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

struct ms_tmask *ms_tmask_ref(struct ms_tmask *t)
{
	atomic_fetch_add(&t->refs, 1);
	return t;
}

static void entry_free(struct entry *e)
{
	free(e->state);
	free(e->bits);
	free(e);
}

void ms_tmask_unref(struct ms_tmask *t)
{
	if (!t || atomic_fetch_sub(&t->refs, 1) != 1)
		return;
	for (struct entry *e = t->head, *n; e; e = n) {
		n = e->next;
		entry_free(e);
	}
	for (int i = 0; i < t->n_lv; i++)
		ms_gwalk_free(&t->lv[i]);
	free(t->lv);
	pthread_mutex_destroy(&t->lock);
	ms_grammar_free(t->g);
	free(t);
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

static void lru_unlink(struct ms_tmask *t, struct entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		t->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		t->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_front(struct ms_tmask *t, struct entry *e)
{
	e->next = t->head;
	if (t->head)
		t->head->prev = e;
	t->head = e;
	if (!t->tail)
		t->tail = e;
}

static void evict(struct ms_tmask *t)
{
	while (t->st.bytes > t->bound && t->tail && t->tail != t->head) {
		struct entry *e = t->tail, **pp = &t->bucket[e->key % N_BUCKETS];
		while (*pp != e)
			pp = &(*pp)->hnext;
		*pp = e->hnext;
		lru_unlink(t, e);
		t->st.bytes -= entry_bytes(t, e);
		t->st.entries--;
		t->st.evictions++;
		entry_free(e);
	}
}

/* ---- the walk ---- */

static void walk(struct ms_tmask *t, const struct ms_gmatch *m, uint64_t *bits)
{
	const struct ms_vocab_trie *v = t->v;
	memset(bits, 0, t->words * 8);
	ms_gwalk_from(&t->lv[0], m);
	if (!m->n)
		return;
	for (int32_t i = 0; i < v->n_nodes;) {
		const struct tnode *nd = &v->nodes[i];
		if (!ms_gwalk_step(&t->lv[nd->depth - 1], nd->byte, &t->lv[nd->depth])) {
			i = nd->end;
			continue;
		}
		for (int32_t k = 0; k < nd->ntok; k++) {
			int32_t id = v->ids[nd->tok + k];
			bits[id >> 6] |= 1ull << (id & 63);
		}
		i++;
	}
}

/* The entry of m's state, found or walked (under the lock). */
static struct entry *lookup(struct ms_tmask *t, const struct ms_gmatch *m)
{
	uint64_t key = ms_gmatch_key(m);
	for (struct entry *e = t->bucket[key % N_BUCKETS]; e; e = e->hnext)
		if (e->key == key && e->len == m->len && e->accept == m->accept &&
		    !memcmp(e->state, m->buf, (size_t)m->len * 4)) {
			t->st.hits++;
			lru_unlink(t, e);
			lru_front(t, e);
			return e;
		}
	struct entry *e = calloc(1, sizeof(*e));
	if (e) {
		e->state = malloc((size_t)m->len * 4 + 4);
		e->bits = malloc(t->words * 8);
	}
	if (!e || !e->state || !e->bits) {
		if (e)
			entry_free(e);
		return NULL;
	}
	double t0 = ms_now_s();
	walk(t, m, e->bits);
	t->st.walk_s += ms_now_s() - t0;
	t->st.misses++;
	e->key = key;
	memcpy(e->state, m->buf, (size_t)m->len * 4);
	e->len = m->len;
	e->accept = m->accept;
	e->hnext = t->bucket[key % N_BUCKETS];
	t->bucket[key % N_BUCKETS] = e;
	lru_front(t, e);
	t->st.bytes += entry_bytes(t, e);
	t->st.entries++;
	evict(t);
	return e;
}

int ms_tmask_bits(struct ms_tmask *t, const struct ms_gmatch *m, uint64_t *bits)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = lookup(t, m);
	if (e)
		memcpy(bits, e->bits, t->words * 8);
	pthread_mutex_unlock(&t->lock);
	return e ? 0 : -ENOMEM;
}

int ms_tmask_apply(struct ms_tmask *t, const struct ms_gmatch *m, float *z, int64_t vocab)
{
	pthread_mutex_lock(&t->lock);
	struct entry *e = lookup(t, m);
	if (e) {
		int64_t nw = (vocab + 63) / 64;
		for (int64_t w = 0; w < nw; w++) {
			uint64_t keep = (size_t)w < t->words ? e->bits[w] : 0;
			if (keep == ~0ull)
				continue;
			int64_t hi = (w + 1) * 64 < vocab ? (w + 1) * 64 : vocab;
			for (int64_t i = w * 64; i < hi; i++)
				if (!(keep >> (i & 63) & 1))
					z[i] = -INFINITY;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return e ? 0 : -ENOMEM;
}

void ms_tmask_get_stats(struct ms_tmask *t, struct ms_tmask_stats *s)
{
	pthread_mutex_lock(&t->lock);
	*s = t->st;
	pthread_mutex_unlock(&t->lock);
}
