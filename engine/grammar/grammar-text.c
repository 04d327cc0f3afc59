/* grammar-text.c: regular expressions and GBNF as grammar expressions
 * (grammar-text.h). */
#include "grammar-text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-utf8.h"

/* ---- code point sets: sorted, merged inclusive ranges ---- */

#define CP_MAX 0x10ffff

struct cps {
	uint32_t r[2 * 96];
	int n;
	bool over;   /* more ranges than fit */
};

static void cps_add(struct cps *s, uint32_t lo, uint32_t hi)
{
	if (s->n >= 96) {
		s->over = true;
		return;
	}
	s->r[2 * s->n] = lo;
	s->r[2 * s->n + 1] = hi;
	s->n++;
}

static int cmp_range(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static void cps_norm(struct cps *s)
{
	qsort(s->r, (size_t)s->n, 8, cmp_range);
	int w = 0;
	for (int i = 0; i < s->n; i++) {
		if (w && s->r[2 * i] <= s->r[2 * w - 1] + 1) {
			if (s->r[2 * i + 1] > s->r[2 * w - 1])
				s->r[2 * w - 1] = s->r[2 * i + 1];
		} else {
			s->r[2 * w] = s->r[2 * i];
			s->r[2 * w + 1] = s->r[2 * i + 1];
			w++;
		}
	}
	s->n = w;
}

static void cps_negate(struct cps *s)
{
	cps_norm(s);
	struct cps o = {0};
	uint32_t at = 0;
	for (int i = 0; i < s->n; i++) {
		if (s->r[2 * i] > at)
			cps_add(&o, at, s->r[2 * i] - 1);
		at = s->r[2 * i + 1] + 1;
	}
	if (at <= CP_MAX)
		cps_add(&o, at, CP_MAX);
	*s = o;
}

/* ECMAScript's \d, \w, \s (and "." as everything but its line ends). */
static void cps_class(struct cps *s, char k)
{
	struct cps t = {0};
	switch (k | 0x20) {
	case 'd': cps_add(&t, '0', '9'); break;
	case 'w':
		cps_add(&t, '0', '9'), cps_add(&t, 'A', 'Z'), cps_add(&t, 'a', 'z');
		cps_add(&t, '_', '_');
		break;
	default: /* s */
		cps_add(&t, 9, 13), cps_add(&t, ' ', ' '), cps_add(&t, 0xa0, 0xa0);
		cps_add(&t, 0x1680, 0x1680), cps_add(&t, 0x2000, 0x200a);
		cps_add(&t, 0x2028, 0x2029), cps_add(&t, 0x202f, 0x202f);
		cps_add(&t, 0x205f, 0x205f), cps_add(&t, 0x3000, 0x3000);
		cps_add(&t, 0xfeff, 0xfeff);
	}
	if (k >= 'A' && k <= 'Z')
		cps_negate(&t);
	for (int i = 0; i < t.n; i++)
		cps_add(s, t.r[2 * i], t.r[2 * i + 1]);
}

/* ---- JSON string characters ---- */

ms_gx ms_json_char_expr(struct ms_gb *b, const uint32_t *r, int n)
{
	struct cps raw = {0};
	ms_gx alts[40];
	int na = 0;
	static const char short_esc[] = {['"'] = '"', ['\\'] = '\\', ['\n'] = 'n', ['\t'] = 't',
					 ['\r'] = 'r', ['\b'] = 'b', ['\f'] = 'f'};
	for (int i = 0; i < n; i++) {
		uint32_t lo = r[2 * i], hi = r[2 * i + 1];
		/* the characters JSON must escape, each as one escape */
		for (uint32_t c = lo; c <= hi && c <= '\\'; c++) {
			if (c >= 0x20 && c != '"' && c != '\\')
				continue;
			char e[8];
			if (c < sizeof(short_esc) && short_esc[c])
				snprintf(e, sizeof(e), "\\%c", short_esc[c]);
			else
				snprintf(e, sizeof(e), "\\u%04x", (unsigned)c);
			if (na < 39)
				alts[na++] = ms_gb_str(b, e);
		}
		/* the rest as themselves */
		uint32_t a = lo;
		while (a <= hi) {
			if (a < 0x20) { a = 0x20; continue; }
			if (a == '"' || a == '\\') { a++; continue; }
			uint32_t z = hi;
			if (a < '"' && z >= '"')
				z = '"' - 1;
			else if (a < '\\' && z >= '\\')
				z = '\\' - 1;
			cps_add(&raw, a, z);
			if (z == UINT32_MAX)
				break;
			a = z + 1;
		}
	}
	if (raw.n)
		alts[na++] = ms_gb_cps(b, raw.r, raw.n);
	return ms_gb_alt(b, alts, na);
}

/* ---- regular expressions ---- */

struct rx {
	struct ms_gb *b;
	const char *s;
	size_t i, n;
	enum ms_regex_mode mode;
	struct ms_err *err;
	int rc;
	int depth;
};

static ms_gx rx_fail(struct rx *x, const char *fmt, const char *what)
{
	if (!x->rc)
		x->rc = ms_err_set(x->err, -EINVAL, fmt, what, (int)x->i, x->s);
	return -1;
}

static ms_gx rx_chars(struct rx *x, const struct cps *s)
{
	if (s->over)
		return rx_fail(x, "the pattern has a %sclass too large to compile (at %d in \"%s\")", "");
	return x->mode == MS_REGEX_FULL ? ms_gb_cps(x->b, s->r, s->n)
					: ms_json_char_expr(x->b, s->r, s->n);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* n hex digits at s (n 0: "{H..}"); -1 if malformed. */
static int64_t hex_at(const char *s, size_t avail, int n, size_t *used)
{
	int64_t v = 0;
	size_t k = 0;
	if (!n) {
		if (!avail || s[0] != '{')
			return -1;
		for (k = 1; k < avail && s[k] != '}'; k++) {
			int h = hexval(s[k]);
			if (h < 0 || v > CP_MAX)
				return -1;
			v = v * 16 + h;
		}
		if (k >= avail || k == 1)
			return -1;
		*used = k + 1;
		return v;
	}
	for (k = 0; k < (size_t)n; k++) {
		int h = k < avail ? hexval(s[k]) : -1;
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	*used = (size_t)n;
	return v;
}

/* One UTF-8 code point at s[i], advancing i; -1 if invalid. */
static int64_t utf8_at(const char *s, size_t n, size_t *i)
{
	uint32_t cp;
	int len = ms_utf8_decode((const unsigned char *)s + *i, n - *i, &cp);
	if (len <= 0)
		return -1;
	*i += (size_t)len;
	return cp;
}

/* An escape after '\' (x->i past it) as a set: a class or one code point. */
static bool rx_escape(struct rx *x, struct cps *s, bool in_class)
{
	if (x->i >= x->n)
		return rx_fail(x, "the pattern ends in a lone backslash%s (at %d in \"%s\")", ""), false;
	char c = x->s[x->i++];
	size_t used = 0;
	int64_t v = -1;
	switch (c) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		cps_class(s, c);
		return true;
	case 'n': v = '\n'; break;
	case 't': v = '\t'; break;
	case 'r': v = '\r'; break;
	case 'f': v = '\f'; break;
	case 'v': v = '\v'; break;
	case '0': v = 0; break;
	case 'x': v = hex_at(x->s + x->i, x->n - x->i, 2, &used); break;
	case 'u':
		v = hex_at(x->s + x->i, x->n - x->i, x->i < x->n && x->s[x->i] == '{' ? 0 : 4, &used);
		break;
	case 'b':
		if (in_class) { v = '\b'; break; }
		/* fall through */
	case 'B': case 'p': case 'P': case 'k': case 'c':
		return rx_fail(x, "the pattern uses \\%s, which cannot be enforced (at %d in \"%s\")",
			       (char[]){c, 0}), false;
	default:
		if (c >= '1' && c <= '9')
			return rx_fail(x, "the pattern uses a backreference \\%s (at %d in \"%s\")",
				       (char[]){c, 0}), false;
		x->i--;
		v = utf8_at(x->s, x->n, &x->i);
		x->i -= 0;
		used = 0;
	}
	if (v < 0 || v > CP_MAX)
		return rx_fail(x, "the pattern has a malformed escape%s (at %d in \"%s\")", ""), false;
	x->i += used;
	cps_add(s, (uint32_t)v, (uint32_t)v);
	return true;
}

/* One class member (a code point) or -1 with the class escapes added to s. */
static int64_t rx_class_atom(struct rx *x, struct cps *s)
{
	if (x->s[x->i] == '\\') {
		x->i++;
		struct cps t = {0};
		if (!rx_escape(x, &t, true))
			return -2;
		if (t.n == 1 && t.r[0] == t.r[1])
			return t.r[0];
		for (int i = 0; i < t.n; i++)
			cps_add(s, t.r[2 * i], t.r[2 * i + 1]);
		return -1;
	}
	int64_t c = utf8_at(x->s, x->n, &x->i);
	if (c < 0)
		rx_fail(x, "the pattern is not UTF-8%s (at %d in \"%s\")", "");
	return c < 0 ? -2 : c;
}

static ms_gx rx_class(struct rx *x)
{
	struct cps s = {0};
	bool neg = x->i < x->n && x->s[x->i] == '^';
	x->i += neg;
	bool first = true;
	while (x->i < x->n && (x->s[x->i] != ']' || (first && false))) {
		first = false;
		int64_t lo = rx_class_atom(x, &s);
		if (lo == -2)
			return -1;
		if (lo >= 0 && x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
			x->i++;
			int64_t hi = rx_class_atom(x, &s);
			if (hi == -2)
				return -1;
			if (hi < lo)
				return rx_fail(x, "the pattern has a class range out of order%s (at %d in \"%s\")", "");
			cps_add(&s, (uint32_t)lo, (uint32_t)hi);
		} else if (lo >= 0) {
			cps_add(&s, (uint32_t)lo, (uint32_t)lo);
		}
	}
	if (x->i >= x->n)
		return rx_fail(x, "the pattern has an unclosed class%s (at %d in \"%s\")", "");
	x->i++;
	cps_norm(&s);
	if (neg)
		cps_negate(&s);
	return rx_chars(x, &s);
}

static ms_gx rx_alt(struct rx *x);

static ms_gx rx_group(struct rx *x)
{
	if (x->i + 1 < x->n && x->s[x->i] == '?') {
		char k = x->s[x->i + 1];
		if (k == ':') {
			x->i += 2;
		} else if (k == '<' && x->i + 2 < x->n && x->s[x->i + 2] != '=' && x->s[x->i + 2] != '!') {
			const char *e = memchr(x->s + x->i, '>', x->n - x->i);
			if (!e)
				return rx_fail(x, "the pattern has an unclosed group name%s (at %d in \"%s\")", "");
			x->i = (size_t)(e - x->s) + 1;
		} else {
			return rx_fail(x, "the pattern uses lookaround or a group flag (?%s...), which "
				       "cannot be enforced (at %d in \"%s\")", (char[]){k, 0});
		}
	}
	if (++x->depth > 64)
		return rx_fail(x, "the pattern nests groups too deeply%s (at %d in \"%s\")", "");
	ms_gx g = rx_alt(x);
	x->depth--;
	if (g < 0)
		return -1;
	if (x->i >= x->n || x->s[x->i] != ')')
		return rx_fail(x, "the pattern has an unclosed group%s (at %d in \"%s\")", "");
	x->i++;
	return g;
}

static bool rx_braces(struct rx *x, int *min, int *max);

static ms_gx rx_atom(struct rx *x)
{
	char c = x->s[x->i++];
	struct cps s = {0};
	switch (c) {
	case '(': return rx_group(x);
	case '[': return rx_class(x);
	case '.':
		cps_add(&s, '\n', '\n'), cps_add(&s, '\r', '\r'), cps_add(&s, 0x2028, 0x2029);
		cps_negate(&s);
		return rx_chars(x, &s);
	case '\\':
		return rx_escape(x, &s, false) ? rx_chars(x, &s) : -1;
	case '^': case '$':
		return rx_fail(x, "the pattern has the anchor %s inside it (only ^ at the start and $ "
			       "at the end can be enforced; at %d in \"%s\")", (char[]){c, 0});
	case '*': case '+': case '?': case ')': case '|':
		return rx_fail(x, "the pattern has a misplaced '%s' (at %d in \"%s\")", (char[]){c, 0});
	case '{':
		/* a quantifier with nothing to repeat; any other '{' is a literal */
		if (rx_braces(&(struct rx){.s = x->s, .i = x->i, .n = x->n}, &(int){0}, &(int){0}))
			return rx_fail(x, "the pattern has a misplaced '%s' (at %d in \"%s\")", "{");
		/* fall through */
	default: {
		x->i--;
		int64_t cp = utf8_at(x->s, x->n, &x->i);
		if (cp < 0)
			return rx_fail(x, "the pattern is not UTF-8%s (at %d in \"%s\")", "");
		cps_add(&s, (uint32_t)cp, (uint32_t)cp);
		return rx_chars(x, &s);
	}
	}
}

/* {m}, {m,}, {m,n} at x->i (past '{'); false when it is not one (then '{'
 * is a literal, as ECMAScript without the u flag reads it). */
static bool rx_braces(struct rx *x, int *min, int *max)
{
	size_t i = x->i;
	long a = 0, b;
	int nd = 0;
	while (i < x->n && x->s[i] >= '0' && x->s[i] <= '9' && nd < 7)
		a = a * 10 + (x->s[i++] - '0'), nd++;
	if (!nd)
		return false;
	b = a;
	if (i < x->n && x->s[i] == ',') {
		i++;
		b = -1;
		int md = 0;
		long v = 0;
		while (i < x->n && x->s[i] >= '0' && x->s[i] <= '9' && md < 7)
			v = v * 10 + (x->s[i++] - '0'), md++;
		if (md)
			b = v;
	}
	if (i >= x->n || x->s[i] != '}')
		return false;
	x->i = i + 1;
	*min = (int)a;
	*max = (int)b;
	return true;
}

/* One quantifier after an atom: ECMAScript has no "a**" or "a{2}{3}" (a
 * second quantifier is then a misplaced one). */
static ms_gx rx_quant(struct rx *x, ms_gx a)
{
	if (a >= 0 && x->i < x->n) {
		char c = x->s[x->i];
		int min, max;
		if (c == '*')
			min = 0, max = -1;
		else if (c == '+')
			min = 1, max = -1;
		else if (c == '?')
			min = 0, max = 1;
		else if (c == '{') {
			x->i++;
			if (!rx_braces(x, &min, &max)) {
				x->i--;
				return a;
			}
			x->i--;
		} else
			return a;
		x->i++;
		if (x->i < x->n && x->s[x->i] == '?')
			x->i++;  /* lazy: the same strings */
		if (min > MS_GRAMMAR_MAX_REPEAT || max > MS_GRAMMAR_MAX_REPEAT)
			return rx_fail(x, "the pattern repeats more than 4096 times%s (at %d in \"%s\")", "");
		if (max >= 0 && max < min)
			return rx_fail(x, "the pattern has a repetition {m,n} out of order%s (at %d in \"%s\")", "");
		a = ms_gb_rep(x->b, a, min, max);
	}
	return a;
}

static bool rx_seq_end(const struct rx *x)
{
	if (x->i >= x->n)
		return true;
	char c = x->s[x->i];
	return c == '|' || c == ')' || (c == '$' && x->i + 1 == x->n && x->depth == 0);
}

static ms_gx rx_seq(struct rx *x)
{
	ms_gx acc = ms_gb_empty(x->b);
	while (acc >= 0 && !rx_seq_end(x))
		acc = ms_gb_seq2(x->b, acc, rx_quant(x, rx_atom(x)));
	return x->rc ? -1 : acc;
}

static ms_gx rx_alt(struct rx *x)
{
	ms_gx acc = rx_seq(x);
	while (acc >= 0 && x->i < x->n && x->s[x->i] == '|') {
		x->i++;
		acc = ms_gb_alt2(x->b, acc, rx_seq(x));
	}
	return x->rc ? -1 : acc;
}

ms_gx ms_regex_expr(struct ms_gb *b, const char *re, enum ms_regex_mode mode, struct ms_err *err)
{
	struct rx x = {.b = b, .s = re, .n = strlen(re), .mode = mode, .err = err};
	if (ms_nul_carried(re, x.n)) /* the escapes \x00 and \u0000 are supported */
		return ms_err_set(err, -EINVAL, "a raw NUL character in a pattern is not supported; "
				  "write it as \\x00"), -1;
	bool head = x.n && re[0] == '^';
	x.i = head;
	ms_gx body = rx_alt(&x);
	bool tail = false;
	if (body >= 0 && x.i < x.n && re[x.i] == '$' && x.i + 1 == x.n)
		tail = true, x.i++;
	if (body >= 0 && x.i < x.n)
		body = rx_fail(&x, "the pattern has an unmatched '%s' (at %d in \"%s\")", ")");
	if (body < 0) {
		if (!x.rc)
			ms_err_set(err, -ENOMEM, "out of memory compiling the pattern");
		return -1;
	}
	if (mode == MS_REGEX_JSON_SEARCH) {
		/* a search: anything before and after unless anchored */
		uint32_t all[2] = {0, CP_MAX};
		if (!head)
			body = ms_gb_seq2(b, ms_gb_rep(b, ms_json_char_expr(b, all, 1), 0, -1), body);
		if (!tail)
			body = ms_gb_seq2(b, body, ms_gb_rep(b, ms_json_char_expr(b, all, 1), 0, -1));
	}
	return body;
}

/* ---- GBNF ---- */

struct gp {
	struct ms_gb *b;
	const char *s;
	size_t i;
	int line;
	struct ms_err *err;
	int rc;
	int depth;
};

static ms_gx gp_fail(struct gp *p, const char *what)
{
	if (!p->rc)
		p->rc = ms_err_set(p->err, -EINVAL, "grammar line %d: %s", p->line, what);
	return -1;
}

/* Spaces and comments; newlines too when nested (inside parentheses, or
 * after '|'). */
static void gp_space(struct gp *p, bool newlines)
{
	for (;;) {
		char c = p->s[p->i];
		if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
			p->line += c == '\n';
			p->i++;
		} else if (c == '#') {
			while (p->s[p->i] && p->s[p->i] != '\n')
				p->i++;
		} else {
			return;
		}
	}
}

static bool gp_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
	       c == '_';
}

