/* grammar-json.c: JSON Schema as grammar rules (grammar-json.h). */
#include "grammar-json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-text.h"
#include "ms-utf8.h"

#define JS_MAX_DEPTH 64
#define NUM_DIGITS 16          /* integer and fraction digits at most */
#define WS_INDENT 20           /* spaces or tabs after a newline, at most */

struct js {
	struct ms_gb *b;
	const cJSON *root;
	struct ms_err *err;
	int rc;
	int depth;
	cJSON *owned;              /* merged schemas (allOf), freed at the end */
	ms_gx any_value;           /* the rules of any JSON value, made once */
	int n_tmp;
};

static ms_gx fail(struct js *j, int code, const char *path, const char *fmt, const char *kw)
{
	if (!j->rc)
		j->rc = ms_err_set(j->err, code, fmt, kw, *path ? path : "/");
	return -1;
}

static ms_gx lit(struct js *j, const char *s)
{
	return ms_gb_str(j->b, s);
}

static ms_gx seq(struct js *j, const ms_gx *xs, int n)
{
	return ms_gb_seq(j->b, xs, n);
}

/* Whitespace between tokens: none, a space, or a newline and an indent. */
static ms_gx ws(struct js *j)
{
	struct ms_gb *b = j->b;
	uint64_t ind[4] = {1ull << ' ' | 1ull << '\t', 0, 0, 0};
	ms_gx nl = ms_gb_seq2(b, lit(j, "\n"), ms_gb_rep(b, ms_gb_byteset(b, ind), 0, WS_INDENT));
	return ms_gb_opt(b, ms_gb_alt2(b, lit(j, " "), nl));
}

static ms_gx ws_lit_ws(struct js *j, const char *s)
{
	ms_gx xs[3] = {ws(j), lit(j, s), ws(j)};
	return seq(j, xs, 3);
}

/* A value printed as JSON (enum, const). */
static ms_gx json_literal(struct js *j, const cJSON *v, const char *path)
{
	char *s = ms_nul_json_escape(cJSON_PrintUnformatted(v)); /* a NUL as \u0000 */
	if (!s)
		return fail(j, -ENOMEM, path, "out of memory printing %s at %s", "enum");
	ms_gx x = lit(j, s);
	free(s);
	return x;
}

/* ---- strings ---- */

/* One byte of the characters of s. */
static ms_gx one_of(struct js *j, const char *s)
{
	uint64_t w[4] = {0};
	for (; *s; s++)
		w[(uint8_t)*s >> 6] |= 1ull << ((uint8_t)*s & 63);
	return ms_gb_byteset(j->b, w);
}

/* A \u escape (past the backslash) of anything but a lone surrogate: a
 * high one only with its low one after it (cJSON and serde_json refuse
 * lone ones). */
static ms_gx u_escape(struct js *j)
{
	const char *hex = "0123456789abcdefABCDEF";
	ms_gx h2 = ms_gb_rep(j->b, one_of(j, hex), 2, 2);
	ms_gx plain[3] = {one_of(j, "0123456789abcefABCEF"), one_of(j, hex), h2};
	ms_gx below[3] = {one_of(j, "dD"), one_of(j, "01234567"), h2};
	ms_gx pair[7] = {one_of(j, "dD"), one_of(j, "89abAB"), h2, lit(j, "\\u"), one_of(j, "dD"),
			 one_of(j, "cdefCDEF"), h2};
	ms_gx alts[3] = {seq(j, plain, 3), seq(j, below, 3), seq(j, pair, 7)};
	return ms_gb_seq2(j->b, lit(j, "u"), ms_gb_alt(j->b, alts, 3));
}

static ms_gx json_char(struct js *j, bool any_escape)
{
	uint32_t all[2] = {0, 0x10ffff};
	ms_gx c = ms_json_char_expr(j->b, all, 1);
	if (!any_escape)
		return c;
	/* every escape JSON has (the canonical ones are in c already) */
	uint64_t esc[4] = {1ull << '"' | 1ull << '/', 1ull << ('\\' - 64) | 1ull << ('b' - 64) |
			   1ull << ('f' - 64) | 1ull << ('n' - 64) | 1ull << ('r' - 64) | 1ull << ('t' - 64), 0, 0};
	ms_gx any = ms_gb_alt2(j->b, ms_gb_byteset(j->b, esc), u_escape(j));
	ms_gx e = ms_gb_seq2(j->b, lit(j, "\\"), any);
	return ms_gb_alt2(j->b, c, e);
}

static ms_gx quoted(struct js *j, ms_gx body)
{
	ms_gx xs[3] = {lit(j, "\""), body, lit(j, "\"")};
	return seq(j, xs, 3);
}

/* A date: each month's days, Feb 29 in leap years (years divisible by 4
 * but not 100 unless by 400, as ajv-formats counts). */
#define DATE_RE "(?:[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|" \
		"(?:0[13578]|1[02])-31)|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|" \
		"(?:[02468][048]|[13579][26])00)-02-29)"
#define TIME_RE "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?" \
		"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"

static const struct { const char *name, *re; } formats[] = {
	{"date", "^" DATE_RE "$"},
	{"time", "^" TIME_RE "$"},
	{"date-time", "^" DATE_RE "T" TIME_RE "$"},
	{"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
	{"email", "^[a-zA-Z0-9_+-]+(?:\\.[a-zA-Z0-9_+-]+)*@[a-zA-Z0-9]+(?:-+[a-zA-Z0-9]+)*"
		  "(?:\\.[a-zA-Z0-9]+(?:-+[a-zA-Z0-9]+)*)+$"},
};

static int int_kw(struct js *j, const cJSON *s, const char *kw, const char *path, int dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw);
	if (!v)
		return dflt;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a non-negative integer", kw), -2;
	if (v->valuedouble > MS_GRAMMAR_MAX_REPEAT)
		return fail(j, -E2BIG, path, "\"%s\" at %s is over 4096, too large to enforce", kw), -2;
	return (int)v->valuedouble;
}

