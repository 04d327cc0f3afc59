/* api.c: the API's state and endpoints (api.h). */
#include "api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "job.h"
#include "ms-clock.h"
#include "grammar-cache.h"
#include "ms-json.h"
#include "answer.h"
#include "messages-answer.h"

void ms_api_init(struct ms_api *a, const struct ms_api_config *cfg, struct ms_metrics *metrics)
{
	memset(a, 0, sizeof(*a));
	a->cfg = *cfg;
	a->metrics = metrics;
	/* ids (resp_, msg_, toolu_, call_) from a random start: another
	 * process, a restart or a replica behind the same balancer never
	 * repeats one a client still holds */
	unsigned long long start = 0;
	if (getrandom(&start, sizeof(start), 0) != (ssize_t)sizeof(start))
		start = (unsigned long long)time(NULL) << 20 ^ (unsigned long long)getpid();
	atomic_store(&a->counter, start);
	pthread_mutex_init(&a->noted_mu, NULL);
	ms_responses_store_init(&a->rstore, cfg->responses_store);
	ms_bg_list_init(&a->bgs);
}

void ms_api_set_model(struct ms_api *a, struct ms_model *m, struct ms_tokenizer *tok,
		      struct ms_engine *e)
{
	a->model = m;
	a->tok = tok;
	a->engine = e;
	/* the context advertised is the engine's */
	a->max_model_len = ms_engine_max_context(e);
	a->n_eos = m->cfg.n_eos < 8 ? m->cfg.n_eos : 8;
	for (int i = 0; i < a->n_eos; i++)
		a->eos[i] = (int32_t)m->cfg.eos_ids[i];
	if (!tok)
		return;
	a->hids = ms_harmony_ids_find(tok);
	a->harmony = ms_harmony_ids_complete(&a->hids);
	/* structured outputs; without (out of memory) they are refused */
	struct ms_err err = {0};
	if (ms_grammar_cache_new(ms_tokenizer_vocab(tok), m->cfg.vocab, a->cfg.grammar_cache,
				 m->be->mask_words, &a->grammars, &err))
		fprintf(stderr, "moeserve: structured outputs are off: %s\n", err.msg);
}

void ms_api_free(struct ms_api *a)
{
	ms_bg_list_free(&a->bgs); /* their ends are stored */
	pthread_mutex_destroy(&a->noted_mu);
	ms_responses_store_free(&a->rstore);
	ms_grammar_cache_free(a->grammars);
	a->grammars = NULL;
}

/* ---- errors ---- */

/* Anthropic's error type for a status; an engine out of KV cache is its
 * 529 overloaded_error (a daemon loading or draining stays a 503, which
 * load balancers retry elsewhere). */
static const char *anthropic_error(int *status, const char *code)
{
	if (*status == 503 && code && !strcmp(code, "kv_cache_exhausted"))
		*status = 529;
	switch (*status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	case 503:
	case 529: return "overloaded_error";
	default: return *status < 500 ? "invalid_request_error" : "api_error";
	}
}

void ms_api_error_code(struct ms_api_reply *r, int status, const char *type, const char *param,
		       const char *code, const char *msg)
{
	unsigned long f0 = ms_json_failures(); /* before building: its own failures count */
	cJSON *j;
	if (r->dialect == MS_DIALECT_ANTHROPIC) {
		const char *t = anthropic_error(&status, code);
		j = ms_answer_anthropic_error(t, msg);
	} else {
		j = ms_answer_error_code(status, type, param, code, msg);
	}
	r->status = status;
	r->text = ms_json_print(j, f0);
	r->oom = !r->text;
}

void ms_api_verror(struct ms_api_reply *r, int status, const char *type, const char *param,
		   const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	ms_api_error_code(r, status, type, param, NULL, msg);
}

void ms_api_error(struct ms_api_reply *r, int status, const char *type, const char *param,
		  const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ms_api_verror(r, status, type, param, fmt, ap);
	va_end(ap);
}

