/*
 * test-kernel-table.c: the CPU backend's kernel-choice table
 * (engine/cpu/kernel-table.c), walked for synthetic CPU flag sets: what
 * each --kernels request gets on CPUs this machine is not (no flags,
 * AVX-512 F without BW/VL, Zen 4, Sapphire Rapids with AMX), the errors,
 * and the table's own shape (every entry's flags those of its code, each
 * kind ending in the reference). Portable: nothing here runs a kernel.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "attention.h"
#include "check-run.h"
#include "cpu.h"
#include "kernel-table.h"
#include "moe.h"

#define AVX2_ALL (MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C)
#define AVX512_BASE (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL)
/* AVX-512 F/BW/VL/DQ/VNNI/VBMI/BF16, no AMX (DQ has no flag of ours) */
#define ZEN4 (AVX2_ALL | AVX512_BASE | MS_CPU_AVX512VNNI | MS_CPU_AVX512VBMI | MS_CPU_AVX512BF16)
#define AMX_ALL (MS_CPU_AMX_TILE | MS_CPU_AMX_INT8 | MS_CPU_AMX_BF16)
#define SPR (ZEN4 | AMX_ALL)

static struct ms_kernel_choice choose_ok(const char *set, unsigned flags, bool exact)
{
	struct ms_choose_req rq = {.kernels = set, .cpu_flags = flags, .exact = exact};
	struct ms_kernel_choice c;
	struct ms_err err = {0};
	int rc = ms_kernels_choose(&rq, &c, &err);
	ck_assert_msg(rc == 0, "%s with 0x%x: %d %s", set ? set : "(null)", flags, rc, err.msg);
	return c;
}

/* "a b c": f's candidates by name. */
static const char *names(const struct ms_kernel_choice *c, enum ms_wfmt f, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = '\0';
	for (int i = 0; i < c->n_kernels[f] && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? " " : "", c->kernels[f][i]->name);
	return buf;
}

#define ASSERT_LIST(c, f, want)                                                              \
	do {                                                                                  \
		char b_[256];                                                                 \
		ck_assert_str_eq(names(&(c), (f), b_, sizeof(b_)), (want));                   \
	} while (0)

static const char *rows_name(enum ms_choice_kind kind, enum ms_kset from, unsigned flags)
{
	const struct ms_choice *e = ms_choose_first(kind, from, flags);
	return e ? ms_choice_name(e) : "(none)";
}

static bool any_isa(const struct ms_kernel_choice *c, const char *isa)
{
	for (int f = 0; f < MS_WFMT_COUNT; f++)
		for (int i = 0; i < c->n_kernels[f]; i++)
			if (!strcmp(c->kernels[f][i]->isa, isa))
				return true;
	return false;
}

/* Every entry states its code's flags and set; per kind (and format) the
 * sets run in rank order and the last entry is the reference. */
START_TEST(table_is_well_formed)
{
	for (size_t i = 0; i < ms_kernel_table_len; i++) {
		const struct ms_choice *e = &ms_kernel_table[i];
		const char *n = ms_choice_name(e);
		ck_assert_ptr_nonnull(n);
		if (e->kind == MS_CHOICE_GEMM) {
			ck_assert_ptr_nonnull(e->kernel);
			ck_assert_msg(e->fmt == e->kernel->fmt, "%s: format", n);
			ck_assert_msg(!strcmp(ms_kset_name(e->set), e->kernel->isa), "%s: set", n);
			/* the table and the kernel agree (the table may add the
			 * library condition) */
			ck_assert_msg((e->cpu_flags & ~MS_CPU_ONEDNN_BF16) == e->kernel->cpu_flags,
				      "%s: table 0x%x, kernel 0x%x", n, e->cpu_flags,
				      e->kernel->cpu_flags);
		} else if (e->kind == MS_CHOICE_ATTN) {
			ck_assert_ptr_nonnull(e->attn);
			ck_assert_msg(e->cpu_flags == e->attn->cpu_flags, "%s: flags", n);
			ck_assert_str_eq(ms_kset_name(e->set), e->attn->isa);
		} else if (e->kind == MS_CHOICE_MASK) {
			ck_assert_ptr_nonnull(e->mask);
		} else {
			ck_assert(e->kind == MS_CHOICE_ROWOPS ? e->rowops != NULL : e->swiglu != NULL);
		}
		if (e->set == MS_KSET_REF)
			ck_assert_msg(ms_choice_needs(e) == 0, "%s: the reference needs nothing", n);
		/* the next entry of the same kind and format */
		const struct ms_choice *next = NULL;
		for (size_t j = i + 1; j < ms_kernel_table_len && !next; j++)
			if (ms_kernel_table[j].kind == e->kind &&
			    (e->kind != MS_CHOICE_GEMM || ms_kernel_table[j].fmt == e->fmt))
				next = &ms_kernel_table[j];
		if (next)
			ck_assert_msg(next->set >= e->set, "%s before %s: sets out of order", n,
				      ms_choice_name(next));
		else
			ck_assert_msg(e->set == MS_KSET_REF && !(e->kernel && e->kernel->rounds_acts),
				      "%s ends its kind: not the reference", n);
	}
}
END_TEST

