/*
 * options.c: `moeserve serve` configuration from flags, MOESERVE_*
 * environment variables, a JSON config file and defaults (see options.h),
 * and the value parsing every command's options share.
 *
 * The table's rows (options-table.c) drive everything: the flag,
 * environment and JSON names, the type and range checks, the default; serve
 * reads the rows whose cmds include it. The other commands read theirs in
 * options-tools.c, --help is options-help.c.
 *
 * argv is walked by hand (no getopt), so parsing keeps no global state.
 */
#include "options-int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "ms-json.h"

/* ---- names and sources ---- */

enum source { SRC_DEFAULT, SRC_FILE, SRC_ENV, SRC_FLAG };

/* Per-parse context: where each option's value came from, for messages. */
struct ctx {
	struct ms_serve_options *o;
	const char *config_path;      /* the config file's path, while it is read */
	enum source src[MS_CLI_MAX_ROWS];
	bool short_used[MS_CLI_MAX_ROWS];  /* the flag given was -x */
};

/* "max-body-bytes" -> "MOESERVE_MAX_BODY_BYTES" / "max_body_bytes". */
void ms_opt_env_name(const struct opt_def *d, char *o, size_t n)
{
	int k = snprintf(o, n, "MOESERVE_");
	for (const char *p = d->name; *p && (size_t)k + 1 < n; p++)
		o[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	o[k] = '\0';
}

static void json_name(const struct opt_def *d, char *o, size_t n)
{
	size_t k = 0;
	for (const char *p = d->name; *p && k + 1 < n; p++)
		o[k++] = *p == '-' ? '_' : *p;
	o[k] = '\0';
}

/* How a message names an option set from src: "--port", "MOESERVE_PORT",
 * "config file F: key \"port\"". */
static const char *label(const struct ctx *c, const struct opt_def *d, enum source src, char *o,
			 size_t n)
{
	char name[64];
	switch (src) {
	case SRC_FLAG:
		if (c->short_used[d - ms_opt_rows])
			snprintf(o, n, "-%c", d->short_name);
		else
			snprintf(o, n, "--%s", d->name);
		break;
	case SRC_ENV:
		ms_opt_env_name(d, o, n);
		break;
	case SRC_FILE:
		json_name(d, name, sizeof(name));
		snprintf(o, n, "config file %s: key \"%s\"", c->config_path ? c->config_path : "?", name);
		break;
	default:
		snprintf(o, n, "default of --%s", d->name);
		break;
	}
	return o;
}

/* ---- values ---- */

bool ms_opt_parse_i64(const char *s, bool lax, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || (!lax && isspace((unsigned char)*s)))
		return false;
	*out = v;
	return true;
}

/* "1048576", "512K", "1M", "8GiB", "1T": bytes (binary multiples). */
static bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return false;
	static const struct {
		const char *suffix;
		int shift;
	} units[] = {
		{"", 0},   {"K", 10}, {"KiB", 10}, {"k", 10}, {"M", 20}, {"MiB", 20},
		{"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40},
	};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix))
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
			return false;
		*out = (uint64_t)v << units[i].shift;
		return true;
	}
	return false;
}

static bool parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "1", "yes", "on"};
	static const char *const no[] = {"false", "0", "no", "off"};
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i]))
			return *out = true, true;
		if (!strcasecmp(s, no[i]))
			return *out = false, true;
	}
	return false;
}

bool ms_opt_parse_counts(const char *s, int64_t lo, int64_t hi, struct ms_cli_counts *out)
{
	out->n = 0;
	for (;;) {
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (end == s || errno || v < lo || v > hi || out->n == 4)
			return false;
		out->v[out->n++] = v;
		if (!*end)
			return true;
		if (*end != ',')
			return false;
		s = end + 1;
	}
}

