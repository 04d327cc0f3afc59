/*
 * cpu.c: CPU feature detection and the backend's start-up, on the choice
 * of kernel-table.c's one table (to add a kernel or a set: that file);
 * binding a matrix to its first candidate that takes it; the row-parallel
 * gemm.
 */
#include "cpu.h"
#include "dense-onednn.h"
#include "kernel-table.h"

#include <cpuid.h>
#include <errno.h>
#include <stdlib.h>
#include <numa.h>
#include <sys/mman.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* kernels-amx.c: Linux's permission for the tile state. */
int ms_amx_request_perm(void);

/* Linux hands out the tile data state only on request: once per process,
 * from the first backend (before its pool's threads exist). Refused, the
 * AMX flags are cleared: no tile instruction may run. */
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_perm_rc;

static void amx_perm_request(void)
{
	amx_perm_rc = ms_amx_request_perm();
}

static int amx_permission(unsigned *flags)
{
	const unsigned amx = MS_CPU_AMX_TILE | MS_CPU_AMX_INT8 | MS_CPU_AMX_BF16;
	if (!(*flags & amx))
		return 0;
	pthread_once(&amx_once, amx_perm_request);
	if (amx_perm_rc)
		*flags &= ~amx;
	return amx_perm_rc;
}

static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

unsigned ms_cpu_detect(void)
{
	unsigned a, b, c, d, flags = 0;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	bool osxsave = (c >> 27) & 1;
	uint64_t xcr0 = osxsave ? xgetbv0() : 0;
	/* The OS must save the registers: YMM (bits 1-2), ZMM (5-7), tiles (17-18). */
	bool ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xE6) == 0xE6;
	bool tile_ok = (xcr0 & 0x60000) == 0x60000;
	if (ymm_ok && ((c >> 12) & 1))
		flags |= MS_CPU_FMA;
	if (ymm_ok && ((c >> 29) & 1))
		flags |= MS_CPU_F16C;
	if (__get_cpuid_max(0, NULL) < 7)
		return flags;
	__cpuid_count(7, 0, a, b, c, d);
	if (ymm_ok && ((b >> 5) & 1))
		flags |= MS_CPU_AVX2;
	if (zmm_ok) {
		if ((b >> 16) & 1)
			flags |= MS_CPU_AVX512F;
		if ((b >> 30) & 1)
			flags |= MS_CPU_AVX512BW;
		if ((b >> 31) & 1)
			flags |= MS_CPU_AVX512VL;
		if ((c >> 11) & 1)
			flags |= MS_CPU_AVX512VNNI;
		if ((c >> 1) & 1)
			flags |= MS_CPU_AVX512VBMI;
	}
	if (tile_ok) {
		if ((d >> 24) & 1)
			flags |= MS_CPU_AMX_TILE;
		if ((d >> 25) & 1)
			flags |= MS_CPU_AMX_INT8;
		if ((d >> 22) & 1)
			flags |= MS_CPU_AMX_BF16;
	}
	unsigned a1, b1, c1, d1;
	__cpuid_count(7, 1, a1, b1, c1, d1);
	if (zmm_ok && ((a1 >> 5) & 1))
		flags |= MS_CPU_AVX512BF16;
	return flags;
}

const char *ms_cpu_flags_str(unsigned flags, char *buf, size_t len)
{
	static const char *names[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
				      "avx512vnni", "avx512bf16", "amx-tile", "amx-int8", "amx-bf16",
				      "avx512vbmi", "onednn-bf16"};
	size_t n = 0;
	buf[0] = '\0';
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if ((flags >> i) & 1 && n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " " : "", names[i]);
	if (!n)
		snprintf(buf, len, "(none)");
	return buf;
}

int ms_cpu_init(struct ms_cpu *be, const char *kernels, int threads, struct ms_err *err)
{
	struct ms_cpu_opts o = {.kernels = kernels, .threads = threads};
	return ms_cpu_init_opts(be, &o, err);
}

/* The table's choice for this CPU and request (kernel-table.c), into be.
 * amx_why: why the CPU's AMX is off, or NULL. */
