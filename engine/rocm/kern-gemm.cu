/*
 * kern-gemm.cu: the products' prefill kernel, a grouped GEMM over the
 * same struct ms_gpu_gemv as k_gemv (kern-moe.cu), which it replaces when
 * a matrix has many inputs (rocm-ops.c). Its outputs are k_gemv's bits:
 * both keep gpu-prod.h's order (per output, 32-column chunks in turn,
 * each chunk's products in column order, fma throughout), so which of the
 * two runs, and what else shares a tile, changes no result.
 *
 * A block computes a tile of GM_BM weight rows (GM_BM / 2 gate/up pairs
 * with glu) by GM_BN inputs of one matrix: per slab of one chunk, half its
 * threads decode the tile's rows (gpu_decode, every format) into
 * __shared__ memory as fp32, exact, the other half copy the inputs'
 * columns beside them; then each thread forms its GM_TM x GM_TN outputs'
 * chunk sums from there and adds them to its accumulators. Weights are
 * read once per GM_BN inputs (k_gemv: once per TT = 8).
 *
 * Grid: x the row tiles, y the input tiles, numbered matrix by matrix
 * (each matrix's inputs in tiles of GM_BN, an empty one has none) up to a
 * bound the host knows without reading off; blocks past the last tile
 * leave at once. Both loops stride, so any size fits the grid.
 *
 * No MFMA here: the matrix instructions take bf16 (or fp8) operands and
 * sum inside the instruction in an order of their own, which gives up
 * exactness and k_gemv's bits (kern-mma.cu, chosen where that is wanted);
 * this is the portable fp32 path, the same code on AMD, NVIDIA and the
 * host model.
 */
#include "gpu-compat.h"
#include "gpu-formats.h"
#include "gpu-prod.h"
#include "gpu-tile.h"
#include "kern.h"

#define GM_BM 128             /* weight rows per tile */
#define GM_BN 32              /* inputs per tile */
#define GM_BK GPU_CHUNK       /* columns per slab: one chunk */
#define GM_TM 8               /* a thread's rows: four whole gate/up pairs */
#define GM_TN 2               /* a thread's inputs, GM_BN / GM_TN apart */
#define GM_LD (GM_BK + 1)     /* shared row stride: a column falls on distinct banks */
#define GM_TC (GM_BN / GM_TN) /* threads across the inputs */

/* Loops over a thread's outputs unrolled on the device: acc indexed by
 * constants stays in registers (nvcc would not unroll the epilogue's on
 * its own, and keep acc in local memory). */
#if defined(MS_GPU_SIM)
#define GM_UNROLL
#else
#define GM_UNROLL _Pragma("unroll")
#endif

#if (GM_BM / GM_TM) * GM_TC != KB || GM_TM % 2
#error "a tile is KB threads of GM_TM x GM_TN outputs, GM_TM even (glu pairs)"
#endif

/* Columns [k0, k0 + nk) of the tile into shared memory: GM_BM threads
 * decode a row's chunk each (gpu_decode: a whole aligned chunk through
 * vector loads; rows past m's are zeros), the others copy the inputs
 * q0 .. q1 in pieces of 8 columns (past q1 zeros). */
GPU_DEV void gemm_stage(const struct ms_gpu_gemv *g, const struct ms_gpu_mat *m, int64_t r0,
			int64_t q0, int64_t q1, int64_t k0, int nk, float (*ws)[GM_LD],
			float (*xs)[GM_LD])
{
	const int pieces = GM_BK / 8;
	for (int i = (int)threadIdx.x; i < GM_BM + GM_BN * pieces; i += (int)blockDim.x) {
		if (i < GM_BM) {
			if (r0 + i < m->rows)
				gpu_decode(m, r0 + i, k0, nk, ws[i]);
			else
				for (int k = 0; k < nk; k++)
					ws[i][k] = 0;
			continue;
		}
		int q = (i - GM_BM) / pieces, c = (i - GM_BM) % pieces * 8;
		const float *x = NULL;
		if (q0 + q < q1)
			x = g->x + gpu_input_id(g, q0 + q) / g->xdiv * g->ldx + k0;
		for (int k = c; k < c + 8 && k < nk; k++)
			xs[q][k] = x ? x[k] : 0.0f;
	}
}

/* acc += this chunk's sums for the thread's rows tr * GM_TM + j and
 * inputs tc + GM_TC * i: each sum from zero over the columns in order. */
