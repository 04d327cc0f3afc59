/*
 * kern-moe.cu: the products' decode kernel (dense projections and experts
 * alike: kern-gemm.cu is their prefill kernel), the activation quantizers
 * before them, and the MoE's routing and combine.
 *
 * gemv: one wavefront per output row (a gate/up pair with glu); its lanes
 * take 32-column chunks of the row in turn (an MXFP4 chunk is 16 bytes and
 * one scale: one vector load), decode them in registers and form each
 * chunk's sum for up to TT inputs at once. The chunk sums then meet in
 * chunk order (each lane leaves its own in __shared__ memory, one lane per
 * input adds them up): gpu-prod.h's order, which k_gemm keeps too, so an
 * output's bits do not depend on the kernel, the batch, or the wavefront
 * width. Grid: (row blocks, matrices); all of a layer's experts in one
 * launch, an expert without inputs leaves at once.
 */
#include "gpu-compat.h"
#include "gpu-formats.h"
#include "gpu-prod.h"
#include "kern.h"

#define TT 8 /* inputs per pass over the weights */

/* s[j][t] = row (r + j) chunk . input t's chunk, j < nr rows. */
GPU_DEV void gemv_chunk(const struct ms_gpu_mat *m, int64_t r, int nr, int64_t k0, int nk,
			const float *const *xr, int tn, float s[2][TT])
{
	for (int j = 0; j < nr; j++) {
		float w[GPU_CHUNK];
		gpu_decode(m, r + j, k0, nk, w);
		for (int t = 0; t < tn; t++)
			s[j][t] = gpu_chunk_dot(w, xr[t] + k0, nk);
	}
}

/* One wavefront's row unit u over inputs [p0, p1) of matrix m; live false:
 * a wavefront past the last unit, which still meets the block's barriers.
 * part: the wavefront's [warpSize][2 * TT] of chunk sums. */
GPU_DEV void gemv_unit(const struct ms_gpu_gemv *g, const struct ms_gpu_mat *m, int64_t u,
		       bool live, int64_t p0, int64_t p1, float (*part)[2 * TT])
{
	int nr = g->glu ? 2 : 1, lane = (int)(threadIdx.x % warpSize), W = warpSize;
	int64_t r = u * nr, K = g->cols, nc = (K + GPU_CHUNK - 1) / GPU_CHUNK;
	for (int64_t pt = p0; pt < p1; pt += TT) {
		int tn = p1 - pt < TT ? (int)(p1 - pt) : TT;
		const float *xr[TT];
		for (int t = 0; t < tn; t++) {
			int64_t id = g->list ? g->list[pt + t] : pt + t;
			xr[t] = g->x + id / g->xdiv * g->ldx;
		}
		float acc0 = 0, acc1 = 0; /* lane t < tn: input t's, rows r and r + 1 */
		for (int64_t c0 = 0; c0 < nc; c0 += W) {
			int64_t k0 = (c0 + lane) * GPU_CHUNK;
			if (live && c0 + lane < nc)
				gemv_chunk(m, r, nr, k0, K - k0 < GPU_CHUNK ? (int)(K - k0) : GPU_CHUNK,
					   xr, tn, (float(*)[TT])part[lane]);
			__syncthreads();
			int have = nc - c0 < W ? (int)(nc - c0) : W;
			for (int l = 0; live && lane < tn && l < have; l++) {
				acc0 += part[l][lane];
				acc1 += nr > 1 ? part[l][TT + lane] : 0.0f;
			}
			__syncthreads();
		}
		if (!live || lane >= tn)
			continue;
		int64_t id = g->list ? g->list[pt + lane] : pt + lane;
		float xs = g->xs ? g->xs[id] : 1.0f, *y = g->y + id * g->ldy;
		float s0 = gpu_prod_out(acc0, xs, m->bias, r);
		if (g->glu)
			y[u] = gpu_swiglu(s0, gpu_prod_out(acc1, xs, m->bias, r + 1), g->limit, g->alpha);
		else
			y[r] = s0;
	}
}