/* A character of a literal or class (escapes decoded); -1 on error. */
static int64_t gp_char(struct gp *p)
{
	if (p->s[p->i] != '\\') {
		size_t n = strlen(p->s + p->i);
		int64_t c = utf8_at(p->s, p->i + n, &p->i);
		if (c < 0)
			gp_fail(p, "the grammar is not UTF-8");
		return c;
	}
	char c = p->s[++p->i];
	p->i++;
	size_t used = 0;
	int64_t v;
	switch (c) {
	case 'n': return '\n';
	case 't': return '\t';
	case 'r': return '\r';
	case 'x': v = hex_at(p->s + p->i, strlen(p->s + p->i), 2, &used); break;
	case 'u': v = hex_at(p->s + p->i, strlen(p->s + p->i), 4, &used); break;
	case 'U': v = hex_at(p->s + p->i, strlen(p->s + p->i), 8, &used); break;
	case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': return c;
	default: gp_fail(p, "an unknown escape"); return -1;
	}
	if (v < 0 || v > CP_MAX) {
		gp_fail(p, "a malformed \\x, \\u or \\U escape");
		return -1;
	}
	p->i += used;
	return v;
}

static ms_gx gp_literal(struct gp *p)
{
	ms_gx acc = ms_gb_empty(p->b);
	while (acc >= 0 && p->s[p->i] && p->s[p->i] != '"' && p->s[p->i] != '\n') {
		int64_t c = gp_char(p);
		if (c < 0)
			return -1;
		uint32_t r[2] = {(uint32_t)c, (uint32_t)c};
		acc = ms_gb_seq2(p->b, acc, ms_gb_cps(p->b, r, 1));
	}
	if (p->s[p->i] != '"')
		return gp_fail(p, "an unterminated string literal");
	p->i++;
	return acc;
}

