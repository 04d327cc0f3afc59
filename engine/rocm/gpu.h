/*
 * gpu.h: what the ROCm backend's host code (rocm.c, plain C) knows of the
 * device: a runtime (memory, copies, the device's facts) and the kernels'
 * launchers, each a struct of function pointers with one instance per
 * build of the kernel sources:
 *
 *   ms_ghip_rt(),  ms_ghip_kern()     hipcc, AMD GPUs (-Drocm)
 *   ms_gcuda_rt(), ms_gcuda_kern()    nvcc, the same sources on NVIDIA
 *   ms_gsim_rt(),  ms_gsim_kern()     gcc against the host model (sim/)
 *
 * Pointers named "device" below are the runtime's memory. Launchers
 * queue work on the context's stream and return 0 or an error code with
 * the message in ctx->err; copies to the host wait for the queue.
 */
#ifndef MS_GPU_H
#define MS_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The matrix instructions (MFMA) a device has, from its gfx target:
 * gfx90a BF16; gfx940/941/942 BF16 | FP8_FNUZ; gfx950 BF16 | FP8 |
 * F8F6F4; NVIDIA none (kern-mma.cu is AMD's). */
enum {
	MS_GPU_MMA_BF16 = 1,      /* v_mfma_f32_32x32x8_bf16 */
	MS_GPU_MMA_FP8_FNUZ = 2,  /* v_mfma_f32_32x32x16_fp8_fp8, e4m3fnuz */
	MS_GPU_MMA_FP8 = 4,       /* the same on OCP e4m3 */
	MS_GPU_MMA_F8F6F4 = 8,    /* v_mfma_scale_f32_32x32x64_f8f6f4 */
};

/* One backend's queue and what launchers need to know of the device. */
struct ms_gpu_ctx {
	void *stream;        /* hipStream_t / cudaStream_t; NULL in the model */
	int wave;            /* lanes per wavefront: 64 (CDNA), 32 (NVIDIA) */
	int n_cu;            /* compute units (multiprocessors) */
	unsigned mma;        /* MS_GPU_MMA_* */
	struct ms_err *err;  /* where a failed launch says why */
};

/* The facts inspect and bench print. */
struct ms_gpu_info {
	char name[128];      /* "AMD Instinct MI300X", "NVIDIA H200" */
	char arch[64];       /* "gfx942:sramecc+:xnack-", "sm_90" */
	int wave, n_cu;
	size_t mem_free, mem_total;
};

struct ms_gpu_rt {
	const char *name;    /* "hip", "cuda", "sim" */
	/* Select device `device` and make a queue for ctx; -ENODEV (the
	 * runtime's own error in the message) when there is none. */
	int (*open)(int device, struct ms_gpu_ctx *ctx, struct ms_gpu_info *info, struct ms_err *err);
	void (*close)(struct ms_gpu_ctx *ctx);
	/* Zero-filled device memory, NULL when there is not that much. */
	void *(*alloc)(size_t bytes);
	void (*free)(void *p);
	/* Copies in queue order: to the device, within it, and back (the last
	 * one waits for everything queued before it). */
	int (*h2d)(const struct ms_gpu_ctx *c, void *dev, const void *host, size_t bytes);
	int (*d2d)(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes);
	int (*d2h)(const struct ms_gpu_ctx *c, void *host, const void *dev, size_t bytes);
	/* Free and total device memory now. */
	int (*mem_info)(size_t *free_b, size_t *total_b);
};

/* ---- weights as the kernels read them ---- */

/* Activation quantization kinds (engine/actq.h's values). */
enum { MS_GPU_ACT_NONE, MS_GPU_ACT_FP8_STATIC, MS_GPU_ACT_FP8_DYNAMIC, MS_GPU_ACT_MXFP4 };

/* A matrix on the device: struct ms_wmat's rows uploaded as they are
 * (every format's rows are contiguous and self-describing), its scales,
 * zeros, group map and bias beside them. Plain data, the same layout on
 * the host and on the device. */
struct ms_gpu_mat {
	int32_t fmt;                 /* enum ms_wfmt */
	int32_t bits;                /* INTQ code width */
	int64_t rows, cols;
	const uint8_t *w;            /* [rows][row_bytes] */
	int64_t row_bytes;
	const uint8_t *scales;       /* MXFP4 E8M0 [rows][scale_row_bytes] */
	int64_t scale_row_bytes;
	int64_t group_size, n_groups;
	const float *fscale;         /* INTQ [rows][n_groups]; FP8 [rows] */
	const float *fzero;          /* INTQ [rows][n_groups] */
	const int32_t *g_idx;        /* INTQ: distinct group maps [n][cols]; NULL: k / gs */
	const uint8_t *row_gmap;     /* [rows] which of them a row uses */
	const float *bias;           /* [rows] or NULL */
	int32_t act;                 /* MS_GPU_ACT_* of the input */
	float act_scale;             /* FP8_STATIC */
};

/* ---- the kernels' launchers ---- */

/* A product over inputs chosen per matrix: matrix e (of mats, device)
 * multiplies the inputs at list positions off[e] .. off[e+1] (off and list
 * device memory; off NULL: one matrix over positions 0 .. n-1; list NULL:
 * position p is input p). Input id reads row id / xdiv of x and gives row
 * id of y (xs[id] scales its products; xs NULL: 1), plus the bias. With
 * glu, rows 2i and 2i+1 are a gate/up pair and y's column i is their
 * clamped SwiGLU. */
struct ms_gpu_gemv {
	const struct ms_gpu_mat *mats;
	int64_t n_mats, rows, cols;  /* the largest rows; the shared cols */
	const int32_t *off, *list;
	int64_t n;                   /* positions in all (an upper bound with off) */
	const float *x;
	int64_t ldx, xdiv;
	const float *xs;
	float *y;
	int64_t ldy;
	int glu;
	float limit, alpha;          /* SwiGLU */
};

/* The MFMA products (kern-mma.cu): what the operands become. */
enum ms_gpu_mma_kind {
	MS_GPU_MM_NONE,
	MS_GPU_MM_BF16,   /* weights (any format) and inputs rounded to bf16 */
	MS_GPU_MM_FP8,    /* MXFP4 or FP8 weights x inputs the scheme quantized
			   * (FP8 or MXFP4) as e4m3, scales per 32 columns */
	MS_GPU_MM_F4F8,   /* MXFP4 weights as e2m1 x such inputs as e4m3,
			   * E8M0 scales in the instruction (gfx950) */
};

/* Attention of the staged tokens over the paged KV (backend.h's
 * ms_attn_desc), in fixed splits of MS_GPU_ATTN_SPLIT positions combined
 * in order: a token's result does not depend on the batch. */
#define MS_GPU_ATTN_SPLIT 256
struct ms_gpu_attn {
	int64_t n, n_heads, n_kv_heads, head_dim, window;
	const int64_t *pos;          /* [n] */
	const int32_t *tok_seq;      /* [n] the token's row of page tables */
	const int32_t *pages;        /* [n_seq][n_layers][n_blocks] */
	int64_t n_layers, n_blocks, layer;
	int64_t page_tokens;
	/* the pool (kv-cache.h's layout): pages of page_stride bytes, each
	 * page_tokens rows of n_kv_heads * head_dim values of kv_dtype (enum
	 * ms_kv_dtype: f32, bf16, fp8), then for fp8 a scale byte per row
	 * and kv head */
	const void *k, *v;
	int kv_dtype;
	int64_t page_stride;
	const float *sinks;
	const float *q;
	float *out;
	float *part;                 /* scratch [n][n_heads][max_splits][head_dim + 2] */
	int64_t max_splits;
};

struct ms_gpu_kern {
	const char *name;
	/* x[t] = row tok[t] of table, as fp32. */
	int (*embed)(const struct ms_gpu_ctx *c, const struct ms_gpu_mat *table, const int32_t *tok,
		     int64_t n, float *x);
	int (*rmsnorm)(const struct ms_gpu_ctx *c, float *y, const float *x, const int64_t *rows,
		       int64_t n, const float *w, int64_t H, float eps);
	int (*rope)(const struct ms_gpu_ctx *c, const float *table, float *x, int64_t n,
		    int64_t n_heads, int64_t d);
	int (*add)(const struct ms_gpu_ctx *c, float *y, const float *x, int64_t count);
	/* k and v rows of the staged tokens into their pages, rounded as
	 * kv-cache.h's ms_kv_put rounds them. */
	int (*kv_write)(const struct ms_gpu_ctx *c, const struct ms_gpu_attn *a, void *pk,
			void *pv, const float *k, const float *v);
	int (*attention)(const struct ms_gpu_ctx *c, const struct ms_gpu_attn *a);
	/* xq[id] = act_e(row id / xdiv of x) and xs[id] its scale, for
	 * every input id of matrix e (off / list as in ms_gpu_gemv); xq may
	 * be x when xdiv is 1. */
	int (*actq)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g, float *xq, float *xs);
	/* The product, two ways with the same bits (gpu-prod.h's order):
	 * gemv a wavefront per row (few inputs per matrix: decode), gemm
	 * tiles of rows by inputs through __shared__ memory (many: prefill). */
	int (*gemv)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g);
	int (*gemm)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g);
	/* The product through the matrix instructions as kind says: fp32
	 * accumulators, but bf16/fp8 operands and the instruction's own
	 * order of summation, so neither gemv's bits nor batch invariance;
	 * -ENOTSUP where c->mma lacks the instruction or the wavefront is
	 * not 64 lanes. */
	int (*mma)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g, int kind);
	/* Top-k of logits [n][E] (ties to the lower index), softmax over the
	 * k: sel, w [n][k]; then per expert its (t * k + j) in token order:
	 * off [E + 1], list [n * k]. */
	int (*route)(const struct ms_gpu_ctx *c, const float *logits, int64_t n, int64_t E,
		     int64_t k, int32_t *sel, float *w, int32_t *off, int32_t *list);
	/* x[t] += sum_j w[t][j] * y[t * k + j] (the sum in j order first). */
	int (*combine)(const struct ms_gpu_ctx *c, float *x, const float *y, const float *w,
		       int64_t n, int64_t k, int64_t H);
	/* Bandwidth probe for bench: dst = src, bytes. */
	int (*copy)(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes);
};

/* Each build's instances (functions: hipcc would otherwise also place a
 * constant table on the device). */
const struct ms_gpu_rt *ms_gsim_rt(void);
const struct ms_gpu_kern *ms_gsim_kern(void);
const struct ms_gpu_rt *ms_ghip_rt(void);
const struct ms_gpu_kern *ms_ghip_kern(void);
const struct ms_gpu_rt *ms_gcuda_rt(void);
const struct ms_gpu_kern *ms_gcuda_kern(void);

/* The model's wavefront width (32 or 64; MOESERVE_SIM_WAVE). */
void ms_gpu_sim_set_wave(int wave);
/* The gfx target whose matrix instructions the model has (gfx90a, gfx942,
 * gfx950; MOESERVE_SIM_ARCH), NULL or "" for none. */
void ms_gpu_sim_set_arch(const char *arch);
/* MS_GPU_MMA_* of a gfx target name ("gfx942:sramecc+:xnack-"). */
unsigned ms_gpu_mma_of_arch(const char *arch);

#ifdef __cplusplus
}
#endif

#endif
