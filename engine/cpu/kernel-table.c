/*
 * kernel-table.c: the one table the CPU backend chooses its code from (see
 * kernel-table.h), and the walks over it.
 *
 * To add a kernel (or a row or attention build): build its file in a
 * library of its own with its -m options (meson.build), then give it an
 * entry here, among those that supply the same thing, above every entry it
 * should be preferred to, with every flag of every library its code comes
 * from. A new set goes into enum ms_kset in rank order, into ksets[] and
 * into ms_cpu_kernel_sets.
 */
#include "kernel-table.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "attention.h"
#include "dense-onednn.h"
#include "moe.h"

/* ---- the sets ---- */

static const struct {
	const char *name;
	/* Only when named: never auto, never drawn on by another set. The
	 * tile model is slow; it is there so tests run the tile code on CPUs
	 * without AMX. */
	bool forced_only;
} ksets[MS_KSET_COUNT] = {
	[MS_KSET_AMX] = {"amx", false},
	[MS_KSET_AMX_SIM] = {"amx-sim", true},
	[MS_KSET_AVX512] = {"avx512", false},
	[MS_KSET_AVX2] = {"avx2", false},
	[MS_KSET_REF] = {"ref", false},
};

const char ms_cpu_kernel_sets[] = "auto, amx, amx-sim, avx512, avx2, ref";

/* ---- the table ---- */

/* The -m options of meson.build's ms_isa_libs, as MS_CPU_* flags: what the
 * compiler may use anywhere in that library. */
#define F_AVX512 (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL) /* ms-rowops_avx512 */
#define F_AVX512_FMA (F_AVX512 | MS_CPU_FMA)                      /* ms-attn-avx512 */
#define F_AVX512_ALL (F_AVX512_FMA | MS_CPU_F16C)                 /* ms-avx512 */
#define F_VNNI (F_AVX512_ALL | MS_CPU_AVX512VNNI)  /* ms-q8-avx512, ms-amx-sim */
#define F_VBMI (F_VNNI | MS_CPU_AVX512VBMI)        /* ms-q8-avx512vbmi */
#define F_BF16 (F_AVX512_FMA | MS_CPU_AVX512BF16)  /* ms-bf16-avx512 */
#define F_AMX (F_VNNI | MS_CPU_AVX512BF16 | MS_CPU_AMX_TILE | MS_CPU_AMX_INT8 | MS_CPU_AMX_BF16)
#define F_AVX2 MS_CPU_AVX2                            /* ms-rowops_avx2 */
#define F_AVX2_FMA (MS_CPU_AVX2 | MS_CPU_FMA)
#define F_AVX2_ALL (F_AVX2_FMA | MS_CPU_F16C) /* ms-avx2, ms-q8-avx2, ms-attn-avx2 */

#define GEMM(FMT, SET, FLAGS, K)                                                               \
	{.kind = MS_CHOICE_GEMM, .fmt = MS_WFMT_##FMT, .set = MS_KSET_##SET,                 \
	 .cpu_flags = (FLAGS), .kernel = &(K)}
#define ROWOPS(SET, FLAGS, NAME, R)                                                            \
	{.kind = MS_CHOICE_ROWOPS, .set = MS_KSET_##SET, .name = NAME, .cpu_flags = (FLAGS),   \
	 .rowops = &(R)}
#define MASK(SET, FLAGS, NAME, FN)                                                             \
	{.kind = MS_CHOICE_MASK, .set = MS_KSET_##SET, .name = NAME, .cpu_flags = (FLAGS),     \
	 .mask = (FN)}
#define SWIGLU(SET, FLAGS, NAME, FN)                                                           \
	{.kind = MS_CHOICE_SWIGLU, .set = MS_KSET_##SET, .name = NAME, .cpu_flags = (FLAGS),   \
	 .swiglu = (FN)}