static ms_gx gp_class(struct gp *p)
{
	struct cps s = {0};
	bool neg = p->s[p->i] == '^';
	p->i += neg;
	while (p->s[p->i] && p->s[p->i] != ']' && p->s[p->i] != '\n') {
		int64_t lo = gp_char(p), hi = lo;
		if (lo < 0)
			return -1;
		if (p->s[p->i] == '-' && p->s[p->i + 1] && p->s[p->i + 1] != ']') {
			p->i++;
			if ((hi = gp_char(p)) < 0)
				return -1;
		}
		if (hi < lo)
			return gp_fail(p, "a character range out of order");
		cps_add(&s, (uint32_t)lo, (uint32_t)hi);
	}
	if (p->s[p->i] != ']')
		return gp_fail(p, "an unterminated character class");
	p->i++;
	if (s.over)
		return gp_fail(p, "a character class with too many ranges");
	cps_norm(&s);
	if (neg)
		cps_negate(&s);
	return ms_gb_cps(p->b, s.r, s.n);
}

static ms_gx gp_alternates(struct gp *p, bool nested);

static ms_gx gp_element(struct gp *p)
{
	char c = p->s[p->i];
	if (c == '"') {
		p->i++;
		return gp_literal(p);
	}
	if (c == '[') {
		p->i++;
		return gp_class(p);
	}
	if (c == '.') {
		p->i++;
		uint32_t all[2] = {0, CP_MAX};
		return ms_gb_cps(p->b, all, 1);
	}
	if (c == '(') {
		p->i++;
		if (++p->depth > 64)
			return gp_fail(p, "parentheses nested too deeply");
		gp_space(p, true);
		ms_gx x = gp_alternates(p, true);
		p->depth--;
		if (x < 0)
			return -1;
		if (p->s[p->i] != ')')
			return gp_fail(p, "an unclosed '('");
		p->i++;
		return x;
	}
	if (gp_name_char(c)) {
		char name[128];
		size_t k = 0;
		while (gp_name_char(p->s[p->i]))
			if (k < sizeof(name) - 1)
				name[k++] = p->s[p->i++];
			else
				return gp_fail(p, "a rule name longer than 127 characters");
		name[k] = 0;
		return ms_gb_ref(p->b, ms_gb_rule(p->b, name));
	}
	if (c == '<')
		return gp_fail(p, "token references <...> are not supported");
	return gp_fail(p, "an unexpected character");
}