static ms_gx js_string(struct js *j, const cJSON *s, const char *path)
{
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
	int mn = int_kw(j, s, "minLength", path, 0), mx = int_kw(j, s, "maxLength", path, -1);
	if (mn == -2 || mx == -2)
		return -1;
	bool bounded = mn > 0 || mx >= 0;
	if (mx >= 0 && mx < mn)
		return fail(j, -EINVAL, path, "\"%s\" at %s is below minLength: no string fits", "maxLength");
	const char *re = NULL;
	if (fmt && !pat) {
		if (!cJSON_IsString(fmt))
			return fail(j, -EINVAL, path, "\"%s\" at %s must be a string", "format");
		for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
			if (!strcmp(fmt->valuestring, formats[i].name))
				re = formats[i].re;
		if (!re)
			return fail(j, -ENOTSUP, path, "\"format\": \"%s\" at %s is not supported (date, "
				    "time, date-time, uuid, email are)", fmt->valuestring);
	}
	if (pat) {
		if (!cJSON_IsString(pat))
			return fail(j, -EINVAL, path, "\"%s\" at %s must be a string", "pattern");
		re = pat->valuestring;
	}
	if (re && bounded)
		return fail(j, -ENOTSUP, path, "\"%s\" at %s together with minLength/maxLength is not "
			    "supported", pat ? "pattern" : "format");
	if (re) {
		struct ms_err e = {0};
		ms_gx x = ms_regex_expr(j->b, re, MS_REGEX_JSON_SEARCH, &e);
		if (x < 0)
			return fail(j, e.code ? e.code : -EINVAL, path, "\"pattern\" at %2$s: %1$s", e.msg);
		return quoted(j, x);
	}
	return quoted(j, ms_gb_rep(j->b, json_char(j, !bounded), mn, mx));
}

/* ---- numbers ---- */

static ms_gx digits(struct js *j, char lo, char hi, int min, int max)
{
	return ms_gb_rep(j->b, ms_gb_byterange(j->b, (uint8_t)lo, (uint8_t)hi), min, max);
}

/* The n-digit numbers from x to y (digit strings, x <= y). */
static ms_gx same_len(struct js *j, const char *x, const char *y, int n)
{
	if (!n)
		return ms_gb_empty(j->b);
	if (x[0] == y[0])
		return ms_gb_seq2(j->b, ms_gb_lit(j->b, x, 1), same_len(j, x + 1, y + 1, n - 1));
	char nines[NUM_DIGITS + 2], zeros[NUM_DIGITS + 2];
	memset(nines, '9', sizeof(nines));
	memset(zeros, '0', sizeof(zeros));
	bool lo_zero = !strncmp(x + 1, zeros, (size_t)n - 1), hi_nine = !strncmp(y + 1, nines, (size_t)n - 1);
	ms_gx alts[3];
	int na = 0;
	char a = x[0], z = y[0];
	if (!lo_zero) {
		alts[na++] = ms_gb_seq2(j->b, ms_gb_lit(j->b, x, 1), same_len(j, x + 1, nines, n - 1));
		a++;
	}
	if (!hi_nine)
		z--;
	if (a <= z)
		alts[na++] = ms_gb_seq2(j->b, digits(j, a, z, 1, 1), digits(j, '0', '9', n - 1, n - 1));
	if (!hi_nine)
		alts[na++] = ms_gb_seq2(j->b, ms_gb_lit(j->b, y, 1), same_len(j, zeros, y + 1, n - 1));
	return ms_gb_alt(j->b, alts, na);
}

/* Non-negative integers in [lo, hi], no leading zeros. */
static ms_gx nonneg_range(struct js *j, int64_t lo, int64_t hi)
{
	ms_gx alts[NUM_DIGITS + 1];
	int na = 0;
	int64_t p = 1;
	/* p: the least len-digit number but for len 1, whose least is 0 */
	for (int len = 1; len <= NUM_DIGITS && (len == 1 || p <= hi); len++, p *= 10) {
		int64_t a = len == 1 ? 0 : p, z = p * 10 - 1;
		if (a < lo)
			a = lo;
		if (z > hi)
			z = hi;
		if (a > z)
			continue;
		char x[24], y[24];
		snprintf(x, sizeof(x), "%lld", (long long)a);
		snprintf(y, sizeof(y), "%lld", (long long)z);
		alts[na++] = same_len(j, x, y, len);
	}
	return ms_gb_alt(j->b, alts, na);
}

#define INT_MAXV 9999999999999999ll   /* NUM_DIGITS nines */

static ms_gx int_range(struct js *j, int64_t lo, int64_t hi)
{
	ms_gx alts[2];
	int na = 0;
	if (hi >= 0)
		alts[na++] = nonneg_range(j, lo > 0 ? lo : 0, hi);
	if (lo < 0)
		alts[na++] = ms_gb_seq2(j->b, lit(j, "-"), nonneg_range(j, hi < 0 ? -hi : 1, -lo));
	return ms_gb_alt(j->b, alts, na);
}

/* A bound of keyword kw as an integer bound (+-1 when exclusive); false if absent. */
static bool int_bound(const cJSON *s, const char *kw, bool up, int64_t *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, kw);
	if (!cJSON_IsNumber(x))
		return false;
	double d = x->valuedouble;
	bool excl = strstr(kw, "exclusive") != NULL;
	d = up ? floor(d) : ceil(d);
	if (excl && d == x->valuedouble)
		d += up ? -1 : 1;
	*v = d > (double)INT_MAXV ? INT_MAXV : d < -(double)INT_MAXV ? -INT_MAXV : (int64_t)d;
	return true;
}

