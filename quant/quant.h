/*
 * quant.h: the quantization registry.
 *
 * A *method* is what quantization_config.quant_method names (or the
 * standalone quantize_config.json / quant_config.json of older GPTQ and AWQ
 * checkpoints): it parses and checks that config early, and says which
 * *scheme* loads each module (a linear projection or a layer's experts). A
 * scheme knows one checkpoint format: the tensors a module needs (checked by
 * name, shape and dtype) and how to repack them after loading into the
 * layout of the kernel the backend chose at start-up. Applying a loaded
 * module is then its kernel: no format or CPU branch runs per token.
 *
 * How to add a format: write quant/<name>.c defining a
 * `const struct ms_quant_method ms_quant_<name>` (and its schemes), declare
 * it below, and add one line to the registry table in quant.c (and the file
 * to quant/meson.build).
 */
#ifndef MS_QUANT_H
#define MS_QUANT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "actq.h"
#include "backend.h"
#include "linear.h"
#include "ms-error.h"
#include "safetensors.h"

struct ms_quant_config;
struct ms_bind_defer;

/* What loading needs besides the checkpoint: the backend the weights are
 * bound to, and quant's own state while a model loads. Zero-init with be
 * set. */
struct ms_qload {
	struct ms_backend *be;
	int no_pack;                 /* > 0 while loading parts of a spliced matrix or an
				      * embedding: their rows are read in place */
	bool table;                  /* loading an embedding: rows gathered by token */
	struct ms_bind_defer *defer; /* matrices waiting for the parallel bind pass */
};

#define MS_QLINEAR_OWNED 5

/* One [out, in] projection as loaded: what the backend computes with
 * (lin: y = act(x) W^T * row_scale + b), and the loader's bookkeeping. */
struct ms_qlinear {
	struct ms_linear lin;           /* weights, fp32 bias (owned), activation
					 * quantization, the kernel chosen at load */
	const char *scheme;             /* scheme that loaded it */
	char why[224];                  /* why that kernel (inspect) */
	char origin[64];                /* what the scheme did first ("requantized ..."),
					 * put before the reason in why */
	void *owned[MS_QLINEAR_OWNED];  /* buffers this layer owns (repacked data) */
	unsigned owned_bufs;            /* bit i: owned[i] is from ms_quant_buf_alloc */
	void *bind_list;                /* the deferred bind pass holding it, or NULL */
	int64_t bind_idx;               /* its entry there */
};

/* The experts of one MoE layer in the one layout the kernels use (struct
 * ms_moe_w; w points into gate_up and down once loaded). */
struct ms_qmoe {
	struct ms_moe_w w;              /* what the backend computes with */
	const char *scheme;             /* scheme of expert 0 (inspect) */
	const char *layout;             /* the checkpoint's expert layout family */
	int64_t n_experts, hidden, inter;
	struct ms_qlinear *gate_up;     /* [E] */
	struct ms_qlinear *down;        /* [E] */
	void *owned;                    /* storage the experts share, or NULL */
};

enum ms_qkind {
	MS_QKIND_LINEAR,     /* a projection (attention, router, lm_head, an expert's part) */
	MS_QKIND_MOE,        /* all experts of a layer stored as 3-D tensors */
	MS_QKIND_EMBEDDING,  /* rows looked up, never quantized by any producer */
};

struct ms_quant_scheme {
	const char *name;
	/* Bind and check the tensors of the linear layer `prefix` ([out, in],
	 * plus prefix.bias [out] when has_bias) and repack them for the
	 * backend's kernel. (optional: NULL = no linears) */
	int (*load_linear)(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			   const char *prefix, int64_t out, int64_t in, bool has_bias,
			   struct ms_qload *ld, struct ms_qlinear *l, struct ms_err *err);
	/* Experts stored as 3-D tensors under `prefix` (model.layers.N.mlp.experts).
	 * (optional: NULL = this scheme's experts are stored per expert) */
	int (*load_moe)(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			const char *prefix, int64_t n_experts, int64_t hidden, int64_t inter,
			struct ms_qload *ld, struct ms_qmoe *m, struct ms_err *err);
};

struct ms_quant_method {
	const char *name;  /* quant_method value; "none" for unquantized */
	/* Parse and validate the config object (NULL for "none"). (optional) */
	int (*parse)(struct ms_quant_config *qc, const cJSON *qcfg, struct ms_err *err);
	/* Scheme for module `prefix` of this kind. The checkpoint is there to
	 * tell which modules a producer really quantized (GPTQ/AWQ: those with a
	 * qweight). Errors name the field and value when no scheme can load it. */
	int (*scheme_for)(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			  const char *prefix, enum ms_qkind kind, const struct ms_quant_scheme **out,
			  struct ms_err *err);
	void (*free)(struct ms_quant_config *qc); /* (optional) */
};