#define ATTN(SET, FLAGS, K)                                                                    \
	{.kind = MS_CHOICE_ATTN, .set = MS_KSET_##SET, .cpu_flags = (FLAGS), .attn = &(K)}

#define AVX512(ROW) ms_kernels_avx512[MS_K_AVX512##ROW]
#define AVX2(ROW) ms_kernels_avx2[MS_K_AVX2##ROW]
#define REF(FMT) ms_kernels_ref[MS_WFMT_##FMT]

/* Per thing supplied, most specific first; within it, sets in rank order
 * (a forced set takes its own entries and those below). */
const struct ms_choice ms_kernel_table[] = {
	GEMM(F32, AVX512, F_AVX512_ALL, AVX512(_F32)),
	GEMM(F32, AVX2, F_AVX2_ALL, AVX2(_F32)),
	GEMM(F32, REF, 0, REF(F32)),

	GEMM(F16, AVX512, F_AVX512_ALL, AVX512(_F16)),
	GEMM(F16, AVX2, F_AVX2_ALL, AVX2(_F16)),
	GEMM(F16, REF, 0, REF(F16)),

	/* bf16: tiles, then the packed VDPBF16PS kernel, which streams batch-1
	 * decode near DRAM bandwidth where oneDNN does not (M = 1 GEMV: ~24
	 * of ~33 GB/s on 2 Zen 4 cores); oneDNN right behind it takes the
	 * matrices it declines, where oneDNN's pack measures itself faster
	 * than avx512-bf16 (and declines a shape where it never wins). */
	GEMM(BF16, AMX, F_AMX, ms_kernels_amx[MS_K_AMX_BF16]),
	GEMM(BF16, AMX_SIM, F_VNNI, ms_kernels_amx_sim[MS_K_AMX_BF16]),
	GEMM(BF16, AVX512, F_AVX512_ALL | F_BF16, AVX512(BF16_VNNI2)),
	{.kind = MS_CHOICE_GEMM, .fmt = MS_WFMT_BF16, .set = MS_KSET_AVX512,
	 /* dense-onednn.c calls avx512-bf16 (ms-avx512); libdnnl must
	  * multiply bf16 natively, else its matmul is a slow fallback */
	 .cpu_flags = F_AVX512_ALL | F_BF16 | MS_CPU_ONEDNN_BF16, .measured = true,
	 .kernel = &ms_kernel_onednn_bf16},
	GEMM(BF16, AVX512, F_AVX512_ALL, AVX512(_BF16)),
	GEMM(BF16, AVX2, F_AVX2_ALL, AVX2(_BF16)),
	GEMM(BF16, REF, 0, REF(BF16)),

	/* MXFP4 and INTQ: int8 activations (tiles from 32 tokens, VNNI
	 * below), fp32 ones for what they decline */
	GEMM(MXFP4, AMX, F_AMX, ms_kernels_amx[MS_K_AMX_MXFP4]),
	GEMM(MXFP4, AMX_SIM, F_VNNI, ms_kernels_amx_sim[MS_K_AMX_MXFP4]),
	GEMM(MXFP4, AVX512, F_VBMI, AVX512(VBMI_Q8_MXFP4)),
	GEMM(MXFP4, AVX512, F_VNNI, AVX512(VNNI_Q8_MXFP4)),
	GEMM(MXFP4, AVX512, F_AVX512_ALL, AVX512(_MXFP4)),
	GEMM(MXFP4, AVX2, F_AVX2_ALL, AVX2(_Q8_MXFP4)),
	GEMM(MXFP4, REF, 0, REF(MXFP4)),

	GEMM(INTQ, AMX, F_AMX, ms_kernels_amx[MS_K_AMX_INTQ]),
	GEMM(INTQ, AMX_SIM, F_VNNI, ms_kernels_amx_sim[MS_K_AMX_INTQ]),
	GEMM(INTQ, AVX512, F_VNNI, AVX512(VNNI_Q8_INTQ)),
	GEMM(INTQ, AVX512, F_AVX512_ALL, AVX512(_INTQ)),
	GEMM(INTQ, AVX2, F_AVX2_ALL, AVX2(_Q8_INTQ)),
	GEMM(INTQ, REF, 0, REF(INTQ)),

	GEMM(FP8, AVX512, F_AVX512_ALL, AVX512(_FP8)),
	GEMM(FP8, REF, 0, REF(FP8)),

	/* rowops.c and swiglu.c, built together three times at -O3 without
	 * FMA contraction: every build gives the same bits */
	ROWOPS(AVX512, F_AVX512, "avx512-rowops", ms_rowops_avx512),
	ROWOPS(AVX2, F_AVX2, "avx2-rowops", ms_rowops_avx2),
	ROWOPS(REF, 0, "generic-rowops", ms_rowops_generic),

	SWIGLU(AVX512, F_AVX512, "avx512-swiglu", ms_swiglu_row_avx512),
	SWIGLU(AVX2, F_AVX2, "avx2-swiglu", ms_swiglu_row_avx2),
	SWIGLU(REF, 0, "generic-swiglu", ms_swiglu_row),

	ATTN(AVX512, F_AVX512_FMA | MS_CPU_AVX512BF16, ms_attn_avx512bf16),
	ATTN(AVX512, F_AVX512_FMA, ms_attn_avx512),
	ATTN(AVX2, F_AVX2_ALL, ms_attn_avx2),
	ATTN(REF, 0, ms_attn_ref),

	/* mask-words.c (target attributes) and backend.c's portable one: the
	 * same floats */
	MASK(AVX512, MS_CPU_AVX512F, "avx512-mask", ms_mask_words_avx512),
	MASK(AVX2, MS_CPU_AVX2, "avx2-mask", ms_mask_words_avx2),
	MASK(REF, 0, "generic-mask", ms_mask_words_ref),
};
const size_t ms_kernel_table_len = sizeof(ms_kernel_table) / sizeof(ms_kernel_table[0]);

/* ---- the walks ---- */

int ms_kset_parse(const char *name, enum ms_kset *set, bool *any, struct ms_err *err)
{
	*any = !name || !strcmp(name, "auto");
	*set = (enum ms_kset)0;
	for (int s = 0; !*any && s < MS_KSET_COUNT; s++)
		if (!strcmp(name, ksets[s].name)) {
			*set = (enum ms_kset)s;
			return 0;
		}
	if (*any)
		return 0;
	return ms_err_set(err, -EINVAL, "--kernels: unknown kernel set \"%s\" (known: %s)", name,
			  ms_cpu_kernel_sets);
}

const char *ms_kset_name(enum ms_kset s)
{
	return s >= 0 && s < MS_KSET_COUNT ? ksets[s].name : "?";
}

unsigned ms_choice_needs(const struct ms_choice *e)
{
	unsigned own = e->kernel ? e->kernel->cpu_flags : e->attn ? e->attn->cpu_flags : 0;
	return e->cpu_flags | own;
}

const char *ms_choice_name(const struct ms_choice *e)
{
	return e->kernel ? e->kernel->name : e->attn ? e->attn->name : e->name;
}

/* May a search begun at set `from` draw on e? Entries of that set and the
 * sets after it; a forced-only set's only when it is the one named; a
 * measured one never under a forced-only set. */
static bool in_search(const struct ms_choice *e, enum ms_kset from)
{
	if (e->set < from || (ksets[e->set].forced_only && e->set != from))
		return false;
	return !(e->measured && ksets[from].forced_only);
}

/* Does this CPU run e, and may it under --exact? */
static bool runs(const struct ms_choice *e, unsigned cpu_flags, bool exact)
{
	unsigned need = ms_choice_needs(e);
	return (cpu_flags & need) == need && !(exact && e->kernel && e->kernel->rounds_acts);
}

const struct ms_choice *ms_choose_first(enum ms_choice_kind kind, enum ms_kset from,
					unsigned cpu_flags)
{
	for (size_t i = 0; i < ms_kernel_table_len; i++) {
		const struct ms_choice *e = &ms_kernel_table[i];
		if (e->kind == kind && in_search(e, from) && runs(e, cpu_flags, false))
			return e;
	}
	return NULL;
}

/* A forced set must run here: at least the flags all its gemm entries
 * share (its baseline), else an error naming what is missing. */
static int check_forced(const struct ms_choose_req *rq, enum ms_kset set, struct ms_err *err)
{
	unsigned need = ~0u;
	bool any = false;
	for (size_t i = 0; i < ms_kernel_table_len; i++) {
		const struct ms_choice *e = &ms_kernel_table[i];
		if (e->kind == MS_CHOICE_GEMM && e->set == set) {
			need &= ms_choice_needs(e);
			any = true;
		}
	}
	need = any ? need : 0;
	if ((rq->cpu_flags & need) == need)
		return 0;
	char buf[256];
	return ms_err_set(err, -ENOTSUP, "--kernels %s: this CPU lacks %s%s", rq->kernels,
			  ms_cpu_flags_str(need & ~rq->cpu_flags, buf, sizeof(buf)),
			  rq->lacks_note ? rq->lacks_note : "");
}

/* The set that names the backend: the first, from `from` on, with a gemm
 * kernel this CPU runs (under --exact, forcing amx gives avx512). */
static enum ms_kset naming_set(const struct ms_choose_req *rq, enum ms_kset from)
{
	enum ms_kset best = MS_KSET_REF;
	for (size_t i = 0; i < ms_kernel_table_len; i++) {
		const struct ms_choice *e = &ms_kernel_table[i];
		if (e->kind == MS_CHOICE_GEMM && e->set < best && in_search(e, from) &&
		    runs(e, rq->cpu_flags, rq->exact))
			best = e->set;
	}
	return best;
}

/* Format f's candidates: every gemm entry the search draws on, in table
 * order. The last place is the reference's: a kernel that does not fit
 * before it is left out (a test holds the table to the bound). */
static void collect(const struct ms_choose_req *rq, enum ms_kset from, enum ms_wfmt f,
		    struct ms_kernel_choice *c)
{
	int n = 0;
	for (size_t i = 0; i < ms_kernel_table_len && n < MS_KERNEL_CANDIDATES; i++) {
		const struct ms_choice *e = &ms_kernel_table[i];
		if (e->kind != MS_CHOICE_GEMM || e->fmt != f || !in_search(e, from) ||
		    !runs(e, rq->cpu_flags, rq->exact))
			continue;
		if (n == MS_KERNEL_CANDIDATES - 1 && e->set != MS_KSET_REF)
			continue;
		c->kernels[f][n++] = e->kernel;
	}
	c->n_kernels[f] = n;
}

/* Where oneDNN sits among f's candidates, or -1. */
static int onednn_at(const struct ms_kernel_choice *c, enum ms_wfmt f)
{
	for (int i = 0; i < c->n_kernels[f]; i++)
		if (c->kernels[f][i] == &ms_kernel_onednn_bf16)
			return i;
	return -1;
}

/* Why f's first candidate (inspect shows it per tensor group). */
static void say_why(const struct ms_choose_req *rq, bool any, enum ms_wfmt f,
		    struct ms_kernel_choice *c)
{
	char *r = c->reasons[f];
	size_t len = sizeof(c->reasons[f]);
	const char *how = any ? "auto: best" : "forced:", *set = ms_kset_name(c->set);
	const struct ms_kernel *k0 = c->kernels[f][0];
	int lib = onednn_at(c, f);
	if (lib > 0)
		snprintf(r, len, "%s set %s (%s, bf16 activations; oneDNN behind it)", how, set,
			 k0->name);
	else if (lib == 0)
		snprintf(r, len, "%s set %s (oneDNN where measured faster, else %s; bf16 activations)",
			 how, set, c->kernels[f][1]->name);
	else if (strcmp(k0->isa, set))
		snprintf(r, len, "set %s has no usable %s kernel: %s", set, ms_wfmt_name(f), k0->isa);
	else
		snprintf(r, len, "%s set %s%s", how, set, k0->rounds_acts ? " (rounds activations)" : "");
	if (rq->reason_note) {
		size_t l = strlen(r);
		snprintf(r + l, len - l, "%s", rq->reason_note);
	}
}

/* The row operations, the activation row and attention: the first entry
 * of each from the naming set on. */
static int choose_rows(const struct ms_choose_req *rq, struct ms_kernel_choice *c,
		       struct ms_err *err)
{
	const struct ms_choice *ro = ms_choose_first(MS_CHOICE_ROWOPS, c->set, rq->cpu_flags);
	const struct ms_choice *sw = ms_choose_first(MS_CHOICE_SWIGLU, c->set, rq->cpu_flags);
	const struct ms_choice *at = ms_choose_first(MS_CHOICE_ATTN, c->set, rq->cpu_flags);
	const struct ms_choice *mk = ms_choose_first(MS_CHOICE_MASK, c->set, rq->cpu_flags);
	if (!ro || !sw || !at || !mk)
		return ms_err_set(err, -ENOTSUP, "kernel table: no %s entry runs here",
				  !ro ? "rowops" : !sw ? "swiglu" : !at ? "attention" : "mask");
	c->rowops = ro->rowops;
	c->swiglu_row = sw->swiglu;
	c->attn = at->attn;
	c->mask_words = mk->mask;
	return 0;
}

int ms_kernels_choose(const struct ms_choose_req *rq, struct ms_kernel_choice *c,
		      struct ms_err *err)
{
	memset(c, 0, sizeof(*c));
	enum ms_kset first;
	bool any;
	int rc = ms_kset_parse(rq->kernels, &first, &any, err);
	if (!rc && !any)
		rc = check_forced(rq, first, err);
	if (rc)
		return rc;
	c->set = naming_set(rq, first);
	for (int f = 0; f < MS_WFMT_COUNT && !rc; f++) {
		collect(rq, first, (enum ms_wfmt)f, c);
		if (!c->n_kernels[f])
			rc = ms_err_set(err, -ENOTSUP, "kernel table: no %s kernel runs here",
					ms_wfmt_name((enum ms_wfmt)f));
		else
			say_why(rq, any, (enum ms_wfmt)f, c);
	}
	if (!rc)
		rc = choose_rows(rq, c, err);
	if (rc)
		memset(c, 0, sizeof(*c));
	return rc;
}

/* attention.h's selection for existing callers (be->attn is the same
 * choice): isa is a backend's set, an unknown name or NULL searches the
 * whole table. */
const struct ms_attn_kernel *ms_attn_select(const char *isa, unsigned cpu_flags)
{
	enum ms_kset from;
	bool any;
	if (ms_kset_parse(isa, &from, &any, NULL))
		from = (enum ms_kset)0;
	const struct ms_choice *e = ms_choose_first(MS_CHOICE_ATTN, from, cpu_flags);
	return e ? e->attn : &ms_attn_ref;
}