static void req_error(struct ms_api_reply *r, const struct ms_req_error *e)
{
	ms_api_error_code(r, e->status, e->type, e->param, e->code, e->msg);
}

/* j NULL: building it ran out of memory. */
static void json_reply(struct ms_api_reply *r, int status, cJSON *j)
{
	r->status = status;
	r->json = j;
	r->oom = !j;
}

/* Map an engine refusal to its HTTP status. A full queue is a 429 and a
 * KV cache whose queue holds a cache's worth already a 503, both with the
 * engine's guess of when a request will be taken as Retry-After; a
 * request that can never fit is a 400 at once. */
static void submit_error(struct ms_api *a, const struct ms_err *err, struct ms_api_reply *r)
{
	if (err->code == -EBUSY || err->code == -EAGAIN) {
		struct ms_engine_stats st;
		ms_engine_get_stats(a->engine, &st);
		r->retry_after = st.retry_after_s;
	}
	switch (err->code) {
	case -EBUSY:
		return ms_api_error(r, 429, "rate_limit_exceeded", NULL, "%s; retry later", err->msg);
	case -EAGAIN:
		return ms_api_error_code(r, 503, "server_error", NULL, "kv_cache_exhausted", err->msg);
	case -EIO: /* the model's weights are gone (job.c marked /health failed) */
		return ms_api_error(r, 503, "server_error", NULL, "%s", err->msg);
	case -E2BIG: /* Codex and the SDKs know this code: the prompt must shrink */
		return ms_api_error_code(r, 400, "invalid_request_error", NULL,
					 "context_length_exceeded", err->msg);
	case -ENOSPC:
	case -EINVAL:
		return ms_api_error(r, 400, "invalid_request_error", NULL, "%s", err->msg);
	default:
		return ms_api_error(r, 500, "server_error", NULL, "%s", err->msg);
	}
}

/* ---- endpoints ---- */

static struct ms_req_model req_model(const struct ms_api *a)
{
	return (struct ms_req_model){
		.name = a->cfg.model_name, .vocab = a->model ? a->model->cfg.vocab : 0,
		.max_model_len = a->max_model_len, .tok = a->tok, .grammars = a->grammars,
		.harmony = a->harmony,
		.hids = a->hids, .eos = a->eos, .n_eos = a->n_eos,
		.default_max_tokens = a->cfg.max_tokens,
	};
}

bool ms_api_body(struct ms_api *a, const char *body, size_t len, cJSON **req,
		 struct ms_api_reply *r)
{
	struct ms_req_model m = req_model(a);
	struct ms_req_error e = {0}; /* ms_req_body's 404 leaves "code" unset */
	/* Anthropic's clients name their own models (Claude Code's
	 * claude-sonnet-...): the daemon serves one, so any name is it */
	if (r->dialect == MS_DIALECT_ANTHROPIC)
		m.name = NULL;
	if (!ms_req_body(&m, body, len, req, &e))
		return true;
	req_error(r, &e);
	return false;
}

/* Queue rq's calls (rq taken): r gets the job, or the refusal. */
static void run_job(struct ms_api *a, struct ms_req_gen *rq, struct ms_api_reply *r)
{
	struct ms_job *jb = ms_job_new(a, rq);
	if (!jb)
		return ms_api_error(r, 500, "server_error", NULL, "out of memory");
	struct ms_err err = {0};
	if (ms_job_submit(jb, &err)) {
		submit_error(a, &err, r);
		/* calls already queued are cancelled; waiting for their FINISH
		 * before freeing is the calls' refcount's job */
		ms_job_free(jb);
		return;
	}
	r->status = 200;
	r->job = jb;
}

/* Whether name's note is due: not logged in the last minute (the oldest
 * remembered name makes room). */
