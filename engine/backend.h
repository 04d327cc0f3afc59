/*
 * backend.h: the compute backend a model runs on, chosen once at start-up.
 *
 * It owns the worker pool and, for each weight format, the one kernel that
 * every matrix of that format will use. Kernel choice happens here, from the
 * CPU's features and the user's --kernels request, never in the hot path.
 */
#ifndef MS_BACKEND_H
#define MS_BACKEND_H

#include "kernels.h"
#include "ms-error.h"
#include "pool.h"

struct ms_backend {
	const char *name;          /* "cpu" */
	const char *isa;           /* kernel set in use: "ref", ... */
	unsigned cpu_flags;        /* what the CPU and OS support */
	struct ms_pool pool;
	const struct ms_kernel *kernels[MS_WFMT_COUNT];
	char reasons[MS_WFMT_COUNT][96];   /* why each kernel was chosen */
	int numa_nodes;            /* memory nodes (libnuma), 1 without NUMA */
	bool numa_interleave;      /* weights interleaved over the nodes */
};

enum ms_numa_mode {
	MS_NUMA_AUTO,        /* interleave when there is more than one node */
	MS_NUMA_OFF,
	MS_NUMA_INTERLEAVE,
};

/* kernels: "auto" (or NULL) picks the most specific set this CPU runs,
 * otherwise one of the names ms_backend_kernel_sets lists; an unknown or
 * unsupported name is an error. threads <= 0: one per available CPU. */
int ms_backend_init(struct ms_backend *be, const char *kernels, int threads, struct ms_err *err);

/* NUMA placement, chosen before the model loads (--numa). On one node every
 * mode is a plain pool. */
void ms_backend_set_numa(struct ms_backend *be, enum ms_numa_mode mode);

/* Around loading weights: with interleaving on, memory the loader allocates
 * and the checkpoint pages it maps are spread page by page over all nodes,
 * so every expert streams from every node's memory at once. */
void ms_backend_weights_begin(struct ms_backend *be);
void ms_backend_weights_end(struct ms_backend *be, void *const *maps, const size_t *sizes, int n);
void ms_backend_free(struct ms_backend *be);

/* The kernel for format f, or NULL when no kernel computes it. */
const struct ms_kernel *ms_backend_find_kernel(const struct ms_backend *be, enum ms_wfmt f);

/* Why the kernel for f was chosen (for inspect). */
const char *ms_backend_kernel_reason(const struct ms_backend *be, enum ms_wfmt f);

/* Detected CPU features (CPUID plus the OS's XCR0 state). */
unsigned ms_cpu_detect(void);

/* "avx2 fma avx512f ..." into buf. */
const char *ms_cpu_flags_str(unsigned flags, char *buf, size_t len);

/* Known kernel sets, comma-separated, for messages and --help. */
extern const char ms_backend_kernel_sets[];

/* y[n, rows] = x[n, cols] W^T (+ bias), rows split over the pool. */
void ms_backend_gemm(struct ms_backend *be, const struct ms_kernel *k, const struct ms_wmat *w,
		     const float *x, int64_t n, float *y, const float *bias);

#endif
