/*
 * http.c: the transport. libmicrohttpd's connections (one thread each),
 * the route table, auth, body limits, the API's replies on the wire, and
 * the SSE stream's sending side. What a body asks is answered by the API
 * (api.c: parsed by request.c, run on the engine by job.c and written
 * by answer.c).
 */
#include "http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "job.h"
#include "grammar-cache.h"
#include "ms-json.h"
#include "model.h"
#include "ms-clock.h"
#include "request.h"
#include "answer.h"
#include "tls.h"

/* ---- per-connection state ---- */

struct conn {
	char method[8];
	char path[256];
	char *body;
	size_t len, cap;
	bool too_big;
	bool oom;             /* the body could not be kept */
	unsigned long json0;  /* this thread's cJSON failures when the request came */
	double t0;
	int64_t prompt_tokens, gen_tokens;
	int status;
	bool responding;  /* a generation's response is under way: counted in in_flight */
	enum ms_dialect dialect; /* the route's: how its errors are written */
	int retry_after;  /* a 429/503's Retry-After (s); 0: 1 */
	char rid[MS_REQUEST_ID_MAX + 1]; /* X-Request-Id: the client's, or made here */
};

/* ---- responses ---- */

static void add_common_headers(struct ms_server *s, struct MHD_Response *r)
{
	if (s->cfg.cors_origin) {
		MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors_origin);
		MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, "
					"x-api-key, anthropic-version, anthropic-beta");
		MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	}
}

/* Queue r (its Content-Type and the common headers added) and let go of it. */
static enum MHD_Result queue(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			     int status, const char *ctype, struct MHD_Response *r)
{
	MHD_add_response_header(r, "Content-Type", ctype);
	MHD_add_response_header(r, "X-Request-Id", k->rid);
	add_common_headers(s, r);
	/* every 429 and 503 (queue, KV cache, loading, draining, failed) says
	 * when to come back: clients (the OpenAI SDKs, load balancers) wait
	 * that long instead of retrying at once */
	if ((status == 429 || status == 503) && !MHD_get_response_header(r, "Retry-After")) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", k->retry_after > 0 ? k->retry_after : 1);
		MHD_add_response_header(r, "Retry-After", ra);
	}
	k->status = status;
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

/* The 500 sent when not even its message can be built. */
static enum MHD_Result send_oom(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	const char *body = ms_answer_oom_body(k->dialect);
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
								 MHD_RESPMEM_PERSISTENT);
	return r ? queue(s, c, k, 500, "application/json", r) : MHD_NO;
}

/* body: malloc'd (taken), or NULL when len is 0. */
static enum MHD_Result send_text(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				 int status, const char *ctype, char *body, size_t len)
{
	/* freed by our free, not libmicrohttpd's: the fault-injection build
	 * (config/ms-fault.h) tracks every block our code allocates */
	struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, free);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	return queue(s, c, k, status, ctype, r);
}

/* j is taken. A tree that lost a part to a failed allocation (since the
 * request came) is not sent: a 500 is. */
static enum MHD_Result send_json(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				 int status, cJSON *j)
{
	char *body = ms_json_print(j, k->json0);
	if (!body)
		return send_oom(s, c, k);
	return send_text(s, c, k, status, "application/json", body, strlen(body));
}

/* An endpoint's answer on the wire (api.h). */
static enum MHD_Result respond(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			       struct ms_job *jb);
static enum MHD_Result respond_bg(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  struct ms_bg *bg, long pos);

static enum MHD_Result send_reply(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  struct ms_api_reply *r)
{
	if (r->retry_after)
		k->retry_after = r->retry_after;
	if (r->job)
		return respond(s, c, k, r->job);
	if (r->bg)
		return respond_bg(s, c, k, r->bg, r->bg_pos);
	if (r->oom)
		return send_oom(s, c, k);
	if (!r->text)
		return send_json(s, c, k, r->status, r->json);
	/* an error envelope, printed */
	struct MHD_Response *m = MHD_create_response_from_buffer_with_free_callback(strlen(r->text),
										     r->text, free);
	if (!m) {
		free(r->text);
		return MHD_NO;
	}
	if (r->status == 401)
		MHD_add_response_header(m, "WWW-Authenticate", "Bearer");
	if (r->allow)
		MHD_add_response_header(m, "Allow", r->allow);
	return queue(s, c, k, r->status, "application/json", m);
}

