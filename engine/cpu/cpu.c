/*
 * cpu.c: CPU feature detection and kernel selection.
 *
 * To add a kernel set: put its kernels in their own file (compiled with
 * their own ISA flags), add its table to kernel_sets[] above "ref" with the
 * CPU flags it needs. auto takes the first set whose flags the CPU has, per
 * format, falling back to ref for formats a set does not cover.
 */
#include "cpu.h"
#include "dense-onednn.h"
#include "kernels-bf16.h"
#include "moe.h"

#include <cpuid.h>
#include <errno.h>
#include <stdlib.h>
#include <numa.h>
#include <sys/mman.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct kernel_set {
	const char *name;
	const struct ms_kernel *list; /* preference order, ends with {0} */
	bool forced_only;             /* only when named: never auto, nor a fallback */
};

/* kernels-amx.c, built for real tiles and on the tile model (amx-sim.h). */
extern const struct ms_kernel ms_kernels_amx[], ms_kernels_amx_sim[];
int ms_amx_request_perm(void);

/* Most specific first; "ref" last. */
static const struct kernel_set kernel_sets[] = {
	{"amx", ms_kernels_amx, false},
	/* the AMX kernels on the software tile model: slow, exact to the SDM's
	 * semantics; lets tests run the tile code paths on CPUs without AMX */
	{"amx-sim", ms_kernels_amx_sim, true},
	{"avx512", ms_kernels_avx512, false},
	{"avx2", ms_kernels_avx2, false},
	{"ref", ms_kernels_ref, false},
};
#define N_SETS (sizeof(kernel_sets) / sizeof(kernel_sets[0]))

const char ms_cpu_kernel_sets[] = "auto, amx, amx-sim, avx512, avx2, ref";

/* A set the search starting at set `first` may draw kernels from. */
static bool set_in_search(size_t s, size_t first)
{
	return !kernel_sets[s].forced_only || s == first;
}

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
				      "avx512vbmi"};
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

