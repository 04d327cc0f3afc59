/*
 * kv-cache.h: the paged KV cache.
 *
 * One pool of fixed-size pages; a page holds `page_tokens` consecutive
 * positions of ONE layer (keys and values after RoPE, stored as the pool's
 * dtype: fp32, bf16 rounded to nearest even, or fp8 e4m3 with a scale per
 * position and kv head (fp8.h); attention widens them and computes in fp32
 * whatever the dtype). A sequence has
 * a page table per layer. Per-layer pages let a sliding-window layer give
 * back the pages that fell out of its window, so its memory stays bounded
 * by the window however long the sequence grows.
 *
 * Prefix reuse: a full page can be published under the hash of every token
 * up to its end (and its layer). Pages are reference-counted; a published
 * page whose count drops to zero stays cached in LRU order until the pool
 * needs it back. Only the engine thread touches a pool.
 */
#ifndef MS_KV_CACHE_H
#define MS_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "fp8.h"
#include "ms-error.h"

struct ms_backend;

/* How a K or V value is stored. */
enum ms_kv_dtype {
	MS_KV_F32,
	MS_KV_BF16,  /* the value's fp32 bits rounded to nearest even (ms_bf16_rne) */
	MS_KV_FP8,   /* e4m3fn codes, a power-of-two scale per position and kv head
		      * (ms_fp8_kv_head); a quarter of f32's bytes */
};

const char *ms_kv_dtype_name(enum ms_kv_dtype t);
/* "f32", "bf16", "fp8" -> *out; -EINVAL for anything else. */
int ms_kv_dtype_parse(const char *s, enum ms_kv_dtype *out);

/* What a KV cache stores when none is asked for: bf16 (half the bytes
 * read at depth), or f32 under --exact, whose promise is the reference's
 * logits to fp32 rounding. */
static inline enum ms_kv_dtype ms_kv_dtype_auto(bool exact)
{
	return exact ? MS_KV_F32 : MS_KV_BF16;
}

/* Bytes of one stored value (fp8: the code; its head's scale is apart). */
static inline size_t ms_kv_dtype_size(enum ms_kv_dtype t)
{
	return t == MS_KV_FP8 ? 1 : t == MS_KV_BF16 ? 2 : 4;
}

/* Bytes one position's K (or V) row takes, scales included. */
static inline uint64_t ms_kv_row_bytes(int64_t kv_dim, int64_t head_dim, enum ms_kv_dtype t)
{
	return (uint64_t)kv_dim * ms_kv_dtype_size(t) +
	       (t == MS_KV_FP8 ? (uint64_t)(kv_dim / head_dim) : 0);
}

struct ms_kv_pool {
	struct ms_backend *be; /* whose memory k and v are in; NULL: the host heap */
	int64_t page_tokens;   /* positions per page */
	int64_t kv_dim;        /* values per position for K (and for V) */
	int64_t head_dim;      /* values per kv head (kv_dim / head_dim heads) */
	enum ms_kv_dtype dtype;
	size_t esize;          /* bytes per value */
	int64_t page_stride;   /* bytes of one page of k (and of v) */
	int32_t n_pages;
	/* per page: [page_tokens][kv_dim] values of dtype, then for fp8
	 * [page_tokens][kv_dim / head_dim] scale bytes (in the page, so that
	 * copying a page copies its scales) */
	void *k, *v;
	int32_t *ref;          /* [n_pages] sequences holding the page */
	uint64_t *key;         /* [n_pages] published key, 0 = unpublished */
	int32_t *lru_prev, *lru_next; /* cached (ref 0, published) pages, oldest first */
	int32_t lru_head, lru_tail;
	int32_t *free_next;    /* free list */
	int32_t free_head;
	int32_t n_free, n_cached;
	/* published key -> page, open addressing */
	uint64_t *tab_key;
	int32_t *tab_page;
	size_t tab_cap;
	/* statistics */
	uint64_t hits, evictions;
};

/* n_pages pages of page_tokens x kv_dim values of dtype (heads of
 * head_dim, a divisor of kv_dim), their keys and values in be's memory
 * (buf_alloc; be NULL: the host heap, for tests). The bookkeeping is host
 * memory either way. */
int ms_kv_pool_init(struct ms_kv_pool *p, struct ms_backend *be, int32_t n_pages,
		    int64_t page_tokens, int64_t kv_dim, int64_t head_dim, enum ms_kv_dtype dtype,
		    struct ms_err *err);
void ms_kv_pool_free(struct ms_kv_pool *p);

/* Bytes one page takes (K and V, fp8's scales included). */
uint64_t ms_kv_page_bytes(int64_t page_tokens, int64_t kv_dim, int64_t head_dim,
			  enum ms_kv_dtype dtype);

/* A page for writing (ref 1): free first, else the least recently used
 * cached one (unpublished). -1 when every page is held. */
int32_t ms_kv_page_alloc(struct ms_kv_pool *p);
void ms_kv_page_ref(struct ms_kv_pool *p, int32_t page);
/* Drop one reference; at zero a published page is cached, others freed. */
void ms_kv_page_unref(struct ms_kv_pool *p, int32_t page);

/* Publish a full page under key (a hash of its layer and every token up to
 * its end). Publishing a key that another page already has does nothing. */
void ms_kv_page_publish(struct ms_kv_pool *p, int32_t page, uint64_t key);
/* A published page with this key, referenced for the caller (ref+1), or -1. */
int32_t ms_kv_page_lookup(struct ms_kv_pool *p, uint64_t key);

/* Copy page src's keys and values over page dst's (copy-on-write of a
 * shared page), in the pool's memory. */
