/*
 * grammar-cache.h: compiled grammars by their text, shared by requests. Structured-output requests name a grammar by what they
 * send (a JSON Schema, a regex, a GBNF text, a list of choices); each
 * distinct one is compiled once and kept, with its token-mask cache, in an
 * LRU of bounded count. The vocabulary trie is built on the first use.
 * Thread-safe: HTTP threads get, the engine thread masks.
 */
#ifndef MS_GRAMMAR_CACHE_H
#define MS_GRAMMAR_CACHE_H

#include <stdint.h>

#include "lm.h"
#include "ms-error.h"
#include "token-mask.h"

enum ms_grammar_kind {
	MS_GK_JSON_SCHEMA,  /* text: the schema as JSON */
	MS_GK_JSON_OBJECT,  /* any JSON object (text ignored) */
	MS_GK_REGEX,        /* the whole output matches text */
	MS_GK_GBNF,         /* llama.cpp's grammar format, rule root */
	MS_GK_CHOICE,       /* text: a JSON list of strings, the output one of them */
};

struct ms_grammar_cache;

/* For voc's tokens below vocab (voc.tok must outlive the cache); capacity:
 * grammars kept (0: 64); write: the masks' writer (ms_tmask_new). */
int ms_grammar_cache_new(struct ms_vocab voc, int64_t vocab, int capacity,
			 ms_mask_words_fn *write, struct ms_grammar_cache **out,
			 struct ms_err *err);
void ms_grammar_cache_free(struct ms_grammar_cache *c);   /* NULL is fine */

/* The grammar of (kind, text), compiled or found: *out is a reference
 * (ms_tmask_unref it). A text that does not compile: -EINVAL, -ENOTSUP or
 * -E2BIG with the reason. */
int ms_grammar_cache_get(struct ms_grammar_cache *c, enum ms_grammar_kind kind, const char *text,
			 struct ms_tmask **out, struct ms_err *err);

struct ms_grammar_cache_stats {
	uint64_t hits, misses, evictions;
	int entries;
	double compile_s;    /* compiling, all misses together */
};

void ms_grammar_cache_get_stats(struct ms_grammar_cache *c, struct ms_grammar_cache_stats *s);

#endif
