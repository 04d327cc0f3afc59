/*
 * attention.c: the attention driver (work items, split-K, the fold of chunk
 * partials, the sink) and the portable reference kernel (the kernel choice
 * is the table's, kernel-table.c). See attention.h for the arithmetic and
 * why it is thread-independent.
 */
#include "attention.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference kernel ---- */

/* x rounded to bf16 as vcvtne2ps2bf16 does (bf16.h), back in f32. */
static float bf16_round(float x)
{
	return ms_bf16_f32(ms_bf16_rne_daz(x));
}

/* Per row and chunk, the old two-pass softmax: scores, their maximum, the
 * exponentials and their sum, then the weighted values, all in order of
 * position. A chunk holds at most MS_ATTN_CHUNK keys, so the score buffer
 * is bounded whatever the context. t: how K and V are stored; rnd: q and
 * the probabilities weighting the values rounded to bf16 first
 * (chunk_bf16_products; the fast kernels add in another order). */
static void chunk_ref_kv(const struct ms_attn_chunk *c, enum ms_kv_dtype t, bool rnd)
{
	size_t es = ms_kv_dtype_size(t);
	bool fp8 = t == MS_KV_FP8;
	float s[MS_ATTN_CHUNK];
	int64_t d = c->d, U = (int64_t)c->nkv * c->G;
	for (int i = 0; i < c->nq; i++) {
		int64_t a = c->lo[i] > c->k0 ? c->lo[i] : c->k0;
		int64_t b = c->hi[i] + 1 < c->k1 ? c->hi[i] + 1 : c->k1;
		for (int64_t u = 0; u < U; u++) {
			int64_t r = i * U + u, h = u / c->G, kvo = h * d * (int64_t)es;
			if (a >= b) {
				c->m[r] = -INFINITY;
				continue;
			}
			const float *q = c->q + i * c->ldq + u * d;
			if (rnd) { /* the rounded copy in the scratch (d <= 64 * ld floats) */
				for (int64_t e = 0; e < d; e++)
					c->tmp[e] = bf16_round(q[e]);
				q = c->tmp;
			}
			float mx = -INFINITY;
			for (int64_t p = a; p < b; p++) {
				const char *k = (const char *)c->k[p - c->k0] + kvo;
				uint8_t sc = fp8 ? c->ks[p - c->k0][h] : 0;
				float dot = 0;
				for (int64_t e = 0; e < d; e++)
					dot += q[e] * ms_kv_widen(k, e, t, sc);
				s[p - a] = dot * c->scale;
				mx = s[p - a] > mx ? s[p - a] : mx;
			}
			float sum = 0;
			for (int64_t p = a; p < b; p++)
				sum += (s[p - a] = expf(s[p - a] - mx));
			float *acc = c->acc + r * c->ld;
			memset(acc, 0, (size_t)d * sizeof(float));
			for (int64_t p = a; p < b; p++) {
				const char *v = (const char *)c->v[p - c->k0] + kvo;
				uint8_t sc = fp8 ? c->vs[p - c->k0][h] : 0;
				float pr = rnd ? bf16_round(s[p - a]) : s[p - a];
				for (int64_t e = 0; e < d; e++)
					acc[e] += pr * ms_kv_widen(v, e, t, sc);
			}
			c->m[r] = mx;
			c->l[r] = sum;
		}
	}
}

static void chunk_ref(const struct ms_attn_chunk *c)
{
	chunk_ref_kv(c, MS_KV_F32, false);
}

static void chunk_ref_bf16(const struct ms_attn_chunk *c)
{
	chunk_ref_kv(c, MS_KV_BF16, false);
}

static void chunk_ref_bf16_products(const struct ms_attn_chunk *c)
{
	chunk_ref_kv(c, MS_KV_BF16, true);
}

static void chunk_ref_fp8(const struct ms_attn_chunk *c)
{
	chunk_ref_kv(c, MS_KV_FP8, false);
}

const struct ms_attn_kernel ms_attn_ref = {"ref-attn", "ref", 0, chunk_ref, chunk_ref_bf16,
					    chunk_ref_fp8, chunk_ref_bf16_products};

