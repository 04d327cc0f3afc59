/* scratch.c: see scratch.h. */
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

/* Sizes are rounded up to this: the experts' prepared inputs vary by a few
 * cache lines from call to call with the routing, and would otherwise cost
 * a fresh block (and its first-touch page faults) each time they grew. */
#define GRANULE ((size_t)64 << 10)

static const char *const slot_names[MS_SCRATCH_SLOTS] = {
	[MS_SCRATCH_GEMM] = "prepared activations",
	[MS_SCRATCH_LINEAR] = "quantized activations",
	[MS_SCRATCH_MOE] = "MoE rows",
	[MS_SCRATCH_MOE_PREP] = "MoE prepared inputs",
};

int ms_scratch_reserve(struct ms_scratch *s, enum ms_scratch_slot slot, size_t bytes,
		       struct ms_err *err)
{
	if (bytes <= s->size[slot])
		return 0;
	size_t size = bytes <= SIZE_MAX - (GRANULE - 1) ? (bytes + GRANULE - 1) / GRANULE * GRANULE : 0;
	void *p = size ? aligned_alloc(MS_SCRATCH_ALIGN, size) : NULL;
	if (!p)
		return ms_err_set(err, -ENOMEM, "out of memory for %zu bytes of scratch (%s)", bytes,
				  slot_names[slot]);
	free(s->base[slot]);
	s->base[slot] = p;
	s->size[slot] = size;
	return 0;
}

void ms_scratch_free(struct ms_scratch *s)
{
	for (int i = 0; i < MS_SCRATCH_SLOTS; i++)
		free(s->base[i]);
	memset(s, 0, sizeof(*s));
}