static ms_gx js_number(struct js *j, const cJSON *s, bool integer, const char *path)
{
	static const char *const kws[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
	int64_t lo = -INT_MAXV, hi = INT_MAXV, v;
	bool any = false;
	if (cJSON_GetObjectItemCaseSensitive(s, "multipleOf"))
		return fail(j, -ENOTSUP, path, "\"%s\" at %s is not supported", "multipleOf");
	for (int i = 0; i < 4; i++) {
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
		if (!x || cJSON_IsBool(x))  /* draft-04's boolean exclusive* */
			continue;
		if (!cJSON_IsNumber(x))
			return fail(j, -EINVAL, path, "\"%s\" at %s must be a number", kws[i]);
		if (!integer && !(i == 0 && x->valuedouble == 0))
			return fail(j, -ENOTSUP, path, "\"%s\" at %s on a number cannot be enforced "
				    "(it can on an integer; minimum 0 can on a number)", kws[i]);
		any = true;
		if (int_bound(s, kws[i], i >= 2, &v)) {
			if (i < 2 && v > lo)
				lo = v;
			if (i >= 2 && v < hi)
				hi = v;
		}
	}
	if (lo > hi)
		return fail(j, -EINVAL, path, "the bounds at %2$s leave no %1$s", "integer");
	ms_gx sign = (any && lo >= 0) ? ms_gb_empty(j->b) : ms_gb_opt(j->b, lit(j, "-"));
	ms_gx ipart = ms_gb_alt2(j->b, lit(j, "0"), ms_gb_seq2(j->b, digits(j, '1', '9', 1, 1),
							 digits(j, '0', '9', 0, NUM_DIGITS - 1)));
	if (integer)
		return any ? int_range(j, lo, hi) : ms_gb_seq2(j->b, sign, ipart);
	ms_gx frac = ms_gb_opt(j->b, ms_gb_seq2(j->b, lit(j, "."), digits(j, '0', '9', 1, NUM_DIGITS)));
	uint64_t e[4] = {0, 1ull << ('e' - 64) | 1ull << ('E' - 64), 0, 0}, pm[4] = {1ull << '+' | 1ull << '-', 0, 0, 0};
	ms_gx xs[3] = {ms_gb_byteset(j->b, e), ms_gb_opt(j->b, ms_gb_byteset(j->b, pm)), digits(j, '0', '9', 1, 2)};
	ms_gx all[4] = {sign, ipart, frac, ms_gb_opt(j->b, seq(j, xs, 3))};
	return seq(j, all, 4);
}

/* ---- any value (made once, as rules: it is recursive) ---- */

static ms_gx any_value(struct js *j)
{
	if (j->any_value >= 0)
		return j->any_value;
	struct ms_gb *b = j->b;
	int rv = ms_gb_rule(b, "any-value"), ro = ms_gb_rule(b, "any-object"), ra = ms_gb_rule(b, "any-array");
	j->any_value = ms_gb_ref(b, rv);
	ms_gx str = quoted(j, ms_gb_rep(b, json_char(j, true), 0, -1));
	ms_gx kv[3] = {str, ws_lit_ws(j, ":"), ms_gb_ref(b, rv)};
	ms_gx pair = seq(j, kv, 3);
	ms_gx more_o = ms_gb_rep(b, ms_gb_seq2(b, ws_lit_ws(j, ","), pair), 0, -1);
	ms_gx obj[4] = {ms_gb_seq2(b, lit(j, "{"), ws(j)), ms_gb_opt(b, ms_gb_seq2(b, pair, more_o)), ws(j), lit(j, "}")};
	ms_gb_define(b, ro, seq(j, obj, 4));
	ms_gx more_a = ms_gb_rep(b, ms_gb_seq2(b, ws_lit_ws(j, ","), ms_gb_ref(b, rv)), 0, -1);
	ms_gx arr[4] = {ms_gb_seq2(b, lit(j, "["), ws(j)), ms_gb_opt(b, ms_gb_seq2(b, ms_gb_ref(b, rv), more_a)),
			ws(j), lit(j, "]")};
	ms_gb_define(b, ra, seq(j, arr, 4));
	ms_gx alts[7] = {ms_gb_ref(b, ro), ms_gb_ref(b, ra), str, js_number(j, NULL, false, ""),
			 lit(j, "true"), lit(j, "false"), lit(j, "null")};
	ms_gb_define(b, rv, ms_gb_alt(b, alts, 7));
	return j->any_value;
}

/* ---- objects ---- */

static ms_gx js_value(struct js *j, const cJSON *s, const char *path);

/* A key that is none of names[0..n): plain identifier characters. */
static ms_gx other_key(struct js *j, const char *const *names, int n, size_t at, bool *alive)
{
	uint64_t ident[4] = {0x03ff200000000000ull, 0x07fffffe87fffffeull, 0, 0}; /* 0-9 - A-Z _ a-z */
	struct ms_gb *b = j->b;
	uint64_t next[4] = {0};
	bool ends_here = false;
	for (int i = 0; i < n; i++) {
		if (!alive[i])
			continue;
		unsigned char c = (unsigned char)names[i][at];
		if (!c)
			ends_here = true;
		else
			next[c >> 6] |= 1ull << (c & 63);
	}
	uint64_t dev[4];
	for (int w = 0; w < 4; w++)
		dev[w] = ident[w] & ~next[w];
	ms_gx alts[66];
	int na = 0;
	if (!ends_here && at > 0)
		alts[na++] = lit(j, "\"");
	/* leave every name here: then anything */
	alts[na++] = ms_gb_seq2(b, ms_gb_byteset(b, dev), ms_gb_seq2(b, ms_gb_rep(b, ms_gb_byteset(b, ident), 0, 63),
								  lit(j, "\"")));
	for (int c = 0; c < 128 && na < 66; c++) {
		if (!(next[c >> 6] >> (c & 63) & 1) || !(ident[c >> 6] >> (c & 63) & 1))
			continue;
		bool keep[256];
		for (int i = 0; i < n && i < 256; i++)
			keep[i] = alive[i] && (unsigned char)names[i][at] == c;
		char ch = (char)c;
		alts[na++] = ms_gb_seq2(b, ms_gb_lit(b, &ch, 1), other_key(j, names, n, at + 1, keep));
	}
	return ms_gb_alt(b, alts, na);
}

static ms_gx extra_pair(struct js *j, const cJSON *props, const cJSON *extra, const char *path)
{
	const char *names[256];
	bool alive[256];
	int n = 0;
	const cJSON *p;
	cJSON_ArrayForEach(p, props) {
		if (n == 256)
			return fail(j, -ENOTSUP, path, "%s at %s: over 256 properties with additionalProperties",
				    "properties");
		alive[n] = true;
		names[n++] = p->string;
	}
	ms_gx key = n ? ms_gb_seq2(j->b, lit(j, "\""), other_key(j, names, n, 0, alive))
		      : quoted(j, ms_gb_rep(j->b, json_char(j, true), 0, -1));
	char sub[600];
	snprintf(sub, sizeof(sub), "%s/additionalProperties", path);
	ms_gx val = !extra ? any_value(j) : js_value(j, extra, sub);
	ms_gx xs[3] = {key, ws_lit_ws(j, ":"), val};
	return seq(j, xs, 3);
}

/* path/properties/name, name escaped as RFC 6901 says (~ as ~0, / as ~1). */
static void member_path(char *out, size_t cap, const char *path, const char *name)
{
	int n = snprintf(out, cap, "%s/properties/", path);
	size_t k = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
	for (; *name && k + 3 < cap; name++) {
		if (*name == '~' || *name == '/') {
			out[k++] = '~';
			out[k++] = *name == '~' ? '0' : '1';
		} else {
			out[k++] = *name;
		}
	}
	out[k] = 0;
}

static bool is_required(const cJSON *req, const char *name)
{
	const cJSON *r;
	cJSON_ArrayForEach(r, req)
		if (cJSON_IsString(r) && !strcmp(r->valuestring, name))
			return true;
	return false;
}

/* The members in declaration order, each optional one skippable, a comma
 * before all but the first present: tail rule T_k is item k's part then
 * T_{k+1} (tail calls: no nesting), the last T the extra pairs. */
static ms_gx js_object(struct js *j, const cJSON *s, const char *path)
{
	struct ms_gb *b = j->b;
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
	const cJSON *extra = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	if (props && !cJSON_IsObject(props))
		return fail(j, -EINVAL, path, "\"%s\" at %s must be an object", "properties");
	if (req && !cJSON_IsArray(req))
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a list of names", "required");
	const cJSON *p;
	cJSON_ArrayForEach(p, req)
		if (!cJSON_IsString(p) || !cJSON_GetObjectItemCaseSensitive(props, p->valuestring))
			return fail(j, -ENOTSUP, path, "\"%s\" at %s names a property not in properties",
				    "required");
	int n = cJSON_GetArraySize(props);
	bool free_extra = !extra ? n == 0 : cJSON_IsTrue(extra);
	if (extra && !cJSON_IsBool(extra) && !cJSON_IsObject(extra))
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a boolean or a schema",
			    "additionalProperties");
	ms_gx xp = -2;   /* the extra pairs, or -2: none allowed */
	if (free_extra || cJSON_IsObject(extra))
		xp = extra_pair(j, props, free_extra ? NULL : extra, path);
	ms_gx *item = calloc((size_t)n + 1, sizeof(ms_gx));
	bool *need = calloc((size_t)n + 1, 1);
	if (!item || !need) {
		free(item);
		free(need);
		return fail(j, -ENOMEM, path, "out of memory at %s%s", "");
	}
	int k = 0;
	cJSON_ArrayForEach(p, props) {
		char sub[600];
		member_path(sub, sizeof(sub), path, p->string);
		cJSON *name = cJSON_CreateString(p->string);
		ms_gx key = name ? json_literal(j, name, path) : -1;
		cJSON_Delete(name);
		ms_gx xs[3] = {key, ws_lit_ws(j, ":"), js_value(j, p, sub)};
		item[k] = seq(j, xs, 3);
		need[k++] = is_required(req, p->string);
	}
	/* The members from i on: tail i, each after a comma, and pick i, the
	 * next present one (no comma before it); last first. The comma is
	 * matched once, then the key tells the member: each optional member a
	 * rule of its own after the comma would make a stack per member that
	 * could come next, alive from the end of every value on. */
	int *tr = calloc((size_t)n + 1, sizeof(int)), *pk = calloc((size_t)n + 1, sizeof(int));
	int id = j->n_tmp++;
	for (int i = 0; tr && pk && i <= n; i++) {
		char t[64];
		snprintf(t, sizeof(t), "obj%d-tail%d", id, i);
		tr[i] = ms_gb_rule(b, t);
		snprintf(t, sizeof(t), "obj%d-pick%d", id, i);
		pk[i] = ms_gb_rule(b, t);
	}
	ms_gx sep = ws_lit_ws(j, ",");
	bool all_opt = true;   /* every member from i on optional */
	for (int i = n; tr && pk && i >= 0; i--) {
		if (i == n && xp >= 0)
			ms_gb_define(b, pk[i], ms_gb_seq2(b, xp, ms_gb_ref(b, tr[n])));
		else if (i < n)
			ms_gb_define(b, pk[i], need[i] || (i + 1 == n && xp < 0)
						? ms_gb_seq2(b, item[i], ms_gb_ref(b, tr[i + 1]))
						: ms_gb_alt2(b, ms_gb_seq2(b, item[i], ms_gb_ref(b, tr[i + 1])),
							     ms_gb_ref(b, pk[i + 1])));
		all_opt &= i == n || !need[i];
		bool some = i < n || xp >= 0;   /* pick i has a member to offer */
		ms_gx more = some ? ms_gb_seq2(b, sep, ms_gb_ref(b, pk[i])) : -2;
		if (i >= 1 || n == 0)
			ms_gb_define(b, tr[i], !some ? ms_gb_empty(b) : all_opt ? ms_gb_opt(b, more) : more);
	}
	ms_gx first = n || xp >= 0 ? ms_gb_ref(b, pk[0]) : ms_gb_empty(b);
	ms_gx body = tr && pk ? (all_opt ? ms_gb_opt(b, first) : first) : -1;
	free(pk);
	free(tr);
	free(item);
	free(need);
	ms_gx xs[4] = {ms_gb_seq2(b, lit(j, "{"), ws(j)), body, ws(j), lit(j, "}")};
	return seq(j, xs, 4);
}