void ms_sink_softmax(float *s, int64_t n, float sink)
{
	float mx = sink;
	for (int64_t i = 0; i < n; i++)
		mx = s[i] > mx ? s[i] : mx;
	float sum = expf(sink - mx);
	for (int64_t i = 0; i < n; i++)
		sum += (s[i] = expf(s[i] - mx));
	float inv = 1.0f / sum;
	for (int64_t i = 0; i < n; i++)
		s[i] *= inv;
}

/* ---- the driver ---- */

/* Rows per block (tokens x kv heads x their query heads) up to 64, so a
 * block's states stay in L1/L2 while each K/V tile is read once for it. */
#define BLOCK_ROWS 64
#define BLOCK_TOKENS 16

struct item {
	int64_t t0;          /* first token of the block */
	int64_t c0, c1;      /* its chunks [c0, c1) */
	int64_t part;        /* split items: offset of the chunk partials (floats) */
	int32_t nq;          /* tokens */
	int32_t kvh, nkv;    /* kv heads [kvh, kvh + nkv) */
	int32_t n_split;     /* tasks; 1: one task does everything */
};

struct task {
	int32_t item, k;     /* k-th of the item's n_split */
};

struct job {
	const struct ms_attn_kernel *kern;
	const struct ms_attn_args *a;
	int64_t G, d, ld, rmax;
	float scale;
	const int64_t *lo, *hi;
	const struct item *items;
	const struct task *tasks;
	const int32_t *merges;   /* split items, for the second pass */
	const float *zero;
	char *scratch;
	size_t scratch_stride;
	float *parts;
};

static inline size_t up64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static inline int64_t slot_floats(int64_t R, int64_t ld)
{
	return R * ld + ((2 * R + 15) & ~(int64_t)15);
}

/* Worker scratch: key/value row pointers, one chunk partial, the running
 * state and the kernel's tmp. */
struct wscratch {
	const void **kp, **vp;
	const uint8_t **ksp, **vsp; /* fp8: each key's scale bytes */
	float *pm, *pl, *pacc;   /* chunk partial */
	float *rm, *rl, *racc;   /* running fold */
	float *tmp;
};

static size_t wscratch_layout(int64_t rmax, int64_t ld, char *base, struct wscratch *w)
{
	size_t off = 0, ptrs = up64(MS_ATTN_CHUNK * sizeof(float *));
	size_t acc = up64((size_t)(rmax * ld) * sizeof(float));
	size_t vec = up64((size_t)rmax * sizeof(float));
	size_t tmp = up64((size_t)MS_ATTN_TMP_FLOATS(rmax, ld) * sizeof(float));
	if (base) {
		w->kp = (const void **)(base + off);
		w->vp = (const void **)(base + off + ptrs);
		w->ksp = (const uint8_t **)(base + off + 2 * ptrs);
		w->vsp = (const uint8_t **)(base + off + 3 * ptrs);
		off += 4 * ptrs;
		w->pacc = (float *)(base + off), off += acc;
		w->pm = (float *)(base + off), off += vec;
		w->pl = (float *)(base + off), off += vec;
		w->racc = (float *)(base + off), off += acc;
		w->rm = (float *)(base + off), off += vec;
		w->rl = (float *)(base + off), off += vec;
		w->tmp = (float *)(base + off), off += tmp;
		return off;
	}
	return 4 * ptrs + 2 * acc + 4 * vec + tmp;
}

static inline int64_t item_rows(const struct job *j, const struct item *it)
{
	return (int64_t)it->nq * it->nkv * j->G;
}

