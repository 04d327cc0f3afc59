/*
 * ms-strbuf.h: the one growable string every text producer uses (the
 * harmony renderer, HTTP responses and streams, Prometheus metrics, the
 * bench's JSON).
 *
 * Zero-initialised is empty. The text is always NUL-terminated once anything
 * was added. An append that cannot grow the buffer sets `oom`, which sticks:
 * later appends do nothing, so a producer appends freely and checks `oom`
 * once at the end (an answer is then an error, never a truncated text).
 */
#ifndef MS_STRBUF_H
#define MS_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct ms_strbuf {
	char *p;      /* the text, or NULL while empty */
	size_t len;   /* bytes, without the NUL */
	size_t cap;
	bool oom;     /* an append failed: the text is incomplete */
};

void ms_strbuf_add(struct ms_strbuf *b, const char *s, size_t n);
void ms_strbuf_str(struct ms_strbuf *b, const char *s);
void ms_strbuf_printf(struct ms_strbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* One code point as UTF-8 (ms_utf8_encode's rules). */
void ms_strbuf_utf8(struct ms_strbuf *b, unsigned cp);
/* The text as a string ("" when empty); NULL after an OOM. */
const char *ms_strbuf_cstr(const struct ms_strbuf *b);
/* Empty again, keeping the memory (and clearing oom). */
void ms_strbuf_reset(struct ms_strbuf *b);
/* Hand the text over (the caller free()s it; "" as a fresh allocation when
 * empty) and leave b empty; NULL after an OOM or when that fails (b is
 * freed either way). */
char *ms_strbuf_take(struct ms_strbuf *b);
void ms_strbuf_free(struct ms_strbuf *b);

/* n bytes of data as base64 (RFC 4648, padded) onto b. */
void ms_strbuf_base64(struct ms_strbuf *b, const void *data, size_t n);
/* The bytes that base64 text s[0..n) spells, onto b; false (b as it was
 * up to a partial group) when s is not padded base64. */
bool ms_strbuf_unbase64(struct ms_strbuf *b, const char *s, size_t n);

#endif
