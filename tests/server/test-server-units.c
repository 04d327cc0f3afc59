/*
 * test-server-units.c: the HTTP server's pure parts, without a socket.
 *
 * metrics: exact lines for a small scenario (labels escaped, histogram
 * buckets cumulative with +Inf == _count, _sum; speculative decoding's
 * counters by draft position), every rendering accepted by a small
 * exposition-format validator (itself checked on bad inputs), bounded
 * finish reasons, several writer threads while another renders.
 * options: defaults, the precedence flags > environment > config file >
 * defaults (--speculative among them), every refusal naming the option and
 * its source, --help.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "agent.h"
#include "http.h"
#include "kv-plan.h"
#include "metrics.h"
#include "options.h"

/* ==== a validator for the text exposition format 0.0.4 ==== */

struct family {
	char name[128];
	char type[16];
};

struct validator {
	struct family fam[64];
	int n_fam;
	int cur;                /* family whose samples may follow, or -1 */
	char **series;          /* name{labels} seen, to refuse duplicates */
	int n_series;
	/* the histogram series being read */
	double last_le;
	double last_bucket;
	double inf_bucket;
	bool have_inf;
};

static bool name_char(char c, bool first, bool colon)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
	       (!first && c >= '0' && c <= '9');
}

/* A metric (colon allowed) or label name at *p; its length, 0 if none. */
static size_t scan_name(const char *p, bool colon)
{
	size_t n = 0;
	while (name_char(p[n], n == 0, colon))
		n++;
	return n;
}

static bool parse_value(const char *s, size_t n, double *v)
{
	char tmp[64];
	if (n == 0 || n >= sizeof(tmp))
		return false;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (!strcmp(tmp, "+Inf") || !strcmp(tmp, "Inf"))
		return *v = INFINITY, true;
	if (!strcmp(tmp, "-Inf"))
		return *v = -INFINITY, true;
	if (!strcmp(tmp, "NaN"))
		return *v = NAN, true;
	char *end;
	*v = strtod(tmp, &end);
	return *end == '\0' && (isfinite(*v));
}

static int find_family(struct validator *v, const char *name, size_t n)
{
	for (int i = 0; i < v->n_fam; i++)
		if (strlen(v->fam[i].name) == n && !strncmp(v->fam[i].name, name, n))
			return i;
	return -1;
}

static bool ends_with(const char *s, size_t n, const char *suffix, size_t *base)
{
	size_t k = strlen(suffix);
	if (n < k || strncmp(s + n - k, suffix, k))
		return false;
	*base = n - k;
	return true;
}

/* Say why (printf-style) and return false. */
static bool bad(char *why, size_t nwhy, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool bad(char *why, size_t nwhy, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, nwhy, fmt, ap);
	va_end(ap);
	return false;
}

#define BAD(...) bad(why, nwhy, __VA_ARGS__)

/* One sample line. */
static bool check_sample(struct validator *v, const char *line, char *why, size_t nwhy)
{
	size_t nl = scan_name(line, true);
	if (!nl)
		return BAD("no metric name: %s", line);
	const char *p = line + nl;
	char labels[1024] = "";
	size_t kl = 0;
	double le = NAN;
	bool has_le = false, has_model = false;
	if (*p == '{') {
		p++;
		while (*p != '}') {
			size_t ln = scan_name(p, false);
			if (!ln)
				return BAD("bad label name: %s", line);
			bool is_le = ln == 2 && !strncmp(p, "le", 2);
			bool is_model = ln == 10 && !strncmp(p, "model_name", 10);
			const char *lname = p;
			p += ln;
			if (*p++ != '=' || *p++ != '"')
				return BAD("label without =\"value\": %s", line);
			const char *val = p;
			while (*p != '"') {
				if (!*p)
					return BAD("unterminated label value: %s", line);
				if (*p == '\\') {
					if (p[1] != '\\' && p[1] != '"' && p[1] != 'n')
						return BAD("bad escape in a label value: %s", line);
					p++;
				} else if (*p == '\n') {
					return BAD("raw newline in a label value");
				}
				p++;
			}
			if (is_le) {
				if (!parse_value(val, (size_t)(p - val), &le))
					return BAD("le is not a number: %s", line);
				has_le = true;
			} else {
				kl += (size_t)snprintf(labels + kl, sizeof(labels) - kl, "%.*s,",
						       (int)(p - lname + 1), lname);
			}
			has_model |= is_model;
			p++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				return BAD("expected , or } after a label: %s", line);
		}
		p++;
	}
	if (*p++ != ' ')
		return BAD("no space before the value: %s", line);
	const char *val = p;
	while (*p && *p != ' ')
		p++;
	double x;
	if (!parse_value(val, (size_t)(p - val), &x))
		return BAD("bad sample value: %s", line);
	if (*p) {  /* an optional timestamp (an integer) */
		char *end;
		strtoll(p + 1, &end, 10);
		if (end == p + 1 || *end)
			return BAD("bad timestamp: %s", line);
	}
	if (!has_model)
		return BAD("sample without model_name: %s", line);

	/* which family: name itself, or a histogram's name_bucket/_sum/_count */
	size_t base = nl;
	const char *part = "";
	int f = find_family(v, line, nl);
	if (f < 0) {
		if (ends_with(line, nl, "_bucket", &base))
			part = "bucket";
		else if (ends_with(line, nl, "_count", &base))
			part = "count";
		else if (ends_with(line, nl, "_sum", &base))
			part = "sum";
		f = find_family(v, line, base);
		if (f < 0 || strcmp(v->fam[f].type, "histogram"))
			return BAD("sample of a family with no # TYPE: %s", line);
	} else if (!strcmp(v->fam[f].type, "histogram")) {
		return BAD("histogram sample without a suffix: %s", line);
	}
	if (f != v->cur)
		return BAD("sample away from its family's # TYPE: %s", line);
	if (!strcmp(v->fam[f].type, "counter") && !(x >= 0))
		return BAD("negative counter: %s", line);

	/* no series twice */
	char key[1400];
	snprintf(key, sizeof(key), "%.*s{%s%s%.17g}", (int)nl, line, labels, has_le ? "le=" : "",
		 has_le ? le : 0.0);
	for (int i = 0; i < v->n_series; i++)
		if (!strcmp(v->series[i], key))
			return BAD("duplicate series: %s", line);
	v->series = realloc(v->series, (size_t)(v->n_series + 1) * sizeof(char *));
	v->series[v->n_series++] = strdup(key);

	if (!strcmp(part, "bucket")) {
		if (!has_le)
			return BAD("bucket without le: %s", line);
		if (v->have_inf)
			return BAD("bucket after le=\"+Inf\": %s", line);
		if (!(le > v->last_le))
			return BAD("le not increasing: %s", line);
		if (x < v->last_bucket)
			return BAD("buckets not cumulative: %s", line);
		v->last_le = le;
		v->last_bucket = x;
		if (isinf(le)) {
			v->have_inf = true;
			v->inf_bucket = x;
		}
	} else if (!strcmp(part, "count")) {
		if (!v->have_inf)
			return BAD("_count before the le=\"+Inf\" bucket: %s", line);
		if (x != v->inf_bucket)
			return BAD("_count %g != +Inf bucket %g", x, v->inf_bucket);
	} else if (has_le) {
		return BAD("le outside a bucket: %s", line);
	}
	return true;
}

static void validator_free(struct validator *v)
{
	for (int i = 0; i < v->n_series; i++)
		free(v->series[i]);
	free(v->series);
}

