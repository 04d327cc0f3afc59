/*
 * tokenizer-int.h: what the tokenizer's loader (tokenizer-load.c) and its
 * encoder and decoder (tokenizer.c) share: struct ms_tokenizer, the hash
 * tables it is made of, and the few helpers both sides call. Internal:
 * private to those two files; the public API is tokenizer.h.
 */
#ifndef MS_TOKENIZER_INT_H
#define MS_TOKENIZER_INT_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Next code point of valid UTF-8 at s (len bytes left): returns its length,
 * 0 when invalid. */
static inline int utf8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned c = s[0];
	int n;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xE0) == 0xC0) {
		n = 2, v = c & 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		n = 3, v = c & 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		n = 4, v = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if ((size_t)n > len)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return n;
}

/* ---- hash tables ---- */

static inline uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* token bytes -> id, over the blob of all token bytes */
struct bytes_map {
	int32_t *slot; /* id or -1 */
	size_t cap;    /* power of two */
};

/* (left id, right id) -> merge rank and result */
struct pair_entry {
	uint64_t key; /* left << 32 | right, UINT64_MAX = empty */
	int32_t rank, merged;
};

struct pair_map {
	struct pair_entry *e;
	size_t cap;
};

/* ---- the tokenizer ---- */

enum split_behavior { SPLIT_ISOLATED, SPLIT_REMOVED };

struct split_step {
	pcre2_code *re;
	enum split_behavior behavior;
	bool prefix_space; /* ByteLevel add_prefix_space */
};

struct added {
	int32_t id;
	char *text;
	size_t len;
	bool special, lstrip, rstrip;
};

struct ms_tokenizer {
	/* id -> bytes */
	char *blob;
	size_t *off;    /* [n_ids + 1] into blob; tokens with no bytes have off[i] == off[i+1] */
	bool *known;    /* [n_ids] */
	bool *special;  /* [n_ids] */
	int32_t n_ids;
	struct bytes_map vocab;      /* BPE vocab bytes -> id */
	int32_t byte_id[256];        /* single-byte tokens */
	struct pair_map merges;
	bool ignore_merges;
	struct split_step steps[8];
	int n_steps;
	struct added *added;         /* sorted by first byte, then longest first */
	int n_added;
	int first_added[257];        /* bucket starts by first byte */
};

static inline size_t tok_len(const struct ms_tokenizer *t, int32_t id)
{
	return t->off[id + 1] - t->off[id];
}

static inline int32_t vocab_get(const struct ms_tokenizer *t, const void *b, size_t n)
{
	size_t mask = t->vocab.cap - 1;
	for (size_t i = fnv1a(b, n) & mask;; i = (i + 1) & mask) {
		int32_t id = t->vocab.slot[i];
		if (id < 0)
			return -1;
		if (tok_len(t, id) == n && memcmp(t->blob + t->off[id], b, n) == 0)
			return id;
	}
}

#endif