/* The row and attention builds need every -m flag of their libraries. */
START_TEST(row_builds_need_all_their_flags)
{
	for (size_t i = 0; i < ms_kernel_table_len; i++) {
		const struct ms_choice *e = &ms_kernel_table[i];
		if (e->rowops == &ms_rowops_avx512 || e->swiglu == ms_swiglu_row_avx512)
			ck_assert_uint_eq(ms_choice_needs(e), AVX512_BASE);
		if (e->attn == &ms_attn_avx512)
			ck_assert_uint_eq(ms_choice_needs(e), AVX512_BASE | MS_CPU_FMA);
		if (e->attn == &ms_attn_avx512bf16)
			ck_assert_uint_eq(ms_choice_needs(e), AVX512_BASE | MS_CPU_FMA | MS_CPU_AVX512BF16);
	}
	/* AVX-512 F without BW (or without VL): the AVX2 builds */
	unsigned knl = AVX2_ALL | MS_CPU_AVX512F;
	const unsigned partial[] = {knl, knl | MS_CPU_AVX512BW, knl | MS_CPU_AVX512VL};
	for (size_t i = 0; i < 3; i++) {
		ck_assert_str_eq(rows_name(MS_CHOICE_ROWOPS, MS_KSET_AVX512, partial[i]), "avx2-rowops");
		ck_assert_str_eq(rows_name(MS_CHOICE_SWIGLU, MS_KSET_AVX512, partial[i]), "avx2-swiglu");
		ck_assert_str_eq(rows_name(MS_CHOICE_ATTN, MS_KSET_AVX512, partial[i]), "avx2-attn");
		/* the AVX-512 mask writer needs F alone */
		ck_assert_str_eq(rows_name(MS_CHOICE_MASK, MS_KSET_AVX512, partial[i]), "avx512-mask");
		ck_assert_ptr_eq(ms_attn_select("avx512", partial[i]), &ms_attn_avx2);
	}
	ck_assert_str_eq(rows_name(MS_CHOICE_ROWOPS, MS_KSET_AVX512, AVX512_BASE), "avx512-rowops");
	ck_assert_str_eq(rows_name(MS_CHOICE_SWIGLU, MS_KSET_AVX512, AVX512_BASE), "avx512-swiglu");
	ck_assert_str_eq(rows_name(MS_CHOICE_ATTN, MS_KSET_AVX512, AVX512_BASE), "ref-attn");
	/* the whole choice for such a CPU: the avx2 set, its builds */
	struct ms_kernel_choice c = choose_ok("auto", knl | MS_CPU_AVX512BW, false);
	ck_assert_int_eq(c.set, MS_KSET_AVX2);
	ck_assert_ptr_eq(c.rowops, &ms_rowops_avx2);
	ck_assert(c.swiglu_row == ms_swiglu_row_avx2);
	ck_assert_ptr_eq(c.attn, &ms_attn_avx2);
	ASSERT_LIST(c, MS_WFMT_F32, "avx2-f32 ref-f32");
	ck_assert(!any_isa(&c, "avx512"));
}
END_TEST