static bool kernel_usable(const struct ms_cpu *be, const struct ms_kernel *k)
{
	return (be->cpu_flags & k->cpu_flags) == k->cpu_flags && !(be->exact && k->rounds_acts);
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
	const char *kernels = o->kernels;
	bool any = !kernels || !strcmp(kernels, "auto");
	size_t first = N_SETS;
	for (size_t s = 0; s < N_SETS; s++)
		if (any || !strcmp(kernels, kernel_sets[s].name)) {
			first = s;
			break;
		}
	if (first == N_SETS)
		return ms_err_set(err, -EINVAL, "--kernels: unknown kernel set \"%s\" (known: %s)",
				  kernels, ms_cpu_kernel_sets);
	if (!any) {
		/* A forced set must run here: its baseline kernels at least. */
		unsigned need = ~0u;
		for (const struct ms_kernel *k = kernel_sets[first].list; k->name; k++)
			need &= k->cpu_flags;
		if (!kernel_sets[first].list[0].name)
			need = 0;
		if ((be->cpu_flags & need) != need) {
			char buf[256];
			return ms_err_set(err, -ENOTSUP, "--kernels %s: this CPU lacks %s%s", kernels,
					  ms_cpu_flags_str(need & ~be->cpu_flags, buf, sizeof(buf)),
					  amx_why);
		}
	}
	/* auto: the first set with any kernel this CPU runs names the backend. */
	be->isa = NULL;
	for (size_t s = first; s < N_SETS && !be->isa; s++)
		for (const struct ms_kernel *k = kernel_sets[s].list; k->name && set_in_search(s, first);
		     k++)
			if (kernel_usable(be, k)) {
				be->isa = kernel_sets[s].name;
				break;
			}
	if (!be->isa)
		be->isa = "ref";
	/* The experts' activation: the widest build the set allows (the same
	 * bits from each; the ref set keeps the generic one). */
	bool ref = !strcmp(be->isa, "ref"), avx2 = !strcmp(be->isa, "avx2");
	if (!ref && !avx2 && (be->cpu_flags & MS_CPU_AVX512F)) {
		be->swiglu_row = ms_swiglu_row_avx512;
		be->rowops = &ms_rowops_avx512;
	} else if (!ref && (be->cpu_flags & MS_CPU_AVX2)) {
		be->swiglu_row = ms_swiglu_row_avx2;
		be->rowops = &ms_rowops_avx2;
	} else {
		be->swiglu_row = ms_swiglu_row;
		be->rowops = &ms_rowops_generic;
	}
	/* Candidates per format: the chosen set's usable kernels in order, then
	 * the lower sets' (a set may lack a format, or a CPU one of its
	 * kernels' extensions), the reference always last. */
	for (int f = 0; f < MS_WFMT_COUNT; f++) {
		int n = 0;
		/* oneDNN's bf16 matmul (dense-onednn.c) joins the bf16 candidates
		 * in the avx512 and amx sets where the CPU multiplies bf16
		 * natively; its pack measures it against avx512-bf16 and declines
		 * a shape where it never wins. It goes right after the packed
		 * VDPBF16PS kernel (avx512bf16-vnni2) where that is usable, which
		 * streams batch-1 decode near DRAM bandwidth where oneDNN does
		 * not (M = 1 GEMV: ~24 of ~33 GB/s on 2 Zen 4 cores), else
		 * first. */
		bool onednn = f == MS_WFMT_BF16 &&
			      (!strcmp(be->isa, "avx512") || !strcmp(be->isa, "amx")) &&
			      kernel_usable(be, &ms_kernel_onednn_bf16) &&
			      ms_dense_onednn_usable(be->cpu_flags);
		int onednn_at = 0;
		for (size_t s = first; s + 1 < N_SETS; s++)
			for (const struct ms_kernel *k = kernel_sets[s].list; k->name; k++)
				if (k->fmt == (enum ms_wfmt)f && kernel_usable(be, k) &&
				    set_in_search(s, first) && n < MS_KERNEL_CANDIDATES - 1 - onednn) {
					be->kernels[f][n++] = k;
					if (k->gemmq == ms_bf16_gemmq_avx512)
						onednn_at = n;
				}
		if (onednn) {
			memmove(&be->kernels[f][onednn_at + 1], &be->kernels[f][onednn_at],
				(size_t)(n - onednn_at) * sizeof(be->kernels[f][0]));
			be->kernels[f][onednn_at] = &ms_kernel_onednn_bf16;
			n++;
		}
		be->kernels[f][n++] = &ms_kernels_ref[f];
		be->n_kernels[f] = n;
		const struct ms_kernel *k0 = be->kernels[f][0];
		if (onednn && onednn_at > 0)
			snprintf(be->reasons[f], sizeof(be->reasons[f]),
				 "%s set %s (%s, bf16 activations; oneDNN behind it)",
				 any ? "auto: best" : "forced:", be->isa, k0->name);
		else if (onednn)
			snprintf(be->reasons[f], sizeof(be->reasons[f]),
				 "%s set %s (oneDNN where measured faster, else %s; "
				 "bf16 activations)", any ? "auto: best" : "forced:", be->isa,
				 be->kernels[f][1]->name);
		else if (strcmp(k0->isa, be->isa))
			snprintf(be->reasons[f], sizeof(be->reasons[f]),
				 "set %s has no usable %s kernel: %s", be->isa,
				 ms_wfmt_name((enum ms_wfmt)f), k0->isa);
		else
			snprintf(be->reasons[f], sizeof(be->reasons[f]), "%s set %s%s",
				 any ? "auto: best" : "forced:", be->isa,
				 k0->rounds_acts ? " (rounds activations)" : "");
		if (amx_rc) { /* the CPU has AMX: say why it is not used */
			size_t l = strlen(be->reasons[f]);
			snprintf(be->reasons[f] + l, sizeof(be->reasons[f]) - l,
				 "; amx off: tile state refused");
		}
	}
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
