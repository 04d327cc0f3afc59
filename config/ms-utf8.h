/*
 * ms-utf8.h: the UTF-8 facts the text code shares (the tokenizer's own
 * strict decoder stays in the tokenizer: it also reports where text is
 * invalid).
 */
#ifndef MS_UTF8_H
#define MS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Code points in n bytes of UTF-8: every byte that is not a continuation
 * byte starts one (OpenAI's character offsets; Jinja's `|length`). */
static inline int64_t ms_utf8_chars(const char *s, size_t n)
{
	int64_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

/* Code point -> UTF-8 in out[4]; returns the length. A lone surrogate is
 * written as its three bytes (Python keeps one in a str, and JSON's \uD800
 * means it); beyond U+10FFFF is U+FFFD. */
static inline size_t ms_utf8_encode(unsigned c, char out[4])
{
	unsigned char *u = (unsigned char *)out;
	if (c > 0x10FFFF)
		c = 0xFFFD;
	if (c < 0x80) {
		u[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		u[0] = (unsigned char)(0xC0 | (c >> 6));
		u[1] = (unsigned char)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		u[0] = (unsigned char)(0xE0 | (c >> 12));
		u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
		u[2] = (unsigned char)(0x80 | (c & 0x3F));
		return 3;
	}
	u[0] = (unsigned char)(0xF0 | (c >> 18));
	u[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
	u[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
	u[3] = (unsigned char)(0x80 | (c & 0x3F));
	return 4;
}

/* One strict UTF-8 code point at s (n bytes available) into *cp: its
 * length, or -1 (truncated, overlong, surrogate, beyond U+10FFFF, a stray
 * continuation byte). */
static inline int ms_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (!n)
		return -1;
	unsigned c = s[0];
	int len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
		  : c >= 0xF0 && c < 0xF5 ? 4 : -1;
	if (len < 0 || (size_t)len > n)
		return -1;
	uint32_t v = len == 1 ? c : c & (0x7Fu >> len);
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return -1;
		v = v << 6 | (s[i] & 0x3Fu);
	}
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
		return -1;
	*cp = v;
	return len;
}

/* U+0000 inside the process. Strings cross cJSON and the request structs as
 * C strings, so a NUL a client sent (JSON's \u0000) or the model wrote (its
 * 0x00 byte token) is carried as the two bytes C0 80, as Java's "modified
 * UTF-8" does: never valid UTF-8 (an overlong form, refused wherever text
 * comes in), so it cannot be mistaken for text, and no C string is cut at
 * it. The tokenizer reads it as the byte 0x00, the JSON writers as \u0000,
 * raw output (the CLI) as the byte itself. */
#define MS_NUL_CARRIER "\xC0\x80"

/* s[0..n) holds a carried NUL? */
static inline int ms_nul_carried(const char *s, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++)
		if ((unsigned char)s[i] == 0xC0 && (unsigned char)s[i + 1] == 0x80)
			return 1;
	return 0;
}

/* Carried NULs back to the byte, in place; the new length. */
static inline size_t ms_nul_uncarry(char *s, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		bool nul = (unsigned char)s[i] == 0xC0 && i + 1 < n && (unsigned char)s[i + 1] == 0x80;
		s[o++] = nul ? '\0' : s[i];
		i += nul;
	}
	return o;
}

/* Printed JSON s (taken) with each carried NUL as the escape \u0000:
 * carriers occur only inside its strings, all other text being valid
 * UTF-8. NULL when s is NULL or out of memory. */
static inline char *ms_nul_json_escape(char *s)
{
	size_t n = s ? strlen(s) : 0, k = 0;
	if (!s || !ms_nul_carried(s, n))
		return s;
	char *o = (char *)malloc(3 * n + 1); /* 2 bytes become 6 */
	for (size_t i = 0; o && i < n; i++) {
		bool nul = (unsigned char)s[i] == 0xC0 && (unsigned char)s[i + 1] == 0x80;
		if (nul)
			memcpy(o + k, "\\u0000", 6);
		else
			o[k] = s[i];
		k += nul ? 6 : 1;
		i += nul;
	}
	if (o)
		o[k] = '\0';
	free(s);
	return o;
}

#endif