/* Chunk c of item it into (m, l, acc). */
static void run_chunk(const struct job *j, const struct item *it, int64_t c,
		      const struct wscratch *w, float *m, float *l, float *acc)
{
	const struct ms_attn_args *a = j->a;
	const struct ms_kv_pool *pool = a->pool;
	int64_t t0 = it->t0, tl = t0 + it->nq - 1;
	int64_t k0 = c * MS_ATTN_CHUNK, k1 = k0 + MS_ATTN_CHUNK;
	k0 = k0 > j->lo[t0] ? k0 : j->lo[t0];
	k1 = k1 < j->hi[tl] + 1 ? k1 : j->hi[tl] + 1;
	const int32_t *pages = a->pages[t0];
	/* bytes: a position's row, and the item's first kv head in it */
	int64_t P = pool->page_tokens, row = pool->kv_dim * (int64_t)pool->esize;
	int64_t kvo = it->kvh * j->d * (int64_t)pool->esize;
	int64_t blk = k0 / P, slot = k0 % P, nkv = pool->kv_dim / pool->head_dim;
	bool fp8 = pool->dtype == MS_KV_FP8;
	const char *kb = NULL, *vb = NULL;
	const uint8_t *ksb = NULL, *vsb = NULL;
	/* Walk the pages once per chunk; never touch a page-table entry past
	 * the last key (it may not exist). */
	for (int64_t p = k0; p < k1; p++, slot++) {
		if (p == k0 || slot == P) {
			if (slot == P)
				blk++, slot = 0;
			kb = (const char *)ms_kv_k(pool, pages[blk], 0) + kvo;
			vb = (const char *)ms_kv_v(pool, pages[blk], 0) + kvo;
			if (fp8) {
				ksb = ms_kv_ks(pool, pages[blk], 0) + it->kvh;
				vsb = ms_kv_vs(pool, pages[blk], 0) + it->kvh;
			}
		}
		w->kp[p - k0] = kb + slot * row;
		w->vp[p - k0] = vb + slot * row;
		if (fp8) {
			w->ksp[p - k0] = ksb + slot * nkv;
			w->vsp[p - k0] = vsb + slot * nkv;
		}
	}
	struct ms_attn_chunk ch = {
		.d = j->d, .ld = j->ld, .scale = j->scale, .nq = it->nq, .nkv = it->nkv,
		.G = (int)j->G, .q = a->q + t0 * a->n_heads * j->d + it->kvh * j->G * j->d,
		.ldq = a->n_heads * j->d, .lo = j->lo + t0, .hi = j->hi + t0, .k0 = k0, .k1 = k1,
		.k = w->kp, .v = w->vp, .ks = w->ksp, .vs = w->vsp, .zero = j->zero, .m = m, .l = l,
		.acc = acc, .tmp = w->tmp,
	};
	const struct ms_attn_kernel *k = j->kern;
	(fp8 ? k->chunk_fp8 : pool->dtype != MS_KV_BF16 ? k->chunk
	 : a->bf16_products ? k->chunk_bf16_products : k->chunk_bf16)(&ch);
}

/* Fold a chunk partial into the running state, row by row; rows without
 * keys in the chunk are skipped, so a row's result depends only on its own
 * keys. */
static void fold(int64_t R, int64_t d, int64_t ld, float *M, float *L, float *A, const float *m,
		 const float *l, const float *acc)
{
	for (int64_t r = 0; r < R; r++) {
		if (m[r] == -INFINITY)
			continue;
		float *Ar = A + r * ld;
		const float *ar = acc + r * ld;
		if (M[r] == -INFINITY) {
			M[r] = m[r], L[r] = l[r];
			memcpy(Ar, ar, (size_t)d * sizeof(float));
			continue;
		}
		float mx = m[r] > M[r] ? m[r] : M[r];
		float x = expf(M[r] - mx), y = expf(m[r] - mx);
		L[r] = L[r] * x + l[r] * y;
		for (int64_t e = 0; e < d; e++)
			Ar[e] = Ar[e] * x + ar[e] * y;
		M[r] = mx;
	}
}

/* The sink joins the maximum and the denominator; then divide. */
static void finish(const struct job *j, const struct item *it, const float *M, const float *L,
		   const float *A)
{
	const struct ms_attn_args *a = j->a;
	int64_t d = j->d, U = (int64_t)it->nkv * j->G;
	for (int64_t i = 0; i < it->nq; i++)
		for (int64_t u = 0; u < U; u++) {
			int64_t r = i * U + u, h = it->kvh * j->G + u;
			float *o = a->out + (it->t0 + i) * a->n_heads * d + h * d;
			if (M[r] == -INFINITY) { /* no key at all: cannot happen (pos >= lo) */
				memset(o, 0, (size_t)d * sizeof(float));
				continue;
			}
			float sk = a->sinks ? a->sinks[h] : -INFINITY;
			float mx = sk > M[r] ? sk : M[r];
			float x = expf(M[r] - mx);
			float w = x / (L[r] * x + expf(sk - mx));
			const float *Ar = A + r * j->ld;
			for (int64_t e = 0; e < d; e++)
				o[e] = Ar[e] * w;
		}
}

