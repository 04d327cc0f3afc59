/*
 * options.c: `moeserve serve` configuration from flags, MOESERVE_*
 * environment variables, a JSON config file and defaults (see options.h).
 *
 * One table, serve_opts[], drives everything: the flag, environment and JSON
 * names, the type and range checks, the default and the --help text. To add
 * an option: add its field to struct ms_serve_options, then one row here
 * (name with dashes, type, field, range or choices, default as text, help);
 * flags, environment, config file, defaults and --help follow from the row.
 *
 * argv is walked by hand (no getopt), so parsing keeps no global state.
 */
#include "options.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "ms-json.h"
#include "ms-strbuf.h"

/* ---- the option table ---- */

enum opt_type {
	T_STR,    /* char *, owned, non-empty */
	T_INT,    /* int in [lo, hi] */
	T_I64,    /* int64_t in [lo, hi] */
	T_SIZE,   /* uint64_t bytes in [lo, hi]; text may carry K/M/G/T */
	T_BOOL,   /* bool */
	T_ENUM,   /* an enum stored as int: the index of the value in choices */
};

struct opt_def {
	const char *name;             /* flag name: --name; env MOESERVE_NAME; JSON "name" (dashes as _) */
	char short_name;              /* -x, or 0 */
	enum opt_type type;
	size_t off;                   /* of the field in struct ms_serve_options */
	int64_t lo, hi;               /* T_INT, T_I64, T_SIZE */
	const char *const *choices;   /* T_ENUM: NULL-terminated, in the enum's order */
	const char *def;              /* default, parsed like a flag's value; NULL: unset */
	const char *shown;            /* default as --help shows it, when not def */
	const char *metavar;          /* --help: --name METAVAR (none for T_BOOL) */
	const char *help;             /* --help: what it does; '\n' continues the line */
};

static const char *const log_formats[] = {"text", "json", NULL};
static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};
static const char *const numa_modes[] = {"auto", "off", "interleave", NULL};
static const char *const kv_dtypes[] = {"auto", "f32", "bf16", "fp8", NULL};
static const char *const dense_modes[] = {"auto", "bf16", "int8", NULL};
static const char *const attn_products[] = {"auto", "f32", "bf16", NULL};

_Static_assert(sizeof(enum ms_log_format) == sizeof(int), "enums are stored through int *");
_Static_assert(sizeof(enum ms_log_level) == sizeof(int), "enums are stored through int *");
_Static_assert(sizeof(enum ms_numa_mode) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_NUMA_AUTO == 0 && MS_NUMA_OFF == 1 && MS_NUMA_INTERLEAVE == 2,
	       "numa_modes[] follows enum ms_numa_mode");
_Static_assert(sizeof(enum ms_serve_kv) == sizeof(int), "enums are stored through int *");
_Static_assert(sizeof(enum ms_dense_mode) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_DENSE_AUTO == 0 && MS_DENSE_KEEP == 1 && MS_DENSE_INT8 == 2,
	       "dense_modes[] follows enum ms_dense_mode");
_Static_assert(sizeof(enum ms_attn_products) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_ATTN_PRODUCTS_AUTO == 0 && MS_ATTN_PRODUCTS_F32 == 1 && MS_ATTN_PRODUCTS_BF16 == 2,
	       "attn_products[] follows enum ms_attn_products");
_Static_assert(MS_SERVE_KV_AUTO == 0 && MS_SERVE_KV_F32 == 1 && MS_SERVE_KV_BF16 == 2 &&
	       MS_SERVE_KV_FP8 == 3,
	       "kv_dtypes[] follows enum ms_serve_kv");

#define F(field) offsetof(struct ms_serve_options, field)
#define KIB 1024LL
#define GIB (1024LL * 1024 * 1024)