/* Every wavefront of a block takes the same number of turns (the barriers
 * in gemv_unit), the last ones idle past the matrix's units. */
GPU_KERNEL(k_gemv, struct ms_gpu_gemv)
{
	GPU_SHARED float part[KB][2 * TT];
	int64_t e = blockIdx.y;
	int64_t p0 = a.off ? a.off[e] : 0, p1 = a.off ? a.off[e + 1] : a.n;
	if (p0 >= p1)
		return;
	const struct ms_gpu_mat *m = &a.mats[e];
	int waves = (int)(blockDim.x / warpSize), wave = (int)(threadIdx.x / warpSize);
	int64_t units = a.glu ? m->rows / 2 : m->rows;
	for (int64_t u0 = (int64_t)blockIdx.x * waves; u0 < units; u0 += (int64_t)gridDim.x * waves)
		gemv_unit(&a, m, u0 + wave, u0 + wave < units, p0, p1, part + wave * warpSize);
}

GPU_API int GPU_NS(gemv)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g)
{
	int waves = KB / c->wave;
	int64_t units = g->glu ? g->rows / 2 : g->rows;
	return GPU_LAUNCH(c, k_gemv, GPU_DIM(kern_blocks(units, waves), g->n_mats, 1),
			  GPU_DIM(KB, 1, 1), 0, *g);
}

/* ---- activation quantization ---- */

struct actq_args {
	struct ms_gpu_gemv g;
	float *xq, *xs;
};

/* One block per (matrix, input): the row quantized as engine/actq.c does. */
GPU_KERNEL(k_actq, struct actq_args)
{
	GPU_SHARED float red[KB];
	const struct ms_gpu_gemv *g = &a.g;
	int64_t e = blockIdx.y, K = g->cols;
	int64_t p0 = g->off ? g->off[e] : 0, p1 = g->off ? g->off[e + 1] : g->n;
	const struct ms_gpu_mat *m = &g->mats[e];
	int tid = (int)threadIdx.x;
	for (int64_t p = p0 + blockIdx.x; p < p1; p += gridDim.x) {
		int64_t id = g->list ? g->list[p] : p;
		const float *x = g->x + id / g->xdiv * g->ldx;
		float *o = a.xq + id * K;
		float s = m->act == MS_GPU_ACT_FP8_STATIC ? m->act_scale : 1.0f;
		if (m->act == MS_GPU_ACT_FP8_DYNAMIC) {
			float amax = 0;
			for (int64_t k = tid; k < K; k += KB)
				amax = fmaxf(amax, fabsf(x[k]));
			red[tid] = amax;
			__syncthreads();
			for (int h = KB / 2; h > 0; h >>= 1) {
				if (tid < h)
					red[tid] = fmaxf(red[tid], red[tid + h]);
				__syncthreads();
			}
			s = red[0] > 0 ? red[0] / 448.0f : 1.0f;
			__syncthreads();
		}
		if (m->act == MS_GPU_ACT_MXFP4) {
			for (int64_t k0 = (int64_t)tid * 32; k0 < K; k0 += (int64_t)KB * 32) {
				int nk = K - k0 < 32 ? (int)(K - k0) : 32;
				float v[32], amax = 0;
				for (int i = 0; i < nk; i++)
					amax = fmaxf(amax, fabsf(v[i] = x[k0 + i]));
				int ex = amax == 0.0f ? 0 : gpu_mx_exp(amax);
				for (int i = 0; i < nk; i++)
					o[k0 + i] = amax == 0.0f ? v[i]
						  : ldexpf(gpu_e2m1_round(ldexpf(v[i], -ex)), ex);
			}
		} else if (m->act == MS_GPU_ACT_NONE) {
			for (int64_t k = tid; k < K; k += KB)
				o[k] = x[k];
		} else {
			for (int64_t k = tid; k < K; k += KB)
				o[k] = gpu_fp8_round(x[k] / s);
		}
		if (tid == 0)
			a.xs[id] = s;
		__syncthreads();
	}
}