void ms_opt_list_choices(const char *const *ch, char *o, size_t n)
{
	size_t k = 0;
	o[0] = '\0';
	for (int i = 0; ch[i] && k < n; i++)
		k += (size_t)snprintf(o + k, n - k, "%s%s", i ? (ch[i + 1] ? ", " : " or ") : "", ch[i]);
}

/* Is name in the comma-separated list ("auto, ref, ...")? */
static bool known_name(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return true;
		if (!e)
			break;
		p = e + 1;
		while (*p == ' ')
			p++;
	}
	return false;
}

/* Store a number after the range check; shown is how the message quotes
 * the value (the text given, or the JSON number). */
static int set_number(void *o, const struct opt_def *d, int64_t x,
		      const char *shown, bool quote, const char *lab, struct ms_err *err)
{
	const char *q = quote ? "\"" : "";
	if (x < d->lo || x > d->hi)
		return ms_err_set(err, -EINVAL, "%s: %s%s%s is not in [%lld, %lld]%s", lab, q, shown, q,
				  (long long)d->lo, (long long)d->hi, d->type == T_SIZE ? " bytes" : "");
	char *field = (char *)o + d->off;
	if (d->type == T_INT)
		*(int *)(void *)field = (int)x;
	else if (d->type == T_I64)
		*(int64_t *)(void *)field = x;
	else
		*(uint64_t *)(void *)field = (uint64_t)x;
	return 0;
}

/* Store a value given as text (flag, environment, default, or a JSON string)
 * into o; lab names the option and its source in messages. The value is
 * echoed in messages, except for the API key. */
int ms_opt_set_text(void *o, const struct opt_def *d, const char *v, const char *lab,
		    struct ms_err *err)
{
	char *field = (char *)o + d->off;
	switch (d->type) {
	case T_STR: {
		if (!*v)
			return ms_err_set(err, -EINVAL, "%s: must not be empty", lab);
		if (d->off == offsetof(struct ms_serve_options, backend) && !known_name(ms_backend_names(), v))
			return ms_err_set(err, -EINVAL, "%s: \"%s\" is not a backend (use %s)", lab, v,
					  ms_backend_names());
		if (d->off == offsetof(struct ms_serve_options, kernels) && !known_name(ms_cpu_kernel_sets, v))
			return ms_err_set(err, -EINVAL, "%s: \"%s\" is not a kernel set (use %s)", lab, v,
					  ms_cpu_kernel_sets);
		char *s = strdup(v);
		if (!s)
			return ms_err_set(err, -ENOMEM, "%s: out of memory", lab);
		char **dst = (char **)(void *)field;
		free(*dst);
		*dst = s;
		return 0;
	}
	case T_INT:
	case T_I64: {
		int64_t x;
		if (!ms_opt_parse_i64(v, false, &x))
			return ms_err_set(err, -EINVAL, "%s: \"%s\" is not an integer in [%lld, %lld]", lab,
					  v, (long long)d->lo, (long long)d->hi);
		return set_number(o, d, x, v, true, lab, err);
	}
	case T_SIZE: {
		uint64_t x;
		if (!parse_size(v, &x))
			return ms_err_set(err, -EINVAL,
					  "%s: \"%s\" is not a size (bytes, or a number with K, M, G or T)",
					  lab, v);
		if (x > (uint64_t)INT64_MAX)
			x = (uint64_t)INT64_MAX;  /* out of range either way */
		return set_number(o, d, (int64_t)x, v, true, lab, err);
	}
	case T_BOOL: {
		bool b;
		if (!parse_bool(v, &b))
			return ms_err_set(err, -EINVAL, "%s: \"%s\" is not a boolean (true or false)", lab, v);
		*(bool *)(void *)field = b;
		return 0;
	}
	case T_ENUM:
		for (int i = 0; d->choices[i]; i++) {
			if (!strcmp(v, d->choices[i])) {
				*(int *)(void *)field = i;
				return 0;
			}
		}
		char ch[128];
		ms_opt_list_choices(d->choices, ch, sizeof(ch));
		return ms_err_set(err, -EINVAL, "%s: \"%s\" is not %s", lab, v, ch);
	case T_COUNTS:
		if (!ms_opt_parse_counts(v, d->lo, d->hi, (struct ms_cli_counts *)(void *)field))
			return ms_err_set(err, -EINVAL, "%s: \"%s\" is not up to 4 integers in "
					  "[%lld, %lld] separated by commas", lab, v, (long long)d->lo,
					  (long long)d->hi);
		return 0;
	}
	return ms_err_set(err, -EINVAL, "%s: unknown option type", lab);
}

