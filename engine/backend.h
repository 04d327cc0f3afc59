/*
 * backend.h: the seam between a model's forward pass and the hardware.
 *
 * A backend is a struct of function pointers (struct ms_backend_ops), one
 * static const instance per backend, and a small registry that names them
 * (engine/backend.c; `--backend cpu`). It is chosen once at start-up; the
 * forward pass (models/) calls only these operations, so the same code runs
 * on every backend. The CPU backend (engine/cpu/ops.c) is the example to
 * read when writing another.
 *
 * Memory. Activations, norm weights, the KV pages and packed weights live in
 * the backend's memory (buf_alloc). `host` says whether that is ordinary
 * host memory the caller may read and write directly (the CPU): a device
 * backend's pointers are only ever passed back to its own operations. A
 * forward pass takes its scratch from the backend's arena (ms_backend_arena_*
 * below), grown to the largest step seen, never freed per call.
 *
 * A step. Every operation works on all n tokens of one forward pass at once
 * (never one call per row). step_begin stages the step's tokens, positions
 * and page tables once; the operations after it read them from there.
 *
 * Errors are codes with a message in err; a failed operation leaves the
 * caller's state as it was (a forward that fails is simply not used).
 */
#ifndef MS_BACKEND_H
#define MS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv-cache.h"
#include "linear.h"
#include "ms-error.h"

struct ms_backend;
struct ms_pool;

/* The tokens of one forward pass: any number of sequences, each token at
 * its own position. Every (token, layer) has its KV page already
 * (ms_kv_seq_reserve). */
struct ms_step {
	int64_t n;
	const int32_t *tokens;         /* [n] */
	const int64_t *pos;            /* [n] position in its sequence */
	const int32_t *seq;            /* [n] index into kv */
	struct ms_kv_seq *const *kv;   /* per sequence: its page tables */
	struct ms_kv_pool *pool;       /* the pages' storage (the backend's memory) */
};

/* One layer's attention, over the staged step's tokens: query heads h read
 * kv head h / (n_heads / n_kv_heads); each token sees its own sequence's
 * keys at positions max(0, pos - window + 1) ..= pos (window <= 0: all),
 * the sink's logit in the softmax's denominator (../shared/docs/gpt-oss.md
 * §2). q and out are [n][n_heads * head_dim]. */
struct ms_attn_desc {
	int layer;
	int64_t n_heads, n_kv_heads, head_dim;
	int64_t window;
	const float *sinks;            /* [n_heads], backend memory; NULL: none */
	const float *q;                /* after RoPE */
	float *out;
};

/* The experts of one layer (struct ms_moe_w) with their routing. */
struct ms_moe_desc {
	const struct ms_moe_w *w;
	struct ms_swiglu act;
	int64_t top_k;
	const float *router_logits;    /* [n][n_experts] */
	const float *h;                /* [n][hidden] the normalised input */
	float *x;                      /* [n][hidden] the residual stream, added into */
};

/* How a matrix is bound (ms_backend_ops.bind). */
enum ms_bind_mode {
	MS_BIND_FULL,      /* the backend's best kernel: it may pack or upload a copy */
	MS_BIND_IN_PLACE,  /* rows read as they are (a half to be spliced, a matrix
			    * waiting for a deferred bind): no copy; a device backend
			    * binds nothing it would compute with */
	MS_BIND_TABLE,     /* an embedding: rows gathered by token, not multiplied (the
			    * CPU reads them in place; a device uploads them) */
};

struct ms_backend_ops {
	const char *name;                    /* "cpu": what --backend names */

	/* Release everything the backend holds (its arena, threads, the
	 * struct itself when open allocated it). */
	void (*free)(struct ms_backend *be);

	/* ---- memory ---- */

	/* bytes of backend memory, 64-byte aligned, or NULL when there is not
	 * that much. Zero-filled: KV pages must read as zeros before they are
	 * written (attention reads a missing key as a zero row). */
	void *(*buf_alloc)(struct ms_backend *be, size_t bytes);
	void (*buf_free)(struct ms_backend *be, void *p);
	/* Copies within backend memory (a KV page's copy-on-write), and
	 * between it and the host (logits for the sampler, norm weights). */
	void (*copy)(struct ms_backend *be, void *dst, const void *src, size_t bytes);
	void (*to_host)(struct ms_backend *be, void *host, const void *src, size_t bytes);
	void (*from_host)(struct ms_backend *be, void *dst, const void *host, size_t bytes);

	/* ---- weights ---- */

	/* Choose how this backend computes l (its kernel, and any packed or
	 * uploaded copy, which l then owns through l->owned and owned_free).
	 * why gets the reason, for inspect. Called again on a bound matrix, it
	 * releases the old binding first. An error when nothing computes l's
	 * format on this backend. May run on several host threads at once for
	 * different matrices. */
	int (*bind)(struct ms_backend *be, struct ms_linear *l, enum ms_bind_mode mode, char *why,
		    size_t why_len, struct ms_err *err);

