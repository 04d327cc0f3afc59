/*
 * test-amx.c: the AMX tile model (engine/cpu/amx-sim.h) and the AMX kernels
 * (engine/cpu/kernels-amx.c) run on it.
 *
 * 1. The model: tiled int8 products (all four signednesses, accumulators
 *    that wrap around 2^32) against a scalar loop; TDPBF16PS against a
 *    scalar rendering of the SDM pseudo-code whose fp32 operations are this
 *    CPU's own FMA and add under MXCSR FTZ|DAZ (an oracle independent of the
 *    model's software FTZ/DAZ), with denormal inputs and tiny results; the
 *    model's FMA against that hardware FMA and against VDPBF16PS; where the
 *    two instructions' documented orders coincide (one product per pair),
 *    TDPBF16PS against VDPBF16PS itself; tile zeroing rules; configurations
 *    and operand shapes hardware refuses are refused (a fault flag, no
 *    effect).
 * 2. The int8 tile kernel (amx-sim) against ms_q8_gemmq_ref, bit for bit,
 *    on ragged shapes, for MXFP4 and INTQ 4- and 8-bit panels.
 * 3. The bf16 tile kernel (amx-sim) against an fp32 product in double:
 *    |got - want| <= (2^-8 + 1e-5) * sum |w x| (activations rounded to
 *    bf16: 8-bit significands, relative 2^-8 each; plus fp32 sums); and bit
 *    for bit the same token alone (AVX-512 path, n < 16) and in a batch (tiles), including
 *    data whose products underflow (FTZ/DAZ on both paths); matrices of
 *    fewer than 256 rows are declined (too little work for tiles).
 * 4. The backend: --kernels amx fails with a clear message where the CPU
 *    lacks AMX (here), auto never picks amx or amx-sim, amx-sim only when
 *    forced. Where the CPU has AMX, 2 and 3 also run on the real tiles.
 * What needs an ISA runs as `--isa NAME`, a meson test each (exit 77 where
 * the CPU lacks it): fma and avx512bf16 (the oracles of 1), amx-sim (2, 3
 * and the forced set on the model), amx-native (2 and 3 on real tiles).
 */
#define MS_AMX_SIM /* the test's own model instance: _tile_* are the model */
#include "amx-sim.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "cpu.h"
#include "benchutil.h"
#include "dense-onednn.h"
#include "isagate.h"
#include "ms-clock.h"
#include "kernels-q8.h"
#include "kernels.h"

/* kernels-amx.c's exports */
extern const struct ms_kernel ms_kernels_amx[], ms_kernels_amx_sim[];
unsigned long ms_kernels_amx_sim_faults(void);

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t r32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}
static float frand(void) /* uniform [-1, 1) */
{
	return (float)(r32() >> 8) / (float)(1u << 23) - 1.0f;
}

static bool cpu_has(unsigned flags)
{
	return (ms_cpu_detect() & flags) == flags;
}

/* ---- 1. the model: int8 ---- */

/* C[M][N] (int32) += A[M][K] B[K][N] (bytes) through tiles of 16 x 16,
 * K in steps of 64 bytes; B repacked to VNNI-4 per tile. kind: 0 ss,
 * 1 su, 2 us, 3 uu. */
static void tiled_int8(int kind, int M, int N, int K, const uint8_t *A, const uint8_t *B,
		       uint32_t *C)
{
	struct ms_amx_tilecfg cfg = {.palette_id = 1};
	cfg.rows[0] = 16, cfg.colsb[0] = 64; /* C */
	cfg.rows[1] = 16, cfg.colsb[1] = 64; /* A */
	cfg.rows[2] = 16, cfg.colsb[2] = 64; /* B */
	_tile_loadconfig(&cfg);
	uint8_t bt[16][64];
	for (int m0 = 0; m0 < M; m0 += 16)
		for (int n0 = 0; n0 < N; n0 += 16) {
			_tile_loadd(0, C + m0 * N + n0, N * 4);
			for (int k0 = 0; k0 < K; k0 += 64) {
				for (int r = 0; r < 16; r++)
					for (int n = 0; n < 16; n++)
						for (int i = 0; i < 4; i++)
							bt[r][4 * n + i] = B[(k0 + 4 * r + i) * N + n0 + n];
				_tile_loadd(1, A + m0 * K + k0, K);
				_tile_loadd(2, bt, 64);
				switch (kind) {
				case 0: _tile_dpbssd(0, 1, 2); break;
				case 1: _tile_dpbsud(0, 1, 2); break;
				case 2: _tile_dpbusd(0, 1, 2); break;
				default: _tile_dpbuud(0, 1, 2); break;
				}
			}
			_tile_stored(0, C + m0 * N + n0, N * 4);
		}
	_tile_release();
}

START_TEST(model_int8_gemm_vs_scalar)
{
	enum { M = 32, N = 32, K = 128 };
	static uint8_t A[M * K], B[K * N];
	static uint32_t C[M * N], want[M * N];
	static const char *names[] = {"tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud"};
	int wraps = 0;
	for (int kind = 0; kind < 4; kind++)
		for (int trial = 0; trial < 4; trial++) {
			for (int i = 0; i < M * K; i++)
				A[i] = (uint8_t)r32();
			for (int i = 0; i < K * N; i++)
				B[i] = (uint8_t)r32();
			/* extreme rows and columns push sums to their limits */
			for (int k = 0; k < K; k++) {
				A[0 * K + k] = 0x80, A[1 * K + k] = 0x7F, A[2 * K + k] = 0xFF;
				B[k * N + 0] = 0x80, B[k * N + 1] = 0xFF;
			}
			for (int i = 0; i < M * N; i++) {
				uint32_t v = r32();
				/* accumulators near both ends of int32 and uint32 */
				C[i] = (i % 4 == 0) ? 0x7FFFFFFFu - (v & 0xFFFF)
				     : (i % 4 == 1) ? 0x80000000u + (v & 0xFFFF)
				     : (i % 4 == 2) ? 0xFFFFFFFFu - (v & 0xFFFF) : v;
			}
			for (int m = 0; m < M; m++)
				for (int n = 0; n < N; n++) {
					int64_t s = (int32_t)C[m * N + n];
					uint32_t acc = C[m * N + n];
					for (int k = 0; k < K; k++) {
						int32_t a = (kind < 2) ? (int8_t)A[m * K + k] : A[m * K + k];
						int32_t b = (kind % 2 == 0) ? (int8_t)B[k * N + n] : B[k * N + n];
						acc += (uint32_t)(a * b);
						s += a * b;
					}
					want[m * N + n] = acc;
					wraps += s != (int32_t)acc;
				}
			tiled_int8(kind, M, N, K, A, B, C);
			ck_assert_msg(!ms_amx_sim_fault(), "%s", ms_amx_sim_fault_msg());
			for (int i = 0; i < M * N; i++)
				ck_assert_msg(C[i] == want[i], "%s trial %d: C[%d] %08x want %08x", names[kind],
					      trial, i, C[i], want[i]);
		}
	ck_assert_int_gt(wraps, 100); /* the wraparound was exercised */
}
END_TEST