static enum MHD_Result send_error(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  int status, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* The transport's own refusals, in the API's error envelope. */
static enum MHD_Result send_error(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  int status, const char *type, const char *fmt, ...)
{
	struct ms_api_reply r = {.dialect = k->dialect};
	va_list ap;
	va_start(ap, fmt);
	ms_api_verror(&r, status, type, NULL, fmt, ap);
	va_end(ap);
	return send_reply(s, c, k, &r);
}

#define OOM() send_error(s, c, k, 500, "server_error", "out of memory")

/* Has the client closed its end? (readable with 0 bytes, or an error) */
static bool client_gone(void *ctx)
{
	struct MHD_Connection *c = ctx;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return false;
	struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
		return true;
	char b;
	ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0;
}

/* The job's tokens, for the access log (every call finished). */
static void count_tokens(struct conn *k, const struct ms_job *jb)
{
	k->prompt_tokens = k->gen_tokens = 0;
	for (int i = 0; i < jb->n; i++) {
		k->prompt_tokens += jb->ch[i].prompt_tok;
		k->gen_tokens += jb->ch[i].completion_tok;
	}
}

/* ---- streaming responses ---- */

struct stream {
	struct ms_job *jb;
	struct MHD_Connection *c;
	struct conn *k;     /* the request's: its access-log line gets the tokens */
	double keepalive_at;
	bool failing;       /* the job failed: the error event, then the end */
	char *error_event;  /* its SSE text (NULL: ms_answer_oom_event) */
	size_t error_sent;  /* bytes of it sent */
};

/* The stream cannot go on: what is pending may lack a part, so it is
 * dropped; the client gets the error event, then the connection ends
 * without the stream's end. */
static ssize_t stream_fail(struct stream *st, char *buf, size_t max)
{
	const char *ev = st->error_event ? st->error_event : ms_answer_oom_event(ms_answer_dialect(st->jb));
	size_t len = strlen(ev), n = len - st->error_sent;
	if (!n)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	n = n < max ? n : max;
	memcpy(buf, ev + st->error_sent, n);
	st->error_sent += n;
	return (ssize_t)n;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct stream *st = cls;
	struct ms_job *jb = st->jb;
	for (;;) {
		if (st->failing)
			return stream_fail(st, buf, max);
		if (jb->out_pos < jb->out.len) {
			size_t n = jb->out.len - jb->out_pos < max ? jb->out.len - jb->out_pos : max;
			memcpy(buf, jb->out.p + jb->out_pos, n);
			jb->out_pos += n;
			if (jb->out_pos == jb->out.len) {
				ms_strbuf_reset(&jb->out);
				jb->out_pos = 0;
			}
			return (ssize_t)n;
		}
		if (jb->finished_all) {
			count_tokens(st->k, jb);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		bool ka = false;
		if (!ms_job_advance(jb, client_gone, st->c, st->keepalive_at, &ka))
			return MHD_CONTENT_READER_END_WITH_ERROR; /* the client left: cancelled */
		if (ms_job_failed(jb)) {
			st->failing = true;
			st->error_event = ms_answer_error_event(jb);
			ms_job_cancel(jb);
			continue;
		}
		if (ka && jb->out.len == 0)
			ms_strbuf_str(&jb->out, ms_answer_keepalive(jb));
		st->keepalive_at = ms_now_s() + jb->api->cfg.keepalive_s;
	}
}

static void stream_free(void *cls)
{
	struct stream *st = cls;
	/* the client may be gone before the end: stop what is left */
	if (!st->jb->finished_all)
		ms_job_cancel(st->jb);
	ms_job_free(st->jb);
	free(st->error_event);
	free(st);
}

static enum MHD_Result respond_stream(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				      struct ms_job *jb)
{
	struct stream *st = calloc(1, sizeof(*st));
	if (!st) {
		ms_job_cancel(jb);
		ms_job_free(jb);
		return OOM();
	}
	st->jb = jb;
	st->c = c;
	st->k = k;
	st->keepalive_at = ms_now_s() + s->api.cfg.keepalive_s;
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
								   stream_read, st, stream_free);
	if (!r) {
		stream_free(st);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	return queue(s, c, k, 200, "text/event-stream", r);
}

/* ---- a background response's stream ---- */

struct bg_stream {
	struct ms_bg *bg;
	struct MHD_Connection *c;
	size_t pos;
	int keepalive_s;
	double idle_since;
};

/* The run's stream as it grows; a client that leaves leaves the run
 * going (a background response outlives its readers). */
static ssize_t bg_read(void *cls, uint64_t at, char *buf, size_t max)
{
	(void)at;
	struct bg_stream *st = cls;
	for (;;) {
		long n = ms_bg_read(st->bg, &st->pos, buf, max, 0.1);
		if (n > 0) {
			st->idle_since = ms_now_s();
			return (ssize_t)n;
		}
		if (n < 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (client_gone(st->c))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (ms_now_s() - st->idle_since >= st->keepalive_s) {
			static const char ka[] = ": keep-alive\n\n";
			size_t m = sizeof(ka) - 1 < max ? sizeof(ka) - 1 : max;
			memcpy(buf, ka, m);
			st->idle_since = ms_now_s();
			return (ssize_t)m;
		}
	}
}

static void bg_stream_free(void *cls)
{
	struct bg_stream *st = cls;
	ms_bg_unref(st->bg);
	free(st);
}

static enum MHD_Result respond_bg(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  struct ms_bg *bg, long pos)
{
	struct bg_stream *st = calloc(1, sizeof(*st));
	if (!st) {
		ms_bg_unref(bg);
		return OOM();
	}
	*st = (struct bg_stream){.bg = bg, .c = c, .pos = (size_t)pos,
				 .keepalive_s = s->api.cfg.keepalive_s, .idle_since = ms_now_s()};
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, bg_read, st,
								   bg_stream_free);
	if (!r) {
		bg_stream_free(st);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	return queue(s, c, k, 200, "text/event-stream", r);
}

/* Run the job to the end: a streamed response, or a wait then one JSON. */
static enum MHD_Result respond(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			       struct ms_job *jb)
{
	/* in_flight counts the response too, until it has been sent
	 * (on_completed): a SIGTERM drain that waits for in_flight to reach 0
	 * never cuts an answer whose generation just finished */
	k->responding = true;
	atomic_fetch_add(&s->api.in_flight, 1);
	if (jb->rq->stream)
		return respond_stream(s, c, k, jb);
	while (!jb->finished_all) {
		if (!ms_job_advance(jb, client_gone, c, 0, NULL)) {
			ms_job_free(jb); /* the client left; its calls are cancelled */
			k->status = 499;
			return MHD_NO;
		}
	}
	count_tokens(k, jb);
	struct ms_api_reply r = {0};
	ms_api_job_answer(jb, &r);
	return send_reply(s, c, k, &r);
}

/* ---- the daemon's state ---- */

/* The state and its reason, read together. */
static int read_status(struct ms_server *s, char *reason, size_t len)
{
	pthread_mutex_lock(&s->reason_mu);
	int st = atomic_load(&s->state);
	snprintf(reason, len, "%s", s->reason);
	pthread_mutex_unlock(&s->reason_mu);
	return st;
}

/* Change the state; reason NULL leaves it as it is. */
static void set_status(struct ms_server *s, int st, const char *reason)
{
	pthread_mutex_lock(&s->reason_mu);
	if (reason)
		snprintf(s->reason, sizeof(s->reason), "%s", reason);
	atomic_store(&s->state, st);
	pthread_mutex_unlock(&s->reason_mu);
}

/* ---- the transport's endpoints ---- */

static enum MHD_Result r_health(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				const char *rest)
{
	(void)rest;
	char reason[sizeof(s->reason)];
	int st = read_status(s, reason, sizeof(reason));
	if (st == MS_SERVER_READY)
		return send_json(s, c, k, 200, ms_answer_status("ok", NULL));
	return send_json(s, c, k, 503, ms_answer_status(st == MS_SERVER_LOADING ? "loading"
						      : st == MS_SERVER_FAILED ? "failed" : "draining",
						      reason));
}

static enum MHD_Result r_live(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			      const char *rest)
{
	(void)rest;
	return send_json(s, c, k, 200, ms_answer_status("alive", NULL));
}

static enum MHD_Result r_metrics(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				 const char *rest)
{
	(void)rest;
	struct ms_engine_stats st;
	bool ready = atomic_load(&s->state) == MS_SERVER_READY && s->api.engine;
	if (ready)
		ms_engine_get_stats(s->api.engine, &st);
	if (ready && s->api.grammars) {
		struct ms_grammar_cache_stats gs;
		ms_grammar_cache_get_stats(s->api.grammars, &gs);
		ms_metrics_set_grammars(s->metrics, &(struct ms_metrics_grammars){
			.compiles = gs.misses, .hits = gs.hits, .compile_s = gs.compile_s});
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon,
							     MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
	if (di)
		ms_metrics_set_connections(s->metrics, di->num_connections);
	char *out;
	size_t len;
	struct ms_err err = {0};
	if (ms_metrics_render(s->metrics, ready ? &st : NULL, &out, &len, &err))
		return send_error(s, c, k, 500, "server_error", "%s", err.msg);
	return send_text(s, c, k, 200, MS_METRICS_CONTENT_TYPE, out, len);
}

/* ---- the API's endpoints (api.h) ---- */

static enum MHD_Result r_models(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				const char *rest)
{
	struct ms_api_reply r = {0};
	ms_api_models(&s->api, rest, &r);
	return send_reply(s, c, k, &r);
}

/* /v1/responses/{id}: GET (?stream=true&starting_after=N: a background
 * response's stream) or DELETE; {id}/cancel: POST; {id}/input_items: GET. */
static enum MHD_Result r_response_id(struct ms_server *s, struct MHD_Connection *c,
				     struct conn *k, const char *rest)
{
	struct ms_api_reply r = {0};
	char id[128];
	const char *slash = strchr(rest, '/'), *what = slash ? slash + 1 : "";
	snprintf(id, sizeof(id), "%.*s", slash ? (int)(slash - rest) : (int)strlen(rest), rest);
	const char *want = !*what ? (!strcmp(k->method, "POST") ? "GET, DELETE" : NULL)
			   : !strcmp(what, "cancel") ? (strcmp(k->method, "POST") ? "POST" : NULL)
			   : !strcmp(what, "input_items") ? (strcmp(k->method, "GET") ? "GET" : NULL) : "";
	if (want && !*want)
		return send_error(s, c, k, 404, "invalid_request_error", "no route %s %s", k->method,
				  k->path);
	if (want) {
		r.allow = want;
		ms_api_error(&r, 405, "invalid_request_error", NULL, "method %s not allowed on %s "
			     "(allowed: %s)", k->method, k->path, want);
	} else if (!strcmp(what, "cancel")) {
		ms_api_response_cancel(&s->api, id, &r);
	} else if (*what) {
		ms_api_response_input_items(&s->api, id, &r);
	} else {
		const char *st = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stream");
		const char *sa = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "starting_after");
		ms_api_response_id(&s->api, id, !strcmp(k->method, "DELETE"), st && !strcmp(st, "true"),
				   sa ? strtol(sa, NULL, 10) : -1, &r);
	}
	return send_reply(s, c, k, &r);
}

static void api_completions(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	ms_api_generate(a, req, false, r);
}

static void api_chat(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	ms_api_generate(a, req, true, r);
}

typedef void api_post_fn(struct ms_api *a, cJSON *req, struct ms_api_reply *r);

/* A POST route: its body as JSON, to the API. */
static enum MHD_Result post_route(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  api_post_fn *fn)
{
	if (k->too_big)
		return send_error(s, c, k, 413, "invalid_request_error",
				  "the body is larger than %zu bytes (--max-body-bytes)", s->cfg.max_body_bytes);
	if (k->oom)
		return OOM();
	struct ms_api_reply r = {.dialect = k->dialect};
	cJSON *req;
	if (ms_api_body(&s->api, k->body, k->len, &req, &r))
		fn(&s->api, req, &r);
	return send_reply(s, c, k, &r);
}

/* ---- the route table ---- */

enum { M_GET = 1, M_POST = 2, M_DELETE = 4 };

typedef enum MHD_Result route_fn(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				 const char *rest);

/* Every route, once: what it answers, to which methods, and whether it
 * needs an API key and a loaded model. */
struct route {
	const char *path;
	unsigned methods;
	const char *allow;     /* the methods, as a 405's Allow header says them */
	bool prefix;           /* path is a prefix; the rest is the handler's argument */
	bool nonempty;         /* a prefix route needs a rest */
	bool open;             /* probes and Prometheus: no key, and in any state */
	route_fn *fn;          /* a GET or DELETE route's handler, or */
	api_post_fn *post;     /* a POST route's endpoint */
	enum ms_dialect dialect; /* how its errors are written */
};

static const struct route routes[] = {
	{"/health", M_GET, "GET", false, false, true, r_health, NULL, MS_DIALECT_OPENAI},
	{"/live", M_GET, "GET", false, false, true, r_live, NULL, MS_DIALECT_OPENAI},
	{"/metrics", M_GET, "GET", false, false, true, r_metrics, NULL, MS_DIALECT_OPENAI},
	{"/v1/completions", M_POST, "POST", false, false, false, NULL, api_completions,
	 MS_DIALECT_OPENAI},
	{"/v1/chat/completions", M_POST, "POST", false, false, false, NULL, api_chat,
	 MS_DIALECT_OPENAI},
	/* Codex's extra fields are expected there: no unknown-field note */
	{"/v1/responses", M_POST, "POST", false, false, false, NULL, ms_api_responses,
	 MS_DIALECT_OPENAI},
	{"/v1/responses/input_tokens", M_POST, "POST", false, false, false, NULL,
	 ms_api_response_input_tokens, MS_DIALECT_OPENAI},
	{"/v1/responses/", M_GET | M_POST | M_DELETE, "GET, POST, DELETE", true, true, false,
	 r_response_id, NULL,
	 MS_DIALECT_OPENAI},
	/* Anthropic's Messages API; its clients add ?beta=true, which is the
	 * query, not the path */
	{"/v1/messages", M_POST, "POST", false, false, false, NULL, ms_api_messages,
	 MS_DIALECT_ANTHROPIC},
	{"/v1/messages/count_tokens", M_POST, "POST", false, false, false, NULL, ms_api_count_tokens,
	 MS_DIALECT_ANTHROPIC},
	{"/v1/models", M_GET, "GET", false, false, false, r_models, NULL, MS_DIALECT_OPENAI},
	{"/v1/models/", M_GET, "GET", true, false, false, r_models, NULL, MS_DIALECT_OPENAI},
	{"/tokenize", M_POST, "POST", false, false, false, NULL, ms_api_tokenize,
	 MS_DIALECT_OPENAI},
	{"/detokenize", M_POST, "POST", false, false, false, NULL, ms_api_detokenize,
	 MS_DIALECT_OPENAI},
};

/* u's route (*rest: the prefix route's rest, else NULL), or NULL. */
static const struct route *route_of(const char *u, const char **rest)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const struct route *rt = &routes[i];
		size_t n = strlen(rt->path);
		if (rt->prefix ? strncmp(u, rt->path, n) || (rt->nonempty && !u[n]) : strcmp(u, rt->path))
			continue;
		*rest = rt->prefix ? u + n : NULL;
		return rt;
	}
	return NULL;
}

static unsigned method_bit(const char *m)
{
	return !strcmp(m, "GET") ? M_GET : !strcmp(m, "POST") ? M_POST : !strcmp(m, "DELETE") ? M_DELETE : 0;
}

/* 405: the error envelope like every other error, plus Allow. */
static enum MHD_Result method_not_allowed(struct ms_server *s, struct MHD_Connection *c,
					  struct conn *k, const struct route *rt)
{
	struct ms_api_reply r = {.allow = rt->allow, .dialect = rt->dialect};
	ms_api_error(&r, 405, "invalid_request_error", NULL, "method %s not allowed on %s (allowed: %s)",
		     k->method, k->path, rt->allow);
	return send_reply(s, c, k, &r);
}

/* The key is compared with every accepted key in constant time (auth.c):
 * "Authorization: Bearer KEY" (OpenAI's clients), or "x-api-key: KEY"
 * (Anthropic's). */
static bool authorized(struct ms_server *s, struct MHD_Connection *c)
{
	if (!ms_auth_enabled(&s->auth))
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
	if (ms_auth_check(&s->auth, h) || (x && ms_auth_check_key(&s->auth, x)))
		return true;
	ms_metrics_auth_failure(s->metrics);
	return false;
}

/* Open routes answer first (cheap, unauthenticated); the others need a
 * route, a key, an allowed method and a ready model, in that order. */
static enum MHD_Result dispatch(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	const char *m = k->method, *u = k->path, *rest = NULL;
	if (!strcmp(m, "OPTIONS") && s->cfg.cors_origin)
		return send_text(s, c, k, 204, "text/plain", NULL, 0);
	const struct route *rt = route_of(u, &rest);
	if (!rt)
		return send_error(s, c, k, 404, "invalid_request_error", "no route %s %s", m, u);
	bool allowed = (method_bit(m) & rt->methods) != 0;
	if (rt->open)
		return allowed ? rt->fn(s, c, k, rest) : method_not_allowed(s, c, k, rt);
	if (!authorized(s, c))
		return send_error(s, c, k, 401, "authentication_error",
				  "a valid \"Authorization: Bearer <key>\" or \"x-api-key: <key>\" header is "
				  "required");
	if (!allowed)
		return method_not_allowed(s, c, k, rt);
	char reason[sizeof(s->reason)];
	int st = read_status(s, reason, sizeof(reason));
	if (st != MS_SERVER_READY)
		return send_error(s, c, k, 503, "server_unavailable", "the server is %s: %s",
				  st == MS_SERVER_LOADING ? "loading the model" : st == MS_SERVER_FAILED
				  ? "not serving" : "shutting down", reason);
	return rt->post ? post_route(s, c, k, rt->post) : rt->fn(s, c, k, rest);
}

/* ---- libmicrohttpd glue ---- */

/* The request's id: the client's X-Request-Id when it is 1 to
 * MS_REQUEST_ID_MAX visible ASCII bytes (it goes into log lines and a
 * header as it is), else 32 random hex digits. */
static void request_id(struct MHD_Connection *c, char *rid)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
	size_t n = h ? strlen(h) : 0;
	bool ok = n >= 1 && n <= MS_REQUEST_ID_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = h[i] > ' ' && h[i] < 0x7f && h[i] != '"' && h[i] != '\\';
	if (ok) {
		memcpy(rid, h, n + 1);
		return;
	}
	unsigned char b[16] = {0};
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		static atomic_ullong seq;
		unsigned long long v = atomic_fetch_add(&seq, 1) ^ (unsigned long long)time(NULL) << 20;
		memcpy(b, &v, sizeof(v));
	}
	for (int i = 0; i < 16; i++)
		snprintf(rid + 2 * i, 3, "%02x", b[i]);
}