static bool note_due(struct ms_api *a, const char *name)
{
	double now = ms_now_s();
	int slot = 0;
	bool due = true;
	pthread_mutex_lock(&a->noted_mu);
	for (int i = 0; i < MS_API_NOTED; i++) {
		if (!strncmp(a->noted[i].name, name, sizeof(a->noted[i].name) - 1)) {
			slot = i, due = now - a->noted[i].at >= 60;
			break;
		}
		if (a->noted[i].at < a->noted[slot].at)
			slot = i;
	}
	if (due) {
		snprintf(a->noted[slot].name, sizeof(a->noted[slot].name), "%s", name);
		a->noted[slot].at = now;
	}
	pthread_mutex_unlock(&a->noted_mu);
	return due;
}

/* Each field completions and chat do not know: ignored, as OpenAI's
 * clients send fields of newer APIs, but said (once a minute a name). */
static void warn_unknown_fields(struct ms_api *a, const cJSON *req)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, req)
		if (!ms_req_known_field(it->string) && note_due(a, it->string))
			fprintf(stderr, "moeserve: note: ignoring unknown request field \"%.63s\" (said at "
				"most once a minute)\n", it->string);
}

/* POST /v1/completions, /v1/chat/completions */
void ms_api_generate(struct ms_api *a, cJSON *req, bool chat, struct ms_api_reply *r)
{
	warn_unknown_fields(a, req);
	struct ms_req_model m = req_model(a);
	struct ms_req_gen *rq;
	struct ms_req_error e;
	if (chat ? ms_req_chat(&m, req, &rq, &e) : ms_req_completion(&m, req, &rq, &e))
		return req_error(r, &e);
	run_job(a, rq, r);
}

/* A Responses body as its chat request: previous_response_id's
 * conversation from the store, then this turn (req taken). */
static int responses_request(struct ms_api *a, cJSON *req, struct ms_req_gen **rq,
			     struct ms_api_reply *r)
{
	struct ms_req_model m = req_model(a);
	const cJSON *prev = cJSON_GetObjectItemCaseSensitive(req, "previous_response_id");
	cJSON *items = NULL;
	if (cJSON_IsString(prev) && !ms_responses_store_get(&a->rstore, prev->valuestring, NULL, &items)) {
		char msg[256];
		snprintf(msg, sizeof(msg), "previous_response_id: no stored response \"%.64s\" (never "
			 "stored, evicted after --responses-store %d, or deleted)", prev->valuestring,
			 a->rstore.cap);
		cJSON_Delete(req);
		ms_api_error_code(r, 404, "invalid_request_error", "previous_response_id", NULL, msg);
		return -ENOENT;
	}
	struct ms_req_error e;
	int rc = ms_req_responses(&m, req, items, rq, &e);
	cJSON_Delete(items);
	if (rc)
		req_error(r, &e);
	return rc;
}

/* POST /v1/responses. Codex's extra fields are expected here: no note. */
void ms_api_responses(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	struct ms_req_gen *rq;
	if (responses_request(a, req, &rq, r))
		return;
	if (rq->ignored_tool && !atomic_exchange(&a->warned_tool, true))
		fprintf(stderr, "moeserve: note: ignoring tools of type \"%s\" (function tools only; "
			"logged once)\n", rq->ignored_tool);
	if (!rq->background)
		return run_job(a, rq, r);
	/* its own thread runs it; its events are always written (and kept for
	 * a later reader), and it is stored whatever "store" says */
	bool stream = rq->stream;
	rq->stream = rq->store = true;
	run_job(a, rq, r);
	if (!r->job)
		return;
	struct ms_bg *bg;
	struct ms_err err = {0};
	int rc = ms_bg_start(a, r->job, &bg, &err);
	r->job = NULL;
	if (rc)
		return ms_api_error(r, 500, "server_error", NULL, "%s", err.msg);
	if (stream) {
		r->bg = bg;
		r->bg_pos = 0;
		return;
	}
	cJSON *j = ms_bg_snapshot(bg);
	ms_bg_unref(bg);
	json_reply(r, 200, j);
}

/* POST /v1/messages: Anthropic's clients send server tools (web search,
 * bash, text editor) that Anthropic runs: skipped, logged once. */