/* Is text a valid exposition? Otherwise why says which line and why. */
static bool valid_exposition(const char *text, char *why, size_t nwhy)
{
	struct validator v = {.cur = -1};
	bool ok = true;
	size_t n = strlen(text);
	if (!n || text[n - 1] != '\n')
		return BAD("does not end with a newline");
	for (const char *line = text; ok && *line;) {
		const char *nl = strchr(line, '\n');
		char buf[2048];
		size_t len = (size_t)(nl - line);
		if (len >= sizeof(buf)) {
			ok = BAD("line too long");
			break;
		}
		memcpy(buf, line, len);
		buf[len] = '\0';
		line = nl + 1;
		if (!len) {
			ok = BAD("empty line");
		} else if (!strncmp(buf, "# HELP ", 7) || !strncmp(buf, "# TYPE ", 7)) {
			const char *p = buf + 7;
			size_t k = scan_name(p, true);
			if (!k || p[k] != ' ') {
				ok = BAD("bad name in: %s", buf);
				break;
			}
			const char *rest = p + k + 1;
			if (buf[2] == 'H') {
				for (const char *q = rest; *q && ok; q++)
					if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
						ok = BAD("bad escape in HELP: %s", buf);
					else if (*q == '\\')
						q++;
				continue;
			}
			if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
			    strcmp(rest, "summary") && strcmp(rest, "untyped")) {
				ok = BAD("bad type: %s", buf);
			} else if (find_family(&v, p, k) >= 0) {
				ok = BAD("second TYPE: %s", buf);
			} else if (v.n_fam == 64) {
				ok = BAD("too many families for the validator");
			} else {
				for (int i = 0; i < v.n_series && ok; i++)
					if (!strncmp(v.series[i], p, k))
						ok = BAD("TYPE after samples: %s", buf);
				snprintf(v.fam[v.n_fam].name, sizeof(v.fam[0].name), "%.*s", (int)k, p);
				snprintf(v.fam[v.n_fam].type, sizeof(v.fam[0].type), "%s", rest);
				v.cur = v.n_fam++;
				v.last_le = -INFINITY;
				v.last_bucket = 0;
				v.have_inf = false;
			}
		} else if (buf[0] == '#') {
			continue;  /* a comment */
		} else {
			ok = check_sample(&v, buf, why, nwhy);
		}
	}
	for (int i = 0; ok && i < v.n_fam; i++)
		if (!strcmp(v.fam[i].type, "histogram")) {
			/* every histogram ended with +Inf and _count: checked per family by
			 * looking for its _count series */
			char want[160];
			snprintf(want, sizeof(want), "%s_count{", v.fam[i].name);
			bool seen = false;
			for (int s = 0; s < v.n_series; s++)
				seen |= !strncmp(v.series[s], want, strlen(want));
			if (!seen)
				ok = BAD("histogram %s has no _count", v.fam[i].name);
		}
	validator_free(&v);
	return ok;
}

START_TEST(validator_refuses)
{
	char why[256];
	static const char *const bad[] = {
		"# TYPE a counter\na{model_name=\"x\"} 1",                     /* no final newline */
		"a{model_name=\"x\"} 1\n",                                       /* no TYPE */
		"# TYPE a counter\na{model_name=\"x} 1\n",                       /* unterminated */
		"# TYPE a counter\na{model_name=\"x\\t\"} 1\n",                  /* bad escape */
		"# TYPE a counter\na{model_name=\"x\"} one\n",                   /* bad value */
		"# TYPE a counter\na{model_name=\"x\"} 1\na{model_name=\"x\"} 2\n", /* duplicate */
		"# TYPE 1a counter\n",                                           /* bad name */
		"# TYPE h histogram\nh_bucket{model_name=\"x\",le=\"1\"} 2\n"
		"h_bucket{model_name=\"x\",le=\"+Inf\"} 1\nh_sum{model_name=\"x\"} 1\n"
		"h_count{model_name=\"x\"} 1\n",                                 /* not cumulative */
		"# TYPE h histogram\nh_bucket{model_name=\"x\",le=\"+Inf\"} 2\n"
		"h_sum{model_name=\"x\"} 1\nh_count{model_name=\"x\"} 3\n",      /* count != +Inf */
		"# TYPE h histogram\nh_bucket{model_name=\"x\",le=\"1\"} 2\n"
		"h_sum{model_name=\"x\"} 1\nh_count{model_name=\"x\"} 2\n",      /* no +Inf */
		"# TYPE a gauge\na 1\n",                                         /* no model_name */
		"# TYPE a gauge\n\na{model_name=\"x\"} 1\n",                     /* empty line */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!valid_exposition(bad[i], why, sizeof(why)), "accepted bad input %zu", i);
	ck_assert_msg(valid_exposition("# HELP a An \\\\ a.\n# TYPE a gauge\na{model_name=\"x\\\"\"} 1 123\n",
				       why, sizeof(why)), "%s", why);
}
END_TEST

/* ==== metrics ==== */

/* text has this exact line. */
#define HAS_LINE(text, line)                                                                    \
	do {                                                                                    \
		char want_[512];                                                                \
		snprintf(want_, sizeof(want_), "\n%s\n", (line));                               \
		ck_assert_msg(strstr((text), want_), "missing line: %s", (line));              \
	} while (0)

/* The model name a"b\c<newline>d, as a label value. */
#define ML "model_name=\"a\\\"b\\\\c\\nd\""

static char *render(struct ms_metrics *m, const struct ms_engine_stats *st)
{
	char *out, why[512];
	size_t len;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_metrics_render(m, st, &out, &len, &err), 0);
	ck_assert_uint_eq(strlen(out), len);
	ck_assert_msg(valid_exposition(out, why, sizeof(why)), "invalid exposition: %s", why);
	return out;
}

