/*
 * harmony-json.c: the JSON reader of the harmony renderer (harmony-int.h):
 * a small parser that keeps object order and number literals, and
 * Python's json.dumps and str() on its values (the template's `tojson`
 * filter and string concatenation).
 *
 * Why not config/ms-json.h, the project's JSON module: the chat template
 * renders tool schemas and arguments as Python wrote them, and cJSON
 * keeps neither a number's literal (1.0 comes back as 1) nor the
 * formatting Python's json.dumps gives.
 */
#include "harmony-int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-strbuf.h"

/* ============================================================== parser */

void ms_hj_free(struct jv *v)
{
	while (v) {
		struct jv *next = v->next;
		ms_hj_free(v->child);
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

/* The escape after a backslash, decoded into b. A high surrogate escape
 * followed by a low one is one code point; a lone surrogate is kept in its
 * 3-byte form (Python keeps it in a str), which ms_hj_dump_string writes
 * back as \udxxx. */
static int jp_escape(struct jparse *jp, struct ms_strbuf *b)
{
	if (jp->i >= jp->n)
		return jp_fail(jp, "unterminated string");
	char e = jp->s[jp->i++];
	const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
	const char *m = strchr(map, e);
	if (e && m && (m - map) % 2 == 0) {
		ms_strbuf_add(b, m + 1, 1);
		return 0;
	}
	if (e != 'u')
		return jp_fail(jp, "bad escape");
	unsigned u, lo;
	if (jp_hex4(jp, &u))
		return jp->rc;
	if (u >= 0xD800 && u < 0xDC00 && jp->i + 6 <= jp->n && jp->s[jp->i] == '\\' &&
	    jp->s[jp->i + 1] == 'u') {
		size_t save = jp->i;
		jp->i += 2;
		if (jp_hex4(jp, &lo))
			return jp->rc;
		if (lo >= 0xDC00 && lo < 0xE000)
			u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
		else
			jp->i = save; /* a lone high surrogate, then another escape */
	}
	ms_strbuf_utf8(b, u);
	return 0;
}

/* A string starting at the opening quote; *out malloc'd (NUL-terminated,
 * "" too). */
static int jp_string(struct jparse *jp, char **out, size_t *len)
{
	struct ms_strbuf b = {0};
	jp->i++; /* the quote */
	for (;;) {
		if (jp->i >= jp->n) {
			ms_strbuf_free(&b);
			return jp_fail(jp, "unterminated string");
		}
		unsigned char c = (unsigned char)jp->s[jp->i];
		if (c == '"') {
			jp->i++;
			break;
		}
		if (c < 0x20) {
			ms_strbuf_free(&b);
			return jp_fail(jp, "control character in string");
		}
		if (c == '\\') {
			jp->i++;
			int rc = jp_escape(jp, &b);
			if (rc) {
				ms_strbuf_free(&b);
				return rc;
			}
			continue;
		}
		size_t j = jp->i;
		while (j < jp->n && jp->s[j] != '"' && jp->s[j] != '\\' &&
		       (unsigned char)jp->s[j] >= 0x20)
			j++;
		ms_strbuf_add(&b, jp->s + jp->i, j - jp->i);
		jp->i = j;
	}
	*len = b.len;
	if (!(*out = ms_strbuf_take(&b)))
		return jp->rc = -ENOMEM;
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
	ms_hj_free(v);
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

int ms_hj_parse(const char *text, size_t n, struct jv **out, const char **why, size_t *at)
{
	struct jparse jp = {.s = text, .n = n};
	struct jv *v = jp_value(&jp);
	if (v) {
		jp_ws(&jp);
		if (jp.i < jp.n) {
			ms_hj_free(v);
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

/* ============================================================ access */

const struct jv *ms_hj_get(const struct jv *v, const char *key)
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

const struct jv *ms_hj_member(const struct jv *obj, const struct jv *c)
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

bool ms_hj_is(const struct jv *v, const char *s)
{
	return v && v->t == J_STR && v->n == strlen(s) && !memcmp(v->s, s, v->n);
}

bool ms_hj_truthy(const struct jv *v)
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
static void py_float(struct ms_strbuf *b, double v, bool json)
{
	if (isinf(v)) {
		ms_strbuf_str(b, v > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
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
		ms_strbuf_add(b, "-", 1);
	if (exp10 >= -4 && exp10 < 16) {
		if (exp10 >= 0) {
			for (int i = 0; i <= exp10; i++)
				ms_strbuf_add(b, i < nd ? &dig[i] : "0", 1);
			ms_strbuf_add(b, ".", 1);
			if (nd > exp10 + 1)
				ms_strbuf_add(b, dig + exp10 + 1, (size_t)(nd - exp10 - 1));
			else
				ms_strbuf_add(b, "0", 1);
		} else {
			ms_strbuf_add(b, "0.", 2);
			for (int i = 0; i < -exp10 - 1; i++)
				ms_strbuf_add(b, "0", 1);
			ms_strbuf_add(b, dig, (size_t)nd);
		}
	} else {
		ms_strbuf_add(b, dig, 1);
		if (nd > 1) {
			ms_strbuf_add(b, ".", 1);
			ms_strbuf_add(b, dig + 1, (size_t)(nd - 1));
		}
		snprintf(buf, sizeof(buf), "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
		ms_strbuf_str(b, buf);
	}
}

static bool jnum_is_int(const struct jv *v)
{
	return !strpbrk(v->s, ".eE");
}

/* A number as Python prints it after json.loads: ints keep their digits
 * (-0 is 0), floats go through repr(). */
static void py_number(struct ms_strbuf *b, const struct jv *v, bool json)
{
	if (jnum_is_int(v)) {
		if (!strcmp(v->s, "-0"))
			ms_strbuf_add(b, "0", 1);
		else
			ms_strbuf_add(b, v->s, v->n);
	} else {
		py_float(b, strtod(v->s, NULL), json);
	}
}

/* json.dumps(s, ensure_ascii=False): escapes ", \, and control characters
 * (\n \r \t \b \f by name, the rest as \u00xx); other characters as is. A
 * lone surrogate (3-byte form ED A0..BF xx) is written as \udxxx. */
void ms_hj_dump_string(struct ms_strbuf *b, const char *s, size_t n)
{
	ms_strbuf_add(b, "\"", 1);
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
				ms_strbuf_add(b, s + i - run, run);
				run = 0;
				ms_strbuf_str(b, u);
				i += 2;
				continue;
			}
		}
		if (e) {
			ms_strbuf_add(b, s + i - run, run);
			run = 0;
			ms_strbuf_str(b, e);
		} else {
			run++;
		}
	}
	ms_strbuf_add(b, s + n - run, run);
	ms_strbuf_add(b, "\"", 1);
}

/* json.dumps(v) with the default separators ", " and ": " (transformers'
 * tojson filter: ensure_ascii=False, no indent, keys unsorted). */
void ms_hj_dump(struct ms_strbuf *b, const struct jv *v)
{
	switch (v->t) {
	case J_NULL: ms_strbuf_str(b, "null"); break;
	case J_FALSE: ms_strbuf_str(b, "false"); break;
	case J_TRUE: ms_strbuf_str(b, "true"); break;
	case J_NUM: py_number(b, v, true); break;
	case J_STR: ms_hj_dump_string(b, v->s, v->n); break;
	case J_ARR:
		ms_strbuf_add(b, "[", 1);
		for (const struct jv *c = v->child; c; c = c->next) {
			ms_hj_dump(b, c);
			if (c->next)
				ms_strbuf_add(b, ", ", 2);
		}
		ms_strbuf_add(b, "]", 1);
		break;
	case J_OBJ: {
		bool first = true;
		ms_strbuf_add(b, "{", 1);
		for (const struct jv *c = v->child; c; c = c->next) {
			const struct jv *m = ms_hj_member(v, c);
			if (!m)
				continue;
			if (!first)
				ms_strbuf_add(b, ", ", 2);
			first = false;
			ms_hj_dump_string(b, c->k, c->kn);
			ms_strbuf_add(b, ": ", 2);
			ms_hj_dump(b, m);
		}
		ms_strbuf_add(b, "}", 1);
		break;
	}
	}
}

/* Python str(v), what Jinja's `~`, join and `{{ }}` write. Strings are
 * bare; lists and dicts (a schema would have to be odd for them to get
 * here) are written as JSON, not as Python's repr. */
void ms_hj_str(struct ms_strbuf *b, const struct jv *v)
{
	switch (v->t) {
	case J_NULL: ms_strbuf_str(b, "None"); break;
	case J_FALSE: ms_strbuf_str(b, "False"); break;
	case J_TRUE: ms_strbuf_str(b, "True"); break;
	case J_NUM: py_number(b, v, false); break;
	case J_STR: ms_strbuf_add(b, v->s, v->n); break;
	default: ms_hj_dump(b, v); break;
	}
}