/* Store a value given as JSON. Strings go through set_text (so sizes may
 * be "8G"); integers must be JSON numbers with no fraction. */
static int set_json(void *o, const struct opt_def *d, const cJSON *v,
		    const char *lab, struct ms_err *err)
{
	static const char *const type_names[] = {
		[T_STR] = "a string", [T_INT] = "an integer", [T_I64] = "an integer",
		[T_SIZE] = "a size (integer or string such as \"4M\")",
		[T_BOOL] = "true or false", [T_ENUM] = "a string",
		[T_COUNTS] = "a string such as \"1,2\"",
	};
	const char *got = cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number"
			  : cJSON_IsBool(v) ? "a boolean" : cJSON_IsNull(v) ? "null"
			  : cJSON_IsArray(v) ? "an array" : "an object";
	switch (d->type) {
	case T_STR:
		if (cJSON_IsNull(v) && !d->def)
			return 0;  /* null: unset, which is the default */
		/* fall through */
	case T_ENUM:
		if (!cJSON_IsString(v))
			break;
		return ms_opt_set_text(o, d, v->valuestring, lab, err);
	case T_SIZE:
	case T_COUNTS:
		if (cJSON_IsString(v))
			return ms_opt_set_text(o, d, v->valuestring, lab, err);
		if (d->type == T_COUNTS)
			break;
		/* fall through */
	case T_INT:
	case T_I64: {
		if (!cJSON_IsNumber(v))
			break;
		double x = v->valuedouble;
		char shown[32];
		snprintf(shown, sizeof(shown), "%.17g", x);
		if (x != floor(x))
			return ms_err_set(err, -EINVAL, "%s: %s is not an integer", lab, shown);
		if (x < -9.0e18 || x > 9.0e18)  /* out of every range, and of int64_t */
			x = x < 0 ? -9.0e18 : 9.0e18;
		return set_number(o, d, (int64_t)x, shown, false, lab, err);
	}
	case T_BOOL:
		if (!cJSON_IsBool(v))
			break;
		*(bool *)(void *)((char *)o + d->off) = cJSON_IsTrue(v);
		return 0;
	}
	return ms_err_set(err, -EINVAL, "%s: expected %s, got %s", lab, type_names[d->type], got);
}

/* ---- the layers ---- */

/* serve's row of this name */
static const struct opt_def *find_long(const char *name, size_t n)
{
	for (int i = 0; i < ms_opt_n_rows; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		if (ms_opt_in(d, MS_CLI_SERVE) && strlen(d->name) == n && !strncmp(d->name, name, n))
			return d;
	}
	return NULL;
}

