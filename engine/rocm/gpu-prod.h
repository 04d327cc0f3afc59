/*
 * gpu-prod.h: the arithmetic every product kernel shares (k_gemv in
 * kern-moe.cu, k_gemm in kern-gemm.cu), so that a product's bits do not
 * depend on which kernel formed it. rocm-ops.c then picks a kernel by the
 * number of inputs freely, and a token's result is the same alone and in
 * any batch.
 *
 * The order, per output (row r, input id):
 *
 *   acc = 0
 *   for each chunk c of GPU_CHUNK columns, in increasing c:
 *       s = 0; s = fma(w[k], x[k], s) for the chunk's columns k in order
 *       acc = acc + s
 *   y = fma(acc, xs[id], bias[r])       (then SwiGLU with glu)
 *
 * with w the format's fp32 decode (gpu_decode) and x the input as stored:
 * nothing is rounded below fp32. The fma is written out (fmaf) rather
 * than left to the compilers' contraction, which may decide differently
 * in two kernels; the host model calls the same fmaf, so it computes the
 * device's bits for these kernels. Included by kernel sources only, after
 * gpu-compat.h.
 */
#ifndef MS_GPU_PROD_H
#define MS_GPU_PROD_H

#include <math.h>

/* Columns per chunk: an MXFP4 block (one E8M0 scale, 16 bytes). */
#define GPU_CHUNK 32

GPU_DEV float gpu_madd(float w, float x, float s)
{
	return fmaf(w, x, s);
}

/* Sum of w[i] * x[i], i < n, in i order: one chunk's s. */
GPU_DEV float gpu_chunk_dot(const float *w, const float *x, int n)
{
	float s = 0;
	for (int i = 0; i < n; i++)
		s = gpu_madd(w[i], x[i], s);
	return s;
}

/* An output from its accumulator: the input's scale, then the bias. */
GPU_DEV float gpu_prod_out(float acc, float xs, const float *bias, int64_t r)
{
	return fmaf(acc, xs, bias ? bias[r] : 0.0f);
}

/* GPT-OSS's clamped SwiGLU of a gate/up pair. */
GPU_DEV float gpu_swiglu(float g, float u, float limit, float alpha)
{
	g = fminf(g, limit);
	u = fmaxf(fminf(u, limit), -limit);
	return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

#endif