START_TEST(metrics_exact)
{
	struct ms_metrics *m;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_metrics_init(&m, "a\"b\\c\nd", &err), 0);

	ms_metrics_set_loaded(m, true);
	ms_metrics_http(m, "GET", 200);
	ms_metrics_http(m, "GET", 200);
	ms_metrics_http(m, "POST", 404);
	ms_metrics_http(m, "BREW", 418);
	ms_metrics_http(m, "GET", 1000);
	ms_metrics_harmony_error(m, 3);
	/* times are binary fractions so that sums print exactly */
	ms_metrics_request_finished(m, "stop", 0.375, 0.0078125, 0.046875, 7, 2, 3);
	ms_metrics_request_finished(m, "length", 9000, -1, -1, 0, 0, 150);  /* no queue time, no TTFT */
	ms_metrics_request_finished(m, "we\"ird", NAN, 0.5, INFINITY, -1, 0, -1);
	ms_metrics_inter_token(m, 0.015625);
	ms_metrics_inter_token(m, 0.015625);
	ms_metrics_inter_token(m, 100);
	ms_metrics_set_grammars(m, &(struct ms_metrics_grammars){.compiles = 1});
	ms_metrics_set_grammars(m, &(struct ms_metrics_grammars){.compiles = 3, .hits = 5,
								 .compile_s = 0.25});
	ms_metrics_set_transport(m, true, 2);
	ms_metrics_auth_failure(m);
	ms_metrics_auth_failure(m);
	ms_metrics_key_reload(m, true, 3);
	ms_metrics_key_reload(m, false, 0);  /* the old set (3 keys) stays */
	ms_metrics_tls_cert(m, 1798761600);  /* 2027-01-01 */
	ms_metrics_tls_reload(m, false);
	ms_metrics_tls_reload(m, true);
	ms_metrics_tls_reload(m, true);
	ms_metrics_tls_cert(m, 1830297600);  /* the renewed one: 2028-01-01 */
	ms_metrics_set_connections(m, 7);

	struct ms_engine_stats st = {
		.waiting = 1, .running = 2, .kv_pages = 64, .kv_pages_held = 16, .kv_usage = 0.25,
		.prompt_tokens = 100, .generation_tokens = 50, .cached_tokens = 20,
		.spec = {.drafts = 9, .draft_tokens = 40, .accepted = 12, .accepted_at = {6, 4, 0, 2},
			 .cache_bytes = 1 << 20, .index_bytes = 4096},
	};
	char *t = render(m, &st);
	ck_assert_msg(!strncmp(t, "# HELP moeserve:model_loaded ", 29), "starts with: %.60s", t);
	HAS_LINE(t, "# TYPE moeserve:model_loaded gauge");
	HAS_LINE(t, "moeserve:model_loaded{" ML "} 1");
	HAS_LINE(t, "moeserve:num_requests_running{" ML "} 2");
	HAS_LINE(t, "moeserve:num_requests_waiting{" ML "} 1");
	HAS_LINE(t, "moeserve:kv_cache_usage_perc{" ML "} 0.25");
	HAS_LINE(t, "moeserve:kv_cache_pages{" ML "} 64");
	HAS_LINE(t, "# TYPE moeserve:prompt_tokens_total counter");
	HAS_LINE(t, "moeserve:prompt_tokens_total{" ML "} 100");
	HAS_LINE(t, "moeserve:prompt_tokens_cached_total{" ML "} 20");
	HAS_LINE(t, "moeserve:generation_tokens_total{" ML "} 50");
	HAS_LINE(t, "moeserve:harmony_parse_errors_total{" ML "} 3");
	/* speculative decoding: vLLM's names and position label; positions up
	 * to the last that counted, a zero among them kept */
	HAS_LINE(t, "# TYPE moeserve:spec_decode_num_drafts_total counter");
	HAS_LINE(t, "moeserve:spec_decode_num_drafts_total{" ML "} 9");
	HAS_LINE(t, "moeserve:spec_decode_num_draft_tokens_total{" ML "} 40");
	HAS_LINE(t, "moeserve:spec_decode_num_accepted_tokens_total{" ML "} 12");
	HAS_LINE(t, "# TYPE moeserve:spec_decode_num_accepted_tokens_per_pos_total counter");
	HAS_LINE(t, "moeserve:spec_decode_num_accepted_tokens_per_pos_total{" ML ",position=\"0\"} 6");
	HAS_LINE(t, "moeserve:spec_decode_num_accepted_tokens_per_pos_total{" ML ",position=\"1\"} 4");
	HAS_LINE(t, "moeserve:spec_decode_num_accepted_tokens_per_pos_total{" ML ",position=\"2\"} 0");
	HAS_LINE(t, "moeserve:spec_decode_num_accepted_tokens_per_pos_total{" ML ",position=\"3\"} 2");
	ck_assert_ptr_null(strstr(t, "position=\"4\""));
	HAS_LINE(t, "# TYPE moeserve:spec_decode_cache_bytes gauge");
	HAS_LINE(t, "moeserve:spec_decode_cache_bytes{" ML "} 1048576");
	HAS_LINE(t, "# TYPE moeserve:spec_decode_index_bytes gauge");
	HAS_LINE(t, "moeserve:spec_decode_index_bytes{" ML "} 4096");
	HAS_LINE(t, "# TYPE moeserve:request_success_total counter");
	HAS_LINE(t, "moeserve:request_success_total{" ML ",finished_reason=\"stop\"} 1");
	HAS_LINE(t, "moeserve:request_success_total{" ML ",finished_reason=\"length\"} 1");
	HAS_LINE(t, "moeserve:request_success_total{" ML ",finished_reason=\"tool_calls\"} 0");
	HAS_LINE(t, "moeserve:request_success_total{" ML ",finished_reason=\"cancelled\"} 0");
	HAS_LINE(t, "moeserve:request_success_total{" ML ",finished_reason=\"error\"} 0");
	HAS_LINE(t, "moeserve:request_success_total{" ML ",finished_reason=\"we\\\"ird\"} 1");
	HAS_LINE(t, "moeserve:http_requests_total{" ML ",method=\"GET\",status=\"200\"} 2");
	HAS_LINE(t, "moeserve:http_requests_total{" ML ",method=\"POST\",status=\"404\"} 1");
	HAS_LINE(t, "moeserve:http_requests_total{" ML ",method=\"other\",status=\"418\"} 1");
	HAS_LINE(t, "moeserve:http_requests_total{" ML ",method=\"GET\",status=\"0\"} 1");

	/* the grammar cache, as the last scrape set it */
	HAS_LINE(t, "moeserve:structured_grammar_compiles_total{" ML "} 3");
	HAS_LINE(t, "moeserve:structured_grammar_cache_hits_total{" ML "} 5");
	HAS_LINE(t, "moeserve:structured_grammar_compile_seconds_total{" ML "} 0.25");
	/* security and transport */
	HAS_LINE(t, "moeserve:tls_enabled{" ML "} 1");
	HAS_LINE(t, "moeserve:api_keys{" ML "} 3");
	HAS_LINE(t, "moeserve:http_connections{" ML "} 7");
	HAS_LINE(t, "moeserve:auth_failures_total{" ML "} 2");
	HAS_LINE(t, "moeserve:api_key_reloads_total{" ML ",result=\"ok\"} 1");
	HAS_LINE(t, "moeserve:api_key_reloads_total{" ML ",result=\"error\"} 1");
	HAS_LINE(t, "moeserve:tls_certificate_reloads_total{" ML ",result=\"ok\"} 2");
	HAS_LINE(t, "moeserve:tls_certificate_reloads_total{" ML ",result=\"error\"} 1");
	HAS_LINE(t, "moeserve:tls_certificate_expiry_timestamp_seconds{" ML "} 1830297600");
	/* TTFT: one observation (0.046875), the others had none */
	HAS_LINE(t, "# TYPE moeserve:time_to_first_token_seconds histogram");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_bucket{" ML ",le=\"0.001\"} 0");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_bucket{" ML ",le=\"0.04\"} 0");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_bucket{" ML ",le=\"0.06\"} 1");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_bucket{" ML ",le=\"2560\"} 1");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_bucket{" ML ",le=\"+Inf\"} 1");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_sum{" ML "} 0.046875");
	HAS_LINE(t, "moeserve:time_to_first_token_seconds_count{" ML "} 1");
	/* e2e: 0.375 and 9000 (past the last bound: only in +Inf); NaN not observed */
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_bucket{" ML ",le=\"0.3\"} 0");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_bucket{" ML ",le=\"0.5\"} 1");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_bucket{" ML ",le=\"7680\"} 1");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_bucket{" ML ",le=\"+Inf\"} 2");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_sum{" ML "} 9000.375");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_count{" ML "} 2");
	/* queue: 0.0078125 and 0.5 (a value equal to a bound is in that bucket) */
	HAS_LINE(t, "moeserve:request_queue_time_seconds_bucket{" ML ",le=\"0.3\"} 1");
	HAS_LINE(t, "moeserve:request_queue_time_seconds_bucket{" ML ",le=\"0.5\"} 2");
	HAS_LINE(t, "moeserve:request_queue_time_seconds_sum{" ML "} 0.5078125");
	HAS_LINE(t, "moeserve:request_queue_time_seconds_count{" ML "} 2");
	/* inter-token: 2 x 0.015625, 100 past the last bound (80) */
	HAS_LINE(t, "moeserve:time_per_output_token_seconds_bucket{" ML ",le=\"0.01\"} 0");
	HAS_LINE(t, "moeserve:time_per_output_token_seconds_bucket{" ML ",le=\"0.025\"} 2");
	HAS_LINE(t, "moeserve:time_per_output_token_seconds_bucket{" ML ",le=\"80\"} 2");
	HAS_LINE(t, "moeserve:time_per_output_token_seconds_bucket{" ML ",le=\"+Inf\"} 3");
	HAS_LINE(t, "moeserve:time_per_output_token_seconds_sum{" ML "} 100.03125");
	HAS_LINE(t, "moeserve:time_per_output_token_seconds_count{" ML "} 3");
	/* prompt lengths 7 and 0 (-1 not observed); generation 3 and 150 */
	HAS_LINE(t, "moeserve:request_prompt_tokens_bucket{" ML ",le=\"1\"} 1");
	HAS_LINE(t, "moeserve:request_prompt_tokens_bucket{" ML ",le=\"5\"} 1");
	HAS_LINE(t, "moeserve:request_prompt_tokens_bucket{" ML ",le=\"10\"} 2");
	HAS_LINE(t, "moeserve:request_prompt_tokens_bucket{" ML ",le=\"100000\"} 2");
	HAS_LINE(t, "moeserve:request_prompt_tokens_sum{" ML "} 7");
	HAS_LINE(t, "moeserve:request_prompt_tokens_count{" ML "} 2");
	HAS_LINE(t, "moeserve:request_generation_tokens_bucket{" ML ",le=\"2\"} 0");
	HAS_LINE(t, "moeserve:request_generation_tokens_bucket{" ML ",le=\"5\"} 1");
	HAS_LINE(t, "moeserve:request_generation_tokens_bucket{" ML ",le=\"100\"} 1");
	HAS_LINE(t, "moeserve:request_generation_tokens_bucket{" ML ",le=\"200\"} 2");
	HAS_LINE(t, "moeserve:request_generation_tokens_sum{" ML "} 153");
	HAS_LINE(t, "moeserve:request_generation_tokens_count{" ML "} 2");
	/* prefill: first token less queue; decode: the end less the first token
	 * (only the request with both times) */
	HAS_LINE(t, "moeserve:request_prefill_time_seconds_sum{" ML "} 0.0390625");
	HAS_LINE(t, "moeserve:request_prefill_time_seconds_count{" ML "} 1");
	HAS_LINE(t, "moeserve:request_decode_time_seconds_sum{" ML "} 0.328125");
	HAS_LINE(t, "moeserve:request_decode_time_seconds_count{" ML "} 1");
	HAS_LINE(t, "moeserve:inter_token_latency_seconds_count{" ML "} 3");
	/* vLLM's prefix-cache counters in tokens: computed + cached looked up */
	HAS_LINE(t, "moeserve:prefix_cache_queries_total{" ML "} 120");
	HAS_LINE(t, "moeserve:prefix_cache_hits_total{" ML "} 20");
	/* every family announced once, HELP before TYPE */
	static const char *const fams[] = {
		"moeserve:model_loaded", "moeserve:num_requests_running",
		"moeserve:num_requests_waiting", "moeserve:kv_cache_usage_perc",
		"moeserve:kv_cache_pages", "moeserve:prompt_tokens_total",
		"moeserve:prompt_tokens_cached_total", "moeserve:generation_tokens_total",
		"moeserve:prefix_cache_queries_total", "moeserve:prefix_cache_hits_total",
		"moeserve:spec_decode_num_drafts_total", "moeserve:spec_decode_num_draft_tokens_total",
		"moeserve:spec_decode_num_accepted_tokens_total",
		"moeserve:spec_decode_num_accepted_tokens_per_pos_total",
		"moeserve:spec_decode_cache_bytes", "moeserve:spec_decode_index_bytes",
		"moeserve:harmony_parse_errors_total", "moeserve:structured_grammar_compiles_total",
		"moeserve:structured_grammar_cache_hits_total",
		"moeserve:structured_grammar_compile_seconds_total", "moeserve:request_success_total",
		"moeserve:http_requests_total", "moeserve:tls_enabled", "moeserve:api_keys",
		"moeserve:http_connections", "moeserve:auth_failures_total",
		"moeserve:api_key_reloads_total", "moeserve:tls_certificate_reloads_total",
		"moeserve:tls_certificate_expiry_timestamp_seconds",
		"moeserve:time_to_first_token_seconds",
		"moeserve:time_per_output_token_seconds", "moeserve:e2e_request_latency_seconds",
		"moeserve:request_queue_time_seconds", "moeserve:request_prompt_tokens",
		"moeserve:request_generation_tokens", "moeserve:inter_token_latency_seconds",
		"moeserve:request_prefill_time_seconds", "moeserve:request_decode_time_seconds",
	};
	int n_types = 0;
	for (const char *p = t; (p = strstr(p, "\n# TYPE ")); p++)
		n_types++;
	ck_assert_int_eq(n_types + !strncmp(t, "# TYPE ", 7), (int)(sizeof(fams) / sizeof(fams[0])));
	for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		char h[160], ty[160];
		snprintf(h, sizeof(h), "# HELP %s ", fams[i]);
		snprintf(ty, sizeof(ty), "# TYPE %s ", fams[i]);
		char *ph = strstr(t, h), *pt = strstr(t, ty);
		ck_assert_msg(ph && pt && ph < pt, "HELP/TYPE of %s", fams[i]);
	}
	free(t);
	ms_metrics_free(m);
}
END_TEST

