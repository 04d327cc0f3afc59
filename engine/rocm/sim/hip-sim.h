/*
 * hip-sim.h: a model of the HIP execution model on the host, so that the
 * ROCm backend's kernel logic runs and is tested on machines without a GPU
 * (as engine/cpu/amx-sim.h does for AMX tiles). ../shared/docs/kernels.md
 * §9.6 is the specification it follows.
 *
 * A launch runs grid.x * grid.y * grid.z blocks one after another; a
 * block's threads are fibers (ucontext) that run until they reach a
 * barrier (__syncthreads) or a cross-lane operation (shuffle, ballot),
 * which is a barrier among the lanes of one wavefront that also exchanges
 * one value per lane. The wavefront width is a launch parameter (64 as on
 * CDNA, 32 as on NVIDIA), so the same kernel is checked at both. A thread
 * that ends while others wait at a barrier, or lanes of one wavefront that
 * wait at different operations, is divergence: undefined on hardware, an
 * error here (the launch fails and says which).
 */
#ifndef MS_HIP_SIM_H
#define MS_HIP_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ms_sim_dim {
	unsigned x, y, z;
};

typedef void (*ms_sim_kernel)(void *args);

/* Run kernel over grid x block threads with shared_bytes of __shared__
 * memory per block (zeroed per block) and wavefronts of wave lanes (32 or
 * 64). 0, or -EINVAL (a bad shape) / -ENOMEM / -EDEADLK (divergence) with
 * a message. */
int ms_sim_launch(struct ms_sim_dim grid, struct ms_sim_dim block, size_t shared_bytes,
		  int wave, ms_sim_kernel kernel, void *args, struct ms_err *err);

/* Inside a kernel: the built-ins. */
struct ms_sim_dim ms_sim_thread_idx(void);
struct ms_sim_dim ms_sim_block_idx(void);
struct ms_sim_dim ms_sim_block_dim(void);
struct ms_sim_dim ms_sim_grid_dim(void);
int ms_sim_wave_size(void);
void *ms_sim_shared(void);
void ms_sim_syncthreads(void);

/* Cross-lane, within segments of `width` lanes (a power of two <= the
 * wavefront): HIP's __shfl, __shfl_xor, __shfl_down on a value's bits (a
 * source lane outside the segment or beyond the live lanes gives the
 * caller's own value, as HIP's do), and __ballot (bit i: lane i's
 * predicate). The typed forms below are what kernels call. */
uint64_t ms_sim_shfl_u64(uint64_t v, int src, int width);
uint64_t ms_sim_shfl_xor_u64(uint64_t v, int mask, int width);
uint64_t ms_sim_shfl_down_u64(uint64_t v, unsigned delta, int width);
uint64_t ms_sim_ballot(int pred);

/* A wavefront-wide operation (the matrix instructions: sim/sim-mma.c).
 * Every lane of a whole wavefront (all live, as MFMA needs EXEC full)
 * passes its own record; once all have, fn runs once over the records in
 * lane order, then every lane goes on. Lanes at different fns, or fewer
 * than a whole wavefront, are divergence. */
typedef void (*ms_sim_wave_fn)(void *const *lanes, int n);
void ms_sim_wave_op(ms_sim_wave_fn fn, void *mine);

static inline uint64_t ms_sim_f2u(float v)
{
	union { float f; uint32_t u; } c = {.f = v};
	return c.u;
}

static inline float ms_sim_u2f(uint64_t v)
{
	union { float f; uint32_t u; } c = {.u = (uint32_t)v};
	return c.f;
}

static inline float ms_sim_shfl_f(float v, int src, int width)
{
	return ms_sim_u2f(ms_sim_shfl_u64(ms_sim_f2u(v), src, width));
}

static inline float ms_sim_shfl_xor_f(float v, int mask, int width)
{
	return ms_sim_u2f(ms_sim_shfl_xor_u64(ms_sim_f2u(v), mask, width));
}

static inline float ms_sim_shfl_down_f(float v, unsigned delta, int width)
{
	return ms_sim_u2f(ms_sim_shfl_down_u64(ms_sim_f2u(v), delta, width));
}

static inline int ms_sim_shfl_i(int v, int src, int width)
{
	return (int)(uint32_t)ms_sim_shfl_u64((uint32_t)v, src, width);
}

static inline int ms_sim_shfl_xor_i(int v, int mask, int width)
{
	return (int)(uint32_t)ms_sim_shfl_xor_u64((uint32_t)v, mask, width);
}

/* Atomics: fibers of a launch switch only at barriers and cross-lane
 * operations, and blocks run one at a time, so a read-modify-write is
 * already indivisible; these return the old value as HIP's do. */
static inline float ms_sim_atomic_add_f(float *p, float v)
{
	float old = *p;
	*p = old + v;
	return old;
}

static inline int ms_sim_atomic_add_i(int *p, int v)
{
	int old = *p;
	*p = old + v;
	return old;
}

static inline int ms_sim_atomic_max_i(int *p, int v)
{
	int old = *p;
	*p = old > v ? old : v;
	return old;
}

#ifdef __cplusplus
}
#endif

#endif
