/*
 * ngram.c: the n-gram indexes speculative decoding drafts from; see
 * ngram.h.
 */
#include "ngram.h"

#include <stdlib.h>
#include <string.h>

#include "ms-hash.h"

/* longest first: the first length that matches proposes */
static const int lens[MS_NGRAM_N] = {16, 8, 6, 4, 3, 2};

/* a match's weight by its length (lens[]'s, 2 and 3 below 1) */
static const float short_match[MS_NGRAM_MAX_LEN + 1] = {
	[2] = 0.5f, [3] = 0.75f, [4] = 1, [6] = 1, [8] = 1, [16] = 1,
};

#define CACHE_PROBES 8  /* a cache key lives in one of this many slots */
#define SEP (-1)        /* between the cache's sequences: no n-gram spans it */

/* The keys of the n-grams that end at `end` of the sequence at(0..end),
 * keys[i] for lens[i] (0 where the sequence is shorter). */
struct seq {
	const int32_t *t, *draft;  /* t[0..n), then draft[0..) */
	int64_t n;
};

static int32_t seq_at(const struct seq *s, int64_t i)
{
	return i < s->n ? s->t[i] : s->draft[i - s->n];
}

static void keys_at(const struct seq *s, int64_t end, uint64_t keys[MS_NGRAM_N])
{
	uint64_t h = 0x243f6a8885a308d3ull;
	int k = MS_NGRAM_N - 1; /* lens ascending from the back */
	memset(keys, 0, MS_NGRAM_N * sizeof(keys[0]));
	for (int i = 1; i <= MS_NGRAM_MAX_LEN && i <= end && k >= 0; i++) {
		h = ms_mix64(h ^ (uint32_t)seq_at(s, end - i));
		if (i == lens[k])
			keys[k--] = h | 1;
	}
}

/* ---- the per-request index ---- */

void ms_ngram_init(struct ms_ngram *g)
{
	memset(g, 0, sizeof(*g));
}

void ms_ngram_free(struct ms_ngram *g)
{
	free(g->slot);
	memset(g, 0, sizeof(*g));
}

size_t ms_ngram_bytes(const struct ms_ngram *g)
{
	return g->cap * sizeof(*g->slot);
}

/* The slot holding key, or the empty one where it would go. */
static struct ms_ngram_slot *probe(struct ms_ngram_slot *slot, size_t cap, uint64_t key)
{
	for (size_t i = (size_t)ms_mix64(key) & (cap - 1);; i = (i + 1) & (cap - 1))
		if (!slot[i].key || slot[i].key == key)
			return &slot[i];
}

static void slot_update(struct ms_ngram_slot *s, uint64_t key, int64_t pos, int32_t tok, bool fresh)
{
	if (fresh || s->key != key) {
		*s = (struct ms_ngram_slot){.key = key, .pos = pos, .tok = tok, .seen = 1, .same = 1};
		return;
	}
	s->seen += s->seen < UINT16_MAX;
	s->same = s->tok == tok ? (uint16_t)(s->same + (s->same < UINT16_MAX)) : 1;
	s->pos = pos;
	s->tok = tok;
}

static int grow(struct ms_ngram *g, size_t need)
{
	if (2 * need <= g->cap)
		return 0;
	size_t cap = g->cap ? g->cap : 256;
	while (cap < 2 * need)
		cap *= 2;
	struct ms_ngram_slot *s = calloc(cap, sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < g->cap; i++)
		if (g->slot[i].key)
			*probe(s, cap, g->slot[i].key) = g->slot[i];
	free(g->slot);
	g->slot = s;
	g->cap = cap;
	return 0;
}

