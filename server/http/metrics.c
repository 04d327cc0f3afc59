/*
 * metrics.c: Prometheus metrics (see metrics.h for the list).
 *
 * All state is one plain struct of fixed-size arrays behind a mutex, so that
 * rendering copies it under the lock (a memcpy) and formats the copy
 * without holding anything. Label sets are bounded by construction: HTTP
 * methods are mapped onto a fixed list, status codes onto 100..599, and
 * finish reasons onto at most MS_METRICS_REASONS names.
 */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-strbuf.h"

/* ---- bucket boundaries (upper bounds, seconds or tokens) ---- */

/* vLLM's: time to first token from 1 ms, inter-token from 10 ms, request
 * latencies from 0.3 s; token counts in 1-2-5 steps up to a 128K context. */
static const double ttft_bounds[] = {
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};
static const double itl_bounds[] = {
	0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
};
static const double latency_bounds[] = {
	0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
	50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
};
static const double token_bounds[] = {
	1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
	50000, 100000,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_BOUNDS 24
_Static_assert(COUNT(ttft_bounds) <= MAX_BOUNDS && COUNT(itl_bounds) <= MAX_BOUNDS &&
		       COUNT(latency_bounds) <= MAX_BOUNDS && COUNT(token_bounds) <= MAX_BOUNDS,
	       "MAX_BOUNDS too small");

struct hist {
	uint64_t counts[MAX_BOUNDS + 1];  /* per bucket, not cumulative; last: above all bounds */
	uint64_t count;
	double sum;
};

/* The histograms, in rendering order. */
enum hist_id {
	H_TTFT,
	H_ITL,
	H_E2E,
	H_QUEUE,
	H_PROMPT,
	H_GEN,
	H_PREFILL,
	H_DECODE,
	H_COUNT,
};

static const struct hist_def {
	const char *name;
	const char *help;
	const double *bounds;
	int n_bounds;
} hist_defs[H_COUNT] = {
	[H_TTFT] = {"moeserve:time_to_first_token_seconds",
		    "Time from arrival to the first generated token, in seconds.",
		    ttft_bounds, (int)COUNT(ttft_bounds)},
	[H_ITL] = {"moeserve:time_per_output_token_seconds",
		   "Inter-token latency: time between two generated tokens of a request, in seconds.",
		   itl_bounds, (int)COUNT(itl_bounds)},
	[H_E2E] = {"moeserve:e2e_request_latency_seconds",
		   "Time from arrival to the end of a request, in seconds.",
		   latency_bounds, (int)COUNT(latency_bounds)},
	[H_QUEUE] = {"moeserve:request_queue_time_seconds",
		     "Time from arrival to first scheduling, in seconds.",
		     latency_bounds, (int)COUNT(latency_bounds)},
	[H_PROMPT] = {"moeserve:request_prompt_tokens",
		      "Prompt tokens per finished request, cached ones included.",
		      token_bounds, (int)COUNT(token_bounds)},
	[H_GEN] = {"moeserve:request_generation_tokens",
		   "Generated tokens per finished request.",
		   token_bounds, (int)COUNT(token_bounds)},
	[H_PREFILL] = {"moeserve:request_prefill_time_seconds",
		       "Time from first scheduling to the first generated token, in seconds.",
		       latency_bounds, (int)COUNT(latency_bounds)},
	[H_DECODE] = {"moeserve:request_decode_time_seconds",
		      "Time from the first generated token to the end of a request, in seconds.",
		      latency_bounds, (int)COUNT(latency_bounds)},
};

/* HTTP methods kept apart; anything else is "other" (the last slot). */
static const char *const http_methods[] = {
	"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "other",
};
#define N_METHODS ((int)COUNT(http_methods))
#define STATUS_LO 100
#define N_STATUS 501   /* 100..599, and slot 500 for anything else (status="0") */

/* finish reasons: these are always rendered (0 until seen), others are added
 * as they come, up to MS_METRICS_REASONS names with "other" last. */
#define MS_METRICS_REASONS 16
#define REASON_MAX 32
static const char *const seeded_reasons[] = {
	"stop", "length", "tool_calls", "cancelled", "error",
};

struct state {
	bool loaded;
	/* security and transport (metrics.h: ms_metrics_auth_failure...) */
	uint64_t auth_failures, key_reloads[2];  /* [0] ok, [1] error */
	uint64_t tls_reloads[2];                 /* the same */
	long long tls_not_after;                 /* the served certificate's expiry */
	int api_keys;
	bool tls;
	unsigned connections;
	uint64_t harmony_errors;
	struct ms_metrics_grammars gr;
	int n_reasons;
	char reason_names[MS_METRICS_REASONS][REASON_MAX];
	uint64_t reason_counts[MS_METRICS_REASONS];
	uint64_t http[N_METHODS][N_STATUS];
	struct hist hist[H_COUNT];
};

struct ms_metrics {
	pthread_mutex_t mu;
	char *model_label;   /* the model name, already escaped for a label value */
	struct state s;      /* under mu */
};

/* ---- recording ---- */

static void hist_observe(struct hist *h, const struct hist_def *d, double v)
{
	if (!isfinite(v) || v < 0)
		return;
	int b = 0;
	while (b < d->n_bounds && v > d->bounds[b])   /* le: v <= bound */
		b++;
	h->counts[b]++;
	h->count++;
	h->sum += v;
}

/* Escape a label value: backslash, double quote and newline. */
static char *escape_label(const char *s)
{
	size_t n = 0;
	for (const char *p = s; *p; p++)
		n += (*p == '\\' || *p == '"' || *p == '\n') ? 2 : 1;
	char *o = malloc(n + 1), *q = o;
	if (!o)
		return NULL;
	for (const char *p = s; *p; p++) {
		if (*p == '\\' || *p == '"' || *p == '\n') {
			*q++ = '\\';
			*q++ = *p == '\n' ? 'n' : *p;
		} else {
			*q++ = *p;
		}
	}
	*q = '\0';
	return o;
}

int ms_metrics_init(struct ms_metrics **out, const char *model_name, struct ms_err *err)
{
	*out = NULL;
	if (!model_name || !*model_name)
		return ms_err_set(err, -EINVAL, "metrics: model_name must be a non-empty string");
	struct ms_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return ms_err_set(err, -ENOMEM, "metrics: out of memory");
	m->model_label = escape_label(model_name);
	if (!m->model_label) {
		free(m);
		return ms_err_set(err, -ENOMEM, "metrics: out of memory");
	}
	for (size_t i = 0; i < COUNT(seeded_reasons); i++)
		snprintf(m->s.reason_names[i], REASON_MAX, "%s", seeded_reasons[i]);
	m->s.n_reasons = (int)COUNT(seeded_reasons);
	pthread_mutex_init(&m->mu, NULL);
	*out = m;
	return 0;
}

void ms_metrics_free(struct ms_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m->model_label);
	free(m);
}