/* Partial shapes: only rows x colsb of the result are written, everything
 * above is zeroed; loads zero-fill; stores touch only rows x colsb. */
START_TEST(model_tile_shapes_and_zeroing)
{
	struct ms_amx_tilecfg cfg = {.palette_id = 1};
	cfg.rows[3] = 5, cfg.colsb[3] = 24;  /* C: M 5, N 6 */
	cfg.rows[4] = 5, cfg.colsb[4] = 28;  /* A: K 7 */
	cfg.rows[5] = 7, cfg.colsb[5] = 24;  /* B */
	cfg.rows[6] = 16, cfg.colsb[6] = 64; /* a full tile */
	_tile_loadconfig(&cfg);
	ck_assert(!ms_amx_sim_fault());
	uint8_t junk[16 * 64];
	for (int i = 0; i < (int)sizeof(junk); i++)
		junk[i] = (uint8_t)(r32() | 1);
	/* a load of 5 x 24 bytes zeroes the rest of the tile */
	memset(ms_amx_sim_st.tile[3], 0xAB, sizeof(ms_amx_sim_st.tile[3]));
	_tile_loadd(3, junk, 64);
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 64; c++)
			ck_assert_int_eq(ms_amx_sim_st.tile[3][r][c], (r < 5 && c < 24) ? junk[r * 64 + c] : 0);
	/* the product leaves zeros above M x N, with junk planted there */
	uint8_t a[5 * 28], b[7 * 24];
	for (int i = 0; i < 5 * 28; i++)
		a[i] = (uint8_t)r32();
	for (int i = 0; i < 7 * 24; i++)
		b[i] = (uint8_t)r32();
	_tile_loadd(4, a, 28);
	_tile_loadd(5, b, 24);
	_tile_zero(3);
	memset(ms_amx_sim_st.tile[3][7], 0x55, 64);
	memset(ms_amx_sim_st.tile[3][0] + 30, 0x55, 34);
	_tile_dpbssd(3, 4, 5);
	ck_assert(!ms_amx_sim_fault());
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 64; c++)
			if (r >= 5 || c >= 24)
				ck_assert_int_eq(ms_amx_sim_st.tile[3][r][c], 0);
	for (int m = 0; m < 5; m++)
		for (int n = 0; n < 6; n++) {
			int32_t want = 0;
			for (int k = 0; k < 28; k++)
				want += (int8_t)a[m * 28 + k] * (int8_t)b[(k / 4) * 24 + 4 * n + k % 4];
			int32_t got;
			memcpy(&got, ms_amx_sim_st.tile[3][m] + 4 * n, 4);
			ck_assert_int_eq(got, want);
		}
	/* a store writes rows x colsb and nothing else */
	uint8_t out[8 * 32];
	memset(out, 0xEE, sizeof(out));
	_tile_stored(3, out, 32);
	for (int r = 0; r < 8; r++)
		for (int c = 0; c < 32; c++)
			if (r >= 5 || c >= 24)
				ck_assert_int_eq(out[r * 32 + c], 0xEE);
			else
				ck_assert_int_eq(out[r * 32 + c], ms_amx_sim_st.tile[3][r][c]);
	/* STTILECFG returns what was loaded */
	struct ms_amx_tilecfg back;
	_tile_storeconfig(&back);
	ck_assert_int_eq(memcmp(&back, &cfg, sizeof(cfg)), 0);
	/* a new configuration zeroes every tile; release unconfigures */
	_tile_loadd(6, junk, 64);
	_tile_loadconfig(&cfg);
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 64; c++)
			ck_assert_int_eq(ms_amx_sim_st.tile[6][r][c], 0);
	_tile_release();
	ck_assert(!ms_amx_sim_st.configured);
	ck_assert(!ms_amx_sim_fault());
}
END_TEST

/* ---- 1. the model: refusals ---- */

static void expect_fault(int kind, const char *what)
{
	ck_assert_msg(ms_amx_sim_fault() == kind, "%s: fault %d (%s), want %d", what,
		      ms_amx_sim_fault(), ms_amx_sim_fault_msg(), kind);
	ms_amx_sim_clear_fault();
}