static ms_gx gp_quant(struct gp *p, ms_gx x)
{
	while (x >= 0) {
		char c = p->s[p->i];
		int min, max;
		if (c == '*')
			min = 0, max = -1, p->i++;
		else if (c == '+')
			min = 1, max = -1, p->i++;
		else if (c == '?')
			min = 0, max = 1, p->i++;
		else if (c == '{') {
			struct rx r = {.s = p->s, .i = p->i + 1, .n = strlen(p->s)};
			if (!rx_braces(&r, &min, &max))
				return gp_fail(p, "a malformed {m,n} repetition");
			p->i = r.i;
		} else
			return x;
		if (min > MS_GRAMMAR_MAX_REPEAT || max > MS_GRAMMAR_MAX_REPEAT || (max >= 0 && max < min))
			return gp_fail(p, "a repetition count out of range (at most 4096)");
		x = ms_gb_rep(p->b, x, min, max);
	}
	return x;
}

static bool gp_rule_start(const struct gp *p)
{
	size_t i = p->i;
	while (gp_name_char(p->s[i]))
		i++;
	while (p->s[i] == ' ' || p->s[i] == '\t')
		i++;
	return i > p->i && !strncmp(p->s + i, "::=", 3);
}

static ms_gx gp_sequence(struct gp *p, bool nested)
{
	ms_gx acc = ms_gb_empty(p->b);
	for (;;) {
		gp_space(p, nested);
		char c = p->s[p->i];
		if (!c || c == '|' || c == ')' || c == '\n' || c == '\r' || (nested && gp_rule_start(p)))
			return p->rc ? -1 : acc;
		acc = ms_gb_seq2(p->b, acc, gp_quant(p, gp_element(p)));
		if (acc < 0)
			return -1;
	}
}