const char *ms_opt_env_get(char *const *envp, const char *name, bool empty_is_value)
{
	size_t n = strlen(name);
	for (char *const *e = envp; e && *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return (*e)[n + 1] || empty_is_value ? *e + n + 1 : NULL;
	return NULL;
}

static int read_file(const char *path, size_t max, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n + 1 == cap) {
			if (cap > max) {
				free(buf);
				fclose(f);
				return -EFBIG;
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
		errno = 0;
		size_t r = fread(buf + n, 1, cap - 1 - n, f);
		n += r;
		if (r == 0) {
			int bad = ferror(f) ? (errno ? errno : EIO) : 0;
			fclose(f);
			if (bad) {
				free(buf);
				return -bad;
			}
			buf[n] = '\0';
			*out = buf;
			*len = n;
			return 0;
		}
	}
	free(buf);
	fclose(f);
	return -ENOMEM;
}

static int load_config_file(struct ctx *c, const char *from, struct ms_err *err)
{
	char *text;
	size_t len;
	int rc = read_file(c->config_path, 16u << 20, &text, &len);
	if (rc == -ENOMEM)
		return ms_err_set(err, rc, "%s: out of memory reading \"%s\"", from, c->config_path);
	if (rc == -EFBIG)
		return ms_err_set(err, -EINVAL, "%s: \"%s\" is larger than 16 MiB", from, c->config_path);
	if (rc)
		return ms_err_set(err, -ENOENT, "%s: cannot read \"%s\": %s", from, c->config_path,
				  strerror(-rc));
	cJSON *root;
	char msg[sizeof(err->msg)];
	rc = ms_json_parse_rfc(text, len, 0, &root, msg, sizeof(msg));
	free(text);
	if (rc) /* a repeated key too: which of the two was meant is not ours to guess */
		return ms_err_set(err, rc == -EINVAL ? -EBADMSG : rc, "config file %s: %s",
				  c->config_path, msg);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return ms_err_set(err, -EBADMSG, "config file %s: not a JSON object", c->config_path);
	}
	rc = 0;
	for (const cJSON *it = root->child; it && !rc; it = it->next) {
		const struct opt_def *d = NULL;
		char key[64], lab[600];
		for (int i = 0; i < ms_opt_n_rows && !d; i++) {
			json_name(&ms_opt_rows[i], key, sizeof(key));
			if (ms_opt_in(&ms_opt_rows[i], MS_CLI_SERVE) && !strcmp(key, it->string))
				d = &ms_opt_rows[i];
		}
		if (!d) {
			rc = ms_err_set(err, -EINVAL, "config file %s: unknown key \"%s\" (see moeserve "
					"serve --help)", c->config_path, it->string);
			break;
		}
		rc = set_json(c->o, d, it, label(c, d, SRC_FILE, lab, sizeof(lab)), err);
		c->src[d - ms_opt_rows] = SRC_FILE;
	}
	cJSON_Delete(root);
	return rc;
}

/* One parsed flag. */
struct flag {
	const struct opt_def *d;   /* NULL: --config */
	const char *value;
	bool is_short;
};

/* Walk argv: -h/--help anywhere wins (returns 1); otherwise the first
 * syntax error, or 0 with flags[0..*n) filled. */
static int scan_argv(int argc, char *const *argv, struct flag *flags, int *n, struct ms_err *err)
{
	int rc = 0;
	*n = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;
		if (rc)
			continue;  /* keep looking for --help */
		struct flag f = {0};
		const char *eq = NULL;
		bool config = false;
		if (a[0] == '-' && a[1] == '-' && a[2]) {
			const char *name = a + 2;
			eq = strchr(name, '=');
			size_t len = eq ? (size_t)(eq - name) : strlen(name);
			config = len == 6 && !strncmp(name, "config", 6);
			f.d = config ? NULL : find_long(name, len);
			if (!f.d && !config) {
				rc = ms_err_set(err, -EINVAL, "%.*s: unknown option (see moeserve serve --help)",
						(int)(len + 2), a);
				continue;
			}
		} else if (a[0] == '-' && a[1]) {
			for (int k = 0; k < ms_opt_n_rows && !f.d && !a[2]; k++)
				if (ms_opt_rows[k].short_name == a[1] &&
				    ms_opt_in(&ms_opt_rows[k], MS_CLI_SERVE))
					f.d = &ms_opt_rows[k];
			if (!f.d) {
				rc = ms_err_set(err, -EINVAL, "%s: unknown option (see moeserve serve --help)", a);
				continue;
			}
			f.is_short = true;
		} else {
			rc = ms_err_set(err, -EINVAL, "unexpected argument \"%s\" (options start with --)", a);
			continue;
		}
		if (eq)
			f.value = eq + 1;
		else if (f.d && f.d->type == T_BOOL)
			f.value = "true";
		else if (i + 1 < argc)
			f.value = argv[++i];
		else {
			if (f.is_short)
				rc = ms_err_set(err, -EINVAL, "%s: missing value", a);
			else
				rc = ms_err_set(err, -EINVAL, "--%s: missing value", f.d ? f.d->name : "config");
			continue;
		}
		flags[(*n)++] = f;
	}
	return rc;
}