START_TEST(metrics_loading_and_refusals)
{
	struct ms_metrics *m = (struct ms_metrics *)&m;  /* set to NULL on failure */
	struct ms_err err = {0};
	ck_assert_int_eq(ms_metrics_init(&m, "", &err), -EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(err.msg, "model_name"), "%s", err.msg);
	ck_assert_int_eq(ms_metrics_init(&m, NULL, &err), -EINVAL);
	ms_metrics_free(NULL);
	ms_metrics_http(NULL, "GET", 200);  /* no-ops */
	ms_metrics_request_finished(NULL, "stop", 1, 1, 1, 1, 1, 1);

	/* no engine yet: gauges and token counters read 0, model_loaded 0 */
	ck_assert_int_eq(ms_metrics_init(&m, "gpt-oss-20b", &err), 0);
	char *t = render(m, NULL);
	HAS_LINE(t, "moeserve:model_loaded{model_name=\"gpt-oss-20b\"} 0");
	HAS_LINE(t, "moeserve:num_requests_running{model_name=\"gpt-oss-20b\"} 0");
	HAS_LINE(t, "moeserve:kv_cache_usage_perc{model_name=\"gpt-oss-20b\"} 0");
	HAS_LINE(t, "moeserve:generation_tokens_total{model_name=\"gpt-oss-20b\"} 0");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_count{model_name=\"gpt-oss-20b\"} 0");
	HAS_LINE(t, "moeserve:e2e_request_latency_seconds_sum{model_name=\"gpt-oss-20b\"} 0");
	/* nothing accepted yet: position 0 alone, so that the family has a sample */
	HAS_LINE(t, "moeserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"gpt-oss-20b\","
		 "position=\"0\"} 0");
	ck_assert_ptr_null(strstr(t, "position=\"1\""));
	HAS_LINE(t, "moeserve:spec_decode_cache_bytes{model_name=\"gpt-oss-20b\"} 0");
	free(t);

	/* finish reasons are bounded: 5 seeded + 10 more, then "other" */
	char r[32];
	for (int i = 0; i < 20; i++) {
		snprintf(r, sizeof(r), "r%d", i);
		ms_metrics_request_finished(m, r, 1, 1, 1, 1, 0, 1);
	}
	ms_metrics_request_finished(m, NULL, 1, 1, 1, 1, 0, 1);
	ms_metrics_request_finished(m, "a-reason-much-longer-than-thirty-one-bytes", 1, 1, 1, 1, 0, 1);
	t = render(m, NULL);
	HAS_LINE(t, "moeserve:request_success_total{model_name=\"gpt-oss-20b\",finished_reason=\"r9\"} 1");
	HAS_LINE(t, "moeserve:request_success_total{model_name=\"gpt-oss-20b\",finished_reason=\"other\"} 12");
	ck_assert_ptr_null(strstr(t, "finished_reason=\"r10\""));
	int n = 0;
	for (const char *p = t; (p = strstr(p, "\nmoeserve:request_success_total{")); p++)
		n++;
	ck_assert_int_eq(n, 16);
	free(t);
	ms_metrics_free(m);
}
END_TEST

#define WRITERS 4
#define ROUNDS 3000

static void *writer(void *arg)
{
	struct ms_metrics *m = arg;
	for (int i = 0; i < ROUNDS; i++) {
		ms_metrics_http(m, i % 2 ? "GET" : "POST", 200);
		ms_metrics_request_finished(m, "stop", 0.5, 0.25, 0.125, 10, 2, 5);
		ms_metrics_inter_token(m, 0.03125);
		ms_metrics_harmony_error(m, 1);
		ms_metrics_set_loaded(m, true);
	}
	return NULL;
}