static struct conn *conn_new(struct ms_server *s, struct MHD_Connection *c, const char *url,
			     const char *method)
{
	struct conn *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->t0 = ms_now_s();
	k->json0 = ms_json_failures();
	request_id(c, k->rid);
	snprintf(k->method, sizeof(k->method), "%s", method);
	snprintf(k->path, sizeof(k->path), "%s", url);
	const char *rest;
	const struct route *rt = route_of(url, &rest);
	/* an Anthropic client's other paths (batches, files) get its 404 */
	k->dialect = rt ? rt->dialect : !strncmp(url, "/v1/messages/", 13) ? MS_DIALECT_ANTHROPIC
									 : MS_DIALECT_OPENAI;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes)
		k->too_big = true;
	return k;
}

/* A piece of the body: kept up to --max-body-bytes. One that cannot be
 * kept (out of memory) is answered with a 500 once the body is in. */
static void take_upload(struct ms_server *s, struct conn *k, const char *upload, size_t n)
{
	if (!k->too_big && k->len + n > s->cfg.max_body_bytes)
		k->too_big = true;
	if (k->too_big || k->oom)
		return;
	if (k->len + n + 1 > k->cap) {
		size_t nc = k->cap ? k->cap : 4096;
		while (nc < k->len + n + 1)
			nc *= 2;
		char *nb = realloc(k->body, nc);
		if (!nb) {
			k->oom = true;
			return;
		}
		k->body = nb;
		k->cap = nc;
	}
	memcpy(k->body + k->len, upload, n);
	k->len += n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	struct ms_server *s = cls;
	struct conn *k = *con_cls;
	if (!k) {
		*con_cls = k = conn_new(s, c, url, method);
		return k ? MHD_YES : MHD_NO;
	}
	if (*upload_size) {
		take_upload(s, k, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (k->too_big && strcmp(k->path, "/health") && strcmp(k->path, "/live"))
		return send_error(s, c, k, 413, "invalid_request_error",
				  "the body is larger than %zu bytes (--max-body-bytes)", s->cfg.max_body_bytes);
	return dispatch(s, c, k);
}

/* in as a JSON string's body: quotes and backslashes escaped, control
 * bytes as '?' (a client chose the path). */
static void log_escape(const char *in, char *out, size_t cap)
{
	size_t o = 0;
	for (; *in && o + 2 < cap; in++) {
		if (*in == '"' || *in == '\\')
			out[o++] = '\\';
		out[o++] = (unsigned char)*in < 0x20 ? '?' : *in;
	}
	out[o] = '\0';
}

/* One line per request on stderr: when it ended (ISO 8601, UTC), what
 * it asked (the path without the query), how it ended, its tokens,
 * latency and id. */
static void access_log(const struct ms_server *s, const struct conn *k, int status)
{
	struct timespec ts;
	struct tm tm;
	char when[40], path[2 * sizeof(k->path)], method[2 * sizeof(k->method)];
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + n, sizeof(when) - n, ".%03ldZ", ts.tv_nsec / 1000000);
	log_escape(k->path, path, sizeof(path));
	log_escape(k->method, method, sizeof(method));
	double ms = (ms_now_s() - k->t0) * 1000.0;
	if (s->cfg.log_json)
		fprintf(stderr, "{\"time\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
			"\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"latency_ms\":%.1f,"
			"\"request_id\":\"%s\"}\n", when, method, path, status,
			(long long)k->prompt_tokens, (long long)k->gen_tokens, ms, k->rid);
	else
		fprintf(stderr, "%s %s %s %d prompt=%lld completion=%lld %.1fms id=%s\n", when, method,
			path, status, (long long)k->prompt_tokens, (long long)k->gen_tokens, ms, k->rid);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)c;
	struct ms_server *s = cls;
	struct conn *k = *con_cls;
	if (!k)
		return;
	int status = k->status ? k->status : 499;
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200)
		status = 499; /* the client went away */
	if (s->metrics)
		ms_metrics_http(s->metrics, k->method, status);
	if (!s->cfg.no_access_log)
		access_log(s, k, status);
	if (k->responding)
		atomic_fetch_sub(&s->api.in_flight, 1);
	free(k->body);
	free(k);
	*con_cls = NULL;
}