/* The slot of a reason, adding it while there is room (under mu). The last
 * slot is kept for "other", so it is always there to fall back on. */
static int reason_slot(struct state *s, const char *reason)
{
	if (!reason || !*reason || strlen(reason) >= REASON_MAX)
		reason = "other";
	for (int i = 0; i < s->n_reasons; i++)
		if (!strcmp(s->reason_names[i], reason))
			return i;
	bool other = !strcmp(reason, "other");
	if (s->n_reasons < MS_METRICS_REASONS - 1 || (other && s->n_reasons < MS_METRICS_REASONS)) {
		snprintf(s->reason_names[s->n_reasons], REASON_MAX, "%s", reason);
		return s->n_reasons++;
	}
	return reason_slot(s, "other");
}

void ms_metrics_request_finished(struct ms_metrics *m, const char *reason, double e2e_s,
				 double queue_s, double ttft_s, int64_t prompt_tokens,
				 int64_t cached_tokens, int64_t generation_tokens)
{
	(void)cached_tokens;  /* the engine's prompt_tokens_cached counter is authoritative */
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	struct state *s = &m->s;
	s->reason_counts[reason_slot(s, reason)]++;
	hist_observe(&s->hist[H_E2E], &hist_defs[H_E2E], e2e_s);
	hist_observe(&s->hist[H_QUEUE], &hist_defs[H_QUEUE], queue_s);
	hist_observe(&s->hist[H_TTFT], &hist_defs[H_TTFT], ttft_s);
	if (ttft_s >= 0 && isfinite(ttft_s) && isfinite(e2e_s)) { /* it generated: prefill, decode */
		hist_observe(&s->hist[H_PREFILL], &hist_defs[H_PREFILL],
			     ttft_s > queue_s ? ttft_s - queue_s : 0);
		hist_observe(&s->hist[H_DECODE], &hist_defs[H_DECODE], e2e_s > ttft_s ? e2e_s - ttft_s : 0);
	}
	if (prompt_tokens >= 0)
		hist_observe(&s->hist[H_PROMPT], &hist_defs[H_PROMPT], (double)prompt_tokens);
	if (generation_tokens >= 0)
		hist_observe(&s->hist[H_GEN], &hist_defs[H_GEN], (double)generation_tokens);
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_inter_token(struct ms_metrics *m, double s)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	hist_observe(&m->s.hist[H_ITL], &hist_defs[H_ITL], s);
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_http(struct ms_metrics *m, const char *method, int status)
{
	if (!m)
		return;
	int mi = N_METHODS - 1;
	for (int i = 0; method && i < N_METHODS - 1; i++)
		if (!strcmp(method, http_methods[i]))
			mi = i;
	int si = status >= STATUS_LO && status < STATUS_LO + N_STATUS - 1 ? status - STATUS_LO
									  : N_STATUS - 1;
	pthread_mutex_lock(&m->mu);
	m->s.http[mi][si]++;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_set_grammars(struct ms_metrics *m, const struct ms_metrics_grammars *g)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.gr = *g;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_harmony_error(struct ms_metrics *m, uint64_t n)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.harmony_errors += n;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_set_loaded(struct ms_metrics *m, bool loaded)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.loaded = loaded;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_auth_failure(struct ms_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.auth_failures++;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_key_reload(struct ms_metrics *m, bool ok, int api_keys)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.key_reloads[ok ? 0 : 1]++;
	if (ok)
		m->s.api_keys = api_keys;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_tls_reload(struct ms_metrics *m, bool ok)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.tls_reloads[ok ? 0 : 1]++;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_tls_cert(struct ms_metrics *m, long long not_after)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.tls_not_after = not_after;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_set_transport(struct ms_metrics *m, bool tls, int api_keys)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.tls = tls;
	m->s.api_keys = api_keys;
	pthread_mutex_unlock(&m->mu);
}

void ms_metrics_set_connections(struct ms_metrics *m, unsigned open)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->s.connections = open;
	pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---- */

/* A sample value or bound: the shortest decimal that reads back as v, and
 * the exposition format's spellings of the special values. */
static const char *fmt_double(char *o, size_t n, double v)
{
	if (isnan(v))
		snprintf(o, n, "NaN");
	else if (isinf(v))
		snprintf(o, n, v > 0 ? "+Inf" : "-Inf");
	else {
		snprintf(o, n, "%.15g", v);
		if (strtod(o, NULL) != v)
			snprintf(o, n, "%.17g", v);
	}
	return o;
}

static void header(struct ms_strbuf *b, const char *name, const char *type, const char *help)
{
	ms_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A gauge, or a counter of seconds (type). */
static void sample(struct ms_strbuf *b, const char *ml, const char *type, const char *name,
		   const char *help, double v)
{
	char num[40];
	header(b, name, type, help);
	ms_strbuf_printf(b, "%s{model_name=\"%s\"} %s\n", name, ml, fmt_double(num, sizeof(num), v));
}

static void gauge(struct ms_strbuf *b, const char *ml, const char *name, const char *help, double v)
{
	sample(b, ml, "gauge", name, help, v);
}

static void counter(struct ms_strbuf *b, const char *ml, const char *name, const char *help,
		    uint64_t v)
{
	header(b, name, "counter", help);
	ms_strbuf_printf(b, "%s{model_name=\"%s\"} %" PRIu64 "\n", name, ml, v);
}

/* A SIGHUP reload's counter by result: [0] ok, [1] error. */
static void reloads(struct ms_strbuf *b, const char *ml, const char *name, const char *help,
		    const uint64_t n[2])
{
	header(b, name, "counter", help);
	for (int i = 0; i < 2; i++)
		ms_strbuf_printf(b, "%s{model_name=\"%s\",result=\"%s\"} %" PRIu64 "\n", name, ml,
				 i ? "error" : "ok", n[i]);
}

static void histogram(struct ms_strbuf *b, const char *ml, const struct hist_def *d,
		      const struct hist *h)
{
	char num[40];
	header(b, d->name, "histogram", d->help);
	uint64_t cum = 0;
	for (int i = 0; i < d->n_bounds; i++) {
		cum += h->counts[i];
		ms_strbuf_printf(b, "%s_bucket{model_name=\"%s\",le=\"%s\"} %" PRIu64 "\n", d->name,
				 ml, fmt_double(num, sizeof(num), d->bounds[i]), cum);
	}
	cum += h->counts[d->n_bounds];
	ms_strbuf_printf(b, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", d->name, ml,
			 cum);
	ms_strbuf_printf(b, "%s_sum{model_name=\"%s\"} %s\n", d->name, ml,
			 fmt_double(num, sizeof(num), h->sum));
	ms_strbuf_printf(b, "%s_count{model_name=\"%s\"} %" PRIu64 "\n", d->name, ml, h->count);
}

/* Speculative decoding (engine/spec.h), under vLLM's names and label. */
static void spec_decode(struct ms_strbuf *b, const char *ml, const struct ms_spec_stats *sp)
{
	counter(b, ml, "moeserve:spec_decode_num_drafts_total",
		"Drafts verified: requests' steps that ran drafted tokens.", sp->drafts);
	counter(b, ml, "moeserve:spec_decode_num_draft_tokens_total", "Drafted tokens verified.",
		sp->draft_tokens);
	counter(b, ml, "moeserve:spec_decode_num_accepted_tokens_total",
		"Drafted tokens accepted (kept as the model's own draws).", sp->accepted);
	/* positions up to the last that ever counted, so that a scrape does not
	 * carry 64 series of zeros, and a position once shown stays */
	int top = 0;
	for (int j = 0; j < MS_SPEC_MAX_TOKENS; j++)
		if (sp->accepted_at[j])
			top = j;
	const char *name = "moeserve:spec_decode_num_accepted_tokens_per_pos_total";
	header(b, name, "counter", "Drafts whose token at this position (0: the first) was accepted.");
	for (int j = 0; j <= top; j++)
		ms_strbuf_printf(b, "%s{model_name=\"%s\",position=\"%d\"} %" PRIu64 "\n", name, ml, j,
				 sp->accepted_at[j]);
	gauge(b, ml, "moeserve:spec_decode_cache_bytes",
	      "Bytes of the shared n-gram cache of recent answers (--spec-cache-bytes).",
	      (double)sp->cache_bytes);
	gauge(b, ml, "moeserve:spec_decode_index_bytes",
	      "Bytes of the running requests' own n-gram indexes.", (double)sp->index_bytes);
}

int ms_metrics_render(struct ms_metrics *m, const struct ms_engine_stats *st, char **out,
		      size_t *len, struct ms_err *err)
{
	*out = NULL;
	*len = 0;
	struct state *s = malloc(sizeof(*s));
	struct ms_strbuf b = {0};
	if (!s)
		return ms_err_set(err, -ENOMEM, "metrics: out of memory");
	pthread_mutex_lock(&m->mu);
	memcpy(s, &m->s, sizeof(*s));
	pthread_mutex_unlock(&m->mu);
	const char *ml = m->model_label;

	/* gauges */
	gauge(&b, ml, "moeserve:model_loaded", "1 when the model is loaded and serving, 0 while loading.",
	      s->loaded ? 1 : 0);
	gauge(&b, ml, "moeserve:num_requests_running",
	      "Requests in the running batch (prefilling or decoding).", st ? st->running : 0);
	gauge(&b, ml, "moeserve:num_requests_waiting", "Requests waiting for a batch slot.",
	      st ? st->waiting : 0);
	double usage = st ? st->kv_usage : 0;
	if (!(usage >= 0))
		usage = 0;
	if (usage > 1)
		usage = 1;
	gauge(&b, ml, "moeserve:kv_cache_usage_perc",
	      "Fraction of KV-cache pages held by requests (0..1).", usage);
	gauge(&b, ml, "moeserve:kv_cache_pages", "KV-cache pages in the pool.",
	      st ? st->kv_pages : 0);

	/* counters */
	counter(&b, ml, "moeserve:prompt_tokens_total",
		"Prompt tokens prefilled (computed; prefix-cache hits are counted apart).",
		st ? st->prompt_tokens : 0);
	counter(&b, ml, "moeserve:prompt_tokens_cached_total",
		"Prompt tokens served from the prefix cache.", st ? st->cached_tokens : 0);
	counter(&b, ml, "moeserve:generation_tokens_total", "Generated tokens.",
		st ? st->generation_tokens : 0);
	/* vLLM's prefix-cache counters, in tokens: every prompt token is looked
	 * up (queries); those found cached are hits */
	counter(&b, ml, "moeserve:prefix_cache_queries_total",
		"Prompt tokens looked up in the prefix cache.",
		st ? st->prompt_tokens + st->cached_tokens : 0);
	counter(&b, ml, "moeserve:prefix_cache_hits_total",
		"Prompt tokens found in the prefix cache.", st ? st->cached_tokens : 0);
	static const struct ms_spec_stats no_spec;
	spec_decode(&b, ml, st ? &st->spec : &no_spec);
	counter(&b, ml, "moeserve:harmony_parse_errors_total",
		"Malformed harmony output from the model, recovered as plain content.",
		s->harmony_errors);
	counter(&b, ml, "moeserve:structured_grammar_compiles_total",
		"Structured-output grammars compiled (cache misses).", s->gr.compiles);
	counter(&b, ml, "moeserve:structured_grammar_cache_hits_total",
		"Structured-output requests whose grammar was compiled already.", s->gr.hits);
	sample(&b, ml, "counter", "moeserve:structured_grammar_compile_seconds_total",
	       "Time spent compiling structured-output grammars (s).", s->gr.compile_s);

	header(&b, "moeserve:request_success_total", "counter", "Finished requests by finish reason.");
	for (int i = 0; i < s->n_reasons; i++) {
		char *r = escape_label(s->reason_names[i]);
		if (!r) {
			b.oom = true;
			break;
		}
		ms_strbuf_printf(&b, "moeserve:request_success_total{model_name=\"%s\","
				 "finished_reason=\"%s\"} %" PRIu64 "\n", ml, r, s->reason_counts[i]);
		free(r);
	}

	header(&b, "moeserve:http_requests_total", "counter", "HTTP responses by method and status code.");
	for (int mi = 0; mi < N_METHODS; mi++)
		for (int si = 0; si < N_STATUS; si++)
			if (s->http[mi][si])
				ms_strbuf_printf(&b, "moeserve:http_requests_total{model_name=\"%s\","
						 "method=\"%s\",status=\"%d\"} %" PRIu64 "\n", ml,
						 http_methods[mi], si == N_STATUS - 1 ? 0 : si + STATUS_LO,
						 s->http[mi][si]);

	/* security and transport */
	gauge(&b, ml, "moeserve:tls_enabled", "1 when the server speaks HTTPS only (--tls-cert).",
	      s->tls ? 1 : 0);
	gauge(&b, ml, "moeserve:api_keys", "API keys accepted now (0: no authentication).",
	      s->api_keys);
	gauge(&b, ml, "moeserve:http_connections", "Open HTTP connections (--max-connections).",
	      s->connections);
	counter(&b, ml, "moeserve:auth_failures_total",
		"Requests refused with 401: no, or no valid, API key.", s->auth_failures);
	reloads(&b, ml, "moeserve:api_key_reloads_total",
		"Rereadings of --api-key-file on SIGHUP, by result (error: the old keys kept).",
		s->key_reloads);
	reloads(&b, ml, "moeserve:tls_certificate_reloads_total",
		"Rereadings of --tls-cert and --tls-key on SIGHUP, by result (error: the old pair "
		"served).", s->tls_reloads);
	gauge(&b, ml, "moeserve:tls_certificate_expiry_timestamp_seconds",
	      "When the served certificate expires (Unix time; 0: no TLS).",
	      (double)s->tls_not_after);

	/* histograms */
	for (int h = 0; h < H_COUNT; h++)
		histogram(&b, ml, &hist_defs[h], &s->hist[h]);
	/* the inter-token latency also under vLLM's current name: one
	 * histogram, rendered twice */
	struct hist_def itl = hist_defs[H_ITL];
	itl.name = "moeserve:inter_token_latency_seconds";
	itl.help = "Time between two generated tokens of a request, in seconds (vLLM's current name "
		   "of time_per_output_token_seconds).";
	histogram(&b, ml, &itl, &s->hist[H_ITL]);

	free(s);
	*len = b.len;
	/* an incomplete text is never served: the scrape fails instead */
	if (!(*out = ms_strbuf_take(&b))) {
		*len = 0;
		return ms_err_set(err, -ENOMEM, "metrics: out of memory while rendering");
	}
	return 0;
}
