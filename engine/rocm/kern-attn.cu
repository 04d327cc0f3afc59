/*
 * kern-attn.cu: the paged KV cache on the device: writing a step's keys
 * and values, and attention with sinks, sliding windows and GQA
 * (engine/cpu/attention.h has the math).
 *
 * Keys are cut in splits of MS_GPU_ATTN_SPLIT positions aligned to absolute
 * positions, as the CPU's chunks are: one block turns one (token, head,
 * split) into a partial state (m, l, acc) in scratch, a second kernel folds
 * a token's splits left to right with the sink. Long contexts spread over
 * many blocks (split-K), and the fold order depends on positions alone, so
 * a token's output is the same in any batch.
 */
#include "bf16.h"
#include "fp8.h"
#include "gpu-compat.h"
#include "gpu-formats.h"
#include "kern.h"

#define NT 64          /* threads per attention block */
#define MAX_D 256      /* head_dim the blocks hold (rocm.c refuses more) */

#define KV_F32 0 /* enum ms_kv_dtype's values */
#define KV_BF16 1
#define KV_FP8 2

GPU_DEV int64_t kv_es(const struct ms_gpu_attn *a)
{
	return a->kv_dtype == KV_FP8 ? 1 : a->kv_dtype == KV_BF16 ? 2 : 4;
}

/* The page and slot of position p of token t's sequence. */
GPU_DEV int64_t kv_page(const struct ms_gpu_attn *a, int64_t t, int64_t p)
{
	int64_t blk = p / a->page_tokens;
	return a->pages[((int64_t)a->tok_seq[t] * a->n_layers + a->layer) * a->n_blocks + blk];
}

/* Offsets in a page (kv-cache.h's layout): slot's row of values, and
 * its scale bytes (fp8: one per kv head, after the page's rows). */
GPU_DEV int64_t kv_row(const struct ms_gpu_attn *a, int64_t slot)
{
	return slot * a->n_kv_heads * a->head_dim * kv_es(a);
}

GPU_DEV int64_t kv_srow(const struct ms_gpu_attn *a, int64_t slot)
{
	return a->page_tokens * a->n_kv_heads * a->head_dim + slot * a->n_kv_heads;
}

/* Value i of kv head h at slot `slot` of the page pb bytes into the pool,
 * widened as the host's ms_kv_get widens it. */
GPU_DEV float kv_val(const struct ms_gpu_attn *a, const void *base, int64_t pb, int64_t slot,
		     int64_t h, int64_t i)
{
	const char *b = (const char *)base + pb;
	int64_t e = h * a->head_dim + i;
	if (a->kv_dtype == KV_FP8)
		return ms_fp8_e4m3_f32(((const uint8_t *)(b + kv_row(a, slot)))[e]) *
		       ms_e8m0_f32(((const uint8_t *)(b + kv_srow(a, slot)))[h]);
	if (a->kv_dtype == KV_BF16)
		return gpu_bf16(((const uint16_t *)(b + kv_row(a, slot)))[e]);
	return ((const float *)(b + kv_row(a, slot)))[e];
}

struct kvw_args {
	struct ms_gpu_attn a;
	void *pk, *pv;
	const float *k, *v;
};

/* f32 and bf16: a thread per value; fp8: a thread per (token, kv head),
 * which needs the head's largest value (fp8.h, the host's function). */
GPU_KERNEL(k_kv_write, struct kvw_args)
{
	int64_t d = a.a.head_dim, kvd = a.a.n_kv_heads * d;
	int fp8 = a.a.kv_dtype == KV_FP8;
	int64_t per = fp8 ? a.a.n_kv_heads : kvd, total = a.a.n * per;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += (int64_t)gridDim.x * blockDim.x) {
		int64_t t = e / per, i = e % per, p = a.a.pos[t], slot = p % a.a.page_tokens;
		int64_t pb = kv_page(&a.a, t, p) * a.a.page_stride, row = pb + kv_row(&a.a, slot);
		char *pk = (char *)a.pk + row, *pv = (char *)a.pv + row;
		if (fp8) {
			int64_t s = pb + kv_srow(&a.a, slot) + i;
			((uint8_t *)a.pk)[s] = ms_fp8_kv_head(a.k + t * kvd + i * d, d,
							      (uint8_t *)pk + i * d);
			((uint8_t *)a.pv)[s] = ms_fp8_kv_head(a.v + t * kvd + i * d, d,
							      (uint8_t *)pv + i * d);
		} else if (a.a.kv_dtype == KV_BF16) {
			((uint16_t *)pk)[i] = ms_bf16_rne(a.k[t * kvd + i]);
			((uint16_t *)pv)[i] = ms_bf16_rne(a.v[t * kvd + i]);
		} else {
			((float *)pk)[i] = a.k[t * kvd + i];
			((float *)pv)[i] = a.v[t * kvd + i];
		}
	}
}