/* ---- arrays ---- */

/* The elements from i on (i >= 1), each after a comma: the prefix
 * schemas, then the rest's; those past mn optional. */
static ms_gx array_tail(struct js *j, const cJSON *prefix, int np, ms_gx rest, int mn, int hi, int i,
			const char *path)
{
	struct ms_gb *b = j->b;
	ms_gx sep = ws_lit_ws(j, ",");
	if (i >= np) {
		int rmin = mn > i ? mn - i : 0, rmax = hi < 0 ? -1 : hi - i;
		return rest == -2 || rmax == 0 ? ms_gb_empty(b) : ms_gb_rep(b, ms_gb_seq2(b, sep, rest), rmin, rmax);
	}
	char sub[600];
	snprintf(sub, sizeof(sub), "%s/prefixItems/%d", path, i);
	ms_gx el = js_value(j, cJSON_GetArrayItem(prefix, i), sub);
	ms_gx here = ms_gb_seq2(b, ms_gb_seq2(b, sep, el), array_tail(j, prefix, np, rest, mn, hi, i + 1, path));
	return i >= mn ? ms_gb_opt(b, here) : here;
}

static ms_gx js_array(struct js *j, const cJSON *s, const char *path)
{
	struct ms_gb *b = j->b;
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
	const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
	const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
	if (cJSON_IsArray(items) && !prefix) {  /* draft-07's tuple form */
		prefix = items;
		items = addl;
	}
	int mn = int_kw(j, s, "minItems", path, 0), mx = int_kw(j, s, "maxItems", path, -1);
	if (mn == -2 || mx == -2)
		return -1;
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems")))
		return fail(j, -ENOTSUP, path, "\"%s\" at %s cannot be enforced", "uniqueItems");
	if (prefix && !cJSON_IsArray(prefix))
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a list of schemas", "prefixItems");
	int np = cJSON_GetArraySize(prefix);
	char sub[600];
	ms_gx rest = -2;   /* the schema past the prefix, or -2: no more items */
	if (!items || cJSON_IsTrue(items)) {
		rest = any_value(j);
	} else if (!cJSON_IsFalse(items)) {
		snprintf(sub, sizeof(sub), "%s/items", path);
		rest = js_value(j, items, sub);
	}
	if (rest == -1)
		return -1;
	int hi = rest == -2 ? np : mx;
	if (mx >= 0 && mx < hi)
		hi = mx;
	if ((hi >= 0 && hi < mn))
		return fail(j, -EINVAL, path, "the item counts at %2$s leave no %1$s", "array");
	if (hi >= 0 && np > hi)
		np = hi;
	ms_gx list = ms_gb_empty(b);
	if (np > 0 || (rest != -2 && hi != 0)) {
		/* the first element has no comma */
		ms_gx first;
		if (np > 0) {
			snprintf(sub, sizeof(sub), "%s/prefixItems/0", path);
			first = js_value(j, cJSON_GetArrayItem(prefix, 0), sub);
		} else {
			first = rest;
		}
		list = ms_gb_seq2(b, first, array_tail(j, prefix, np, rest, mn, hi, 1, path));
		if (mn == 0)
			list = ms_gb_opt(b, list);
	}
	ms_gx xs[4] = {ms_gb_seq2(b, lit(j, "["), ws(j)), list, ws(j), lit(j, "]")};
	return seq(j, xs, 4);
}

