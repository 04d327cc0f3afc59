/*
 * ms-map.h: large buffers as anonymous mappings of their own.
 *
 * The pages are zero until touched, cost nothing until then, and go back to
 * the OS when freed, whatever glibc's malloc thresholds are. The length
 * lives in a 64-byte header before the data, so the data stays 64-byte
 * aligned and a free needs only the pointer. Used for the KV pages and the
 * forward pass's arena (engine/cpu/ops.c) and for the schemes' copies
 * before packing (quant/quant.c).
 */
#ifndef MS_MAP_H
#define MS_MAP_H

#include <stddef.h>

/* n zero bytes, 64-byte aligned, or NULL when the OS refuses. */
void *ms_map_alloc(size_t n);
/* The n a buffer was allocated with. */
size_t ms_map_size(const void *p);
/* p may be NULL. */
void ms_map_free(void *p);

#endif