START_TEST(model_refuses_bad_configs)
{
	struct ms_amx_tilecfg good = {.palette_id = 1}, c;
	for (int t = 0; t < 3; t++)
		good.rows[t] = 16, good.colsb[t] = 64;
	uint8_t buf[16 * 64] = {0};
	ms_amx_sim_clear_fault();
	_tile_release();
	/* nothing configured: every tile instruction is #UD */
	_tile_zero(0);
	expect_fault(MS_AMX_FAULT_UD, "tilezero before ldtilecfg");
	_tile_loadd(0, buf, 64);
	expect_fault(MS_AMX_FAULT_UD, "tileloadd before ldtilecfg");
	_tile_dpbssd(0, 1, 2);
	expect_fault(MS_AMX_FAULT_UD, "tdpbssd before ldtilecfg");
	/* #GP configurations; each leaves the state as it was */
	c = good, c.palette_id = 2;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "palette 2");
	ck_assert(!ms_amx_sim_st.configured);
	c = good, c.reserved[5] = 1;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "reserved byte");
	c = good, c.rows[1] = 17;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "17 rows");
	c = good, c.colsb[2] = 68;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "68 bytes per row");
	c = good, c.rows[8] = 1, c.colsb[8] = 4;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "tile 8");
	c = good, c.rows[4] = 0, c.colsb[4] = 4;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "colsb without rows");
	c = good, c.rows[4] = 3, c.colsb[4] = 0;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_GP, "rows without colsb");
	ck_assert(!ms_amx_sim_st.configured);
	c = good, c.start_row = 2;
	_tile_loadconfig(&c);
	expect_fault(MS_AMX_FAULT_UNMODELED, "start_row");
	/* a good one, then #UD uses */
	_tile_loadconfig(&good);
	ck_assert(!ms_amx_sim_fault() && ms_amx_sim_st.configured);
	_tile_loadd(1, buf, 64);
	_tile_loadd(2, buf, 64);
	_tile_zero(3);
	expect_fault(MS_AMX_FAULT_UD, "unconfigured tile 3");
	_tile_loadd(9, buf, 64);
	expect_fault(MS_AMX_FAULT_UD, "tile 9");
	_tile_dpbsud(0, 0, 2);
	expect_fault(MS_AMX_FAULT_UD, "dst == a");
	_tile_dpbf16ps(0, 1, 1);
	expect_fault(MS_AMX_FAULT_UD, "a == b");
	/* shapes that do not chain: C 16 x 16, A 16 x 32 bytes (K 8), B 16 rows */
	c = good, c.colsb[1] = 32;
	_tile_loadconfig(&c);
	memset(ms_amx_sim_st.tile[0], 0x11, sizeof(ms_amx_sim_st.tile[0]));
	_tile_dpbssd(0, 1, 2);
	expect_fault(MS_AMX_FAULT_UD, "rows(b) != K");
	for (int r = 0; r < 16; r++) /* dropped: the destination is untouched */
		for (int b = 0; b < 64; b++)
			ck_assert_int_eq(ms_amx_sim_st.tile[0][r][b], 0x11);
	c = good, c.rows[1] = 8;
	_tile_loadconfig(&c);
	_tile_dpbuud(0, 1, 2);
	expect_fault(MS_AMX_FAULT_UD, "rows(a) != M");
	c = good, c.colsb[2] = 32;
	_tile_loadconfig(&c);
	_tile_dpbusd(0, 1, 2);
	expect_fault(MS_AMX_FAULT_UD, "colsb(b) != colsb(dst)");
	c = good, c.colsb[1] = 6;
	_tile_loadconfig(&c); /* accepted by ldtilecfg, refused on use */
	ck_assert(!ms_amx_sim_fault());
	_tile_loadd(1, buf, 64);
	expect_fault(MS_AMX_FAULT_UD, "colsb 6");
	/* the first fault is the one kept */
	_tile_loadd(9, buf, 64);
	_tile_loadconfig(&(struct ms_amx_tilecfg){.palette_id = 3});
	ck_assert_int_eq(ms_amx_sim_fault(), MS_AMX_FAULT_UD);
	ck_assert_ptr_nonnull(strstr(ms_amx_sim_fault_msg(), "tileloadd"));
	ms_amx_sim_clear_fault();
	_tile_release();
}
END_TEST

/* ---- 1. the model: bf16 ---- */

/* The CPU's FMA / add with MXCSR = FTZ | DAZ | nearest. asm volatile: the
 * compiler neither folds these nor moves them past the MXCSR writes. */
static inline float hw_fma(float a, float b, float c)
{
	__asm__ volatile("vfmadd231ss %[b], %[a], %[c]" : [c] "+x"(c) : [a] "x"(a), [b] "x"(b));
	return c;
}
static inline float hw_add(float a, float b)
{
	float r;
	__asm__ volatile("vaddss %[b], %[a], %[r]" : [r] "=x"(r) : [a] "x"(a), [b] "x"(b));
	return r;
}
static unsigned ftz_daz_on(void)
{
	unsigned csr = _mm_getcsr();
	_mm_setcsr((csr & ~0x6000u) | 0x8040u);
	return csr;
}

/* bf16 test values: ordinary, near the underflow edge (products ~2^-126),
 * denormal, zero, wide-ranged. */
static uint16_t bf16_val(void)
{
	uint32_t r = r32(), s = (r32() & 1) << 15, man = r32() & 0x7F;
	int e;
	switch (r % 10) {
	case 0: case 1: case 2: case 3: e = 127 + (int)(r32() % 17) - 8; break;
	case 4: case 5: e = 127 - 56 - (int)(r32() % 12); break;
	case 6: return (uint16_t)(s | (man ? man : 1)); /* denormal */
	case 7: return (uint16_t)s;                     /* +-0 */
	default: e = 127 + (int)(r32() % 61) - 30; break;
	}
	return (uint16_t)(s | (uint32_t)e << 7 | man);
}
/* All near 2^-63 (denormal now and then): products and sums around 2^-126,
 * where FTZ decides. */
static uint16_t bf16_tiny(void)
{
	uint32_t s = (r32() & 1) << 15, man = r32() & 0x7F;
	if (r32() % 8 == 0)
		return (uint16_t)(s | (man ? man : 1));
	return (uint16_t)(s | (uint32_t)(127 - 63 + (int)(r32() % 5) - 2) << 7 | man);
}
static float f32_val(void) /* accumulators: with denormals and tiny values */
{
	uint32_t r = r32(), s = r32() & 0x80000000u, man = r32() & 0x7FFFFF;
	switch (r % 6) {
	case 0: return ms_bits_f32(s | man);                                   /* denormal or 0 */
	case 1: return ms_bits_f32(s | (uint32_t)(1 + r32() % 4) << 23 | man); /* just above 2^-126 */
	case 2: return 0.0f;
	default: return ms_bits_f32(s | (uint32_t)(127 + (int)(r32() % 9) - 4) << 23 | man);
	}
}

/* The SDM's TDPBF16PS pseudo-code on plain arrays, each fp32 step on the
 * CPU under FTZ | DAZ. A: 16 rows of 32 bf16, B: 16 rows of 32, C 16 x 16. */
static __attribute__((noinline)) void tdpbf16ps_oracle(const uint16_t *A, const uint16_t *B,
							float *C)
{
	unsigned csr = ftz_daz_on();
	for (int m = 0; m < 16; m++) {
		float tmp[32] = {0};
		for (int k = 0; k < 16; k++)
			for (int n = 0; n < 16; n++) {
				tmp[2 * n] = hw_fma(ms_amx_bf16_f32(A[m * 32 + 2 * k]),
						    ms_amx_bf16_f32(B[k * 32 + 2 * n]), tmp[2 * n]);
				tmp[2 * n + 1] = hw_fma(ms_amx_bf16_f32(A[m * 32 + 2 * k + 1]),
							ms_amx_bf16_f32(B[k * 32 + 2 * n + 1]), tmp[2 * n + 1]);
			}
		for (int n = 0; n < 16; n++)
			C[m * 16 + n] = hw_add(C[m * 16 + n], hw_add(tmp[2 * n], tmp[2 * n + 1]));
	}
	_mm_setcsr(csr);
}

static bool same_or_nan(float a, float b)
{
	return ms_f32_bits(a) == ms_f32_bits(b) || (isnan(a) && isnan(b));
}
/* Equal as values (+0 == -0), or both NaN. */
static bool same_value(float a, float b)
{
	return a == b || (isnan(a) && isnan(b));
}