START_TEST(metrics_threads)
{
	struct ms_metrics *m;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_metrics_init(&m, "m", &err), 0);
	pthread_t th[WRITERS];
	for (int i = 0; i < WRITERS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, writer, m), 0);
	struct ms_engine_stats st = {.running = 1, .kv_pages = 8, .kv_usage = 0.5};
	for (int i = 0; i < 40; i++)
		free(render(m, &st));  /* each one validated, histograms consistent */
	for (int i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
	char *t = render(m, &st);
	char line[256];
	const int total = WRITERS * ROUNDS;
	snprintf(line, sizeof(line), "moeserve:request_success_total{model_name=\"m\",finished_reason=\"stop\"} %d", total);
	HAS_LINE(t, line);
	snprintf(line, sizeof(line), "moeserve:http_requests_total{model_name=\"m\",method=\"GET\",status=\"200\"} %d", total / 2);
	HAS_LINE(t, line);
	snprintf(line, sizeof(line), "moeserve:harmony_parse_errors_total{model_name=\"m\"} %d", total);
	HAS_LINE(t, line);
	snprintf(line, sizeof(line), "moeserve:time_per_output_token_seconds_count{model_name=\"m\"} %d", total);
	HAS_LINE(t, line);
	snprintf(line, sizeof(line), "moeserve:time_per_output_token_seconds_sum{model_name=\"m\"} %d", total / 32);
	HAS_LINE(t, line);
	snprintf(line, sizeof(line), "moeserve:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"0.5\"} %d", total);
	HAS_LINE(t, line);
	free(t);
	ms_metrics_free(m);
}
END_TEST

/* ==== options ==== */

#define ARGV(...) ((char *[]){"serve", __VA_ARGS__, NULL})
#define NOARGS ((char *[]){"serve", NULL})

static int argc_of(char *const *argv)
{
	int n = 0;
	while (argv[n])
		n++;
	return n;
}