void ms_api_messages(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	struct ms_req_model m = req_model(a);
	struct ms_req_gen *rq;
	struct ms_req_error e;
	if (ms_req_messages(&m, req, &rq, &e))
		return req_error(r, &e);
	if (rq->ignored_tool && !atomic_exchange(&a->warned_tool, true))
		fprintf(stderr, "moeserve: note: skipping tools of type \"%s\" (Anthropic's server "
			"tools; custom tools only; logged once)\n", rq->ignored_tool);
	run_job(a, rq, r);
	if (r->job)
		ms_messages_begin(r->job);
}

void ms_api_count_tokens(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	struct ms_req_model m = req_model(a);
	struct ms_req_error e;
	int64_t n;
	int rc = ms_req_messages_count(&m, req, &n, &e);
	cJSON_Delete(req);
	if (rc)
		return req_error(r, &e);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "input_tokens", (double)n);
	json_reply(r, 200, j);
}

/* POST /v1/responses/input_tokens: the prompt's tokens of a Responses
 * body, without generating. */
void ms_api_response_input_tokens(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	struct ms_req_gen *rq;
	if (responses_request(a, req, &rq, r))
		return;
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "object", "response.input_tokens");
	cJSON_AddNumberToObject(j, "input_tokens", (double)rq->n_prompt[0]);
	ms_req_gen_free(rq);
	json_reply(r, 200, j);
}

/* A background run's stream from the event after `after`, or the
 * snapshot of the response as it stands (bg taken). */
static void bg_reply(struct ms_bg *bg, bool stream, long after, struct ms_api_reply *r)
{
	if (!stream) {
		cJSON *j = ms_bg_snapshot(bg);
		ms_bg_unref(bg);
		return json_reply(r, 200, j);
	}
	long pos = ms_bg_stream_start(bg, after);
	if (pos < 0) {
		ms_bg_unref(bg);
		return ms_api_error(r, 400, "invalid_request_error", "starting_after", "starting_after "
				    "%ld: the stream has no event after that sequence number yet", after);
	}
	r->status = 200;
	r->bg = bg;
	r->bg_pos = pos;
}

void ms_api_response_id(struct ms_api *a, const char *id, bool del, bool stream,
			long starting_after, struct ms_api_reply *r)
{
	struct ms_bg *bg = ms_bg_find(&a->bgs, id);
	if (bg && !del)
		return bg_reply(bg, stream, starting_after, r);
	if (bg) { /* deleting a running one stops it */
		ms_bg_cancel(bg, 0);
		ms_bg_unref(bg);
	}
	if (stream && !del)
		return ms_api_error(r, 400, "invalid_request_error", "stream", "only a background "
				    "response's stream can be read again (\"background\": true)");
	cJSON *resp = NULL;
	bool found = del ? ms_responses_store_delete(&a->rstore, id)
			 : ms_responses_store_get(&a->rstore, id, &resp, NULL);
	if (!found)
		return ms_api_error(r, 404, "invalid_request_error", "response_id",
				    "no stored response \"%.64s\"", id);
	if (!del)
		return json_reply(r, 200, resp);
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "id", id);
	cJSON_AddStringToObject(j, "object", "response");
	cJSON_AddBoolToObject(j, "deleted", true);
	json_reply(r, 200, j);
}

void ms_api_response_cancel(struct ms_api *a, const char *id, struct ms_api_reply *r)
{
	struct ms_bg *bg = ms_bg_find(&a->bgs, id);
	if (!bg) {
		bool stored = ms_responses_store_get(&a->rstore, id, NULL, NULL);
		return ms_api_error(r, stored ? 400 : 404, "invalid_request_error", "response_id",
				    stored ? "only background responses can be cancelled (\"background\": "
				    "true)" : "no response \"%.64s\"", id);
	}
	ms_bg_cancel(bg, 5.0); /* one engine step stops it */
	bg_reply(bg, false, 0, r);
}

