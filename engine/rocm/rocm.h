/*
 * rocm.h: the ROCm backend's host side (inside engine/rocm only). One
 * struct ms_rocm per open backend: the device runtime and kernels it was
 * opened with (gpu.h: the HIP build, or the host model for rocm-sim), its
 * queue, the step's staged tables, and scratch that grows to the largest
 * step and is never freed per call.
 */
#ifndef MS_ROCM_H
#define MS_ROCM_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "gpu.h"
#include "pool.h"

/* A device buffer that grows, never shrinks. */
struct ms_dbuf {
	void *p;
	size_t cap;
};

/* A matrix's upload (ms_linear.bound and .owned): one device allocation
 * holding the descriptor, then every array it points to. */
struct ms_rocm_mat {
	struct ms_gpu_mat m;           /* host copy, device pointers */
	const struct ms_gpu_mat *dev;  /* the descriptor on the device */
	void *alloc;
	size_t bytes;
	struct ms_rocm *be;
	int mma;                       /* ms_gpu_mma_kind for prefill, or NONE */
};

/* A layer's experts as the MoE kernels read them: the descriptors of
 * every expert's gate_up and down side by side on the device. */
struct ms_rocm_layer {
	const struct ms_moe_w *key;
	uint64_t gen;                  /* be->gen when built */
	struct ms_gpu_mat *gate_up, *down;
	bool act_gu, act_dn;           /* some expert quantizes its input */
	int mma_gu, mma_dn;            /* every expert's MFMA kind, or NONE */
};

enum ms_rocm_buf {
	RB_TOK, RB_POS, RB_SEQ, RB_PAGES, RB_ROWS, RB_ROPE, RB_PART,
	RB_XQ, RB_XS, RB_SEL, RB_W, RB_OFF, RB_LIST, RB_ACT, RB_Y,
	RB_COUNT,
};

/* Which product kernel runs (MOESERVE_ROCM_PRODUCT): by the number of
 * inputs (gemv, or for many the matrix's MFMA kind where it has one, else
 * gemm), or always one (to compare or time them; gemv and gemm give the
 * same bits; mma: the tiled path on every matrix that has a kind). */
enum ms_rocm_product { MS_ROCM_AUTO, MS_ROCM_GEMV, MS_ROCM_GEMM, MS_ROCM_MMA };

struct ms_rocm {
	struct ms_backend base;
	const struct ms_gpu_rt *rt;
	const struct ms_gpu_kern *k;
	struct ms_gpu_ctx ctx;
	struct ms_gpu_info info;
	struct ms_err kerr;            /* the first failure of an op that cannot
					* return one; reported by the next that can */
	struct ms_pool pool;           /* host threads for load-time uploads */
	const struct ms_step *step;
	int64_t n_layers, n_blocks;    /* the staged page tables' shape */
	struct ms_dbuf buf[RB_COUNT];
	void *host_stage;              /* host staging for the step's tables */
	size_t host_stage_cap;
	struct ms_rocm_layer *layers;
	int n_layer_cache;
	uint64_t gen;                  /* bumped when a matrix is freed */
	enum ms_rocm_product product;
	bool exact;                    /* --exact: no MFMA (fp32 products only) */
	char kernels[192];
};

/* Make buf b hold bytes; -ENOMEM (message in be->kerr style err). */
int ms_rocm_reserve(struct ms_rocm *be, enum ms_rocm_buf b, size_t bytes, struct ms_err *err);
void *ms_rocm_host_stage(struct ms_rocm *be, size_t bytes);

/* Record the first failure of a void operation. */
void ms_rocm_fail(struct ms_rocm *be, int rc);

static inline struct ms_rocm *ms_rocm_of(struct ms_backend *b)
{
	return (struct ms_rocm *)((char *)b - offsetof(struct ms_rocm, base));
}

/* Upload l's rows (rocm-mat.c) and name its kernel: an embedding table
 * (gathered, no product), or a matrix with its MFMA kind for prefill. */
int ms_rocm_mat_upload(struct ms_rocm *be, struct ms_linear *l, bool table, char *why,
		       size_t len, struct ms_err *err);
/* The experts of one layer, uploaded once per load. */
const struct ms_rocm_layer *ms_rocm_layer(struct ms_rocm *be, const struct ms_moe_w *w,
					  struct ms_err *err);
void ms_rocm_layers_free(struct ms_rocm *be);

/* The forward pass's operations (rocm-ops.c). */
extern const struct ms_backend_ops ms_rocm_ops_dev, ms_rocm_ops_sim;
int ms_rocm_step_begin(struct ms_backend *b, const struct ms_step *s, struct ms_err *err);
void ms_rocm_embed(struct ms_backend *b, const struct ms_linear *table, float *x);
int ms_rocm_linear(struct ms_backend *b, int m, const struct ms_linear *const *l, const float *x,
		   int64_t n, float *const *y, struct ms_err *err);
void ms_rocm_rmsnorm(struct ms_backend *b, float *y, const float *x, const int64_t *rows,
		     int64_t n, const float *w, int64_t H, double eps);
void ms_rocm_rope_table(struct ms_backend *b, const double *inv_freq, float scale, int64_t d,
			float *table);
void ms_rocm_rope(struct ms_backend *b, const float *table, float *x, int64_t n_heads, int64_t d);
void ms_rocm_add(struct ms_backend *b, float *y, const float *x, int64_t count);
void ms_rocm_kv_write(struct ms_backend *b, int layer, const float *k, const float *v);
int ms_rocm_attention(struct ms_backend *b, const struct ms_attn_desc *a, struct ms_err *err);
int ms_rocm_moe(struct ms_backend *b, const struct ms_moe_desc *d, struct ms_err *err);

#endif