START_TEST(no_flags_gets_the_reference)
{
	for (int ex = 0; ex < 2; ex++) {
		struct ms_kernel_choice c = choose_ok(NULL, 0, ex);
		ck_assert_int_eq(c.set, MS_KSET_REF);
		for (int f = 0; f < MS_WFMT_COUNT; f++) {
			ck_assert_int_eq(c.n_kernels[f], 1);
			ck_assert_ptr_eq(c.kernels[f][0], &ms_kernels_ref[f]);
			ck_assert_str_eq(c.reasons[f], "auto: best set ref");
		}
		ck_assert_ptr_eq(c.rowops, &ms_rowops_generic);
		ck_assert(c.swiglu_row == ms_swiglu_row);
		ck_assert_ptr_eq(c.attn, &ms_attn_ref);
	}
	ck_assert_ptr_eq(ms_attn_select(NULL, 0), &ms_attn_ref);
	/* only FMA and F16C: still nothing but the reference */
	struct ms_kernel_choice c = choose_ok("auto", MS_CPU_FMA | MS_CPU_F16C, false);
	ck_assert_int_eq(c.set, MS_KSET_REF);
	ck_assert_ptr_eq(c.attn, &ms_attn_ref);
}
END_TEST

/* Zen 4: what this project's CI machine gets (must not change). */
START_TEST(zen4_choice)
{
	struct ms_kernel_choice c = choose_ok("auto", ZEN4 | MS_CPU_ONEDNN_BF16, false);
	ck_assert_int_eq(c.set, MS_KSET_AVX512);
	ASSERT_LIST(c, MS_WFMT_F32, "avx512-f32 avx2-f32 ref-f32");
	ASSERT_LIST(c, MS_WFMT_F16, "avx512-f16 avx2-f16 ref-f16");
	ASSERT_LIST(c, MS_WFMT_BF16, "avx512bf16-vnni2 onednn-bf16 avx512-bf16 avx2-bf16 ref-bf16");
	ASSERT_LIST(c, MS_WFMT_MXFP4,
		    "avx512vbmi-q8-mxfp4 avx512vnni-q8-mxfp4 avx512-mxfp4 avx2-q8-mxfp4 ref-mxfp4");
	ASSERT_LIST(c, MS_WFMT_INTQ, "avx512vnni-q8-intq avx512-intq avx2-q8-intq ref-intq");
	ASSERT_LIST(c, MS_WFMT_FP8, "avx512-fp8 ref-fp8");
	ck_assert_str_eq(c.reasons[MS_WFMT_F32], "auto: best set avx512");
	ck_assert_str_eq(c.reasons[MS_WFMT_BF16],
			 "auto: best set avx512 (avx512bf16-vnni2, bf16 activations; oneDNN behind it)");
	ck_assert_str_eq(c.reasons[MS_WFMT_MXFP4], "auto: best set avx512 (rounds activations)");
	ck_assert_ptr_eq(c.rowops, &ms_rowops_avx512);
	ck_assert(c.swiglu_row == ms_swiglu_row_avx512);
	ck_assert_ptr_eq(c.attn, &ms_attn_avx512bf16);
	/* libdnnl without native bf16: no oneDNN */
	c = choose_ok("avx512", ZEN4, false);
	ASSERT_LIST(c, MS_WFMT_BF16, "avx512bf16-vnni2 avx512-bf16 avx2-bf16 ref-bf16");
	ck_assert_str_eq(c.reasons[MS_WFMT_BF16], "forced: set avx512 (rounds activations)");
	/* without VBMI: the VNNI MXFP4 kernel leads */
	c = choose_ok("auto", ZEN4 & ~MS_CPU_AVX512VBMI, false);
	ASSERT_LIST(c, MS_WFMT_MXFP4, "avx512vnni-q8-mxfp4 avx512-mxfp4 avx2-q8-mxfp4 ref-mxfp4");
	/* --exact: nothing that rounds activations */
	c = choose_ok("auto", ZEN4 | MS_CPU_ONEDNN_BF16, true);
	ASSERT_LIST(c, MS_WFMT_BF16, "avx512-bf16 avx2-bf16 ref-bf16");
	ASSERT_LIST(c, MS_WFMT_MXFP4, "avx512-mxfp4 ref-mxfp4");
	ASSERT_LIST(c, MS_WFMT_INTQ, "avx512-intq ref-intq");
}
END_TEST

/* AMX, which this machine lacks: the tile kernels first, oneDNN still
 * behind VDPBF16PS, never the tile model under auto. */