GPU_API int GPU_NS(kv_write)(const struct ms_gpu_ctx *c, const struct ms_gpu_attn *a, void *pk,
			     void *pv, const float *k, const float *v)
{
	struct kvw_args w = {*a, pk, pv, k, v};
	int64_t items = a->n * a->n_kv_heads * (a->kv_dtype == KV_FP8 ? 1 : a->head_dim);
	return GPU_LAUNCH(c, k_kv_write, GPU_DIM(kern_blocks(items, KB), 1, 1), GPU_DIM(KB, 1, 1), 0,
			  w);
}

/* The first position token t sees. */
GPU_DEV int64_t attn_lo(const struct ms_gpu_attn *a, int64_t t)
{
	int64_t pos = a->pos[t];
	return a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
}

/* Tree reduction of red[0 .. NT) in shared memory (max or sum). */
GPU_DEV float block_reduce(float *red, float v, int is_max)
{
	int tid = (int)threadIdx.x;
	red[tid] = v;
	__syncthreads();
	for (int h = NT / 2; h > 0; h >>= 1) {
		if (tid < h)
			red[tid] = is_max ? fmaxf(red[tid], red[tid + h]) : red[tid] + red[tid + h];
		__syncthreads();
	}
	float r = red[0];
	__syncthreads();
	return r;
}

/* Block (t, h, z): split lo / S + z of token t, query head h. */
GPU_KERNEL(k_attn_part, struct ms_gpu_attn)
{
	GPU_SHARED float qs[MAX_D];
	GPU_SHARED float sc[MS_GPU_ATTN_SPLIT];
	GPU_SHARED float red[NT];
	int64_t t = blockIdx.x, h = blockIdx.y, d = a.head_dim, S = MS_GPU_ATTN_SPLIT;
	int64_t lo = attn_lo(&a, t), hi = a.pos[t];
	int64_t s0 = (lo / S + blockIdx.z) * S;
	int64_t p0 = s0 > lo ? s0 : lo, p1 = s0 + S - 1 < hi ? s0 + S - 1 : hi;
	float *part = a.part + ((t * a.n_heads + h) * a.max_splits + blockIdx.z) * (d + 2);
	int tid = (int)threadIdx.x;
	if (p0 > p1) { /* past this token's last split: an empty partial */
		if (tid == 0)
			part[0] = -INFINITY, part[1] = 0;
		return;
	}
	int64_t kvh = h / (a.n_heads / a.n_kv_heads);
	float scale = 1.0f / sqrtf((float)d);
	for (int64_t i = tid; i < d; i += NT)
		qs[i] = a.q[(t * a.n_heads + h) * d + i];
	__syncthreads();
	float mx = -INFINITY;
	for (int64_t p = p0 + tid; p <= p1; p += NT) {
		int64_t pb = kv_page(&a, t, p) * a.page_stride, slot = p % a.page_tokens;
		float s = 0;
		for (int64_t i = 0; i < d; i++)
			s += qs[i] * kv_val(&a, a.k, pb, slot, kvh, i);
		sc[p - p0] = s * scale;
		mx = fmaxf(mx, sc[p - p0]);
	}
	mx = block_reduce(red, mx, 1);
	float l = 0;
	for (int64_t p = p0 + tid; p <= p1; p += NT)
		l += (sc[p - p0] = expf(sc[p - p0] - mx));
	l = block_reduce(red, l, 0);
	for (int64_t i = tid; i < d; i += NT) {
		float acc = 0;
		for (int64_t p = p0; p <= p1; p++)
			acc += sc[p - p0] * kv_val(&a, a.v, kv_page(&a, t, p) * a.page_stride,
						   p % a.page_tokens, kvh, i);
		part[2 + i] = acc;
	}
	if (tid == 0)
		part[0] = mx, part[1] = l;
}

/* One block per (t, h): fold the splits in order, then the sink. */
GPU_KERNEL(k_attn_fold, struct ms_gpu_attn)
{
	int64_t t = blockIdx.x, h = blockIdx.y, d = a.head_dim;
	const float *part = a.part + (t * a.n_heads + h) * a.max_splits * (d + 2);
	float sink = a.sinks ? a.sinks[h] : -INFINITY;
	float M = sink;
	for (int64_t z = 0; z < a.max_splits; z++)
		M = fmaxf(M, part[z * (d + 2)]);
	float den = expf(sink - M);
	for (int64_t z = 0; z < a.max_splits; z++)
		if (part[z * (d + 2) + 1] > 0)
			den += part[z * (d + 2) + 1] * expf(part[z * (d + 2)] - M);
	for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
		float acc = 0;
		for (int64_t z = 0; z < a.max_splits; z++)
			if (part[z * (d + 2) + 1] > 0)
				acc += part[z * (d + 2) + 2 + i] * expf(part[z * (d + 2)] - M);
		a.out[(t * a.n_heads + h) * d + i] = acc / den;
	}
}

GPU_API int GPU_NS(attention)(const struct ms_gpu_ctx *c, const struct ms_gpu_attn *a)
{
	int rc = GPU_LAUNCH(c, k_attn_part, GPU_DIM(a->n, a->n_heads, a->max_splits),
			    GPU_DIM(NT, 1, 1), 0, *a);
	return rc ? rc : GPU_LAUNCH(c, k_attn_fold, GPU_DIM(a->n, a->n_heads, 1), GPU_DIM(NT, 1, 1),
				    0, *a);
}
