/*
 * names.c: module-name patterns as checkpoint producers write them.
 *
 * Regexes (GPTQModel's `dynamic` keys, "re:" entries of an exclude or
 * modules_to_not_convert list) are Python regexes applied with re.match:
 * anchored at the start, not at the end. PCRE2 reads Python's syntax (\d,
 * (?:...), lazy quantifiers), which glibc's POSIX regcomp does not, and
 * unlike glibc it can be bounded: a config is untrusted input, and a
 * nested-quantifier key once made POSIX regexec take gigabytes. So the
 * pattern length, the matcher's steps, its backtracking depth and its heap
 * all have limits, and a pattern that reaches one is an error naming it,
 * never a silent miss. Everything else is a name, a parent module, or a
 * glob as Python's fnmatch reads it (also against parents).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

/* Far above any producer's pattern or module name (tens of characters);
 * low enough that no input makes a match slow or large. */
enum {
	QRE_MAX_PATTERN = 1024,    /* bytes */
	QRE_MATCH_LIMIT = 200000,  /* matcher steps per match */
	QRE_DEPTH_LIMIT = 2000,    /* backtracking depth */
	QRE_HEAP_LIMIT = 1024,     /* KiB of backtracking frames */
};

struct ms_qregex {
	pcre2_code *code;
	pcre2_match_context *mc;
	char what[]; /* who wrote the pattern, for match-time errors */
};

void ms_qregex_free(struct ms_qregex *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	pcre2_match_context_free(re->mc);
	free(re);
}

int ms_qregex_init(struct ms_qregex **out, const char *pattern, const char *what,
		   struct ms_err *err)
{
	*out = NULL;
	size_t len = strlen(pattern);
	if (len > QRE_MAX_PATTERN)
		return ms_err_set(err, -EINVAL, "%s: the regular expression is %zu bytes long (at most %d)",
				  what, len, QRE_MAX_PATTERN);
	struct ms_qregex *re = calloc(1, sizeof(*re) + strlen(what) + 1);
	if (!re)
		return ms_err_set(err, -ENOMEM, "out of memory");
	strcpy(re->what, what);
	int ec;
	PCRE2_SIZE off;
	re->code = pcre2_compile((PCRE2_SPTR)pattern, len,
				 PCRE2_ANCHORED | PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &ec,
				 &off, NULL);
	re->mc = pcre2_match_context_create(NULL);
	if (!re->code || !re->mc) {
		bool bad = !re->code;
		PCRE2_UCHAR msg[160];
		ms_qregex_free(re);
		if (!bad || ec == PCRE2_ERROR_HEAP_FAILED)
			return ms_err_set(err, -ENOMEM, "out of memory");
		pcre2_get_error_message(ec, msg, sizeof(msg));
		return ms_err_set(err, -EINVAL, "%s: not a regular expression (%s at offset %zu)",
				  what, (char *)msg, (size_t)off);
	}
	pcre2_set_match_limit(re->mc, QRE_MATCH_LIMIT);
	pcre2_set_depth_limit(re->mc, QRE_DEPTH_LIMIT);
	pcre2_set_heap_limit(re->mc, QRE_HEAP_LIMIT);
	*out = re;
	return 0;
}

int ms_qregex_match(const struct ms_qregex *re, const char *module, bool *hit, struct ms_err *err)
{
	*hit = false;
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	if (!md)
		return ms_err_set(err, -ENOMEM, "out of memory");
	int r = pcre2_match(re->code, (PCRE2_SPTR)module, strlen(module), 0, 0, md, re->mc);
	pcre2_match_data_free(md);
	if (r >= 0 || r == PCRE2_ERROR_NOMATCH) {
		*hit = r >= 0;
		return 0;
	}
	PCRE2_UCHAR msg[160];
	pcre2_get_error_message(r, msg, sizeof(msg));
	return ms_err_set(err, r == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL,
			  "%s: matching module \"%s\" failed: %s (the pattern backtracks too much; "
			  "simplify it)", re->what, module, (char *)msg);
}

/* ---- names, globs and "re:" entries ---- */

int ms_qname_init(struct ms_qname *n, const char *text, const char *what, struct ms_err *err)
{
	*n = (struct ms_qname){0};
	if (!(n->text = strdup(text)))
		return ms_err_set(err, -ENOMEM, "out of memory");
	if (strncmp(text, "re:", 3))
		return 0;
	char w[512];
	snprintf(w, sizeof(w), "%s \"%.120s%s\"", what, text, strlen(text) > 120 ? "..." : "");
	return ms_qregex_init(&n->re, text + 3, w, err);
}

void ms_qname_free(struct ms_qname *n)
{
	free(n->text);
	ms_qregex_free(n->re);
	*n = (struct ms_qname){0};
}

/* One bracket expression, p just past its '[': whether c is in it, and
 * where the pattern goes on. Python's rules: '!' first negates, ']' first
 * is a member, a-z is a range, no escapes. -1: no closing ']', so the '['
 * is an ordinary character. */
static int bracket(const char *p, unsigned char c, const char **end)
{
	bool neg = *p == '!', hit = false;
	p += neg;
	const char *first = p;
	for (; *p && (*p != ']' || p == first); p++) {
		unsigned char lo = (unsigned char)*p, hi = lo;
		if (p[1] == '-' && p[2] && p[2] != ']')
			hi = (unsigned char)p[2], p += 2;
		hit |= c >= lo && c <= hi;
	}
	if (!*p)
		return -1;
	*end = p + 1;
	return hit != neg;
}

/* Whether the atom at *pp (not '*') matches c; on a match *pp moves past it. */
static bool atom(const char **pp, unsigned char c)
{
	const char *p = *pp, *end;
	int r;
	if (*p == '[' && (r = bracket(p + 1, c, &end)) >= 0) {
		if (r)
			*pp = end;
		return r;
	}
	if (!*p || (*p != '?' && (unsigned char)*p != c))
		return false;
	*pp = p + 1;
	return true;
}

/* s[0 .. n) against the glob p, as Python's fnmatch.fnmatchcase (what
 * Quark and transformers call): '*' any run, '?' one character, [...] a
 * set. Every atom but '*' takes one character, so going back to the last
 * '*' alone is enough: at most len(p) * n steps, where glibc's fnmatch
 * recurses per '*'. */
static bool glob_n(const char *p, const char *s, size_t n)
{
	const char *star_p = NULL, *star_s = NULL, *e = s + n;
	while (s < e) {
		if (*p == '*') {
			while (*p == '*')
				p++;
			star_p = p, star_s = s;
		} else if (atom(&p, (unsigned char)*s)) {
			s++;
		} else if (star_p) {
			p = star_p, s = ++star_s;
		} else {
			return false;
		}
	}
	while (*p == '*')
		p++;
	return !*p;
}

bool ms_qglob_match(const char *p, const char *s)
{
	return glob_n(p, s, strlen(s));
}

int ms_qname_match(const struct ms_qname *n, const char *module, bool *hit, struct ms_err *err)
{
	if (n->re)
		return ms_qregex_match(n->re, module, hit, err);
	const char *p = n->text;
	size_t pl = strlen(p);
	*hit = true;
	if (ms_qglob_match(p, module))
		return 0;
	if (strncmp(module, p, pl) == 0 && module[pl] == '.')
		return 0; /* a parent module, named */
	/* a parent module, matched by the glob: the part before some '.' */
	for (const char *dot = strchr(module, '.'); dot; dot = strchr(dot + 1, '.'))
		if (glob_n(p, module, (size_t)(dot - module)))
			return 0;
	*hit = false;
	return 0;
}