	/* Before loading: the checkpoint holds bytes of tensors. A backend
	 * with memory of its own refuses here, naming both sizes, when they
	 * cannot fit (optional). */
	int (*weights_fit)(struct ms_backend *be, uint64_t bytes, struct ms_err *err);

	/* Around loading a model's weights (optional). The CPU spreads what
	 * the loader allocates, and then the mapped checkpoint files (maps,
	 * sizes: n of them; none after a failed load), over its NUMA nodes. */
	void (*weights_begin)(struct ms_backend *be);
	void (*weights_end)(struct ms_backend *be, void *const *maps, const size_t *sizes, int n);

	/* ---- one forward pass ---- */

	/* Stage s for the operations that follow (the CPU keeps the pointer;
	 * a device copies positions and page tables over once). s stays valid
	 * until the step ends. */
	int (*step_begin)(struct ms_backend *be, const struct ms_step *s, struct ms_err *err);

	/* x[t] = row tokens[t] of the embedding table, as fp32. */
	void (*embed)(struct ms_backend *be, const struct ms_linear *table, float *x);

	/* y[i] = act(x) W_i^T * row_scale + bias_i for m (1 ..
	 * MS_LINEAR_MULTI_MAX) matrices of the same width on the same x [n]
	 * rows (attention's q, k and v go together), with each matrix's
	 * activation quantization. Results are those of m separate calls, bit
	 * for bit. */
	int (*linear)(struct ms_backend *be, int m, const struct ms_linear *const *l,
		      const float *x, int64_t n, float *const *y, struct ms_err *err);

	/* y[r] = w * x[rows[r]] / sqrt(mean(x[rows[r]]^2) + eps) for r < n
	 * (rows NULL: r itself), each row H wide. y may be x when rows is
	 * NULL. */
	void (*rmsnorm)(struct ms_backend *be, float *y, const float *x, const int64_t *rows,
			int64_t n, const float *w, int64_t H, double eps);

	/* The rotation of every staged token's position: table [n][d], the
	 * d/2 cosines then the d/2 sines of pos * inv_freq[i], times scale
	 * (YaRN's attention factor). inv_freq is host memory, [d/2] doubles.
	 * Computed once per step, used by every layer's rope. */
	void (*rope_table)(struct ms_backend *be, const double *inv_freq, float scale, int64_t d,
			   float *table);
	/* Rotate x [n][n_heads * d] in place by the table, pairs (i, i + d/2). */
	void (*rope)(struct ms_backend *be, const float *table, float *x, int64_t n_heads,
		     int64_t d);

	/* y[i] += x[i], count elements (the residual stream). */
	void (*add)(struct ms_backend *be, float *y, const float *x, int64_t count);

	/* Write every staged token's key and value rows ([n][kv_dim] each,
	 * after RoPE) into its page of layer `layer`. */
	void (*kv_write)(struct ms_backend *be, int layer, const float *k, const float *v);

	/* One layer's attention over the paged KV (struct ms_attn_desc). */
	int (*attention)(struct ms_backend *be, const struct ms_attn_desc *a, struct ms_err *err);

	/* The experts: top-k of the router logits (ties to the lower index), a
	 * softmax over the k chosen, and x[t] += sum_j w_j expert_j(h[t]), the
	 * sum formed in routing order first (struct ms_moe_desc). */
	int (*moe)(struct ms_backend *be, const struct ms_moe_desc *d, struct ms_err *err);

	/* ---- measuring (optional) ---- */

	/* The memory bandwidth of a backend whose memory is its own, for
	 * bench's roofline: bytes/s of a device-to-device copy kernel from one
	 * buffer of `bytes` (a multiple of 16; much larger than the caches) to
	 * another, read and write both counted (2 x bytes per copy), the best
	 * of several runs, each timed until the queue has drained. 0 with err
	 * set when it cannot run (no memory for the two buffers). NULL on the
	 * CPU: bench reads host memory itself. */
	double (*copy_bandwidth)(struct ms_backend *be, size_t bytes, struct ms_err *err);
};

#define MS_LINEAR_MULTI_MAX 4

/* Scratch for a forward pass, in backend memory: reserve the step's total
 * once (it grows, never shrinks), then take pieces. */
struct ms_arena {
	char *base;
	size_t cap, used;
};

/* Structured outputs' logit masking (engine/grammar): z[i] = -INFINITY
 * for each 0 bit of bits[0 .. words), 64 logits a word; the logits of
 * the words past the count untouched. A host kernel whatever the
 * backend, since the sampler's logits are host memory. */
typedef void ms_mask_words_fn(const uint64_t *bits, int64_t words, float *z);
/* The portable one: every backend's unless it names another. */
void ms_mask_words_ref(const uint64_t *bits, int64_t words, float *z);

