/* kv-cache.c: see kv-cache.h. */
#include "kv-cache.h"

#include "backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *ms_kv_dtype_name(enum ms_kv_dtype t)
{
	return t == MS_KV_FP8 ? "fp8" : t == MS_KV_BF16 ? "bf16" : "f32";
}

int ms_kv_dtype_parse(const char *s, enum ms_kv_dtype *out)
{
	if (!strcmp(s, "f32") || !strcmp(s, "fp32"))
		*out = MS_KV_F32;
	else if (!strcmp(s, "bf16"))
		*out = MS_KV_BF16;
	else if (!strcmp(s, "fp8") || !strcmp(s, "fp8_e4m3"))
		*out = MS_KV_FP8;
	else
		return -EINVAL;
	return 0;
}

int ms_kv_dtype_check(const struct ms_backend *be, enum ms_kv_dtype t, struct ms_err *err)
{
	if (!be || (be->kv_dtypes & (1u << t)))
		return 0;
	return ms_err_set(err, -ENOTSUP, "--kv-dtype %s: the %s backend's attention does not read "
			  "it", ms_kv_dtype_name(t), be->name);
}

uint64_t ms_kv_page_bytes(int64_t page_tokens, int64_t kv_dim, int64_t head_dim,
			  enum ms_kv_dtype dtype)
{
	return 2ull * (uint64_t)page_tokens * ms_kv_row_bytes(kv_dim, head_dim, dtype);
}

void ms_kv_put(const struct ms_kv_pool *p, int32_t page, int64_t slot, const float *k,
	       const float *v)
{
	void *kd = ms_kv_k(p, page, slot), *vd = ms_kv_v(p, page, slot);
	int64_t n = p->kv_dim, d = p->head_dim;
	switch (p->dtype) {
	case MS_KV_F32:
		memcpy(kd, k, (size_t)n * sizeof(float));
		memcpy(vd, v, (size_t)n * sizeof(float));
		break;
	case MS_KV_BF16:
		for (int64_t i = 0; i < n; i++) {
			((uint16_t *)kd)[i] = ms_bf16_rne(k[i]);
			((uint16_t *)vd)[i] = ms_bf16_rne(v[i]);
		}
		break;
	case MS_KV_FP8: {
		uint8_t *ks = ms_kv_ks(p, page, slot), *vs = ms_kv_vs(p, page, slot);
		for (int64_t h = 0; h < n / d; h++) {
			ks[h] = ms_fp8_kv_head(k + h * d, d, (uint8_t *)kd + h * d);
			vs[h] = ms_fp8_kv_head(v + h * d, d, (uint8_t *)vd + h * d);
		}
		break;
	}
	}
}

float ms_kv_get(const struct ms_kv_pool *p, bool value, int32_t page, int64_t slot, int64_t i)
{
	const void *row = value ? ms_kv_v(p, page, slot) : ms_kv_k(p, page, slot);
	uint8_t sc = 0;
	if (p->dtype == MS_KV_FP8)
		sc = (value ? ms_kv_vs(p, page, slot) : ms_kv_ks(p, page, slot))[i / p->head_dim];
	return ms_kv_widen(row, i, p->dtype, sc);
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	return x ^ (x >> 33);
}

static void *kv_alloc(struct ms_backend *be, size_t bytes)
{
	return be ? be->ops->buf_alloc(be, bytes) : malloc(bytes);
}

static void kv_free(struct ms_backend *be, void *p)
{
	if (be)
		be->ops->buf_free(be, p);
	else
		free(p);
}