static void task_fn(void *ctx, int task, int worker)
{
	const struct job *j = ctx;
	const struct task *tk = &j->tasks[task];
	const struct item *it = &j->items[tk->item];
	struct wscratch w;
	wscratch_layout(j->rmax, j->ld, j->scratch + (size_t)worker * j->scratch_stride, &w);
	int64_t R = item_rows(j, it), n = it->c1 - it->c0;
	if (it->n_split > 1) {
		/* Store each chunk's partial; the merge pass folds them. */
		int64_t slot = slot_floats(R, j->ld);
		int64_t cb = it->c0 + n * tk->k / it->n_split;
		int64_t ce = it->c0 + n * (tk->k + 1) / it->n_split;
		for (int64_t c = cb; c < ce; c++) {
			float *s = j->parts + it->part + (c - it->c0) * slot;
			run_chunk(j, it, c, &w, s + R * j->ld, s + R * j->ld + R, s);
		}
		return;
	}
	for (int64_t r = 0; r < R; r++)
		w.rm[r] = -INFINITY;
	for (int64_t c = it->c0; c < it->c1; c++) {
		run_chunk(j, it, c, &w, w.pm, w.pl, w.pacc);
		fold(R, j->d, j->ld, w.rm, w.rl, w.racc, w.pm, w.pl, w.pacc);
	}
	finish(j, it, w.rm, w.rl, w.racc);
}

static void merge_fn(void *ctx, int task, int worker)
{
	const struct job *j = ctx;
	const struct item *it = &j->items[j->merges[task]];
	struct wscratch w;
	wscratch_layout(j->rmax, j->ld, j->scratch + (size_t)worker * j->scratch_stride, &w);
	int64_t R = item_rows(j, it), slot = slot_floats(R, j->ld);
	for (int64_t r = 0; r < R; r++)
		w.rm[r] = -INFINITY;
	for (int64_t c = it->c0; c < it->c1; c++) {
		const float *s = j->parts + it->part + (c - it->c0) * slot;
		fold(R, j->d, j->ld, w.rm, w.rl, w.racc, s + R * j->ld, s + R * j->ld + R, s);
	}
	finish(j, it, w.rm, w.rl, w.racc);
}

/* Blocks of consecutive positions of one sequence, up to bq tokens. */
static int64_t plan_blocks(const struct ms_attn_args *a, int64_t bq, int64_t *t0s, int32_t *nqs)
{
	int64_t nb = 0;
	for (int64_t t = 0; t < a->n;) {
		int64_t e = t + 1;
		while (e < a->n && e - t < bq && a->pages[e] == a->pages[e - 1] &&
		       a->pos[e] == a->pos[e - 1] + 1)
			e++;
		t0s[nb] = t, nqs[nb] = (int32_t)(e - t);
		nb++;
		t = e;
	}
	return nb;
}

/* The largest divisor of n that is at most cap (at least 1). */
static int64_t divisor_at_most(int64_t n, int64_t cap)
{
	for (int64_t k = cap < n ? cap : n; k > 1; k--)
		if (n % k == 0)
			return k;
	return 1;
}

void ms_attn_ws_free(struct ms_attn_ws *ws)
{
	if (!ws)
		return;
	free(ws->mem);
	ws->mem = NULL;
	ws->cap = 0;
}

/* Make ws hold need bytes, keeping its first keep bytes. */
static int ws_reserve(struct ms_attn_ws *ws, size_t need, size_t keep)
{
	if (ws->cap >= need)
		return 0;
	void *m = aligned_alloc(64, up64(need));
	if (!m)
		return -ENOMEM;
	if (keep)
		memcpy(m, ws->mem, keep);
	free(ws->mem);
	ws->mem = m, ws->cap = up64(need);
	return 0;
}

/* KV heads per item, per block (bhp): as many as fit the block's rows,
 * since whole positions stream faster than one head's strided rows; fewer
 * only while that would leave some thread without a task even after
 * split-K (balance then matters more). */