/* What every backend has; a backend's own struct starts from it. */
struct ms_backend {
	const struct ms_backend_ops *ops;
	const char *name;          /* ops->name */
	const char *kernels;       /* the kernel set in use, for inspect and bench */
	const char *device;        /* the device's name, for bench; NULL on the host */
	bool host;                 /* buffers are host memory (see above) */
	bool exact;                /* only kernels that keep fp32 activations */
	bool dense_int8;           /* requantize dense float projections to int8 at load */
	bool attn_bf16_products;   /* on a bf16 cache, q and p rounded to bf16 (--attn-products) */
	unsigned kv_dtypes;        /* 1 << enum ms_kv_dtype of every KV dtype its attention reads */
	int threads;               /* host worker threads */
	struct ms_pool *pool;      /* those threads, for load-time work (host memory) */
	ms_mask_words_fn *mask_words; /* the host's mask writer (never NULL once open) */
	struct ms_arena arena;
};

enum ms_numa_mode {
	MS_NUMA_AUTO,        /* interleave when there is more than one node */
	MS_NUMA_OFF,
	MS_NUMA_INTERLEAVE,
};

/* What becomes of dense floating-point weights (attention projections,
 * lm_head) at load: --dense. */
enum ms_dense_mode {
	MS_DENSE_AUTO,   /* the backend's choice (the CPU: int8 unless exact) */
	MS_DENSE_KEEP,   /* as the checkpoint stores them ("bf16") */
	MS_DENSE_INT8,   /* int8, a scale per 32 columns (quant/unquant.c) */
};

/* "auto", "bf16", "int8" -> *out; -EINVAL for anything else. */
int ms_dense_mode_parse(const char *s, enum ms_dense_mode *out);

/* How attention multiplies on a bf16 KV cache: --attn-products. */
enum ms_attn_products {
	MS_ATTN_PRODUCTS_AUTO, /* the backend's choice (the CPU: bf16 where it
				* multiplies bf16 pairs in hardware, unless exact) */
	MS_ATTN_PRODUCTS_F32,  /* q and the probabilities kept in f32 */
	MS_ATTN_PRODUCTS_BF16, /* both rounded to bf16 before their products */
};

/* "auto", "f32", "bf16" -> *out; -EINVAL for anything else. */
int ms_attn_products_parse(const char *s, enum ms_attn_products *out);

/* What attention multiplies in on a cache of dtype dt: "bf16" (q and the
 * probabilities rounded, attn_bf16_products) or "f32". */
const char *ms_attn_products_name(const struct ms_backend *be, enum ms_kv_dtype dt);

/* What --backend and the options next to it ask for. */
struct ms_backend_opts {
	const char *backend;   /* a registry name; NULL: the first ("cpu") */
	const char *kernels;   /* a kernel set of that backend; NULL or "auto": the best */
	int threads;           /* <= 0: one per available CPU */
	bool exact;            /* skip kernels that round activations */
	enum ms_dense_mode dense;
	enum ms_attn_products attn_products;
	enum ms_numa_mode numa;
	int device;            /* which GPU, on a device backend (--device) */
};

/* One registry entry: a backend by name and how to start it. */
struct ms_backend_reg {
	const char *name;
	const char *about;     /* one line, for --help */
	int (*open)(const struct ms_backend_opts *o, struct ms_backend **out, struct ms_err *err);
};

/* Start the backend o->backend names. An unknown name is an error listing
 * the known ones. */
int ms_backend_open(const struct ms_backend_opts *o, struct ms_backend **out, struct ms_err *err);
void ms_backend_close(struct ms_backend *be);

/* "cpu, ..." for messages and --help. */
const char *ms_backend_names(void);

/* Make the arena hold at least bytes (64-byte pieces included) and empty
 * it. -ENOMEM (with a message) leaves the old arena as it was. */
int ms_backend_arena_reserve(struct ms_backend *be, size_t bytes, struct ms_err *err);
/* A 64-byte aligned piece of a reserved arena; NULL past its end (a
 * caller that reserved too little). */
void *ms_backend_arena_take(struct ms_backend *be, size_t bytes);
/* The arena's space for pieces of these sizes. */
static inline size_t ms_arena_size(size_t bytes)
{
	return (bytes + 63) & ~(size_t)63;
}
void ms_backend_arena_free(struct ms_backend *be);

/* Host floats into backend memory that the caller then owns: *p is
 * replaced by a backend buffer holding the same n floats (the host copy is
 * freed), or left alone on a host backend. Free with ms_backend_release. */
int ms_backend_adopt(struct ms_backend *be, float **p, size_t n, struct ms_err *err);
void ms_backend_release(struct ms_backend *be, void *p);

/* The rope table of backend.h's rope_table, computed on the host in
 * double for n tokens at positions pos: every backend gets the same bits
 * (a device uploads it). */
void ms_rope_table_host(const int64_t *pos, int64_t n, const double *inv_freq, float scale,
			int64_t d, float *table);

/* The registry's entries, in engine/backend.c's table. */
extern const struct ms_backend_reg ms_backend_reg_cpu;
extern const struct ms_backend_reg ms_backend_reg_rocm;
extern const struct ms_backend_reg ms_backend_reg_rocm_sim;

#endif