int ms_kv_pool_init(struct ms_kv_pool *p, struct ms_backend *be, int32_t n_pages,
		    int64_t page_tokens, int64_t kv_dim, int64_t head_dim, enum ms_kv_dtype dtype,
		    struct ms_err *err)
{
	memset(p, 0, sizeof(*p));
	if (n_pages <= 0 || page_tokens <= 0 || kv_dim <= 0)
		return ms_err_set(err, -EINVAL, "KV cache: %d pages of %lld tokens is no cache", n_pages,
				  (long long)page_tokens);
	if (head_dim <= 0 || kv_dim % head_dim)
		return ms_err_set(err, -EINVAL, "KV cache: heads of %lld do not divide %lld values",
				  (long long)head_dim, (long long)kv_dim);
	p->be = be;
	p->page_tokens = page_tokens;
	p->kv_dim = kv_dim;
	p->head_dim = head_dim;
	p->n_pages = n_pages;
	p->dtype = dtype;
	p->esize = ms_kv_dtype_size(dtype);
	p->page_stride = (int64_t)ms_kv_page_bytes(page_tokens, kv_dim, head_dim, dtype) / 2;
	size_t bytes = (size_t)n_pages * (size_t)p->page_stride;
	p->k = kv_alloc(be, bytes);
	p->v = kv_alloc(be, bytes);
	p->ref = calloc((size_t)n_pages, sizeof(int32_t));
	p->key = calloc((size_t)n_pages, sizeof(uint64_t));
	p->lru_prev = malloc((size_t)n_pages * sizeof(int32_t));
	p->lru_next = malloc((size_t)n_pages * sizeof(int32_t));
	p->free_next = malloc((size_t)n_pages * sizeof(int32_t));
	p->tab_cap = 16;
	while (p->tab_cap < 2 * (size_t)n_pages)
		p->tab_cap <<= 1;
	p->tab_key = calloc(p->tab_cap, sizeof(uint64_t));
	p->tab_page = malloc(p->tab_cap * sizeof(int32_t));
	if (!p->k || !p->v || !p->ref || !p->key || !p->lru_prev || !p->lru_next || !p->free_next ||
	    !p->tab_key || !p->tab_page) {
		ms_kv_pool_free(p);
		return ms_err_set(err, -ENOMEM, "KV cache: out of memory for %d pages (%llu bytes)",
				  n_pages, (unsigned long long)((uint64_t)n_pages *
								ms_kv_page_bytes(page_tokens, kv_dim,
										 head_dim, dtype)));
	}
	for (int32_t i = 0; i < n_pages; i++)
		p->free_next[i] = i + 1 < n_pages ? i + 1 : -1;
	p->free_head = 0;
	p->n_free = n_pages;
	p->lru_head = p->lru_tail = -1;
	return 0;
}

void ms_kv_pool_free(struct ms_kv_pool *p)
{
	if (!p)
		return;
	kv_free(p->be, p->k);
	kv_free(p->be, p->v);
	free(p->ref), free(p->key), free(p->lru_prev), free(p->lru_next);
	free(p->free_next), free(p->tab_key), free(p->tab_page);
	memset(p, 0, sizeof(*p));
}

void ms_kv_page_copy(struct ms_kv_pool *p, int32_t dst, int32_t src)
{
	size_t bytes = (size_t)p->page_stride;
	if (p->be) {
		p->be->ops->copy(p->be, ms_kv_k(p, dst, 0), ms_kv_k(p, src, 0), bytes);
		p->be->ops->copy(p->be, ms_kv_v(p, dst, 0), ms_kv_v(p, src, 0), bytes);
	} else {
		memcpy(ms_kv_k(p, dst, 0), ms_kv_k(p, src, 0), bytes);
		memcpy(ms_kv_v(p, dst, 0), ms_kv_v(p, src, 0), bytes);
	}
}

int64_t ms_kv_geom_seq_pages(const struct ms_kv_geom *g, int64_t capacity, int64_t chunk)
{
	int64_t P = MS_KV_PAGE_TOKENS, full = (capacity + P - 1) / P, total = 0;
	/* a sliding layer holds the window plus one chunk, rounded out to pages */
	int64_t slide = (g->sliding_window + chunk + P - 1) / P + 1;
	for (int l = 0; l < g->n_layers; l++)
		total += g->layer_sliding[l] && slide < full ? slide : full;
	return total;
}

