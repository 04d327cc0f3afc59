/*
 * model.h: model architectures and the registry that picks one from
 * config.json's "architectures".
 *
 * An architecture provides load (bind and repack every weight through the
 * quantization registry), a per-sequence state (the KV cache) and forward.
 * How to add one: write models/<arch>.c defining a
 * `const struct ms_model_ops`, add one line to the table in model.c.
 */
#ifndef MS_MODEL_H
#define MS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "kv-cache.h"
#include "lm.h"
#include "model-config.h"
#include "ms-error.h"
#include "quant.h"
#include "safetensors.h"

/* What inspect reports for one group of tensors. */
struct ms_tensor_group {
	char name[48];        /* "attention q/k/v/o", "experts", ... */
	const char *scheme;   /* quant scheme that loaded it */
	const char *format;   /* weight format the kernel reads */
	const char *act;      /* activation quantization */
	const char *kernel;   /* kernel chosen at load */
	const char *why;      /* why that kernel */
	int count;            /* matrices in the group */
	uint64_t bytes;       /* weight bytes streamed per full read */
};

#define MS_MAX_GROUPS 16

struct ms_model;

struct ms_model_ops {
	const char *arch;  /* config.json architectures[0] */
	int (*load)(struct ms_model *m, struct ms_err *err);
	void (*unload)(struct ms_model *m);
	/* One pass over a batch of tokens of many sequences (see struct
	 * ms_batch); logits gets [n_logits, V] for the rows asked for. */
	int (*forward_batch)(struct ms_model *m, const struct ms_batch *b, float *logits,
			     struct ms_err *err);
	/* A loaded projection by module name, or NULL. (optional) */
	const struct ms_qlinear *(*find_linear)(const struct ms_model *m, const char *name);
};

struct ms_model {
	const struct ms_model_ops *ops;
	struct ms_model_config cfg;
	struct ms_quant_config qcfg;
	struct ms_checkpoint ck;
	struct ms_backend *be;    /* borrowed: outlives the model */
	struct ms_tensor_group groups[MS_MAX_GROUPS];
	int n_groups;
	const char *moe_layout;       /* expert layout family found on disk */
	double load_seconds;
	struct ms_bind_stats pack_stats; /* the parallel kernel-binding/repacking pass */
	void *impl;                   /* the architecture's weights */
	struct ms_lm lm;              /* what the scheduler drives (engine/lm.h) */
};

/* Load the checkpoint in dir on backend be. On failure m is empty and err
 * says what is wrong, naming the file, tensor or config field. */
int ms_model_load(struct ms_model *m, const char *dir, struct ms_backend *be,
		  struct ms_err *err);
void ms_model_free(struct ms_model *m);

/* Tests only: called by ms_model_load between mapping the checkpoint and
 * reading its tensors (to truncate a file while it is mapped). */
extern void (*ms_model_load_hook)(struct ms_model *m);

/* Comma-separated architectures the registry knows. */
const char *ms_model_arch_names(void);

/* Add (or extend) an inspect group. */
void ms_model_add_group(struct ms_model *m, const char *name, const char *scheme,
			const char *format, const char *act, const char *kernel, const char *why,
			uint64_t bytes);

/* A loaded projection by module name (see the architecture's find_linear),
 * or NULL. */
const struct ms_qlinear *ms_model_find_linear(const struct ms_model *m, const char *name);

/* One sequence decoded on its own (the CLI, tests), with a private KV
 * pool just big enough for it; the engine batches many sequences over one
 * shared pool instead. */
struct ms_seq {
	struct ms_model *model;
	struct ms_kv_pool pool;
	struct ms_kv_seq kv;
	int64_t n_past;    /* tokens already in the state */
	int64_t capacity;  /* positions it may reach */
	int64_t *pos, *rows; /* a chunk's positions and logit rows (MS_SEQ_CHUNK) */
	int32_t *seq;        /* a chunk's sequence index: all 0 */
};

/* The longest run of tokens one forward pass of a single sequence takes
 * (longer prompts go in chunks, so scratch memory and a sliding layer's
 * pages stay bounded). Positions per page: MS_KV_PAGE_TOKENS (kv-cache.h). */
#define MS_SEQ_CHUNK 256

int ms_seq_init(struct ms_seq *s, struct ms_model *m, int64_t capacity, struct ms_err *err);
void ms_seq_free(struct ms_seq *s);

/* Append tokens: checks ids and capacity before touching anything, so a
 * refused call leaves the sequence as it was. */
int ms_seq_forward(struct ms_seq *s, const int32_t *tokens, int64_t n, float *logits,
		   bool all_logits, struct ms_err *err);

extern const struct ms_model_ops ms_model_gpt_oss;

#endif
