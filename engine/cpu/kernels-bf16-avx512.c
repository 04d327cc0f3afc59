/*
 * kernels-bf16-avx512.c: the packed bf16 kernel of kernels-bf16.h
 * (VDPBF16PS), compiled with its own flags (engine/meson.build).
 *
 * Decode is a stream of the panels from DRAM: one 64-byte load holds 16
 * rows x 2 columns and feeds one vdpbf16ps per token against a broadcast
 * activation pair, 16 outputs per instruction, no horizontal sums (the
 * avx512-bf16 row kernel spends more on conversion and reductions than the
 * memory allows). A pass runs several panels at once so every broadcast
 * serves them all, within 32 registers: 1-2 tokens: 4 panels; 3-4 tokens:
 * 2; 5-8 tokens: 1 panel, all tokens in one pass so the panels leave DRAM
 * once. More than 8 tokens: balanced groups of at most 4 over 4 panels at
 * a time, the later groups finding them in L2 (fewer loads per vdpbf16ps
 * than groups of 8 on one panel: measured ~10% faster at n = 64, 512).
 *
 * Prefetch: none for 1-2 tokens (the loop is short enough that the reorder
 * window already runs far ahead; prefetches there cost ~10-30% on 2 Zen 4
 * cores); 3 tokens and more: both lines of the next step 32 steps (2 KiB)
 * ahead per panel, as the arithmetic per line now fills the window (n = 8:
 * ~35% -> ~55-90% of streaming; the VM's noise is large). More than 8
 * tokens: the next 4 panels into L2 during the current ones' groups.
 *
 * Batch invariance: every (token, panel) has two accumulators, the even
 * steps chained into the first and the odd into the second, summed once at
 * the end: the same operations in the same order whatever n, the grouping
 * of tokens or the split of rows, and bitwise ms_bf16_gemmq_scalar.
 */
#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "amx-sim.h"
#include "bf16.h"
#include "kernels-bf16.h"
#include "ms-error.h"

#define AI static inline __attribute__((always_inline))

#define BF16_HUGE_MIN ((size_t)2 << 20) /* packs from this size on use huge pages */
#define BF16_HUGE_PAGE ((size_t)2 << 20)
/* Prefetch distance in 64-byte steps per panel (tuned on 2 Zen 4 cores). */
#define BF16_PF_STEPS 32
#define BF16_PF_MIN_NT 3
#define BF16_ONE_GROUP_MAX 8

static size_t hdr_bytes(void)
{
	return (sizeof(struct ms_bf16_pack) + 63) / 64 * 64;
}

static size_t token_bytes(int64_t kp2)
{
	return (size_t)(kp2 * 4 + 63) / 64 * 64;
}

/* ---- pack ---- */

int ms_bf16_pack(struct ms_wmat *w, void **owned, struct ms_err *err)
{
	*owned = NULL;
	if (w->fmt != MS_WFMT_BF16)
		return ms_err_set(err, -ENOTSUP, "not a bf16 matrix");
	if (!w->w)
		return ms_err_set(err, -ENOTSUP, "rows released");
	if (w->rows <= 0 || w->cols <= 0)
		return ms_err_set(err, -ENOTSUP, "empty matrix");
	const int64_t K = w->cols, kp2 = (K + 1) / 2, np = (w->rows + 15) / 16;
	const size_t pb = (size_t)kp2 * 64, hdr = hdr_bytes();
	const size_t total = hdr + (size_t)np * pb;
	/* Decode streams the panels from DRAM: on 4 KiB pages the TLB walks
	 * cost ~10% of the bandwidth (measured for the q8 panels), so a large
	 * pack asks for transparent huge pages, 2 MiB aligned. A refusal only
	 * costs that speed. From 2 MiB on, not 4: k and v (512 x 2048 of the
	 * bench model, 512 x 2880 of gpt-oss) are 2-3 MiB, and on small pages
	 * q, k and v at 16 tokens took 0.68-0.78 ms against 0.63-0.65 (2 Zen 4
	 * cores); there are only a few such packs a layer, so the load does
	 * not feel the extra huge-page faults (the q8 packs' threshold is
	 * another matter: kernels-q8.c). */
	bool huge = total >= BF16_HUGE_MIN;
	uint8_t *buf = NULL;
	if (posix_memalign((void **)&buf, huge ? BF16_HUGE_PAGE : 64, total))
		return ms_err_set(err, -ENOMEM, "out of memory packing %lld x %lld bf16",
				  (long long)w->rows, (long long)K);
	if (huge)
		(void)madvise(buf, total / BF16_HUGE_PAGE * BF16_HUGE_PAGE, MADV_HUGEPAGE);
	struct ms_bf16_pack *h = (struct ms_bf16_pack *)buf;
	*h = (struct ms_bf16_pack){.rows = w->rows, .cols = K, .kp2 = kp2, .n_panels = np,
				   .panel_bytes = pb, .xs = token_bytes(kp2),
				   .panels = buf + hdr};
	for (int64_t p = 0; p < np; p++) {
		uint16_t *pan = (uint16_t *)(buf + hdr + (size_t)p * pb);
		for (int i = 0; i < 16; i++) {
			int64_t r = p * 16 + i;
			const uint16_t *src = r < w->rows ?
				(const uint16_t *)(w->w + (size_t)r * w->row_bytes) : NULL;
			/* lane i of step k: bf16 2i (even column) and 2i + 1 */
			for (int64_t k = 0; k < kp2; k++) {
				uint16_t e = 0, o = 0;
				if (src) {
					e = src[2 * k];
					o = 2 * k + 1 < K ? src[2 * k + 1] : 0;
				}
				pan[k * 32 + 2 * i] = e;
				pan[k * 32 + 2 * i + 1] = o;
			}
		}
	}
	w->pack = h;
	w->pack_bytes = (size_t)np * pb;
	w->pack_row = ms_bf16_pack_row;
	*owned = buf;
	return 0;
}