static void plan_heads(const struct ms_attn_args *a, int64_t nblk, const int64_t *bt0,
		       const int32_t *bnq, const int64_t *lo, const int64_t *hi, int64_t threads,
		       int32_t *bhp)
{
	int64_t nKV = a->n_kv_heads, G = a->n_heads / a->n_kv_heads;
	for (int64_t cap = a->heads ? a->heads : nKV;;) {
		int64_t possible = 0;
		for (int64_t b = 0; b < nblk; b++) {
			int64_t rows_cap = BLOCK_ROWS / (bnq[b] * G);
			int64_t hp = a->heads ? a->heads : divisor_at_most(nKV, cap < rows_cap ? cap : rows_cap);
			int64_t tl = bt0[b] + bnq[b] - 1;
			bhp[b] = (int32_t)hp;
			possible += nKV / hp * (hi[tl] / MS_ATTN_CHUNK + 1 - lo[bt0[b]] / MS_ATTN_CHUNK);
		}
		if (a->heads || threads == 1 || possible >= threads || cap == 1)
			break;
		cap = divisor_at_most(nKV, cap - 1);
	}
}

/* The blocks of query tokens, as planned. */
struct blocks {
	int64_t n;
	const int64_t *t0;       /* first token */
	const int32_t *nq, *hp;  /* tokens, kv heads per item */
	const int64_t *lo, *hi;  /* each token's key window */
};

/* Items (block x run of kv heads), their tasks (per_item chunks' splits at
 * most) and the items to merge, with their partials' offsets. */
static void lay_out_items(const struct blocks *bl, int64_t nKV, int64_t G, int64_t ld,
			  int64_t per_item, struct item *items, struct task *tasks, int32_t *merges)
{
	int64_t it_n = 0, tk_n = 0, mg_n = 0, part_off = 0;
	for (int64_t b = 0; b < bl->n; b++) {
		int64_t R = (int64_t)bl->nq[b] * bl->hp[b] * G, t0 = bl->t0[b], tl = t0 + bl->nq[b] - 1;
		int64_t c0 = bl->lo[t0] / MS_ATTN_CHUNK, c1 = bl->hi[tl] / MS_ATTN_CHUNK + 1;
		int64_t s = per_item < c1 - c0 ? per_item : c1 - c0;
		for (int64_t h = 0; h < nKV; h += bl->hp[b]) {
			struct item *it = &items[it_n];
			*it = (struct item){.t0 = t0, .c0 = c0, .c1 = c1, .nq = bl->nq[b],
					    .kvh = (int32_t)h, .nkv = bl->hp[b], .n_split = (int32_t)s};
			if (s > 1) {
				it->part = part_off;
				part_off += (c1 - c0) * slot_floats(R, ld);
				merges[mg_n++] = (int32_t)it_n;
			}
			for (int64_t q = 0; q < s; q++)
				tasks[tk_n++] = (struct task){(int32_t)it_n, (int32_t)q};
			it_n++;
		}
	}
}