/* ---- keywords, $ref, combinators ---- */

static const char *const unsupported[] = {
	"not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
	"patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
	"contains", "minContains", "maxContains", "minProperties", "maxProperties",
	"$dynamicRef", "$recursiveRef", "contentSchema",
};

static const cJSON *resolve(struct js *j, const char *ref, const char *path)
{
	if (ref[0] != '#') {
		fail(j, -ENOTSUP, path, "\"$ref\": \"%s\" at %s is not in this document", ref);
		return NULL;
	}
	const cJSON *at = j->root;
	const char *p = ref + 1;
	while (*p == '/' && at) {
		char key[256];
		size_t k = 0;
		for (p++; *p && *p != '/' && k < sizeof(key) - 1; p++) {
			if (*p == '~' && (p[1] == '0' || p[1] == '1'))
				key[k++] = p[1] == '0' ? '~' : '/', p++;
			else
				key[k++] = *p;
		}
		key[k] = 0;
		at = cJSON_IsArray(at) ? cJSON_GetArrayItem(at, atoi(key))
				       : cJSON_GetObjectItemCaseSensitive(at, key);
	}
	if (!at || *p)
		fail(j, -EINVAL, path, "\"$ref\": \"%s\" at %s points at nothing", ref);
	return at;
}

static ms_gx js_ref(struct js *j, const char *ref, const char *path)
{
	char name[300];
	snprintf(name, sizeof(name), "ref:%s", ref);
	int r = ms_gb_find_rule(j->b, name);
	if (r >= 0)
		return ms_gb_ref(j->b, r);  /* made, or being made (recursion) */
	r = ms_gb_rule(j->b, name);
	const cJSON *t = resolve(j, ref, path);
	if (!t)
		return -1;
	ms_gb_define(j->b, r, js_value(j, t, ref + 1));
	return j->rc ? -1 : ms_gb_ref(j->b, r);
}

/* What merging keyword k of a branch into `have` needs: both the
 * keyword's own JSON type (properties an object, required a list). */
