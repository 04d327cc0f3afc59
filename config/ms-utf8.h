/*
 * ms-utf8.h: the UTF-8 facts the text code shares (the tokenizer's own
 * strict decoder stays in the tokenizer: it also reports where text is
 * invalid).
 */
#ifndef MS_UTF8_H
#define MS_UTF8_H

#include <stddef.h>
#include <stdint.h>

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

#endif