/* --api-key and --api-key-file: each key well-formed, the file readable
 * and holding keys (the daemon reads it again when it starts, and on
 * SIGHUP). Errors name the option and its source, never a key. */
static int check_api_keys(struct ctx *c, struct ms_err *err)
{
	struct ms_serve_options *o = c->o;
	const struct opt_def *dk = find_long("api-key", 7), *df = find_long("api-key-file", 12);
	char lab[600];
	const char *why = o->api_key ? ms_auth_key_invalid(o->api_key, strlen(o->api_key)) : NULL;
	if (why)
		return ms_err_set(err, -EINVAL, "%s: the key is %s",
				  label(c, dk, c->src[dk - ms_opt_rows], lab, sizeof(lab)), why);
	if (!o->api_key_file)
		return 0;
	struct ms_keyset *ks;
	/* with --api-key's key, a file without keys is fine: they may come
	 * later, on SIGHUP */
	int rc = ms_keyset_load(o->api_key, o->api_key_file, &ks, err);
	ms_keyset_free(ks);
	if (rc)
		ms_err_prefix(err, "%s: ", label(c, df, c->src[df - ms_opt_rows], lab, sizeof(lab)));
	return rc;
}

/* A PEM file of the TLS options into *pem; NULL path: nothing. */
static int read_pem(struct ctx *c, const char *name, const char *path, const char *marker,
		    char **pem, struct ms_err *err)
{
	const struct opt_def *d = find_long(name, strlen(name));
	char lab[600];
	label(c, d, c->src[d - ms_opt_rows], lab, sizeof(lab));
	size_t len;
	int rc = read_file(path, 1u << 20, pem, &len);
	if (rc == -ENOMEM)
		return ms_err_set(err, rc, "%s: out of memory", lab);
	if (rc == -EFBIG)
		return ms_err_set(err, -EINVAL, "%s: \"%s\" is larger than 1 MiB", lab, path);
	if (rc)
		return ms_err_set(err, -ENOENT, "%s: cannot read \"%s\": %s", lab, path, strerror(-rc));
	if (strlen(*pem) != len || !strstr(*pem, marker))
		return ms_err_set(err, -EINVAL, "%s: \"%s\" is not PEM (no \"%s\" line)", lab, path,
				  marker);
	return 0;
}

/* --tls-*: the certificate and the key both or neither; the password and
 * the priorities only with them; the files read. */
static int check_tls(struct ctx *c, struct ms_err *err)
{
	struct ms_serve_options *o = c->o;
	static const char *const names[] = {"tls-cert", "tls-key", "tls-key-password",
					    "tls-priorities"};
	char *const vals[] = {o->tls_cert, o->tls_key, o->tls_key_password, o->tls_priorities};
	char lab[600];
	for (int i = 0; i < 4; i++) {
		const struct opt_def *d = find_long(names[i], strlen(names[i]));
		label(c, d, c->src[d - ms_opt_rows], lab, sizeof(lab));
		if (i < 2 && vals[i] && !vals[1 - i])
			return ms_err_set(err, -EINVAL, "%s: needs --%s too (give both or neither)", lab,
					  names[1 - i]);
		if (i >= 2 && vals[i] && !o->tls_cert)
			return ms_err_set(err, -EINVAL, "%s: only applies with --tls-cert and --tls-key",
					  lab);
	}
	if (!o->tls_cert)
		return 0;
	int rc = read_pem(c, "tls-cert", o->tls_cert, "-----BEGIN CERTIFICATE-----",
			  &o->tls_cert_pem, err);
	if (!rc)
		rc = read_pem(c, "tls-key", o->tls_key, "PRIVATE KEY-----", &o->tls_key_pem, err);
	return rc;
}