START_TEST(model_tdpbf16ps_vs_sdm_on_this_cpu)
{
	struct ms_amx_tilecfg cfg = {.palette_id = 1};
	for (int t = 0; t < 3; t++)
		cfg.rows[t] = 16, cfg.colsb[t] = 64;
	uint16_t A[16 * 32], B[16 * 32];
	float C[256], want[256];
	int flushed_zeros = 0, denorm_acc = 0;
	for (int trial = 0; trial < 400; trial++) {
		bool tiny = trial % 2;
		for (int i = 0; i < 512; i++)
			A[i] = tiny ? bf16_tiny() : bf16_val(), B[i] = tiny ? bf16_tiny() : bf16_val();
		for (int i = 0; i < 256; i++) {
			C[i] = want[i] = tiny && i % 2 ? 0.0f : f32_val();
			denorm_acc += C[i] != 0 && fabsf(C[i]) < FLT_MIN;
		}
		tdpbf16ps_oracle(A, B, want);
		_tile_loadconfig(&cfg);
		_tile_loadd(0, C, 64);
		_tile_loadd(1, A, 64);
		_tile_loadd(2, B, 64);
		_tile_dpbf16ps(0, 1, 2);
		_tile_stored(0, C, 64);
		_tile_release();
		ck_assert_msg(!ms_amx_sim_fault(), "%s", ms_amx_sim_fault_msg());
		for (int i = 0; i < 256; i++) {
			ck_assert_msg(same_or_nan(C[i], want[i]), "trial %d C[%d]: model %a, SDM on cpu %a",
				      trial, i, C[i], want[i]);
			flushed_zeros += tiny && C[i] == 0;
		}
	}
	ck_assert_int_gt(denorm_acc, 1000);
	ck_assert_int_gt(flushed_zeros, 100);
}
END_TEST

/* The model's FTZ/DAZ FMA against the CPU's under MXCSR, on values around
 * the underflow threshold (incl. results that round up to 2^-126 only with
 * the denormal range: tiny after rounding, so flushed). */
static __attribute__((noinline)) void hw_fma_batch(const float *a, const float *b, const float *c,
						   float *r, int n)
{
	unsigned csr = ftz_daz_on();
	for (int i = 0; i < n; i++)
		r[i] = hw_fma(a[i], b[i], c[i]);
	_mm_setcsr(csr);
}

START_TEST(model_fma_vs_cpu_ftz_daz)
{
	enum { N = 200000 };
	float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
	float *c = malloc(N * sizeof(float)), *r = malloc(N * sizeof(float));
	for (int i = 0; i < N; i++) {
		uint32_t s1 = r32() & 0x80000000u, s2 = r32() & 0x80000000u;
		switch (i % 4) {
		case 0: /* product near 2^-126, c near it too */
			a[i] = ms_bits_f32(s1 | (uint32_t)(127 - 63 + (int)(r32() % 5) - 2) << 23 | (r32() & 0x7FFFFF));
			b[i] = ms_bits_f32(s2 | (uint32_t)(127 - 63 + (int)(r32() % 5) - 2) << 23 | (r32() & 0x7FFFFF));
			c[i] = f32_val();
			break;
		case 1: /* c = +-2^-126, a tiny product pulling it below by about an ulp */
			c[i] = ms_bits_f32(s1 | 0x00800000u);
			a[i] = ms_bits_f32((s1 ^ 0x80000000u) | (uint32_t)(127 - 24 - (int)(r32() % 3)) << 23 |
				     (r32() & 0x7FFFFF));
			b[i] = ms_bits_f32(0x00800000u | (r32() & 0x7FFFFF));
			break;
		case 2: /* arbitrary values with denormal operands */
			a[i] = ms_bits_f32(s1 | (r32() & 0x7FFFFF));
			b[i] = frand() * 1e3f;
			c[i] = f32_val();
			break;
		default:
			a[i] = f32_val(), b[i] = f32_val(), c[i] = f32_val();
		}
	}
	hw_fma_batch(a, b, c, r, N);
	int flushed = 0, window = 0;
	for (int i = 0; i < N; i++) {
		float m = ms_amx_fma(a[i], b[i], c[i]);
		ck_assert_msg(same_or_nan(m, r[i]), "fma(%a, %a, %a): model %a, cpu %a", a[i], b[i], c[i],
			      m, r[i]);
		float ieee = fmaf(a[i], b[i], c[i]);
		flushed += m == 0 && ieee != 0;
		window += m == 0 && fabsf(ieee) == FLT_MIN;
	}
	ck_assert_int_gt(flushed, 1000);
	ck_assert_int_gt(window, 10); /* the tiny-after-rounding corner was hit */
	free(a), free(b), free(c), free(r);
}
END_TEST

/* VDPBF16PS on 16 lanes: acc + a.pair . b.pair, hardware. */
__attribute__((target("avx512f,avx512bf16"))) static void hw_vdpbf16ps(float *acc, const uint32_t *a,
									const uint32_t *b)
{
	__m512 c = _mm512_loadu_ps(acc);
	__m512i va = _mm512_loadu_si512((const void *)a), vb = _mm512_loadu_si512((const void *)b);
	c = _mm512_dpbf16_ps(c, (__m512bh)va, (__m512bh)vb);
	_mm512_storeu_ps(acc, c);
}