static const struct opt_def serve_opts[] = {
	{"model", 'm', T_STR, F(model), 0, 0, NULL, NULL, "the built-in model", "DIR",
	 "checkpoint folder"},
	{"served-model-name", 0, T_STR, F(served_model_name), 0, 0, NULL, NULL,
	 "the model folder's name", "NAME", "model name in the API and in metrics"},
	{"host", 0, T_STR, F(host), 0, 0, NULL, "127.0.0.1", NULL, "ADDR",
	 "address to listen on (0.0.0.0: all IPv4)"},
	{"port", 0, T_INT, F(port), 1, 65535, NULL, "8080", NULL, "N", "TCP port"},
	{"api-key", 0, T_STR, F(api_key), 0, 0, NULL, NULL, "none (no authentication)", "KEY",
	 "require \"Authorization: Bearer KEY\" on /v1/*\nand /tokenize, /detokenize (/health, /live,\n"
	 "/metrics stay open)"},
	{"api-key-file", 0, T_STR, F(api_key_file), 0, 0, NULL, NULL, "none", "FILE",
	 "API keys, one a line (blank and # lines\nignored), each accepted (with --api-key's);\n"
	 "SIGHUP rereads it (a bad file keeps the old\nkeys)"},
	{"tls-cert", 0, T_STR, F(tls_cert), 0, 0, NULL, NULL, "none (plain HTTP)", "FILE",
	 "PEM certificate (chain): serve HTTPS only\n(with --tls-key; both reread on SIGHUP)"},
	{"tls-key", 0, T_STR, F(tls_key), 0, 0, NULL, NULL, "none", "FILE",
	 "PEM private key of --tls-cert"},
	{"tls-key-password", 0, T_STR, F(tls_key_password), 0, 0, NULL, NULL, "none", "PASS",
	 "passphrase of an encrypted --tls-key (prefer\nthe environment variable to the flag)"},
	{"tls-priorities", 0, T_STR, F(tls_priorities), 0, 0, NULL, NULL, "NORMAL", "STR",
	 "GnuTLS priority string (ciphers, versions),\ne.g. SECURE256:-VERS-TLS1.2"},
	{"max-connections", 0, T_INT, F(max_connections), 1, 65536, NULL, "1024", NULL, "N",
	 "open connections; more wait in the kernel's\nlisten queue until one closes"},
	{"max-connections-per-ip", 0, T_INT, F(max_connections_per_ip), 0, 65536, NULL, "0",
	 "0 (no limit)", "N", "open connections from one address; more are\nclosed at once"},
	{"max-body-bytes", 0, T_SIZE, F(max_body_bytes), KIB, GIB, NULL, "1M", NULL, "SIZE",
	 "largest request body (bigger: 413), e.g. 4M"},
	{"cors-origin", 0, T_STR, F(cors_origin), 0, 0, NULL, NULL, "none (CORS off)", "ORIGIN",
	 "allowed browser origin, or * for any"},
	{"keepalive-s", 0, T_INT, F(keepalive_s), 0, 3600, NULL, "10", NULL, "N",
	 "SSE comment after N idle seconds (0: never)"},
	{"shutdown-timeout-s", 0, T_INT, F(shutdown_timeout_s), 0, 86400, NULL, "30", NULL, "N",
	 "on SIGTERM, seconds running requests may take"},
	{"responses-store", 0, T_INT, F(responses_store), 0, 1000000, NULL, "1000", NULL, "N",
	 "/v1/responses kept in memory for\nprevious_response_id and GET (least recently\nused "
	 "evicted; 0: none)"},
	{"grammar-cache", 0, T_INT, F(grammar_cache), 1, 100000, NULL, "64", NULL, "N",
	 "structured outputs: compiled grammars kept,\nwith their token masks (least recently used\n"
	 "evicted)"},
	{"log-format", 0, T_ENUM, F(log_format), 0, 0, log_formats, "text", NULL, "FMT",
	 "text or json (one object per line)"},
	{"log-level", 0, T_ENUM, F(log_level), 0, 0, log_levels, "info", NULL, "LEVEL",
	 "error, warn, info or debug"},
	{"backend", 0, T_STR, F(backend), 0, 0, NULL, "cpu", NULL, "NAME",
	 "compute backend: cpu, rocm (a GPU), rocm-sim\n(the GPU kernels on a host model; tests)"},
	{"device", 0, T_INT, F(device), 0, 255, NULL, "0", NULL, "N",
	 "which GPU, with --backend rocm (one per daemon)"},
	{"threads", 0, T_INT, F(threads), 0, 1024, NULL, "0", "0 (one per available CPU)", "N",
	 "worker threads"},
	{"kernels", 0, T_STR, F(kernels), 0, 0, NULL, "auto", NULL, "SET", "kernel set (see below)"},
	{"exact", 0, T_BOOL, F(exact), 0, 0, NULL, "false", NULL, NULL,
	 "only kernels that keep fp32 activations\n(no int8/bf16 rounding of activations)"},
	{"dense", 0, T_ENUM, F(dense), 0, 0, dense_modes, "auto", NULL, "TYPE",
	 "attention projections and lm_head: int8 (a\nscale per 32 columns, requantized at load)\nor bf16 (as stored); auto: int8 on the CPU\nunless --exact"},
	{"dense-int8", 0, T_BOOL, F(dense_int8), 0, 0, NULL, "false", NULL, NULL,
	 "the same as --dense int8"},
	{"numa", 0, T_ENUM, F(numa), 0, 0, numa_modes, "auto", NULL, "MODE",
	 "auto (interleave weights over several NUMA\nnodes), off or interleave"},
	{"kv-dtype", 0, T_ENUM, F(kv_dtype), 0, 0, kv_dtypes, "auto", NULL, "TYPE",
	 "how the KV cache stores keys and values: bf16\n(attention accumulates in fp32), f32 (twice the\nbytes), fp8 (e4m3, a scale per position and\nkv head: about half bf16's bytes), auto: bf16,\nf32 with --exact"},
	{"attn-products", 0, T_ENUM, F(attn_products), 0, 0, attn_products, "auto", NULL, "P",
	 "on a bf16 cache, bf16: q and the probabilities\nrounded to bf16 before their products (as GPU\nflash attention; 2x the multiply-adds with\nAVX512-BF16), or f32; auto: bf16 where the CPU\nhas AVX512-BF16, unless --exact"},
	{"kv-cache-bytes", 0, T_SIZE, F(kv_cache_bytes), 0, 1024 * 1024 * GIB, NULL, "0",
	 "0 (four full contexts)", "SIZE", "KV-cache size, e.g. 8G"},
	{"max-queue", 0, T_INT, F(max_queue), 1, 1000000, NULL, "256", NULL, "N",
	 "waiting requests beyond which new ones get 429"},
	{"max-running", 0, T_INT, F(max_running), 1, 4096, NULL, "64", NULL, "N",
	 "requests decoding together"},
	{"max-batch-tokens", 0, T_I64, F(max_batch_tokens), 1, 1 << 20, NULL, "256", NULL, "N",
	 "tokens per forward pass (decodes + prefill)"},
	{"ctx-size", 0, T_I64, F(ctx_size), 0, 1 << 24, NULL, "0",
	 "0 (the model's, at most 8192)", "N", "context per request (prompt + generated)"},
	{"max-tokens", 0, T_I64, F(max_tokens), 0, 1 << 24, NULL, "0",
	 "0 (the rest of the context)", "N", "tokens a chat or responses request may generate\n"
	 "when it sets no limit (agents such as Codex\nsend none)"},
	{"no-prefix-cache", 0, T_BOOL, F(no_prefix_cache), 0, 0, NULL, "false", NULL, NULL,
	 "turn prefix-cache reuse off"},
};

