/*
 * kern-rows.cu: the row operations: embedding gather, RMSNorm, RoPE, the
 * residual add, and a copy (bench's bandwidth probe). Grid-stride loops,
 * so any size fits the grid.
 */
#include "gpu-compat.h"
#include "gpu-formats.h"
#include "kern.h"

/* ---- embedding ---- */

struct embed_args {
	struct ms_gpu_mat m;
	const int32_t *tok;
	int64_t n;
	float *x;
};

/* Block t gathers row tok[t]; threads take chunks of 32 columns. */
GPU_KERNEL(k_embed, struct embed_args)
{
	int64_t H = a.m.cols;
	for (int64_t t = blockIdx.x; t < a.n; t += gridDim.x) {
		float *o = a.x + t * H;
		for (int64_t k0 = (int64_t)threadIdx.x * 32; k0 < H; k0 += (int64_t)blockDim.x * 32) {
			float w[32];
			int nk = H - k0 < 32 ? (int)(H - k0) : 32;
			gpu_decode(&a.m, a.tok[t], k0, nk, w);
			for (int i = 0; i < nk; i++)
				o[k0 + i] = w[i];
		}
	}
}

GPU_API int GPU_NS(embed)(const struct ms_gpu_ctx *c, const struct ms_gpu_mat *table,
			  const int32_t *tok, int64_t n, float *x)
{
	struct embed_args a = {*table, tok, n, x};
	return GPU_LAUNCH(c, k_embed, GPU_DIM(kern_blocks(n, 1), 1, 1), GPU_DIM(64, 1, 1), 0, a);
}

/* ---- RMSNorm ---- */

struct rmsnorm_args {
	float *y;
	const float *x;
	const int64_t *rows;
	int64_t n, H;
	const float *w;
	double eps;
};

/* One block per row: the sum of squares in double (as the CPU's), reduced
 * as a fixed tree in shared memory. */
GPU_KERNEL(k_rmsnorm, struct rmsnorm_args)
{
	GPU_SHARED double red[KB];
	int tid = (int)threadIdx.x;
	for (int64_t r = blockIdx.x; r < a.n; r += gridDim.x) {
		const float *x = a.x + (a.rows ? a.rows[r] : r) * a.H;
		double s = 0;
		for (int64_t i = tid; i < a.H; i += KB)
			s += (double)x[i] * (double)x[i];
		red[tid] = s;
		__syncthreads();
		for (int h = KB / 2; h > 0; h >>= 1) {
			if (tid < h)
				red[tid] += red[tid + h];
			__syncthreads();
		}
		float rs = (float)(1.0 / sqrt(red[0] / (double)a.H + a.eps));
		float *y = a.y + r * a.H;
		for (int64_t i = tid; i < a.H; i += KB)
			y[i] = a.w[i] * (x[i] * rs);
		__syncthreads(); /* red[0] is read before the next row overwrites it */
	}
}

GPU_API int GPU_NS(rmsnorm)(const struct ms_gpu_ctx *c, float *y, const float *x,
			    const int64_t *rows, int64_t n, const float *w, int64_t H, float eps)
{
	struct rmsnorm_args a = {y, x, rows, n, H, w, (double)eps};
	return GPU_LAUNCH(c, k_rmsnorm, GPU_DIM(kern_blocks(n, 1), 1, 1), GPU_DIM(KB, 1, 1), 0, a);
}

/* ---- RoPE ---- */

struct rope_args {
	const float *table;
	float *x;
	int64_t n, n_heads, d;
};

/* Pairs (i, i + d/2) of every head of every token, one per thread. */
GPU_KERNEL(k_rope, struct rope_args)
{
	int64_t half = a.d / 2, per_tok = a.n_heads * half, total = a.n * per_tok;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = e / per_tok, h = e % per_tok / half, i = e % half;
		const float *cs = a.table + t * a.d, *sn = cs + half;
		float *lo = a.x + (t * a.n_heads + h) * a.d, *hi = lo + half;
		float p = lo[i], q = hi[i];
		lo[i] = p * cs[i] - q * sn[i];
		hi[i] = q * cs[i] + p * sn[i];
	}
}

GPU_API int GPU_NS(rope)(const struct ms_gpu_ctx *c, const float *table, float *x, int64_t n,
			 int64_t n_heads, int64_t d)
{
	struct rope_args a = {table, x, n, n_heads, d};
	int64_t items = n * n_heads * (d / 2);
	return GPU_LAUNCH(c, k_rope, GPU_DIM(kern_blocks(items, KB), 1, 1), GPU_DIM(KB, 1, 1), 0, a);
}

/* ---- add, copy ---- */

struct add_args {
	float *y;
	const float *x;
	int64_t count;
};

GPU_KERNEL(k_add, struct add_args)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count;
	     i += (int64_t)gridDim.x * blockDim.x)
		a.y[i] += a.x[i];
}

GPU_API int GPU_NS(add)(const struct ms_gpu_ctx *c, float *y, const float *x, int64_t count)
{
	struct add_args a = {y, x, count};
	return GPU_LAUNCH(c, k_add, GPU_DIM(kern_blocks(count, KB), 1, 1), GPU_DIM(KB, 1, 1), 0, a);
}

struct copy_args {
	uint4 *dst;
	const uint4 *src;
	int64_t count;
};

/* 16 bytes per thread per step (bytes a multiple of 16). */
GPU_KERNEL(k_copy, struct copy_args)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count;
	     i += (int64_t)gridDim.x * blockDim.x)
		a.dst[i] = a.src[i];
}

GPU_API int GPU_NS(copy)(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes)
{
	struct copy_args a = {(uint4 *)dst, (const uint4 *)src, (int64_t)(bytes / 16)};
	unsigned blocks = (unsigned)(c->n_cu > 0 ? 8 * c->n_cu : 1024);
	return GPU_LAUNCH(c, k_copy, GPU_DIM(blocks, 1, 1), GPU_DIM(KB, 1, 1), 0, a);
}
