/*
 * cpu.h: the CPU backend's state and its own functions (the backend
 * interface's instance over them is ops.c).
 *
 * It owns the worker pool and, for each weight format, the ordered kernel
 * candidates a matrix of that format is bound to (the first that takes it).
 * Kernel choice happens at start-up, from the CPU's features and the user's
 * --kernels request, never in the hot path: one ordered table
 * (kernel-table.c) decides every choice below.
 *
 * One backend runs one step at a time: its gemm, linear and MoE calls take
 * their working memory from the backend's scratch (scratch.h), and its pool
 * runs one job at a time, so none of them may be called concurrently on one
 * struct ms_cpu (two backends may run side by side).
 */
#ifndef MS_CPU_H
#define MS_CPU_H

#include "attention.h"
#include "backend.h"
#include "kernels.h"
#include "ms-error.h"
#include "pool.h"
#include "rowops.h"
#include "scratch.h"

#define MS_KERNEL_CANDIDATES 6
#define MS_KERNEL_REASON_MAX 96

struct ms_attn_kernel;


struct ms_cpu {
	const char *name;          /* "cpu" */
	const char *isa;           /* kernel set in use: "ref", ... */
	unsigned cpu_flags;        /* what the CPU and OS support */
	bool exact;                /* only kernels that keep fp32 activations */
	bool dense_int8;           /* requantize dense bf16 projections to int8 at load */
	bool attn_bf16_products;   /* ms_attn_args.bf16_products (--attn-products) */
	struct ms_pool pool;
	ms_swiglu_row_fn swiglu_row; /* the experts' activation, for this CPU */
	ms_mask_words_fn *mask_words; /* structured outputs' logit writer, for this CPU */
	const struct ms_rowops *rowops; /* RMSNorm, rotary embedding, residual add */
	const struct ms_attn_kernel *attn; /* attention's chunk kernel, for this CPU and set */
	/* Per format, the kernels to try in order (a packed kernel may decline
	 * a matrix it cannot take); the last is always the reference. */
	const struct ms_kernel *kernels[MS_WFMT_COUNT][MS_KERNEL_CANDIDATES];
	int n_kernels[MS_WFMT_COUNT];
	char reasons[MS_WFMT_COUNT][MS_KERNEL_REASON_MAX]; /* why the first candidate was chosen */
	uint64_t bytes_streamed;   /* weight bytes read by gemms so far (bench) */
	int numa_nodes;            /* memory nodes (libnuma), 1 without NUMA */
	bool numa_interleave;      /* weights interleaved over the nodes */
	/* The backend interface's view of it (ops.c): set by ms_cpu_backend. */
	struct ms_backend base;
	const struct ms_step *step;     /* the step being run (step_begin) */
	struct ms_attn_ws attn_ws;      /* attention's scratch, kept between steps */
	/* Working memory of gemm, linear and MoE calls, grown to the largest
	 * call seen and kept until ms_cpu_free (zero at init: empty). */
	struct ms_scratch scratch;
};

/* kernels: "auto" (or NULL) picks the most specific set this CPU runs,
 * otherwise one of the names ms_cpu_kernel_sets lists; an unknown (-EINVAL)
 * or unsupported (-ENOTSUP) name is an error. threads <= 0: one per
 * available CPU. */
int ms_cpu_init(struct ms_cpu *be, const char *kernels, int threads, struct ms_err *err);

struct ms_cpu_opts {
	const char *kernels;  /* as above */
	int threads;
	bool exact;           /* skip kernels that round activations (int8/bf16) */
	bool dense_int8;      /* attention projections and lm_head to int8 per channel at
			       * load (quant/unquant.c) */
	enum ms_attn_products attn_products;
};
int ms_cpu_init_opts(struct ms_cpu *be, const struct ms_cpu_opts *o,
			 struct ms_err *err);

/* NUMA placement, chosen before the model loads (--numa). On one node every
 * mode is a plain pool. */
void ms_cpu_set_numa(struct ms_cpu *be, enum ms_numa_mode mode);

/* Around loading weights: with interleaving on, memory the loader allocates
 * and the checkpoint pages it maps are spread page by page over all nodes,
 * so every expert streams from every node's memory at once. */
void ms_cpu_weights_begin(struct ms_cpu *be);
void ms_cpu_weights_end(struct ms_cpu *be, void *const *maps, const size_t *sizes, int n);
void ms_cpu_free(struct ms_cpu *be);

