/*
 * gpu-compat.h: what lets one kernel source build three ways.
 *
 *   hipcc (AMD, __HIP_PLATFORM_AMD__)   the ROCm backend on Instinct GPUs
 *   nvcc  (__CUDACC__)                  the same kernels on NVIDIA (the
 *                                       lent H200: tests/device/run.sh)
 *   gcc   (MS_GPU_SIM)                  the host model of the execution
 *                                       model (sim/hip-sim.h): rocm-sim
 *
 * Kernels are written in the subset of C that is also C++ and use only
 * what is defined here: GPU_KERNEL to define one, GPU_LAUNCH to start it,
 * GPU_DEV for device functions, GPU_SHARED for per-block memory, the
 * built-in indices, __syncthreads, and the gpu_* cross-lane operations at
 * the wavefront's own width (warpSize: 64 on CDNA, 32 on NVIDIA; never
 * written as a number). Host launchers get GPU_NS names, so the device
 * and the model variants link into one binary.
 */
#ifndef MS_GPU_COMPAT_H
#define MS_GPU_COMPAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(MS_GPU_SIM)
/* ---- the host model ---- */
#include <math.h>
#include "hip-sim.h"

#define GPU_NS(x) ms_gsim_##x
#define GPU_NAME "sim"
#define GPU_API
#define GPU_DEV static inline
#define GPU_SHARED static _Thread_local
#define GPU_RESTRICT restrict
#define threadIdx ms_sim_thread_idx()
#define blockIdx ms_sim_block_idx()
#define blockDim ms_sim_block_dim()
#define gridDim ms_sim_grid_dim()
#define warpSize ms_sim_wave_size()
#define __syncthreads() ms_sim_syncthreads()
typedef struct ms_sim_dim gpu_dim;
typedef struct { uint32_t x, y, z, w; } uint4;
#define GPU_DIM(x, y, z) ((struct ms_sim_dim){(unsigned)(x), (unsigned)(y), (unsigned)(z)})
#define gpu_shfl_f(v, src) ms_sim_shfl_f(v, src, warpSize)
#define gpu_shfl_xor_f(v, m) ms_sim_shfl_xor_f(v, m, warpSize)
#define gpu_shfl_i(v, src) ms_sim_shfl_i(v, src, warpSize)
#define gpu_shfl_xor_i(v, m) ms_sim_shfl_xor_i(v, m, warpSize)
#define gpu_ballot(p) ms_sim_ballot(p)
#define gpu_atomic_add_f(p, v) ms_sim_atomic_add_f(p, v)
#define gpu_atomic_add_i(p, v) ms_sim_atomic_add_i(p, v)
/* A kernel is a function of one argument struct, passed by value on the
 * device; the model passes its address. */
#define GPU_KERNEL(name, type)                                  \
	static void name##_body(type a);                        \
	static void name(void *p) { name##_body(*(const type *)p); } \
	static void name##_body(type a)
struct ms_gpu_ctx;
int ms_gsim_launch(const struct ms_gpu_ctx *c, gpu_dim grid, gpu_dim block, size_t shared,
		   void (*kernel)(void *), const void *args, const char *what);
#define GPU_LAUNCH(ctx, kernel, grid, block, shared, args) \
	ms_gsim_launch(ctx, grid, block, shared, kernel, &(args), #kernel)

#else
/* ---- a device compiler ---- */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#include <cuda_runtime.h>
#define GPU_NS(x) ms_gcuda_##x
#define GPU_NAME "cuda"
#define gpu_shfl_f(v, src) __shfl_sync(0xffffffffu, v, src)
#define gpu_shfl_xor_f(v, m) __shfl_xor_sync(0xffffffffu, v, m)
#define gpu_shfl_i(v, src) __shfl_sync(0xffffffffu, v, src)
#define gpu_shfl_xor_i(v, m) __shfl_xor_sync(0xffffffffu, v, m)
#define gpu_ballot(p) ((uint64_t)__ballot_sync(0xffffffffu, p))
#define GPU_STREAM cudaStream_t
#else
#include <hip/hip_runtime.h>
#define GPU_NS(x) ms_ghip_##x
#define GPU_NAME "hip"
#define gpu_shfl_f(v, src) __shfl(v, src)
#define gpu_shfl_xor_f(v, m) __shfl_xor(v, m)
#define gpu_shfl_i(v, src) __shfl(v, src)
#define gpu_shfl_xor_i(v, m) __shfl_xor(v, m)
#define gpu_ballot(p) ((uint64_t)__ballot(p))
#define GPU_STREAM hipStream_t
#endif
#define GPU_API extern "C"
#define GPU_DEV static __device__ inline
#define GPU_SHARED __shared__
#define GPU_RESTRICT __restrict__
typedef dim3 gpu_dim;
#define GPU_DIM(x, y, z) dim3((unsigned)(x), (unsigned)(y), (unsigned)(z))
#define gpu_atomic_add_f(p, v) atomicAdd(p, v)
#define gpu_atomic_add_i(p, v) atomicAdd(p, v)
#define GPU_KERNEL(name, type) __global__ void name(type a)
struct ms_gpu_ctx;
GPU_API int GPU_NS(launch_check)(const struct ms_gpu_ctx *c, const char *what);
/* hipcc takes CUDA's launch syntax too (hipLaunchKernelGGL is a statement,
 * not an expression) */
#define GPU_LAUNCH(ctx, kernel, grid, block, shared, args)                                \
	(kernel<<<grid, block, shared, (GPU_STREAM)(ctx)->stream>>>(args),                \
	 GPU_NS(launch_check)(ctx, #kernel))
#endif

#endif
