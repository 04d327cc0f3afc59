/* ms-strbuf.c: see ms-strbuf.h. */
#include "ms-strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-utf8.h"

/* Room for n more bytes and the NUL; false (oom set) when it cannot. */
static bool reserve(struct ms_strbuf *b, size_t n)
{
	if (b->oom)
		return false;
	if (n >= ((size_t)1 << 40) - b->len) { /* no text is that long */
		b->oom = true;
		return false;
	}
	if (b->len + n + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void ms_strbuf_add(struct ms_strbuf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return;
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void ms_strbuf_str(struct ms_strbuf *b, const char *s)
{
	ms_strbuf_add(b, s, strlen(s));
}

void ms_strbuf_printf(struct ms_strbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true;
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void ms_strbuf_utf8(struct ms_strbuf *b, unsigned cp)
{
	char u[4];
	ms_strbuf_add(b, u, ms_utf8_encode(cp, u));
}

const char *ms_strbuf_cstr(const struct ms_strbuf *b)
{
	return b->oom ? NULL : b->p ? b->p : "";
}

void ms_strbuf_reset(struct ms_strbuf *b)
{
	b->len = 0;
	b->oom = false;
	if (b->p)
		b->p[0] = '\0';
}

char *ms_strbuf_take(struct ms_strbuf *b)
{
	char *s = b->oom ? NULL : b->p ? b->p : strdup("");
	if (b->oom)
		free(b->p);
	*b = (struct ms_strbuf){0};
	return s;
}

void ms_strbuf_free(struct ms_strbuf *b)
{
	free(b->p);
	*b = (struct ms_strbuf){0};
}

/* ---- base64 (RFC 4648, with padding) ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void ms_strbuf_base64(struct ms_strbuf *b, const void *data, size_t n)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
			     (i + 2 < n ? p[i + 2] : 0);
		char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63],
			     i + 1 < n ? b64[v >> 6 & 63] : '=', i + 2 < n ? b64[v & 63] : '='};
		ms_strbuf_add(b, q, 4);
	}
}

static int b64_value(char c)
{
	const char *at = c ? strchr(b64, c) : NULL;
	return at ? (int)(at - b64) : -1;
}

bool ms_strbuf_unbase64(struct ms_strbuf *b, const char *s, size_t n)
{
	if (n % 4)
		return false;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;
		for (int k = 0; k < 4; k++) {
			bool last = i + 4 == n && k >= 2;
			if (last && s[i + k] == '=' && (k == 3 || s[i + 3] == '=')) {
				v[k] = 0, pad++;
				continue;
			}
			if ((v[k] = b64_value(s[i + k])) < 0)
				return false;
		}
		unsigned x = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 |
			     (unsigned)v[3];
		char out[3] = {(char)(x >> 16), (char)(x >> 8 & 255), (char)(x & 255)};
		ms_strbuf_add(b, out, (size_t)(3 - pad));
	}
	return true;
}
