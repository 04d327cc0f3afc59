/* The kernel source built for the host model (gpu-compat.h). */
#define MS_GPU_SIM 1
#include "../kern-mma.cu"
