/*
 * attention.h: causal attention with sinks over the paged KV cache.
 *
 * For query token t at position pos and query head h (kv head
 * h / (n_heads / n_kv_heads)), over the keys p = lo..pos of t's own page
 * table (lo = max(0, pos - window + 1) with a window, else 0):
 *
 *   s_p = (q . k_p) / sqrt(head_dim)
 *   out = sum_p exp(s_p - M) v_p / (sum_p exp(s_p - M) + exp(sink_h - M))
 *
 * with M the maximum over the scores and the sink: the sink's probability
 * mass is dropped (it has no value vector). All in fp32.
 *
 * How it is computed (attention.c drives, a kernel computes):
 *   - Keys are cut into chunks of MS_ATTN_CHUNK positions aligned to
 *     absolute positions. A kernel turns one chunk into a partial state per
 *     query row, (m = max score, l = sum exp(s - m), acc = sum exp(s - m) v),
 *     and the driver folds the chunks' partials left to right, then folds in
 *     the sink and divides. The fold order is fixed by positions alone, so
 *     the result does not depend on the thread count, on whether a long
 *     range is split over several tasks (split-K), or on which other tokens
 *     share the batch: every output is bit for bit the same.
 *   - A work item is (block of consecutive query tokens of one sequence,
 *     kv head or run of kv heads) with every query head of those kv heads
 *     (GQA): each K and V row is read once for the whole block. Decode
 *     items take every kv head when that leaves enough tasks: a position
 *     holds all kv heads side by side, and reading whole positions streams
 *     memory ~2.5x faster than one head's rows strided by the position size.
 *   - With few items and many keys, an item's chunks are spread over several
 *     tasks that store their partials; a second pass folds them.
 *   - The AVX-512 kernel computes a chunk whose kv head has 16 or more query
 *     rows (prefill blocks) with the rows in vector lanes instead of the
 *     keys, in the same operations per row: the same bits as the walk.
 */
#ifndef MS_ATTENTION_H
#define MS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "kv-cache.h"
#include "ms-error.h"
#include "pool.h"

/* Keys per chunk: the unit of the fold and of split-K. */
#define MS_ATTN_CHUNK 256

/* One chunk for one block of query rows: nq tokens, nkv kv heads, G query
 * heads each. Row r = i * nkv * G + u is token i (0 <= i < nq) and its u-th
 * query head here (0 <= u < nkv * G), which reads kv head u / G. */
struct ms_attn_chunk {
	int64_t d;               /* head_dim */
	int64_t ld;              /* floats between acc rows: d rounded up to 16 */
	float scale;             /* 1 / sqrt(d) */
	int nq, nkv, G;
	const float *q;          /* token i, head u at q + i * ldq + u * d */
	int64_t ldq;
	const int64_t *lo, *hi;  /* token i sees keys lo[i] ..= hi[i] */
	int64_t k0, k1;          /* this chunk's keys [k0, k1): the union of the
				  * rows' keys within one aligned chunk */
	/* key p, kv head u / G: value e at (const T *)k[p - k0] + (u / G) * d + e,
	 * T the pool's dtype (float for chunk, uint16_t bf16 for chunk_bf16,
	 * uint8_t e4m3 codes for chunk_fp8) */
	const void *const *k;
	const void *const *v;
	/* fp8: the scale byte (e8m0) of key p, kv head u / G at ks[p - k0][u / G]
	 * (and vs): the value is code * 2^(byte - 127) */
	const uint8_t *const *ks;
	const uint8_t *const *vs;
	const float *zero;       /* nkv * d zeros (and more), read for a missing key
				  * (zero bits are 0 in every dtype, scales too) */
	/* out, per row: m[r] (-INFINITY when the row has no key here: then l and
	 * acc are left alone), l[r], acc[r * ld + 0 .. d) (padding lanes may be
	 * written, with zeros) */
	float *m, *l, *acc;
	float *tmp;              /* MS_ATTN_TMP_FLOATS(R, ld) floats of scratch, 64-byte
				  * aligned */
};

/* A chunk's scratch for R rows, head_dim padded to ld: the walk's running
 * sums and scores (R * 48 + 32), and the lane kernel's Q^T, O^T and widened
 * K and V tiles (64 * ld) with its sums and probabilities (544). */
