/* kv-plan.c: serve's context and KV pool (kv-plan.h). */
#include "kv-plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define DEVICE_CONTEXT 8192   /* a device backend's default context, at most */
#define CONTEXTS 4            /* full contexts the pool holds at most */

/* bytes for the start-up line: MiB below a GiB. */
static void size_words(uint64_t bytes, char *buf, size_t n)
{
	if (bytes < (uint64_t)GIB)
		snprintf(buf, n, "%.1f MiB", (double)bytes / 1048576.0);
	else
		snprintf(buf, n, "%.2f GiB", (double)bytes / GIB);
}

/* The largest whole number of pages of tokens that bytes hold. */
static int64_t tokens_in(const struct ms_kv_plan_in *in, uint64_t bytes)
{
	int64_t t = (int64_t)(bytes / in->token_bytes);
	return t / in->page_tokens * in->page_tokens;
}

int ms_kv_plan_make(const struct ms_kv_plan_in *in, struct ms_kv_plan *out, struct ms_err *err)
{
	memset(out, 0, sizeof(*out));
	if (in->ctx_size > in->max_pos)
		return ms_err_set(err, -EINVAL, "--ctx-size %" PRId64 " is more than the model's context "
				  "(max_position_embeddings %" PRId64 ")", in->ctx_size, in->max_pos);
	int64_t ctx = in->ctx_size ? in->ctx_size : in->max_pos;
	const char *whose = in->ctx_size ? "--ctx-size" : "the model's";
	uint64_t full = (uint64_t)ctx * in->token_bytes, pool;
	char how[160];
	if (in->kv_cache_bytes) {
		pool = in->kv_cache_bytes;
		snprintf(how, sizeof(how), "--kv-cache-bytes");
	} else if (!in->host) {
		if (!in->ctx_size && ctx > DEVICE_CONTEXT)
			ctx = DEVICE_CONTEXT, whose = "a device backend's default", full = (uint64_t)ctx *
											   in->token_bytes;
		pool = CONTEXTS * full;
		snprintf(how, sizeof(how), "four full contexts; on a device backend --kv-cache-bytes "
			 "sizes it");
	} else if (!in->available) {
		pool = CONTEXTS * full;
		snprintf(how, sizeof(how), "four full contexts; the memory available is unknown");
	} else {
		uint64_t half = in->available / 2;
		pool = half < CONTEXTS * full ? half : CONTEXTS * full;
		if (half < CONTEXTS * full)
			snprintf(how, sizeof(how), "half the %.1f GiB available after loading",
				 (double)in->available / GIB);
		else
			snprintf(how, sizeof(how), "four full contexts; %.1f GiB available after loading",
				 (double)in->available / GIB);
		/* a context asked for gets its one full context, memory or not */
		if (in->ctx_size && pool < full)
			pool = full;
	}
	int64_t held = tokens_in(in, pool);
	if (held < in->page_tokens)
		return ms_err_set(err, -EINVAL, "the KV cache gets %.1f MiB (%s): less than one page of "
				  "%" PRId64 " tokens; give --kv-cache-bytes", (double)pool / 1048576.0, how,
				  in->page_tokens);
	if (held < ctx && !in->ctx_size)
		ctx = held, whose = "the largest the pool holds";
	out->context = ctx;
	out->pool_bytes = pool;
	char size[32];
	size_words(pool, size, sizeof(size));
	snprintf(out->why, sizeof(out->why), "context %" PRId64 " tokens (%s); KV pool %s, %"
		 PRId64 " tokens (%s)", ctx, whose, size, held, how);
	return 0;
}

/* The number after key in a /proc/meminfo-style file, in bytes (kB
 * there); 0 when absent. */
static uint64_t meminfo(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	uint64_t v = 0;
	size_t n = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && sscanf(line + n, " %" SCNu64, &v) == 1) {
			v *= 1024;
			break;
		}
	if (f)
		fclose(f);
	return v;
}

/* One number from a file ("max" and errors: 0). */
static uint64_t file_number(const char *path)
{
	FILE *f = fopen(path, "r");
	uint64_t v = 0;
	if (f && fscanf(f, "%" SCNu64, &v) != 1)
		v = 0;
	if (f)
		fclose(f);
	return v;
}

uint64_t ms_kv_plan_available(void)
{
	uint64_t avail = meminfo("MemAvailable:");
	static const char *const limits[][2] = {
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
	};
	for (int k = 0; k < 2; k++) {
		uint64_t lim = file_number(limits[k][0]), used = file_number(limits[k][1]);
		/* v1 writes a huge number for no limit */
		if (lim && lim < (1ull << 60)) {
			uint64_t left = lim > used ? lim - used : 0;
			if (!avail || left < avail)
				avail = left;
			break;
		}
	}
	return avail;
}