START_TEST(amx_choice)
{
	struct ms_kernel_choice c = choose_ok(NULL, SPR | MS_CPU_ONEDNN_BF16, false);
	ck_assert_int_eq(c.set, MS_KSET_AMX);
	ASSERT_LIST(c, MS_WFMT_BF16,
		    "amx-bf16 avx512bf16-vnni2 onednn-bf16 avx512-bf16 avx2-bf16 ref-bf16");
	ASSERT_LIST(c, MS_WFMT_MXFP4, "amx-mxfp4 avx512vbmi-q8-mxfp4 avx512vnni-q8-mxfp4 "
				      "avx512-mxfp4 avx2-q8-mxfp4 ref-mxfp4");
	ASSERT_LIST(c, MS_WFMT_INTQ, "amx-intq avx512vnni-q8-intq avx512-intq avx2-q8-intq ref-intq");
	ASSERT_LIST(c, MS_WFMT_F32, "avx512-f32 avx2-f32 ref-f32");
	ck_assert_str_eq(c.reasons[MS_WFMT_BF16],
			 "auto: best set amx (amx-bf16, bf16 activations; oneDNN behind it)");
	ck_assert_str_eq(c.reasons[MS_WFMT_F32], "set amx has no usable f32 kernel: avx512");
	ck_assert(!any_isa(&c, "amx-sim"));
	ck_assert_ptr_eq(c.rowops, &ms_rowops_avx512);
	ck_assert_ptr_eq(c.attn, &ms_attn_avx512bf16);
	/* one AMX flag missing: not the amx set */
	c = choose_ok("auto", (SPR & ~MS_CPU_AMX_BF16) | MS_CPU_ONEDNN_BF16, false);
	ck_assert_int_eq(c.set, MS_KSET_AVX512);
	ck_assert(!any_isa(&c, "amx"));
	/* --exact with amx forced: every tile kernel rounds, avx512 names it */
	c = choose_ok("amx", SPR, true);
	ck_assert_int_eq(c.set, MS_KSET_AVX512);
	ck_assert_str_eq(c.reasons[MS_WFMT_BF16], "forced: set avx512");
}
END_TEST

/* The tile model: only when named, its kernels first, no oneDNN (its
 * choice hangs on a timing). */
START_TEST(amx_sim_forced_only)
{
	struct ms_kernel_choice c = choose_ok("amx-sim", ZEN4 | MS_CPU_ONEDNN_BF16, false);
	ck_assert_int_eq(c.set, MS_KSET_AMX_SIM);
	ASSERT_LIST(c, MS_WFMT_BF16, "amx-sim-bf16 avx512bf16-vnni2 avx512-bf16 avx2-bf16 ref-bf16");
	ASSERT_LIST(c, MS_WFMT_MXFP4, "amx-sim-mxfp4 avx512vbmi-q8-mxfp4 avx512vnni-q8-mxfp4 "
				      "avx512-mxfp4 avx2-q8-mxfp4 ref-mxfp4");
	ck_assert_str_eq(c.reasons[MS_WFMT_BF16], "forced: set amx-sim (rounds activations)");
	ck_assert_str_eq(c.reasons[MS_WFMT_FP8], "set amx-sim has no usable fp8 kernel: avx512");
	ck_assert(!any_isa(&c, "amx"));
	ck_assert_ptr_eq(c.rowops, &ms_rowops_avx512);
	ck_assert_ptr_eq(c.attn, &ms_attn_avx512bf16);
	/* --exact: nothing of the tile model keeps fp32 activations */
	c = choose_ok("amx-sim", ZEN4, true);
	ck_assert_int_eq(c.set, MS_KSET_AVX512);
	ck_assert(!any_isa(&c, "amx-sim"));
	/* never under another request */
	const char *others[] = {NULL, "auto", "amx", "avx512"};
	for (size_t i = 0; i < 4; i++) {
		c = choose_ok(others[i], SPR | MS_CPU_ONEDNN_BF16, false);
		ck_assert(!any_isa(&c, "amx-sim"));
	}
}
END_TEST

/* A forced set caps the search at its rank: avx2 never gets AVX-512 code,
 * ref only the reference. */
