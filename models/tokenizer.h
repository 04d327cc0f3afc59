/*
 * tokenizer.h: Hugging Face tokenizer.json, byte-level BPE (GPT-2, o200k,
 * o200k_harmony and alike), exact to the file.
 *
 * Pre-tokenization runs the file's Split regex with PCRE2 (UTF + Unicode
 * properties, JIT), with `\s`/`\S` mapped to Unicode White_Space as in the
 * Rust and Oniguruma engines the file was written for (PCRE2's own \s lacks
 * U+0085). BPE merges each pre-token with a heap: O(n log n). Added tokens
 * are cut out of the text first: non-special ones always, special ones only
 * when the caller allows it (chat rendering does; raw completion prompts do
 * not, as in vLLM and llama.cpp's server).
 */
#ifndef MS_TOKENIZER_H
#define MS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lm.h"
#include "ms-error.h"

struct ms_tokenizer;

/* Load a tokenizer.json. Unsupported model types, pre-tokenizers,
 * normalizers or decoders are refused with a message naming them. */
int ms_tokenizer_load(struct ms_tokenizer **out, const char *path, struct ms_err *err);
void ms_tokenizer_free(struct ms_tokenizer *t);

/* Number of ids (vocab plus added tokens): one more than the largest id. */
int32_t ms_tokenizer_n_ids(const struct ms_tokenizer *t);

/* Encode UTF-8 text (len bytes). allow_special: recognise special added
 * tokens inside the text. *ids is malloc'd. Invalid UTF-8 is an error. */
int ms_tokenizer_encode(const struct ms_tokenizer *t, const char *text, size_t len,
			bool allow_special, int32_t **ids, size_t *n, struct ms_err *err);

/* The raw bytes of a token (for byte-level BPE, the decoded bytes; for an
 * added token, its content). NULL for an unknown id. */
const char *ms_tokenizer_bytes(const struct ms_tokenizer *t, int32_t id, size_t *len);

/* Id of an added token or vocab entry spelled exactly `text` (raw bytes),
 * or -1. */
int32_t ms_tokenizer_find(const struct ms_tokenizer *t, const char *text);

bool ms_tokenizer_is_special(const struct ms_tokenizer *t, int32_t id);

/* t as structured outputs read a vocabulary (engine/lm.h); t must outlive
 * the view. */
struct ms_vocab ms_tokenizer_vocab(const struct ms_tokenizer *t);

/* Streaming decoder: feed ids one at a time and get text that is always
 * whole UTF-8: the bytes of a character split across tokens are held back
 * until it is complete; a byte that can never start or continue a valid
 * sequence becomes U+FFFD. */
struct ms_detok {
	const struct ms_tokenizer *t;
	bool skip_special;     /* leave special tokens out of the text */
	unsigned char pend[8]; /* an incomplete character */
	int n_pend;
};

void ms_detok_init(struct ms_detok *d, const struct ms_tokenizer *t, bool skip_special);

/* Append the text that token id completes to *buf (realloc'd; *len and *cap
 * track it). Returns 0 or -ENOMEM / -EINVAL (unknown id). */
int ms_detok_push(struct ms_detok *d, int32_t id, char **buf, size_t *len, size_t *cap);

/* End of stream: whatever is held back is emitted as U+FFFD. */
int ms_detok_flush(struct ms_detok *d, char **buf, size_t *len, size_t *cap);

/* t's streaming decoder as the engine takes it (engine/lm.h); t NULL: no
 * text. */
struct ms_text ms_tokenizer_text(const struct ms_tokenizer *t);

/* Decode a whole sequence (malloc'd, NUL-terminated). */
int ms_tokenizer_decode(const struct ms_tokenizer *t, const int32_t *ids, size_t n,
			bool skip_special, char **out, size_t *len, struct ms_err *err);

#endif
