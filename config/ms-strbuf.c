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