struct ms_quant_config {
	const struct ms_quant_method *method;
	const char *source;   /* "config.json", "quantize_config.json", ... */
	struct ms_qname *not_convert; /* modules_to_not_convert patterns */
	int n_not_convert;
	bool not_convert_substring; /* AWQ: an entry matches anywhere in the name */
	void *priv;           /* method-specific */
};

/* Pick the method: config.json's quantization_config (config_root is the
 * parsed config.json), else a standalone quantize_config.json or
 * quant_config.json in dir, else "none"; then parse it. An unknown
 * quant_method is an error listing the known ones. */
int ms_quant_config_init(struct ms_quant_config *qc, const cJSON *config_root, const char *dir,
			 struct ms_err *err);
void ms_quant_config_free(struct ms_quant_config *qc);

/* Load module `prefix` through whichever scheme the method assigns. */
int ms_quant_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			 const char *prefix, enum ms_qkind kind, int64_t out, int64_t in,
			 bool has_bias, struct ms_qload *ld, struct ms_qlinear *l,
			 struct ms_err *err);

/* Load the experts of one layer, whatever their layout in the checkpoint
 * (quant/moe-layout.c): HF 3-D tensors (bf16 or MXFP4 blocks), Quark and
 * GPTQ per-expert gate_up_proj/down_proj, GPTQModel/Defuser gate_proj and
 * up_proj halves, older GPTQModel gate_up.E, llm-compressor's true gate and
 * up. All end in the one interleaved layout of struct ms_qmoe. */
int ms_quant_load_moe(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		      const char *prefix, int64_t n_experts, int64_t hidden, int64_t inter,
		      struct ms_qload *ld, struct ms_qmoe *m, struct ms_err *err);

/* Large buffers for the copies schemes make before packing (codes,
 * scales, zeros), in their own mappings, zero-filled when zero is set.
 * While a deferred bind pass is open (ms_quant_bind_begin .. end), a freed
 * one is kept and handed out again for the same size: every layer makes
 * the same copies, and fresh pages for each layer's (which the kernel
 * zeroes on first touch) cost ~20% of a GPTQ load's time. A scheme that
 * puts one in l->owned[i] sets bit i of l->owned_bufs. NULL when out of
 * memory. */
void *ms_quant_buf_alloc(size_t n, bool zero);
void ms_quant_buf_free(void *p);

void ms_qlinear_free(struct ms_qlinear *l);
/* Release l's binding (a packed or uploaded copy). */
void ms_qlinear_drop_pack(struct ms_qlinear *l);
void ms_qmoe_free(struct ms_qmoe *m);

/* y[n, out] = act(x[n, in]) W^T * row_scale + b on the backend (its
 * linear operation). 0, or an error code with err set (nothing computed). */
int ms_qlinear_apply(struct ms_backend *be, const struct ms_qlinear *l, const float *x,
		     int64_t n, float *y, struct ms_err *err);

/* The same for 1 .. MS_LINEAR_MULTI_MAX layers of one width on the same x,
 * y[i] for l[i], in one backend call (bit for bit m separate ones). */
int ms_qlinear_apply_multi(struct ms_backend *be, int m, const struct ms_qlinear *const *l,
			   const float *x, int64_t n, float *const *y, struct ms_err *err);

/* Bind l on the load's backend (its kernel, and the reason in l->why),
 * which may pack a copy; an error when nothing computes its format. Called
 * again after l->w changes (the old binding is released). */
int ms_qlinear_set_kernel(struct ms_qlinear *l, struct ms_qload *ld, const char *prefix,
			  struct ms_err *err);

/* Bind kernels (and pack) in parallel passes: between begin and end,
 * ms_qlinear_set_kernel only records the layer (with a plain kernel until
 * then); flush and end bind what is recorded on the backend's pool and say
 * how it went. The layers must not move in memory in between. */
struct ms_bind_stats {
	double seconds;
	int threads;
	int64_t matrices, packed;
	uint64_t packed_bytes;
};
int ms_quant_bind_begin(struct ms_qload *ld, struct ms_err *err);
/* Bind what is pending now and keep deferring (a loader flushes after each
 * layer so that the copies schemes make before packing never pile up);
 * stats accumulate into st. more: more layers of the same shapes follow,
 * so the freed copies' buffers are kept for them (ms_quant_buf_alloc);
 * false releases them. */
int ms_quant_bind_flush(struct ms_qload *ld, struct ms_bind_stats *st, bool more,
			struct ms_err *err);
