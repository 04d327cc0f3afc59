/*
 * http.c: routes, the OpenAI wire formats, and the bridge from engine
 * events (engine thread) to responses (connection threads).
 *
 * A generation is a `struct gen` with one `struct call` per choice (n, or
 * several prompts). The engine callback copies each event into its call's
 * queue under the gen's lock; the connection thread waits on the condition,
 * builds the JSON or SSE chunks, and checks every 100 ms whether its client
 * is still there: a client that left cancels all its calls (within one
 * engine step). The gen is freed by whichever side lets go last.
 */
#include "http.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "ms-clock.h"

/* ---- per-connection state ---- */

struct conn {
	char method[8];
	char path[256];
	char *body;
	size_t len, cap;
	bool too_big;
	double t0;
	int64_t prompt_tokens, gen_tokens;
	int status;
	bool responding;  /* a generation's response is under way: counted in in_flight */
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

static enum MHD_Result send_text(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				 int status, const char *ctype, char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	add_common_headers(s, r);
	k->status = status;
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_json(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				 int status, cJSON *j)
{
	char *body = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!body)
		return MHD_NO;
	return send_text(s, c, k, status, "application/json", body, strlen(body));
}

/* The OpenAI error envelope; allow: the Allow header of a 405, or NULL. */
static enum MHD_Result error_response(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				      int status, const char *type, const char *param, const char *allow,
				      const char *msg)
{
	cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddStringToObject(e, "type", type);
	if (param)
		cJSON_AddStringToObject(e, "param", param);
	else
		cJSON_AddNullToObject(e, "param");
	cJSON_AddNumberToObject(e, "code", status);
	char *body = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	add_common_headers(s, r);
	if (status == 429 || status == 503)
		MHD_add_response_header(r, "Retry-After", "1");
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	if (allow)
		MHD_add_response_header(r, "Allow", allow);
	k->status = status;
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
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

#define BAD(param, ...) send_error(s, c, k, 400, "invalid_request_error", param, __VA_ARGS__)

/* ---- the bridge ---- */

struct ev {
	enum ms_event_kind kind;
	int32_t token;
	int64_t index;
	char *text;
	size_t len;
	bool has_lp;
	struct ms_token_logprobs lp;
	enum ms_finish finish;
	char *stop;
	char *error;
	int64_t prompt_tokens, cached_tokens, completion_tokens;
	double queue_s, ttft_s, e2e_s;
};

struct gen;

struct call {
	struct gen *g;
	int index;            /* choice index */
	int prompt;           /* which prompt */
	uint64_t id;
	bool submitted, finished;
	struct ev *q;
	size_t nq, capq, done; /* done: events the HTTP side consumed */
	double t_last;        /* last token time (inter-token latency) */
};

struct gen {
	struct ms_server *s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;
	int n;
	struct call *calls;
};

static void ev_free(struct ev *e)
{
	free(e->text);
	free(e->stop);
	free(e->error);
}

static void gen_unref(struct gen *g)
{
	pthread_mutex_lock(&g->mu);
	bool last = --g->refs == 0;
	pthread_mutex_unlock(&g->mu);
	if (!last)
		return;
	for (int i = 0; i < g->n; i++) {
		for (size_t j = 0; j < g->calls[i].nq; j++)
			ev_free(&g->calls[i].q[j]);
		free(g->calls[i].q);
	}
	free(g->calls);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}

static struct gen *gen_new(struct ms_server *s, int n)
{
	struct gen *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->calls = calloc((size_t)n, sizeof(*g->calls));
	if (!g->calls) {
		free(g);
		return NULL;
	}
	g->s = s;
	g->n = n;
	g->refs = 1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	for (int i = 0; i < n; i++) {
		g->calls[i].g = g;
		g->calls[i].index = i;
	}
	return g;
}

/* Engine thread: copy the event, wake the connection. */
static void on_engine_event(void *ctx, const struct ms_event *e)
{
	struct call *cl = ctx;
	struct gen *g = cl->g;
	struct ev v = {
		.kind = e->kind, .token = e->token, .index = e->index, .len = e->text_len,
		.finish = e->finish, .prompt_tokens = e->prompt_tokens,
		.cached_tokens = e->cached_tokens, .completion_tokens = e->completion_tokens,
		.queue_s = e->queue_s, .ttft_s = e->ttft_s, .e2e_s = e->e2e_s,
	};
	if (e->text_len && (v.text = malloc(e->text_len + 1))) {
		memcpy(v.text, e->text, e->text_len);
		v.text[e->text_len] = '\0';
	} else {
		v.len = 0;
	}
	if (e->lp) {
		v.has_lp = true;
		v.lp = *e->lp;
	}
	if (e->stop_string)
		v.stop = strdup(e->stop_string);
	if (e->error)
		v.error = strdup(e->error);
	if (e->kind == MS_EV_TOKEN && g->s->metrics) {
		double t = ms_now_s();
		if (cl->t_last > 0)
			ms_metrics_inter_token(g->s->metrics, t - cl->t_last);
		cl->t_last = t;
	}
	pthread_mutex_lock(&g->mu);
	if (cl->nq == cl->capq) {
		size_t nc = cl->capq ? cl->capq * 2 : 32;
		struct ev *nq = realloc(cl->q, nc * sizeof(*nq));
		if (nq) {
			cl->q = nq;
			cl->capq = nc;
		}
	}
	if (cl->nq < cl->capq)
		cl->q[cl->nq++] = v;
	else
		ev_free(&v); /* out of memory: the event is lost, never the daemon */
	bool fin = e->kind == MS_EV_FINISH;
	if (fin)
		cl->finished = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	if (fin) {
		if (g->s->metrics)
			ms_metrics_request_finished(g->s->metrics,
						    e->finish == MS_FINISH_CONTEXT ? "length" : ms_finish_name(e->finish),
						    e->e2e_s, e->queue_s, e->ttft_s > 0 ? e->ttft_s : -1,
						    e->prompt_tokens, e->cached_tokens, e->completion_tokens);
		atomic_fetch_sub(&g->s->in_flight, 1);
		gen_unref(g);
	}
}

/* Has the client closed its end? (readable with 0 bytes, or an error) */
static bool client_gone(struct MHD_Connection *c)
{
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

static void gen_cancel(struct gen *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->calls[i].submitted && !g->calls[i].finished)
			ms_engine_cancel(g->s->engine, g->calls[i].id);
}

static bool all_finished(struct gen *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->calls[i].submitted && !g->calls[i].finished)
			return false;
	return true;
}

/* Submit every call of g; on failure the ones already submitted are
 * cancelled and the error is in err. */
static int gen_submit(struct gen *g, int32_t *const *prompts, const int64_t *n_prompt,
		      const struct ms_request_params *p, struct ms_err *err)
{
	for (int i = 0; i < g->n; i++) {
		struct call *cl = &g->calls[i];
		/* with a seed, choice j of a prompt (n > 1) draws with seed + j: the
		 * n choices differ, and the response is reproducible as a whole (the
		 * engine copies the parameters) */
		struct ms_request_params pc = *p;
		if (p->sampling.has_seed)
			for (int q = 0; q < i; q++)
				pc.sampling.seed += g->calls[q].prompt == cl->prompt;
		pthread_mutex_lock(&g->mu);
		g->refs++; /* the engine's reference, dropped at FINISH */
		pthread_mutex_unlock(&g->mu);
		atomic_fetch_add(&g->s->in_flight, 1);
		int rc = ms_engine_submit(g->s->engine, prompts[cl->prompt], n_prompt[cl->prompt], &pc,
					  on_engine_event, cl, &cl->id, err);
		if (rc) {
			atomic_fetch_sub(&g->s->in_flight, 1);
			pthread_mutex_lock(&g->mu);
			g->refs--;
			pthread_mutex_unlock(&g->mu);
			gen_cancel(g);
			return rc;
		}
		cl->submitted = true;
	}
	return 0;
}

/* Wait until something new arrived (or everything finished), checking the
 * client every 100 ms. Returns false when the client left (the calls are
 * cancelled). With the lock held on return when true. */
static bool gen_wait(struct gen *g, struct MHD_Connection *c, double keepalive_at, bool *keepalive)
{
	pthread_mutex_lock(&g->mu);
	for (;;) {
		bool news = false;
		for (int i = 0; i < g->n; i++)
			news |= g->calls[i].done < g->calls[i].nq;
		if (news || all_finished(g))
			return true;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&g->cv, &g->mu, &ts);
		pthread_mutex_unlock(&g->mu);
		if (client_gone(c)) {
			gen_cancel(g);
			return false;
		}
		if (keepalive && keepalive_at > 0 && ms_now_s() >= keepalive_at) {
			*keepalive = true;
			pthread_mutex_lock(&g->mu);
			return true;
		}
		pthread_mutex_lock(&g->mu);
	}
}

/* ---- a small string builder ---- */

struct sb {
	char *p;
	size_t len, cap;
};