void ms_kv_page_copy(struct ms_kv_pool *p, int32_t dst, int32_t src);

/* Pages not held by any sequence (free or cached). */
static inline int32_t ms_kv_pool_available(const struct ms_kv_pool *p)
{
	return p->n_free + p->n_cached;
}

/* Where position `slot` of a page starts (kv_dim values of the dtype). */
static inline void *ms_kv_k(const struct ms_kv_pool *p, int32_t page, int64_t slot)
{
	return (char *)p->k + page * p->page_stride + slot * p->kv_dim * (int64_t)p->esize;
}

static inline void *ms_kv_v(const struct ms_kv_pool *p, int32_t page, int64_t slot)
{
	return (char *)p->v + page * p->page_stride + slot * p->kv_dim * (int64_t)p->esize;
}

/* fp8: the scale bytes of position `slot` of a page, one per kv head. */
static inline uint8_t *ms_kv_ks(const struct ms_kv_pool *p, int32_t page, int64_t slot)
{
	return (uint8_t *)ms_kv_k(p, page, p->page_tokens) + slot * (p->kv_dim / p->head_dim);
}

static inline uint8_t *ms_kv_vs(const struct ms_kv_pool *p, int32_t page, int64_t slot)
{
	return (uint8_t *)ms_kv_v(p, page, p->page_tokens) + slot * (p->kv_dim / p->head_dim);
}

/* Value i of a stored row of dtype t, widened as attention reads it (fp8:
 * its code times the head's scale byte sc; sc unused otherwise). */
static inline float ms_kv_widen(const void *row, int64_t i, enum ms_kv_dtype t, uint8_t sc)
{
	switch (t) {
	case MS_KV_BF16: return ms_bf16_f32(((const uint16_t *)row)[i]);
	case MS_KV_FP8: return ms_fp8_e4m3_f32(((const uint8_t *)row)[i]) * ms_e8m0_f32(sc);
	default: return ((const float *)row)[i];
	}
}

/* Position `slot` of a page (host memory) := the rows k and v (kv_dim
 * values each), rounded as the pool stores them. */
void ms_kv_put(const struct ms_kv_pool *p, int32_t page, int64_t slot, const float *k,
	       const float *v);

/* Value i of position `slot` of a page (host memory), widened as attention
 * reads it: K, or V when `value`. */
float ms_kv_get(const struct ms_kv_pool *p, bool value, int32_t page, int64_t slot, int64_t i);

/* One sequence's view: per layer, the page of every block of positions
 * (-1 where a sliding layer gave its page back). */
struct ms_kv_seq {
	int n_layers;
	int32_t **pages;       /* [n_layers][cap_blocks] */
	int64_t cap_blocks;
	int64_t len;           /* positions written */
};

int ms_kv_seq_init(struct ms_kv_seq *s, int n_layers, int64_t max_positions, int64_t page_tokens,
		   struct ms_err *err);
/* Give back every page. */
void ms_kv_seq_release(struct ms_kv_seq *s, struct ms_kv_pool *p);
void ms_kv_seq_free(struct ms_kv_seq *s, struct ms_kv_pool *p);

/* Make sure positions [s->len, s->len + n) have pages in every layer.
 * -ENOSPC when the pool runs out (nothing is leaked: pages taken for this
 * call stay with the sequence and are given back by release/free). */
int ms_kv_seq_reserve(struct ms_kv_seq *s, struct ms_kv_pool *p, int64_t n);

/* Sliding layer l no longer needs positions below `keep_from`: give back
 * its pages that lie wholly below it. */
void ms_kv_seq_trim(struct ms_kv_seq *s, struct ms_kv_pool *p, int layer, int64_t keep_from);

/* Pages a sequence holds (for accounting and tests). */
int64_t ms_kv_seq_pages_held(const struct ms_kv_seq *s, int layer);

/* Positions per KV page. */
#define MS_KV_PAGE_TOKENS 16

/* A model's KV cache shape: which layers slide, and by how much. */
struct ms_kv_geom {
	int n_layers;
	int64_t kv_dim;                /* values per position for K (and for V) */
	int64_t head_dim;              /* values per kv head */
	enum ms_kv_dtype dtype;        /* how the caches store them (--kv-dtype) */
	int64_t sliding_window;        /* positions a sliding layer sees */
	const bool *layer_sliding;     /* [n_layers] */
};

/* Pages a sequence of `capacity` positions needs at most, all layers, when
 * sliding layers give back what leaves their window (forward passes of at
 * most `chunk` of its tokens). */
int64_t ms_kv_geom_seq_pages(const struct ms_kv_geom *g, int64_t capacity, int64_t chunk);

/* Bytes of K and V that `positions` positions of one sequence hold over
 * all layers at the geometry's dtype, a sliding layer at most its window:
 * what a decode step at that depth reads, and what the context costs. */
double ms_kv_geom_bytes(const struct ms_kv_geom *g, int64_t positions);

/* Bytes one more position of a long context adds (the full layers': a
 * sliding layer past its window adds none); 0 when every layer slides. */
double ms_kv_geom_bytes_per_position(const struct ms_kv_geom *g);

/* The pool's dtype is one the backend's kernels read (be->kv_dtypes);
 * -ENOTSUP naming both otherwise. */
int ms_kv_dtype_check(const struct ms_backend *be, enum ms_kv_dtype t, struct ms_err *err);

/* Give back the pages of sliding layers that position `next` and later no
 * longer see. */
void ms_kv_geom_trim(const struct ms_kv_geom *g, struct ms_kv_seq *kv, struct ms_kv_pool *pool,
		     int64_t next);

#endif