static int choose_kernels(struct ms_cpu *be, const char *kernels, const char *amx_why,
			  struct ms_err *err)
{
	/* libdnnl's own ISA check, as a flag the table's oneDNN entry needs */
	unsigned lib = ms_dense_onednn_usable(be->cpu_flags) ? MS_CPU_ONEDNN_BF16 : 0;
	struct ms_choose_req rq = {
		.kernels = kernels,
		.cpu_flags = be->cpu_flags | lib,
		.exact = be->exact,
		.lacks_note = amx_why,
		.reason_note = amx_why ? "; amx off: tile state refused" : NULL,
	};
	struct ms_kernel_choice c;
	int rc = ms_kernels_choose(&rq, &c, err);
	if (rc)
		return rc;
	be->isa = ms_kset_name(c.set);
	memcpy(be->kernels, c.kernels, sizeof(be->kernels));
	memcpy(be->n_kernels, c.n_kernels, sizeof(be->n_kernels));
	memcpy(be->reasons, c.reasons, sizeof(be->reasons));
	be->rowops = c.rowops;
	be->swiglu_row = c.swiglu_row;
	be->mask_words = c.mask_words;
	be->attn = c.attn;
	return 0;
}

/* --attn-products on the chosen attention kernel. auto: bf16 products
 * where the CPU multiplies bf16 pairs (AVX512-BF16: twice the f32 FMA's
 * multiply-adds, which a long prompt's attention needs; the accuracy is
 * measured as the int8 dense default's, tests/e2e/dense_int8.py), unless
 * exact. */
static int choose_products(struct ms_cpu *be, enum ms_attn_products p, struct ms_err *err)
{
	if (p == MS_ATTN_PRODUCTS_BF16 && be->exact)
		return ms_err_set(err, -EINVAL, "--attn-products bf16 rounds q and the probabilities to "
				  "bf16; --exact keeps them f32");
	if (p == MS_ATTN_PRODUCTS_BF16 && !be->attn->chunk_bf16_products)
		return ms_err_set(err, -EINVAL, "--attn-products bf16: the attention kernel %s has no "
				  "bf16 products (avx512bf16-attn needs AVX512-BF16; or --kernels ref)",
				  be->attn->name);
	be->attn_bf16_products = p == MS_ATTN_PRODUCTS_BF16 ||
				 (p == MS_ATTN_PRODUCTS_AUTO && !be->exact && be->attn->chunk_bf16_products &&
				  (be->attn->cpu_flags & MS_CPU_AVX512BF16));
	return 0;
}

int ms_cpu_init_opts(struct ms_cpu *be, const struct ms_cpu_opts *o,
			 struct ms_err *err)
{
	memset(be, 0, sizeof(*be));
	be->name = "cpu";
	be->cpu_flags = ms_cpu_detect();
	int amx_rc = amx_permission(&be->cpu_flags);
	char amx_why[96] = "";
	if (amx_rc)
		snprintf(amx_why, sizeof(amx_why), " (AMX present, but Linux refused tile state: %s)",
			 strerror(-amx_rc));
	be->exact = o->exact;
	be->dense_int8 = o->dense_int8;
	int rc = choose_kernels(be, o->kernels, amx_rc ? amx_why : NULL, err);
	if (rc || (rc = choose_products(be, o->attn_products, err)))
		return rc;
	be->numa_nodes = numa_available() >= 0 ? numa_num_configured_nodes() : 1;
	be->numa_nodes = be->numa_nodes > 0 ? be->numa_nodes : 1;
	ms_cpu_set_numa(be, MS_NUMA_AUTO);
	return ms_pool_init(&be->pool, o->threads, true, err);
}

void ms_cpu_set_numa(struct ms_cpu *be, enum ms_numa_mode mode)
{
	be->numa_interleave = be->numa_nodes > 1 && mode != MS_NUMA_OFF;
}

void ms_cpu_weights_begin(struct ms_cpu *be)
{
	if (be->numa_interleave)
		numa_set_interleave_mask(numa_all_nodes_ptr);
}

void ms_cpu_weights_end(struct ms_cpu *be, void *const *maps, const size_t *sizes, int n)
{
	if (!be->numa_interleave)
		return;
	/* Fault the mapped checkpoint in now, under the interleave policy, so
	 * its page-cache pages land on every node rather than wherever the
	 * first forward pass happens to touch them. */
	long pg = sysconf(_SC_PAGESIZE);
	for (int i = 0; i < n; i++) {
		volatile const char *p = maps[i];
		for (size_t off = 0; off < sizes[i]; off += (size_t)pg)
			(void)p[off];
	}
	numa_set_localalloc();
}

