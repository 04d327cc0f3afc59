/*
 * http.c: the transport. libmicrohttpd's connections (one thread each),
 * routes, auth, body limits, the error envelope on the wire, and the SSE
 * stream's sending side. What a body asks is parsed by request.c, run on
 * the engine by bridge.c and written by response.c.
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
#include <sys/socket.h>

#include "bridge.h"
#include "grammar-cache.h"
#include "ms-json.h"
#include "model.h"
#include "ms-clock.h"
#include "request.h"
#include "response.h"
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
	int retry_after;  /* a 429/503's Retry-After (s); 0: 1 */
};

/* ---- responses ---- */

static void add_common_headers(struct ms_server *s, struct MHD_Response *r)
{
	if (s->cfg.cors_origin) {
		MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors_origin);
		MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
		MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	}
}

/* Queue r (its Content-Type and the common headers added) and let go of it. */
static enum MHD_Result queue(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			     int status, const char *ctype, struct MHD_Response *r)
{
	MHD_add_response_header(r, "Content-Type", ctype);
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
	struct MHD_Response *r = MHD_create_response_from_buffer(
		strlen(ms_resp_oom_body), (void *)ms_resp_oom_body, MHD_RESPMEM_PERSISTENT);
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

/* The OpenAI error envelope; code: its "code" string (NULL: the status);
 * allow: the Allow header of a 405, or NULL. */
static enum MHD_Result error_response_code(struct ms_server *s, struct MHD_Connection *c,
					   struct conn *k, int status, const char *type,
					   const char *param, const char *code, const char *allow,
					   const char *msg)
{
	unsigned long f0 = ms_json_failures(); /* before building: its own failures count */
	char *body = ms_json_print(ms_resp_error_code(status, type, param, code, msg), f0);
	if (!body)
		return send_oom(s, c, k);
	struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(strlen(body), body,
										     free);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	if (allow)
		MHD_add_response_header(r, "Allow", allow);
	return queue(s, c, k, status, "application/json", r);
}

static enum MHD_Result error_response(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				      int status, const char *type, const char *param, const char *allow,
				      const char *msg)
{
	return error_response_code(s, c, k, status, type, param, NULL, allow, msg);
}

static enum MHD_Result send_error(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  int status, const char *type, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

static enum MHD_Result send_error(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  int status, const char *type, const char *param, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return error_response(s, c, k, status, type, param, NULL, msg);
}

#define OOM() send_error(s, c, k, 500, "server_error", NULL, "out of memory")

static enum MHD_Result send_req_error(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				      const struct ms_req_error *e)
{
	return error_response_code(s, c, k, e->status, e->type, e->param, e->code, NULL, e->msg);
}

/* Map an engine refusal to its HTTP status. A full queue is a 429 and a
 * KV cache whose queue holds a cache's worth already a 503, both with the
 * engine's guess of when a request will be taken as Retry-After; a
 * request that can never fit is a 400 at once. */
static enum MHD_Result send_submit_error(struct ms_server *s, struct MHD_Connection *c,
					 struct conn *k, const struct ms_err *err)
{
	if (err->code == -EBUSY || err->code == -EAGAIN) {
		struct ms_engine_stats st;
		ms_engine_get_stats(s->engine, &st);
		k->retry_after = st.retry_after_s;
	}
	switch (err->code) {
	case -EBUSY:
		return send_error(s, c, k, 429, "rate_limit_exceeded", NULL, "%s; retry later", err->msg);
	case -EAGAIN:
		return error_response_code(s, c, k, 503, "server_error", NULL, "kv_cache_exhausted",
					   NULL, err->msg);
	case -EIO: /* the model's weights are gone (bridge.c marked /health failed) */
		return send_error(s, c, k, 503, "server_error", NULL, "%s", err->msg);
	case -E2BIG: /* Codex and the SDKs know this code: the prompt must shrink */
		return error_response_code(s, c, k, 400, "invalid_request_error", NULL,
					   "context_length_exceeded", NULL, err->msg);
	case -ENOSPC:
	case -EINVAL:
		return send_error(s, c, k, 400, "invalid_request_error", NULL, "%s", err->msg);
	default:
		return send_error(s, c, k, 500, "server_error", NULL, "%s", err->msg);
	}
}

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

/* ---- streaming responses ---- */

struct stream {
	struct ms_job *jb;
	struct MHD_Connection *c;
	double keepalive_at;
	bool failing;       /* the job failed: the error event, then the end */
	char *error_event;  /* its SSE text (NULL: ms_resp_oom_event) */
	size_t error_sent;  /* bytes of it sent */
};

/* The job's error as one SSE event: the error envelope with the job's
 * reason; NULL when even that cannot be built. */
static char *error_event(const struct ms_job *jb)
{
	int status;
	const char *msg = ms_job_error(jb, &status);
	unsigned long f0 = ms_json_failures();
	char *body = ms_json_print(ms_resp_error(status, "server_error", NULL, msg), f0), *ev = NULL;
	if (body && asprintf(&ev, "data: %s\n\n", body) < 0)
		ev = NULL;
	free(body);
	return ev;
}

/* The stream cannot go on: what is pending may lack a part, so it is
 * dropped; the client gets the error event, then the connection ends
 * without the stream's end. */
static ssize_t stream_fail(struct stream *st, char *buf, size_t max)
{
	const char *ev = st->error_event ? st->error_event : ms_resp_oom_event;
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
		if (jb->finished_all)
			return MHD_CONTENT_READER_END_OF_STREAM;
		bool ka = false;
		if (!ms_job_advance(jb, client_gone, st->c, st->keepalive_at, &ka))
			return MHD_CONTENT_READER_END_WITH_ERROR; /* the client left: cancelled */
		if (ms_job_failed(jb)) {
			st->failing = true;
			st->error_event = error_event(jb);
			ms_job_cancel(jb);
			continue;
		}
		if (ka && jb->out.len == 0)
			ms_strbuf_str(&jb->out, ": keep-alive\n\n"); /* a comment: clients ignore it */
		st->keepalive_at = ms_now_s() + jb->s->cfg.keepalive_s;
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
	st->keepalive_at = ms_now_s() + s->cfg.keepalive_s;
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

/* Run the job to the end: a streamed response, or a wait then one JSON. */
static enum MHD_Result respond(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			       struct ms_job *jb)
{
	/* in_flight counts the response too, until it has been sent
	 * (on_completed): a SIGTERM drain that waits for in_flight to reach 0
	 * never cuts an answer whose generation just finished */
	k->responding = true;
	atomic_fetch_add(&s->in_flight, 1);
	if (jb->rq->stream)
		return respond_stream(s, c, k, jb);
	while (!jb->finished_all) {
		if (!ms_job_advance(jb, client_gone, c, 0, NULL)) {
			ms_job_free(jb); /* the client left; its calls are cancelled */
			k->status = 499;
			return MHD_NO;
		}
	}
	for (int i = 0; i < jb->n; i++) {
		k->prompt_tokens += jb->ch[i].prompt_tok;
		k->gen_tokens += jb->ch[i].completion_tok;
	}
	if (ms_job_failed(jb)) {
		int status;
		char msg[sizeof(jb->error)];
		snprintf(msg, sizeof(msg), "%s", ms_job_error(jb, &status));
		ms_job_free(jb);
		return send_error(s, c, k, status, "server_error", NULL, "%s", msg);
	}
	cJSON *j = ms_resp_final(jb);
	ms_job_free(jb);
	return send_json(s, c, k, 200, j);
}

/* ---- endpoints ---- */

static struct ms_req_model req_model(const struct ms_server *s)
{
	return (struct ms_req_model){
		.name = s->cfg.model_name, .vocab = s->model ? s->model->cfg.vocab : 0,
		.max_model_len = s->max_model_len, .tok = s->tok, .grammars = s->grammars,
		.harmony = s->harmony,
		.hids = s->hids, .eos = s->eos, .n_eos = s->n_eos,
		.default_max_tokens = s->cfg.max_tokens,
	};
}

/* Queue rq's calls and answer them (rq taken). */
static enum MHD_Result run_job(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			       struct ms_req_gen *rq)
{
	struct ms_job *jb = ms_job_new(s, rq);
	if (!jb)
		return OOM();
	struct ms_err err = {0};
	if (ms_job_submit(jb, &err)) {
		enum MHD_Result r = send_submit_error(s, c, k, &err);
		/* calls already queued are cancelled; waiting for their FINISH
		 * before freeing is the calls' refcount's job */
		ms_job_free(jb);
		return r;
	}
	return respond(s, c, k, jb);
}

/* POST /v1/completions, /v1/chat/completions */
static enum MHD_Result h_generate(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  cJSON *req, bool chat)
{
	struct ms_req_model m = req_model(s);
	struct ms_req_gen *rq;
	struct ms_req_error e;
	if (chat ? ms_req_chat(&m, req, &rq, &e) : ms_req_completion(&m, req, &rq, &e))
		return send_req_error(s, c, k, &e);
	return run_job(s, c, k, rq);
}

/* POST /v1/responses: previous_response_id's conversation from the store,
 * then this turn. */
static enum MHD_Result h_responses(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				   cJSON *req)
{
	struct ms_req_model m = req_model(s);
	const cJSON *prev = cJSON_GetObjectItemCaseSensitive(req, "previous_response_id");
	cJSON *items = NULL;
	if (cJSON_IsString(prev) && !ms_rsp_store_get(&s->rstore, prev->valuestring, NULL, &items)) {
		char msg[256];
		snprintf(msg, sizeof(msg), "previous_response_id: no stored response \"%.64s\" (never "
			 "stored, evicted after --responses-store %d, or deleted)", prev->valuestring,
			 s->rstore.cap);
		cJSON_Delete(req);
		return error_response(s, c, k, 404, "invalid_request_error", "previous_response_id",
				      NULL, msg);
	}
	struct ms_req_gen *rq;
	struct ms_req_error e;
	int rc = ms_req_responses(&m, req, items, &rq, &e);
	cJSON_Delete(items);
	if (rc)
		return send_req_error(s, c, k, &e);
	if (rq->ignored_tool && !atomic_exchange(&s->warned_tool, true))
		fprintf(stderr, "moeserve: note: ignoring tools of type \"%s\" (function tools only; "
			"logged once)\n", rq->ignored_tool);
	return run_job(s, c, k, rq);
}

/* GET and DELETE /v1/responses/{id} */
static enum MHD_Result h_response_id(struct ms_server *s, struct MHD_Connection *c,
				     struct conn *k, const char *id, bool del)
{
	cJSON *resp = NULL;
	bool found = del ? ms_rsp_store_delete(&s->rstore, id)
			 : ms_rsp_store_get(&s->rstore, id, &resp, NULL);
	if (!found)
		return send_error(s, c, k, 404, "invalid_request_error", "response_id",
				  "no stored response \"%.64s\"", id);
	if (!del)
		return send_json(s, c, k, 200, resp);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "id", id);
	cJSON_AddStringToObject(j, "object", "response");
	cJSON_AddBoolToObject(j, "deleted", true);
	return send_json(s, c, k, 200, j);
}

static enum MHD_Result h_tokenize(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  cJSON *req)
{
	struct ms_req_model m = req_model(s);
	struct ms_req_error e;
	int32_t *ids;
	size_t n;
	int rc = ms_req_tokenize(&m, req, &ids, &n, &e);
	cJSON_Delete(req);
	if (rc)
		return send_req_error(s, c, k, &e);
	cJSON *j = ms_resp_tokens(ids, n, s->max_model_len);
	free(ids);
	return send_json(s, c, k, 200, j);
}

static enum MHD_Result h_detokenize(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				    cJSON *req)
{
	struct ms_req_model m = req_model(s);
	struct ms_req_error e;
	char *text;
	size_t len;
	int rc = ms_req_detokenize(&m, req, &text, &len, &e);
	cJSON_Delete(req);
	if (rc)
		return send_req_error(s, c, k, &e);
	cJSON *j = ms_resp_text(text);
	free(text);
	return send_json(s, c, k, 200, j);
}

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

static enum MHD_Result h_health(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	char reason[sizeof(s->reason)];
	int st = read_status(s, reason, sizeof(reason));
	if (st == MS_SERVER_READY)
		return send_json(s, c, k, 200, ms_resp_status("ok", NULL));
	return send_json(s, c, k, 503, ms_resp_status(st == MS_SERVER_LOADING ? "loading"
						      : st == MS_SERVER_FAILED ? "failed" : "draining",
						      reason));
}

static enum MHD_Result h_models(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				const char *one)
{
	if (!one)
		return send_json(s, c, k, 200, ms_resp_models(s->cfg.model_name, s->max_model_len));
	if (strcmp(one, s->cfg.model_name))
		return send_error(s, c, k, 404, "invalid_request_error", "model",
				  "the model \"%s\" does not exist (this server has \"%s\")", one,
				  s->cfg.model_name);
	return send_json(s, c, k, 200, ms_resp_model(s->cfg.model_name, s->max_model_len));
}

static enum MHD_Result h_metrics(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	struct ms_engine_stats st;
	bool ready = atomic_load(&s->state) == MS_SERVER_READY && s->engine;
	if (ready)
		ms_engine_get_stats(s->engine, &st);
	if (ready && s->grammars) {
		struct ms_grammar_cache_stats gs;
		ms_grammar_cache_get_stats(s->grammars, &gs);
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
		return send_error(s, c, k, 500, "server_error", NULL, "%s", err.msg);
	return send_text(s, c, k, 200, MS_METRICS_CONTENT_TYPE, out, len);
}

/* ---- dispatch ---- */

static void warn_unknown_fields(struct ms_server *s, const cJSON *req)
{
	if (atomic_load(&s->warned_unknown))
		return;
	const char *f = ms_req_unknown_field(req);
	if (f && !atomic_exchange(&s->warned_unknown, true))
		fprintf(stderr, "moeserve: note: ignoring unknown request field \"%s\" (logged once)\n", f);
}

/* The key is compared with every accepted key in constant time (auth.c). */
static bool authorized(struct ms_server *s, struct MHD_Connection *c)
{
	if (!ms_auth_enabled(&s->auth))
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (ms_auth_check(&s->auth, h))
		return true;
	ms_metrics_auth_failure(s->metrics);
	return false;
}

static bool known_route(const char *u)
{
	return !strcmp(u, "/v1/completions") || !strcmp(u, "/v1/chat/completions") ||
	       !strcmp(u, "/v1/responses") || (!strncmp(u, "/v1/responses/", 14) && u[14]) ||
	       !strcmp(u, "/v1/models") || !strncmp(u, "/v1/models/", 11) || !strcmp(u, "/tokenize") ||
	       !strcmp(u, "/detokenize");
}

/* 405: the error envelope like every other error, plus Allow. */
static enum MHD_Result method_not_allowed(struct ms_server *s, struct MHD_Connection *c,
					  struct conn *k)
{
	const char *u = k->path;
	const char *allow = !strncmp(u, "/v1/models", 10) || !strcmp(u, "/health") ||
			    !strcmp(u, "/live") || !strcmp(u, "/metrics") ? "GET"
			    : !strncmp(u, "/v1/responses/", 14) ? "GET, DELETE" : "POST";
	char msg[512];
	snprintf(msg, sizeof(msg), "method %s not allowed on %s (allowed: %s)", k->method, u, allow);
	return error_response(s, c, k, 405, "invalid_request_error", NULL, allow, msg);
}

/* The POST routes: their body. */
static enum MHD_Result dispatch_body(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	const char *u = k->path;
	if (k->too_big)
		return send_error(s, c, k, 413, "invalid_request_error", NULL,
				  "the body is larger than %zu bytes (--max-body-bytes)", s->cfg.max_body_bytes);
	if (k->oom)
		return OOM();
	struct ms_req_model m = req_model(s);
	struct ms_req_error e = {0}; /* ms_req_body's 404 leaves "code" unset */
	cJSON *req;
	if (ms_req_body(&m, k->body, k->len, &req, &e))
		return send_req_error(s, c, k, &e);
	if (!strcmp(u, "/tokenize"))
		return h_tokenize(s, c, k, req);
	if (!strcmp(u, "/detokenize"))
		return h_detokenize(s, c, k, req);
	if (!strcmp(u, "/v1/responses"))
		return h_responses(s, c, k, req); /* Codex's extra fields are expected there */
	warn_unknown_fields(s, req);
	return h_generate(s, c, k, req, strcmp(u, "/v1/completions") != 0);
}

static enum MHD_Result dispatch(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	const char *m = k->method, *u = k->path;
	bool get = !strcmp(m, "GET"), post = !strcmp(m, "POST");
	if (!strcmp(m, "OPTIONS") && s->cfg.cors_origin)
		return send_text(s, c, k, 204, "text/plain", NULL, 0);
	/* unauthenticated, cheap */
	if (!strcmp(u, "/health") || !strcmp(u, "/live") || !strcmp(u, "/metrics")) {
		if (!get)
			return method_not_allowed(s, c, k);
		if (!strcmp(u, "/live"))
			return send_json(s, c, k, 200, ms_resp_status("alive", NULL));
		return !strcmp(u, "/health") ? h_health(s, c, k) : h_metrics(s, c, k);
	}
	if (!known_route(u))
		return send_error(s, c, k, 404, "invalid_request_error", NULL, "no route %s %s", m, u);
	if (!authorized(s, c))
		return send_error(s, c, k, 401, "authentication_error", NULL,
				  "a valid \"Authorization: Bearer <key>\" header is required");
	bool wants_get = !strncmp(u, "/v1/models", 10);
	bool by_id = !strncmp(u, "/v1/responses/", 14), del = !strcmp(m, "DELETE");
	if (by_id ? !get && !del : wants_get ? !get : !post)
		return method_not_allowed(s, c, k);
	char reason[sizeof(s->reason)];
	int st = read_status(s, reason, sizeof(reason));
	if (st != MS_SERVER_READY)
		return send_error(s, c, k, 503, "server_unavailable", NULL, "the server is %s: %s",
				  st == MS_SERVER_LOADING ? "loading the model" : st == MS_SERVER_FAILED
				  ? "not serving" : "shutting down", reason);
	if (wants_get)
		return h_models(s, c, k, u[10] == '/' ? u + 11 : NULL);
	if (by_id)
		return h_response_id(s, c, k, u + 14, del);
	return dispatch_body(s, c, k);
}

/* ---- libmicrohttpd glue ---- */

static struct conn *conn_new(struct ms_server *s, struct MHD_Connection *c, const char *url,
			     const char *method)
{
	struct conn *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->t0 = ms_now_s();
	k->json0 = ms_json_failures();
	snprintf(k->method, sizeof(k->method), "%s", method);
	snprintf(k->path, sizeof(k->path), "%s", url);
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
		return send_error(s, c, k, 413, "invalid_request_error", NULL,
				  "the body is larger than %zu bytes (--max-body-bytes)", s->cfg.max_body_bytes);
	return dispatch(s, c, k);
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
	double ms = (ms_now_s() - k->t0) * 1000.0;
	if (s->metrics)
		ms_metrics_http(s->metrics, k->method, status);
	if (s->cfg.log_json)
		fprintf(stderr, "{\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,\"prompt_tokens\":%lld,"
			"\"completion_tokens\":%lld,\"latency_ms\":%.1f}\n", k->method, k->path, status,
			(long long)k->prompt_tokens, (long long)k->gen_tokens, ms);
	else
		fprintf(stderr, "%s %s %d prompt=%lld completion=%lld %.1fms\n", k->method, k->path,
			status, (long long)k->prompt_tokens, (long long)k->gen_tokens, ms);
	if (k->responding)
		atomic_fetch_sub(&s->in_flight, 1);
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

int ms_server_start(struct ms_server *s, const struct ms_server_config *cfg,
		    struct ms_metrics *metrics, struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	s->metrics = metrics;
	ms_json_init(); /* before the connection threads */
	pthread_mutex_init(&s->reason_mu, NULL);
	ms_rsp_store_init(&s->rstore, cfg->responses_store);
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
	s->model = m;
	s->tok = tok;
	s->engine = e;
	s->max_model_len = m->cfg.max_pos;
	s->n_eos = m->cfg.n_eos < 8 ? m->cfg.n_eos : 8;
	for (int i = 0; i < s->n_eos; i++)
		s->eos[i] = (int32_t)m->cfg.eos_ids[i];
	if (tok) {
		s->hids = ms_harmony_ids_find(tok);
		s->harmony = ms_harmony_ids_complete(&s->hids);
		/* structured outputs; without (out of memory) they are refused */
		struct ms_err err = {0};
		if (ms_grammar_cache_new(ms_tokenizer_vocab(tok), m->cfg.vocab, s->cfg.grammar_cache,
					 m->be->mask_words, &s->grammars, &err))
			fprintf(stderr, "moeserve: structured outputs are off: %s\n", err.msg);
	}
	if (s->metrics)
		ms_metrics_set_loaded(s->metrics, true);
	set_status(s, MS_SERVER_READY, "");
}

void ms_server_set_failed(struct ms_server *s, const char *reason)
{
	set_status(s, MS_SERVER_FAILED, reason);
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
	if (s->daemon) {
		MHD_stop_daemon(s->daemon); /* joins its threads: none reads the reason now */
		ms_auth_free(&s->auth);
		ms_tls_free();
		pthread_mutex_destroy(&s->reason_mu);
		ms_rsp_store_free(&s->rstore);
		ms_grammar_cache_free(s->grammars);
		s->grammars = NULL;
	}
	s->daemon = NULL;
}