#define N_OPTS ((int)(sizeof(serve_opts) / sizeof(serve_opts[0])))

/* ---- names and sources ---- */

enum source { SRC_DEFAULT, SRC_FILE, SRC_ENV, SRC_FLAG };

/* Per-parse context: where each option's value came from, for messages. */
struct ctx {
	struct ms_serve_options *o;
	const char *config_path;      /* the config file's path, while it is read */
	enum source src[N_OPTS];
	bool short_used[N_OPTS];      /* the flag given was -x */
};

/* "max-body-bytes" -> "MOESERVE_MAX_BODY_BYTES" / "max_body_bytes". */
static void env_name(const struct opt_def *d, char *o, size_t n)
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
		if (c->short_used[d - serve_opts])
			snprintf(o, n, "-%c", d->short_name);
		else
			snprintf(o, n, "--%s", d->name);
		break;
	case SRC_ENV:
		env_name(d, o, n);
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

static bool parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || isspace((unsigned char)*s))
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

static void list_choices(const char *const *ch, char *o, size_t n)
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
static int set_number(struct ms_serve_options *o, const struct opt_def *d, int64_t x,
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
static int set_text(struct ms_serve_options *o, const struct opt_def *d, const char *v,
		    const char *lab, struct ms_err *err)
{
	char *field = (char *)o + d->off;
	switch (d->type) {
	case T_STR: {
		if (!*v)
			return ms_err_set(err, -EINVAL, "%s: must not be empty", lab);
		if (d->off == F(backend) && !known_name(ms_backend_names(), v))
			return ms_err_set(err, -EINVAL, "%s: \"%s\" is not a backend (use %s)", lab, v,
					  ms_backend_names());
		if (d->off == F(kernels) && !known_name(ms_cpu_kernel_sets, v))
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
		if (!parse_i64(v, &x))
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
		list_choices(d->choices, ch, sizeof(ch));
		return ms_err_set(err, -EINVAL, "%s: \"%s\" is not %s", lab, v, ch);
	}
	return ms_err_set(err, -EINVAL, "%s: unknown option type", lab);
}

/* Store a value given as JSON. Strings go through set_text (so sizes may
 * be "8G"); integers must be JSON numbers with no fraction. */
static int set_json(struct ms_serve_options *o, const struct opt_def *d, const cJSON *v,
		    const char *lab, struct ms_err *err)
{
	static const char *const type_names[] = {
		[T_STR] = "a string", [T_INT] = "an integer", [T_I64] = "an integer",
		[T_SIZE] = "a size (integer or string such as \"4M\")",
		[T_BOOL] = "true or false", [T_ENUM] = "a string",
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
		return set_text(o, d, v->valuestring, lab, err);
	case T_SIZE:
		if (cJSON_IsString(v))
			return set_text(o, d, v->valuestring, lab, err);
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

static const struct opt_def *find_long(const char *name, size_t n)
{
	for (int i = 0; i < N_OPTS; i++)
		if (strlen(serve_opts[i].name) == n && !strncmp(serve_opts[i].name, name, n))
			return &serve_opts[i];
	return NULL;
}

static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (char *const *e = envp; e && *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return (*e)[n + 1] ? *e + n + 1 : NULL;  /* empty: unset */
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
		for (int i = 0; i < N_OPTS && !d; i++) {
			json_name(&serve_opts[i], key, sizeof(key));
			if (!strcmp(key, it->string))
				d = &serve_opts[i];
		}
		if (!d) {
			rc = ms_err_set(err, -EINVAL, "config file %s: unknown key \"%s\" (see moeserve "
					"serve --help)", c->config_path, it->string);
			break;
		}
		rc = set_json(c->o, d, it, label(c, d, SRC_FILE, lab, sizeof(lab)), err);
		c->src[d - serve_opts] = SRC_FILE;
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
			for (int k = 0; k < N_OPTS && !f.d && !a[2]; k++)
				if (serve_opts[k].short_name == a[1])
					f.d = &serve_opts[k];
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
				  label(c, dk, c->src[dk - serve_opts], lab, sizeof(lab)), why);
	if (!o->api_key_file)
		return 0;
	struct ms_keyset *ks;
	/* with --api-key's key, a file without keys is fine: they may come
	 * later, on SIGHUP */
	int rc = ms_keyset_load(o->api_key, o->api_key_file, &ks, err);
	ms_keyset_free(ks);
	if (rc)
		ms_err_prefix(err, "%s: ", label(c, df, c->src[df - serve_opts], lab, sizeof(lab)));
	return rc;
}

/* A PEM file of the TLS options into *pem; NULL path: nothing. */
static int read_pem(struct ctx *c, const char *name, const char *path, const char *marker,
		    char **pem, struct ms_err *err)
{
	const struct opt_def *d = find_long(name, strlen(name));
	char lab[600];
	label(c, d, c->src[d - serve_opts], lab, sizeof(lab));
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
		label(c, d, c->src[d - serve_opts], lab, sizeof(lab));
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
	for (int i = 0; i < N_OPTS && !rc; i++)
		if (serve_opts[i].def)
			rc = set_text(o, &serve_opts[i], serve_opts[i].def,
				      label(&c, &serve_opts[i], SRC_DEFAULT, lab, sizeof(lab)), err);
	if (rc)
		goto out;

	/* the config file: the last --config, else $MOESERVE_CONFIG */
	const char *cfg_from = "MOESERVE_CONFIG";
	c.config_path = env_get(envp, "MOESERVE_CONFIG");
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
	for (int i = 0; i < N_OPTS && !rc; i++) {
		char name[64];
		env_name(&serve_opts[i], name, sizeof(name));
		const char *v = env_get(envp, name);
		if (v) {
			rc = set_text(o, &serve_opts[i], v, name, err);
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
		c.short_used[d - serve_opts] = flags[i].is_short;
		c.src[d - serve_opts] = SRC_FLAG;
		rc = set_text(o, d, flags[i].value, label(&c, d, SRC_FLAG, lab, sizeof(lab)), err);
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

void ms_serve_options_free(struct ms_serve_options *o)
{
	if (!o)
		return;
	for (int i = 0; i < N_OPTS; i++)
		if (serve_opts[i].type == T_STR)
			free(*(char **)(void *)((char *)o + serve_opts[i].off));
	free(o->config);
	if (o->tls_key_pem)
		explicit_bzero(o->tls_key_pem, strlen(o->tls_key_pem));
	free(o->tls_cert_pem);
	free(o->tls_key_pem);
	memset(o, 0, sizeof(*o));
}

/* ---- help ---- */

/* Built once, kept for the process (the pointer is the same every call). */
static struct ms_strbuf help_buf;
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

static void help_build(void)
{
	struct ms_strbuf *b = &help_buf;
	ms_strbuf_printf(b,
	    "Usage: moeserve serve [OPTIONS]\n\n"
	    "Serve a model over HTTP: the OpenAI-compatible API, /health and /metrics.\n\n"
	    "Every option can also be set by the environment variable shown under it,\n"
	    "or by a JSON config file. Precedence, highest first: flag > environment\n"
	    "variable > config file > default. The config file (--config FILE, or\n"
	    "$MOESERVE_CONFIG) holds one object whose keys are the option names with\n"
	    "underscores: {\"port\": 9000, \"api_key\": \"...\", \"max_body_bytes\": \"4M\"}.\n"
	    "Unknown keys are errors. SIZE is bytes or a number with K, M, G or T.\n\n"
	    "  %-28s%s\n  %-28senv: MOESERVE_CONFIG\n  %-28sdefault: none\n", "--config FILE",
	    "JSON config file", "", "");
	for (int i = 0; i < N_OPTS; i++) {
		const struct opt_def *d = &serve_opts[i];
		char flag[64], env[64];
		int k = d->short_name ? snprintf(flag, sizeof(flag), "-%c, ", d->short_name) : 0;
		snprintf(flag + k, sizeof(flag) - (size_t)k, "--%s%s%s", d->name, d->metavar ? " " : "",
			 d->metavar ? d->metavar : "");
		env_name(d, env, sizeof(env));
		const char *def = d->shown ? d->shown : d->def ? d->def : "none";
		ms_strbuf_printf(b, "  %-28s", flag);
		/* a '\n' in the help continues it under the same column */
		for (const char *p = d->help; *p; p++) {
			ms_strbuf_add(b, p, 1);
			if (*p == '\n')
				ms_strbuf_printf(b, "  %-28s", "");
		}
		ms_strbuf_printf(b, "\n  %-28senv: %s\n  %-28sdefault: %s\n", "", env, "", def);
	}
	ms_strbuf_printf(b, "  %-28s%s\n\n", "-h, --help", "this help");
	ms_strbuf_printf(b, "Kernel sets: %s.\n", ms_cpu_kernel_sets);
}

const char *ms_serve_options_help(void)
{
	pthread_once(&help_once, help_build);
	const char *h = ms_strbuf_cstr(&help_buf);
	return h ? h : "moeserve serve: out of memory for the --help text\n";
}

/* ---- enum names ---- */

const char *ms_log_format_name(enum ms_log_format f)
{
	return (unsigned)f < 2 ? log_formats[f] : "?";
}

const char *ms_log_level_name(enum ms_log_level l)
{
	return (unsigned)l < 4 ? log_levels[l] : "?";
}

enum ms_kv_dtype ms_serve_kv_dtype(const struct ms_serve_options *o)
{
	switch (o->kv_dtype) {
	case MS_SERVE_KV_F32: return MS_KV_F32;
	case MS_SERVE_KV_BF16: return MS_KV_BF16;
	case MS_SERVE_KV_FP8: return MS_KV_FP8;
	default: return ms_kv_dtype_auto(o->exact);
	}
}

const char *ms_serve_numa_name(enum ms_numa_mode n)
{
	return (unsigned)n < 3 ? numa_modes[n] : "?";
}