void ms_bf16_pack_row(const void *pack, int64_t r, float *out)
{
	const struct ms_bf16_pack *h = pack;
	const uint16_t *pan = (const uint16_t *)(h->panels + (size_t)(r / 16) * h->panel_bytes);
	int i = (int)(r % 16);
	for (int64_t k = 0; k < h->cols; k++)
		out[k] = ms_bf16_to_f32(pan[(k / 2) * 32 + 2 * i + (k & 1)]);
}

/* ---- activations ---- */

size_t ms_bf16_prep_size(const struct ms_wmat *w, int64_t n)
{
	const struct ms_bf16_pack *h = w->pack;
	return (size_t)(n > 0 ? n : 1) * h->xs;
}

void ms_bf16_prep_scalar(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	const struct ms_bf16_pack *h = w->pack;
	for (int64_t t = 0; t < n; t++) {
		uint16_t *q = (uint16_t *)((uint8_t *)xq + (size_t)t * h->xs);
		memset(q, 0, h->xs);
		for (int64_t k = 0; k < h->cols; k++)
			q[k] = ms_bf16_rne_daz(x[t * ldx + k]);
	}
}

void ms_bf16_prep_avx512(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	const struct ms_bf16_pack *h = w->pack;
	const int64_t K = h->cols, kpad = (int64_t)h->xs / 2;
	for (int64_t t = 0; t < n; t++) {
		const float *xt = x + t * ldx;
		uint16_t *q = (uint16_t *)((uint8_t *)xq + (size_t)t * h->xs);
		/* 32 values per store; the tail is zeros (masked loads), up to
		 * the token's padded size */
		for (int64_t k = 0; k < kpad; k += 32) {
			int64_t r = K - k;
			__mmask16 m0 = r >= 16 ? 0xFFFF : r <= 0 ? 0 : (__mmask16)((1u << r) - 1);
			__mmask16 m1 = r >= 32 ? 0xFFFF : r <= 16 ? 0 : (__mmask16)((1u << (r - 16)) - 1);
			__m512 lo = _mm512_maskz_loadu_ps(m0, xt + k);
			__m512 hi = _mm512_maskz_loadu_ps(m1, xt + k + 16);
			/* (a, b): b's 16 values in the low half, a's in the high */
			__m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
			_mm512_storeu_si512(q + k, (__m512i)v);
		}
	}
}

/* ---- gemmq ---- */

AI void store_rows(float *y, __m512 v, int64_t r, int64_t r_end)
{
	if (r + 16 <= r_end)
		_mm512_storeu_ps(y, v);
	else
		_mm512_mask_storeu_ps(y, (__mmask16)((1u << (r_end - r)) - 1), v);
}

/* Lines to bring into L2 while the passes run (see ms_bf16_gemmq_avx512):
 * [at, end), per_pass of them in each pass from its start. */
struct l2_ahead {
	const uint8_t *at, *end;
	int64_t per_pass; /* lines a pass brings in: at most kp2, two per step pair */
};

