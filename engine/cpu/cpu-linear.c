/*
 * cpu-linear.c: a projection as the CPU backend computes it (cpu.h,
 * ms_cpu_linear): the input's activation quantization, the gemm on the
 * pool, the row scale and the bias, with the quantized input in the
 * backend's scratch.
 */
#include "cpu.h"
#include "linear.h"

#include <stdbool.h>

/* The gemm's only failure: its prepared activations' scratch could not grow
 * (it has no ms_err of its own to say so). */
static int gemm_failed(int rc, int64_t n, struct ms_err *err)
{
	return ms_err_set(err, rc, "out of memory for the prepared activations of %lld tokens",
			  (long long)n);
}

/* One projection whose input is quantized first: y = (xq W^T) * rs + bias,
 * xq and rs in the backend's scratch (ms_cpu_gemm prepares xq in a slot of
 * its own, so both are live at once). */
static int linear_actq(struct ms_cpu *be, const struct ms_linear *l, const float *x, int64_t n,
		       float *y, struct ms_err *err)
{
	int64_t K = l->w.cols, N = l->w.rows;
	struct ms_scratch_plan plan = {0};
	size_t at_xq = ms_scratch_plan_add(&plan, (size_t)(n * K) * sizeof(float));
	size_t at_rs = ms_scratch_plan_add(&plan, (size_t)n * sizeof(float));
	int rc = ms_scratch_reserve(&be->scratch, MS_SCRATCH_LINEAR, plan.bytes, err);
	if (rc)
		return rc;
	float *xq = ms_scratch_at(&be->scratch, MS_SCRATCH_LINEAR, at_xq);
	float *rs = ms_scratch_at(&be->scratch, MS_SCRATCH_LINEAR, at_rs);
	ms_actq_apply(&l->act, x, K, n, K, xq, rs);
	if ((rc = ms_cpu_gemm(be, l->kernel, &l->w, xq, n, y, NULL)))
		return gemm_failed(rc, n, err);
	for (int64_t t = 0; t < n; t++)
		for (int64_t r = 0; r < N; r++)
			y[t * N + r] = y[t * N + r] * rs[t] + (l->bias ? l->bias[r] : 0.0f);
	return 0;
}

static int linear_one(struct ms_cpu *be, const struct ms_linear *l, const float *x, int64_t n,
		      float *y, struct ms_err *err)
{
	if (l->act.kind != MS_ACTQ_NONE)
		return linear_actq(be, l, x, n, y, err);
	int rc = ms_cpu_gemm(be, l->kernel, &l->w, x, n, y, l->bias);
	return rc ? gemm_failed(rc, n, err) : 0;
}

/* One pool run serves them all when they take x as it is, through one
 * kernel, at one width (attention's q, k and v). */
static bool linear_together(int m, const struct ms_linear *const *l)
{
	bool together = m >= 1 && m <= MS_GEMM_MULTI_MAX;
	for (int i = 0; together && i < m; i++)
		together = l[i]->act.kind == MS_ACTQ_NONE && l[i]->kernel == l[0]->kernel &&
			   l[i]->w.cols == l[0]->w.cols;
	return together;
}

int ms_cpu_linear(struct ms_cpu *be, int m, const struct ms_linear *const *l, const float *x,
		  int64_t n, float *const *y, struct ms_err *err)
{
	if (!linear_together(m, l)) {
		int rc = 0;
		for (int i = 0; i < m && !rc; i++)
			rc = linear_one(be, l[i], x, n, y[i], err);
		return rc;
	}
	const struct ms_wmat *w[MS_GEMM_MULTI_MAX];
	const float *b[MS_GEMM_MULTI_MAX];
	for (int i = 0; i < m; i++)
		w[i] = &l[i]->w, b[i] = l[i]->bias;
	int rc = ms_cpu_gemm_multi(be, l[0]->kernel, m, w, x, n, y, b);
	return rc ? gemm_failed(rc, n, err) : 0;
}