static void sb_add(struct sb *b, const char *s, size_t n)
{
	if (n > ((size_t)1 << 40) - b->len)
		return; /* (no text is that long; this also tells the compiler so) */
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		while (c < b->len + n + 1)
			c *= 2;
		char *np = realloc(b->p, c);
		if (!np)
			return;
		b->p = np;
		b->cap = c;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

/* A token's text on its own, made valid UTF-8 (a byte-level token may be
 * part of a character): for logprobs' "tokens". */
static char *token_text(const struct ms_tokenizer *t, int32_t id)
{
	char *out = NULL;
	size_t len = 0;
	struct ms_err err;
	if (!t || ms_tokenizer_decode(t, &id, 1, false, &out, &len, &err)) {
		char buf[32];
		snprintf(buf, sizeof(buf), "<%d>", id);
		return strdup(buf);
	}
	return out;
}

static int64_t utf8_chars(const char *s, size_t n)
{
	int64_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

/* ---- request fields ---- */

static const cJSON *jget(const cJSON *o, const char *k)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
	return it && !cJSON_IsNull(it) ? it : NULL;
}

/* Parse the sampling fields shared by both endpoints; returns NULL or the
 * name of the bad field with msg filled. */
static const char *parse_sampling(const cJSON *j, struct ms_request_params *p, int64_t vocab,
				  bool chat, char *msg, size_t msz, struct ms_logit_bias **bias)
{
	ms_sampling_defaults(&p->sampling);
	p->prompt_logprobs = -1;
	p->sampling.n_logprobs = -1;
	const cJSON *v;
	struct {
		const char *name;
		float *dst;
		double lo, hi;
	} floats[] = {
		{"temperature", &p->sampling.temperature, 0, 100},
		{"top_p", &p->sampling.top_p, 0, 1},
		{"min_p", &p->sampling.min_p, 0, 1},
		{"presence_penalty", &p->sampling.presence_penalty, -2, 2},
		{"frequency_penalty", &p->sampling.frequency_penalty, -2, 2},
		{"repetition_penalty", &p->sampling.repetition_penalty, 0, 10},
	};
	for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++) {
		if (!(v = jget(j, floats[i].name)))
			continue;
		if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < floats[i].lo ||
		    v->valuedouble > floats[i].hi) {
			snprintf(msg, msz, "\"%s\" must be a number in [%g, %g]", floats[i].name, floats[i].lo,
				 floats[i].hi);
			return floats[i].name;
		}
		*floats[i].dst = (float)v->valuedouble;
	}
	if ((v = jget(j, "top_k"))) {
		if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < -1 ||
		    v->valuedouble > 1e9) {
			snprintf(msg, msz, "\"top_k\" must be an integer >= -1");
			return "top_k";
		}
		p->sampling.top_k = (int32_t)v->valuedouble;
	}
	if ((v = jget(j, "seed"))) {
		if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
			snprintf(msg, msz, "\"seed\" must be an integer");
			return "seed";
		}
		p->sampling.seed = (uint64_t)(int64_t)v->valuedouble;
		p->sampling.has_seed = true;
	}
	/* logprobs: completions take an integer; chat a boolean plus top_logprobs */
	if ((v = jget(j, "logprobs"))) {
		if (chat) {
			if (!cJSON_IsBool(v)) {
				snprintf(msg, msz, "\"logprobs\" must be true or false");
				return "logprobs";
			}
			if (cJSON_IsTrue(v))
				p->sampling.n_logprobs = 0;
		} else {
			if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
			    v->valuedouble < 0 || v->valuedouble > 20) {
				snprintf(msg, msz, "\"logprobs\" must be an integer in [0, 20]");
				return "logprobs";
			}
			p->sampling.n_logprobs = (int)v->valuedouble;
		}
	}
	if (chat && (v = jget(j, "top_logprobs"))) {
		if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
		    v->valuedouble > 20) {
			snprintf(msg, msz, "\"top_logprobs\" must be an integer in [0, 20]");
			return "top_logprobs";
		}
		if (p->sampling.n_logprobs < 0) {
			snprintf(msg, msz, "\"top_logprobs\" needs \"logprobs\": true");
			return "top_logprobs";
		}
		p->sampling.n_logprobs = (int)v->valuedouble;
	}
	if ((v = jget(j, "logit_bias"))) {
		if (!cJSON_IsObject(v)) {
			snprintf(msg, msz, "\"logit_bias\" must be an object of token id -> bias");
			return "logit_bias";
		}
		int n = cJSON_GetArraySize(v);
		*bias = calloc((size_t)n + 1, sizeof(**bias));
		const cJSON *it;
		size_t k = 0;
		cJSON_ArrayForEach(it, v) {
			char *end;
			long id = strtol(it->string, &end, 10);
			if (!*bias || *end || end == it->string || id < 0 || id >= vocab ||
			    !cJSON_IsNumber(it) || fabs(it->valuedouble) > 100) {
				snprintf(msg, msz, "\"logit_bias\": \"%s\" must be a token id in [0, %lld) with a "
					 "bias in [-100, 100]", it->string, (long long)vocab);
				return "logit_bias";
			}
			(*bias)[k++] = (struct ms_logit_bias){(int32_t)id, (float)it->valuedouble};
		}
		p->sampling.logit_bias = *bias;
		p->sampling.n_logit_bias = k;
	}
	return NULL;
}

/* "stop": a string or a list of up to 16 strings. */
static const char *parse_stop(const cJSON *j, const char **stops, int *n, char *msg, size_t msz)
{
	const cJSON *v = jget(j, "stop");
	*n = 0;
	if (!v)
		return NULL;
	if (cJSON_IsString(v)) {
		if (v->valuestring[0])
			stops[(*n)++] = v->valuestring;
		return NULL;
	}
	const cJSON *it;
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 16) {
		snprintf(msg, msz, "\"stop\" must be a string or a list of at most 16 strings");
		return "stop";
	}
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it)) {
			snprintf(msg, msz, "\"stop\" must be a string or a list of strings");
			return "stop";
		}
		if (it->valuestring[0])
			stops[(*n)++] = it->valuestring;
	}
	return NULL;
}

static const char *finish_reason(enum ms_finish f, bool tool_calls)
{
	if (tool_calls && f == MS_FINISH_STOP)
		return "tool_calls";
	switch (f) {
	case MS_FINISH_STOP: return "stop";
	case MS_FINISH_LENGTH:
	case MS_FINISH_CONTEXT: return "length";
	case MS_FINISH_CANCELLED: return "abort";
	default: return "error";
	}
}

static void add_usage(cJSON *j, int64_t prompt, int64_t completion, int64_t cached)
{
	cJSON *u = cJSON_AddObjectToObject(j, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
	cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
	cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
	cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
}

/* Map an engine refusal to its HTTP status. */
static enum MHD_Result send_submit_error(struct ms_server *s, struct MHD_Connection *c,
					 struct conn *k, const struct ms_err *err)
{
	switch (err->code) {
	case -EBUSY:
		return send_error(s, c, k, 429, "rate_limit_exceeded", NULL, "%s; retry later", err->msg);
	case -E2BIG:
	case -ENOSPC:
	case -EINVAL:
		return send_error(s, c, k, 400, "invalid_request_error", NULL, "%s", err->msg);
	default:
		return send_error(s, c, k, 500, "server_error", NULL, "%s", err->msg);
	}
}

/* ---- completions and chat share this request state ---- */

struct job {
	struct ms_server *s;
	struct gen *g;
	bool chat, stream, echo, include_usage;
	int logprobs;                 /* completions: top-N, -1 none */
	int n_prompts;
	int32_t **prompts;
	int64_t *n_prompt;
	char **echo_text;             /* completions with echo */
	char id[64];
	long created;
	/* per call */
	struct sb *text, *reasoning;
	cJSON **lp_tokens, **lp_values, **lp_top, **lp_offset, **chat_lp, **tool_calls;
	int64_t *offset;              /* characters so far (text_offset) */
	const char **fin;
	bool *started;                /* stream: first chunk sent */
	struct ms_harmony_parser *hp; /* chat */
	int *n_calls;                 /* chat: tool calls so far */
	/* usage */
	int64_t *prompt_tok, *cached_tok, *completion_tok;
	/* SSE output waiting to be sent */
	struct sb out;
	size_t out_pos;
	bool finished_all, done_sent;
	int harmony_errors;
	/* owned request parameters */
	struct ms_request_params params;
	struct ms_logit_bias *bias;
	const char *stops[16];
	int32_t stop_ids[12];
	cJSON *req;                   /* the parsed body (stop strings point into it) */
	struct ms_stopper *cstop;     /* chat: content stop strings, per call */
	bool *cstopped;
	struct ms_chat_message *msgs;
	struct ms_chat_tool *tools;
	struct ms_chat_tool_call *tcalls;
	char **strs;                  /* strings made for the chat request */
	int n_strs;
};

static void job_free(struct job *jb)
{
	if (!jb)
		return;
	int n = jb->g ? jb->g->n : 0;
	for (int i = 0; i < n; i++) {
		free(jb->text ? jb->text[i].p : NULL);
		free(jb->reasoning ? jb->reasoning[i].p : NULL);
		if (jb->lp_tokens) {
			cJSON_Delete(jb->lp_tokens[i]), cJSON_Delete(jb->lp_values[i]);
			cJSON_Delete(jb->lp_top[i]), cJSON_Delete(jb->lp_offset[i]);
		}
		if (jb->chat_lp)
			cJSON_Delete(jb->chat_lp[i]);
		if (jb->tool_calls)
			cJSON_Delete(jb->tool_calls[i]);
	}
	for (int i = 0; i < jb->n_prompts; i++) {
		free(jb->prompts ? jb->prompts[i] : NULL);
		free(jb->echo_text ? jb->echo_text[i] : NULL);
	}
	free(jb->prompts), free(jb->n_prompt), free(jb->echo_text);
	free(jb->text), free(jb->reasoning), free(jb->lp_tokens), free(jb->lp_values), free(jb->lp_top);
	free(jb->lp_offset), free(jb->chat_lp), free(jb->tool_calls), free(jb->offset), free(jb->fin);
	free(jb->started), free(jb->hp), free(jb->n_calls), free(jb->prompt_tok), free(jb->cached_tok);
	free(jb->completion_tok), free(jb->out.p), free(jb->bias);
	free(jb->msgs), free(jb->tools), free(jb->tcalls);
	for (int i = 0; jb->cstop && i < n; i++)
		ms_stopper_free(&jb->cstop[i]);
	free(jb->cstop), free(jb->cstopped);
	for (int i = 0; i < jb->n_strs; i++)
		free(jb->strs[i]);
	free(jb->strs);
	cJSON_Delete(jb->req);
	if (jb->g)
		gen_unref(jb->g);
	free(jb);
}

static bool job_alloc(struct job *jb, int n)
{
#define A(f) ((jb->f = calloc((size_t)n, sizeof(*jb->f))) != NULL)
	return A(text) && A(reasoning) && A(lp_tokens) && A(lp_values) && A(lp_top) && A(lp_offset) &&
	       A(chat_lp) && A(tool_calls) && A(offset) && A(fin) && A(started) && A(hp) &&
	       A(n_calls) && A(prompt_tok) && A(cached_tok) && A(completion_tok) && A(cstop) &&
	       A(cstopped);
#undef A
}

/* SSE framing */
static void sse_json(struct job *jb, cJSON *j)
{
	char *s = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!s)
		return;
	sb_str(&jb->out, "data: ");
	sb_str(&jb->out, s);
	sb_str(&jb->out, "\n\n");
	free(s);
}