static bool merge_types_ok(struct js *j, const cJSON *have, const cJSON *k, const char *path)
{
	bool props = !strcmp(k->string, "properties");
	if (props ? cJSON_IsObject(have) && cJSON_IsObject(k) : cJSON_IsArray(have) && cJSON_IsArray(k))
		return true;
	fail(j, -EINVAL, path, props ? "\"%s\" at %s must be an object of schemas"
				     : "\"%s\" at %s must be a list of property names", k->string);
	return false;
}

/* d (a copy) into object o under key, replacing what was there; false
 * (d freed) when cJSON does not take it. */
static bool put_key(cJSON *o, const char *key, cJSON *d)
{
	cJSON_DeleteItemFromObjectCaseSensitive(o, key);
	if (cJSON_AddItemToObject(o, key, d))
		return true;
	cJSON_Delete(d);
	return false;
}

/* a's keywords and b's in one schema (allOf): properties and required
 * merged, b's other keywords over a's. A branch must be a schema object
 * (true, which allows anything, adds nothing); NULL with j->rc set when
 * it is not, or when the two disagree in a way one schema cannot say. */
static cJSON *merge(struct js *j, const cJSON *a, const cJSON *b, const char *path,
		    const char *kw)
{
	if (!cJSON_IsObject(b) && !cJSON_IsTrue(b)) {
		fail(j, -EINVAL, path, "\"%s\" at %s: every branch must be a schema object (or true)",
		     kw);
		return NULL;
	}
	cJSON *m = cJSON_Duplicate(a, true);
	const cJSON *k;
	bool ok = m != NULL;
	cJSON_ArrayForEach(k, (cJSON_IsObject(b) ? b : NULL)) {
		if (!ok)
			break;
		cJSON *have = cJSON_GetObjectItemCaseSensitive(m, k->string);
		if (have && (!strcmp(k->string, "properties") || !strcmp(k->string, "required"))) {
			ok = merge_types_ok(j, have, k, path);
			const cJSON *e;
			cJSON_ArrayForEach(e, (ok ? k : NULL)) {
				cJSON *d = cJSON_Duplicate(e, true);
				ok = d && (cJSON_IsObject(have) ? put_key(have, e->string, d)
								: cJSON_AddItemToArray(have, d));
				if (!ok)
					break;
			}
		} else if (have && !strcmp(k->string, "type") && !cJSON_Compare(have, k, true)) {
			fail(j, -ENOTSUP, path, "\"%s\" at %s: allOf of different types is not supported", "allOf");
		} else {
			cJSON *d = cJSON_Duplicate(k, true);
			ok = d && put_key(m, k->string, d);
		}
	}
	if (!ok) {
		cJSON_Delete(m);
		fail(j, -ENOMEM, path, "out of memory merging %s at %s", kw);
		return NULL;
	}
	return m;
}

/* A schema with its $ref replaced by the target (for merging). */
static const cJSON *deref(struct js *j, const cJSON *s, const char *path)
{
	for (int hops = 0; hops < 16 && s; hops++) {
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
		if (!cJSON_IsString(r))
			return s;
		s = resolve(j, r->valuestring, path);
	}
	return s;
}

static ms_gx js_allof(struct js *j, const cJSON *s, const cJSON *all, const char *path)
{
	cJSON *m = cJSON_Duplicate(s, true);
	if (m)
		cJSON_DeleteItemFromObjectCaseSensitive(m, "allOf");
	const cJSON *e;
	cJSON_ArrayForEach(e, all) {
		const cJSON *t = deref(j, e, path);
		if (!t || !m)
			break;
		cJSON *n = merge(j, m, t, path, "allOf");
		cJSON_Delete(m);
		m = n;
	}
	if (!m)
		return fail(j, j->rc ? j->rc : -ENOMEM, path, "out of memory merging %s at %s", "allOf");
	/* keep it until the end: the rules point at its strings */
	m->next = j->owned;
	j->owned = m;
	return j->rc ? -1 : js_value(j, m, path);
}

/* ---- oneOf: its branches must exclude each other ---- */

/* JSON types, as validation sees them (integer is a number). */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_NUM = 16, T_STR = 32, T_ALL = 63 };

static int value_type(const cJSON *v)
{
	return cJSON_IsNull(v) ? T_NULL : cJSON_IsBool(v) ? T_BOOL : cJSON_IsNumber(v) ? T_NUM
	       : cJSON_IsString(v) ? T_STR : cJSON_IsArray(v) ? T_ARR : T_OBJ;
}

static int type_name(const char *t)
{
	static const char *const names[] = {"null", "boolean", "object", "array", "number", "string",
					    "integer"};
	for (int i = 0; i < 7; i++)
		if (!strcmp(t, names[i]))
			return i == 6 ? T_NUM : 1 << i;
	return T_ALL;
}

/* The types of the values s accepts (a superset; T_ALL when unsure). */
static int type_set(struct js *j, const cJSON *s, const char *path, int depth)
{
	s = deref(j, s, path);
	if (!s || depth > 8 || cJSON_IsTrue(s) || !cJSON_IsObject(s))
		return cJSON_IsFalse(s) ? 0 : T_ALL;
	int t = T_ALL, u = 0;
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type"), *e;
	if (cJSON_IsString(ty))
		t &= type_name(ty->valuestring);
	if (cJSON_IsArray(ty)) {
		cJSON_ArrayForEach(e, ty)
			u |= cJSON_IsString(e) ? type_name(e->valuestring) : T_ALL;
		t &= u;
	}
	if (cJSON_GetObjectItemCaseSensitive(s, "const"))
		t &= value_type(cJSON_GetObjectItemCaseSensitive(s, "const"));
	const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
	if (cJSON_IsArray(en)) {
		u = 0;
		cJSON_ArrayForEach(e, en)
			u |= value_type(e);
		t &= u;
	}
	static const char *const unions[] = {"anyOf", "oneOf"};
	for (int k = 0; k < 2; k++) {
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, unions[k]);
		if (!cJSON_IsArray(l))
			continue;
		u = 0;
		cJSON_ArrayForEach(e, l)
			u |= type_set(j, e, path, depth + 1);
		t &= u;
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s, "allOf"))
		t &= type_set(j, e, path, depth + 1);
	return t;
}

