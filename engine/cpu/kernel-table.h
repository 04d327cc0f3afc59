/*
 * kernel-table.h: the CPU backend's one kernel-choice table.
 *
 * Everything the backend picks for the CPU at start-up comes from one
 * ordered array (kernel-table.c), after pipewire's fmt-ops.c: per weight
 * format the gemm kernels to try (oneDNN among them), the row operations,
 * the experts' activation row and the attention kernel. Each entry says
 * what it supplies, the --kernels set it belongs to and every CPU flag its
 * code is built with; for each thing supplied the entries run most
 * specific first, the portable reference (no flags) last. A choice walks
 * the table in order and keeps the entries the CPU runs and the requested
 * set allows: for gemm all of them (the candidates, in order), for the
 * others the first.
 */
#ifndef MS_KERNEL_TABLE_H
#define MS_KERNEL_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu.h"

struct ms_attn_kernel;

/* The --kernels sets, most specific first: a search begun at a set draws
 * on the entries of that set and of the sets after it. */
enum ms_kset {
	MS_KSET_AMX,
	MS_KSET_AMX_SIM, /* forced only: drawn on only when named */
	MS_KSET_AVX512,
	MS_KSET_AVX2,
	MS_KSET_REF,
	MS_KSET_COUNT,
};

/* What an entry supplies. */
enum ms_choice_kind {
	MS_CHOICE_GEMM,   /* a gemm kernel for one weight format: be->kernels */
	MS_CHOICE_ROWOPS, /* RMSNorm, rotary embedding, residual add: be->rowops */
	MS_CHOICE_SWIGLU, /* the experts' activation row: be->swiglu_row */
	MS_CHOICE_ATTN,   /* the attention chunk kernel: be->attn */
	MS_CHOICE_MASK,   /* structured outputs' logit writer: the backend's mask_words */
};

/* One row of the table. Of kernel, rowops, swiglu, attn and mask, the one
 * its kind names is set. */
struct ms_choice {
	enum ms_choice_kind kind;
	enum ms_wfmt fmt;       /* MS_CHOICE_GEMM: the format it computes */
	enum ms_kset set;       /* the --kernels set it belongs to */
	const char *name;       /* rowops, swiglu, mask: their build's name (ms_choice_name) */
	/* Every MS_CPU_* the code is built for (the -m options of each
	 * library it comes from, meson.build), all required. */
	unsigned cpu_flags;
	/* Taken or declined by a timing when a matrix is packed: never drawn
	 * under a forced-only set, whose candidates tests rely on. */
	bool measured;
	const struct ms_kernel *kernel;
	const struct ms_rowops *rowops;
	ms_swiglu_row_fn swiglu;
	const struct ms_attn_kernel *attn;
	ms_mask_words_fn *mask;
};

/* The table itself, for tests. */
extern const struct ms_choice ms_kernel_table[];
extern const size_t ms_kernel_table_len;

/* "auto" (or NULL): *set the first set, *any true. A set's name: that
 * set, *any false. Else -EINVAL, naming it and the known sets. */
int ms_kset_parse(const char *name, enum ms_kset *set, bool *any, struct ms_err *err);
const char *ms_kset_name(enum ms_kset s);

/* Every flag an entry needs: its own, and those its kernel declares. */
unsigned ms_choice_needs(const struct ms_choice *e);

/* The name of what e supplies ("avx512-f32", "avx2-rowops", "ref-attn"). */
const char *ms_choice_name(const struct ms_choice *e);

/* The first entry of kind (not MS_CHOICE_GEMM) that a search begun at set
 * `from` draws on a CPU with cpu_flags; NULL when none (the table ends
 * each kind with one that needs nothing). */
const struct ms_choice *ms_choose_first(enum ms_choice_kind kind, enum ms_kset from,
					unsigned cpu_flags);

/* What a backend asks for. */
struct ms_choose_req {
	const char *kernels;     /* --kernels: "auto" or NULL, or a set's name */
	/* MS_CPU_* this machine runs, MS_CPU_ONEDNN_BF16 included where
	 * ms_dense_onednn_usable says so */
	unsigned cpu_flags;
	bool exact;              /* --exact: no kernel that rounds activations */
	const char *lacks_note;  /* appended as is to a forced set's "lacks" error, or NULL */
	const char *reason_note; /* appended as is to every reason, or NULL */
};

/* What the table gives it. */
struct ms_kernel_choice {
	enum ms_kset set;        /* the set that names the backend (be->isa) */
	/* per format the candidates in order, the reference last */
	const struct ms_kernel *kernels[MS_WFMT_COUNT][MS_KERNEL_CANDIDATES];
	int n_kernels[MS_WFMT_COUNT];
	char reasons[MS_WFMT_COUNT][MS_KERNEL_REASON_MAX]; /* why the first candidate */
	const struct ms_rowops *rowops;
	ms_swiglu_row_fn swiglu_row;
	const struct ms_attn_kernel *attn;
	ms_mask_words_fn *mask_words;
};

/* Walk the table for rq. -EINVAL for an unknown set name, -ENOTSUP for a
 * forced set this CPU cannot run (naming the flags it lacks); c is then
 * cleared. */
int ms_kernels_choose(const struct ms_choose_req *rq, struct ms_kernel_choice *c,
		      struct ms_err *err);

#endif