static cJSON *chunk_head(struct job *jb)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "id", jb->id);
	cJSON_AddStringToObject(j, "object", jb->chat ? "chat.completion.chunk" : "text_completion");
	cJSON_AddNumberToObject(j, "created", (double)jb->created);
	cJSON_AddStringToObject(j, "model", jb->s->cfg.model_name);
	return j;
}

/* Close a chunk's choice (finish_reason, null while running) and queue the
 * chunk. */
static void send_choice_chunk(struct job *jb, cJSON *j, cJSON *choices, cJSON *ch, const char *fin)
{
	if (fin)
		cJSON_AddStringToObject(ch, "finish_reason", fin);
	else
		cJSON_AddNullToObject(ch, "finish_reason");
	cJSON_AddItemToArray(choices, ch);
	sse_json(jb, j);
}

/* ---- completions: one event ---- */

static void lp_append(struct job *jb, int i, int32_t tok, const struct ms_token_logprobs *lp,
		      bool has_lp, cJSON *delta_tokens, cJSON *delta_values, cJSON *delta_top,
		      cJSON *delta_off)
{
	char *tt = token_text(jb->s->tok, tok);
	cJSON *top = NULL;
	if (has_lp && lp->n_top >= 0 && !isnan(lp->logprob)) {
		top = cJSON_CreateObject();
		for (int t = 0; t < lp->n_top; t++) {
			char *x = token_text(jb->s->tok, lp->top[t].id);
			if (!cJSON_GetObjectItemCaseSensitive(top, x))
				cJSON_AddNumberToObject(top, x, lp->top[t].logprob);
			free(x);
		}
	}
	cJSON *arrs[2][4] = {{jb->lp_tokens[i], jb->lp_values[i], jb->lp_top[i], jb->lp_offset[i]},
			     {delta_tokens, delta_values, delta_top, delta_off}};
	for (int w = 0; w < 2; w++) {
		if (!arrs[w][0])
			continue;
		cJSON_AddItemToArray(arrs[w][0], cJSON_CreateString(tt));
		cJSON_AddItemToArray(arrs[w][1], has_lp && !isnan(lp->logprob)
							 ? cJSON_CreateNumber(lp->logprob) : cJSON_CreateNull());
		cJSON_AddItemToArray(arrs[w][2], top ? cJSON_Duplicate(top, true) : cJSON_CreateNull());
		cJSON_AddItemToArray(arrs[w][3], cJSON_CreateNumber((double)jb->offset[i]));
	}
	jb->offset[i] += utf8_chars(tt, strlen(tt));
	cJSON_Delete(top);
	free(tt);
}

static void cmpl_event(struct job *jb, struct call *cl, const struct ev *e)
{
	int i = cl->index;
	bool lp_on = jb->logprobs >= 0;
	cJSON *dt = NULL, *dv = NULL, *dtop = NULL, *doff = NULL;
	struct sb delta = {0};
	if (jb->stream && lp_on) {
		dt = cJSON_CreateArray(), dv = cJSON_CreateArray(), dtop = cJSON_CreateArray();
		doff = cJSON_CreateArray();
	}
	if (jb->echo && !jb->started[i]) {
		/* the prompt first: its text, and its tokens' logprobs as they come */
		const char *pt = jb->echo_text[cl->prompt];
		sb_str(&jb->text[i], pt);
		sb_str(&delta, pt);
	}
	jb->started[i] = true;
	if (e->kind == MS_EV_PROMPT_TOKEN) {
		if (lp_on)
			lp_append(jb, i, e->token, &e->lp, e->has_lp, dt, dv, dtop, doff);
	} else if (e->kind == MS_EV_TOKEN) {
		if (lp_on)
			lp_append(jb, i, e->token, &e->lp, e->has_lp, dt, dv, dtop, doff);
		if (e->len) {
			sb_add(&jb->text[i], e->text, e->len);
			sb_add(&delta, e->text, e->len);
		}
	} else { /* FINISH */
		if (e->len) {
			sb_add(&jb->text[i], e->text, e->len);
			sb_add(&delta, e->text, e->len);
		}
		jb->fin[i] = finish_reason(e->finish, false);
		jb->prompt_tok[i] = e->prompt_tokens;
		jb->cached_tok[i] = e->cached_tokens;
		jb->completion_tok[i] = e->completion_tokens;
	}
	if (jb->stream && (delta.len || e->kind == MS_EV_FINISH || (dt && cJSON_GetArraySize(dt)))) {
		cJSON *j = chunk_head(jb), *chs = cJSON_AddArrayToObject(j, "choices");
		cJSON *ch = cJSON_CreateObject();
		cJSON_AddNumberToObject(ch, "index", i);
		cJSON_AddStringToObject(ch, "text", delta.p ? delta.p : "");
		if (dt && cJSON_GetArraySize(dt)) {
			cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
			cJSON_AddItemToObject(l, "tokens", dt);
			cJSON_AddItemToObject(l, "token_logprobs", dv);
			cJSON_AddItemToObject(l, "top_logprobs", dtop);
			cJSON_AddItemToObject(l, "text_offset", doff);
			dt = dv = dtop = doff = NULL;
		} else {
			cJSON_AddNullToObject(ch, "logprobs");
		}
		send_choice_chunk(jb, j, chs, ch, e->kind == MS_EV_FINISH ? jb->fin[i] : NULL);
	}
	cJSON_Delete(dt), cJSON_Delete(dv), cJSON_Delete(dtop), cJSON_Delete(doff);
	free(delta.p);
}

/* ---- chat: harmony events of one engine event, as deltas ---- */

struct hctx {
	struct job *jb;
	int i;
	struct sb content, reasoning;  /* this event's deltas */
	cJSON *tool_delta;             /* stream: tool_calls delta array */
	struct ms_stopper *stop;       /* content stop strings (chat applies them to content) */
	bool stopped;
};