int ms_quant_bind_end(struct ms_qload *ld, struct ms_bind_stats *st, struct ms_err *err);

/* A new matrix made of rows of a and b: row i of dst is row map[i] of a
 * when map[i] >= 0, else row (-map[i] - 1) of b. Formats, widths, groups and
 * activation quantization of a and b must agree. dst owns copies of
 * everything; a and b are untouched. Used to rebuild the interleaved gate_up
 * of checkpoints that store its halves, or the true gate and up, apart. */
int ms_qlinear_splice_rows(struct ms_qlinear *dst, const struct ms_qlinear *a,
			   const struct ms_qlinear *b, const int64_t *map, int64_t rows,
			   const char *what, struct ms_err *err);

/* Whether module `module` matches a modules_to_not_convert pattern
 * (ms_qname_match; with not_convert_substring an entry anywhere in the
 * name counts too, AutoAWQ's rule). */
int ms_quant_not_converted(const struct ms_quant_config *qc, const char *module, bool *hit,
			   struct ms_err *err);

/* ---- module-name patterns (names.c) ---- */

/* A Python regex applied as re.match (anchored at the start), with bounded
 * length, steps, depth and heap. `what` names the pattern's source in
 * errors (copied). */
struct ms_qregex;
int ms_qregex_init(struct ms_qregex **out, const char *pattern, const char *what,
		   struct ms_err *err);
/* *hit: whether module matches; an error when the pattern hit a limit. */
int ms_qregex_match(const struct ms_qregex *re, const char *module, bool *hit, struct ms_err *err);
void ms_qregex_free(struct ms_qregex *re);

/* Python's fnmatch.fnmatchcase: '*', '?', [seq], [!seq]; linear time. */
bool ms_qglob_match(const char *pattern, const char *name);

/* One entry of an exclude or modules_to_not_convert list: "re:<regex>"
 * (ms_qregex), else a glob that matches the module or one of its parents. */
struct ms_qname {
	char *text;
	struct ms_qregex *re; /* for "re:" entries */
};
int ms_qname_init(struct ms_qname *n, const char *text, const char *what, struct ms_err *err);
int ms_qname_match(const struct ms_qname *n, const char *module, bool *hit, struct ms_err *err);
void ms_qname_free(struct ms_qname *n);

/* ---- schemes ---- */
extern const struct ms_quant_scheme ms_scheme_unquantized;
extern const struct ms_quant_scheme ms_scheme_mxfp4;

/* ---- registry entries ---- */
extern const struct ms_quant_method ms_quant_none;
extern const struct ms_quant_method ms_quant_mxfp4;
extern const struct ms_quant_method ms_quant_gptq;
extern const struct ms_quant_method ms_quant_awq;
extern const struct ms_quant_method ms_quant_quark;

/* Comma-separated names of every registered method (for messages). */
const char *ms_quant_method_names(void);

/* ---- shared helpers for schemes ---- */
bool ms_dtype_is_float(enum ms_dtype dt);
enum ms_wfmt ms_wfmt_from_dtype(enum ms_dtype dt);

/* Load prefix.bias [out] into l->bias when has_bias. */
int ms_qlinear_load_bias(struct ms_qlinear *l, const struct ms_checkpoint *ck, const char *prefix,
			 int64_t out, bool has_bias, struct ms_err *err);

/* JSON field helpers that name the field (`where` is a prefix such as
 * "quantization_config.") on error. */
int ms_qjson_int(const cJSON *o, const char *where, const char *name, const char *alias,
		 bool required, int64_t dflt, int64_t *out, struct ms_err *err);
int ms_qjson_bool(const cJSON *o, const char *where, const char *name, bool dflt, bool *out,
		  struct ms_err *err);
/* String (or NULL when absent and not required). */
int ms_qjson_str(const cJSON *o, const char *where, const char *name, bool required,
		 const char **out, struct ms_err *err);

/* For schemes loading HF 3-D experts: set the sizes, allocate the expert
 * arrays and load each expert's bias from prefix.gate_up_proj_bias [E, 2I]
 * and prefix.down_proj_bias [E, H] (any float dtype). */
int ms_qmoe_init_fused(struct ms_qmoe *m, const struct ms_checkpoint *ck, const char *prefix,
		       int64_t E, int64_t H, int64_t I, struct ms_err *err);

/* Does the checkpoint hold any tensor whose name starts with prefix? */
bool ms_quant_has_prefix(const struct ms_checkpoint *ck, const char *prefix);

/* Read a 0-d (or one-element) float tensor as fp32, rejecting non-finite
 * or non-positive values: activation and weight scales. */
int ms_quant_read_scale(const struct ms_checkpoint *ck, const char *name, float *out,
			struct ms_err *err);

#endif
