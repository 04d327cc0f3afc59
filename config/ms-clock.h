/*
 * ms-clock.h: the one clock every room times itself with (load, steps,
 * request latency, benchmarks): monotonic, so that a wall-clock step
 * (NTP, an operator) never shows up as a negative or huge duration.
 */
#ifndef MS_CLOCK_H
#define MS_CLOCK_H

#include <time.h>

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
static inline double ms_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