/* HTTPS asked: can this libmicrohttpd do it, and do the certificate, key,
 * password and priorities load? GnuTLS is asked directly, so that the
 * message says what is wrong rather than that the daemon did not start.
 * The pair loaded is the one served (tls.h: reloaded on SIGHUP). */
static int tls_check(const struct ms_server_config *cfg, struct ms_err *err)
{
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
	    MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES)
		return ms_err_set(err, -ENOTSUP, "--tls-cert: this libmicrohttpd (%s) is built "
				  "without TLS (HTTPS) or its certificate callback; put a TLS proxy in "
				  "front instead", MHD_get_version());
	if (cfg->tls_priorities) {
		gnutls_priority_t p;
		const char *pos = NULL;
		int rc = gnutls_priority_init(&p, cfg->tls_priorities, &pos);
		if (rc < 0)
			return ms_err_set(err, -EINVAL, "--tls-priorities: \"%s\" is not a GnuTLS priority "
					  "string (%s, at \"%s\")", cfg->tls_priorities,
					  gnutls_strerror(rc), pos ? pos : "");
		gnutls_priority_deinit(p);
	}
	return ms_tls_init(cfg->tls_cert_pem, cfg->tls_key_pem, cfg->tls_key_password, cfg->tls_cert,
			   cfg->tls_key, err);
}

