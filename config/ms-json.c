/* ms-json.c: see ms-json.h. */
#include "ms-json.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-file.h"
#include "ms-hash.h"
#include "ms-utf8.h"

/* A scan of the text holds it to RFC 8259 before cJSON reads it (why:
 * ms-json.h): whitespace only as the RFC spells it, strings strictly UTF-8
 * with control bytes escaped and surrogates paired, numbers by the RFC
 * grammar, nothing after the value, nesting bounded; then the tree is
 * walked for repeated keys. */

#define DEPTH_MAX 512

struct scan {
	const unsigned char *s;
	size_t n, i;
	size_t nuls;        /* \u0000 escapes seen */
	unsigned flags;     /* MS_JSON_* */
	const char *why;    /* the first fault, at i */
	char buf[160];      /* why's room when it shows a byte */
};

static bool fault(struct scan *c, const char *why)
{
	c->why = why;
	return false;
}

/* The text ended early: "the body ends inside a string". */
static bool fault_end(struct scan *c, const char *where)
{
	snprintf(c->buf, sizeof(c->buf), "the %s ends %s",
		 c->flags & MS_JSON_BODY ? "body" : "file", where);
	return fault(c, c->buf);
}

static bool fault_byte(struct scan *c, const char *what)
{
	if (c->i >= c->n)
		return fault_end(c, "inside the JSON value");
	unsigned char b = c->s[c->i];
	if (b >= 0x21 && b < 0x7F)
		snprintf(c->buf, sizeof(c->buf), "%s, not '%c'", what, b);
	else
		snprintf(c->buf, sizeof(c->buf), "%s, not the byte 0x%02X", what, b);
	return fault(c, c->buf);
}

static void skip_ws(struct scan *c)
{
	while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
			       c->s[c->i] == '\r'))
		c->i++;
}