START_TEST(model_vs_vdpbf16ps)
{
	/* (a) the model's FMA in VDPBF16PS's documented order (odd pair element
	 * first, then even) against the instruction */
	int mism = 0;
	for (int trial = 0; trial < 20000; trial++) {
		uint32_t a[16], b[16];
		float acc[16], want[16];
		for (int l = 0; l < 16; l++) {
			a[l] = bf16_val() | (uint32_t)bf16_val() << 16;
			b[l] = bf16_val() | (uint32_t)bf16_val() << 16;
			acc[l] = f32_val();
			float t = ms_amx_fma(ms_amx_bf16_f32((uint16_t)(a[l] >> 16)),
					     ms_amx_bf16_f32((uint16_t)(b[l] >> 16)), acc[l]);
			want[l] = ms_amx_fma(ms_amx_bf16_f32((uint16_t)a[l]), ms_amx_bf16_f32((uint16_t)b[l]), t);
		}
		hw_vdpbf16ps(acc, a, b);
		for (int l = 0; l < 16; l++)
			mism += !same_or_nan(acc[l], want[l]);
	}
	ck_assert_int_eq(mism, 0);
	/* (b) TDPBF16PS with one product per pair (even element 0, C = 0) is
	 * the same arithmetic as VDPBF16PS from a zero accumulator, up to the
	 * sign of a zero result (AMX adds a +0 even sum, VDPBF16PS a 0 * b0 of
	 * b0's sign): the tile instruction against the vector one */
	struct ms_amx_tilecfg cfg = {.palette_id = 1};
	cfg.rows[0] = 16, cfg.colsb[0] = 64; /* C 16 x 16 */
	cfg.rows[1] = 16, cfg.colsb[1] = 4;  /* A: one pair per row */
	cfg.rows[2] = 1, cfg.colsb[2] = 64;  /* B: one row of 16 pairs */
	for (int trial = 0; trial < 2000; trial++) {
		uint32_t a[16], b[16], arow[16], brow[16];
		for (int l = 0; l < 16; l++) {
			arow[l] = (uint32_t)bf16_val() << 16; /* (0, a1) */
			brow[l] = bf16_val() | (uint32_t)bf16_val() << 16;
		}
		float C[256] = {0};
		_tile_loadconfig(&cfg);
		_tile_zero(0);
		_tile_loadd(1, arow, 4);
		_tile_loadd(2, brow, 64);
		_tile_dpbf16ps(0, 1, 2);
		_tile_stored(0, C, 64);
		_tile_release();
		ck_assert(!ms_amx_sim_fault());
		for (int m = 0; m < 16; m++) {
			float acc[16] = {0};
			for (int n = 0; n < 16; n++)
				a[n] = arow[m], b[n] = brow[n];
			hw_vdpbf16ps(acc, a, b);
			for (int n = 0; n < 16; n++)
				ck_assert_msg(same_value(C[m * 16 + n], acc[n]),
					      "row %d col %d: tdpbf16ps model %a, vdpbf16ps %a", m, n,
					      C[m * 16 + n], acc[n]);
		}
	}
}
END_TEST

/* ---- 2. the int8 tile kernel on q8 panels ---- */

struct mat {
	struct ms_wmat m;
	uint8_t *w, *s;
	float *fs, *fz;
};

static void mat_free(struct mat *b)
{
	free(b->w), free(b->s), free(b->fs), free(b->fz);
	memset(b, 0, sizeof(*b));
}

static struct mat make_mxfp4(int64_t rows, int64_t cols)
{
	struct mat b = {0};
	int64_t g = (cols + 31) / 32;
	b.w = calloc((size_t)(rows * g * 16), 1);
	b.s = malloc((size_t)(rows * g));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols; k++) {
			uint8_t code = (uint8_t)(r32() & 15);
			b.w[r * g * 16 + k / 2] |= (k & 1) ? (uint8_t)(code << 4) : code;
		}
	for (int64_t i = 0; i < rows * g; i++) {
		uint32_t v = r32() % 40;
		/* mostly near 2^0; now and then the extremes (denormal 2^(e-128)) */
		b.s[i] = v == 0 ? 0 : v == 1 ? 1 : v == 2 ? 254 : (uint8_t)(122 + v % 10);
	}
	b.m = (struct ms_wmat){.fmt = MS_WFMT_MXFP4, .rows = rows, .cols = cols, .w = b.w,
			       .row_bytes = (size_t)g * 16, .scales = b.s, .scale_row_bytes = (size_t)g};
	return b;
}

/* INTQ with fp16-exact scales and integer zero points (what q8 packs). */
static struct mat make_intq(int bits, int64_t rows, int64_t cols, int64_t gs)
{
	struct mat b = {0};
	int sb = ms_intq_storage_bits(bits);
	int64_t G = (cols + gs - 1) / gs, rb = (cols * sb + 7) / 8;
	b.w = calloc((size_t)(rows * rb), 1);
	b.fs = malloc((size_t)(rows * G) * sizeof(float));
	b.fz = malloc((size_t)(rows * G) * sizeof(float));
	unsigned mask = (1u << bits) - 1;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols; k++) {
			unsigned q = r32() & mask;
			int64_t bit = k * sb;
			b.w[r * rb + bit / 8] |= (uint8_t)(q << (bit % 8));
		}
	for (int64_t i = 0; i < rows * G; i++) {
		b.fs[i] = ldexpf((float)(1024 + r32() % 1024), -10 - 6 - (int)(r32() % 4));
		b.fz[i] = (float)(r32() & mask);
	}
	b.m = (struct ms_wmat){.fmt = MS_WFMT_INTQ, .rows = rows, .cols = cols, .w = b.w,
			       .row_bytes = (size_t)rb, .bits = bits, .group_size = gs, .n_groups = G,
			       .fscale = b.fs, .fzero = b.fz};
	return b;
}

static float *make_x(int64_t n, int64_t cols)
{
	float *x = malloc((size_t)(n * cols) * sizeof(float));
	for (int64_t i = 0; i < n * cols; i++)
		x[i] = frand() * (float)(1 + (i / 32) % 3);
	for (int64_t k = 0; k < cols && k < 32; k++) /* a zero block */
		x[k] = 0.0f;
	return x;
}

/* The kernel k (a q8 one) against ms_q8_gemmq_ref on the same pack and
 * prepared activations: every output bit for bit; rows outside [r0, r1)
 * untouched. */
static void check_q8(const struct ms_kernel *k, struct mat *b, int64_t n)
{
	struct ms_err err = {0};
	void *owned = NULL;
	int64_t rows = b->m.rows, cols = b->m.cols;
	ck_assert_msg(k->pack(&b->m, &owned, &err) == 0, "%s pack: %s", k->name, err.msg);
	float *x = make_x(n, cols);
	void *xq = malloc(k->prep_size(&b->m, n));
	k->prep(&b->m, x, cols, n, xq);
	float *y = malloc((size_t)(n * rows) * sizeof(float));
	float *yr = malloc((size_t)(n * rows) * sizeof(float));
	/* whole matrix, then rows from the second panel on */
	for (int pass = 0; pass < 2; pass++) {
		int64_t r0 = pass && rows > 16 ? 16 : 0, r1 = rows;
		for (int64_t i = 0; i < n * rows; i++)
			y[i] = yr[i] = 1e30f;
		k->gemmq(&b->m, r0, r1, xq, n, y, rows);
		ms_q8_gemmq_ref(&b->m, r0, r1, xq, n, yr, rows);
		for (int64_t t = 0; t < n; t++)
			for (int64_t r = 0; r < rows; r++) {
				float got = y[t * rows + r], want = yr[t * rows + r];
				ck_assert_msg(ms_f32_bits(got) == ms_f32_bits(want),
					      "%s %lldx%lld n=%lld rows [%lld,%lld): tok %lld row %lld: %a vs ref %a",
					      k->name, (long long)rows, (long long)cols, (long long)n,
					      (long long)r0, (long long)r1, (long long)t, (long long)r, got, want);
				if (r < r0)
					ck_assert(got == 1e30f);
			}
	}
	free(x), free(xq), free(y), free(yr), free(owned);
	b->m.pack = NULL;
}