void ms_cpu_free(struct ms_cpu *be)
{
	if (!be)
		return;
	ms_cpu_ops_free(be);
	ms_pool_free(&be->pool);
	ms_scratch_free(&be->scratch);
	memset(be, 0, sizeof(*be));
}

const char *ms_cpu_kernel_reason(const struct ms_cpu *be, enum ms_wfmt f)
{
	return (f >= 0 && f < MS_WFMT_COUNT) ? be->reasons[f] : "?";
}

const struct ms_kernel *ms_cpu_find_kernel(const struct ms_cpu *be, enum ms_wfmt f)
{
	return (f >= 0 && f < MS_WFMT_COUNT) ? be->kernels[f][0] : NULL;
}

int ms_cpu_bind(struct ms_cpu *be, struct ms_wmat *w, const struct ms_kernel **k,
		    void **owned, char *why, size_t why_len, struct ms_err *err)
{
	*owned = NULL;
	*k = NULL;
	if (w->fmt < 0 || w->fmt >= MS_WFMT_COUNT)
		return ms_err_set(err, -ENOTSUP, "no kernel computes format %d", (int)w->fmt);
	size_t n = (size_t)snprintf(why, why_len, "%s", be->reasons[w->fmt]);
	for (int i = 0; i < be->n_kernels[w->fmt]; i++) {
		const struct ms_kernel *c = be->kernels[w->fmt][i];
		if (w->exact_acts && c->rounds_acts) {
			if (n < why_len)
				n += (size_t)snprintf(why + n, why_len - n, "; %s skipped: fp32 "
						      "activations kept for this matrix", c->name);
			continue;
		}
		if (c->pack) {
			struct ms_err e2 = {0};
			int rc = c->pack(w, owned, &e2);
			if (rc == -ENOTSUP) {
				/* say why, then try the next candidate */
				if (n < why_len)
					n += (size_t)snprintf(why + n, why_len - n, "; %s declined: %s",
							      c->name, e2.msg);
				continue;
			}
			if (rc)
				return ms_err_set(err, rc, "%s: %s", c->name, e2.msg);
		}
		*k = c;
		return 0;
	}
	return ms_err_set(err, -ENOTSUP, "no kernel computes %s weights", ms_wfmt_name(w->fmt));
}

void ms_kernel_run(const struct ms_kernel *k, const struct ms_wmat *w, int64_t r0, int64_t r1,
		   const void *xq, const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	if (k->gemmq)
		k->gemmq(w, r0, r1, xq, n, y, ldy);
	else
		k->gemm(w, r0, r1, x, ldx, n, y, ldy);
}

/* ---- parallel gemm over row blocks ---- */

/* One pool run over the row blocks of up to MS_GEMM_MULTI_MAX matrices
 * (ms_cpu_gemm is the case of one). The matrices' rows are laid end to
 * end, each rounded up to the kernel's alignment (base[i] is where matrix i
 * starts), and task t is rows [t * per, (t + 1) * per) of that whole: it may
 * end one matrix and begin the next, and every piece starts on a panel. */
struct gemm_job {
	const struct ms_kernel *k;
	int m;
	const struct ms_wmat *w[MS_GEMM_MULTI_MAX];
	const float *bias[MS_GEMM_MULTI_MAX];
	const void *xq[MS_GEMM_MULTI_MAX];
	float *y[MS_GEMM_MULTI_MAX];
	int64_t base[MS_GEMM_MULTI_MAX + 1];
	const float *x;
	int64_t n, rows_per_task;
};

static void gemm_task(void *ctx, int task, int worker)
{
	(void)worker;
	const struct gemm_job *j = ctx;
	int64_t g0 = (int64_t)task * j->rows_per_task, g1 = g0 + j->rows_per_task;
	for (int i = 0; i < j->m; i++) {
		const struct ms_wmat *w = j->w[i];
		int64_t r0 = g0 - j->base[i], r1 = g1 - j->base[i];
		r0 = r0 > 0 ? r0 : 0;
		r1 = r1 < w->rows ? r1 : w->rows;
		if (r0 >= r1)
			continue;
		ms_kernel_run(j->k, w, r0, r1, j->xq[i], j->x, w->cols, j->n, j->y[i], w->rows);
		if (j->bias[i])
			for (int64_t t = 0; t < j->n; t++)
				for (int64_t r = r0; r < r1; r++)
					j->y[i][t * w->rows + r] += j->bias[i][r];
	}
}