/* NT tokens x P panels from panel p0, accumulators in registers. */
AI void reg_pass(const int P, const int NT, const struct ms_bf16_pack *h, int64_t p0,
		 const void *xq, int64_t t0, float *y, int64_t ldy, int64_t r_end,
		 struct l2_ahead *ahead)
{
	/* this pass's share of the lines: as many as its step pairs fetch */
	const uint8_t *la = ahead->at;
	int64_t lines = ahead->end > la ? (ahead->end - la) / 64 : 0;
	lines = lines < ahead->per_pass ? lines : ahead->per_pass;
	ahead->at = la + lines * 64;
	const int64_t kp2 = h->kp2;
	const uint8_t *pan[4];
	const int32_t *q[8];
	__m512 a0[8][4], a1[8][4];
#pragma GCC unroll 4
	for (int p = 0; p < P; p++)
		pan[p] = h->panels + (size_t)(p0 + p) * h->panel_bytes;
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++) {
		q[t] = (const int32_t *)((const uint8_t *)xq + (size_t)(t0 + t) * h->xs);
#pragma GCC unroll 4
		for (int p = 0; p < P; p++) {
			a0[t][p] = _mm512_setzero_ps();
			a1[t][p] = _mm512_setzero_ps();
		}
	}
	/* the lines into L2: one per step pair, two where a pass has more */
	const int64_t lpp = lines > kp2 / 2 ? 2 : 1;
	int64_t k = 0;
	for (; k + 2 <= kp2; k += 2) {
		int64_t i = k / 2 * lpp;
		if (i < lines) {
			_mm_prefetch((const char *)la + i * 64, _MM_HINT_T1);
			if (lpp == 2 && i + 1 < lines)
				_mm_prefetch((const char *)la + (i + 1) * 64, _MM_HINT_T1);
		}
		/* a few lines ahead of the demand loads of every panel: those
		 * wait behind the arithmetic in the reorder window; a prefetch
		 * past the end does not fault */
		if (NT >= BF16_PF_MIN_NT)
#pragma GCC unroll 4
			for (int p = 0; p < P; p++) {
				_mm_prefetch((const char *)pan[p] + (k + BF16_PF_STEPS) * 64, _MM_HINT_T0);
				_mm_prefetch((const char *)pan[p] + (k + BF16_PF_STEPS + 1) * 64,
					     _MM_HINT_T0);
			}
		/* the broadcasts inline: with one panel per pass they fold into
		 * the vdpbf16ps as {1to16} memory operands (8 tokens would
		 * otherwise need 16 registers beside 16 accumulators) */
#pragma GCC unroll 4
		for (int p = 0; p < P; p++) {
			__m512i w0 = _mm512_load_si512(pan[p] + k * 64);
			__m512i w1 = _mm512_load_si512(pan[p] + k * 64 + 64);
#pragma GCC unroll 8
			for (int t = 0; t < NT; t++) {
				a0[t][p] = _mm512_dpbf16_ps(a0[t][p], (__m512bh)w0,
							    (__m512bh)_mm512_set1_epi32(q[t][k]));
				a1[t][p] = _mm512_dpbf16_ps(a1[t][p], (__m512bh)w1,
							    (__m512bh)_mm512_set1_epi32(q[t][k + 1]));
			}
		}
	}
	if (k < kp2) { /* odd number of steps: the last is even, into a0 */
#pragma GCC unroll 4
		for (int p = 0; p < P; p++) {
			__m512i w0 = _mm512_load_si512(pan[p] + k * 64);
#pragma GCC unroll 8
			for (int t = 0; t < NT; t++)
				a0[t][p] = _mm512_dpbf16_ps(a0[t][p], (__m512bh)w0,
							    (__m512bh)_mm512_set1_epi32(q[t][k]));
		}
	}
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
		for (int p = 0; p < P; p++) {
			int64_t r = (p0 + p) * 16;
			if (r < r_end)
				store_rows(y + (t0 + t) * ldy + r, _mm512_add_ps(a0[t][p], a1[t][p]),
					   r, r_end);
		}
}

/* Panels [pa, pb) for tokens [t0, t0 + NT), P panels per pass (then 1). */
AI void reg_rows(const int P, const int NT, const struct ms_bf16_pack *h, int64_t pa, int64_t pb,
		 const void *xq, int64_t t0, float *y, int64_t ldy, int64_t r_end,
		 struct l2_ahead *ahead)
{
	int64_t p = pa;
	for (; p + P <= pb; p += P)
		reg_pass(P, NT, h, p, xq, t0, y, ldy, r_end, ahead);
	for (; p < pb; p++)
		reg_pass(1, NT, h, p, xq, t0, y, ldy, r_end, ahead);
}

