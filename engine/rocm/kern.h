/*
 * kern.h: what the kernel sources share: the launchers' names (one set per
 * build, GPU_NS) and the block shapes. Included after gpu-compat.h.
 */
#ifndef MS_GPU_KERN_H
#define MS_GPU_KERN_H

#include "gpu.h"

/* Threads per block of the row kernels: a power of two, a whole number of
 * wavefronts at either width. */
#define KB 256

GPU_API int GPU_NS(embed)(const struct ms_gpu_ctx *c, const struct ms_gpu_mat *table,
			  const int32_t *tok, int64_t n, float *x);
GPU_API int GPU_NS(rmsnorm)(const struct ms_gpu_ctx *c, float *y, const float *x,
			    const int64_t *rows, int64_t n, const float *w, int64_t H, float eps);
GPU_API int GPU_NS(rope)(const struct ms_gpu_ctx *c, const float *table, float *x, int64_t n,
			 int64_t n_heads, int64_t d);
GPU_API int GPU_NS(add)(const struct ms_gpu_ctx *c, float *y, const float *x, int64_t count);
GPU_API int GPU_NS(copy)(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes);
GPU_API int GPU_NS(kv_write)(const struct ms_gpu_ctx *c, const struct ms_gpu_attn *a, void *pk,
			     void *pv, const float *k, const float *v);
GPU_API int GPU_NS(attention)(const struct ms_gpu_ctx *c, const struct ms_gpu_attn *a);
GPU_API int GPU_NS(actq)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g, float *xq,
			 float *xs);
GPU_API int GPU_NS(gemv)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g);
GPU_API int GPU_NS(gemm)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g);
GPU_API int GPU_NS(mma)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g, int kind);
GPU_API int GPU_NS(route)(const struct ms_gpu_ctx *c, const float *logits, int64_t n, int64_t E,
			  int64_t k, int32_t *sel, float *w, int32_t *off, int32_t *list);
GPU_API int GPU_NS(combine)(const struct ms_gpu_ctx *c, float *x, const float *y, const float *w,
			    int64_t n, int64_t k, int64_t H);

/* Grid sizes stay within what every target takes in x. */
static inline unsigned kern_blocks(int64_t items, int64_t per)
{
	int64_t b = (items + per - 1) / per;
	return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

#endif