static void q8_shapes(const struct ms_kernel *kmx, const struct ms_kernel *kiq)
{
	const int64_t rows[] = {1, 17, 33, 100}, cols[] = {32, 100, 2880}, ns[] = {16, 17, 40, 64};
	for (int ri = 0; ri < 4; ri++)
		for (int ci = 0; ci < 3; ci++)
			for (int ni = 0; ni < 4; ni++) {
				struct mat b = make_mxfp4(rows[ri], cols[ci]);
				check_q8(kmx, &b, ns[ni]);
				mat_free(&b);
				b = make_intq(4, rows[ri], cols[ci], cols[ci] >= 64 ? 64 : 32);
				check_q8(kiq, &b, ns[ni]);
				mat_free(&b);
				b = make_intq(8, rows[ri], cols[ci], 32);
				check_q8(kiq, &b, ns[ni]);
				mat_free(&b);
			}
	struct mat b = make_intq(3, 40, 200, 200); /* 3-bit codes (nibbles), one group */
	check_q8(kiq, &b, 24);
	mat_free(&b);
	/* fewer than 16 tokens: the VNNI path, still the reference's bits */
	b = make_mxfp4(33, 100);
	check_q8(kmx, &b, 5);
	mat_free(&b);
}

static const struct ms_kernel *kernel_named(const struct ms_kernel *list, const char *name)
{
	for (const struct ms_kernel *k = list; k->name; k++)
		if (!strcmp(k->name, name))
			return k;
	return NULL;
}

static const struct ms_kernel *kernel_of(const struct ms_kernel *list, enum ms_wfmt f)
{
	for (const struct ms_kernel *k = list; k->name; k++)
		if (k->fmt == f)
			return k;
	return NULL;
}

START_TEST(sim_q8_kernel_matches_reference)
{
	unsigned long f0 = ms_kernels_amx_sim_faults();
	q8_shapes(kernel_named(ms_kernels_amx_sim, "amx-sim-mxfp4"), kernel_named(ms_kernels_amx_sim, "amx-sim-intq"));
	ck_assert_int_eq(ms_kernels_amx_sim_faults(), f0);
}
END_TEST

/* ---- 3. the bf16 tile kernel ---- */

static uint16_t to_bf16(float f)
{
	uint32_t u = ms_f32_bits(f);
	return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static struct mat make_bf16(int64_t rows, int64_t cols, float scale)
{
	struct mat b = {0};
	b.w = malloc((size_t)(rows * cols) * 2);
	for (int64_t i = 0; i < rows * cols; i++) {
		uint16_t h = to_bf16(frand() * scale);
		memcpy(b.w + 2 * i, &h, 2);
	}
	b.m = (struct ms_wmat){.fmt = MS_WFMT_BF16, .rows = rows, .cols = cols, .w = b.w,
			       .row_bytes = (size_t)cols * 2};
	return b;
}

/* xscale, wscale: magnitudes; tiny ones make products underflow. */
static void check_bf16(const struct ms_kernel *k, int64_t rows, int64_t cols, int64_t n,
		       float wscale, float xscale)
{
	struct ms_err err = {0};
	void *owned = NULL;
	struct mat b = make_bf16(rows, cols, wscale);
	ck_assert_msg(k->pack(&b.m, &owned, &err) == 0, "%s pack: %s", k->name, err.msg);
	ck_assert_ptr_nonnull(b.m.pack_row);
	float *row = malloc((size_t)cols * sizeof(float));
	for (int64_t r = 0; r < rows; r++) { /* the packed copy decodes to the rows */
		b.m.pack_row(b.m.pack, r, row);
		for (int64_t c = 0; c < cols; c++) {
			uint16_t h;
			memcpy(&h, b.w + 2 * (r * cols + c), 2);
			ck_assert(ms_f32_bits(row[c]) == ms_f32_bits(ms_bf16_to_f32(h)));
		}
	}
	float *x = malloc((size_t)(n * cols) * sizeof(float));
	for (int64_t i = 0; i < n * cols; i++)
		x[i] = frand() * xscale;
	void *xq = malloc(k->prep_size(&b.m, n)), *x1 = malloc(k->prep_size(&b.m, 1));
	k->prep(&b.m, x, cols, n, xq);
	float *y = malloc((size_t)(n * rows) * sizeof(float)), *y1 = malloc((size_t)rows * sizeof(float));
	for (int64_t i = 0; i < n * rows; i++)
		y[i] = 1e30f;
	int64_t r0 = rows > 16 ? 16 : 0;
	k->gemmq(&b.m, r0, rows, xq, n, y, rows);
	for (int64_t t = 0; t < n; t++) {
		k->prep(&b.m, x + t * cols, cols, 1, x1);
		k->gemmq(&b.m, r0, rows, x1, 1, y1, rows);
		for (int64_t r = 0; r < rows; r++) {
			float got = y[t * rows + r];
			if (r < r0) {
				ck_assert(got == 1e30f);
				continue;
			}
			ms_wmat_row_f32(&b.m, r, row);
			double want = 0, mag = 0;
			for (int64_t c = 0; c < cols; c++) {
				want += (double)row[c] * x[t * cols + c];
				mag += fabs((double)row[c] * x[t * cols + c]);
			}
			/* the flush of products below 2^-126 adds at most cols * 2^-126 */
			double tol = (0x1p-8 + 1e-5) * mag + (double)cols * 0x1p-125;
			ck_assert_msg(fabs(got - want) <= tol,
				      "%s %lldx%lld n=%lld tok %lld row %lld: %.9g want %.9g (tol %g)",
				      k->name, (long long)rows, (long long)cols, (long long)n, (long long)t,
				      (long long)r, got, want, tol);
			ck_assert_msg(ms_f32_bits(got) == ms_f32_bits(y1[r]),
				      "%s %lldx%lld: token %lld row %lld: %a in a batch of %lld, %a alone",
				      k->name, (long long)rows, (long long)cols, (long long)t, (long long)r,
				      got, (long long)n, y1[r]);
		}
	}
	free(row), free(x), free(xq), free(x1), free(y), free(y1), free(owned);
	b.m.pack = NULL;
	mat_free(&b);
}

static void bf16_shapes(const struct ms_kernel *k)
{
	/* rows from 256 (fewer are declined), ragged; 16, 17, 33, 40, 64 tokens */
	const int64_t shapes[][3] = {{256, 32, 16}, {273, 100, 17}, {300, 64, 40}, {256, 2880, 16},
				     {257, 7, 33}, {288, 257, 64}, {260, 33, 3}};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		check_bf16(k, shapes[i][0], shapes[i][1], shapes[i][2], 1.0f, 1.0f);
	/* products around 2^-126 and below: FTZ / DAZ on both paths */
	check_bf16(k, 272, 96, 20, 0x1p-60f, 0x1p-64f);
	check_bf16(k, 256, 64, 18, 0x1p-70f, 0x1p-60f);
	/* a matrix of a few rows is left to the next candidate */
	struct ms_err err = {0};
	void *owned = NULL;
	struct mat b = make_bf16(255, 64, 1.0f);
	ck_assert_int_eq(k->pack(&b.m, &owned, &err), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err.msg, "too little work for tiles"));
	ck_assert_ptr_null(owned);
	ck_assert_ptr_null(b.m.pack);
	mat_free(&b);
}

