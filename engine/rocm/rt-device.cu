/*
 * rt-device.cu: the device runtime (gpu.h's ms_gpu_rt_hip, or
 * ms_gpu_rt_cuda from the same source under nvcc): one device, one
 * stream, synchronous copies back.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu-compat.h"
#include "gpu.h"

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuStream_t cudaStream_t
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemset cudaMemset
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyKind cudaMemcpyKind
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemGetInfo cudaMemGetInfo
#define gpuDeviceSynchronize cudaDeviceSynchronize
#else
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuStream_t hipStream_t
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemset hipMemset
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyKind hipMemcpyKind
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemGetInfo hipMemGetInfo
#define gpuDeviceSynchronize hipDeviceSynchronize
#endif

GPU_API int GPU_NS(launch_check)(const struct ms_gpu_ctx *c, const char *what)
{
	gpuError_t e = gpuGetLastError();
	if (e == gpuSuccess)
		return 0;
	return ms_err_set(c->err, -EIO, "%s: launch failed: %s", what, gpuGetErrorString(e));
}

static int dev_open(int device, struct ms_gpu_ctx *ctx, struct ms_gpu_info *info,
		    struct ms_err *err)
{
	int n = 0;
	gpuError_t e = gpuGetDeviceCount(&n);
	if (e != gpuSuccess || n == 0)
		return ms_err_set(err, -ENODEV, "no ROCm/HIP device (%s: %s)", GPU_NAME,
				  e != gpuSuccess ? gpuGetErrorString(e) : "0 devices");
	if (device < 0 || device >= n)
		return ms_err_set(err, -ENODEV, "no ROCm/HIP device %d (%d present)", device, n);
	gpuDeviceProp p;
	if ((e = gpuSetDevice(device)) != gpuSuccess ||
	    (e = gpuGetDeviceProperties(&p, device)) != gpuSuccess)
		return ms_err_set(err, -ENODEV, "device %d: %s", device, gpuGetErrorString(e));
	gpuStream_t s;
	if ((e = gpuStreamCreate(&s)) != gpuSuccess)
		return ms_err_set(err, -ENODEV, "device %d: %s", device, gpuGetErrorString(e));
	memset(ctx, 0, sizeof(*ctx));
	ctx->stream = (void *)s;
	ctx->wave = p.warpSize;
	ctx->n_cu = p.multiProcessorCount;
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%.127s", p.name); /* 256 in the props */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
	snprintf(info->arch, sizeof(info->arch), "sm_%d%d", p.major, p.minor);
#else
	snprintf(info->arch, sizeof(info->arch), "%.63s", p.gcnArchName);
#endif
	info->wave = p.warpSize;
	info->n_cu = p.multiProcessorCount;
	if (gpuMemGetInfo(&info->mem_free, &info->mem_total) != gpuSuccess)
		info->mem_free = info->mem_total = 0;
	return 0;
}

static void dev_close(struct ms_gpu_ctx *ctx)
{
	if (ctx->stream)
		(void)!gpuStreamDestroy((gpuStream_t)ctx->stream);
	ctx->stream = NULL;
}

static void *dev_alloc(size_t bytes)
{
	void *p = NULL;
	if (gpuMalloc(&p, bytes ? bytes : 64) != gpuSuccess)
		return NULL;
	/* the interface promises zeros (KV pages are read before written) */
	if (gpuMemset(p, 0, bytes ? bytes : 64) != gpuSuccess) {
		(void)!gpuFree(p);
		return NULL;
	}
	return p;
}

static void dev_free(void *p)
{
	if (p)
		(void)!gpuFree(p);
}

static int copy(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes,
		gpuMemcpyKind kind, bool wait)
{
	gpuStream_t s = (gpuStream_t)c->stream;
	gpuError_t e = bytes ? gpuMemcpyAsync(dst, src, bytes, kind, s) : gpuSuccess;
	if (e == gpuSuccess && wait)
		e = gpuStreamSynchronize(s);
	if (e != gpuSuccess)
		return ms_err_set(c->err, -EIO, "copy of %zu bytes: %s", bytes, gpuGetErrorString(e));
	return 0;
}

/* To the device: the host buffer may be reused at once, so wait. */
static int dev_h2d(const struct ms_gpu_ctx *c, void *dev, const void *host, size_t bytes)
{
	return copy(c, dev, host, bytes, gpuMemcpyHostToDevice, true);
}

static int dev_d2d(const struct ms_gpu_ctx *c, void *dst, const void *src, size_t bytes)
{
	return copy(c, dst, src, bytes, gpuMemcpyDeviceToDevice, false);
}

static int dev_d2h(const struct ms_gpu_ctx *c, void *host, const void *dev, size_t bytes)
{
	return copy(c, host, dev, bytes, gpuMemcpyDeviceToHost, true);
}

static int dev_mem_info(size_t *free_b, size_t *total_b)
{
	return gpuMemGetInfo(free_b, total_b) == gpuSuccess ? 0 : -EIO;
}

GPU_API const struct ms_gpu_rt *GPU_NS(rt)(void)
{
	static const struct ms_gpu_rt t = {
		GPU_NAME, dev_open, dev_close, dev_alloc, dev_free, dev_h2d, dev_d2d, dev_d2h,
		dev_mem_info,
	};
	return &t;
}
