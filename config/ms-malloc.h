/*
 * ms-malloc.h: the process's malloc policy once a model is resident.
 *
 * A forward step allocates its scratch (prepared activations, the MoE's
 * per-expert buffers, attention tiles) and frees it at the end; glibc gives
 * large freed blocks back to the kernel (munmap, or madvise when a thread
 * arena's top shrinks), so the next step faults the same pages in again
 * and the kernel zeroes them. Measured on a 512-token prefill of the bench
 * model: 266k page faults (~1 GB zeroed) per prefill, ~25% of its time.
 * Keeping freed memory in the process (mmap only above 256 MiB, no
 * trimming) removes them; RSS then stays at the high-water mark of the
 * steps, which a server reaches on its first long prompt anyway. Called by
 * the commands after the model is loaded, so that the loader's own large
 * temporaries (checkpoint copies freed after packing) still go back.
 */
#ifndef MS_MALLOC_H
#define MS_MALLOC_H

#ifdef __GLIBC__
#include <malloc.h>
#endif

static inline void ms_keep_freed_memory(void)
{
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, 256 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

#endif