/* The preferred kernel for format f, or NULL when no kernel computes it. */
const struct ms_kernel *ms_cpu_find_kernel(const struct ms_cpu *be, enum ms_wfmt f);

/* Choose the kernel for one matrix: the first candidate for its format that
 * takes it. A packed kernel packs w here (w->pack set, *owned the buffer to
 * free with the matrix). why gets the reason (with any declines). */
int ms_cpu_bind(struct ms_cpu *be, struct ms_wmat *w, const struct ms_kernel **k,
		    void **owned, char *why, size_t why_len, struct ms_err *err);

/* Rows per task for about `tasks` tasks over `rows`, a multiple of the
 * kernel's row_align and at least 16. */
int64_t ms_kernel_rows_per_task(const struct ms_kernel *k, int64_t rows, int64_t tasks);

/* The backend interface over be (engine/backend.h; ops.c), set up on the
 * first call: what a model loads and runs on. ms_cpu_free releases it. */
struct ms_backend *ms_cpu_backend(struct ms_cpu *be);
/* be when b is the CPU backend, else NULL (CPU-only reports: bench). */
struct ms_cpu *ms_cpu_from(struct ms_backend *b);
void ms_cpu_ops_free(struct ms_cpu *be);

/* Weight bytes every gemm has streamed so far (a packed matrix counts its
 * packed size). */
static inline uint64_t ms_cpu_bytes_streamed(const struct ms_cpu *be)
{
	return __atomic_load_n(&be->bytes_streamed, __ATOMIC_RELAXED);
}
static inline void ms_cpu_count_bytes(struct ms_cpu *be, uint64_t b)
{
	__atomic_fetch_add(&be->bytes_streamed, b, __ATOMIC_RELAXED);
}

/* Run k over rows [r0, r1) of w on n activation rows: from xq, the
 * activations k->prep made (k->prep_size bytes, the caller's), when the
 * kernel reads them prepared, else from x. For callers that split rows
 * themselves (moe.c). */
void ms_kernel_run(const struct ms_kernel *k, const struct ms_wmat *w, int64_t r0, int64_t r1,
		   const void *xq, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy);

/* Why the kernel for f was chosen (for inspect). */
const char *ms_cpu_kernel_reason(const struct ms_cpu *be, enum ms_wfmt f);

/* Detected CPU features (CPUID plus the OS's XCR0 state). */
unsigned ms_cpu_detect(void);

/* "avx2 fma avx512f ..." into buf. */
const char *ms_cpu_flags_str(unsigned flags, char *buf, size_t len);

/* Known kernel sets, comma-separated, for messages and --help. */
extern const char ms_cpu_kernel_sets[];

/* y[n, rows] = x[n, cols] W^T (+ bias), rows split over the pool. 0, or
 * -ENOMEM (y untouched) when the scratch for the kernel's prepared
 * activations cannot grow. */
int ms_cpu_gemm(struct ms_cpu *be, const struct ms_kernel *k, const struct ms_wmat *w,
		    const float *x, int64_t n, float *y, const float *bias);

/* The same for m <= MS_GEMM_MULTI_MAX matrices of one kernel and one
 * width on the same x (attention's q, k and v), y[i] and bias[i] (bias may
 * be NULL, or bias[i]) for w[i]: one pool run over all their row blocks, so
 * the small ones share the threads with the large and the pool is entered
 * once (a kernel that asks for whole matrices, k->whole, gets them one by
 * one). Each row is computed by exactly one task with w[i]'s kernel, so the
 * results are those of m separate calls, bit for bit. 0 or -ENOMEM as
 * above. */
#define MS_GEMM_MULTI_MAX 4
int ms_cpu_gemm_multi(struct ms_cpu *be, const struct ms_kernel *k, int m,
			  const struct ms_wmat *const *w, const float *x, int64_t n,
			  float *const *y, const float *const *bias);

/* y[i][n, rows_i] = act_i(x[n, cols]) W_i^T * row_scale + bias_i for m
 * projections on the same x (engine/linear.h; each bound to its kernel):
 * one pass over the pool (ms_cpu_gemm_multi) when 1 <= m <=
 * MS_GEMM_MULTI_MAX and they share a kernel and a width and quantize no
 * activations, else one by one, quantizing x into scratch first for those
 * that ask. The same results either way. 0, or -ENOMEM with a message
 * when scratch cannot grow (y[i] of the failed one and after untouched). */
struct ms_linear;
int ms_cpu_linear(struct ms_cpu *be, int m, const struct ms_linear *const *l, const float *x,
		  int64_t n, float *const *y, struct ms_err *err);

#endif