static ms_gx gp_alternates(struct gp *p, bool nested)
{
	ms_gx acc = gp_sequence(p, nested);
	while (acc >= 0 && p->s[p->i] == '|') {
		p->i++;
		gp_space(p, true);
		acc = ms_gb_alt2(p->b, acc, gp_sequence(p, nested));
	}
	return acc;
}

int ms_gbnf_parse(struct ms_gb *b, const char *text, int *root, struct ms_err *err)
{
	struct gp p = {.b = b, .s = text, .line = 1, .err = err};
	if (ms_nul_carried(text, strlen(text)))
		return ms_err_set(err, -EINVAL, "a raw NUL character in a grammar is not supported; "
				  "write it as \\x00");
	for (;;) {
		gp_space(&p, true);
		if (!p.s[p.i])
			break;
		char name[128];
		size_t k = 0;
		while (gp_name_char(p.s[p.i]) && k < sizeof(name) - 1)
			name[k++] = p.s[p.i++];
		name[k] = 0;
		gp_space(&p, false);
		if (!k || strncmp(p.s + p.i, "::=", 3))
			return gp_fail(&p, "expected a rule: name ::= ..."), p.rc;
		p.i += 3;
		int r = ms_gb_rule(b, name);
		if (ms_gb_defined(b, r))
			return gp_fail(&p, "a rule defined twice"), p.rc;
		ms_gx body = gp_alternates(&p, false);
		if (body < 0)
			return p.rc ? p.rc : ms_err_set(err, -ENOMEM, "out of memory parsing the grammar");
		ms_gb_define(b, r, body);
	}
	*root = ms_gb_find_rule(b, "root");
	if (*root < 0 || !ms_gb_defined(b, *root))
		return ms_err_set(err, -EINVAL, "the grammar has no rule \"root\"");
	return 0;
}