static int on_harmony(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct hctx *h = ctx;
	struct job *jb = h->jb;
	int i = h->i;
	switch (ev) {
	case MS_HARMONY_REASONING:
		sb_add(&jb->reasoning[i], data, len);
		sb_add(&h->reasoning, data, len);
		break;
	case MS_HARMONY_CONTENT:
		if (h->stopped)
			break;
		if (h->stop) {
			size_t emit = 0;
			bool stopped = false;
			ms_stopper_push(h->stop, data, len, &emit, &stopped);
			data = ms_stopper_text(h->stop);
			len = emit;
			h->stopped = stopped;
		}
		sb_add(&jb->text[i], data, len);
		sb_add(&h->content, data, len);
		break;
	case MS_HARMONY_TOOL_CALL_BEGIN: {
		char id[40], name[256];
		uint64_t cid = (uint64_t)atomic_fetch_add(&jb->s->counter, 1) * 0x9e3779b97f4a7c15ull;
		snprintf(id, sizeof(id), "call_%016" PRIx64, cid);
		snprintf(name, sizeof(name), "%.*s", (int)len, data);
		int t = jb->n_calls[i]++;
		if (!jb->tool_calls[i])
			jb->tool_calls[i] = cJSON_CreateArray();
		cJSON *tc = cJSON_CreateObject(), *fn;
		cJSON_AddStringToObject(tc, "id", id);
		cJSON_AddStringToObject(tc, "type", "function");
		fn = cJSON_AddObjectToObject(tc, "function");
		cJSON_AddStringToObject(fn, "name", name);
		cJSON_AddStringToObject(fn, "arguments", "");
		cJSON_AddItemToArray(jb->tool_calls[i], tc);
		if (jb->stream) {
			cJSON *d = cJSON_Duplicate(tc, true);
			cJSON_AddNumberToObject(d, "index", t);
			if (!h->tool_delta)
				h->tool_delta = cJSON_CreateArray();
			cJSON_AddItemToArray(h->tool_delta, d);
		}
		break;
	}
	case MS_HARMONY_TOOL_ARGS: {
		cJSON *last = cJSON_GetArrayItem(jb->tool_calls[i], cJSON_GetArraySize(jb->tool_calls[i]) - 1);
		cJSON *fn = cJSON_GetObjectItemCaseSensitive(last, "function");
		cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
		struct sb a = {0};
		sb_str(&a, args->valuestring);
		sb_add(&a, data, len);
		cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(a.p ? a.p : ""));
		free(a.p);
		if (jb->stream) {
			char frag[4096];
			for (size_t off = 0; off < len; off += sizeof(frag) - 1) {
				size_t m = len - off < sizeof(frag) - 1 ? len - off : sizeof(frag) - 1;
				memcpy(frag, data + off, m);
				frag[m] = '\0';
				cJSON *d = cJSON_CreateObject(), *f;
				cJSON_AddNumberToObject(d, "index", jb->n_calls[i] - 1);
				f = cJSON_AddObjectToObject(d, "function");
				cJSON_AddStringToObject(f, "arguments", frag);
				if (!h->tool_delta)
					h->tool_delta = cJSON_CreateArray();
				cJSON_AddItemToArray(h->tool_delta, d);
			}
		}
		break;
	}
	default:
		break;
	}
	return 0;
}

static cJSON *chat_lp_entry(const struct ms_tokenizer *t, int32_t tok, const struct ms_token_logprobs *lp)
{
	cJSON *e = cJSON_CreateObject(), *tops;
	char *tt = token_text(t, tok);
	cJSON_AddStringToObject(e, "token", tt);
	cJSON_AddNumberToObject(e, "logprob", lp->logprob);
	cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
	for (const unsigned char *b = (const unsigned char *)tt; *b; b++)
		cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*b));
	free(tt);
	tops = cJSON_AddArrayToObject(e, "top_logprobs");
	for (int k = 0; k < lp->n_top; k++) {
		cJSON *x = cJSON_CreateObject();
		char *s = token_text(t, lp->top[k].id);
		cJSON_AddStringToObject(x, "token", s);
		cJSON_AddNumberToObject(x, "logprob", lp->top[k].logprob);
		free(s);
		cJSON_AddItemToArray(tops, x);
	}
	return e;
}

static void chat_event(struct job *jb, struct call *cl, const struct ev *e, struct ms_stopper *stop,
		       bool *content_stopped)
{
	int i = cl->index;
	struct hctx h = {.jb = jb, .i = i, .stop = stop, .stopped = *content_stopped};
	struct ms_harmony_parser *p = &jb->hp[i];
	p->cb = on_harmony;
	p->ctx = &h;
	cJSON *lp_entry = NULL;
	if (e->kind == MS_EV_TOKEN) {
		ms_harmony_parser_push(p, e->token, e->text ? e->text : "", e->len);
		if (e->has_lp && jb->params.sampling.n_logprobs >= 0) {
			lp_entry = chat_lp_entry(jb->s->tok, e->token, &e->lp);
			if (!jb->chat_lp[i])
				jb->chat_lp[i] = cJSON_CreateArray();
			cJSON_AddItemToArray(jb->chat_lp[i], cJSON_Duplicate(lp_entry, true));
		}
	} else if (e->kind == MS_EV_FINISH) {
		ms_harmony_parser_finish(p);
		if (h.stop && !h.stopped) {
			size_t emit = 0;
			ms_stopper_finish(h.stop, &emit);
			if (emit) {
				sb_add(&jb->text[i], ms_stopper_text(h.stop), emit);
				sb_add(&h.content, ms_stopper_text(h.stop), emit);
			}
		}
		jb->harmony_errors += p->n_malformed;
		jb->fin[i] = finish_reason(h.stopped ? MS_FINISH_STOP : e->finish, jb->n_calls[i] > 0);
		jb->prompt_tok[i] = e->prompt_tokens;
		jb->cached_tok[i] = e->cached_tokens;
		jb->completion_tok[i] = e->completion_tokens;
	}
	*content_stopped = h.stopped;
	if (jb->stream) {
		if (!jb->started[i]) {
			jb->started[i] = true;
			cJSON *j = chunk_head(jb), *chs = cJSON_AddArrayToObject(j, "choices");
			cJSON *ch = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(ch, "delta");
			cJSON_AddNumberToObject(ch, "index", i);
			cJSON_AddStringToObject(d, "role", "assistant");
			cJSON_AddStringToObject(d, "content", "");
			cJSON_AddNullToObject(ch, "logprobs");
			cJSON_AddNullToObject(ch, "finish_reason");
			cJSON_AddItemToArray(chs, ch);
			sse_json(jb, j);
		}
		if (h.content.len || h.reasoning.len || h.tool_delta || lp_entry ||
		    e->kind == MS_EV_FINISH) {
			cJSON *j = chunk_head(jb), *chs = cJSON_AddArrayToObject(j, "choices");
			cJSON *ch = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(ch, "delta");
			cJSON_AddNumberToObject(ch, "index", i);
			if (h.content.len)
				cJSON_AddStringToObject(d, "content", h.content.p);
			if (h.reasoning.len) {
				cJSON_AddStringToObject(d, "reasoning_content", h.reasoning.p);
				cJSON_AddStringToObject(d, "reasoning", h.reasoning.p);
			}
			if (h.tool_delta) {
				cJSON_AddItemToObject(d, "tool_calls", h.tool_delta);
				h.tool_delta = NULL;
			}
			if (lp_entry) {
				cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
				cJSON *arr = cJSON_AddArrayToObject(l, "content");
				cJSON_AddItemToArray(arr, lp_entry);
				lp_entry = NULL;
			} else {
				cJSON_AddNullToObject(ch, "logprobs");
			}
			send_choice_chunk(jb, j, chs, ch, e->kind == MS_EV_FINISH ? jb->fin[i] : NULL);
		}
	}
	cJSON_Delete(h.tool_delta);
	cJSON_Delete(lp_entry);
	free(h.content.p);
	free(h.reasoning.p);
}

/* ---- pumping events into the job ---- */

static void add_usage_totals(struct job *jb, cJSON *j)
{
	int64_t prompt = 0, cached = 0, completion = 0;
	int per = jb->g->n / (jb->n_prompts ? jb->n_prompts : 1);
	for (int i = 0; i < jb->g->n; i++) {
		completion += jb->completion_tok[i];
		if (per && i % per == 0) { /* a prompt counts once, whatever n is */
			prompt += jb->prompt_tok[i];
			cached += jb->cached_tok[i];
		}
	}
	add_usage(j, prompt, completion, cached);
}

/* Consume every event that arrived; with the gen's lock held. */
static void pump(struct job *jb)
{
	struct gen *g = jb->g;
	for (int i = 0; i < g->n; i++) {
		struct call *cl = &g->calls[i];
		while (cl->done < cl->nq) {
			const struct ev *e = &cl->q[cl->done++];
			if (jb->chat) {
				bool was = jb->cstopped[i];
				chat_event(jb, cl, e, jb->params.n_stop ? &jb->cstop[i] : NULL, &jb->cstopped[i]);
				if (!was && jb->cstopped[i] && !cl->finished)
					ms_engine_cancel(jb->s->engine, cl->id);
			} else {
				cmpl_event(jb, cl, e);
			}
		}
	}
	if (!jb->finished_all && all_finished(g)) {
		jb->finished_all = true;
		if (jb->stream) {
			if (jb->include_usage) {
				cJSON *j = chunk_head(jb);
				cJSON_AddArrayToObject(j, "choices");
				add_usage_totals(jb, j);
				sse_json(jb, j);
			}
			sb_str(&jb->out, "data: [DONE]\n\n");
		}
		if (jb->harmony_errors && jb->s->metrics)
			ms_metrics_harmony_error(jb->s->metrics, (uint64_t)jb->harmony_errors);
	}
}