START_TEST(sim_bf16_kernel_matches_reference)
{
	unsigned long f0 = ms_kernels_amx_sim_faults();
	bf16_shapes(kernel_of(ms_kernels_amx_sim, MS_WFMT_BF16));
	ck_assert_int_eq(ms_kernels_amx_sim_faults(), f0);
}
END_TEST

/* ---- 4. the backend ---- */

#define AMX_ALL (MS_CPU_AMX_TILE | MS_CPU_AMX_INT8 | MS_CPU_AMX_BF16)

START_TEST(backend_amx_selection)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_ptr_nonnull(strstr(ms_cpu_kernel_sets, "amx"));
	ck_assert_ptr_nonnull(strstr(ms_cpu_kernel_sets, "amx-sim"));
	int rc = ms_cpu_init(&be, "amx", 1, &err);
	bool native = rc == 0;
	if (!cpu_has(AMX_ALL)) {
		/* no AMX here: forcing the set is an error that says what is missing */
		ck_assert_int_eq(rc, -ENOTSUP);
		ck_assert_msg(strstr(err.msg, "--kernels amx") && strstr(err.msg, "amx-tile") &&
				      strstr(err.msg, "amx-int8") && strstr(err.msg, "amx-bf16"),
			      "message: %s", err.msg);
	} else if (!native) {
		/* AMX in CPUID and XCR0, but Linux would not give the tile state */
		ck_assert_msg(strstr(err.msg, "refused tile state"), "message: %s", err.msg);
	} else {
		/* real tiles (their kernels: native_kernels_match_reference) */
		ck_assert_str_eq(be.isa, "amx");
		ms_cpu_free(&be);
	}
	/* auto: amx only where it runs, amx-sim never */
	ck_assert_int_eq(ms_cpu_init(&be, "auto", 1, &err), 0);
	ck_assert_str_ne(be.isa, "amx-sim");
	if (!native)
		ck_assert_str_ne(be.isa, "amx");
	for (int f = 0; f < MS_WFMT_COUNT; f++)
		for (int i = 0; i < be.n_kernels[f]; i++) {
			ck_assert_str_ne(be.kernels[f][i]->isa, "amx-sim");
			if (!native)
				ck_assert_str_ne(be.kernels[f][i]->isa, "amx");
		}
	ms_cpu_free(&be);
}
END_TEST

/* Forced amx-sim: its kernels first, other formats from the sets below. */
START_TEST(backend_amx_sim_forced)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_int_eq(ms_cpu_init(&be, "amx-sim", 1, &err), 0);
	ck_assert_str_eq(be.isa, "amx-sim");
	ck_assert_str_eq(be.kernels[MS_WFMT_BF16][0]->name, "amx-sim-bf16");
	ck_assert_str_eq(be.kernels[MS_WFMT_MXFP4][0]->name, "amx-sim-mxfp4");
	ck_assert_str_eq(be.kernels[MS_WFMT_INTQ][0]->name, "amx-sim-intq");
	ck_assert_str_ne(be.kernels[MS_WFMT_F32][0]->isa, "ref"); /* avx512's */
	for (int f = 0; f < MS_WFMT_COUNT; f++)
		for (int i = 0; i < be.n_kernels[f]; i++)
			ck_assert_str_ne(be.kernels[f][i]->isa, "amx");
	/* the whole path: bind (pack), gemm through the pool */
	struct mat b = make_bf16(300, 96, 1.0f);
	const struct ms_kernel *k;
	void *owned;
	char why[256];
	ck_assert_int_eq(ms_cpu_bind(&be, &b.m, &k, &owned, why, sizeof(why), &err), 0);
	ck_assert_str_eq(k->name, "amx-sim-bf16");
	float *x = make_x(24, 96), *y = malloc(24 * 300 * sizeof(float)), row[96];
	ms_cpu_gemm(&be, k, &b.m, x, 24, y, NULL);
	ms_wmat_row_f32(&b.m, 299, row);
	double want = 0, mag = 0;
	for (int c = 0; c < 96; c++)
		want += (double)row[c] * x[23 * 96 + c], mag += fabs((double)row[c] * x[23 * 96 + c]);
	ck_assert(fabs(y[23 * 300 + 299] - want) <= (0x1p-8 + 1e-5) * mag);
	free(x), free(y), free(owned);
	b.m.pack = NULL;
	mat_free(&b);
	/* a router-sized one: declined, the next candidate binds it */
	b = make_bf16(32, 96, 1.0f);
	ck_assert_int_eq(ms_cpu_bind(&be, &b.m, &k, &owned, why, sizeof(why), &err), 0);
	ck_assert_str_ne(k->isa, "amx-sim");
	ck_assert_msg(strstr(why, "amx-sim-bf16 declined"), "why: %s", why);
	free(owned);
	b.m.pack = NULL;
	mat_free(&b);
	ms_cpu_free(&be);
	/* --exact: nothing in amx-sim keeps fp32 activations */
	struct ms_cpu_opts o = {.kernels = "amx-sim", .threads = 1, .exact = true};
	ck_assert_int_eq(ms_cpu_init_opts(&be, &o, &err), 0);
	ck_assert_str_ne(be.kernels[MS_WFMT_BF16][0]->isa, "amx-sim");
	ms_cpu_free(&be);
}
END_TEST

