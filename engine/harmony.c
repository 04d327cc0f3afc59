/*
 * harmony.c: see harmony.h.
 *
 * Reading order: a growable string; a small JSON reader that keeps object
 * order and number literals; Python's json.dumps and str() on its values
 * (the template's `tojson` filter and string concatenation); the template's
 * render_typescript_type / render_tool_namespace macros; the message loop;
 * the streaming parser.
 *
 * Where the template's behaviour depends on Jinja rather than on intent,
 * this file follows Jinja (and says so): the exact text matters because the
 * model was trained on it and because a prompt that stays byte-identical
 * across turns keeps the KV cache reusable.
 */
#include "harmony.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ======================================================== string buffer */

struct sb {
	char *p;
	size_t n, cap;
	int oom;                      /* sticky: an append failed */
	struct ms_harmony_span *sp;   /* special-token spans (renderer only) */
	size_t n_sp, cap_sp;
};

static void sb_put(struct sb *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void sb_str(struct sb *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_free(struct sb *b)
{
	free(b->p);
	free(b->sp);
	memset(b, 0, sizeof(*b));
}

/* The special tokens the template writes. */
static const char *const harmony_specials[] = {
	"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>",
};

/* Append template text (never request data): each special token in it is
 * recorded as a span. */
static void sb_tpl(struct sb *b, const char *s)
{
	while (*s) {
		size_t n = 0;
		if (s[0] == '<' && s[1] == '|') {
			for (size_t i = 0; i < sizeof(harmony_specials) / sizeof(harmony_specials[0]); i++) {
				size_t l = strlen(harmony_specials[i]);
				if (!strncmp(s, harmony_specials[i], l)) {
					n = l;
					break;
				}
			}
		}
		if (n) {
			if (b->n_sp == b->cap_sp && !b->oom) {
				size_t cap = b->cap_sp ? 2 * b->cap_sp : 32;
				struct ms_harmony_span *q = realloc(b->sp, cap * sizeof(*q));
				if (!q)
					b->oom = 1;
				else {
					b->sp = q;
					b->cap_sp = cap;
				}
			}
			if (!b->oom)
				b->sp[b->n_sp++] = (struct ms_harmony_span){b->n, n};
			sb_put(b, s, n);
			s += n;
		} else {
			const char *e = strstr(s + 1, "<|");
			n = e ? (size_t)(e - s) : strlen(s);
			sb_put(b, s, n);
			s += n;
		}
	}
}

/* ============================================================== JSON */

/* A parsed JSON value. Objects keep their members in source order (Python
 * dicts do, and the template iterates properties in that order); numbers
 * keep their literal, since Python tells 1 from 1.0. */
enum jt { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jt t;
	char *s;   /* J_STR: decoded UTF-8; J_NUM: the literal (both NUL-terminated) */
	size_t n;
	char *k;   /* key, when a member of an object */
	size_t kn;
	struct jv *child, *next;
};

static void jv_free(struct jv *v)
{
	while (v) {
		struct jv *next = v->next;
		jv_free(v->child);
		free(v->s);
		free(v->k);
		free(v);
		v = next;
	}
}

#define JSON_MAX_DEPTH 128

struct jparse {
	const char *s;
	size_t n, i;
	int depth;
	int rc;          /* 0, -EINVAL or -ENOMEM */
	const char *why; /* -EINVAL: what was wrong at byte i */
};

static int jp_fail(struct jparse *jp, const char *why)
{
	if (!jp->rc) {
		jp->rc = -EINVAL;
		jp->why = why;
	}
	return jp->rc;
}

static void jp_ws(struct jparse *jp)
{
	while (jp->i < jp->n && (jp->s[jp->i] == ' ' || jp->s[jp->i] == '\t' ||
				 jp->s[jp->i] == '\n' || jp->s[jp->i] == '\r'))
		jp->i++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int jp_hex4(struct jparse *jp, unsigned *u)
{
	if (jp->i + 4 > jp->n)
		return jp_fail(jp, "truncated \\u escape");
	*u = 0;
	for (int k = 0; k < 4; k++) {
		int h = hexval(jp->s[jp->i + k]);
		if (h < 0)
			return jp_fail(jp, "bad \\u escape");
		*u = *u * 16 + (unsigned)h;
	}
	jp->i += 4;
	return 0;
}

/* Code point -> UTF-8. A lone surrogate (Python keeps it in a str) is
 * written in its 3-byte form; jdump writes it back as \udxxx. */
static void put_utf8(struct sb *b, unsigned c)
{
	char u[4];
	if (c < 0x80) {
		u[0] = (char)c;
		sb_put(b, u, 1);
	} else if (c < 0x800) {
		u[0] = (char)(0xC0 | (c >> 6));
		u[1] = (char)(0x80 | (c & 0x3F));
		sb_put(b, u, 2);
	} else if (c < 0x10000) {
		u[0] = (char)(0xE0 | (c >> 12));
		u[1] = (char)(0x80 | ((c >> 6) & 0x3F));
		u[2] = (char)(0x80 | (c & 0x3F));
		sb_put(b, u, 3);
	} else {
		u[0] = (char)(0xF0 | (c >> 18));
		u[1] = (char)(0x80 | ((c >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((c >> 6) & 0x3F));
		u[3] = (char)(0x80 | (c & 0x3F));
		sb_put(b, u, 4);
	}
}

/* A string starting at the opening quote; *out malloc'd. */
static int jp_string(struct jparse *jp, char **out, size_t *len)
{
	struct sb b = {0};
	jp->i++; /* the quote */
	for (;;) {
		if (jp->i >= jp->n) {
			sb_free(&b);
			return jp_fail(jp, "unterminated string");
		}
		unsigned char c = (unsigned char)jp->s[jp->i];
		if (c == '"') {
			jp->i++;
			break;
		}
		if (c < 0x20) {
			sb_free(&b);
			return jp_fail(jp, "control character in string");
		}
		if (c != '\\') {
			size_t j = jp->i;
			while (j < jp->n && jp->s[j] != '"' && jp->s[j] != '\\' &&
			       (unsigned char)jp->s[j] >= 0x20)
				j++;
			sb_put(&b, jp->s + jp->i, j - jp->i);
			jp->i = j;
			continue;
		}
		if (++jp->i >= jp->n) {
			sb_free(&b);
			return jp_fail(jp, "unterminated string");
		}
		char e = jp->s[jp->i++];
		const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
		const char *m = strchr(map, e);
		if (e && m && (m - map) % 2 == 0) {
			sb_put(&b, m + 1, 1);
		} else if (e == 'u') {
			unsigned u, lo;
			if (jp_hex4(jp, &u)) {
				sb_free(&b);
				return jp->rc;
			}
			if (u >= 0xD800 && u < 0xDC00 && jp->i + 6 <= jp->n && jp->s[jp->i] == '\\' &&
			    jp->s[jp->i + 1] == 'u') {
				size_t save = jp->i;
				jp->i += 2;
				if (jp_hex4(jp, &lo)) {
					sb_free(&b);
					return jp->rc;
				}
				if (lo >= 0xDC00 && lo < 0xE000)
					u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
				else
					jp->i = save; /* a lone high surrogate, then another escape */
			}
			put_utf8(&b, u);
		} else {
			sb_free(&b);
			return jp_fail(jp, "bad escape");
		}
	}
	if (!b.p)
		sb_put(&b, "", 0); /* an empty string still gets its NUL */
	if (b.oom) {
		sb_free(&b);
		return jp->rc = -ENOMEM;
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

static struct jv *jp_value(struct jparse *jp);

static struct jv *jv_new(struct jparse *jp, enum jt t)
{
	struct jv *v = calloc(1, sizeof(*v));
	if (!v)
		jp->rc = -ENOMEM;
	else
		v->t = t;
	return v;
}

static struct jv *jp_number(struct jparse *jp)
{
	size_t a = jp->i;
	const char *s = jp->s;
	if (jp->i < jp->n && s[jp->i] == '-')
		jp->i++;
	if (jp->i < jp->n && s[jp->i] == '0')
		jp->i++;
	else if (jp->i < jp->n && s[jp->i] >= '1' && s[jp->i] <= '9')
		while (jp->i < jp->n && s[jp->i] >= '0' && s[jp->i] <= '9')
			jp->i++;
	else
		return jp_fail(jp, "bad number"), NULL;
	if (jp->i < jp->n && s[jp->i] == '.') {
		jp->i++;
		if (jp->i >= jp->n || s[jp->i] < '0' || s[jp->i] > '9')
			return jp_fail(jp, "bad number"), NULL;
		while (jp->i < jp->n && s[jp->i] >= '0' && s[jp->i] <= '9')
			jp->i++;
	}
	if (jp->i < jp->n && (s[jp->i] == 'e' || s[jp->i] == 'E')) {
		jp->i++;
		if (jp->i < jp->n && (s[jp->i] == '+' || s[jp->i] == '-'))
			jp->i++;
		if (jp->i >= jp->n || s[jp->i] < '0' || s[jp->i] > '9')
			return jp_fail(jp, "bad number"), NULL;
		while (jp->i < jp->n && s[jp->i] >= '0' && s[jp->i] <= '9')
			jp->i++;
	}
	struct jv *v = jv_new(jp, J_NUM);
	if (!v)
		return NULL;
	v->n = jp->i - a;
	v->s = strndup(s + a, v->n);
	if (!v->s) {
		free(v);
		jp->rc = -ENOMEM;
		return NULL;
	}
	return v;
}

static struct jv *jp_container(struct jparse *jp, bool obj)
{
	struct jv *v = jv_new(jp, obj ? J_OBJ : J_ARR), **tail;
	if (!v)
		return NULL;
	tail = &v->child;
	if (++jp->depth > JSON_MAX_DEPTH) {
		jp_fail(jp, "nested too deeply");
		goto fail;
	}
	jp->i++; /* [ or { */
	jp_ws(jp);
	if (jp->i < jp->n && jp->s[jp->i] == (obj ? '}' : ']')) {
		jp->i++;
		jp->depth--;
		return v;
	}
	for (;;) {
		char *k = NULL;
		size_t kn = 0;
		jp_ws(jp);
		if (obj) {
			if (jp->i >= jp->n || jp->s[jp->i] != '"') {
				jp_fail(jp, "expected a key");
				goto fail;
			}
			if (jp_string(jp, &k, &kn))
				goto fail;
			jp_ws(jp);
			if (jp->i >= jp->n || jp->s[jp->i] != ':') {
				free(k);
				jp_fail(jp, "expected ':'");
				goto fail;
			}
			jp->i++;
		}
		struct jv *c = jp_value(jp);
		if (!c) {
			free(k);
			goto fail;
		}
		c->k = k;
		c->kn = kn;
		*tail = c;
		tail = &c->next;
		jp_ws(jp);
		if (jp->i < jp->n && jp->s[jp->i] == ',') {
			jp->i++;
			continue;
		}
		if (jp->i < jp->n && jp->s[jp->i] == (obj ? '}' : ']')) {
			jp->i++;
			break;
		}
		jp_fail(jp, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		goto fail;
	}
	jp->depth--;
	return v;
fail:
	jv_free(v);
	return NULL;
}

static struct jv *jp_value(struct jparse *jp)
{
	jp_ws(jp);
	if (jp->i >= jp->n)
		return jp_fail(jp, "unexpected end"), NULL;
	const char *s = jp->s + jp->i;
	size_t left = jp->n - jp->i;
	switch (*s) {
	case '{':
		return jp_container(jp, true);
	case '[':
		return jp_container(jp, false);
	case '"': {
		struct jv *v = jv_new(jp, J_STR);
		if (v && jp_string(jp, &v->s, &v->n)) {
			free(v);
			return NULL;
		}
		return v;
	}
	case 'n':
		if (left >= 4 && !memcmp(s, "null", 4))
			return jp->i += 4, jv_new(jp, J_NULL);
		break;
	case 't':
		if (left >= 4 && !memcmp(s, "true", 4))
			return jp->i += 4, jv_new(jp, J_TRUE);
		break;
	case 'f':
		if (left >= 5 && !memcmp(s, "false", 5))
			return jp->i += 5, jv_new(jp, J_FALSE);
		break;
	default:
		if (*s == '-' || (*s >= '0' && *s <= '9'))
			return jp_number(jp);
	}
	return jp_fail(jp, "unexpected character"), NULL;
}

/* Parse text (n bytes). 0 and *out, or -EINVAL (*why, *at) / -ENOMEM. */
static int json_parse(const char *text, size_t n, struct jv **out, const char **why, size_t *at)
{
	struct jparse jp = {.s = text, .n = n};
	struct jv *v = jp_value(&jp);
	if (v) {
		jp_ws(&jp);
		if (jp.i < jp.n) {
			jv_free(v);
			v = NULL;
			jp_fail(&jp, "trailing characters");
		}
	}
	*out = v;
	if (why)
		*why = jp.why;
	if (at)
		*at = jp.i;
	return v ? 0 : jp.rc;
}

/* Member `key` of object v (the last one, as in a Python dict), or NULL. */
static const struct jv *jget(const struct jv *v, const char *key)
{
	const struct jv *hit = NULL;
	if (!v || v->t != J_OBJ)
		return NULL;
	size_t kl = strlen(key);
	for (const struct jv *c = v->child; c; c = c->next)
		if (c->kn == kl && !memcmp(c->k, key, kl))
			hit = c;
	return hit;
}

/* Object members as a Python dict iterates them: a repeated key takes its
 * first place and its last value. Returns the value to use for member c, or
 * NULL when c repeats an earlier key. */
static const struct jv *jmember(const struct jv *obj, const struct jv *c)
{
	for (const struct jv *e = obj->child; e != c; e = e->next)
		if (e->kn == c->kn && !memcmp(e->k, c->k, c->kn))
			return NULL;
	const struct jv *v = c;
	for (const struct jv *e = c->next; e; e = e->next)
		if (e->kn == c->kn && !memcmp(e->k, c->k, c->kn))
			v = e;
	return v;
}

static bool jis(const struct jv *v, const char *s)
{
	return v && v->t == J_STR && v->n == strlen(s) && !memcmp(v->s, s, v->n);
}

static bool jnum_is_int(const struct jv *v)
{
	return !strpbrk(v->s, ".eE");
}

/* Jinja/Python truthiness. */
static bool jtruthy(const struct jv *v)
{
	if (!v)
		return false;
	switch (v->t) {
	case J_NULL:
	case J_FALSE:
		return false;
	case J_TRUE:
		return true;
	case J_NUM:
		return strtod(v->s, NULL) != 0.0;
	case J_STR:
		return v->n > 0;
	case J_ARR:
	case J_OBJ:
		return v->child != NULL;
	}
	return false;
}

/* ============================================ Python's json.dumps and str() */

/* Python repr() of a float (float_repr_style 'short'): the shortest digits
 * that round-trip, positional for exponents -4..15, else d.ddde+XX. */
static void py_float(struct sb *b, double v, bool json)
{
	if (isinf(v)) {
		sb_str(b, v > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
		return;
	}
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec - 1, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	char dig[24];
	int nd = 0, exp10;
	const char *q = buf;
	bool neg = *q == '-';
	if (neg)
		q++;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9')
			dig[nd++] = *q;
	exp10 = atoi(q + 1);
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	if (neg)
		sb_put(b, "-", 1);
	if (exp10 >= -4 && exp10 < 16) {
		if (exp10 >= 0) {
			for (int i = 0; i <= exp10; i++)
				sb_put(b, i < nd ? &dig[i] : "0", 1);
			sb_put(b, ".", 1);
			if (nd > exp10 + 1)
				sb_put(b, dig + exp10 + 1, (size_t)(nd - exp10 - 1));
			else
				sb_put(b, "0", 1);
		} else {
			sb_put(b, "0.", 2);
			for (int i = 0; i < -exp10 - 1; i++)
				sb_put(b, "0", 1);
			sb_put(b, dig, (size_t)nd);
		}
	} else {
		sb_put(b, dig, 1);
		if (nd > 1) {
			sb_put(b, ".", 1);
			sb_put(b, dig + 1, (size_t)(nd - 1));
		}
		snprintf(buf, sizeof(buf), "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
		sb_str(b, buf);
	}
}

/* A number as Python prints it after json.loads: ints keep their digits
 * (-0 is 0), floats go through repr(). */
static void py_number(struct sb *b, const struct jv *v, bool json)
{
	if (jnum_is_int(v)) {
		if (!strcmp(v->s, "-0"))
			sb_put(b, "0", 1);
		else
			sb_put(b, v->s, v->n);
	} else {
		py_float(b, strtod(v->s, NULL), json);
	}
}

/* json.dumps(s, ensure_ascii=False): escapes ", \, and control characters
 * (\n \r \t \b \f by name, the rest as \u00xx); other characters as is. A
 * lone surrogate (3-byte form ED A0..BF xx) is written as \udxxx. */
static void py_json_string(struct sb *b, const char *s, size_t n)
{
	sb_put(b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *e = NULL;
		char u[8];
		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		default:
			if (c < 0x20) {
				snprintf(u, sizeof(u), "\\u%04x", c);
				e = u;
			} else if (c == 0xED && i + 2 < n && ((unsigned char)s[i + 1] & 0xE0) == 0xA0) {
				unsigned cp = 0xD000 | (((unsigned char)s[i + 1] & 0x3F) << 6) |
					      ((unsigned char)s[i + 2] & 0x3F);
				snprintf(u, sizeof(u), "\\u%04x", cp);
				sb_put(b, s + i - run, run);
				run = 0;
				sb_str(b, u);
				i += 2;
				continue;
			}
		}
		if (e) {
			sb_put(b, s + i - run, run);
			run = 0;
			sb_str(b, e);
		} else {
			run++;
		}
	}
	sb_put(b, s + n - run, run);
	sb_put(b, "\"", 1);
}

/* json.dumps(v) with the default separators ", " and ": " (transformers'
 * tojson filter: ensure_ascii=False, no indent, keys unsorted). */
static void py_json(struct sb *b, const struct jv *v)
{
	switch (v->t) {
	case J_NULL: sb_str(b, "null"); break;
	case J_FALSE: sb_str(b, "false"); break;
	case J_TRUE: sb_str(b, "true"); break;
	case J_NUM: py_number(b, v, true); break;
	case J_STR: py_json_string(b, v->s, v->n); break;
	case J_ARR:
		sb_put(b, "[", 1);
		for (const struct jv *c = v->child; c; c = c->next) {
			py_json(b, c);
			if (c->next)
				sb_put(b, ", ", 2);
		}
		sb_put(b, "]", 1);
		break;
	case J_OBJ: {
		bool first = true;
		sb_put(b, "{", 1);
		for (const struct jv *c = v->child; c; c = c->next) {
			const struct jv *m = jmember(v, c);
			if (!m)
				continue;
			if (!first)
				sb_put(b, ", ", 2);
			first = false;
			py_json_string(b, c->k, c->kn);
			sb_put(b, ": ", 2);
			py_json(b, m);
		}
		sb_put(b, "}", 1);
		break;
	}
	}
}

/* Python str(v), what Jinja's `~`, join and `{{ }}` write. Strings are
 * bare; lists and dicts (a schema would have to be odd for them to get
 * here) are written as JSON, not as Python's repr. */
static void py_str(struct sb *b, const struct jv *v)
{
	switch (v->t) {
	case J_NULL: sb_str(b, "None"); break;
	case J_FALSE: sb_str(b, "False"); break;
	case J_TRUE: sb_str(b, "True"); break;
	case J_NUM: py_number(b, v, false); break;
	case J_STR: sb_put(b, v->s, v->n); break;
	default: py_json(b, v); break;
	}
}

/* `items|join(sep)` for a Jinja iterable: a list's items, a string's
 * characters, a dict's keys. */
static void py_join(struct sb *b, const struct jv *v, const char *sep)
{
	if (v->t == J_STR) {
		for (size_t i = 0; i < v->n;) {
			size_t l = 1;
			while (i + l < v->n && ((unsigned char)v->s[i + l] & 0xC0) == 0x80)
				l++;
			if (i)
				sb_str(b, sep);
			sb_put(b, v->s + i, l);
			i += l;
		}
	} else if (v->t == J_ARR || v->t == J_OBJ) {
		bool first = true;
		for (const struct jv *c = v->child; c; c = c->next) {
			if (v->t == J_OBJ && !jmember(v, c))
				continue;
			if (!first)
				sb_str(b, sep);
			first = false;
			if (v->t == J_OBJ)
				sb_put(b, c->k, c->kn);
			else
				py_str(b, c);
		}
	}
}

/* `name in (required or [])`: list membership, substring of a string,
 * key of a dict. */
static bool py_in(const char *name, size_t nl, const struct jv *req)
{
	if (!jtruthy(req))
		return false;
	if (req->t == J_STR)
		return memmem(req->s, req->n, name, nl) != NULL;
	if (req->t == J_OBJ) {
		for (const struct jv *c = req->child; c; c = c->next)
			if (c->kn == nl && !memcmp(c->k, name, nl))
				return true;
		return false;
	}
	if (req->t == J_ARR)
		for (const struct jv *c = req->child; c; c = c->next)
			if (c->t == J_STR && c->n == nl && !memcmp(c->s, name, nl))
				return true;
	return false;
}

/* Characters (code points) in UTF-8 text: Jinja's `|length` on a str. */
static size_t u8_chars(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

/* ==================================== JSON Schema -> TypeScript (the macros) */

/* render_typescript_type(spec). Whitespace is Jinja's: in the object branch
 * `{{ render_typescript_type(...) }}` has no `-`, so the newline and the 16
 * spaces of indentation before it are output; in the oneOf branch a default
 * is preceded by 20 spaces and " | " is followed by a newline. Returns 0 or
 * -EINVAL (properties that are not an object: the template's .items() call
 * fails there). */
static int ts_type(struct sb *b, const struct jv *spec)
{
	static const char indent16[] = "\n                ";
	const struct jv *type = jget(spec, "type");
	int rc;

	if (jis(type, "array")) {
		const struct jv *items = jget(spec, "items");
		if (items) { /* 'items' in param_spec */
			const struct jv *it = jget(items, "type");
			if (jis(it, "string")) {
				sb_str(b, "string[]");
			} else if (jis(it, "number") || jis(it, "integer")) {
				sb_str(b, "number[]");
			} else if (jis(it, "boolean")) {
				sb_str(b, "boolean[]");
			} else {
				struct sb in = {0};
				rc = ts_type(&in, items);
				if (rc || in.oom) {
					sb_free(&in);
					return rc ? rc : -ENOMEM;
				}
				if ((in.n == 15 && !memcmp(in.p, "object | object", 15)) ||
				    u8_chars(in.p ? in.p : "", in.n) > 50)
					sb_str(b, "any[]");
				else {
					sb_put(b, in.p, in.n);
					sb_str(b, "[]");
				}
				sb_free(&in);
			}
		} else {
			sb_str(b, "any[]");
		}
		if (jtruthy(jget(spec, "nullable")))
			sb_str(b, " | null");
	} else if (type && type->t == J_ARR && type->child) {
		/* a list of types, e.g. ["string", "number"] */
		if (type->child->next)
			py_join(b, type, " | ");
		else
			py_str(b, type->child);
	} else if (jtruthy(jget(spec, "oneOf"))) {
		/* The template sets has_object_variants inside a for loop; Jinja
		 * scopes that assignment to the loop, so the "any" fallback it
		 * guards is never taken and every variant is rendered. */
		const struct jv *one = jget(spec, "oneOf");
		if (one->t == J_ARR) {
			for (const struct jv *v = one->child; v; v = v->next) {
				if ((rc = ts_type(b, v)))
					return rc;
				const struct jv *d = jget(v, "description");
				if (jtruthy(d)) {
					sb_str(b, "// ");
					py_str(b, d);
				}
				const struct jv *def = jget(v, "default");
				if (def) {
					sb_str(b, "                    // default: ");
					py_json(b, def);
				}
				if (v->next)
					sb_str(b, " | \n");
			}
		}
	} else if (jis(type, "string")) {
		const struct jv *en = jget(spec, "enum");
		if (jtruthy(en)) {
			sb_put(b, "\"", 1);
			py_join(b, en, "\" | \"");
			sb_put(b, "\"", 1);
		} else {
			sb_str(b, "string");
			if (jtruthy(jget(spec, "nullable")))
				sb_str(b, " | null");
		}
	} else if (jis(type, "number") || jis(type, "integer")) {
		sb_str(b, "number");
	} else if (jis(type, "boolean")) {
		sb_str(b, "boolean");
	} else if (jis(type, "object")) {
		const struct jv *props = jget(spec, "properties");
		if (jtruthy(props)) {
			if (props->t != J_OBJ)
				return -EINVAL;
			const struct jv *req = jget(spec, "required");
			bool first = true;
			sb_str(b, "{\n");
			for (const struct jv *c = props->child; c; c = c->next) {
				const struct jv *m = jmember(props, c);
				if (!m)
					continue;
				if (!first)
					sb_str(b, ", ");
				first = false;
				sb_put(b, c->k, c->kn);
				if (!py_in(c->k, c->kn, req))
					sb_put(b, "?", 1);
				sb_str(b, ": ");
				sb_str(b, indent16);
				if ((rc = ts_type(b, m)))
					return rc;
			}
			sb_str(b, "}");
		} else {
			sb_str(b, "object");
		}
	} else {
		sb_str(b, "any");
	}
	return 0;
}

/* One tool of render_tool_namespace("functions", tools). */
static int ts_tool(struct sb *b, const struct ms_chat_tool *t, const struct jv *params)
{
	/* The template writes "// " + tool.description unconditionally (and
	 * fails without one); a tool without a description gets no line. */
	if (t->description) {
		sb_str(b, "// ");
		sb_str(b, t->description);
		sb_str(b, "\n");
	}
	sb_str(b, "type ");
	sb_str(b, t->name);
	sb_str(b, " = ");
	const struct jv *props = jget(params, "properties");
	if (!jtruthy(params) || !jtruthy(props)) {
		sb_str(b, "() => any;\n\n");
		return 0;
	}
	if (props->t != J_OBJ)
		return -EINVAL;
	const struct jv *req = jget(params, "required");
	sb_str(b, "(_: {\n");
	for (const struct jv *c = props->child; c; c = c->next) {
		const struct jv *spec = jmember(props, c);
		if (!spec)
			continue;
		const struct jv *d = jget(spec, "description");
		if (jtruthy(d)) {
			sb_str(b, "// ");
			py_str(b, d);
			sb_str(b, "\n");
		}
		sb_put(b, c->k, c->kn);
		if (!py_in(c->k, c->kn, req))
			sb_put(b, "?", 1);
		sb_str(b, ": ");
		int rc = ts_type(b, spec);
		if (rc)
			return rc;
		const struct jv *def = jget(spec, "default");
		if (def) {
			/* enum and oneOf defaults are concatenated as strings
			 * (Jinja would fail on a non-string; str() is written). */
			if (jtruthy(jget(spec, "enum"))) {
				sb_str(b, ", // default: ");
				py_str(b, def);
			} else if (jtruthy(jget(spec, "oneOf"))) {
				sb_str(b, "// default: ");
				py_str(b, def);
			} else {
				sb_str(b, ", // default: ");
				py_json(b, def);
			}
		}
		sb_str(b, ",\n");
	}
	sb_str(b, "}) => any;\n\n");
	return 0;
}

/* ============================================================ renderer */

static bool streq(const char *a, const char *b)
{
	return a && !strcmp(a, b);
}

static bool nonempty(const char *s)
{
	return s && *s;
}

/* Tool-call arguments: the template writes `arguments|tojson`, and expects
 * them as a mapping (transformers' convention; llama.cpp parses OpenAI's
 * JSON-string arguments into one for this template). So JSON text is
 * parsed and written back as json.dumps does ({"a": 1}); text that is not
 * JSON stays a string and is written as a JSON string, as tojson would. */
static int put_arguments(struct sb *b, const char *args)
{
	if (!args) {
		sb_str(b, "{}");
		return 0;
	}
	struct jv *v;
	int rc = json_parse(args, strlen(args), &v, NULL, NULL);
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		py_json_string(b, args, strlen(args));
	else
		py_json(b, v);
	jv_free(v);
	return 0;
}

static const char *const msg_roles[] = {"system", "developer", "user", "assistant", "tool"};

static int check_request(const struct ms_chat_request *req, struct ms_err *err)
{
	if (!req)
		return ms_err_set(err, -EINVAL, "harmony: no request");
	if (req->n_messages < 0 || (req->n_messages > 0 && !req->messages))
		return ms_err_set(err, -EINVAL, "harmony: messages: %d messages given without an array",
				  req->n_messages);
	if (req->n_tools < 0 || (req->n_tools > 0 && !req->tools))
		return ms_err_set(err, -EINVAL, "harmony: tools: %d tools given without an array",
				  req->n_tools);
	const char *e = req->reasoning_effort;
	if (e && !streq(e, "low") && !streq(e, "medium") && !streq(e, "high"))
		return ms_err_set(err, -EINVAL,
				  "harmony: reasoning_effort: \"%s\" is not one of low, medium, high", e);
	const char *d = req->date;
	if (d) {
		bool ok = strlen(d) == 10;
		for (int i = 0; ok && i < 10; i++)
			ok = (i == 4 || i == 7) ? d[i] == '-' : (d[i] >= '0' && d[i] <= '9');
		if (!ok)
			return ms_err_set(err, -EINVAL, "harmony: date: \"%s\" is not YYYY-MM-DD", d);
	}
	for (int i = 0; i < req->n_tools; i++)
		if (!nonempty(req->tools[i].name))
			return ms_err_set(err, -EINVAL, "harmony: tools[%d].name: missing", i);
	for (int i = 0; i < req->n_messages; i++) {
		const struct ms_chat_message *m = &req->messages[i];
		bool known = false;
		for (size_t r = 0; r < sizeof(msg_roles) / sizeof(msg_roles[0]); r++)
			known |= streq(m->role, msg_roles[r]);
		if (!known)
			return ms_err_set(err, -EINVAL,
					  "harmony: messages[%d].role: \"%s\" is not one of system, developer, "
					  "user, assistant, tool", i, m->role ? m->role : "(null)");
		if (streq(m->role, "tool") && !nonempty(m->name))
			return ms_err_set(err, -EINVAL,
					  "harmony: messages[%d].name: a tool message needs the function name", i);
		if (!streq(m->role, "assistant"))
			continue;
		if (m->n_tool_calls < 0 || (m->n_tool_calls > 0 && !m->tool_calls))
			return ms_err_set(err, -EINVAL, "harmony: messages[%d].tool_calls: %d calls given "
					  "without an array", i, m->n_tool_calls);
		for (int j = 0; j < m->n_tool_calls; j++)
			if (!nonempty(m->tool_calls[j].name))
				return ms_err_set(err, -EINVAL,
						  "harmony: messages[%d].tool_calls[%d].name: missing", i, j);
		/* The template refuses channel tags in content and thinking. */
		static const char *const tags[] = {"<|channel|>analysis<|message|>",
						   "<|channel|>final<|message|>"};
		for (int t = 0; t < 2; t++) {
			if (m->content && strstr(m->content, tags[t]))
				return ms_err_set(err, -EINVAL, "harmony: messages[%d].content: contains "
						  "%s; pass the analysis as reasoning", i, tags[t]);
			if (m->reasoning && strstr(m->reasoning, tags[t]))
				return ms_err_set(err, -EINVAL, "harmony: messages[%d].reasoning: contains "
						  "%s", i, tags[t]);
		}
	}
	return 0;
}

/* build_system_message(). */
static void put_system(struct sb *b, const struct ms_chat_request *req)
{
	char today[16];
	const char *date = req->date;
	if (!date) {
		time_t now = time(NULL);
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(today, sizeof(today), "%Y-%m-%d", &tm);
		date = today;
	}
	sb_tpl(b, "<|start|>system<|message|>");
	sb_str(b, req->model_identity ? req->model_identity
				      : "You are ChatGPT, a large language model trained by OpenAI.");
	sb_str(b, "\nKnowledge cutoff: 2024-06\nCurrent date: ");
	sb_str(b, date);
	sb_str(b, "\n\nReasoning: ");
	sb_str(b, req->reasoning_effort ? req->reasoning_effort : "medium");
	sb_str(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
		  "every message.");
	/* Newest revision: only with tools (the first one always wrote it). */
	if (req->n_tools > 0)
		sb_str(b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
	sb_tpl(b, "<|end|>");
}

/* The developer message: the first message's content when it is a system
 * or developer message, then the tools. */
static int put_developer(struct sb *b, const struct ms_chat_request *req, const char *instr,
			 struct ms_err *err)
{
	if (!nonempty(instr) && req->n_tools == 0)
		return 0;
	sb_tpl(b, "<|start|>developer<|message|>");
	if (nonempty(instr)) {
		sb_str(b, "# Instructions\n\n");
		sb_str(b, instr);
		sb_str(b, "\n\n");
	}
	if (req->n_tools > 0) {
		sb_str(b, "# Tools\n\n## functions\n\nnamespace functions {\n\n");
		for (int i = 0; i < req->n_tools; i++) {
			const struct ms_chat_tool *t = &req->tools[i];
			struct jv *params = NULL;
			if (t->parameters) {
				const char *why;
				size_t at;
				int rc = json_parse(t->parameters, strlen(t->parameters), &params, &why, &at);
				if (rc == -ENOMEM)
					return ms_err_set(err, rc, "harmony: out of memory");
				if (rc)
					return ms_err_set(err, rc, "harmony: tools[%d].parameters: not JSON (%s "
							  "at byte %zu)", i, why, at);
			}
			int rc = ts_tool(b, t, params);
			jv_free(params);
			if (rc == -ENOMEM)
				return ms_err_set(err, rc, "harmony: out of memory");
			if (rc)
				return ms_err_set(err, rc, "harmony: tools[%d].parameters: a \"properties\" "
						  "is not an object", i);
		}
		sb_str(b, "} // namespace functions");
	}
	sb_tpl(b, "<|end|>");
	return 0;
}

/* An assistant message with tool calls. The analysis (reasoning, or the
 * content when there is no reasoning: the template's reading of content in
 * a tool-call turn) is kept only while no later assistant message without
 * tool calls exists: once a final answer follows, it is dropped. */
static int put_tool_calls(struct sb *b, const struct ms_chat_message *m, bool later_final)
{
	const char *analysis = nonempty(m->reasoning) ? m->reasoning : m->content;
	if (nonempty(analysis) && !later_final) {
		sb_tpl(b, "<|start|>assistant<|channel|>analysis<|message|>");
		sb_str(b, analysis);
		sb_tpl(b, "<|end|>");
	}
	/* Both reasoning and content: the template refuses this; here the
	 * content is the user-visible preamble the model wrote on the
	 * commentary channel, and is rendered back there. */
	if (nonempty(m->reasoning) && nonempty(m->content)) {
		sb_tpl(b, "<|start|>assistant<|channel|>commentary<|message|>");
		sb_str(b, m->content);
		sb_tpl(b, "<|end|>");
	}
	/* The template renders only tool_calls[0]; every call is rendered
	 * here, each as its own message (the same text for one call). */
	for (int j = 0; j < m->n_tool_calls; j++) {
		sb_tpl(b, "<|start|>assistant to=functions.");
		sb_str(b, m->tool_calls[j].name);
		sb_tpl(b, "<|channel|>commentary json<|message|>");
		int rc = put_arguments(b, m->tool_calls[j].arguments);
		if (rc)
			return rc;
		sb_tpl(b, "<|call|>");
	}
	return 0;
}

int ms_harmony_render_ex(const struct ms_chat_request *req, char **out, size_t *len,
			 struct ms_harmony_span **specials, size_t *n_specials,
			 struct ms_err *err)
{
	*out = NULL;
	if (len)
		*len = 0;
	if (specials)
		*specials = NULL;
	if (n_specials)
		*n_specials = 0;
	int rc = check_request(req, err);
	if (rc)
		return rc;

	struct sb b = {0};
	put_system(&b, req);

	int first = 0;
	const char *instr = NULL;
	if (req->n_messages > 0 && (streq(req->messages[0].role, "system") ||
				    streq(req->messages[0].role, "developer"))) {
		instr = req->messages[0].content;
		first = 1;
	}
	if ((rc = put_developer(&b, req, instr, err)))
		goto fail;

	for (int i = first; i < req->n_messages; i++) {
		const struct ms_chat_message *m = &req->messages[i];
		if (streq(m->role, "assistant") && m->n_tool_calls > 0) {
			bool later_final = false;
			for (int j = i + 1; j < req->n_messages; j++)
				later_final |= streq(req->messages[j].role, "assistant") &&
					       req->messages[j].n_tool_calls == 0;
			if ((rc = put_tool_calls(&b, m, later_final))) {
				ms_err_set(err, rc, "harmony: out of memory");
				goto fail;
			}
		} else if (streq(m->role, "assistant")) {
			/* Earlier turns' analysis is never rendered. A NULL
			 * content is "" (the template would fail). */
			sb_tpl(&b, "<|start|>assistant<|channel|>final<|message|>");
			sb_str(&b, m->content ? m->content : "");
			sb_tpl(&b, "<|end|>");
		} else if (streq(m->role, "tool")) {
			/* The template writes content|tojson: a string result
			 * becomes a quoted JSON string (NULL: null). The name is
			 * the message's (the template: the last call's). */
			sb_tpl(&b, "<|start|>functions.");
			sb_str(&b, m->name);
			sb_tpl(&b, " to=assistant<|channel|>commentary<|message|>");
			if (m->content)
				py_json_string(&b, m->content, strlen(m->content));
			else
				sb_str(&b, "null");
			sb_tpl(&b, "<|end|>");
		} else if (streq(m->role, "user")) {
			sb_tpl(&b, "<|start|>user<|message|>");
			sb_str(&b, m->content ? m->content : "");
			sb_tpl(&b, "<|end|>");
		}
		/* A system or developer message after the first is skipped,
		 * as the template's loop skips it. */
	}
	sb_tpl(&b, "<|start|>assistant");
	if (b.oom) {
		rc = ms_err_set(err, -ENOMEM, "harmony: out of memory");
		goto fail;
	}
	*out = b.p;
	if (len)
		*len = b.n;
	if (specials) {
		*specials = b.sp;
		b.sp = NULL;
	}
	if (n_specials)
		*n_specials = b.n_sp;
	free(b.sp);
	return 0;
fail:
	sb_free(&b);
	return rc;
}

int ms_harmony_render(const struct ms_chat_request *req, char **out, size_t *len,
		      struct ms_err *err)
{
	return ms_harmony_render_ex(req, out, len, NULL, NULL, err);
}

/* ============================================================== parser */

#define NO_OFF SIZE_MAX

void ms_harmony_parser_init(struct ms_harmony_parser *p, const struct ms_harmony_ids *ids,
			    ms_harmony_cb cb, void *ctx)
{
	memset(p, 0, sizeof(*p));
	p->ids = *ids;
	p->cb = cb;
	p->ctx = ctx;
	p->state = MS_HARMONY_IN_HEADER; /* the prompt ended with <|start|>assistant */
	p->chan_at = p->cons_at = NO_OFF;
}

void ms_harmony_parser_free(struct ms_harmony_parser *p)
{
	(void)p; /* nothing allocated */
}

static int emit(struct ms_harmony_parser *p, enum ms_harmony_event ev, const char *s, size_t n)
{
	bool text = ev == MS_HARMONY_REASONING || ev == MS_HARMONY_CONTENT || ev == MS_HARMONY_TOOL_ARGS;
	if (!p->cb || (text && n == 0))
		return 0;
	return p->cb(p->ctx, ev, s, n);
}

static void hdr_reset(struct ms_harmony_parser *p)
{
	p->state = MS_HARMONY_IN_HEADER;
	p->hdr_len = 0;
	p->hdr_tokens = 0;
	p->chan_at = p->cons_at = NO_OFF;
	p->hdr_dup = 0;
}

/* The buffered header cannot be a header: it becomes content. */
static int hdr_flush(struct ms_harmony_parser *p)
{
	p->n_malformed++;
	int rc = emit(p, MS_HARMONY_CONTENT, p->hdr, p->hdr_len);
	p->hdr_len = 0;
	return rc;
}

/* Append to the header; a header that outgrows the buffer is flushed as
 * content together with s, and the message is content from then on. */
static int hdr_add(struct ms_harmony_parser *p, const char *s, size_t n)
{
	p->hdr_tokens++;
	if (p->hdr_len + n > sizeof(p->hdr)) {
		int rc = hdr_flush(p);
		if (!rc)
			rc = emit(p, MS_HARMONY_CONTENT, s, n);
		p->state = MS_HARMONY_IN_BODY;
		p->body = MS_HARMONY_BODY_CONTENT;
		return rc;
	}
	memcpy(p->hdr + p->hdr_len, s, n);
	p->hdr_len += n;
	return 0;
}

/* The current message ends (a terminator, or the start of another message
 * where <|end|> was missing). */
static int body_end(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_BODY && p->body == MS_HARMONY_BODY_TOOL)
		rc = emit(p, MS_HARMONY_TOOL_CALL_END, NULL, 0);
	p->state = MS_HARMONY_BETWEEN;
	return rc;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Next whitespace-separated word of s[*i, end); false at the end. */
static bool next_word(const char *s, size_t end, size_t *i, size_t *w, size_t *wn)
{
	while (*i < end && is_space(s[*i]))
		(*i)++;
	if (*i >= end)
		return false;
	*w = *i;
	while (*i < end && !is_space(s[*i]))
		(*i)++;
	*wn = *i - *w;
	return true;
}

static bool word_is(const char *s, size_t w, size_t wn, const char *lit)
{
	return wn == strlen(lit) && !memcmp(s + w, lit, wn);
}

/* End of the header segment that starts at `from`: the next spelled
 * special token, or the end. */
static size_t seg_end(const struct ms_harmony_parser *p, size_t from)
{
	size_t e = p->hdr_len;
	if (p->chan_at != NO_OFF && p->chan_at >= from && p->chan_at < e)
		e = p->chan_at;
	if (p->cons_at != NO_OFF && p->cons_at >= from && p->cons_at < e)
		e = p->cons_at;
	return e;
}

/* Parse the buffered header at <|message|>. The header is
 *   [assistant] [to=R] <|channel|>CHANNEL [to=R] [json] [<|constrain|>json]
 * in that order or with the recipient on either side. Returns false when
 * it does not parse; else *body, and for a tool call the name in the
 * header buffer. */
static bool hdr_parse(struct ms_harmony_parser *p, enum ms_harmony_body *body,
		      size_t *name, size_t *name_len)
{
	const char *h = p->hdr;
	size_t i, w, wn, to = NO_OFF, to_len = 0;
	int k;
	if (p->hdr_dup || p->chan_at == NO_OFF)
		return false;

	/* role part: an optional "assistant" (given by the prompt for the
	 * first message), then only a recipient */
	i = 0;
	size_t end = seg_end(p, 0);
	for (k = 0; next_word(h, end, &i, &w, &wn); k++) {
		if (k == 0 && word_is(h, w, wn, "assistant"))
			continue;
		if (wn < 3 || memcmp(h + w, "to=", 3) || to != NO_OFF)
			return false;
		to = w + 3;
		to_len = wn - 3;
	}

	/* channel part: the channel, then a recipient or a content type */
	i = p->chan_at + strlen("<|channel|>");
	end = seg_end(p, i);
	if (!next_word(h, end, &i, &w, &wn))
		return false;
	if (word_is(h, w, wn, "analysis"))
		*body = MS_HARMONY_BODY_REASONING;
	else if (word_is(h, w, wn, "final") || word_is(h, w, wn, "commentary"))
		*body = MS_HARMONY_BODY_CONTENT;
	else
		return false;
	while (next_word(h, end, &i, &w, &wn)) {
		if (wn >= 3 && !memcmp(h + w, "to=", 3)) {
			if (to != NO_OFF)
				return false;
			to = w + 3;
			to_len = wn - 3;
		} /* else a content type such as "json": ignored */
	}

	/* constrain part: json */
	if (p->cons_at != NO_OFF) {
		i = p->cons_at + strlen("<|constrain|>");
		end = seg_end(p, i);
		if (!next_word(h, end, &i, &w, &wn) || !word_is(h, w, wn, "json"))
			return false;
		while (next_word(h, end, &i, &w, &wn)) {
			if (wn >= 3 && !memcmp(h + w, "to=", 3)) {
				if (to != NO_OFF)
					return false;
				to = w + 3;
				to_len = wn - 3;
			}
		}
	}

	if (to != NO_OFF) {
		static const char fn[] = "functions.";
		size_t fl = sizeof(fn) - 1;
		if (to_len <= fl || memcmp(h + to, fn, fl))
			return false; /* no name, or not a function (no built-in tools here) */
		*body = MS_HARMONY_BODY_TOOL;
		*name = to + fl;
		*name_len = to_len - fl;
	}
	return true;
}

static int on_message(struct ms_harmony_parser *p)
{
	enum ms_harmony_body body;
	size_t name = 0, name_len = 0;
	int rc = 0;
	p->state = MS_HARMONY_IN_BODY;
	if (!hdr_parse(p, &body, &name, &name_len)) {
		p->body = MS_HARMONY_BODY_CONTENT;
		return hdr_flush(p);
	}
	p->body = body;
	if (body == MS_HARMONY_BODY_TOOL) {
		p->n_tool_calls++;
		rc = emit(p, MS_HARMONY_TOOL_CALL_BEGIN, p->hdr + name, name_len);
	}
	return rc;
}

static int on_stop(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_HEADER && p->hdr_tokens > 0)
		rc = hdr_flush(p);
	if (!rc)
		rc = body_end(p);
	p->state = MS_HARMONY_DONE;
	const char *why = p->n_tool_calls > 0 ? "tool_calls" : "stop";
	return rc ? rc : emit(p, MS_HARMONY_STOP, why, strlen(why));
}

/* <|channel|> or <|constrain|> while in a header. */
static int hdr_special(struct ms_harmony_parser *p, const char *spelled, size_t *at)
{
	if (*at != NO_OFF)
		p->hdr_dup = 1;
	size_t off = p->hdr_len;
	int rc = hdr_add(p, spelled, strlen(spelled));
	if (p->state == MS_HARMONY_IN_HEADER && *at == NO_OFF)
		*at = off;
	return rc;
}

int ms_harmony_parser_push(struct ms_harmony_parser *p, int32_t id, const char *text, size_t len)
{
	const struct ms_harmony_ids *ids = &p->ids;
	int rc = 0;
	if (!text)
		len = 0;
	if (p->state == MS_HARMONY_DONE)
		return 0;

	if (id == ids->ret || id == ids->call)
		return on_stop(p);

	if (id == ids->end) {
		switch (p->state) {
		case MS_HARMONY_IN_HEADER: /* a message without <|message|> */
			rc = hdr_flush(p);
			p->state = MS_HARMONY_BETWEEN;
			return rc;
		case MS_HARMONY_IN_BODY:
			return body_end(p);
		default:
			p->n_malformed++; /* a stray <|end|> */
			return 0;
		}
	}

	if (id == ids->start) {
		if (p->state == MS_HARMONY_IN_HEADER && p->hdr_tokens > 0)
			rc = hdr_flush(p); /* a header cut short */
		else if (p->state == MS_HARMONY_IN_BODY) {
			p->n_malformed++; /* <|end|> missing */
			rc = body_end(p);
		}
		hdr_reset(p);
		p->hdr_tokens = 1;
		return rc;
	}

	/* <|channel|>, <|constrain|>, <|message|> or text */
	bool is_chan = id == ids->channel, is_cons = id == ids->constrain, is_msg = id == ids->message;
	if (p->state == MS_HARMONY_BETWEEN) {
		if (!is_chan && !is_cons && !is_msg && len == 0)
			return 0; /* held-back bytes: wait for the text */
		p->n_malformed++; /* <|start|> missing: read a header anyway */
		hdr_reset(p);
	} else if (p->state == MS_HARMONY_IN_BODY && is_chan) {
		p->n_malformed++; /* <|end|><|start|>assistant missing */
		if ((rc = body_end(p)))
			return rc;
		hdr_reset(p);
	} else if (p->state == MS_HARMONY_IN_BODY && (is_cons || is_msg)) {
		const char *s = is_cons ? "<|constrain|>" : "<|message|>";
		p->n_malformed++;
		return emit(p, MS_HARMONY_CONTENT, s, strlen(s));
	}

	if (p->state == MS_HARMONY_IN_HEADER) {
		if (is_chan)
			return hdr_special(p, "<|channel|>", &p->chan_at);
		if (is_cons)
			return hdr_special(p, "<|constrain|>", &p->cons_at);
		if (is_msg)
			return on_message(p);
		return hdr_add(p, text, len);
	}

	/* text in a body */
	switch (p->body) {
	case MS_HARMONY_BODY_REASONING: return emit(p, MS_HARMONY_REASONING, text, len);
	case MS_HARMONY_BODY_CONTENT: return emit(p, MS_HARMONY_CONTENT, text, len);
	case MS_HARMONY_BODY_TOOL: return emit(p, MS_HARMONY_TOOL_ARGS, text, len);
	}
	return 0;
}

int ms_harmony_parser_finish(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_HEADER && p->hdr_tokens > 0)
		rc = hdr_flush(p); /* generation ended inside a header */
	else if (p->state == MS_HARMONY_IN_BODY)
		rc = body_end(p);
	p->state = MS_HARMONY_DONE;
	return rc;
}