/* {"object": "list", "data", "first_id", "last_id", "has_more"} of items. */
static cJSON *item_list(cJSON *items)
{
	cJSON *j = cJSON_CreateObject();
	const cJSON *first = cJSON_GetArrayItem(items, 0);
	const cJSON *last = cJSON_GetArrayItem(items, cJSON_GetArraySize(items) - 1);
	const cJSON *fi = cJSON_GetObjectItemCaseSensitive(first, "id");
	const cJSON *li = cJSON_GetObjectItemCaseSensitive(last, "id");
	cJSON_AddStringToObject(j, "object", "list");
	ms_json_put(j, "data", items);
	ms_json_put(j, "first_id", cJSON_IsString(fi) ? cJSON_CreateString(fi->valuestring)
						       : cJSON_CreateNull());
	ms_json_put(j, "last_id", cJSON_IsString(li) ? cJSON_CreateString(li->valuestring)
						     : cJSON_CreateNull());
	cJSON_AddBoolToObject(j, "has_more", false);
	return j;
}

/* The input that led to the response: the stored conversation less the
 * response's own output (or a running background one's input). */
void ms_api_response_input_items(struct ms_api *a, const char *id, struct ms_api_reply *r)
{
	cJSON *resp = NULL, *items = NULL;
	if (ms_responses_store_get(&a->rstore, id, &resp, &items)) {
		int out = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(resp, "output"));
		for (int k = 0; k < out && cJSON_GetArraySize(items); k++)
			cJSON_DeleteItemFromArray(items, cJSON_GetArraySize(items) - 1);
		cJSON_Delete(resp);
		return json_reply(r, 200, item_list(items));
	}
	struct ms_bg *bg = ms_bg_find(&a->bgs, id);
	if (!bg)
		return ms_api_error(r, 404, "invalid_request_error", "response_id", "no stored response "
				    "\"%.64s\"", id);
	items = ms_bg_input_items(bg);
	ms_bg_unref(bg);
	json_reply(r, 200, item_list(items));
}

void ms_api_tokenize(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	struct ms_req_model m = req_model(a);
	struct ms_req_error e;
	int32_t *ids;
	size_t n;
	int rc = ms_req_tokenize(&m, req, &ids, &n, &e);
	cJSON_Delete(req);
	if (rc)
		return req_error(r, &e);
	cJSON *j = ms_answer_tokens(ids, n, a->max_model_len);
	free(ids);
	json_reply(r, 200, j);
}

void ms_api_detokenize(struct ms_api *a, cJSON *req, struct ms_api_reply *r)
{
	struct ms_req_model m = req_model(a);
	struct ms_req_error e;
	char *text;
	size_t len;
	int rc = ms_req_detokenize(&m, req, &text, &len, &e);
	cJSON_Delete(req);
	if (rc)
		return req_error(r, &e);
	cJSON *j = ms_answer_text(text);
	free(text);
	json_reply(r, 200, j);
}

void ms_api_models(struct ms_api *a, const char *one, struct ms_api_reply *r)
{
	if (!one)
		return json_reply(r, 200, ms_answer_models(a->cfg.model_name, a->max_model_len));
	if (strcmp(one, a->cfg.model_name))
		return ms_api_error(r, 404, "invalid_request_error", "model",
				    "the model \"%s\" does not exist (this server has \"%s\")", one,
				    a->cfg.model_name);
	json_reply(r, 200, ms_answer_model(a->cfg.model_name, a->max_model_len));
}

void ms_api_job_answer(struct ms_job *jb, struct ms_api_reply *r)
{
	r->dialect = ms_answer_dialect(jb);
	if (ms_job_failed(jb)) {
		int status;
		char msg[sizeof(jb->error)];
		snprintf(msg, sizeof(msg), "%s", ms_job_error(jb, &status));
		ms_job_free(jb);
		return ms_api_error(r, status, "server_error", NULL, "%s", msg);
	}
	cJSON *j = ms_answer_final(jb);
	ms_job_free(jb);
	json_reply(r, 200, j);
}
