/*
 * benchutil.h: timing shared by the `--bench` modes of the kernel tests
 * that cannot share testutil.h (test-amx has its own random stream).
 */
#ifndef MS_TESTS_BENCHUTIL_H
#define MS_TESTS_BENCHUTIL_H

#include "cpu.h"
#include "ms-clock.h"

/* Best wall time of `reps` ms_cpu_gemm calls, the first `warmup` of
 * them not counted: the VM shares its cores, so the best call is the one
 * that ran alone. */
static inline double bu_best_gemm_s(struct ms_cpu *be, const struct ms_kernel *k,
				    const struct ms_wmat *w, const float *x, int64_t n, float *y,
				    int reps, int warmup)
{
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = ms_now_s();
		ms_cpu_gemm(be, k, w, x, n, y, NULL);
		double t = ms_now_s() - t0;
		if (r >= warmup && t < best)
			best = t;
	}
	return best;
}

#endif
