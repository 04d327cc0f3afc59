/*
 * gpu-formats.h: the weight and activation formats on the device, the same
 * definitions as engine/wmat.c and engine/actq.c (tests/engine/test-rocm.c checks
 * them against those, bit for bit, on every code). Included by kernel
 * sources only, after gpu-compat.h.
 */
#ifndef MS_GPU_FORMATS_H
#define MS_GPU_FORMATS_H

#include <string.h>

#include "bf16.h"
#include "gpu.h"
#include "wmat.h"

GPU_DEV uint32_t gpu_f2u(float f)
{
	return ms_f32_bits(f); /* bf16.h's, host and device alike */
}

GPU_DEV float gpu_u2f(uint32_t u)
{
	return ms_bits_f32(u);
}

GPU_DEV float gpu_bf16(uint16_t h)
{
	return ms_bf16_f32(h); /* the host's widening (bf16.h) */
}

GPU_DEV float gpu_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF;
	if (e == 0x1F)
		return gpu_u2f(sign | 0x7F800000u | (m << 13));
	if (e == 0) {
		float f = (float)m * 0x1p-24f; /* exact: m < 2^10 */
		return sign ? -f : f;
	}
	return gpu_u2f(sign | ((e + 112) << 23) | (m << 13));
}

/* 2^(e - 127); 0xFF gives 2^128 (infinity in fp32), as ms_e8m0_to_f32. */
GPU_DEV float gpu_e8m0(uint8_t e)
{
	if (e == 0)
		return gpu_u2f(0x00400000u); /* 2^-127, subnormal */
	if (e == 0xFF)
		return gpu_u2f(0x7F800000u);
	return gpu_u2f((uint32_t)e << 23);
}

GPU_DEV float gpu_e2m1(unsigned code)
{
	/* the 8 magnitudes times 2, as integers: 0 1 2 3 4 6 8 12 */
	unsigned m = code & 7;
	float v = (float)(m < 4 ? m : (m == 4 ? 4u : (m == 5 ? 6u : (m == 6 ? 8u : 12u)))) * 0.5f;
	return code & 8 ? -v : v;
}

GPU_DEV float gpu_fp8(uint8_t b)
{
	int e = (b >> 3) & 0xF, m = b & 7;
	float v;
	if (e == 0xF && m == 7)
		return gpu_u2f(0x7FC00000u);
	if (e == 0)
		v = (float)m * 0x1p-9f;
	else
		v = gpu_u2f((uint32_t)(e - 7 + 127) << 23) * (1.0f + (float)m / 8.0f);
	return b & 0x80 ? -v : v;
}

/* Nearest e4m3 value of v, saturated at +-448, ties to even (actq.c's
 * fp8_round, on the bits). */
