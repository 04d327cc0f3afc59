/*
 * gpu-tile.h: how the tiled product kernels (kern-gemm.cu, kern-mma.cu)
 * number their input tiles over a struct ms_gpu_gemv: each matrix's list
 * positions in tiles of bn, matrix after matrix (an empty matrix has
 * none), up to a bound the host knows without reading off. Included by
 * kernel sources only, after gpu-compat.h.
 */
#ifndef MS_GPU_TILE_H
#define MS_GPU_TILE_H

#include "gpu.h"

/* The input tile `slot` stands for: matrix *e, list positions [*q0, *q1);
 * false past the last tile. */
GPU_DEV bool gpu_tile_of(const struct ms_gpu_gemv *g, int64_t slot, int64_t bn, int64_t *e,
			 int64_t *q0, int64_t *q1)
{
	for (int64_t i = 0; i < (g->off ? g->n_mats : 1); i++) {
		int64_t p0 = g->off ? g->off[i] : 0, p1 = g->off ? g->off[i + 1] : g->n;
		int64_t tiles = (p1 - p0 + bn - 1) / bn;
		if (slot < tiles) {
			*e = i;
			*q0 = p0 + slot * bn;
			*q1 = *q0 + bn < p1 ? *q0 + bn : p1;
			return true;
		}
		slot -= tiles;
	}
	return false;
}

/* The input id at list position q. */
GPU_DEV int64_t gpu_input_id(const struct ms_gpu_gemv *g, int64_t q)
{
	return g->list ? g->list[q] : q;
}

/* Grid rows enough for every input tile of g: each matrix's last may be
 * partial, at most one more per matrix. */
static inline int64_t gpu_tile_bound(const struct ms_gpu_gemv *g, int64_t bn)
{
	return (g->n + bn - 1) / bn + (g->off ? g->n_mats : 0);
}

#endif