int ms_ngram_extend(struct ms_ngram *g, const int32_t *t, int64_t n)
{
	int64_t from = g->indexed > 1 ? g->indexed : 1;
	if (n <= from) {
		g->indexed = n > g->indexed ? n : g->indexed;
		return 0;
	}
	if (grow(g, g->n + (size_t)(n - from) * MS_NGRAM_N))
		return -ENOMEM;
	struct seq s = {t, NULL, n};
	uint64_t keys[MS_NGRAM_N];
	for (int64_t p = from; p < n; p++) {
		keys_at(&s, p, keys);
		for (int i = MS_NGRAM_N - 1; i >= 0 && keys[i]; i--) {
			struct ms_ngram_slot *sl = probe(g->slot, g->cap, keys[i]);
			g->n += !sl->key;
			slot_update(sl, keys[i], p, t[p], false);
		}
	}
	g->indexed = n;
	return 0;
}

/* ---- the shared cache ---- */

int ms_ngram_cache_init(struct ms_ngram_cache *c, uint64_t bytes, struct ms_err *err)
{
	memset(c, 0, sizeof(*c));
	if (!bytes)
		return 0;
	/* per token: its ring entry and 2 * MS_NGRAM_N slots (load 1/2) */
	uint64_t per = sizeof(int32_t) + 2 * MS_NGRAM_N * sizeof(struct ms_ngram_slot);
	if (bytes / per < 64)
		return ms_err_set(err, -EINVAL, "a speculation cache of %llu bytes is too small to "
				  "hold anything (at least %llu)", (unsigned long long)bytes,
				  (unsigned long long)(per * 64));
	c->ring_cap = (int64_t)(bytes / per);
	c->cap = (size_t)c->ring_cap * 2 * MS_NGRAM_N;
	c->slot = malloc(c->cap * sizeof(*c->slot));
	c->ring = malloc((size_t)c->ring_cap * sizeof(int32_t));
	if (!c->slot || !c->ring) {
		ms_ngram_cache_free(c);
		return ms_err_set(err, -ENOMEM, "out of memory for a speculation cache of %llu bytes",
				  (unsigned long long)bytes);
	}
	/* touched now, not as answers fill it: the daemon's memory is what
	 * it will be from the start, and a filling cache never looks like a
	 * leak */
	memset(c->slot, 0, c->cap * sizeof(*c->slot));
	memset(c->ring, 0xff, (size_t)c->ring_cap * sizeof(int32_t));
	c->bytes = c->cap * sizeof(*c->slot) + (uint64_t)c->ring_cap * sizeof(int32_t);
	return 0;
}

void ms_ngram_cache_free(struct ms_ngram_cache *c)
{
	free(c->slot);
	free(c->ring);
	memset(c, 0, sizeof(*c));
}

/* Is ring position p still held? */
static bool held(const struct ms_ngram_cache *c, int64_t p)
{
	return p >= 0 && p < c->head && p >= c->head - c->ring_cap;
}

/* The slot for key: its own, else an empty or stale one, else the oldest
 * of its probes (a cache forgets). */
static struct ms_ngram_slot *cache_slot(struct ms_ngram_cache *c, uint64_t key, bool *fresh)
{
	struct ms_ngram_slot *victim = NULL;
	bool victim_stale = false;
	size_t i = (size_t)(ms_mix64(key) % c->cap);
	for (int k = 0; k < CACHE_PROBES; k++, i = i + 1 < c->cap ? i + 1 : 0) {
		struct ms_ngram_slot *s = &c->slot[i];
		bool stale = !s->key || !held(c, s->pos);
		if (s->key == key) {
			*fresh = stale;
			return s;
		}
		if (stale && !victim_stale) {
			victim = s;
			victim_stale = true;
		} else if (!victim_stale && (!victim || s->pos < victim->pos)) {
			victim = s;
		}
	}
	*fresh = true;
	return victim;
}

static void ring_put(struct ms_ngram_cache *c, int32_t tok)
{
	c->ring[c->head % c->ring_cap] = tok;
	c->head++;
}