GPU_DEV void gemm_chunk(float acc[GM_TM][GM_TN], float (*ws)[GM_LD], float (*xs)[GM_LD],
			int tr, int tc, int nk)
{
	float s[GM_TM][GM_TN];
	for (int j = 0; j < GM_TM; j++)
		for (int i = 0; i < GM_TN; i++)
			s[j][i] = 0;
	for (int k = 0; k < nk; k++) {
		float w[GM_TM], x[GM_TN];
		for (int j = 0; j < GM_TM; j++)
			w[j] = ws[tr * GM_TM + j][k];
		for (int i = 0; i < GM_TN; i++)
			x[i] = xs[tc + GM_TC * i][k];
		for (int j = 0; j < GM_TM; j++)
			for (int i = 0; i < GM_TN; i++)
				s[j][i] = gpu_madd(w[j], x[i], s[j][i]);
	}
	for (int j = 0; j < GM_TM; j++)
		for (int i = 0; i < GM_TN; i++)
			acc[j][i] += s[j][i];
}

/* The thread's outputs: rows r .. r + GM_TM of m (pairs with glu) for the
 * tile's inputs tc + GM_TC * i, as k_gemv's epilogue. The rows go by
 * pairs either way: fixed indices keep acc in registers. */
GPU_DEV void gemm_store(const struct ms_gpu_gemv *g, const struct ms_gpu_mat *m, int64_t r,
			int64_t q0, int64_t q1, int tc, float acc[GM_TM][GM_TN])
{
	GM_UNROLL
	for (int i = 0; i < GM_TN; i++) {
		int64_t q = q0 + tc + GM_TC * i;
		if (q >= q1)
			continue;
		int64_t id = gpu_input_id(g, q);
		float xsc = g->xs ? g->xs[id] : 1.0f, *y = g->y + id * g->ldy;
		GM_UNROLL
		for (int j = 0; j < GM_TM; j += 2) {
			int64_t rj = r + j;
			if (g->glu && rj + 1 < m->rows) {
				float s0 = gpu_prod_out(acc[j][i], xsc, m->bias, rj);
				float s1 = gpu_prod_out(acc[j + 1][i], xsc, m->bias, rj + 1);
				y[rj / 2] = gpu_swiglu(s0, s1, g->limit, g->alpha);
			}
			if (!g->glu && rj < m->rows)
				y[rj] = gpu_prod_out(acc[j][i], xsc, m->bias, rj);
			if (!g->glu && rj + 1 < m->rows)
				y[rj + 1] = gpu_prod_out(acc[j + 1][i], xsc, m->bias, rj + 1);
		}
	}
}

/* One tile: rows [r0, r0 + GM_BM) of m by list positions [q0, q1). */
GPU_DEV void gemm_tile(const struct ms_gpu_gemv *g, const struct ms_gpu_mat *m, int64_t r0,
		       int64_t q0, int64_t q1, float (*ws)[GM_LD], float (*xs)[GM_LD])
{
	int tr = (int)threadIdx.x / GM_TC, tc = (int)threadIdx.x % GM_TC;
	float acc[GM_TM][GM_TN];
	for (int j = 0; j < GM_TM; j++)
		for (int i = 0; i < GM_TN; i++)
			acc[j][i] = 0;
	for (int64_t k0 = 0; k0 < g->cols; k0 += GM_BK) {
		int nk = g->cols - k0 < GM_BK ? (int)(g->cols - k0) : GM_BK;
		gemm_stage(g, m, r0, q0, q1, k0, nk, ws, xs);
		__syncthreads();
		gemm_chunk(acc, ws, xs, tr, tc, nk);
		__syncthreads(); /* before the next slab overwrites this one */
	}
	gemm_store(g, m, r0 + tr * GM_TM, q0, q1, tc, acc);
}

GPU_KERNEL(k_gemm, struct ms_gpu_gemv)
{
	GPU_SHARED float ws[GM_BM][GM_LD];
	GPU_SHARED float xs[GM_BN][GM_LD];
	int64_t e, q0, q1;
	for (int64_t slot = blockIdx.y; gpu_tile_of(&a, slot, GM_BN, &e, &q0, &q1); slot += gridDim.y) {
		const struct ms_gpu_mat *m = &a.mats[e];
		for (int64_t r0 = (int64_t)blockIdx.x * GM_BM; r0 < m->rows;
		     r0 += (int64_t)gridDim.x * GM_BM)
			gemm_tile(&a, m, r0, q0, q1, ws, xs);
	}
}

GPU_API int GPU_NS(gemm)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g)
{
	int64_t tiles = gpu_tile_bound(g, GM_BN);
	return GPU_LAUNCH(c, k_gemm, GPU_DIM(kern_blocks(g->rows, GM_BM), kern_blocks(tiles, 1), 1),
			  GPU_DIM(KB, 1, 1), 0, *g);
}