/* The options that depend on the configuration, MHD_OPTION_END last. */
static void start_options(const struct ms_server_config *cfg, struct MHD_OptionItem *o)
{
	int n = 0;
	o[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
					 cfg->max_connections > 0 ? cfg->max_connections : 1024, NULL};
	if (cfg->max_connections_per_ip > 0)
		o[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT,
						 cfg->max_connections_per_ip, NULL};
	if (cfg->tls_cert_pem)
		o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
						 (void *)ms_tls_retrieve};
	if (cfg->tls_cert_pem && cfg->tls_priorities)
		o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
						 (void *)cfg->tls_priorities};
	o[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

/* The API's word that the weights are gone (api.h). */
static void api_failed(void *ctx, const char *reason)
{
	ms_server_set_failed(ctx, reason);
}

int ms_server_start(struct ms_server *s, const struct ms_server_config *cfg,
		    struct ms_metrics *metrics, struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	s->metrics = metrics;
	ms_json_init(); /* before the connection threads */
	pthread_mutex_init(&s->reason_mu, NULL);
	ms_api_init(&s->api, &cfg->api, metrics);
	s->api.failed = api_failed;
	s->api.failed_ctx = s;
	set_status(s, MS_SERVER_LOADING, "loading the model");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
	if (inet_pton(AF_INET, cfg->host, &a.sin_addr) != 1)
		return ms_err_set(err, -EINVAL, "--host: \"%s\" is not an IPv4 address", cfg->host);
	int rc = cfg->tls_cert_pem ? tls_check(cfg, err) : 0;
	if (rc)
		return rc;
	if ((rc = ms_auth_init(&s->auth, cfg->api_key, cfg->api_key_file, err))) {
		ms_tls_free();
		return cfg->api_key_file ? ms_err_prefix(err, "--api-key-file: ") : rc;
	}
	struct MHD_OptionItem opts[8];
	start_options(cfg, opts);
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
	if (cfg->tls_cert_pem)
		flags |= MHD_USE_TLS;
	s->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
				     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
				     MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)600,
				     MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	if (!s->daemon) {
		ms_auth_free(&s->auth);
		ms_tls_free();
		return ms_err_set(err, -EADDRINUSE, "cannot listen on %s:%d (in use, or not allowed)",
				  cfg->host, cfg->port);
	}
	if (cfg->agent_port && (rc = ms_agent_start(&s->agent, s, cfg->host, cfg->agent_port, err))) {
		MHD_stop_daemon(s->daemon);
		s->daemon = NULL;
		ms_auth_free(&s->auth);
		ms_tls_free();
		return rc;
	}
	ms_metrics_set_transport(metrics, cfg->tls_cert_pem != NULL,
				 ms_keyset_count(s->auth.set));
	if (cfg->tls_cert_pem)
		ms_metrics_tls_cert(metrics, ms_tls_not_after());
	return 0;
}