double ms_kv_geom_bytes(const struct ms_kv_geom *g, int64_t positions)
{
	double per_position = 2.0 * (double)ms_kv_row_bytes(g->kv_dim, g->head_dim, g->dtype);
	double total = 0;
	for (int l = 0; l < g->n_layers; l++) {
		bool slides = g->layer_sliding && g->layer_sliding[l] && g->sliding_window > 0;
		int64_t seen = slides && g->sliding_window < positions ? g->sliding_window : positions;
		total += (double)seen * per_position;
	}
	return total;
}

double ms_kv_geom_bytes_per_position(const struct ms_kv_geom *g)
{
	int64_t past = g->sliding_window > 0 ? g->sliding_window : 1;
	return ms_kv_geom_bytes(g, past + 1) - ms_kv_geom_bytes(g, past);
}

void ms_kv_geom_trim(const struct ms_kv_geom *g, struct ms_kv_seq *kv, struct ms_kv_pool *pool,
		     int64_t next)
{
	int64_t keep = next - g->sliding_window + 1;
	if (keep <= 0)
		return;
	for (int l = 0; l < g->n_layers; l++)
		if (g->layer_sliding[l])
			ms_kv_seq_trim(kv, pool, l, keep);
}

/* ---- the published-key table (key 0 = empty; deletion by backshift) ---- */

static size_t tab_find(const struct ms_kv_pool *p, uint64_t key)
{
	size_t mask = p->tab_cap - 1, i = mix(key) & mask;
	while (p->tab_key[i] && p->tab_key[i] != key)
		i = (i + 1) & mask;
	return i;
}

static void tab_remove(struct ms_kv_pool *p, uint64_t key)
{
	size_t mask = p->tab_cap - 1, i = tab_find(p, key);
	if (!p->tab_key[i])
		return;
	/* backward-shift deletion keeps probe chains intact */
	for (size_t j = (i + 1) & mask; p->tab_key[j]; j = (j + 1) & mask) {
		size_t home = mix(p->tab_key[j]) & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			p->tab_key[i] = p->tab_key[j];
			p->tab_page[i] = p->tab_page[j];
			i = j;
		}
	}
	p->tab_key[i] = 0;
}

/* ---- LRU of cached pages ---- */

static void lru_unlink(struct ms_kv_pool *p, int32_t g)
{
	int32_t a = p->lru_prev[g], b = p->lru_next[g];
	if (a >= 0)
		p->lru_next[a] = b;
	else
		p->lru_head = b;
	if (b >= 0)
		p->lru_prev[b] = a;
	else
		p->lru_tail = a;
	p->n_cached--;
}

static void lru_push(struct ms_kv_pool *p, int32_t g)
{
	p->lru_prev[g] = p->lru_tail;
	p->lru_next[g] = -1;
	if (p->lru_tail >= 0)
		p->lru_next[p->lru_tail] = g;
	else
		p->lru_head = g;
	p->lru_tail = g;
	p->n_cached++;
}

int32_t ms_kv_page_alloc(struct ms_kv_pool *p)
{
	int32_t g = p->free_head;
	if (g >= 0) {
		p->free_head = p->free_next[g];
		p->n_free--;
	} else if ((g = p->lru_head) >= 0) {
		lru_unlink(p, g);
		tab_remove(p, p->key[g]);
		p->key[g] = 0;
		p->evictions++;
	} else {
		return -1;
	}
	p->ref[g] = 1;
	return g;
}

void ms_kv_page_ref(struct ms_kv_pool *p, int32_t g)
{
	if (p->ref[g]++ == 0 && p->key[g])
		lru_unlink(p, g); /* a cached page is in use again */
}

void ms_kv_page_unref(struct ms_kv_pool *p, int32_t g)
{
	if (--p->ref[g] > 0)
		return;
	if (p->key[g]) {
		lru_push(p, g);
	} else {
		p->free_next[g] = p->free_head;
		p->free_head = g;
		p->n_free++;
	}
}