START_TEST(forced_sets_cap_the_search)
{
	struct ms_kernel_choice c = choose_ok("avx2", SPR | MS_CPU_ONEDNN_BF16, false);
	ck_assert_int_eq(c.set, MS_KSET_AVX2);
	ck_assert(!any_isa(&c, "avx512") && !any_isa(&c, "amx"));
	ASSERT_LIST(c, MS_WFMT_MXFP4, "avx2-q8-mxfp4 ref-mxfp4");
	ASSERT_LIST(c, MS_WFMT_FP8, "ref-fp8");
	ck_assert_str_eq(c.reasons[MS_WFMT_F32], "forced: set avx2");
	ck_assert_str_eq(c.reasons[MS_WFMT_FP8], "set avx2 has no usable fp8 kernel: ref");
	ck_assert_ptr_eq(c.rowops, &ms_rowops_avx2);
	ck_assert(c.swiglu_row == ms_swiglu_row_avx2);
	ck_assert_ptr_eq(c.attn, &ms_attn_avx2);
	c = choose_ok("ref", SPR | MS_CPU_ONEDNN_BF16, false);
	ck_assert_int_eq(c.set, MS_KSET_REF);
	for (int f = 0; f < MS_WFMT_COUNT; f++) {
		ck_assert_int_eq(c.n_kernels[f], 1);
		ck_assert_str_eq(c.reasons[f], "forced: set ref");
	}
	ck_assert_ptr_eq(c.rowops, &ms_rowops_generic);
	ck_assert_ptr_eq(c.attn, &ms_attn_ref);
	ck_assert_ptr_eq(ms_attn_select("ref", SPR), &ms_attn_ref);
	ck_assert_ptr_eq(ms_attn_select("avx2", SPR), &ms_attn_avx2);
	ck_assert_ptr_eq(ms_attn_select("amx", SPR), &ms_attn_avx512bf16);
	ck_assert_ptr_eq(ms_attn_select("amx-sim", SPR), &ms_attn_avx512bf16);
	ck_assert_ptr_eq(ms_attn_select("amx", SPR & ~MS_CPU_AVX512BF16), &ms_attn_avx512);
}
END_TEST

/* Unknown names and sets this CPU cannot run: errors that say which, and
 * what is missing. */
START_TEST(errors_name_the_set)
{
	const char *bad[] = {"sse9", "", "avx512bf16", "AUTO", "avx2 "};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ms_choose_req rq = {.kernels = bad[i], .cpu_flags = SPR};
		struct ms_kernel_choice c;
		struct ms_err err = {0};
		ck_assert_int_eq(ms_kernels_choose(&rq, &c, &err), -EINVAL);
		char want[64];
		snprintf(want, sizeof(want), "\"%s\"", bad[i]);
		ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, ms_cpu_kernel_sets),
			      "message: %s", err.msg);
		ck_assert_int_eq(c.n_kernels[MS_WFMT_F32], 0);
	}
	struct {
		const char *set;
		unsigned flags;
		const char *msg;
	} lacks[] = {
		{"amx", ZEN4, "--kernels amx: this CPU lacks amx-tile amx-int8 amx-bf16 (tiles off)"},
		{"amx-sim", ZEN4 & ~MS_CPU_AVX512VNNI,
		 "--kernels amx-sim: this CPU lacks avx512vnni (tiles off)"},
		{"avx512", AVX2_ALL, "--kernels avx512: this CPU lacks avx512f avx512bw avx512vl (tiles off)"},
		{"avx512", AVX2_ALL | MS_CPU_AVX512F | MS_CPU_AVX512BW,
		 "--kernels avx512: this CPU lacks avx512vl (tiles off)"},
		{"avx2", MS_CPU_AVX2 | MS_CPU_FMA, "--kernels avx2: this CPU lacks f16c (tiles off)"},
	};
	for (size_t i = 0; i < sizeof(lacks) / sizeof(lacks[0]); i++) {
		struct ms_choose_req rq = {.kernels = lacks[i].set, .cpu_flags = lacks[i].flags,
					   .lacks_note = " (tiles off)"};
		struct ms_kernel_choice c;
		struct ms_err err = {0};
		ck_assert_int_eq(ms_kernels_choose(&rq, &c, &err), -ENOTSUP);
		ck_assert_str_eq(err.msg, lacks[i].msg);
	}
	/* ref runs anywhere */
	choose_ok("ref", 0, false);
}
END_TEST

