/* kern-table.cu: this build's kernels as the host sees them (gpu.h). */
#include "gpu-compat.h"
#include "kern.h"

/* A function's static, not a global: hipcc would also emit a constant
 * global for the device, where the host launchers do not exist. */
GPU_API const struct ms_gpu_kern *GPU_NS(kern)(void)
{
	static const struct ms_gpu_kern t = {
		GPU_NAME,
		GPU_NS(embed),
		GPU_NS(rmsnorm),
		GPU_NS(rope),
		GPU_NS(add),
		GPU_NS(kv_write),
		GPU_NS(attention),
		GPU_NS(actq),
		GPU_NS(gemv),
		GPU_NS(gemm),
		GPU_NS(mma),
		GPU_NS(route),
		GPU_NS(combine),
		GPU_NS(copy),
	};
	return &t;
}