/* The values a property schema allows when it lists them (const, enum);
 * NULL otherwise. *one: the const. */
static const cJSON *listed(struct js *j, const cJSON *s, const char *path, const cJSON **one)
{
	s = deref(j, s, path);
	*one = s ? cJSON_GetObjectItemCaseSensitive(s, "const") : NULL;
	const cJSON *en = s ? cJSON_GetObjectItemCaseSensitive(s, "enum") : NULL;
	return *one ? *one : cJSON_IsArray(en) ? en : NULL;
}

static bool lists_meet(const cJSON *a, const cJSON *a1, const cJSON *b, const cJSON *b1)
{
	const cJSON *x, *y;
	for (x = a1 ? a1 : a->child; x; x = a1 ? NULL : x->next)
		for (y = b1 ? b1 : b->child; y; y = b1 ? NULL : y->next)
			if (cJSON_Compare(x, y, true))
				return true;
	return false;
}

/* Objects a and b exclude each other by a property a requires: b lists
 * other values for it, or b's additionalProperties: false has no room. */
static bool objects_apart(struct js *j, const cJSON *a, const cJSON *b, const char *path)
{
	const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
	const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
	const cJSON *xb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties"), *r;
	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(a, "required")) {
		if (!cJSON_IsString(r))
			continue;
		const cJSON *sa = cJSON_GetObjectItemCaseSensitive(pa, r->valuestring);
		const cJSON *sb = cJSON_GetObjectItemCaseSensitive(pb, r->valuestring), *a1 = NULL, *b1 = NULL;
		if (!sb && cJSON_IsFalse(xb))
			return true;
		const cJSON *la = sa ? listed(j, sa, path, &a1) : NULL;
		const cJSON *lb = sb ? listed(j, sb, path, &b1) : NULL;
		if (la && lb && !lists_meet(la, a1, lb, b1))
			return true;
	}
	return false;
}

/* No value validates against both a and b. */
static bool disjoint(struct js *j, const cJSON *a, const cJSON *b, const char *path)
{
	int ta = type_set(j, a, path, 0), tb = type_set(j, b, path, 0);
	if (!(ta & tb))
		return true;
	a = deref(j, a, path);
	b = deref(j, b, path);
	if (!cJSON_IsObject(a) || !cJSON_IsObject(b))
		return false;
	const cJSON *a1 = NULL, *b1 = NULL, *la = listed(j, a, path, &a1), *lb = listed(j, b, path, &b1);
	if (la && lb && !lists_meet(la, a1, lb, b1))
		return true;
	return ta == T_OBJ && tb == T_OBJ && (objects_apart(j, a, b, path) || objects_apart(j, b, a, path));
}

/* oneOf is served as anyOf, which is sound only when no value can match
 * two branches: each pair must be apart by type, listed values, or a
 * required property. */
static int oneof_apart(struct js *j, const cJSON *list, const char *path)
{
	int i = 0;
	for (const cJSON *a = list->child; a && !j->rc; a = a->next, i++) {
		int k = i + 1;
		for (const cJSON *b = a->next; b && !j->rc; b = b->next, k++) {
			if (disjoint(j, a, b, path))
				continue;
			j->rc = ms_err_set(j->err, -ENOTSUP, "\"oneOf\" at %s: branches %d and %d can both "
					   "match; use anyOf, or set them apart by type, by a const or enum "
					   "property one of them requires, or by additionalProperties: false",
					   *path ? path : "/", i, k);
		}
	}
	return j->rc;
}

static ms_gx js_anyof(struct js *j, const cJSON *s, const cJSON *list, const char *kw, const char *path)
{
	int n = cJSON_GetArraySize(list);
	if (!cJSON_IsArray(list) || !n)
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a non-empty list of schemas", kw);
	if (!strcmp(kw, "oneOf") && oneof_apart(j, list, path))
		return -1;
	/* keywords beside it apply to every branch */
	cJSON *rest = cJSON_Duplicate(s, true);
	if (!rest)
		return fail(j, -ENOMEM, path, "out of memory at %s%s", "");
	cJSON_DeleteItemFromObjectCaseSensitive(rest, kw);
	bool siblings = false;
	const cJSON *k;
	cJSON_ArrayForEach(k, rest)
		if (strcmp(k->string, "title") && strcmp(k->string, "description") && strcmp(k->string, "$defs") &&
		    strcmp(k->string, "definitions") && strcmp(k->string, "$schema") && strcmp(k->string, "$id"))
			siblings = true;
	ms_gx *alts = calloc((size_t)n, sizeof(ms_gx));
	int i = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, list) {
		char sub[600];
		snprintf(sub, sizeof(sub), "%s/%s/%d", path, kw, i);
		if (!alts)
			break;
		if (siblings) {
			const cJSON *t = deref(j, e, sub);
			cJSON *m = t ? merge(j, rest, t, sub, kw) : NULL;
			if (!m) {
				alts[i++] = -1;
				continue;
			}
			m->next = j->owned;
			j->owned = m;
			alts[i++] = js_value(j, m, sub);
		} else {
			alts[i++] = js_value(j, e, sub);
		}
	}
	cJSON_Delete(rest);
	ms_gx x = alts && !j->rc ? ms_gb_alt(j->b, alts, n) : -1;
	free(alts);
	return x;
}