static cJSON *final_response(struct job *jb)
{
	cJSON *j = cJSON_CreateObject(), *chs;
	cJSON_AddStringToObject(j, "id", jb->id);
	cJSON_AddStringToObject(j, "object", jb->chat ? "chat.completion" : "text_completion");
	cJSON_AddNumberToObject(j, "created", (double)jb->created);
	cJSON_AddStringToObject(j, "model", jb->s->cfg.model_name);
	chs = cJSON_AddArrayToObject(j, "choices");
	for (int i = 0; i < jb->g->n; i++) {
		cJSON *ch = cJSON_CreateObject();
		cJSON_AddNumberToObject(ch, "index", i);
		if (jb->chat) {
			cJSON *m = cJSON_AddObjectToObject(ch, "message");
			cJSON_AddStringToObject(m, "role", "assistant");
			if (jb->text[i].len || !jb->tool_calls[i])
				cJSON_AddStringToObject(m, "content", jb->text[i].p ? jb->text[i].p : "");
			else
				cJSON_AddNullToObject(m, "content");
			if (jb->reasoning[i].len) {
				cJSON_AddStringToObject(m, "reasoning_content", jb->reasoning[i].p);
				cJSON_AddStringToObject(m, "reasoning", jb->reasoning[i].p);
			}
			if (jb->tool_calls[i]) {
				cJSON_AddItemToObject(m, "tool_calls", jb->tool_calls[i]);
				jb->tool_calls[i] = NULL;
			}
			if (jb->chat_lp[i]) {
				cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
				cJSON_AddItemToObject(l, "content", jb->chat_lp[i]);
				jb->chat_lp[i] = NULL;
			} else {
				cJSON_AddNullToObject(ch, "logprobs");
			}
		} else {
			cJSON_AddStringToObject(ch, "text", jb->text[i].p ? jb->text[i].p : "");
			if (jb->logprobs >= 0) {
				cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
				cJSON_AddItemToObject(l, "tokens", jb->lp_tokens[i]);
				cJSON_AddItemToObject(l, "token_logprobs", jb->lp_values[i]);
				cJSON_AddItemToObject(l, "top_logprobs", jb->lp_top[i]);
				cJSON_AddItemToObject(l, "text_offset", jb->lp_offset[i]);
				jb->lp_tokens[i] = jb->lp_values[i] = jb->lp_top[i] = jb->lp_offset[i] = NULL;
			} else {
				cJSON_AddNullToObject(ch, "logprobs");
			}
		}
		cJSON_AddStringToObject(ch, "finish_reason", jb->fin[i] ? jb->fin[i] : "error");
		cJSON_AddItemToArray(chs, ch);
	}
	add_usage_totals(jb, j);
	return j;
}

/* ---- streaming responses ---- */

struct stream {
	struct job *jb;
	struct MHD_Connection *c;
	double keepalive_at;
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct stream *st = cls;
	struct job *jb = st->jb;
	for (;;) {
		if (jb->out_pos < jb->out.len) {
			size_t n = jb->out.len - jb->out_pos < max ? jb->out.len - jb->out_pos : max;
			memcpy(buf, jb->out.p + jb->out_pos, n);
			jb->out_pos += n;
			if (jb->out_pos == jb->out.len)
				jb->out_pos = jb->out.len = 0;
			return (ssize_t)n;
		}
		if (jb->finished_all)
			return MHD_CONTENT_READER_END_OF_STREAM;
		bool ka = false;
		if (!gen_wait(jb->g, st->c, st->keepalive_at, &ka))
			return MHD_CONTENT_READER_END_WITH_ERROR; /* the client left: cancelled */
		pump(jb);
		pthread_mutex_unlock(&jb->g->mu);
		if (ka && jb->out.len == 0)
			sb_str(&jb->out, ": keep-alive\n\n"); /* a comment: clients ignore it */
		st->keepalive_at = ms_now_s() + jb->s->cfg.keepalive_s;
	}
}

static void stream_free(void *cls)
{
	struct stream *st = cls;
	/* the client may be gone before the end: stop what is left */
	if (!st->jb->finished_all)
		gen_cancel(st->jb->g);
	job_free(st->jb);
	free(st);
}

/* Run the job to the end: a streamed response, or a wait then one JSON. */
static enum MHD_Result respond(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
			       struct job *jb)
{
	/* in_flight counts the response too, until it has been sent
	 * (on_completed): a SIGTERM drain that waits for in_flight to reach 0
	 * never cuts an answer whose generation just finished */
	k->responding = true;
	atomic_fetch_add(&s->in_flight, 1);
	if (jb->stream) {
		struct stream *st = calloc(1, sizeof(*st));
		if (!st) {
			gen_cancel(jb->g);
			job_free(jb);
			return send_error(s, c, k, 500, "server_error", NULL, "out of memory");
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
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
		add_common_headers(s, r);
		k->status = 200;
		enum MHD_Result ret = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return ret;
	}
	for (;;) {
		if (!gen_wait(jb->g, c, 0, NULL)) {
			job_free(jb); /* the client left; its calls are cancelled */
			k->status = 499;
			return MHD_NO;
		}
		pump(jb);
		bool done = jb->finished_all;
		pthread_mutex_unlock(&jb->g->mu);
		if (done)
			break;
	}
	for (int i = 0; i < jb->g->n; i++) {
		k->prompt_tokens += jb->prompt_tok[i];
		k->gen_tokens += jb->completion_tok[i];
	}
	cJSON *j = final_response(jb);
	job_free(jb);
	return send_json(s, c, k, 200, j);
}

/* ---- POST /v1/completions ---- */

static struct job *job_new(struct ms_server *s, cJSON *req, bool chat)
{
	struct job *jb = calloc(1, sizeof(*jb));
	if (!jb)
		return NULL;
	jb->s = s;
	jb->chat = chat;
	jb->req = req;
	jb->created = (long)time(NULL);
	uint64_t rid = ((uint64_t)atomic_fetch_add(&s->counter, 1) + 1) * 0x9e3779b97f4a7c15ull;
	snprintf(jb->id, sizeof(jb->id), "%s-%016" PRIx64, chat ? "chatcmpl" : "cmpl", rid);
	jb->logprobs = -1;
	return jb;
}

/* Tokens of one prompt element: a string (encoded, special tokens as plain
 * text) or a list of ids. */
static const char *prompt_tokens(struct ms_server *s, const cJSON *p, int32_t **out, int64_t *n,
				 char **text, char *msg, size_t msz)
{
	*out = NULL;
	*text = NULL;
	if (cJSON_IsString(p)) {
		if (!s->tok) {
			snprintf(msg, msz, "this model has no tokenizer.json: send token ids");
			return "prompt";
		}
		size_t m;
		struct ms_err err = {0};
		if (ms_tokenizer_encode(s->tok, p->valuestring, strlen(p->valuestring), false, out, &m, &err)) {
			snprintf(msg, msz, "%.400s", err.msg);
			return "prompt";
		}
		*n = (int64_t)m;
		*text = strdup(p->valuestring);
		return NULL;
	}
	int cnt = cJSON_GetArraySize(p);
	*out = malloc((size_t)(cnt + 1) * sizeof(int32_t));
	const cJSON *it;
	int64_t k = 0;
	cJSON_ArrayForEach(it, p) {
		if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
		    it->valuedouble >= (double)s->model->cfg.vocab) {
			snprintf(msg, msz, "prompt token %lld is not an id in [0, %lld)", (long long)k,
				 (long long)s->model->cfg.vocab);
			return "prompt";
		}
		(*out)[k++] = (int32_t)it->valuedouble;
	}
	*n = k;
	if (s->tok) {
		size_t tl;
		struct ms_err err;
		ms_tokenizer_decode(s->tok, *out, (size_t)k, false, text, &tl, &err);
	}
	if (!*text)
		*text = strdup("");
	return NULL;
}

/* Fields common to both endpoints; returns the bad param or NULL. */
static const char *parse_common(struct ms_server *s, struct job *jb, const cJSON *j, int *n,
				char *msg, size_t msz)
{
	const cJSON *v;
	const char *bad = parse_sampling(j, &jb->params, s->model->cfg.vocab, jb->chat, msg, msz, &jb->bias);
	if (bad)
		return bad;
	if (!jb->chat)
		jb->logprobs = jb->params.sampling.n_logprobs;
	jb->params.max_tokens = jb->chat ? s->max_model_len : 16;
	const char *mt = jb->chat && jget(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
	if ((v = jget(j, mt))) {
		if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
		    v->valuedouble > 1e9) {
			snprintf(msg, msz, "\"%s\" must be an integer >= 0", mt);
			return mt;
		}
		jb->params.max_tokens = (int64_t)v->valuedouble;
	}
	*n = 1;
	if ((v = jget(j, "n"))) {
		if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
		    v->valuedouble > 16) {
			snprintf(msg, msz, "\"n\" must be an integer in [1, 16]");
			return "n";
		}
		*n = (int)v->valuedouble;
	}
	if ((v = jget(j, "stream"))) {
		if (!cJSON_IsBool(v)) {
			snprintf(msg, msz, "\"stream\" must be true or false");
			return "stream";
		}
		jb->stream = cJSON_IsTrue(v);
	}
	const cJSON *so = jget(j, "stream_options");
	if (so && cJSON_IsObject(so))
		jb->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
	int ns;
	if ((bad = parse_stop(j, jb->stops, &ns, msg, msz)))
		return bad;
	jb->params.stop = jb->stops;
	jb->params.n_stop = ns;
	if ((v = jget(j, "model")) && !cJSON_IsString(v)) {
		snprintf(msg, msz, "\"model\" must be a string");
		return "model";
	}
	return NULL;
}