int64_t ms_kernel_rows_per_task(const struct ms_kernel *k, int64_t rows, int64_t tasks)
{
	return ms_split_per(rows, tasks, k->row_align > 16 ? k->row_align : 16);
}

/* Each matrix's activations prepared once, for all its row tasks, into a
 * region of its own of the backend's scratch. */
static int gemm_prep(struct ms_cpu *be, struct gemm_job *j)
{
	struct ms_scratch_plan plan = {0};
	size_t at[MS_GEMM_MULTI_MAX];
	for (int i = 0; i < j->m; i++)
		at[i] = ms_scratch_plan_add(&plan, j->k->prep_size(j->w[i], j->n));
	int rc = ms_scratch_reserve(&be->scratch, MS_SCRATCH_GEMM, plan.bytes, NULL);
	for (int i = 0; !rc && i < j->m; i++) {
		void *xq = ms_scratch_at(&be->scratch, MS_SCRATCH_GEMM, at[i]);
		j->k->prep(j->w[i], j->x, j->w[i]->cols, j->n, xq);
		j->xq[i] = xq;
	}
	return rc;
}

int ms_cpu_gemm_multi(struct ms_cpu *be, const struct ms_kernel *k, int m,
			  const struct ms_wmat *const *w, const float *x, int64_t n,
			  float *const *y, const float *const *bias)
{
	/* a kernel that wants a whole matrix in one call gets each on its own */
	for (int i = 0; m > 1 && k->whole && i < m; i++)
		if (k->whole(w[i], n)) {
			int rc = 0;
			for (int q = 0; q < m && !rc; q++)
				rc = ms_cpu_gemm_multi(be, k, 1, &w[q], x, n, &y[q],
							   bias ? &bias[q] : NULL);
			return rc;
		}
	struct gemm_job j = {.k = k, .m = m, .x = x, .n = n};
	const int64_t a = k->row_align > 16 ? k->row_align : 16;
	for (int i = 0; i < m; i++)
		j.base[i + 1] = j.base[i] + (w[i]->rows + a - 1) / a * a;
	/* Tasks per thread: up to 8 tokens the kernels stream DRAM, and four
	 * tasks a thread even out uneven progress. Above, they are
	 * compute-bound and each task's first panels arrive cold (the
	 * kernels' prefetch runs within a task): two a thread (measured, bf16
	 * at 16 tokens on 2 Zen 4 cores, 2048 x 2048, alternating runs:
	 * 0.392-0.432 -> 0.370-0.419 ms). Tasks may span the matrices' ends,
	 * so they stay equal for q, k and v. The split does not affect
	 * results: each row is computed by exactly one task. */
	int64_t per_thread = n > 8 ? 2 : 4;
	j.rows_per_task = ms_kernel_rows_per_task(k, j.base[m], per_thread * be->pool.n_threads);
	for (int i = 0; i < m; i++) {
		j.w[i] = w[i];
		j.y[i] = y[i];
		j.bias[i] = bias ? bias[i] : NULL;
	}
	int rc = k->prep ? gemm_prep(be, &j) : 0;
	if (rc)
		return rc;
	if (m == 1 && k->whole && k->whole(w[0], n)) {
		j.rows_per_task = j.base[1];
		gemm_task(&j, 0, 0);
	} else {
		ms_pool_run(&be->pool, (int)((j.base[m] + j.rows_per_task - 1) / j.rows_per_task),
			    gemm_task, &j);
	}
	for (int i = 0; i < m; i++)
		ms_cpu_count_bytes(be, ms_wmat_bytes(w[i]));
	return 0;
}

int ms_cpu_gemm(struct ms_cpu *be, const struct ms_kernel *k, const struct ms_wmat *w,
		    const float *x, int64_t n, float *y, const float *bias)
{
	return ms_cpu_gemm_multi(be, k, 1, &w, x, n, &y, &bias);
}