/* Real tiles: the checks of 2 and 3, as on the model. */
START_TEST(native_kernels_match_reference)
{
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_msg(ms_cpu_init(&be, "amx", 1, &err) == 0, "%s", err.msg);
	q8_shapes(kernel_named(ms_kernels_amx, "amx-mxfp4"), kernel_named(ms_kernels_amx, "amx-intq"));
	bf16_shapes(kernel_of(ms_kernels_amx, MS_WFMT_BF16));
	ms_cpu_free(&be);
}
END_TEST

/* ---- --bench: GFLOP/s of the tile kernels against the AVX-512 ones and
 * oneDNN at prefill token counts (not a test; needs real AMX, or runs the
 * software model with AMX_BENCH_SIM=1, slowly). Weights are hot in cache:
 * these counts are compute-bound. ---- */

static double bench_gemm(struct ms_cpu *be, const struct ms_kernel *k, const struct ms_wmat *w,
			 const float *x, int64_t n, float *y)
{
	double best = bu_best_gemm_s(be, k, w, x, n, y, 5, 0);
	return 2.0 * (double)w->rows * (double)w->cols * (double)n / best / 1e9;
}

static int bench(void)
{
	bool sim = getenv("AMX_BENCH_SIM") != NULL;
	struct ms_err err = {0};
	struct ms_cpu be;
	if (!sim && ms_cpu_init(&be, "amx", 1, &err)) {
		printf("bench: %s\n", err.msg);
		return 0;
	}
	if (!sim)
		ms_cpu_free(&be);
	const struct ms_kernel *amx = sim ? ms_kernels_amx_sim : ms_kernels_amx;
	const char *pre = sim ? "amx-sim-" : "amx-";
	const int64_t R = 4096, K = 2048, ns[] = {1, 4, 16, 64, 512};
	/* per format: the tile kernel (its name after amx-), then others */
	const char *names[3][3] = {{"mxfp4", "avx512vnni-q8-mxfp4", NULL},
				   {"intq", "avx512vnni-q8-intq", NULL},
				   {"bf16", "avx512bf16-vnni2", "onednn-bf16"}};
	for (int th = 1; th <= 2; th++) {
		if (ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = th}, &err)) {
			printf("bench: %s\n", err.msg);
			return 1;
		}
		for (int f = 0; f < 3; f++) {
			struct mat b = f == 0 ? make_mxfp4(R, K) : f == 1 ? make_intq(4, R, K, 32) : make_bf16(R, K, 1.0f);
			if (f == 0) /* realistic scales: subnormal ones cost microcode assists on Intel */
				for (int64_t i = 0; i < R * (K / 32); i++)
					b.s[i] = (uint8_t)(120 + i % 8);
			for (int ni = 0; ni < 5; ni++) {
				int64_t n = ns[ni];
				float *x = make_x(n, K), *y = malloc((size_t)(n * R) * sizeof(float));
				printf("%-5s %lldx%lld %d thr n %3lld:", f == 0 ? "mxfp4" : f == 1 ? "int4" : "bf16",
				       (long long)R, (long long)K, th, (long long)n);
				for (int v = 0; v < 3 && names[f][v]; v++) {
					char name[64];
					bool tile = v == 0;
					snprintf(name, sizeof(name), "%s%s", tile ? pre : "", names[f][v]);
					const struct ms_kernel *k = tile ? kernel_named(amx, name)
							 : v == 2 && f == 2 ? &ms_kernel_onednn_bf16
									    : kernel_named(ms_kernels_avx512, name);
					struct ms_wmat w = b.m;
					void *owned = NULL;
					if (k == &ms_kernel_onednn_bf16)
						ms_dense_onednn_force(true);
					int rc = k && k->pack ? k->pack(&w, &owned, &err) : k ? 0 : -ENOENT;
					if (k == &ms_kernel_onednn_bf16)
						ms_dense_onednn_force(false);
					if (rc) {
						printf("  %s: -", name);
						continue;
					}
					printf("  %s %6.1f", k->name, bench_gemm(&be, k, &w, x, n, y));
					if (owned)
						k->pack_free ? k->pack_free(owned) : free(owned);
				}
				printf("  GFLOP/s\n");
				fflush(stdout);
				free(x), free(y);
			}
			mat_free(&b);
		}
		ms_cpu_free(&be);
	}
	return 0;
}

static void add_portable(Suite *s)
{
	TCase *tc = tcase_create("amx");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, model_int8_gemm_vs_scalar);
	tcase_add_test(tc, model_tile_shapes_and_zeroing);
	tcase_add_test(tc, model_refuses_bad_configs);
	tcase_add_test(tc, backend_amx_selection);
	suite_add_tcase(s, tc);
}

/* the oracles that are this CPU's FMA */
static void add_fma(TCase *tc, int arg)
{
	(void)arg;
	tcase_add_test(tc, model_tdpbf16ps_vs_sdm_on_this_cpu);
	tcase_add_test(tc, model_fma_vs_cpu_ftz_daz);
}

static void add_vdpbf16ps(TCase *tc, int arg)
{
	(void)arg;
	tcase_add_test(tc, model_vs_vdpbf16ps);
}

static void add_sim(TCase *tc, int arg)
{
	(void)arg;
	tcase_add_test(tc, sim_q8_kernel_matches_reference);
	tcase_add_test(tc, sim_bf16_kernel_matches_reference);
	tcase_add_test(tc, backend_amx_sim_forced);
}

static void add_native(TCase *tc, int arg)
{
	(void)arg;
	tcase_add_test(tc, native_kernels_match_reference);
}

/* Real tiles need Linux's permission for the tile state too: the backend
 * asks for it. */
static const char *no_tile_state(void)
{
	static char why[MS_ERR_MSG_MAX + 32];
	struct ms_err err = {0};
	struct ms_cpu be;
	if (ms_cpu_init(&be, "amx", 1, &err) == 0) {
		ms_cpu_free(&be);
		return NULL;
	}
	snprintf(why, sizeof(why), "the tile state (%s)", err.msg);
	return why;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--bench"))
		return bench();
	/* the tile kernels' gates: the flags they declare */
	const struct isa_gate gates[] = {
		{"fma", MS_CPU_FMA, NULL, add_fma, 0},
		{"avx512bf16", MS_CPU_AVX512F | MS_CPU_AVX512BF16, NULL, add_vdpbf16ps, 0},
		{"amx-sim", ms_kernels_amx_sim[0].cpu_flags, NULL, add_sim, 0},
		{"amx-native", ms_kernels_amx[0].cpu_flags, no_tile_state, add_native, 0},
	};
	return isa_run(argc, argv, "amx", add_portable, ISA_GATES(gates), 600);
}