GPU_API int GPU_NS(actq)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g, float *xq,
			 float *xs)
{
	struct actq_args a = {*g, xq, xs};
	/* blocks stride over a matrix's inputs: an expert's share is small */
	unsigned bx = kern_blocks(g->n < (g->off ? 64 : 1024) ? g->n : (g->off ? 64 : 1024), 1);
	return GPU_LAUNCH(c, k_actq, GPU_DIM(bx, g->n_mats, 1), GPU_DIM(KB, 1, 1), 0, a);
}

/* ---- routing ---- */

struct route_args {
	const float *logits;
	int64_t n, E, k;
	int32_t *sel, *off, *list;
	float *w;
};

/* One thread per token: top-k by repeated selection (largest first, ties
 * to the lower index), then the softmax over the k. */
GPU_KERNEL(k_route, struct route_args)
{
	for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < a.n;
	     t += (int64_t)gridDim.x * blockDim.x) {
		const float *l = a.logits + t * a.E;
		int32_t *sel = a.sel + t * a.k;
		float *w = a.w + t * a.k;
		for (int64_t j = 0; j < a.k; j++) {
			int32_t best = -1;
			for (int32_t e = 0; e < a.E; e++) {
				bool taken = false;
				for (int64_t i = 0; i < j; i++)
					taken |= sel[i] == e;
				if (!taken && (best < 0 || l[e] > l[best]))
					best = e;
			}
			sel[j] = best;
		}
		float mx = l[sel[0]], sum = 0;
		for (int64_t j = 0; j < a.k; j++)
			sum += (w[j] = expf(l[sel[j]] - mx));
		for (int64_t j = 0; j < a.k; j++)
			w[j] /= sum;
	}
}

/* One block: each expert's inputs (t * k + j) in token order. */
GPU_KERNEL(k_sort, struct route_args)
{
	int64_t nk = a.n * a.k;
	for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
		int32_t c = 0;
		for (int64_t p = 0; p < nk; p++)
			c += a.sel[p] == e;
		a.off[e + 1] = c;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		a.off[0] = 0;
		for (int64_t e = 0; e < a.E; e++)
			a.off[e + 1] += a.off[e];
	}
	__syncthreads();
	for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
		int32_t at = a.off[e];
		for (int64_t p = 0; p < nk; p++)
			if (a.sel[p] == e)
				a.list[at++] = (int32_t)p;
	}
}

GPU_API int GPU_NS(route)(const struct ms_gpu_ctx *c, const float *logits, int64_t n, int64_t E,
			  int64_t k, int32_t *sel, float *w, int32_t *off, int32_t *list)
{
	struct route_args a = {logits, n, E, k, sel, off, list, w};
	int rc = GPU_LAUNCH(c, k_route, GPU_DIM(kern_blocks(n, 64), 1, 1), GPU_DIM(64, 1, 1), 0, a);
	return rc ? rc : GPU_LAUNCH(c, k_sort, GPU_DIM(1, 1, 1), GPU_DIM(KB, 1, 1), 0, a);
}

/* ---- combine ---- */

struct combine_args {
	float *x;
	const float *y, *w;
	int64_t n, k, H;
};

GPU_KERNEL(k_combine, struct combine_args)
{
	int64_t total = a.n * a.H;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = e / a.H, h = e % a.H;
		float s = 0;
		for (int64_t j = 0; j < a.k; j++)
			s += a.w[t * a.k + j] * a.y[(t * a.k + j) * a.H + h];
		a.x[e] += s;
	}
}

GPU_API int GPU_NS(combine)(const struct ms_gpu_ctx *c, float *x, const float *y, const float *w,
			    int64_t n, int64_t k, int64_t H)
{
	struct combine_args a = {x, y, w, n, k, H};
	return GPU_LAUNCH(c, k_combine, GPU_DIM(kern_blocks(n * H, KB), 1, 1), GPU_DIM(KB, 1, 1), 0,
			  a);
}