static enum MHD_Result h_completions(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				     cJSON *req)
{
	char msg[512];
	int n = 1;
	struct job *jb = job_new(s, req, false);
	if (!jb) {
		cJSON_Delete(req);
		return send_error(s, c, k, 500, "server_error", NULL, "out of memory");
	}
	const char *bad = parse_common(s, jb, req, &n, msg, sizeof(msg));
	const cJSON *v;
	if (!bad && (v = jget(req, "echo"))) {
		if (!cJSON_IsBool(v)) {
			bad = "echo";
			snprintf(msg, sizeof(msg), "\"echo\" must be true or false");
		}
		jb->echo = cJSON_IsTrue(v);
	}
	if (!bad && jb->params.max_tokens == 0 && !jb->echo) {
		bad = "max_tokens";
		snprintf(msg, sizeof(msg), "\"max_tokens\" 0 only makes sense with \"echo\"");
	}
	/* prompt: string, [string], [int], [[int]] */
	const cJSON *pr = jget(req, "prompt");
	if (!bad && !pr) {
		bad = "prompt";
		snprintf(msg, sizeof(msg), "\"prompt\" is required");
	}
	if (!bad) {
		bool list_of = cJSON_IsArray(pr) && cJSON_GetArraySize(pr) > 0 &&
			       (cJSON_IsString(cJSON_GetArrayItem(pr, 0)) || cJSON_IsArray(cJSON_GetArrayItem(pr, 0)));
		int np = list_of ? cJSON_GetArraySize(pr) : 1;
		if ((!cJSON_IsString(pr) && !cJSON_IsArray(pr)) || np > 64) {
			bad = "prompt";
			snprintf(msg, sizeof(msg), "\"prompt\" must be a string, a list of strings, a list of "
				 "token ids or a list of lists of ids (at most 64)");
		} else {
			jb->n_prompts = np;
			jb->prompts = calloc((size_t)np, sizeof(int32_t *));
			jb->n_prompt = calloc((size_t)np, sizeof(int64_t));
			jb->echo_text = calloc((size_t)np, sizeof(char *));
			for (int i = 0; i < np && !bad; i++) {
				const cJSON *one = list_of ? cJSON_GetArrayItem(pr, i) : pr;
				if (list_of && !cJSON_IsString(one) && !cJSON_IsArray(one)) {
					bad = "prompt";
					snprintf(msg, sizeof(msg), "\"prompt\"[%d] must be a string or a list of ids", i);
					break;
				}
				bad = prompt_tokens(s, one, &jb->prompts[i], &jb->n_prompt[i], &jb->echo_text[i],
						    msg, sizeof(msg));
				if (!bad && jb->n_prompt[i] == 0) {
					bad = "prompt";
					snprintf(msg, sizeof(msg), "\"prompt\" is empty");
				}
			}
		}
	}
	if (bad) {
		job_free(jb);
		return BAD(bad, "%s", msg);
	}
	if (jb->echo && jb->logprobs >= 0)
		jb->params.prompt_logprobs = jb->logprobs;
	int ne = 0;
	for (int i = 0; i < s->n_eos && ne < 8; i++)
		jb->stop_ids[ne++] = s->eos[i];
	jb->params.stop_ids = jb->stop_ids;
	jb->params.n_stop_ids = ne;
	jb->params.skip_special = true;
	jb->g = gen_new(s, jb->n_prompts * n);
	if (!jb->g || !job_alloc(jb, jb->n_prompts * n)) {
		job_free(jb);
		return send_error(s, c, k, 500, "server_error", NULL, "out of memory");
	}
	for (int i = 0; i < jb->g->n; i++) {
		jb->g->calls[i].prompt = i / n;
		if (jb->logprobs >= 0) {
			jb->lp_tokens[i] = cJSON_CreateArray(), jb->lp_values[i] = cJSON_CreateArray();
			jb->lp_top[i] = cJSON_CreateArray(), jb->lp_offset[i] = cJSON_CreateArray();
		}
	}
	struct ms_err err = {0};
	if (gen_submit(jb->g, jb->prompts, jb->n_prompt, &jb->params, &err)) {
		enum MHD_Result r = send_submit_error(s, c, k, &err);
		/* calls already queued are cancelled; wait for their FINISH
		 * before freeing is the gen's refcount's job */
		job_free(jb);
		return r;
	}
	return respond(s, c, k, jb);
}

/* ---- POST /v1/chat/completions ---- */

static char *keep(struct job *jb, char *s)
{
	char **ns = realloc(jb->strs, (size_t)(jb->n_strs + 1) * sizeof(char *));
	if (!ns) {
		free(s);
		return NULL;
	}
	jb->strs = ns;
	return jb->strs[jb->n_strs++] = s;
}

/* A message's content: a string, or a list of {"type":"text","text":...}. */
static const char *content_text(struct job *jb, const cJSON *c, bool *ok)
{
	*ok = true;
	if (!c)
		return NULL;
	if (cJSON_IsString(c))
		return c->valuestring;
	if (!cJSON_IsArray(c)) {
		*ok = false;
		return NULL;
	}
	struct sb b = {0};
	const cJSON *part;
	cJSON_ArrayForEach(part, c) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
		const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
		if (!cJSON_IsString(t) || (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text")))) {
			*ok = false;
			free(b.p);
			return NULL;
		}
		sb_str(&b, t->valuestring);
	}
	return keep(jb, b.p ? b.p : strdup(""));
}

static const char *parse_chat(struct ms_server *s, struct job *jb, const cJSON *req,
			      struct ms_chat_request *cr, char *msg, size_t msz)
{
	const cJSON *ms = jget(req, "messages"), *m;
	(void)s;
	if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms)) {
		snprintf(msg, msz, "\"messages\" must be a non-empty list");
		return "messages";
	}
	int n = cJSON_GetArraySize(ms), ntc = 0;
	cJSON_ArrayForEach(m, ms) {
		const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		ntc += cJSON_IsArray(tc) ? cJSON_GetArraySize(tc) : 0;
	}
	jb->msgs = calloc((size_t)n, sizeof(*jb->msgs));
	jb->tcalls = calloc((size_t)ntc + 1, sizeof(*jb->tcalls));
	if (!jb->msgs || !jb->tcalls) {
		snprintf(msg, msz, "out of memory");
		return "messages";
	}
	int i = 0, t = 0;
	cJSON_ArrayForEach(m, ms) {
		struct ms_chat_message *cm = &jb->msgs[i];
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		bool ok;
		if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
			snprintf(msg, msz, "messages[%d] needs a \"role\"", i);
			return "messages";
		}
		cm->role = role->valuestring;
		cm->content = content_text(jb, jget(m, "content"), &ok);
		if (!ok) {
			snprintf(msg, msz, "messages[%d].content must be a string or a list of text parts", i);
			return "messages";
		}
		const cJSON *r = jget(m, "reasoning_content");
		r = r ? r : jget(m, "reasoning");
		if (r && cJSON_IsString(r))
			cm->reasoning = r->valuestring;
		const cJSON *tc = jget(m, "tool_calls"), *c1;
		if (tc && cJSON_IsArray(tc)) {
			cm->tool_calls = &jb->tcalls[t];
			cJSON_ArrayForEach(c1, tc) {
				const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c1, "function");
				const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
				const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
				const cJSON *id = cJSON_GetObjectItemCaseSensitive(c1, "id");
				if (!cJSON_IsString(nm)) {
					snprintf(msg, msz, "messages[%d].tool_calls[%d].function.name is required", i,
						 cm->n_tool_calls);
					return "messages";
				}
				jb->tcalls[t].name = nm->valuestring;
				jb->tcalls[t].id = cJSON_IsString(id) ? id->valuestring : NULL;
				jb->tcalls[t].arguments = cJSON_IsString(args) ? args->valuestring
							  : args ? keep(jb, cJSON_PrintUnformatted(args)) : NULL;
				t++;
				cm->n_tool_calls++;
			}
		}
		if (!strcmp(cm->role, "tool")) {
			const cJSON *nm = jget(m, "name"), *id = jget(m, "tool_call_id");
			if (nm && cJSON_IsString(nm))
				cm->name = nm->valuestring;
			for (int q = 0; !cm->name && id && cJSON_IsString(id) && q < t; q++)
				if (jb->tcalls[q].id && !strcmp(jb->tcalls[q].id, id->valuestring))
					cm->name = jb->tcalls[q].name;
			if (!cm->name) {
				snprintf(msg, msz, "messages[%d]: a tool message needs \"name\" or the "
					 "\"tool_call_id\" of an earlier tool call", i);
				return "messages";
			}
		}
		i++;
	}
	cr->messages = jb->msgs;
	cr->n_messages = n;
	const cJSON *tools = jget(req, "tools"), *tl;
	if (tools) {
		if (!cJSON_IsArray(tools)) {
			snprintf(msg, msz, "\"tools\" must be a list");
			return "tools";
		}
		jb->tools = calloc((size_t)cJSON_GetArraySize(tools) + 1, sizeof(*jb->tools));
		int k = 0;
		cJSON_ArrayForEach(tl, tools) {
			const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tl, "function");
			const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
			const cJSON *ds = cJSON_GetObjectItemCaseSensitive(fn, "description");
			const cJSON *ps = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
			if (!jb->tools || !cJSON_IsString(nm)) {
				snprintf(msg, msz, "tools[%d].function.name is required", k);
				return "tools";
			}
			jb->tools[k].name = nm->valuestring;
			jb->tools[k].description = cJSON_IsString(ds) ? ds->valuestring : NULL;
			jb->tools[k].parameters = ps && !cJSON_IsNull(ps) ? keep(jb, cJSON_PrintUnformatted(ps))
									  : NULL;
			k++;
		}
		cr->tools = jb->tools;
		cr->n_tools = k;
	}
	const cJSON *re = jget(req, "reasoning_effort");
	if (re) {
		if (!cJSON_IsString(re) || (strcmp(re->valuestring, "low") && strcmp(re->valuestring, "medium") &&
					    strcmp(re->valuestring, "high"))) {
			snprintf(msg, msz, "\"reasoning_effort\" must be \"low\", \"medium\" or \"high\"");
			return "reasoning_effort";
		}
		cr->reasoning_effort = re->valuestring;
	}
	return NULL;
}

