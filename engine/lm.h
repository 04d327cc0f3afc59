/*
 * lm.h: a language model as the scheduler drives it.
 *
 * The engine (engine.c) knows a model only through struct ms_lm: its
 * forward pass over a batch of many sequences' tokens, its vocabulary and
 * context, the geometry of its KV cache, and the backend it runs on. A
 * model family (models/) fills one in when it loads; nothing here depends
 * on an architecture.
 */
#ifndef MS_LM_H
#define MS_LM_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "kv-cache.h"
#include "ms-error.h"

/* A batch: tokens of any number of sequences, each at its own position.
 * Every (token, layer) must already have its KV page (ms_kv_seq_reserve);
 * the forward writes each token's keys and values there before attention,
 * so a sequence's earlier tokens in the same batch are visible to its later
 * ones. */
struct ms_batch {
	int64_t n;
	const int32_t *tokens;         /* [n] */
	const int64_t *pos;            /* [n] position in its sequence */
	const int32_t *seq;            /* [n] index into kv */
	struct ms_kv_seq *const *kv;   /* per sequence */
	struct ms_kv_pool *pool;
	const int64_t *logit_rows;     /* ascending rows whose logits are wanted */
	int64_t n_logits;
};

struct ms_lm {
	void *model;                   /* the model's own state */
	/* One pass over b; logits gets [n_logits][vocab] (host memory) for the
	 * rows asked for. */
	int (*forward)(void *model, const struct ms_batch *b, float *logits, struct ms_err *err);
	struct ms_backend *be;         /* where its KV pages live */
	int64_t vocab;
	int64_t max_pos;               /* max_position_embeddings */
	struct ms_kv_geom kv;
};

/* Tokens to text, for the engine's events and stop strings. A request
 * keeps state_size bytes of the decoder's state (zeroed, then init); push
 * appends the text token id completes to *buf (realloc'd; *len and *cap
 * track it): 0, or -ENOMEM / -EINVAL (an id it does not know). */
struct ms_detok_ops {
	size_t state_size;
	void (*init)(void *state, const void *tok, bool skip_special);
	int (*push)(void *state, int32_t id, char **buf, size_t *len, size_t *cap);
};

/* The vocabulary as structured outputs (engine/grammar) see it: what each
 * id spells, without the tokenizer's other calls. A model's tokenizer
 * fills one in (models/tokenizer.h, ms_tokenizer_vocab); tok must outlive
 * whatever holds the view. */
struct ms_vocab_ops {
	int32_t (*n_ids)(const void *tok);            /* ids are 0 .. n_ids - 1 */
	/* id's bytes (*len set), or NULL for an id it lacks */
	const char *(*bytes)(const void *tok, int32_t id, size_t *len);
	bool (*is_special)(const void *tok, int32_t id); /* control tokens: never a grammar's */
};

struct ms_vocab {
	const struct ms_vocab_ops *ops;
	const void *tok;
};

/* A model's text side: a decoder and the tokenizer it reads. */
struct ms_text {
	const struct ms_detok_ops *ops;
	const void *tok;
};

#endif