GPU_DEV float gpu_fp8_round(float v)
{
	uint32_t b = gpu_f2u(v), a = b & 0x7FFFFFFFu;
	if (a > 0x7F800000u)
		return v;
	if (a > 0x43E00000u)
		a = 0x43E00000u;
	uint32_t r;
	if (a < 0x3C800000u) {
		float fa = gpu_u2f(a);
		r = gpu_f2u((fa + 0x1p14f) - 0x1p14f);
	} else {
		r = (a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u;
	}
	return gpu_u2f(r | (b & 0x80000000u));
}

/* e2m1 nearest-even of v (saturating at +-6), as actq.c's e2m1_round. */
GPU_DEV float gpu_e2m1_round(float v)
{
	float a = fabsf(v), r;
	if (a >= 6.0f)
		r = 6.0f;
	else if (a < 2.0f)
		r = rintf(a * 2.0f) / 2.0f;
	else if (a < 4.0f)
		r = rintf(a);
	else
		r = rintf(a / 2.0f) * 2.0f;
	return copysignf(r, v);
}

/* The power of two an MXFP4 group of amax is scaled by (Quark's "even"
 * rule, ms_actq_mxfp4_group). */
GPU_DEV int gpu_mx_exp(float amax)
{
	uint32_t bits = (gpu_f2u(amax) + 0x200000u) & 0x7F800000u;
	int e = (int)(bits >> 23) - 127 - 2;
	return e < -127 ? -127 : (e > 127 ? 127 : e);
}

/* 16 bytes from a 16-byte aligned address, as one vector load
 * (global_load_dwordx4 / ld.global.v4) on the device. */
GPU_DEV void gpu_ld16(const uint8_t *p, uint32_t q[4])
{
#if defined(MS_GPU_SIM)
	memcpy(q, p, 16);
#else
	uint4 v = *(const uint4 *)p;
	q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
#endif
}

GPU_DEV bool gpu_aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* A whole 32-column chunk whose bytes are 16-byte aligned, through vector
 * loads: the common case (every MXFP4 row; bf16/fp8/4- and 8-bit rows whose
 * width is a multiple of 32). 0 when it does not apply. */
GPU_DEV int gpu_decode32(const struct ms_gpu_mat *m, int64_t r, int64_t k0, float *w)
{
	const uint8_t *row = m->w + r * m->row_bytes;
	uint32_t q[4];
	if (m->fmt == MS_WFMT_MXFP4 && gpu_aligned16(row + k0 / 2)) {
		float s = gpu_e8m0(m->scales[r * m->scale_row_bytes + k0 / 32]);
		gpu_ld16(row + k0 / 2, q);
		for (int i = 0; i < 32; i++)
			w[i] = gpu_e2m1((q[i / 8] >> (4 * (i % 8))) & 0xF) * s;
		return 1;
	}
	if (m->fmt == MS_WFMT_BF16 && gpu_aligned16(row + 2 * k0)) {
		for (int v = 0; v < 4; v++) {
			gpu_ld16(row + 2 * k0 + 16 * v, q);
			for (int i = 0; i < 8; i++)
				w[8 * v + i] = gpu_bf16((uint16_t)(q[i / 2] >> (16 * (i % 2))));
		}
		return 1;
	}
	if (m->fmt == MS_WFMT_FP8 && gpu_aligned16(row + k0)) {
		float s = m->fscale[r];
		for (int v = 0; v < 2; v++) {
			gpu_ld16(row + k0 + 16 * v, q);
			for (int i = 0; i < 16; i++)
				w[16 * v + i] = gpu_fp8((uint8_t)(q[i / 4] >> (8 * (i % 4)))) * s;
		}
		return 1;
	}
	if (m->fmt == MS_WFMT_INTQ && (m->bits == 4 || m->bits == 8) &&
	    gpu_aligned16(row + k0 * m->bits / 8)) {
		const float *s = m->fscale + r * m->n_groups, *z = m->fzero + r * m->n_groups;
		const int32_t *gi = m->g_idx ? m->g_idx + (int64_t)m->row_gmap[r] * m->cols : NULL;
		int per = 32 / m->bits; /* codes per 32-bit word */
		unsigned mask = (1u << m->bits) - 1;
		for (int v = 0; v < m->bits / 4; v++) {
			gpu_ld16(row + k0 * m->bits / 8 + 16 * v, q);
			for (int i = 0; i < 4 * per; i++) {
				int64_t k = k0 + 4 * per * v + i;
				unsigned c = (q[i / per] >> (m->bits * (i % per))) & mask;
				int64_t g = gi ? gi[k] : k / m->group_size;
				w[4 * per * v + i] = s[g] * ((float)c - z[g]);
			}
		}
		return 1;
	}
	return 0;
}

/* Columns [k0, k0 + n) of row r of m, n <= 32, into w[0 .. n). */
GPU_DEV void gpu_decode(const struct ms_gpu_mat *m, int64_t r, int64_t k0, int n, float *w)
{
	if (n == 32 && gpu_decode32(m, r, k0, w))
		return;
	const uint8_t *row = m->w + r * m->row_bytes;
	switch (m->fmt) {
	case MS_WFMT_F32:
		for (int i = 0; i < n; i++)
			w[i] = ((const float *)row)[k0 + i];
		break;
	case MS_WFMT_F16:
		for (int i = 0; i < n; i++)
			w[i] = gpu_f16(((const uint16_t *)row)[k0 + i]);
		break;
	case MS_WFMT_BF16:
		for (int i = 0; i < n; i++)
			w[i] = gpu_bf16(((const uint16_t *)row)[k0 + i]);
		break;
	case MS_WFMT_MXFP4: {
		/* k0 is a multiple of 32: one scale for the chunk */
		float s = gpu_e8m0(m->scales[r * m->scale_row_bytes + k0 / 32]);
		for (int i = 0; i < n; i++) {
			uint8_t b = row[(k0 + i) / 2];
			w[i] = gpu_e2m1((k0 + i) & 1 ? b >> 4 : b & 0xF) * s;
		}
		break;
	}
	case MS_WFMT_INTQ: {
		int sb = m->bits == 3 ? 4 : m->bits;
		unsigned mask = (1u << m->bits) - 1;
		const float *s = m->fscale + r * m->n_groups, *z = m->fzero + r * m->n_groups;
		const int32_t *gi = m->g_idx ? m->g_idx + (int64_t)m->row_gmap[r] * m->cols : NULL;
		for (int i = 0; i < n; i++) {
			int64_t k = k0 + i, bit = k * sb;
			unsigned q = (row[bit / 8] >> (bit % 8)) & mask;
			int64_t g = gi ? gi[k] : k / m->group_size;
			w[i] = s[g] * ((float)q - z[g]);
		}
		break;
	}
	case MS_WFMT_FP8: {
		float s = m->fscale[r];
		for (int i = 0; i < n; i++)
			w[i] = gpu_fp8(row[k0 + i]) * s;
		break;
	}
	default:
		for (int i = 0; i < n; i++)
			w[i] = 0;
	}
}

#endif