static enum MHD_Result h_chat(struct ms_server *s, struct MHD_Connection *c, struct conn *k, cJSON *req)
{
	char msg[1024];
	int n = 1;
	if (!s->tok || !s->harmony) {
		cJSON_Delete(req);
		return BAD(NULL, "chat needs the model's tokenizer.json with the harmony special tokens "
			   "(<|start|>, <|message|>, ...); use /v1/completions");
	}
	struct job *jb = job_new(s, req, true);
	if (!jb) {
		cJSON_Delete(req);
		return send_error(s, c, k, 500, "server_error", NULL, "out of memory");
	}
	struct ms_chat_request cr = {0};
	const char *bad = parse_common(s, jb, req, &n, msg, sizeof(msg));
	if (!bad)
		bad = parse_chat(s, jb, req, &cr, msg, sizeof(msg));
	char *text = NULL;
	size_t tlen = 0, nsp = 0;
	struct ms_harmony_span *sp = NULL;
	struct ms_err err = {0};
	if (!bad && ms_harmony_render_ex(&cr, &text, &tlen, &sp, &nsp, &err)) {
		bad = "messages";
		snprintf(msg, sizeof(msg), "%s", err.msg);
	}
	/* encode: text between the renderer's special tokens with special
	 * tokens off (a user's "<|end|>" stays text), the specials by id */
	int32_t *ids = NULL;
	int64_t nid = 0;
	if (!bad) {
		ids = malloc((tlen + nsp + 1) * sizeof(int32_t));
		size_t at = 0;
		for (size_t q = 0; ids && q <= nsp && !bad; q++) {
			size_t end = q < nsp ? sp[q].off : tlen;
			int32_t *part;
			size_t np;
			if (end > at) {
				if (ms_tokenizer_encode(s->tok, text + at, end - at, false, &part, &np, &err)) {
					bad = "messages";
					snprintf(msg, sizeof(msg), "%s", err.msg);
					break;
				}
				memcpy(ids + nid, part, np * sizeof(int32_t));
				nid += (int64_t)np;
				free(part);
			}
			if (q < nsp) {
				char tokname[64];
				snprintf(tokname, sizeof(tokname), "%.*s", (int)sp[q].len, text + sp[q].off);
				ids[nid++] = ms_tokenizer_find(s->tok, tokname);
				at = sp[q].off + sp[q].len;
			}
		}
	}
	free(text);
	free(sp);
	if (bad) {
		free(ids);
		job_free(jb);
		return BAD(bad, "%s", msg);
	}
	if (!jget(req, "max_tokens") && !jget(req, "max_completion_tokens"))
		jb->params.max_tokens = s->max_model_len - nid; /* the rest of the context */
	jb->n_prompts = 1;
	jb->prompts = calloc(1, sizeof(int32_t *));
	jb->n_prompt = calloc(1, sizeof(int64_t));
	if (jb->prompts)
		jb->prompts[0] = ids;
	if (jb->n_prompt)
		jb->n_prompt[0] = nid;
	int ne = 0;
	jb->stop_ids[ne++] = s->hids.ret;
	jb->stop_ids[ne++] = s->hids.call;
	for (int i = 0; i < s->n_eos && ne < 10; i++)
		jb->stop_ids[ne++] = s->eos[i];
	jb->params.stop_ids = jb->stop_ids;
	jb->params.n_stop_ids = ne;
	jb->params.skip_special = true;
	jb->g = gen_new(s, n);
	if (!jb->prompts || !jb->n_prompt || !jb->g || !job_alloc(jb, n)) {
		job_free(jb);
		return send_error(s, c, k, 500, "server_error", NULL, "out of memory");
	}
	/* chat stop strings apply to the answer, not to channel headers */
	for (int i = 0; i < n; i++) {
		ms_harmony_parser_init(&jb->hp[i], &s->hids, on_harmony, NULL);
		if (jb->params.n_stop)
			ms_stopper_init(&jb->cstop[i], jb->stops, (size_t)jb->params.n_stop, false, &err);
	}
	int nstop = jb->params.n_stop;
	jb->params.n_stop = 0;
	if (gen_submit(jb->g, jb->prompts, jb->n_prompt, &jb->params, &err)) {
		jb->params.n_stop = nstop;
		enum MHD_Result r = send_submit_error(s, c, k, &err);
		job_free(jb);
		return r;
	}
	jb->params.n_stop = nstop;
	return respond(s, c, k, jb);
}

/* ---- small endpoints ---- */

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
	cJSON *j = cJSON_CreateObject();
	if (st == MS_SERVER_READY) {
		cJSON_AddStringToObject(j, "status", "ok");
		return send_json(s, c, k, 200, j);
	}
	cJSON_AddStringToObject(j, "status", st == MS_SERVER_LOADING ? "loading"
					     : st == MS_SERVER_FAILED ? "failed" : "draining");
	cJSON_AddStringToObject(j, "reason", reason);
	return send_json(s, c, k, 503, j);
}

static cJSON *model_card(struct ms_server *s)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", s->cfg.model_name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", 0);
	cJSON_AddStringToObject(m, "owned_by", "moeserve");
	cJSON_AddNumberToObject(m, "max_model_len", (double)s->max_model_len);
	return m;
}

static enum MHD_Result h_models(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				const char *one)
{
	if (one) {
		if (strcmp(one, s->cfg.model_name))
			return send_error(s, c, k, 404, "invalid_request_error", "model",
					  "the model \"%s\" does not exist (this server has \"%s\")", one,
					  s->cfg.model_name);
		return send_json(s, c, k, 200, model_card(s));
	}
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "object", "list");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "data"), model_card(s));
	return send_json(s, c, k, 200, j);
}

static enum MHD_Result h_tokenize(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				  cJSON *req)
{
	const cJSON *p = jget(req, "prompt");
	if (!p)
		p = jget(req, "text");
	const cJSON *sp = jget(req, "add_special_tokens");
	if (!s->tok) {
		cJSON_Delete(req);
		return BAD(NULL, "this model has no tokenizer.json");
	}
	if (!p || !cJSON_IsString(p)) {
		cJSON_Delete(req);
		return BAD("prompt", "\"prompt\" must be a string");
	}
	/* special tokens written in the text count only when asked */
	bool special = sp && cJSON_IsTrue(sp);
	int32_t *ids;
	size_t n;
	struct ms_err err = {0};
	if (ms_tokenizer_encode(s->tok, p->valuestring, strlen(p->valuestring), special, &ids, &n, &err)) {
		cJSON_Delete(req);
		return BAD("prompt", "%s", err.msg);
	}
	cJSON_Delete(req);
	cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "tokens");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
	free(ids);
	cJSON_AddNumberToObject(j, "count", (double)n);
	cJSON_AddNumberToObject(j, "max_model_len", (double)s->max_model_len);
	return send_json(s, c, k, 200, j);
}

static enum MHD_Result h_detokenize(struct ms_server *s, struct MHD_Connection *c, struct conn *k,
				    cJSON *req)
{
	const cJSON *t = jget(req, "tokens"), *it;
	if (!s->tok || !t || !cJSON_IsArray(t)) {
		cJSON_Delete(req);
		return BAD("tokens", s->tok ? "\"tokens\" must be a list of ids" : "this model has no tokenizer.json");
	}
	int n = cJSON_GetArraySize(t), i = 0;
	int32_t *ids = malloc((size_t)(n + 1) * sizeof(int32_t));
	cJSON_ArrayForEach(it, t) {
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= ms_tokenizer_n_ids(s->tok) ||
		    it->valuedouble != floor(it->valuedouble)) {
			free(ids);
			cJSON_Delete(req);
			return BAD("tokens", "tokens[%d] is not an id in [0, %d)", i, ms_tokenizer_n_ids(s->tok));
		}
		ids[i++] = (int32_t)it->valuedouble;
	}
	cJSON_Delete(req);
	char *text;
	size_t len;
	struct ms_err err = {0};
	int rc = ms_tokenizer_decode(s->tok, ids, (size_t)n, false, &text, &len, &err);
	free(ids);
	if (rc)
		return BAD("tokens", "%s", err.msg);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "prompt", text);
	free(text);
	return send_json(s, c, k, 200, j);
}

