/*
 * scratch.h: the CPU backend's working memory for a step, grown once.
 *
 * A forward pass needs the same buffers at every layer and every step (the
 * experts' grouped rows, a kernel's prepared activations, ...). Allocating
 * them per call costs a malloc and, for large ones, fresh pages the kernel
 * zeroes on first touch, every layer. Instead each user owns a slot that is
 * grown to the largest size asked of it and then reused; it never shrinks,
 * and is released with the backend.
 *
 * A slot holds one call's buffers as regions laid out with
 * ms_scratch_plan_add (offsets first, so one reservation covers them all),
 * each 64-byte aligned: a cache line of its own, and aligned for any
 * vector load. Users that are active at the same time (ms_cpu_linear's
 * quantized input while ms_cpu_gemm prepares it again) have slots of their
 * own. Contents are not kept from call to call, nor zeroed.
 *
 * Not thread-safe: one backend runs one step at a time (cpu.h). Regions
 * handed to pool tasks are carved out before the pool runs.
 */
#ifndef MS_SCRATCH_H
#define MS_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

enum ms_scratch_slot {
	MS_SCRATCH_GEMM,     /* ms_cpu_gemm_multi: each matrix's prepared activations */
	MS_SCRATCH_LINEAR,   /* ms_cpu_linear: quantized activations, row scales */
	MS_SCRATCH_MOE,      /* ms_moe_forward: grouping and intermediate rows */
	MS_SCRATCH_MOE_PREP, /* ms_moe_forward: each active expert's prepared inputs */
	MS_SCRATCH_STEP,     /* ops.c: the step's per-token page tables */
	MS_SCRATCH_ROUTE,    /* ops.c: the experts chosen per token, their weights */
	MS_SCRATCH_SLOTS
};

#define MS_SCRATCH_ALIGN 64

/* All zero is an empty scratch (a backend's memset at init makes one). */
struct ms_scratch {
	void *base[MS_SCRATCH_SLOTS];
	size_t size[MS_SCRATCH_SLOTS];
};

/* The regions of one slot, laid out before the slot is reserved. */
struct ms_scratch_plan {
	size_t bytes;  /* the total so far: what to reserve */
};

/* Add a region of `bytes`; its offset in the slot. A total past SIZE_MAX
 * saturates there, which no reservation then satisfies (-ENOMEM). */
static inline size_t ms_scratch_plan_add(struct ms_scratch_plan *p, size_t bytes)
{
	size_t at = p->bytes, pad = (MS_SCRATCH_ALIGN - bytes % MS_SCRATCH_ALIGN) % MS_SCRATCH_ALIGN;
	if (bytes > SIZE_MAX - pad || at > SIZE_MAX - (bytes + pad))
		p->bytes = SIZE_MAX;
	else
		p->bytes = at + bytes + pad;
	return at;
}

/* Make slot hold at least `bytes`. Growing allocates the new block before
 * releasing the old, so a failure (-ENOMEM, with a message) leaves the slot
 * as it was. The slot's old contents are not copied. */
int ms_scratch_reserve(struct ms_scratch *s, enum ms_scratch_slot slot, size_t bytes,
		       struct ms_err *err);

/* The region at offset `at` of a reserved slot. */
static inline void *ms_scratch_at(const struct ms_scratch *s, enum ms_scratch_slot slot, size_t at)
{
	return (char *)s->base[slot] + at;
}

/* Release every slot; s is empty again. */
void ms_scratch_free(struct ms_scratch *s);

#endif