#define MS_ATTN_TMP_FLOATS(R, ld) ((R) * 48 + 32 + 64 * (((ld) + 31) / 32 * 32) + 544)

typedef void (*ms_attn_chunk_fn)(const struct ms_attn_chunk *c);

struct ms_attn_kernel {
	const char *name;        /* "ref-attn", ... */
	const char *isa;         /* the --kernels set it belongs to */
	unsigned cpu_flags;      /* MS_CPU_* it needs, all of them */
	ms_attn_chunk_fn chunk;       /* K and V stored as f32 */
	ms_attn_chunk_fn chunk_bf16;  /* as bf16 (widened exactly; the same fp32 math) */
	ms_attn_chunk_fn chunk_fp8;   /* as fp8 codes and scales (fp8.h; widened exactly) */
	/* As bf16, with q and the probabilities that weight the values rounded
	 * to bf16 (ties to even, subnormals to 0) before their products: the
	 * products of bf16 pairs that AVX512-BF16 (and GPU flash attention)
	 * multiply; l sums the f32 probabilities. NULL: not offered. */
	ms_attn_chunk_fn chunk_bf16_products;
};

/* Portable reference: scalar, expf, two passes within a chunk. The
 * definition every other kernel is tested against. */
extern const struct ms_attn_kernel ms_attn_ref;
extern const struct ms_attn_kernel ms_attn_avx2;
extern const struct ms_attn_kernel ms_attn_avx512;
extern const struct ms_attn_kernel ms_attn_avx512bf16;

/* The kernel for a backend's kernel set (be->isa: "ref", "avx2", "avx512";
 * "amx" counts as avx512), falling back to the next one down the CPU
 * supports; "ref" always gives the reference. The backend's own choice,
 * be->attn, is this for be->isa and be->cpu_flags: both walk the table of
 * kernel-table.c. */
const struct ms_attn_kernel *ms_attn_select(const char *isa, unsigned cpu_flags);

/* One layer's attention over a batch. */
struct ms_attn_args {
	int64_t n_heads, n_kv_heads, head_dim;
	int64_t window;                /* sliding window in positions; <= 0: none */
	const float *sinks;            /* [n_heads] sink logits; NULL: none */
	const struct ms_kv_pool *pool;
	int64_t n;                     /* query tokens */
	const int64_t *pos;            /* [n] */
	/* [n] each token's page table for this layer: tokens of one sequence
	 * share the pointer. Pages for every key a token sees must exist. */
	const int32_t *const *pages;
	const float *q;                /* [n][n_heads * head_dim], after RoPE */
	float *out;                    /* [n][n_heads * head_dim] */
	/* Tasks per item: 0 picks (split only when items are fewer than four
	 * per thread), 1 never splits, k > 1 splits every item into up to k
	 * (tests). Never changes the result. */
	int split;
	/* KV heads per item: 0 picks; else a divisor of n_kv_heads (tests).
	 * Never changes the result either. */
	int heads;
	/* With a bf16 cache, the kernel's chunk_bf16_products (which must be
	 * there); f32 and fp8 caches ignore it. */
	bool bf16_products;
};

/* Scratch that ms_attn_run grows on demand and reuses: keep one per
 * forward pass (or longer), free it with ms_attn_ws_free. Zero-init. */
struct ms_attn_ws {
	void *mem;
	size_t cap;
};

/* out = attention(q, pool) on the kernel k, over the pool's threads.
 * -ENOMEM (scratch), -EINVAL (shapes). */
int ms_attn_run(const struct ms_attn_kernel *k, struct ms_pool *pool,
		const struct ms_attn_args *a, struct ms_attn_ws *ws, struct ms_err *err);
void ms_attn_ws_free(struct ms_attn_ws *ws);

/* Attention probabilities with a sink: s[0..n) holds scaled scores on entry
 * and p_j = exp(s_j) / (sum_i exp(s_i) + exp(sink)) on return; the sink's
 * own share is dropped (it has no value vector). The textbook form, kept
 * for tests (the kernels never materialise the probabilities). */
void ms_sink_softmax(float *s, int64_t n, float sink);

/* For tests: y = exp(x) by the AVX-512 / AVX2 kernels' vector exp. Call
 * only where the CPU has the ISA. */
void ms_attn_exp_avx512(const float *x, float *y, int64_t n);
void ms_attn_exp_avx2(const float *x, float *y, int64_t n);

#endif
