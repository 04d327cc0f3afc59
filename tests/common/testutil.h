/*
 * testutil.h: what the kernel test programs share. Include once per
 * program, after defining TESTUTIL_SEED (each program keeps its own
 * deterministic random stream, so its data do not change when another
 * program's tests do).
 * - rnd(), frand(): a 24-bit LCG stream and floats uniform in [-1, 1);
 * - struct tu_bw_job, tu_bw_task: the streaming read of the `--bench`
 *   modes (one pool task per copy of the weights, four independent 512-bit
 *   load chains), the roofline those copies' bytes allow.
 */
#ifndef MS_TESTUTIL_H
#define MS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#ifndef TESTUTIL_SEED
#error "define TESTUTIL_SEED before including testutil.h"
#endif

static uint32_t rng_state = TESTUTIL_SEED;

static inline uint32_t rnd(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return rng_state >> 8;
}

static inline float frand(void) /* uniform [-1, 1) */
{
	return (float)rnd() / (float)(1u << 23) - 1.0f;
}

struct tu_bw_job {
	const uint8_t *const *bufs; /* one buffer per pool task */
	size_t bytes;               /* read from each */
	uint64_t sink[64];
};

__attribute__((target("avx512f"), unused)) static void tu_bw_task(void *ctx, int task, int worker)
{
	struct tu_bw_job *j = ctx;
	const uint8_t *p = j->bufs[task];
	typedef long long v8 __attribute__((vector_size(64)));
	v8 a = {0}, b = {0}, c = {0}, d = {0};
	for (size_t i = 0; i + 256 <= j->bytes; i += 256) {
		a += *(const v8 *)(p + i);
		b += *(const v8 *)(p + i + 64);
		c += *(const v8 *)(p + i + 128);
		d += *(const v8 *)(p + i + 192);
	}
	v8 s = a + b + c + d;
	j->sink[(worker % 8) * 8] += (uint64_t)(s[0] + s[7]);
}

#endif