/* Every set's name is in the list --help and --kernels validation use, and
 * a note reaches every reason. */
START_TEST(set_names_and_notes)
{
	char want[128] = "auto";
	for (int s = 0; s < MS_KSET_COUNT; s++) {
		size_t l = strlen(want);
		snprintf(want + l, sizeof(want) - l, ", %s", ms_kset_name((enum ms_kset)s));
		enum ms_kset got;
		bool any;
		ck_assert_int_eq(ms_kset_parse(ms_kset_name((enum ms_kset)s), &got, &any, NULL), 0);
		ck_assert_int_eq(got, s);
		ck_assert(!any);
	}
	ck_assert_str_eq(ms_cpu_kernel_sets, want);
	struct ms_choose_req rq = {.kernels = "auto", .cpu_flags = ZEN4,
				   .reason_note = "; amx off: tile state refused"};
	struct ms_kernel_choice c;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_kernels_choose(&rq, &c, &err), 0);
	ck_assert_str_eq(c.reasons[MS_WFMT_F32], "auto: best set avx512; amx off: tile state refused");
}
END_TEST

/* No request on any CPU has more candidates than the backend holds, so
 * none is ever left out (the table grows, this test says when
 * MS_KERNEL_CANDIDATES must). */
START_TEST(candidates_fit)
{
	for (int s = 0; s < MS_KSET_COUNT; s++)
		for (int f = 0; f < MS_WFMT_COUNT; f++) {
			int n = 0;
			for (size_t i = 0; i < ms_kernel_table_len; i++) {
				const struct ms_choice *e = &ms_kernel_table[i];
				bool forced_only = e->set == MS_KSET_AMX_SIM;
				n += e->kind == MS_CHOICE_GEMM && (int)e->fmt == f && (int)e->set >= s &&
				     (!forced_only || (int)e->set == s);
			}
			ck_assert_msg(n <= MS_KERNEL_CANDIDATES, "set %s, %s: %d candidates",
				      ms_kset_name((enum ms_kset)s), ms_wfmt_name((enum ms_wfmt)f), n);
		}
	/* and the fullest lists do end in the reference */
	struct ms_kernel_choice c = choose_ok("auto", ~0u, false);
	for (int f = 0; f < MS_WFMT_COUNT; f++)
		ck_assert_ptr_eq(c.kernels[f][c.n_kernels[f] - 1], &ms_kernels_ref[f]);
}
END_TEST

/* The backend on this machine keeps the table's choice, be->attn
 * included, and ms_attn_select agrees with it. */
START_TEST(backend_keeps_the_choice)
{
	const char *sets[] = {"auto", "avx512", "avx2", "ref", "amx-sim"};
	for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
		struct ms_cpu be;
		struct ms_err err = {0};
		if (ms_cpu_init(&be, sets[i], 1, &err))
			continue; /* a set this CPU lacks */
		ck_assert_ptr_nonnull(be.attn);
		ck_assert_ptr_eq(be.attn, ms_attn_select(be.isa, be.cpu_flags));
		enum ms_kset s;
		bool any;
		ck_assert_int_eq(ms_kset_parse(be.isa, &s, &any, NULL), 0);
		ck_assert_ptr_eq(be.rowops, ms_choose_first(MS_CHOICE_ROWOPS, s, be.cpu_flags)->rowops);
		ck_assert(be.swiglu_row == ms_choose_first(MS_CHOICE_SWIGLU, s, be.cpu_flags)->swiglu);
		for (int f = 0; f < MS_WFMT_COUNT; f++)
			ck_assert_ptr_eq(be.kernels[f][be.n_kernels[f] - 1], &ms_kernels_ref[f]);
		ms_cpu_free(&be);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kernel-table");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, table_is_well_formed);
	tcase_add_test(tc, row_builds_need_all_their_flags);
	tcase_add_test(tc, no_flags_gets_the_reference);
	tcase_add_test(tc, zen4_choice);
	tcase_add_test(tc, amx_choice);
	tcase_add_test(tc, amx_sim_forced_only);
	tcase_add_test(tc, forced_sets_cap_the_search);
	tcase_add_test(tc, errors_name_the_set);
	tcase_add_test(tc, set_names_and_notes);
	tcase_add_test(tc, candidates_fit);
	tcase_add_test(tc, backend_keeps_the_choice);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