int ms_serve_options_parse(struct ms_serve_options *o, int argc, char *const *argv,
			   char *const *envp, struct ms_err *err)
{
	memset(o, 0, sizeof(*o));
	struct ctx c = {.o = o};
	char lab[600];
	int n_flags = 0, rc;
	struct flag *flags = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*flags));
	if (!flags)
		return ms_err_set(err, -ENOMEM, "options: out of memory");
	rc = scan_argv(argc, argv, flags, &n_flags, err);
	if (rc)
		goto out;

	/* defaults */
	for (int i = 0; i < ms_opt_n_rows && !rc; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		if (d->def && ms_opt_in(d, MS_CLI_SERVE))
			rc = ms_opt_set_text(o, d, d->def, label(&c, d, SRC_DEFAULT, lab, sizeof(lab)),
					     err);
	}
	if (rc)
		goto out;

	/* the config file: the last --config, else $MOESERVE_CONFIG */
	const char *cfg_from = "MOESERVE_CONFIG";
	c.config_path = ms_opt_env_get(envp, "MOESERVE_CONFIG", false);
	for (int i = 0; i < n_flags; i++)
		if (!flags[i].d) {
			if (!*flags[i].value) {
				rc = ms_err_set(err, -EINVAL, "--config: must not be empty");
				goto out;
			}
			c.config_path = flags[i].value;
			cfg_from = "--config";
		}
	if (c.config_path) {
		rc = load_config_file(&c, cfg_from, err);
		if (rc)
			goto out;
		o->config = strdup(c.config_path);
		if (!o->config) {
			rc = ms_err_set(err, -ENOMEM, "options: out of memory");
			goto out;
		}
	}

	/* environment */
	for (int i = 0; i < ms_opt_n_rows && !rc; i++) {
		char name[64];
		if (!ms_opt_in(&ms_opt_rows[i], MS_CLI_SERVE))
			continue;
		ms_opt_env_name(&ms_opt_rows[i], name, sizeof(name));
		const char *v = ms_opt_env_get(envp, name, false);
		if (v) {
			rc = ms_opt_set_text(o, &ms_opt_rows[i], v, name, err);
			c.src[i] = SRC_ENV;
		}
	}
	if (rc)
		goto out;

	/* flags, in order: a repeated flag's last value wins */
	for (int i = 0; i < n_flags && !rc; i++) {
		const struct opt_def *d = flags[i].d;
		if (!d)
			continue;
		c.short_used[d - ms_opt_rows] = flags[i].is_short;
		c.src[d - ms_opt_rows] = SRC_FLAG;
		rc = ms_opt_set_text(o, d, flags[i].value, label(&c, d, SRC_FLAG, lab, sizeof(lab)), err);
	}
	if (rc)
		goto out;

	rc = check_api_keys(&c, err);
	if (!rc)
		rc = check_tls(&c, err);
out:
	free(flags);
	if (rc)
		ms_serve_options_free(o);
	return rc;
}

void ms_opt_free_strings(void *o, size_t from, size_t to)
{
	for (int i = 0; i < ms_opt_n_rows; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		if (d->type == T_STR && d->off >= from && d->off < to) {
			char **p = (char **)(void *)((char *)o + d->off);
			free(*p);
			*p = NULL;  /* two commands' rows may share a field */
		}
	}
}

void ms_serve_options_free(struct ms_serve_options *o)
{
	if (!o)
		return;
	ms_opt_free_strings(o, 0, sizeof(*o));
	free(o->config);
	if (o->tls_key_pem)
		explicit_bzero(o->tls_key_pem, strlen(o->tls_key_pem));
	free(o->tls_cert_pem);
	free(o->tls_key_pem);
	memset(o, 0, sizeof(*o));
}