int ms_server_reload_tls(struct ms_server *s, struct ms_err *err)
{
	const struct ms_server_config *cfg = &s->cfg;
	if (!cfg->tls_cert_pem)
		return ms_err_set(err, -ENOENT, "no --tls-cert to reload");
	int rc = ms_tls_reload(cfg->tls_cert, cfg->tls_key, cfg->tls_key_password, err);
	ms_metrics_tls_reload(s->metrics, rc == 0);
	ms_metrics_tls_cert(s->metrics, ms_tls_not_after());
	return rc;
}

int ms_server_reload_keys(struct ms_server *s, int *n_keys, struct ms_err *err)
{
	*n_keys = 0;
	int rc = ms_auth_reload(&s->auth, n_keys, err);
	if (s->auth.file)
		ms_metrics_key_reload(s->metrics, rc == 0, *n_keys);
	return rc;
}

void ms_server_set_ready(struct ms_server *s, struct ms_model *m, struct ms_tokenizer *tok,
			 struct ms_engine *e)
{
	ms_api_set_model(&s->api, m, tok, e);
	if (s->metrics)
		ms_metrics_set_loaded(s->metrics, true);
	set_status(s, MS_SERVER_READY, "");
}

void ms_server_set_failed(struct ms_server *s, const char *reason)
{
	set_status(s, MS_SERVER_FAILED, reason);
}


void ms_server_set_draining(struct ms_server *s)
{
	set_status(s, MS_SERVER_DRAINING, "shutting down: the running requests finish");
}

void ms_server_quiesce(struct ms_server *s)
{
	set_status(s, MS_SERVER_DRAINING, "shutting down");
	if (s->daemon) {
		/* MHD stops accepting but leaves the socket listening: connections
		 * would wait in its backlog, unanswered, until the exit. Shut it
		 * down so that they are refused at once; it stays open (MHD's
		 * threads may still hold it) and goes with the process. */
		MHD_socket fd = MHD_quiesce_daemon(s->daemon);
		if (fd != MHD_INVALID_SOCKET)
			shutdown(fd, SHUT_RDWR);
	}
}

void ms_server_stop(struct ms_server *s)
{
	ms_agent_stop(&s->agent);
	if (s->daemon) {
		MHD_stop_daemon(s->daemon); /* joins its threads: none reads the reason now */
		ms_auth_free(&s->auth);
		ms_tls_free();
		pthread_mutex_destroy(&s->reason_mu);
		ms_api_free(&s->api);
	}
	s->daemon = NULL;
}
