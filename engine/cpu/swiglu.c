/*
 * swiglu.c: the experts' activation over a row of interleaved gate/up
 * outputs. Built in a library of its own at -O3 (engine/meson.build): at
 * the tree's -O2 GCC 12 leaves this loop scalar (its cheap cost model
 * takes no strided loads), and per element the row then costs a call to
 * expf; vectorized (SSE2 on any x86-64) with the branch-free
 * ms_swiglu_eval of moe.h it is several times faster. Same value per
 * element either way: the vector lanes run the same operations.
 */
#include "moe.h"

/* engine/meson.build builds this file three times: as is, and with AVX2 or
 * AVX-512 flags under these names (-ffp-contract=off each time: a fused
 * multiply-add would round differently). */
#ifndef MS_SWIGLU_NAME
#define MS_SWIGLU_NAME ms_swiglu_row
#endif

void MS_SWIGLU_NAME(struct ms_swiglu act, const float *restrict g, const float *restrict b,
		    int64_t n, float *restrict a)
{
	for (int64_t i = 0; i < n; i++)
		a[i] = ms_swiglu_eval(act, g[2 * i] + b[2 * i], g[2 * i + 1] + b[2 * i + 1]);
}
