/*
 * gpu-mma.h: the matrix instructions kern-mma.cu uses, one wrapper each,
 * over a 32 x 32 fp32 accumulator (sim/sim-mma.h has their lane layout):
 *
 *   gpu_mma_bf16    v_mfma_f32_32x32x8_bf16 (gfx90a, gfx94x, gfx950)
 *   gpu_mma_fp8     v_mfma_f32_32x32x16_fp8_fp8 (gfx94x fnuz, gfx950 OCP)
 *   gpu_mma_f4f8    v_mfma_scale_f32_32x32x64_f8f6f4, A e2m1, B e4m3
 *                   (gfx950)
 *
 * On hipcc's device pass for a target with the instruction, the builtin;
 * in the host model, sim/sim-mma.c's model of it (a wavefront operation);
 * elsewhere (nvcc, a target without it, hipcc's host pass) a trap: the
 * launcher never starts kern-mma.cu's kernels where the device's
 * capabilities (gpu.h's MS_GPU_MMA_*) lack the instruction.
 * Included by kernel sources only, after gpu-compat.h.
 */
#ifndef MS_GPU_MMA_H
#define MS_GPU_MMA_H

#include <string.h>

#if defined(MS_GPU_SIM)
#include "sim-mma.h"
#endif

#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx940__) || \
	defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__))
#define GPU_HAVE_MFMA_BF16 1
#endif
#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx940__) || defined(__gfx941__) || \
	defined(__gfx942__) || defined(__gfx950__))
#define GPU_HAVE_MFMA_FP8 1
#endif
#if defined(__HIP_DEVICE_COMPILE__) && defined(__gfx950__)
#define GPU_HAVE_MFMA_F8F6F4 1
#endif

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#define GPU_TRAP() __trap()
#else
#define GPU_TRAP() __builtin_trap()
#endif

/* The accumulator: 16 fp32 per lane; GPU_ACC(a, i) its item i. */
#if defined(__HIP_PLATFORM_AMD__) && !defined(MS_GPU_SIM)
typedef float gpu_acc __attribute__((ext_vector_type(16)));
typedef short gpu_v4s __attribute__((ext_vector_type(4)));
typedef int gpu_v8i __attribute__((ext_vector_type(8)));
#define GPU_ACC(a, i) (a)[i]
#else
typedef struct { float v[16]; } gpu_acc;
#define GPU_ACC(a, i) (a).v[i]
#endif

GPU_DEV void gpu_acc_zero(gpu_acc *d)
{
	for (int i = 0; i < 16; i++)
		GPU_ACC(*d, i) = 0;
}

#if defined(MS_GPU_SIM)
GPU_DEV void gpu_mma_sim(gpu_acc *d, struct ms_sim_mma *r)
{
	memcpy(r->c, d->v, sizeof(r->c));
	ms_sim_wave_op(ms_sim_mma_run, r);
	memcpy(d->v, r->c, sizeof(r->c));
}
#endif

/* d += A B over 8 k: a, b four bf16 each, the lowest first. */
GPU_DEV void gpu_mma_bf16(gpu_acc *d, uint64_t a, uint64_t b)
{
#if defined(MS_GPU_SIM)
	struct ms_sim_mma r = {.op = MS_SIM_MMA_BF16};
	memcpy(r.a, &a, 8), memcpy(r.b, &b, 8);
	gpu_mma_sim(d, &r);
#elif defined(GPU_HAVE_MFMA_BF16)
	*d = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(__builtin_bit_cast(gpu_v4s, a),
						      __builtin_bit_cast(gpu_v4s, b), *d, 0, 0, 0);
#else
	(void)d, (void)a, (void)b;
	GPU_TRAP();
#endif
}

/* d += A B over 16 k: a, b eight e4m3 bytes each (the target's fp8). */
GPU_DEV void gpu_mma_fp8(gpu_acc *d, uint64_t a, uint64_t b)
{
#if defined(MS_GPU_SIM)
	struct ms_sim_mma r = {.op = MS_SIM_MMA_FP8};
	memcpy(r.a, &a, 8), memcpy(r.b, &b, 8);
	gpu_mma_sim(d, &r);
#elif defined(GPU_HAVE_MFMA_FP8)
	*d = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8((long)a, (long)b, *d, 0, 0, 0);
#else
	(void)d, (void)a, (void)b;
	GPU_TRAP();
#endif
}

/* d += (A 2^(sa-127)) (B 2^(sb-127)) over 64 k, a block of 32 per half
 * wavefront: a 32 e2m1 codes (16 bytes), b 32 OCP e4m3 bytes. */
GPU_DEV void gpu_mma_f4f8(gpu_acc *d, const uint32_t a[4], const uint32_t b[8], int sa, int sb)
{
#if defined(MS_GPU_SIM)
	struct ms_sim_mma r = {.op = MS_SIM_MMA_SCALED, .atype = MS_SIM_F8F6F4_E2M1,
			       .btype = MS_SIM_F8F6F4_E4M3, .sa = sa, .sb = sb};
	memcpy(r.a, a, 16), memcpy(r.b, b, 32);
	gpu_mma_sim(d, &r);
#elif defined(GPU_HAVE_MFMA_F8F6F4)
	gpu_v8i va = {(int)a[0], (int)a[1], (int)a[2], (int)a[3], 0, 0, 0, 0};
	gpu_v8i vb = {(int)b[0], (int)b[1], (int)b[2], (int)b[3],
		      (int)b[4], (int)b[5], (int)b[6], (int)b[7]};
	/* cbsz 4: A e2m1; blgp 0: B e4m3; opsel 0: the scale's low byte */
	*d = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(va, vb, *d, 4, 0, 0, sa, 0, sb);
#else
	(void)d, (void)a, (void)b, (void)sa, (void)sb;
	GPU_TRAP();
#endif
}

#endif
