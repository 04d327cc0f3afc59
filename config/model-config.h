/*
 * model-config.h: the fields of a Hugging Face GPT-OSS config.json that the
 * forward pass uses, parsed and checked once so that nothing downstream has
 * to re-validate them.
 */
#ifndef MS_MODEL_CONFIG_H
#define MS_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include "ms-error.h"

#define MS_ARCH_NAME_MAX 64

enum ms_rope_type {
	MS_ROPE_DEFAULT,  /* plain RoPE: inv_freq = base^(-2i/d), no scaling */
	MS_ROPE_YARN,     /* YaRN as gpt-oss uses it (docs: gpt-oss.md §2.3) */
};

struct ms_rope_config {
	enum ms_rope_type type;
	double theta;              /* base */
	double factor;             /* YaRN scale factor (32 for gpt-oss) */
	double beta_fast;          /* high-frequency boundary, in rotations */
	double beta_slow;          /* low-frequency boundary, in rotations */
	int64_t original_max_pos;  /* L0: the pre-extension context */
	bool truncate;             /* floor/ceil the correction range */
	double attention_factor;   /* mscale; < 0 means "0.1 ln(factor) + 1" */
};

struct ms_model_config {
	char arch[MS_ARCH_NAME_MAX];  /* architectures[0], selects models/ entry */
	int64_t hidden;               /* H: residual width */
	int64_t n_layers;             /* L */
	int64_t n_heads;              /* nH */
	int64_t n_kv_heads;           /* nKV, divides nH */
	int64_t head_dim;             /* d; nH*d need not equal H */
	int64_t intermediate;         /* I: per-expert width */
	int64_t n_experts;            /* E */
	int64_t top_k;                /* k <= E */
	int64_t vocab;                /* V */
	int64_t sliding_window;       /* keys a sliding layer sees, incl. self */
	int64_t max_pos;              /* max_position_embeddings */
	double rms_eps;
	double swiglu_limit;          /* clamp for gate (above) and up (both) */
	double swiglu_alpha;          /* 1.702: the modeling code's constant */
	bool tie_embeddings;          /* must be false for gpt-oss (checked) */
	struct ms_rope_config rope;
	bool *layer_sliding;          /* [n_layers]: true = sliding_attention */
	int64_t eos_ids[8];           /* config eos_token_id (int or list) */
	int n_eos;
};

/* Parse the text of a config.json (held to RFC 8259: config/ms-json.h). On success *cfg owns layer_sliding; free
 * it with ms_model_config_free(). On failure cfg is left zeroed and err names
 * the field and the value. */
int ms_model_config_parse(struct ms_model_config *cfg, const char *json_text,
			  struct ms_err *err);

/* The same from config.json already parsed by ms_json_parse_rfc or
 * ms_json_read_file, which refuse a repeated key (the loader hands the one
 * tree to the quantization registry too). */
int ms_model_config_from_json(struct ms_model_config *cfg, const cJSON *root,
			      struct ms_err *err);

/* Read DIR/config.json and parse it. */
int ms_model_config_load(struct ms_model_config *cfg, const char *dir,
			 struct ms_err *err);

void ms_model_config_free(struct ms_model_config *cfg);
#endif