static int hex4(const struct scan *c, size_t at)
{
	if (at + 4 > c->n)
		return -1;
	int v = 0;
	for (size_t k = at; k < at + 4; k++) {
		unsigned char h = c->s[k];
		int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
			: h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/* A \u escape at c->i (the backslash): one code unit, or a surrogate pair. */
static bool scan_u(struct scan *c)
{
	int u = hex4(c, c->i + 2);
	if (u < 0)
		return fault(c, "\\u must be followed by four hex digits");
	c->i += 6;
	if (u >= 0xDC00 && u < 0xE000)
		return c->i -= 6, fault(c, "a \\u escape is a lone low surrogate");
	if (u >= 0xD800 && u < 0xDC00) {
		int lo = c->i + 1 < c->n && c->s[c->i] == '\\' && c->s[c->i + 1] == 'u' ? hex4(c, c->i + 2) : -1;
		if (lo < 0xDC00 || lo >= 0xE000)
			return c->i -= 6, fault(c, "a \\u escape is a high surrogate without its low half");
		c->i += 6;
	}
	if (u == 0 && !(c->flags & MS_JSON_CARRY_NUL))
		return c->i -= 6, fault(c, "a \\u0000 (NUL) in a string is not accepted here");
	c->nuls += u == 0;
	return true;
}

static bool scan_string(struct scan *c)
{
	c->i++; /* the opening quote */
	while (c->i < c->n) {
		unsigned char b = c->s[c->i];
		uint32_t cp;
		if (b == '"') {
			c->i++;
			return true;
		}
		if (b < 0x20)
			return fault_byte(c, "a control character inside a string must be escaped");
		if (b == '\\') {
			unsigned char e = c->i + 1 < c->n ? c->s[c->i + 1] : 0;
			if (e == 'u') {
				if (!scan_u(c))
					return false;
				continue;
			}
			if (!strchr("\"\\/bfnrt", e) || !e)
				return c->i++, fault_byte(c, "an escape must be one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
			c->i += 2;
			continue;
		}
		int k = b < 0x80 ? 1 : ms_utf8_decode(c->s + c->i, c->n - c->i, &cp);
		if (k < 0)
			return fault(c, "a string is not valid UTF-8");
		c->i += (size_t)k;
	}
	return fault_end(c, "inside a string");
}

static bool digits(struct scan *c)
{
	size_t i0 = c->i;
	while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
		c->i++;
	return c->i > i0;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool scan_number(struct scan *c)
{
	if (c->s[c->i] == '-')
		c->i++;
	if (c->i < c->n && c->s[c->i] == '0')
		c->i++;
	else if (!digits(c))
		return fault_byte(c, "a number needs a digit here");
	if (c->i < c->n && c->s[c->i] == '.' && (c->i++, !digits(c)))
		return fault_byte(c, "a number needs a digit after '.'");
	if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
		c->i++;
		if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-'))
			c->i++;
		if (!digits(c))
			return fault_byte(c, "a number needs a digit in its exponent");
	}
	return true;
}

static bool scan_word(struct scan *c, const char *w)
{
	size_t l = strlen(w);
	if (c->n - c->i < l || memcmp(c->s + c->i, w, l))
		return fault_byte(c, "expected a JSON value");
	c->i += l;
	return true;
}

static bool scan_value(struct scan *c, int depth);

/* An object or array at c->i: members separated by commas, no trailing
 * one. */
static bool scan_container(struct scan *c, int depth)
{
	bool obj = c->s[c->i] == '{';
	unsigned char close = obj ? '}' : ']';
	if (depth >= DEPTH_MAX)
		return fault(c, "objects and arrays nest deeper than 512");
	c->i++;
	skip_ws(c);
	if (c->i < c->n && c->s[c->i] == close)
		return c->i++, true;
	for (;;) {
		if (obj) {
			if (c->i >= c->n || c->s[c->i] != '"')
				return fault_byte(c, "expected a key (a string)");
			if (!scan_string(c))
				return false;
			skip_ws(c);
			if (c->i >= c->n || c->s[c->i] != ':')
				return fault_byte(c, "expected ':' after the key");
			c->i++;
		}
		if (!scan_value(c, depth + 1))
			return false;
		skip_ws(c);
		if (c->i < c->n && c->s[c->i] == close)
			return c->i++, true;
		if (c->i >= c->n || c->s[c->i] != ',')
			return fault_byte(c, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		c->i++;
		skip_ws(c);
	}
}

static bool scan_value(struct scan *c, int depth)
{
	skip_ws(c);
	if (c->i >= c->n)
		return fault_end(c, "where a JSON value should be");
	switch (c->s[c->i]) {
	case '{':
	case '[':
		return scan_container(c, depth);
	case '"':
		return scan_string(c);
	case 't':
		return scan_word(c, "true");
	case 'f':
		return scan_word(c, "false");
	case 'n':
		return scan_word(c, "null");
	default:
		if (c->s[c->i] == '-' || (c->s[c->i] >= '0' && c->s[c->i] <= '9'))
			return scan_number(c);
		return fault_byte(c, "expected a JSON value");
	}
}

/* The text with every \u0000 escape replaced by the carried NUL
 * (ms-utf8.h), which cJSON copies as it is; text is valid JSON. */
static char *carry_nuls(const char *t, size_t n, size_t *out_n)
{
	char *o = malloc(n ? n : 1);
	size_t k = 0;
	bool in_str = false;
	for (size_t i = 0; o && i < n; i++) {
		if (in_str && t[i] == '\\') {
			if (t[i + 1] == 'u' && !memcmp(t + i + 2, "0000", 4)) {
				memcpy(o + k, MS_NUL_CARRIER, 2);
				k += 2, i += 5;
				continue;
			}
			o[k++] = t[i++]; /* the escaped byte is copied below */
		} else if (t[i] == '"') {
			in_str = !in_str;
		}
		o[k++] = t[i];
	}
	*out_n = k;
	return o;
}

/* "line L, column C (byte B)" of offset i, 1-based as editors count. */
static void where(const char *t, size_t i, char *b, size_t n)
{
	size_t line = 1, col = 1;
	for (size_t k = 0; k < i; k++) {
		line += t[k] == '\n';
		col = t[k] == '\n' ? 1 : col + 1;
	}
	snprintf(b, n, "line %zu, column %zu (byte %zu)", line, col, i);
}

/* A key's string hashed: FNV-1a's bytes, then mixed (ms-hash.h). */
static uint64_t key_hash(const char *k)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *k; k++)
		h = (h ^ (uint8_t)*k) * 0x100000001b3ull;
	return ms_mix64(h);
}

/* A key o holds twice, or NULL; -1 in *oom when the check could not
 * allocate. Small objects pairwise, large ones (a tokenizer's 200k-entry
 * vocab) through a hash set of their keys, a quarter full at most. */
static const char *dup_key(const cJSON *o, int *oom)
{
	size_t n = 0;
	const cJSON *a, *b;
	cJSON_ArrayForEach(a, o) n++;
	if (n <= 16) {
		for (a = o->child; a; a = a->next)
			for (b = a->next; b; b = b->next)
				if (!strcmp(a->string, b->string))
					return a->string;
		return NULL;
	}
	size_t cap = 64;
	while (cap < 4 * n)
		cap <<= 1;
	const cJSON **t = calloc(cap, sizeof(*t));
	if (!t)
		return *oom = -1, NULL;
	const char *d = NULL;
	for (a = o->child; a && !d; a = a->next) {
		size_t h = (size_t)key_hash(a->string) & (cap - 1);
		while (t[h] && strcmp(t[h]->string, a->string))
			h = (h + 1) & (cap - 1);
		if (t[h])
			d = a->string;
		t[h] = a;
	}
	free(t);
	return d;
}

/* The path of a member below path (p bytes used of cap): .key or [i]. */
static size_t path_push(char *path, size_t p, size_t cap, const cJSON *parent, const cJSON *it, int i)
{
	int w = cJSON_IsObject(parent) ? snprintf(path + p, cap - p, "%s%s", p ? "." : "", it->string)
				       : snprintf(path + p, cap - p, "[%d]", i);
	return w < 0 ? p : p + (size_t)w >= cap ? cap - 1 : p + (size_t)w;
}

/* Refuse an object holding a key twice (anywhere under j), naming its
 * path: which of two values a reader takes differs between readers, so
 * neither is taken. */
static int no_dup_keys(const cJSON *j, char *path, size_t p, size_t cap, char *msg, size_t mcap)
{
	int oom = 0;
	const char *d = cJSON_IsObject(j) ? dup_key(j, &oom) : NULL;
	if (oom)
		return -ENOMEM;
	if (d) {
		path[p] = '\0';
		snprintf(msg, mcap, "not accepted: the key \"%s\" appears twice in %s%s", d,
			 p ? "" : "the top-level object", path);
		return -EINVAL;
	}
	int i = 0, rc = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, j) {
		if ((cJSON_IsObject(it) || cJSON_IsArray(it)) &&
		    (rc = no_dup_keys(it, path, path_push(path, p, cap, j, it, i), cap, msg, mcap)))
			return rc;
		i++;
	}
	return 0;
}

int ms_json_parse_rfc(const char *text, size_t len, unsigned flags, cJSON **out, char *msg,
		      size_t cap)
{
	*out = NULL;
	struct scan c = {.s = (const unsigned char *)text, .n = len, .flags = flags};
	bool ok = scan_value(&c, 0);
	if (ok && (skip_ws(&c), c.i < c.n))
		ok = fault_byte(&c, "nothing may follow the JSON value");
	if (!ok) {
		char at[96];
		where(text, c.i, at, sizeof(at));
		snprintf(msg, cap, "not valid JSON: %s, at %s", c.why, at);
		return -EINVAL;
	}
	size_t n = len;
	char *carried = c.nuls ? carry_nuls(text, len, &n) : NULL;
	if (c.nuls && !carried)
		return snprintf(msg, cap, "out of memory"), -ENOMEM;
	cJSON *j = cJSON_ParseWithLength(carried ? carried : text, n);
	free(carried);
	if (!j) /* valid JSON: only an allocation can fail */
		return snprintf(msg, cap, "out of memory"), -ENOMEM;
	char path[256];
	int rc = no_dup_keys(j, path, 0, sizeof(path), msg, cap);
	if (rc) {
		cJSON_Delete(j);
		if (rc == -ENOMEM)
			snprintf(msg, cap, "out of memory");
		return rc;
	}
	*out = j;
	return 0;
}

int ms_json_read_file(const char *path, cJSON **out, struct ms_err *err)
{
	*out = NULL;
	char *text, msg[sizeof(err->msg)];
	size_t len;
	int rc = ms_read_file(path, &text, &len, err);
	if (rc)
		return rc;
	rc = ms_json_parse_rfc(text, len, 0, out, msg, sizeof(msg));
	free(text);
	return rc ? ms_err_set(err, rc, "%s: %s", path, msg) : 0;
}

/* ---- cJSON's allocations counted, trees built and printed ---- */

static __thread unsigned long failures, fail_at;

static void *counting_malloc(size_t n)
{
	bool injected = fail_at && --fail_at == 0; /* tests */
	void *p = injected ? NULL : malloc(n);
	if (!p)
		failures++;
	return p;
}

static void install(void)
{
	/* free stays free: trees parsed before (the options' config file)
	 * are released the same way */
	cJSON_InitHooks(&(cJSON_Hooks){.malloc_fn = counting_malloc, .free_fn = free});
}

void ms_json_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
}