/* A temporary file holding text; path gets its name. */
static void write_tmp(const char *text, char *path, size_t n)
{
	snprintf(path, n, "/tmp/ms-server-units-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	size_t len = strlen(text);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	close(fd);
}

static int parse(struct ms_serve_options *o, char *const *argv, char *const *envp,
		 struct ms_err *err)
{
	return ms_serve_options_parse(o, argc_of(argv), argv, envp, err);
}

START_TEST(options_defaults)
{
	struct ms_serve_options o;
	struct ms_err err = {0};
	ck_assert_int_eq(parse(&o, NOARGS, NULL, &err), 0);
	ck_assert_ptr_null(o.model);
	ck_assert_ptr_null(o.served_model_name);
	ck_assert_str_eq(o.host, "127.0.0.1");
	ck_assert_int_eq(o.port, 8080);
	ck_assert_ptr_null(o.api_key);
	ck_assert_ptr_null(o.api_key_file);
	ck_assert_uint_eq(o.max_body_bytes, 1u << 20);
	ck_assert_ptr_null(o.cors_origin);
	ck_assert_int_eq(o.keepalive_s, 10);
	ck_assert_int_eq(o.shutdown_timeout_s, 30);
	ck_assert_int_eq(o.log_format, MS_LOG_FORMAT_TEXT);
	ck_assert_int_eq(o.log_level, MS_LOG_LEVEL_INFO);
	ck_assert_int_eq(o.threads, 0);
	ck_assert_str_eq(o.kernels, "auto");
	ck_assert_int_eq(o.numa, MS_NUMA_AUTO);
	/* the KV cache: auto is bf16, f32 under --exact; a dtype asked wins */
	ck_assert_int_eq(o.kv_dtype, MS_SERVE_KV_AUTO);
	ck_assert_int_eq(ms_serve_kv_dtype(&o), MS_KV_BF16);
	o.exact = true;
	ck_assert_int_eq(ms_serve_kv_dtype(&o), MS_KV_F32);
	o.kv_dtype = MS_SERVE_KV_BF16;
	ck_assert_int_eq(ms_serve_kv_dtype(&o), MS_KV_BF16);
	o.exact = false;
	o.kv_dtype = MS_SERVE_KV_F32;
	ck_assert_int_eq(ms_serve_kv_dtype(&o), MS_KV_F32);
	o.kv_dtype = MS_SERVE_KV_FP8;
	ck_assert_int_eq(ms_serve_kv_dtype(&o), MS_KV_FP8);
	o.kv_dtype = MS_SERVE_KV_AUTO;
	ck_assert_uint_eq(o.kv_cache_bytes, 0);
	ck_assert_int_eq(o.max_queue, 256);
	ck_assert_int_eq(o.max_running, 64);
	ck_assert_int_eq(o.max_batch_tokens, 256);
	ck_assert_int_eq(o.ctx_size, 0);
	ck_assert(!o.no_prefix_cache);
	ck_assert_int_eq(o.speculative, MS_SERVE_SPEC_AUTO);
	ck_assert_int_eq(o.spec_max_tokens, 32);
	ck_assert_uint_eq(o.spec_cache_bytes, 64u << 20);
	ck_assert_ptr_null(o.config);
	ms_serve_options_free(&o);
	ms_serve_options_free(&o);  /* twice is harmless */
	ms_serve_options_free(NULL);
	ck_assert_str_eq(ms_log_format_name(MS_LOG_FORMAT_JSON), "json");
	ck_assert_str_eq(ms_log_level_name(MS_LOG_LEVEL_DEBUG), "debug");
	ck_assert_str_eq(ms_serve_numa_name(MS_NUMA_INTERLEAVE), "interleave");
}
END_TEST

START_TEST(options_precedence)
{
	char path[64], envcfg[128];
	write_tmp("{\"port\": 9000, \"host\": \"0.0.0.0\", \"max_queue\": 100, \"log_format\": \"json\",\n"
		  " \"api_key\": \"file-key\", \"threads\": 4, \"max_body_bytes\": \"2M\",\n"
		  " \"no_prefix_cache\": true, \"kv_cache_bytes\": 1073741824, \"numa\": \"off\",\n"
		  " \"cors_origin\": null, \"ctx_size\": 4096, \"model\": \"/models/file\",\n"
		  " \"speculative\": \"off\", \"spec_max_tokens\": 8, \"spec_cache_bytes\": \"1M\"}\n",
		  path, sizeof(path));
	snprintf(envcfg, sizeof(envcfg), "MOESERVE_CONFIG=%s", path);
	char *env[] = {
		"PATH=/bin", envcfg, "MOESERVE_PORT=9100", "MOESERVE_MAX_QUEUE=200",
		"MOESERVE_THREADS=",  /* empty: unset */
		"MOESERVE_CTX_SIZE=2048", "MOESERVE_LOG_LEVEL=debug", "NOT_MOESERVE_PORT=1", NULL,
	};
	struct ms_serve_options o;
	struct ms_err err = {0};
	int rc = parse(&o, ARGV("--port", "9200", "--threads=8", "--ctx-size", "1024",
				"--ctx-size=512", "-m", "/models/flag"), env, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_int_eq(o.port, 9200);              /* flag > env > file */
	ck_assert_int_eq(o.max_queue, 200);          /* env > file */
	ck_assert_int_eq(o.ctx_size, 512);           /* flag > env > file; last flag wins */
	ck_assert_int_eq(o.threads, 8);              /* flag > file (empty env ignored) */
	ck_assert_str_eq(o.host, "0.0.0.0");         /* file > default */
	ck_assert_int_eq(o.log_format, MS_LOG_FORMAT_JSON);
	ck_assert_int_eq(o.log_level, MS_LOG_LEVEL_DEBUG);  /* env > default */
	ck_assert_str_eq(o.api_key, "file-key");
	ck_assert_uint_eq(o.max_body_bytes, 2u << 20);
	ck_assert_uint_eq(o.kv_cache_bytes, 1u << 30);
	ck_assert(o.no_prefix_cache);
	ck_assert_int_eq(o.numa, MS_NUMA_OFF);
	ck_assert_ptr_null(o.cors_origin);
	ck_assert_str_eq(o.model, "/models/flag");
	ck_assert_str_eq(o.config, path);
	ck_assert_int_eq(o.keepalive_s, 10);         /* untouched: default */
	ck_assert_int_eq(o.speculative, MS_SERVE_SPEC_OFF);  /* file > default */
	ck_assert_int_eq(o.spec_max_tokens, 8);
	ck_assert_uint_eq(o.spec_cache_bytes, 1u << 20);
	ms_serve_options_free(&o);

	/* --config beats $MOESERVE_CONFIG (which names no file here) */
	char *env2[] = {"MOESERVE_CONFIG=/nonexistent/x.json", "MOESERVE_HOST=::1", NULL};
	rc = parse(&o, ARGV("--config", path, "--no-prefix-cache=false"), env2, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_int_eq(o.port, 9000);
	ck_assert_str_eq(o.host, "::1");
	ck_assert(!o.no_prefix_cache);
	ck_assert_str_eq(o.model, "/models/file");
	ms_serve_options_free(&o);

	/* speculation: the environment over the file, a flag over both; 0 bytes
	 * is a value (no shared cache), not the default */
	char *env4[] = {envcfg, "MOESERVE_SPECULATIVE=auto", "MOESERVE_SPEC_CACHE_BYTES=0", NULL};
	rc = parse(&o, ARGV("--spec-max-tokens", "64"), env4, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_int_eq(o.speculative, MS_SERVE_SPEC_AUTO);
	ck_assert_int_eq(o.spec_max_tokens, 64);
	ck_assert_uint_eq(o.spec_cache_bytes, 0);
	ms_serve_options_free(&o);
	char *env5[] = {"MOESERVE_SPECULATIVE=off", NULL};
	rc = parse(&o, NOARGS, env5, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_int_eq(o.speculative, MS_SERVE_SPEC_OFF);
	ms_serve_options_free(&o);
	rc = parse(&o, ARGV("--speculative", "auto"), env5, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_int_eq(o.speculative, MS_SERVE_SPEC_AUTO);
	ms_serve_options_free(&o);
	rc = parse(&o, ARGV("--speculative=off", "--spec-max-tokens=1"), NULL, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_int_eq(o.speculative, MS_SERVE_SPEC_OFF);
	ck_assert_int_eq(o.spec_max_tokens, 1);
	ms_serve_options_free(&o);

	/* sizes with suffixes, booleans from the environment */
	char *env3[] = {"MOESERVE_NO_PREFIX_CACHE=yes", "MOESERVE_KV_CACHE_BYTES=8GiB", NULL};
	rc = parse(&o, ARGV("--max-body-bytes", "512K"), env3, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert(o.no_prefix_cache);
	ck_assert_uint_eq(o.kv_cache_bytes, 8ull << 30);
	ck_assert_uint_eq(o.max_body_bytes, 512u << 10);
	ms_serve_options_free(&o);
	unlink(path);
}
END_TEST

START_TEST(options_api_key_file)
{
	char key[64], path[64], cfg[256];
	write_tmp("s3cret \n", key, sizeof(key));
	struct ms_serve_options o;
	struct ms_err err = {0};
	int rc = parse(&o, ARGV("--api-key-file", key), NULL, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_str_eq(o.api_key_file, key);  /* checked here, read by the daemon (auth.h) */
	ck_assert_ptr_null(o.api_key);
	ms_serve_options_free(&o);

	/* a key from the config file and a key file from a flag: both accepted */
	snprintf(cfg, sizeof(cfg), "{\"api_key\": \"k\"}");
	write_tmp(cfg, path, sizeof(path));
	rc = parse(&o, ARGV("--config", path, "--api-key-file", key), NULL, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_str_eq(o.api_key, "k");
	ms_serve_options_free(&o);
	unlink(path);
	unlink(key);

	/* a file without keys: refused alone, naming the file (never a key) */
	write_tmp("# none yet\n\n", key, sizeof(key));
	rc = parse(&o, ARGV("--api-key-file", key), NULL, &err);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_msg(strstr(err.msg, "--api-key-file") && strstr(err.msg, key) &&
		      strstr(err.msg, "holds no key"), "%s", err.msg);
	ck_assert_ptr_null(o.host);  /* nothing left owned */
	/* ... fine next to --api-key (keys may come on SIGHUP) */
	rc = parse(&o, ARGV("--api-key-file", key, "--api-key", "k2"), NULL, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ms_serve_options_free(&o);
	unlink(key);

	char *env[] = {"MOESERVE_API_KEY_FILE=/nonexistent/key", NULL};
	ck_assert_int_eq(parse(&o, NOARGS, env, &err), -ENOENT);
	ck_assert_msg(strstr(err.msg, "MOESERVE_API_KEY_FILE") && strstr(err.msg, "/nonexistent/key"),
		      "%s", err.msg);
}
END_TEST

/* Refused with code, the message holding every needle. */
static void refused(char *const *argv, char *const *envp, int code, ...)
{
	struct ms_serve_options o;
	struct ms_err err = {0};
	int rc = parse(&o, argv, envp, &err);
	ck_assert_msg(rc == code, "rc %d (want %d), message: %s", rc, code, err.msg);
	ck_assert_ptr_null(o.host);
	ck_assert_ptr_null(o.kernels);
	va_list ap;
	va_start(ap, code);
	for (const char *s; (s = va_arg(ap, const char *));)
		ck_assert_msg(strstr(err.msg, s), "message \"%s\" lacks \"%s\"", err.msg, s);
	va_end(ap);
}

/* Refused with this config file's text, the message naming the file. */
static void refused_file(const char *json, int code, const char *needle, const char *needle2)
{
	char path[64], env[128];
	write_tmp(json, path, sizeof(path));
	snprintf(env, sizeof(env), "MOESERVE_CONFIG=%s", path);
	char *envp[] = {env, NULL};
	refused(NOARGS, envp, code, "config file", path, needle, needle2, NULL);
	unlink(path);
}

START_TEST(options_refusals)
{
	struct ms_serve_options o;
	struct ms_err err = {0};
	/* the brief's exact wording for a flag */
	ck_assert_int_eq(parse(&o, ARGV("--port", "70000"), NULL, &err), -EINVAL);
	ck_assert_str_eq(err.msg, "--port: \"70000\" is not in [1, 65535]");

	/* flags */
	refused(ARGV("--port", "0"), NULL, -EINVAL, "--port", "\"0\"", "[1, 65535]", NULL);
	refused(ARGV("--port=http"), NULL, -EINVAL, "--port", "\"http\"", "not an integer", NULL);
	refused(ARGV("--port"), NULL, -EINVAL, "--port: missing value", NULL);
	refused(ARGV("-m"), NULL, -EINVAL, "-m: missing value", NULL);
	refused(ARGV("--bogus", "1"), NULL, -EINVAL, "--bogus", "unknown option", NULL);
	refused(ARGV("--bogus=1"), NULL, -EINVAL, "--bogus: unknown option", NULL);
	refused(ARGV("-x"), NULL, -EINVAL, "-x", "unknown option", NULL);
	refused(ARGV("/models/x"), NULL, -EINVAL, "unexpected argument", "/models/x", NULL);
	refused(ARGV("--log-format", "xml"), NULL, -EINVAL, "--log-format", "\"xml\"", "text or json",
		NULL);
	refused(ARGV("--numa", "on"), NULL, -EINVAL, "--numa", "\"on\"", "auto, off or interleave",
		NULL);
	refused(ARGV("--max-body-bytes", "12Q"), NULL, -EINVAL, "--max-body-bytes", "\"12Q\"", "size",
		NULL);
	refused(ARGV("--max-body-bytes", "2G"), NULL, -EINVAL, "--max-body-bytes", "\"2G\"",
		"[1024, 1073741824] bytes", NULL);
	refused(ARGV("--kv-cache-bytes", "99999999999999999999"), NULL, -EINVAL, "--kv-cache-bytes",
		NULL);
	refused(ARGV("--kernels", "nope"), NULL, -EINVAL, "--kernels", "\"nope\"", "auto", NULL);
	refused(ARGV("--host", ""), NULL, -EINVAL, "--host: must not be empty", NULL);
	refused(ARGV("--api-key="), NULL, -EINVAL, "--api-key: must not be empty", NULL);
	refused(ARGV("--no-prefix-cache=maybe"), NULL, -EINVAL, "--no-prefix-cache", "\"maybe\"",
		"boolean", NULL);
	refused(ARGV("--threads", "-1"), NULL, -EINVAL, "--threads", "[0, 1024]", NULL);
	refused(ARGV("--max-running", "1.5"), NULL, -EINVAL, "--max-running", "\"1.5\"", NULL);
	refused(ARGV("--speculative", "on"), NULL, -EINVAL, "--speculative", "\"on\"", "auto or off",
		NULL);
	refused(ARGV("--speculative"), NULL, -EINVAL, "--speculative: missing value", NULL);
	refused(ARGV("--spec-max-tokens", "0"), NULL, -EINVAL, "--spec-max-tokens", "\"0\"",
		"[1, 64]", NULL);
	refused(ARGV("--spec-max-tokens", "65"), NULL, -EINVAL, "--spec-max-tokens", "\"65\"",
		"[1, 64]", NULL);
	refused(ARGV("--spec-cache-bytes", "-1"), NULL, -EINVAL, "--spec-cache-bytes", "\"-1\"",
		"size", NULL);
	refused(ARGV("--config", "/nonexistent/c.json"), NULL, -ENOENT, "--config",
		"/nonexistent/c.json", NULL);
	refused(ARGV("--config="), NULL, -EINVAL, "--config: must not be empty", NULL);

	/* environment */
	char *e1[] = {"MOESERVE_PORT=abc", NULL};
	refused(NOARGS, e1, -EINVAL, "MOESERVE_PORT: \"abc\"", NULL);
	char *e2[] = {"MOESERVE_NUMA=bad", NULL};
	refused(NOARGS, e2, -EINVAL, "MOESERVE_NUMA: \"bad\"", NULL);
	char *e3[] = {"MOESERVE_MAX_QUEUE=0", NULL};
	refused(NOARGS, e3, -EINVAL, "MOESERVE_MAX_QUEUE: \"0\" is not in [1, 1000000]", NULL);
	char *e4[] = {"MOESERVE_CONFIG=/nonexistent/c.json", NULL};
	refused(NOARGS, e4, -ENOENT, "MOESERVE_CONFIG", "/nonexistent/c.json", NULL);
	/* a flag's good value does not hide a bad environment value */
	char *e5[] = {"MOESERVE_PORT=99999", NULL};
	refused(ARGV("--port", "80"), e5, -EINVAL, "MOESERVE_PORT", NULL);
	char *e6[] = {"MOESERVE_SPECULATIVE=maybe", NULL};
	refused(NOARGS, e6, -EINVAL, "MOESERVE_SPECULATIVE: \"maybe\" is not auto or off", NULL);
	char *e7[] = {"MOESERVE_SPEC_MAX_TOKENS=65", NULL};
	refused(NOARGS, e7, -EINVAL, "MOESERVE_SPEC_MAX_TOKENS: \"65\" is not in [1, 64]", NULL);

	/* config file */
	refused_file("{\"port\": 70000}", -EINVAL, "key \"port\": 70000 is not in [1, 65535]", NULL);
	refused_file("{\"port\": \"9000\"}", -EINVAL, "key \"port\"", "expected an integer, got a string");
	refused_file("{\"port\": 1.5}", -EINVAL, "key \"port\"", "1.5 is not an integer");
	refused_file("{\"bogus\": 1}", -EINVAL, "unknown key \"bogus\"", NULL);
	refused_file("{\"max-queue\": 1}", -EINVAL, "unknown key \"max-queue\"", NULL);
	refused_file("{\"config\": \"x\"}", -EINVAL, "unknown key \"config\"", NULL);
	refused_file("{\"no_prefix_cache\": \"yes\"}", -EINVAL, "key \"no_prefix_cache\"",
		     "expected true or false");
	refused_file("{\"speculative\": false}", -EINVAL, "key \"speculative\"",
		     "expected a string, got a boolean");
	refused_file("{\"spec_max_tokens\": 0}", -EINVAL, "key \"spec_max_tokens\": 0 is not in [1, 64]",
		     NULL);
	refused_file("{\"host\": 1}", -EINVAL, "key \"host\"", "expected a string, got a number");
	refused_file("{\"host\": null}", -EINVAL, "key \"host\"", "got null");
	refused_file("{\"log_format\": [\"json\"]}", -EINVAL, "key \"log_format\"", "got an array");
	refused_file("{\"max_body_bytes\": \"lots\"}", -EINVAL, "key \"max_body_bytes\"", "\"lots\"");
	refused_file("{\"port\": 1, \"port\": 2}", -EBADMSG, "key \"port\" appears twice", NULL);
	refused_file("{\"port\": 1,\n\"host\": }", -EBADMSG, "not valid JSON", "line 2, column 9");
	refused_file("{\"port\":\t\v1}", -EBADMSG, "not valid JSON", "not the byte 0x0B");
	refused_file("{\"port\": 9000} {\"port\": 1}", -EBADMSG, "nothing may follow", NULL);
	refused_file("[1, 2]", -EBADMSG, "not a JSON object", NULL);
	refused_file("", -EBADMSG, "not valid JSON", NULL);
}
END_TEST

START_TEST(options_help)
{
	struct ms_serve_options o;
	struct ms_err err = {0};
	ck_assert_int_eq(parse(&o, ARGV("--help"), NULL, &err), 1);
	ck_assert_int_eq(parse(&o, ARGV("--port", "1", "-h"), NULL, &err), 1);
	ck_assert_int_eq(parse(&o, ARGV("--bogus", "--help"), NULL, &err), 1);  /* help wins */
	char *env[] = {"MOESERVE_PORT=bad", NULL};
	ck_assert_int_eq(parse(&o, ARGV("--help"), env, &err), 1);
	ck_assert_ptr_null(o.host);

	const char *h = ms_serve_options_help();
	ck_assert_ptr_eq(h, ms_serve_options_help());
	static const char *const needles[] = {
		"Usage: moeserve serve", "flag > environment\nvariable > config file > default",
		"-h, --help", "Kernel sets: auto",
	};
	for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++)
		ck_assert_msg(strstr(h, needles[i]), "help lacks \"%s\":\n%s", needles[i], h);
	/* every option: flag, environment variable, default, one after the other */
	static const char *const opts[][3] = {
		{"--config FILE", "MOESERVE_CONFIG", "none"},
		{"-m, --model DIR", "MOESERVE_MODEL", "the built-in model"},
		{"--served-model-name NAME", "MOESERVE_SERVED_MODEL_NAME", "the model folder's name"},
		{"--host ADDR", "MOESERVE_HOST", "127.0.0.1"},
		{"--port N", "MOESERVE_PORT", "8080"},
		{"--api-key KEY", "MOESERVE_API_KEY", "none (no authentication)"},
		{"--api-key-file FILE", "MOESERVE_API_KEY_FILE", "none"},
		{"--max-body-bytes SIZE", "MOESERVE_MAX_BODY_BYTES", "1M"},
		{"--cors-origin ORIGIN", "MOESERVE_CORS_ORIGIN", "none (CORS off)"},
		{"--keepalive-s N", "MOESERVE_KEEPALIVE_S", "10"},
		{"--shutdown-timeout-s N", "MOESERVE_SHUTDOWN_TIMEOUT_S", "30"},
		{"--log-format FMT", "MOESERVE_LOG_FORMAT", "text"},
		{"--log-level LEVEL", "MOESERVE_LOG_LEVEL", "info"},
		{"--threads N", "MOESERVE_THREADS", "0 (one per available CPU)"},
		{"--kernels SET", "MOESERVE_KERNELS", "auto"},
		{"--numa MODE", "MOESERVE_NUMA", "auto"},
		{"--kv-cache-bytes SIZE", "MOESERVE_KV_CACHE_BYTES", "0 (half the free memory; <= 4 contexts)"},
		{"--max-queue N", "MOESERVE_MAX_QUEUE", "256"},
		{"--max-running N", "MOESERVE_MAX_RUNNING", "64"},
		{"--max-batch-tokens N", "MOESERVE_MAX_BATCH_TOKENS", "256"},
		{"--ctx-size N", "MOESERVE_CTX_SIZE", "0 (the model's, or what the pool holds)"},
		{"--no-prefix-cache", "MOESERVE_NO_PREFIX_CACHE", "false"},
		{"--speculative MODE", "MOESERVE_SPECULATIVE", "auto"},
		{"--spec-max-tokens N", "MOESERVE_SPEC_MAX_TOKENS", "32"},
		{"--spec-cache-bytes SIZE", "MOESERVE_SPEC_CACHE_BYTES", "64M"},
	};
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		char flag[64], env[80], def[80];
		snprintf(flag, sizeof(flag), "\n  %s ", opts[i][0]);
		snprintf(env, sizeof(env), "\n%30senv: %s\n", "", opts[i][1]);
		snprintf(def, sizeof(def), "%30sdefault: %s\n", "", opts[i][2]);
		const char *p = strstr(h, flag);
		ck_assert_msg(p, "help lacks %s:\n%s", opts[i][0], h);
		p = strstr(p, env);
		ck_assert_msg(p, "help lacks %s after %s", env, opts[i][0]);
		ck_assert_msg(strstr(p + 1, def) == strchr(p + 1, '\n') + 1, "help: %s: default is not %s",
			      opts[i][0], opts[i][2]);
	}
	/* lines fit a terminal */
	for (const char *p = h; *p;) {
		const char *e = strchr(p, '\n');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		ck_assert_msg(n <= 80, "help line longer than 80: %.*s", (int)n, p);
		p += n + (e != NULL);
	}
}
END_TEST

/* Parsing keeps no global state: threads parsing different argv at once. */
static void *parse_many(void *arg)
{
	long k = (long)arg;
	char port[32];
	snprintf(port, sizeof(port), "%ld", 1000 + k);
	for (int i = 0; i < 200; i++) {
		struct ms_serve_options o;
		struct ms_err err = {0};
		char *argv[] = {"serve", "--port", port, "--host", "h", "--bogus-later", NULL};
		int rc = ms_serve_options_parse(&o, 5, argv, NULL, &err);
		if (rc || o.port != 1000 + k)
			return (void *)1;
		ms_serve_options_free(&o);
		if (ms_serve_options_parse(&o, 6, argv, NULL, &err) != -EINVAL ||
		    !strstr(err.msg, "--bogus-later"))
			return (void *)1;
	}
	return NULL;
}

/* serve's context and KV pool (server/cli/kv-plan.c) on a 20b-shaped
 * model: 48 KiB of KV a token, 131072 positions. */
START_TEST(kv_plan)
{
	const uint64_t G = 1ull << 30;
	struct ms_kv_plan_in in = {.max_pos = 131072, .token_bytes = 49152, .page_tokens = 16,
				   .host = true, .available = 100 * G};
	struct ms_kv_plan p;
	struct ms_err err = {0};
	/* plenty: the model's context, four of them */
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_int_eq(p.context, 131072);
	ck_assert_uint_eq(p.pool_bytes, 4ull * 131072 * 49152);
	ck_assert_msg(strstr(p.why, "(the model's)") && strstr(p.why, "four full contexts"), "%s", p.why);
	/* 20 GiB: half of it, more than one context (6 GiB) */
	in.available = 20 * G;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_int_eq(p.context, 131072);
	ck_assert_uint_eq(p.pool_bytes, 10 * G);
	ck_assert_msg(strstr(p.why, "half the 20.0 GiB"), "%s", p.why);
	/* 4 GiB: one context does not fit in its half, the context is what does */
	in.available = 4 * G;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_int_eq(p.context, (int64_t)(2 * G / 49152) / 16 * 16);
	ck_assert_msg(strstr(p.why, "the largest the pool holds"), "%s", p.why);
	/* --ctx-size asked: one full context whatever the share */
	in.ctx_size = 100000;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_int_eq(p.context, 100000);
	ck_assert_uint_eq(p.pool_bytes, 100000ull * 49152);
	/* the model's maximum itself is fine; more is refused */
	in.ctx_size = 131072;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_int_eq(p.context, 131072);
	in.ctx_size = 131073;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "--ctx-size 131073") && strstr(err.msg, "131072"), "%s", err.msg);
	/* --kv-cache-bytes wins; without --ctx-size the context is what it holds */
	in.ctx_size = 0;
	in.kv_cache_bytes = 1 * G;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_uint_eq(p.pool_bytes, G);
	ck_assert_int_eq(p.context, (int64_t)(G / 49152) / 16 * 16);
	/* a device backend: four contexts of at most 8192 */
	in.kv_cache_bytes = 0;
	in.host = false;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), 0);
	ck_assert_int_eq(p.context, 8192);
	ck_assert_uint_eq(p.pool_bytes, 4ull * 8192 * 49152);
	/* no memory left for a page: refused, saying what to give */
	in.host = true;
	in.available = 100000;
	ck_assert_int_eq(ms_kv_plan_make(&in, &p, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "--kv-cache-bytes"), "%s", err.msg);
	/* this machine's memory can be read */
	ck_assert_uint_gt(ms_kv_plan_available(), 0);
}
END_TEST

/* HAProxy's agent line (server/http/agent.c) from the state and load. */
START_TEST(agent_line)
{
	char b[64];
	ms_agent_line(MS_SERVER_READY, 0, 0, b, sizeof(b));
	ck_assert_str_eq(b, "up ready 100%\n");
	ms_agent_line(MS_SERVER_READY, 0.75, 0, b, sizeof(b));
	ck_assert_str_eq(b, "up ready 25%\n");
	ms_agent_line(MS_SERVER_READY, 0.5, 4, b, sizeof(b));
	ck_assert_str_eq(b, "up ready 10%\n");
	ms_agent_line(MS_SERVER_READY, 1, 9, b, sizeof(b));
	ck_assert_str_eq(b, "up ready 1%\n");  /* never 0: that would be drain */
	ms_agent_line(MS_SERVER_DRAINING, 0, 0, b, sizeof(b));
	ck_assert_str_eq(b, "drain\n");
	ms_agent_line(MS_SERVER_LOADING, 0, 0, b, sizeof(b));
	ck_assert_str_eq(b, "down\n");
	ms_agent_line(MS_SERVER_FAILED, 0, 0, b, sizeof(b));
	ck_assert_str_eq(b, "down\n");
}
END_TEST

START_TEST(options_reentrant)
{
	pthread_t th[4];
	for (long i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, parse_many, (void *)i), 0);
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(th[i], &r);
		ck_assert_ptr_null(r);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("server-units");
	TCase *tm = tcase_create("metrics");
	tcase_add_test(tm, validator_refuses);
	tcase_add_test(tm, metrics_exact);
	tcase_add_test(tm, metrics_loading_and_refusals);
	tcase_add_test(tm, metrics_threads);
	tcase_set_timeout(tm, 60);
	suite_add_tcase(s, tm);
	TCase *to = tcase_create("options");
	tcase_add_test(to, options_defaults);
	tcase_add_test(to, options_precedence);
	tcase_add_test(to, options_api_key_file);
	tcase_add_test(to, options_refusals);
	tcase_add_test(to, options_help);
	tcase_add_test(to, options_reentrant);
	tcase_add_test(to, kv_plan);
	tcase_add_test(to, agent_line);
	suite_add_tcase(s, to);
	return ms_check_run(s);
}
