/*
 * rowops.c: see rowops.h. At the tree's -O2 GCC 12 leaves these loops
 * scalar: a 2880-wide RMSNorm took ~1.3 us, twice per layer and token
 * (~0.5 ms of a 16-token decode step of the bench model), the rotary
 * embedding and the residual add as much again.
 */
#include "rowops.h"

#include <math.h>

/* engine/meson.build builds this file three times, with the ISA flags and
 * one of these names. */
#ifndef MS_ROWOPS_NAME
#define MS_ROWOPS_NAME ms_rowops_generic
#endif

static void rmsnorm(float *y, const float *x, const float *w, int64_t H, double eps)
{
	double s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= H; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += (double)x[i + j] * (double)x[i + j];
	for (; i < H; i++)
		s[0] += (double)x[i] * (double)x[i];
	double ss = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	float r = (float)(1.0 / sqrt(ss / (double)H + eps));
	for (i = 0; i < H; i++)
		y[i] = w[i] * (x[i] * r);
}

static void rope(const float *restrict cs, const float *restrict sn, float *restrict x,
		 int64_t n_heads, int64_t d)
{
	int64_t half = d / 2;
	for (int64_t h = 0; h < n_heads; h++) {
		float *restrict lo = x + h * d, *restrict hi = lo + half;
		for (int64_t i = 0; i < half; i++) {
			float a = lo[i], b = hi[i];
			lo[i] = a * cs[i] - b * sn[i];
			hi[i] = b * cs[i] + a * sn[i];
		}
	}
}

static void add(float *restrict y, const float *restrict x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += x[i];
}

const struct ms_rowops MS_ROWOPS_NAME = {.rmsnorm = rmsnorm, .rope = rope, .add = add};