void ms_kv_page_publish(struct ms_kv_pool *p, int32_t g, uint64_t key)
{
	key |= 1; /* 0 means "empty" in the table */
	if (p->key[g])
		return;
	size_t i = tab_find(p, key);
	if (p->tab_key[i])
		return; /* another page already holds this content */
	p->tab_key[i] = key;
	p->tab_page[i] = g;
	p->key[g] = key;
}

int32_t ms_kv_page_lookup(struct ms_kv_pool *p, uint64_t key)
{
	key |= 1;
	size_t i = tab_find(p, key);
	if (!p->tab_key[i])
		return -1;
	int32_t g = p->tab_page[i];
	ms_kv_page_ref(p, g);
	p->hits++;
	return g;
}

/* ---- sequences ---- */

int ms_kv_seq_init(struct ms_kv_seq *s, int n_layers, int64_t max_positions, int64_t page_tokens,
		   struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	s->n_layers = n_layers;
	s->cap_blocks = (max_positions + page_tokens - 1) / page_tokens;
	s->pages = calloc((size_t)n_layers, sizeof(int32_t *));
	if (!s->pages)
		return ms_err_set(err, -ENOMEM, "out of memory");
	for (int l = 0; l < n_layers; l++) {
		s->pages[l] = malloc((size_t)(s->cap_blocks ? s->cap_blocks : 1) * sizeof(int32_t));
		if (!s->pages[l]) {
			ms_kv_seq_free(s, NULL);
			return ms_err_set(err, -ENOMEM, "out of memory");
		}
		for (int64_t b = 0; b < s->cap_blocks; b++)
			s->pages[l][b] = -1;
	}
	return 0;
}

void ms_kv_seq_release(struct ms_kv_seq *s, struct ms_kv_pool *p)
{
	for (int l = 0; s->pages && l < s->n_layers; l++)
		for (int64_t b = 0; s->pages[l] && b < s->cap_blocks; b++)
			if (s->pages[l][b] >= 0) {
				if (p)
					ms_kv_page_unref(p, s->pages[l][b]);
				s->pages[l][b] = -1;
			}
	s->len = 0;
}

void ms_kv_seq_free(struct ms_kv_seq *s, struct ms_kv_pool *p)
{
	if (!s || !s->pages)
		return;
	ms_kv_seq_release(s, p);
	for (int l = 0; l < s->n_layers; l++)
		free(s->pages[l]);
	free(s->pages);
	memset(s, 0, sizeof(*s));
}

int ms_kv_seq_reserve(struct ms_kv_seq *s, struct ms_kv_pool *p, int64_t n)
{
	int64_t P = p->page_tokens;
	int64_t b0 = s->len / P, b1 = (s->len + n + P - 1) / P;
	if (b1 > s->cap_blocks)
		return -ENOSPC;
	for (int l = 0; l < s->n_layers; l++)
		for (int64_t b = b0; b < b1; b++)
			if (s->pages[l][b] < 0 && (s->pages[l][b] = ms_kv_page_alloc(p)) < 0)
				return -ENOSPC;
	return 0;
}

void ms_kv_seq_trim(struct ms_kv_seq *s, struct ms_kv_pool *p, int layer, int64_t keep_from)
{
	int64_t P = p->page_tokens;
	for (int64_t b = 0; b < s->cap_blocks && (b + 1) * P <= keep_from; b++)
		if (s->pages[layer][b] >= 0) {
			ms_kv_page_unref(p, s->pages[layer][b]);
			s->pages[layer][b] = -1;
		}
}

int64_t ms_kv_seq_pages_held(const struct ms_kv_seq *s, int layer)
{
	int64_t n = 0;
	for (int64_t b = 0; b < s->cap_blocks; b++)
		n += s->pages[layer][b] >= 0;
	return n;
}
