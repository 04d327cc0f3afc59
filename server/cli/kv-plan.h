/*
 * kv-plan.h: what `serve` offers per request (the context) and the KV
 * pool it sizes for it, when the operator leaves either to it.
 *
 * The context is the model's own (max_position_embeddings); --ctx-size
 * may lower it, not raise it. On a backend whose memory is the host's, the
 * pool takes half the memory available once the weights are loaded (the
 * other half is headroom: scratch, the prefix cache's churn, the page
 * cache that maps the weights, the rest of the machine), at most four full
 * contexts; when one full context does not fit, the default context is the
 * largest that does. A device backend cannot be asked here: its pool is
 * four contexts of at most 8,192 tokens unless --kv-cache-bytes says.
 * --kv-cache-bytes always wins, and a context it cannot hold is lowered
 * to what it holds unless --ctx-size asked for it (then a request that can
 * never fit is refused, naming both sizes).
 */
#ifndef MS_KV_PLAN_H
#define MS_KV_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

struct ms_kv_plan_in {
	int64_t max_pos;          /* the model's context */
	uint64_t token_bytes;     /* KV bytes of one token, every layer */
	int64_t page_tokens;      /* the pool's unit */
	int64_t ctx_size;         /* --ctx-size; 0: unset */
	uint64_t kv_cache_bytes;  /* --kv-cache-bytes; 0: unset */
	bool host;                /* the backend's memory is the host's */
	uint64_t available;       /* host memory available now (ms_kv_plan_available) */
};

struct ms_kv_plan {
	int64_t context;          /* tokens a request may fill */
	uint64_t pool_bytes;      /* the KV pool */
	char why[256];            /* for the start-up line */
};

/* The plan; -EINVAL when --ctx-size exceeds the model's context or the
 * memory cannot hold a page per layer. */
int ms_kv_plan_make(const struct ms_kv_plan_in *in, struct ms_kv_plan *out, struct ms_err *err);

/* Host memory available to this process now: /proc/meminfo's MemAvailable,
 * capped by its cgroup's limit less its usage (a container's, v2 or v1);
 * 0 when neither can be read. */
uint64_t ms_kv_plan_available(void);

#endif