void ms_bf16_gemmq_avx512(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			  int64_t n, float *y, int64_t ldy)
{
	const struct ms_bf16_pack *h = w->pack;
	int64_t pa = r0 / 16, pb = (r1 + 15) / 16;
	if (n <= 0 || pb <= pa)
		return;
	/* Up to 8 tokens: one group, the panels streamed from DRAM once. More:
	 * balanced groups of at most 4 (9 = 3 + 3 + 3), each over 4 panels at
	 * a time, so the later groups find those panels' weights in L2; and
	 * while they compute there, the passes bring the next 4 panels into L2,
	 * so DRAM streams all along instead of only during each first group
	 * (measured, 16 tokens on 2 Zen 4 cores: the bench model's dense
	 * matrices 23.0 -> 20.2 ms per step, 2048 x 2048 ~270 -> ~320
	 * GFLOP/s). Spread evenly over all the groups' passes, one line per
	 * step pair, rather than two per step pair in the first passes: those
	 * asked two cores for more than DRAM gives (2048 x 2048, alternating
	 * runs: 0.384 -> 0.370 ms mean of 6; 32000 x 2048: 5.39 -> 5.06 ms of
	 * 3). Up to 8 tokens the stream already keeps DRAM busy and nothing is
	 * added. */
	const int64_t PG = 4, gmax = n <= BF16_ONE_GROUP_MAX ? 8 : 4, ng = (n + gmax - 1) / gmax;
	for (int64_t g0 = pa; g0 < pb; g0 += PG) {
		int64_t g1 = g0 + PG < pb ? g0 + PG : pb, g2 = g1 + PG < pb ? g1 + PG : pb;
		struct l2_ahead ahead = {h->panels + (size_t)g1 * h->panel_bytes,
					 h->panels + (size_t)(ng > 1 ? g2 : g1) * h->panel_bytes, 0};
		/* spread over all the passes of these panels' groups (more than 8
		 * tokens: groups of 3-4, two panels a pass) */
		int64_t passes = ng * ((g1 - g0 + 1) / 2);
		ahead.per_pass = (ahead.end - ahead.at) / 64;
		ahead.per_pass = (ahead.per_pass + passes - 1) / passes;
		ahead.per_pass = ahead.per_pass < h->kp2 ? ahead.per_pass : h->kp2;
		for (int64_t gi = 0, t = 0; gi < ng; gi++) {
			int64_t G = n / ng + (gi < n % ng);
			switch (G) {
			case 8:
				reg_rows(1, 8, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			case 7:
				reg_rows(1, 7, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			case 6:
				reg_rows(1, 6, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			case 5:
				reg_rows(1, 5, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			case 4:
				reg_rows(2, 4, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			case 3:
				reg_rows(2, 3, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			case 2:
				reg_rows(4, 2, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			default:
				reg_rows(4, 1, h, g0, g1, xq, t, y, ldy, r1, &ahead);
				break;
			}
			t += G;
		}
	}
}

/* ---- portable model of the above ---- */

/* One VDPBF16PS lane: odd pair first, then even, each an FMA with RNE,
 * DAZ inputs, FTZ outputs (checked on this CPU: shared/docs/kernels.md). */
static float dpbf16_lane(float acc, uint32_t w, uint32_t x)
{
	acc = ms_amx_fma(ms_amx_bf16_f32((uint16_t)(w >> 16)), ms_amx_bf16_f32((uint16_t)(x >> 16)),
			 acc);
	return ms_amx_fma(ms_amx_bf16_f32((uint16_t)w), ms_amx_bf16_f32((uint16_t)x), acc);
}

void ms_bf16_gemmq_scalar(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			  int64_t n, float *y, int64_t ldy)
{
	const struct ms_bf16_pack *h = w->pack;
	for (int64_t t = 0; t < n; t++) {
		const uint32_t *q = (const uint32_t *)((const uint8_t *)xq + (size_t)t * h->xs);
		for (int64_t r = r0; r < r1; r++) {
			const uint32_t *pan = (const uint32_t *)(h->panels +
								 (size_t)(r / 16) * h->panel_bytes);
			int i = (int)(r % 16);
			float a0 = 0.0f, a1 = 0.0f;
			for (int64_t k = 0; k < h->kp2; k++) {
				if (k & 1)
					a1 = dpbf16_lane(a1, pan[k * 16 + i], q[k]);
				else
					a0 = dpbf16_lane(a0, pan[k * 16 + i], q[k]);
			}
			y[t * ldy + r] = a0 + a1;
		}
	}
}