int ms_attn_run(const struct ms_attn_kernel *k, struct ms_pool *pool,
		const struct ms_attn_args *a, struct ms_attn_ws *ws, struct ms_err *err)
{
	int64_t nH = a->n_heads, nKV = a->n_kv_heads, d = a->head_dim;
	if (nH < 1 || nKV < 1 || d < 1 || nH % nKV || !a->pool || a->pool->kv_dim != nKV * d)
		return ms_err_set(err, -EINVAL, "attention: %lld heads, %lld kv heads, head_dim %lld "
				  "do not fit a KV pool of %lld floats per position",
				  (long long)nH, (long long)nKV, (long long)d,
				  a->pool ? (long long)a->pool->kv_dim : 0LL);
	if (a->heads < 0 || (a->heads && nKV % a->heads) || a->split < 0)
		return ms_err_set(err, -EINVAL, "attention: %d kv heads per item, split %d",
				  a->heads, a->split);
	if (a->bf16_products && a->pool->dtype == MS_KV_BF16 && !k->chunk_bf16_products)
		return ms_err_set(err, -EINVAL, "attention: %s has no bf16 products", k->name);
	if (a->n <= 0)
		return 0;
	int64_t G = nH / nKV, ld = (d + 15) & ~(int64_t)15, n = a->n;
	int64_t bq = G >= BLOCK_ROWS ? 1 : BLOCK_ROWS / G;
	bq = bq < BLOCK_TOKENS ? bq : BLOCK_TOKENS;
	int64_t threads = pool->n_threads > 0 ? pool->n_threads : 1, target = 4 * threads;

	/* Part A, sized by n: windows, blocks, the zero row. */
	size_t o_lo = 0, o_hi = up64((size_t)n * sizeof(int64_t));
	size_t o_bt0 = 2 * o_hi, o_bnq = 3 * o_hi, o_bhp = o_bnq + up64((size_t)n * sizeof(int32_t));
	size_t o_zero = o_bhp + up64((size_t)n * sizeof(int32_t));
	size_t o_b = o_zero + up64((size_t)(nKV * d + 16) * sizeof(float));
	if (ws_reserve(ws, o_b, 0))
		return ms_err_set(err, -ENOMEM, "attention: out of memory for %lld tokens", (long long)n);
	char *base = ws->mem;
	int64_t *lo = (int64_t *)(base + o_lo), *hi = (int64_t *)(base + o_hi);
	int64_t *bt0 = (int64_t *)(base + o_bt0);
	int32_t *bnq = (int32_t *)(base + o_bnq), *bhp = (int32_t *)(base + o_bhp);
	for (int64_t t = 0; t < n; t++) {
		int64_t p = a->pos[t];
		lo[t] = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
		hi[t] = p;
	}
	int64_t nblk = plan_blocks(a, bq, bt0, bnq);

	plan_heads(a, nblk, bt0, bnq, lo, hi, threads, bhp);

	/* Count items, tasks, partials. */
	int64_t n_items = 0;
	for (int64_t b = 0; b < nblk; b++)
		n_items += nKV / bhp[b];
	int64_t per_item = 1;
	if (a->split > 1)
		per_item = a->split;
	else if (a->split == 0 && threads > 1 && n_items < target)
		per_item = (target + n_items - 1) / n_items;
	int64_t rmax = 0, n_tasks = 0, n_merges = 0, parts = 0;
	for (int64_t b = 0; b < nblk; b++) {
		int64_t R = (int64_t)bnq[b] * bhp[b] * G, tl = bt0[b] + bnq[b] - 1;
		int64_t chunks = hi[tl] / MS_ATTN_CHUNK + 1 - lo[bt0[b]] / MS_ATTN_CHUNK;
		int64_t s = per_item < chunks ? per_item : chunks, items = nKV / bhp[b];
		rmax = R > rmax ? R : rmax;
		n_tasks += s * items;
		if (s > 1)
			n_merges += items, parts += items * chunks * slot_floats(R, ld);
	}
	if (n_tasks > INT32_MAX)
		return ms_err_set(err, -EINVAL, "attention: %lld tasks", (long long)n_tasks);

	/* Part B: items, tasks, worker scratch, partials. */
	struct wscratch w;
	size_t stride = up64(wscratch_layout(rmax, ld, NULL, &w));
	size_t o_items = o_b, o_tasks = o_items + up64((size_t)n_items * sizeof(struct item));
	size_t o_merges = o_tasks + up64((size_t)n_tasks * sizeof(struct task));
	size_t o_scr = o_merges + up64((size_t)n_merges * sizeof(int32_t));
	size_t o_parts = o_scr + stride * (size_t)threads;
	if (ws_reserve(ws, o_parts + up64((size_t)parts * sizeof(float)), o_b))
		return ms_err_set(err, -ENOMEM, "attention: out of memory for %lld tokens", (long long)n);
	base = ws->mem;
	lo = (int64_t *)(base + o_lo), hi = (int64_t *)(base + o_hi);
	bt0 = (int64_t *)(base + o_bt0);
	bnq = (int32_t *)(base + o_bnq), bhp = (int32_t *)(base + o_bhp);
	struct item *items = (struct item *)(base + o_items);
	struct task *tasks = (struct task *)(base + o_tasks);
	int32_t *merges = (int32_t *)(base + o_merges);
	float *zero = (float *)(base + o_zero);
	memset(zero, 0, (size_t)(nKV * d + 16) * sizeof(float));
	struct blocks bl = {.n = nblk, .t0 = bt0, .nq = bnq, .hp = bhp, .lo = lo, .hi = hi};
	lay_out_items(&bl, nKV, G, ld, per_item, items, tasks, merges);
	struct job j = {
		.kern = k, .a = a, .G = G, .d = d, .ld = ld, .rmax = rmax,
		.scale = 1.0f / sqrtf((float)d), .lo = lo, .hi = hi, .items = items,
		.tasks = tasks, .merges = merges, .zero = zero, .scratch = base + o_scr,
		.scratch_stride = stride, .parts = (float *)(base + o_parts),
	};
	ms_pool_run(pool, (int)n_tasks, task_fn, &j);
	ms_pool_run(pool, (int)n_merges, merge_fn, &j);
	return 0;
}