void ms_ngram_cache_add(struct ms_ngram_cache *c, const int32_t *t, int64_t n)
{
	if (!c->cap || n < 2)
		return;
	if (n > c->ring_cap - 1) { /* only the end fits */
		t += n - (c->ring_cap - 1);
		n = c->ring_cap - 1;
	}
	ring_put(c, SEP);
	int64_t base = c->head;
	for (int64_t i = 0; i < n; i++)
		ring_put(c, t[i]);
	struct seq s = {t, NULL, n};
	uint64_t keys[MS_NGRAM_N];
	for (int64_t p = 1; p < n; p++) {
		keys_at(&s, p, keys);
		for (int i = MS_NGRAM_N - 1; i >= 0 && keys[i]; i--) {
			bool fresh;
			struct ms_ngram_slot *sl = cache_slot(c, keys[i], &fresh);
			slot_update(sl, keys[i], base + p, t[p], fresh);
		}
	}
}

/* ---- drafting ---- */

/* Does the n-gram of `len` tokens before src position pos equal the one
 * ending at `end` of s? (own: src is the request's tokens) */
static bool own_matches(const struct ms_ngram *g, const struct seq *s, const struct ms_ngram_slot *sl,
			int len, int64_t end)
{
	if (sl->pos < len || sl->pos >= g->indexed || s->t[sl->pos] != sl->tok)
		return false;
	for (int i = 1; i <= len; i++)
		if (s->t[sl->pos - i] != seq_at(s, end - i))
			return false;
	return true;
}

static bool cache_matches(const struct ms_ngram_cache *c, const struct seq *s,
			  const struct ms_ngram_slot *sl, int len, int64_t end)
{
	if (!held(c, sl->pos - len) || c->ring[sl->pos % c->ring_cap] != sl->tok)
		return false;
	for (int i = 1; i <= len; i++)
		if (c->ring[(sl->pos - i) % c->ring_cap] != seq_at(s, end - i))
			return false;
	return true;
}

static const struct ms_ngram_slot *own_find(const struct ms_ngram *g, uint64_t key)
{
	if (!g || !g->cap)
		return NULL;
	const struct ms_ngram_slot *sl = probe(g->slot, g->cap, key);
	return sl->key ? sl : NULL;
}

static const struct ms_ngram_slot *cache_find(const struct ms_ngram_cache *c, uint64_t key)
{
	if (!c || !c->cap)
		return NULL;
	size_t i = (size_t)(ms_mix64(key) % c->cap);
	for (int k = 0; k < CACHE_PROBES; k++, i = i + 1 < c->cap ? i + 1 : 0)
		if (c->slot[i].key == key)
			return &c->slot[i];
	return NULL;
}

/* The next token after `end` of s from the longest n-gram either index
 * knows (own first at one length), its confidence in *p; -1 if none. */
static int32_t predict(const struct ms_ngram *own, const struct ms_ngram_cache *c,
		       const struct seq *s, int64_t end, float *p)
{
	uint64_t keys[MS_NGRAM_N];
	keys_at(s, end, keys);
	for (int i = 0; i < MS_NGRAM_N; i++) {
		if (!keys[i])
			continue;
		const struct ms_ngram_slot *sl = own_find(own, keys[i]);
		if (!sl || !own_matches(own, s, sl, lens[i], end)) {
			sl = cache_find(c, keys[i]);
			if (sl && !cache_matches(c, s, sl, lens[i], end))
				sl = NULL;
		}
		if (sl) {
			/* two or three tokens in common say less than four or more */
			*p = (float)sl->same / (float)sl->seen * short_match[lens[i]];
			return sl->tok;
		}
	}
	return -1;
}

int ms_ngram_draft(const struct ms_ngram *own, const struct ms_ngram_cache *c, const int32_t *t,
		   int64_t n, int32_t *out, float *conf, int max)
{
	struct seq s = {t, out, n};
	float run = 1.0f;
	int j = 0;
	for (; j < max; j++) {
		float p = 0;
		int32_t tok = predict(own, c, &s, n + j, &p);
		if (tok < 0 || (run *= p) < MS_NGRAM_MIN_CONF)
			break;
		out[j] = tok;
		conf[j] = run;
	}
	return j;
}