static const char *infer_type(const cJSON *s)
{
	static const char *const obj[] = {"properties", "required", "additionalProperties"};
	static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems"};
	static const char *const str[] = {"minLength", "maxLength", "pattern", "format"};
	static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
	for (int i = 0; i < 4; i++) {
		if (i < 3 && cJSON_GetObjectItemCaseSensitive(s, obj[i]))
			return "object";
		if (cJSON_GetObjectItemCaseSensitive(s, arr[i]))
			return "array";
		if (cJSON_GetObjectItemCaseSensitive(s, str[i]))
			return "string";
		if (cJSON_GetObjectItemCaseSensitive(s, num[i]))
			return "number";
	}
	return NULL;
}

static ms_gx js_typed(struct js *j, const cJSON *s, const char *t, const char *path)
{
	if (!strcmp(t, "object"))
		return js_object(j, s, path);
	if (!strcmp(t, "array"))
		return js_array(j, s, path);
	if (!strcmp(t, "string"))
		return js_string(j, s, path);
	if (!strcmp(t, "number") || !strcmp(t, "integer"))
		return js_number(j, s, !strcmp(t, "integer"), path);
	if (!strcmp(t, "boolean"))
		return ms_gb_alt2(j->b, lit(j, "true"), lit(j, "false"));
	if (!strcmp(t, "null"))
		return lit(j, "null");
	return fail(j, -EINVAL, path, "\"type\": \"%s\" at %s is not a JSON Schema type", t);
}

static ms_gx js_types(struct js *j, const cJSON *s, const char *path)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
	const char *one = cJSON_IsString(t) ? t->valuestring : t ? NULL : infer_type(s);
	ms_gx x;
	if (one || !t) {
		x = one ? js_typed(j, s, one, path) : any_value(j);
	} else if (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0) {
		ms_gx alts[8];
		int n = 0;
		const cJSON *e;
		cJSON_ArrayForEach(e, t) {
			if (!cJSON_IsString(e) || n == 8)
				return fail(j, -EINVAL, path, "\"%s\" at %s must list type names", "type");
			alts[n++] = js_typed(j, s, e->valuestring, path);
		}
		x = ms_gb_alt(j->b, alts, n);
	} else {
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a type name or a list of them", "type");
	}
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable")))
		x = ms_gb_alt2(j->b, x, lit(j, "null"));
	return x;
}

static ms_gx js_enum(struct js *j, const cJSON *s, const char *path)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(s, "const");
	if (c)
		return json_literal(j, c, path);
	const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *e;
	int n = cJSON_GetArraySize(en), i = 0;
	if (!cJSON_IsArray(en) || !n)
		return fail(j, -EINVAL, path, "\"%s\" at %s must be a non-empty list", "enum");
	ms_gx *alts = calloc((size_t)n, sizeof(ms_gx));
	if (!alts)
		return fail(j, -ENOMEM, path, "out of memory at %s%s", "");
	cJSON_ArrayForEach(e, en)
		alts[i++] = json_literal(j, e, path);
	ms_gx x = ms_gb_alt(j->b, alts, n);
	free(alts);
	return x;
}

static ms_gx js_value(struct js *j, const cJSON *s, const char *path)
{
	if (j->rc)
		return -1;
	if (cJSON_IsTrue(s))
		return any_value(j);
	if (!cJSON_IsObject(s))
		return fail(j, -EINVAL, path, "the schema at %2$s is not an object%1$s", "");
	if (j->depth >= JS_MAX_DEPTH)
		return fail(j, -E2BIG, path, "the schema nests deeper than 64 levels at %2$s%1$s", "");
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
		if (cJSON_GetObjectItemCaseSensitive(s, unsupported[i]))
			return fail(j, -ENOTSUP, path, "\"%s\" at %s is not supported", unsupported[i]);
	j->depth++;
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
	const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
	const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
	ms_gx x;
	if (all)
		x = cJSON_IsArray(all) ? js_allof(j, s, all, path)
				       : fail(j, -EINVAL, path, "\"%s\" at %s must be a list", "allOf");
	else if (ref)
		x = cJSON_IsString(ref) ? js_ref(j, ref->valuestring, path)
					: fail(j, -EINVAL, path, "\"%s\" at %s must be a string", "$ref");
	else if (any || one)
		x = js_anyof(j, s, any ? any : one, any ? "anyOf" : "oneOf", path);
	else if (cJSON_GetObjectItemCaseSensitive(s, "const") || cJSON_GetObjectItemCaseSensitive(s, "enum"))
		x = js_enum(j, s, path);
	else
		x = js_types(j, s, path);
	j->depth--;
	return j->rc ? -1 : x;
}

int ms_json_schema_rules(struct ms_gb *b, const cJSON *schema, int *root, struct ms_err *err)
{
	struct js j = {.b = b, .root = schema, .err = err, .any_value = -1};
	int r = ms_gb_rule(b, "root");
	ms_gx x;
	if (!schema) {
		cJSON *obj = cJSON_CreateObject();
		cJSON *t = obj ? cJSON_AddStringToObject(obj, "type", "object") : NULL;
		x = t ? js_value(&j, obj, "") : fail(&j, -ENOMEM, "", "out of memory%s%s", "");
		cJSON_Delete(obj);
	} else {
		x = js_value(&j, schema, "");
	}
	ms_gb_define(b, r, x);
	while (j.owned) {
		cJSON *n = j.owned->next;
		j.owned->next = NULL;
		cJSON_Delete(j.owned);
		j.owned = n;
	}
	if (j.rc)
		return j.rc;
	*root = r;
	return x < 0 ? ms_err_set(err, -ENOMEM, "out of memory building the grammar") : 0;
}

int ms_json_schema_compile(const cJSON *schema, struct ms_grammar **out, struct ms_err *err)
{
	struct ms_gb *b;
	int root, rc;
	*out = NULL;
	if (ms_gb_new(&b))
		return ms_err_set(err, -ENOMEM, "out of memory");
	rc = ms_json_schema_rules(b, schema, &root, err);
	if (!rc)
		rc = ms_gb_compile(b, root, out, err);
	ms_gb_free(b);
	return rc;
}
