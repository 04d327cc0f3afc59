/*
 * quant.h: the quantization registry.
 *
 * A *method* is what config.json's quantization_config.quant_method names:
 * it parses and checks that config early, and says which *scheme* loads each
 * module (a linear projection or a layer's MoE experts). A scheme knows one
 * checkpoint format: which tensors a module needs (names, shapes, dtypes,
 * all checked), and how to repack them after loading into the layout of the
 * kernel the backend chose at start-up. Applying a loaded module is then just
 * that kernel: no format or CPU branch runs per token.
 *
 * How to add a format: write quant/<name>.c defining a
 * `const struct ms_quant_method ms_quant_<name>` (and its schemes), and add
 * one line to the registry table in quant.c.
 */
#ifndef MS_QUANT_H
#define MS_QUANT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "ms-error.h"
#include "safetensors.h"

struct ms_quant_config;

/* One [out, in] projection, y = x W^T + b. */
struct ms_qlinear {
	const char *scheme;             /* scheme that loaded it */
	struct ms_wmat w;
	const struct ms_kernel *kernel; /* chosen in process_after_loading */
	float *bias;                    /* [out] fp32, owned; NULL when none */
	void *owned;                    /* repacked weights, or NULL when zero-copy */
};

/* The experts of one MoE layer, gpt-oss style: gate/up fused with gate on
 * even rows and up on odd rows (the checkpoint's interleaving, kept). */
struct ms_qmoe {
	const char *scheme;
	int64_t n_experts, hidden, inter;
	struct ms_wmat *gate_up;        /* [E], each [2I, H] */
	struct ms_wmat *down;           /* [E], each [H, I] */
	float *gate_up_bias;            /* [E * 2I] fp32, owned */
	float *down_bias;               /* [E * H] fp32, owned */
	const struct ms_kernel *kernel_gate_up, *kernel_down;
	void *owned;                    /* repacked weights, or NULL */
};

enum ms_qkind {
	MS_QKIND_LINEAR,
	MS_QKIND_MOE,
};

struct ms_quant_scheme {
	const char *name;
	/* Bind and check the tensors of the linear layer `prefix` (prefix.weight
	 * [out, in], prefix.bias [out] when has_bias), then repack them for
	 * the backend's kernel. (optional: NULL = this scheme has no linears) */
	int (*load_linear)(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			   const char *prefix, int64_t out, int64_t in, bool has_bias,
			   struct ms_backend *be, struct ms_qlinear *l, struct ms_err *err);
	/* Same for the experts at `prefix` (model.layers.N.mlp.experts).
	 * (optional: NULL = this scheme has no MoE path) */
	int (*load_moe)(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			const char *prefix, int64_t n_experts, int64_t hidden, int64_t inter,
			struct ms_backend *be, struct ms_qmoe *m, struct ms_err *err);
};

struct ms_quant_method {
	const char *name;  /* quant_method value; "none" for unquantized */
	/* Parse and validate quantization_config (NULL when the checkpoint
	 * has none). (optional) */
	int (*parse)(struct ms_quant_config *qc, const cJSON *qcfg, struct ms_err *err);
	/* Scheme for module `prefix` of this kind; errors when no scheme can
	 * load it (naming the field and value). */
	int (*scheme_for)(const struct ms_quant_config *qc, const char *prefix, enum ms_qkind kind,
			  const struct ms_quant_scheme **out, struct ms_err *err);
	void (*free)(struct ms_quant_config *qc); /* (optional) */
};

struct ms_quant_config {
	const struct ms_quant_method *method;
	char **not_convert;   /* modules_to_not_convert patterns */
	int n_not_convert;
	void *priv;           /* method-specific */
};

/* Pick the method from config.json's root object (its quantization_config,
 * if any) and parse it. An unknown quant_method is an error listing the
 * known ones. */
int ms_quant_config_init(struct ms_quant_config *qc, const cJSON *config_root,
			 struct ms_err *err);
void ms_quant_config_free(struct ms_quant_config *qc);

/* Load module `prefix` through whichever scheme the method assigns. */
int ms_quant_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			 const char *prefix, int64_t out, int64_t in, bool has_bias,
			 struct ms_backend *be, struct ms_qlinear *l, struct ms_err *err);
int ms_quant_load_moe(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		      const char *prefix, int64_t n_experts, int64_t hidden, int64_t inter,
		      struct ms_backend *be, struct ms_qmoe *m, struct ms_err *err);

/* For schemes: set the sizes, load the BF16/F16/F32 expert biases
 * (prefix.gate_up_proj_bias [E, 2I], prefix.down_proj_bias [E, H]) as fp32,
 * and allocate the per-expert matrix arrays. */
int ms_qmoe_init(struct ms_qmoe *m, const struct ms_checkpoint *ck, const char *prefix,
		 int64_t E, int64_t H, int64_t I, struct ms_err *err);

void ms_qlinear_free(struct ms_qlinear *l);
void ms_qmoe_free(struct ms_qmoe *m);

/* y[n, out] = x[n, in] W^T + b on the backend's pool. */
void ms_qlinear_apply(struct ms_backend *be, const struct ms_qlinear *l, const float *x,
		      int64_t n, float *y);

/* True when module name `module` matches a modules_to_not_convert pattern
 * (transformers semantics: the pattern names the module or one of its
 * parents; '*' matches any run of characters). */
bool ms_quant_not_converted(const struct ms_quant_config *qc, const char *module);

/* ---- the schemes every method may delegate to ---- */
extern const struct ms_quant_scheme ms_scheme_unquantized;
extern const struct ms_quant_scheme ms_scheme_mxfp4;

/* Registry entries. */
extern const struct ms_quant_method ms_quant_none;
extern const struct ms_quant_method ms_quant_mxfp4;

/* Comma-separated names of every registered method (for messages). */
const char *ms_quant_method_names(void);

/* Shared loader helpers for schemes. */
bool ms_dtype_is_float(enum ms_dtype dt);
enum ms_wfmt ms_wfmt_from_dtype(enum ms_dtype dt);

#endif