unsigned long ms_json_failures(void)
{
	return failures;
}

void ms_json_fail_nth(unsigned long n)
{
	fail_at = n;
}

bool ms_json_push(cJSON *arr, cJSON *item)
{
	if (arr && cJSON_AddItemToArray(arr, item))
		return true;
	cJSON_Delete(item);
	return false;
}

bool ms_json_put(cJSON *obj, const char *key, cJSON *item)
{
	if (obj && cJSON_AddItemToObject(obj, key, item))
		return true;
	cJSON_Delete(item);
	return false;
}

bool ms_json_replace(cJSON *obj, const char *key, cJSON *item)
{
	if (obj && item && cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item))
		return true;
	cJSON_Delete(item);
	return false;
}

char *ms_json_text(const cJSON *v)
{
	return ms_nul_json_escape(cJSON_PrintUnformatted(v));
}

char *ms_json_print(cJSON *j, unsigned long since)
{
	char *s = j ? ms_json_text(j) : NULL;
	cJSON_Delete(j);
	if (s && failures != since) {
		free(s);
		s = NULL;
	}
	return s;
}

int ms_json_parse_strict(const char *text, size_t len, cJSON **out, char *msg, size_t cap)
{
	char m[512];
	int rc = ms_json_parse_rfc(text, len, MS_JSON_CARRY_NUL | MS_JSON_BODY, out, m, sizeof(m));
	if (rc)
		snprintf(msg, cap, "%s%s", rc == -EINVAL ? "the body is " : "", m);
	return rc;
}
