/*
 * rt-sim.c: the device runtime of the host model (gpu.h's ms_gpu_rt_sim):
 * "device" memory is host memory that only the backend's operations touch,
 * copies are memcpy, and launches run on sim/hip-sim.h's fibers at the
 * wavefront width MOESERVE_SIM_WAVE says (64 by default, as on CDNA),
 * with the matrix instructions of MOESERVE_SIM_ARCH's target (none by
 * default).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "hip-sim.h"
#include "sim-mma.h"

#define MS_GPU_SIM 1
#include "gpu-compat.h"

static int sim_wave;
static char sim_arch[16];

/* The model's "device memory": the host's available memory, or
 * MOESERVE_SIM_MEMORY bytes (tests of the size check). */
static void sim_memory(size_t *free_b, size_t *total_b)
{
	const char *env = getenv("MOESERVE_SIM_MEMORY");
	if (env && *env) {
		*free_b = *total_b = (size_t)strtoull(env, NULL, 10);
		return;
	}
	long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
	long pg = sysconf(_SC_PAGESIZE);
	*total_b = pages > 0 ? (size_t)pages * (size_t)pg : 0;
	*free_b = avail > 0 ? (size_t)avail * (size_t)pg : 0;
}

void ms_gpu_sim_set_wave(int wave)
{
	sim_wave = wave;
}

void ms_gpu_sim_set_arch(const char *arch)
{
	snprintf(sim_arch, sizeof(sim_arch), "%s", arch ? arch : "");
}

/* MOESERVE_SIM_ARCH (or ms_gpu_sim_set_arch): a gfx target whose matrix
 * instructions the model then has (sim/sim-mma.h), at 64 lanes as there. */
static int sim_arch_of(int wave, char *arch, size_t len, struct ms_err *err)
{
	const char *env = getenv("MOESERVE_SIM_ARCH");
	const char *a = sim_arch[0] ? sim_arch : (env ? env : "");
	if (!*a) {
		snprintf(arch, len, "sim-wave%d", wave);
		return 0;
	}
	if (!ms_gpu_mma_of_arch(a))
		return ms_err_set(err, -EINVAL, "MOESERVE_SIM_ARCH=%s: gfx90a, gfx940, gfx941, "
				  "gfx942 or gfx950 (or empty: no matrix instructions)", a);
	if (wave != 64)
		return ms_err_set(err, -EINVAL, "MOESERVE_SIM_ARCH=%s with a %d-lane wavefront: "
				  "gfx targets have 64", a, wave);
	snprintf(arch, len, "%s (sim)", a);
	ms_sim_mma_set_fnuz((ms_gpu_mma_of_arch(a) & MS_GPU_MMA_FP8_FNUZ) != 0);
	return 0;
}

static int sim_open(int device, struct ms_gpu_ctx *ctx, struct ms_gpu_info *info,
		    struct ms_err *err)
{
	if (device != 0)
		return ms_err_set(err, -ENODEV, "no ROCm/HIP device %d (the host model has one, 0)",
				  device);
	int wave = sim_wave;
	const char *env = getenv("MOESERVE_SIM_WAVE");
	if (!wave && env)
		wave = atoi(env);
	if (!wave)
		wave = 64;
	if (wave != 32 && wave != 64)
		return ms_err_set(err, -EINVAL, "MOESERVE_SIM_WAVE=%s: 32 or 64", env ? env : "?");
	memset(ctx, 0, sizeof(*ctx));
	memset(info, 0, sizeof(*info));
	int rc = sim_arch_of(wave, info->arch, sizeof(info->arch), err);
	if (rc)
		return rc;
	ctx->wave = wave;
	ctx->n_cu = 1;
	snprintf(info->name, sizeof(info->name), "host model of the HIP execution model");
	info->wave = wave;
	info->n_cu = 1;
	sim_memory(&info->mem_free, &info->mem_total);
	return 0;
}

static void sim_close(struct ms_gpu_ctx *ctx)
{
	(void)ctx;
}

static void *sim_alloc(size_t bytes)
{
	size_t n = (bytes + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, n ? n : 64);
	if (p)
		memset(p, 0, n ? n : 64);
	return p;
}

static void sim_free(void *p)
{
	free(p);
}

static int sim_copy(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes)
{
	(void)c;
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

static int sim_mem_info(size_t *free_b, size_t *total_b)
{
	sim_memory(free_b, total_b);
	return 0;
}

const struct ms_gpu_rt *ms_gsim_rt(void)
{
	static const struct ms_gpu_rt t = {
		.name = "sim",
		.open = sim_open,
		.close = sim_close,
		.alloc = sim_alloc,
		.free = sim_free,
		.h2d = sim_copy,
		.d2d = sim_copy,
		.d2h = sim_copy,
		.mem_info = sim_mem_info,
	};
	return &t;
}

int ms_gsim_launch(const struct ms_gpu_ctx *c, gpu_dim grid, gpu_dim block, size_t shared,
		   void (*kernel)(void *), const void *args, const char *what)
{
	struct ms_err e = {0};
	int rc = ms_sim_launch(grid, block, shared, c->wave, kernel, (void *)args, &e);
	if (rc)
		return ms_err_set(c->err, rc, "%s: %s", what, e.msg);
	return 0;
}