static enum MHD_Result h_metrics(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	struct ms_engine_stats st;
	bool ready = atomic_load(&s->state) == MS_SERVER_READY && s->engine;
	if (ready)
		ms_engine_get_stats(s->engine, &st);
	char *out;
	size_t len;
	struct ms_err err = {0};
	if (ms_metrics_render(s->metrics, ready ? &st : NULL, &out, &len, &err))
		return send_error(s, c, k, 500, "server_error", NULL, "%s", err.msg);
	return send_text(s, c, k, 200, "text/plain; version=0.0.4; charset=utf-8", out, len);
}

/* ---- dispatch ---- */

static void warn_unknown_fields(struct ms_server *s, const cJSON *req, const char *const *known)
{
	const cJSON *it;
	if (atomic_load(&s->warned_unknown))
		return;
	cJSON_ArrayForEach(it, req) {
		bool ok = false;
		for (const char *const *k = known; *k && !ok; k++)
			ok = !strcmp(*k, it->string);
		if (!ok && !atomic_exchange(&s->warned_unknown, true)) {
			fprintf(stderr, "moeserve: note: ignoring unknown request field \"%s\" (logged once)\n",
				it->string);
			return;
		}
	}
}

static const char *const known_fields[] = {
	"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
	"top_k", "min_p", "seed", "stop", "n", "presence_penalty", "frequency_penalty",
	"repetition_penalty", "logit_bias", "logprobs", "top_logprobs", "echo", "stream",
	"stream_options", "tools", "tool_choice", "reasoning_effort", "user", "suffix", "best_of",
	"parallel_tool_calls", "response_format", NULL,
};

static bool authorized(struct ms_server *s, struct MHD_Connection *c)
{
	if (!s->cfg.api_key)
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!h || strncmp(h, "Bearer ", 7))
		return false;
	/* constant-time comparison: no timing hint about the key */
	const char *a = h + 7, *b = s->cfg.api_key;
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = la != lb;
	for (size_t i = 0; i < lb; i++)
		diff |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
	return diff == 0;
}

static enum MHD_Result dispatch(struct ms_server *s, struct MHD_Connection *c, struct conn *k)
{
	const char *m = k->method, *u = k->path;
	bool get = !strcmp(m, "GET"), post = !strcmp(m, "POST");
	if (!strcmp(m, "OPTIONS") && s->cfg.cors_origin)
		return send_text(s, c, k, 204, "text/plain", strdup(""), 0);
	/* unauthenticated, cheap */
	if (!strcmp(u, "/health") || !strcmp(u, "/live") || !strcmp(u, "/metrics")) {
		if (!get)
			goto method;
		if (!strcmp(u, "/live")) {
			cJSON *j = cJSON_CreateObject();
			cJSON_AddStringToObject(j, "status", "alive");
			return send_json(s, c, k, 200, j);
		}
		return !strcmp(u, "/health") ? h_health(s, c, k) : h_metrics(s, c, k);
	}
	bool known = !strcmp(u, "/v1/completions") || !strcmp(u, "/v1/chat/completions") ||
		     !strcmp(u, "/v1/models") || !strncmp(u, "/v1/models/", 11) || !strcmp(u, "/tokenize") ||
		     !strcmp(u, "/detokenize");
	if (!known)
		return send_error(s, c, k, 404, "invalid_request_error", NULL, "no route %s %s", m, u);
	if (!authorized(s, c))
		return send_error(s, c, k, 401, "authentication_error", NULL,
				  "a valid \"Authorization: Bearer <key>\" header is required");
	bool wants_get = !strncmp(u, "/v1/models", 10);
	if (wants_get ? !get : !post)
		goto method;
	char reason[sizeof(s->reason)];
	int st = read_status(s, reason, sizeof(reason));
	if (st != MS_SERVER_READY)
		return send_error(s, c, k, 503, "server_unavailable", NULL, "the server is %s: %s",
				  st == MS_SERVER_LOADING ? "loading the model" : st == MS_SERVER_FAILED
				  ? "not serving" : "shutting down", reason);
	if (wants_get)
		return h_models(s, c, k, u[10] == '/' ? u + 11 : NULL);
	if (k->too_big)
		return send_error(s, c, k, 413, "invalid_request_error", NULL,
				  "the body is larger than %zu bytes (--max-body-bytes)", s->cfg.max_body_bytes);
	cJSON *req = cJSON_ParseWithLength(k->body ? k->body : "", k->len);
	if (!req || !cJSON_IsObject(req)) {
		cJSON_Delete(req);
		return send_error(s, c, k, 400, "invalid_request_error", NULL,
				  "the body is not a JSON object");
	}
	const cJSON *model = jget(req, "model");
	if (model && cJSON_IsString(model) && strcmp(model->valuestring, s->cfg.model_name)) {
		enum MHD_Result r = send_error(s, c, k, 404, "invalid_request_error", "model",
					       "the model \"%s\" does not exist (this server has \"%s\")",
					       model->valuestring, s->cfg.model_name);
		cJSON_Delete(req);
		return r;
	}
	if (!strcmp(u, "/tokenize"))
		return h_tokenize(s, c, k, req);
	if (!strcmp(u, "/detokenize"))
		return h_detokenize(s, c, k, req);
	warn_unknown_fields(s, req, known_fields);
	if (!strcmp(u, "/v1/completions"))
		return h_completions(s, c, k, req);
	return h_chat(s, c, k, req);
method:
	{
		/* the error envelope like every other error, plus Allow */
		const char *allow = !strncmp(u, "/v1/models", 10) || !strcmp(u, "/health") ||
				    !strcmp(u, "/live") || !strcmp(u, "/metrics") ? "GET" : "POST";
		char msg[512];
		snprintf(msg, sizeof(msg), "method %s not allowed on %s (allowed: %s)", m, u, allow);
		return error_response(s, c, k, 405, "invalid_request_error", NULL, allow, msg);
	}
}

/* ---- libmicrohttpd glue ---- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	struct ms_server *s = cls;
	struct conn *k = *con_cls;
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (!k)
			return MHD_NO;
		k->t0 = ms_now_s();
		snprintf(k->method, sizeof(k->method), "%s", method);
		snprintf(k->path, sizeof(k->path), "%s", url);
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes)
			k->too_big = true;
		*con_cls = k;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!k->too_big && k->len + *upload_size > s->cfg.max_body_bytes)
			k->too_big = true;
		if (!k->too_big) {
			if (k->len + *upload_size + 1 > k->cap) {
				size_t nc = k->cap ? k->cap : 4096;
				while (nc < k->len + *upload_size + 1)
					nc *= 2;
				char *nb = realloc(k->body, nc);
				if (!nb)
					return MHD_NO;
				k->body = nb;
				k->cap = nc;
			}
			memcpy(k->body + k->len, upload, *upload_size);
			k->len += *upload_size;
		}
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

int ms_server_start(struct ms_server *s, const struct ms_server_config *cfg,
		    struct ms_metrics *metrics, struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	s->metrics = metrics;
	pthread_mutex_init(&s->reason_mu, NULL);
	set_status(s, MS_SERVER_LOADING, "loading the model");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
	if (inet_pton(AF_INET, cfg->host, &a.sin_addr) != 1)
		return ms_err_set(err, -EINVAL, "--host: \"%s\" is not an IPv4 address", cfg->host);
	s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
					     MHD_USE_ITC,
				     (uint16_t)cfg->port, NULL, NULL, on_request, s,
				     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
				     MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)600,
				     MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1024, MHD_OPTION_END);
	if (!s->daemon)
		return ms_err_set(err, -EADDRINUSE, "cannot listen on %s:%d (in use, or not allowed)",
				  cfg->host, cfg->port);
	return 0;
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
		s->hids = (struct ms_harmony_ids){
			ms_tokenizer_find(tok, "<|start|>"), ms_tokenizer_find(tok, "<|end|>"),
			ms_tokenizer_find(tok, "<|message|>"), ms_tokenizer_find(tok, "<|channel|>"),
			ms_tokenizer_find(tok, "<|constrain|>"), ms_tokenizer_find(tok, "<|return|>"),
			ms_tokenizer_find(tok, "<|call|>")};
		s->harmony = s->hids.start >= 0 && s->hids.end >= 0 && s->hids.message >= 0 &&
			     s->hids.channel >= 0 && s->hids.ret >= 0 && s->hids.call >= 0;
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
		pthread_mutex_destroy(&s->reason_mu);
	}
	s->daemon = NULL;
}
