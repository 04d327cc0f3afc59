/* responses-answer.c: the Responses API's answers (responses-answer.h). */
#include "responses-answer.h"
#include "responses-store.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ms-json.h"
#include "ms-strbuf.h"
#include "request.h"

enum item_kind { IT_NONE, IT_REASONING, IT_MESSAGE, IT_CALL };

struct ms_rsp {
	cJSON *output;               /* the items, in the order generated */
	enum item_kind kind;         /* the open (last) item's, or IT_NONE */
	struct ms_strbuf text;       /* its text so far: reasoning, answer or arguments */
	long seq;                    /* the next event's sequence_number */
	int64_t reasoning_tokens;
	bool announced;              /* stream: created and in_progress sent */
	enum ms_finish finish;
	bool finished;
	bool cut;                    /* generation ended without a stop token */
	char error[256];             /* FINISH_ERROR's reason */
};

static struct ms_rsp *rsp_of(struct ms_job *jb)
{
	if (!jb->rsp && (jb->rsp = calloc(1, sizeof(*jb->rsp))))
		jb->rsp->output = cJSON_CreateArray();
	if (!jb->rsp || !jb->rsp->output)
		jb->failed = true;
	return jb->rsp && jb->rsp->output ? jb->rsp : NULL;
}

void ms_responses_free(struct ms_rsp *r)
{
	if (!r)
		return;
	cJSON_Delete(r->output);
	ms_strbuf_free(&r->text);
	free(r);
}

/* ---- SSE ---- */

/* A new event {"type", "sequence_number"}; fields follow. */
static cJSON *ev_new(struct ms_rsp *r, const char *type)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "type", type);
	cJSON_AddNumberToObject(j, "sequence_number", (double)r->seq++);
	return j;
}

/* "event: TYPE" and the data line; j deleted. */
static void ev_send(struct ms_job *jb, cJSON *j)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
	char type[96];
	snprintf(type, sizeof(type), "%s", cJSON_IsString(t) ? t->valuestring : "error");
	char *s = ms_json_print(j, jb->json0);
	if (!s) {
		jb->failed = true;
		return;
	}
	ms_strbuf_str(&jb->out, "event: ");
	ms_strbuf_str(&jb->out, type);
	ms_strbuf_str(&jb->out, "\ndata: ");
	ms_strbuf_str(&jb->out, s);
	ms_strbuf_str(&jb->out, "\n\n");
	free(s);
}

/* An event about output item `index` (item_id, output_index and, for the
 * content events, content_index 0). */
static cJSON *ev_item(struct ms_rsp *r, const char *type, int index, bool content)
{
	cJSON *j = ev_new(r, type);
	const cJSON *it = cJSON_GetArrayItem(r->output, index);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
	cJSON_AddStringToObject(j, "item_id", cJSON_IsString(id) ? id->valuestring : "");
	cJSON_AddNumberToObject(j, "output_index", index);
	if (content)
		cJSON_AddNumberToObject(j, "content_index", 0);
	return j;
}

/* ---- items ---- */

static void new_id(struct ms_job *jb, const char *prefix, char *out, size_t len)
{
	uint64_t v = ((uint64_t)atomic_fetch_add(&jb->api->counter, 1) + 1) * 0x9e3779b97f4a7c15ull;
	snprintf(out, len, "%s_%016" PRIx64, prefix, v);
}

/* The content part of a reasoning or message item with text t. */
static cJSON *part_of(enum item_kind k, const char *t)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "type", k == IT_REASONING ? "reasoning_text" : "output_text");
	cJSON_AddStringToObject(p, "text", t);
	if (k == IT_MESSAGE) {
		cJSON_AddArrayToObject(p, "annotations");
		cJSON_AddArrayToObject(p, "logprobs");
	}
	return p;
}

/* A new item of kind k, in progress (its text empty); name: a call's. */
static cJSON *item_new(struct ms_job *jb, enum item_kind k, const char *name, size_t nlen)
{
	cJSON *it = cJSON_CreateObject();
	char id[48];
	new_id(jb, k == IT_REASONING ? "rs" : k == IT_MESSAGE ? "msg" : "fc", id, sizeof(id));
	cJSON_AddStringToObject(it, "id", id);
	cJSON_AddStringToObject(it, "type", k == IT_REASONING ? "reasoning" : k == IT_MESSAGE
					    ? "message" : "function_call");
	cJSON_AddStringToObject(it, "status", "in_progress");
	if (k == IT_REASONING) {
		cJSON_AddArrayToObject(it, "summary");
		cJSON_AddArrayToObject(it, "content");
	} else if (k == IT_MESSAGE) {
		cJSON_AddStringToObject(it, "role", "assistant");
		cJSON_AddArrayToObject(it, "content");
	} else {
		char cid[48], nm[256];
		new_id(jb, "call", cid, sizeof(cid));
		snprintf(nm, sizeof(nm), "%.*s", (int)nlen, name);
		cJSON_AddStringToObject(it, "call_id", cid);
		cJSON_AddStringToObject(it, "name", nm);
		cJSON_AddStringToObject(it, "arguments", "");
	}
	return it;
}

/* The open item done: its text in place, its status (completed, or
 * incomplete when generation stopped inside it); streamed, its .done
 * events. */
static void item_close_as(struct ms_job *jb, struct ms_rsp *r, const char *status)
{
	if (r->kind == IT_NONE)
		return;
	int idx = cJSON_GetArraySize(r->output) - 1;
	cJSON *it = cJSON_GetArrayItem(r->output, idx);
	const char *t = r->text.oom ? NULL : ms_strbuf_cstr(&r->text);
	if (!t) {
		jb->failed = true;
		t = "";
	}
	if (r->kind == IT_CALL)
		ms_json_replace(it, "arguments", cJSON_CreateString(t));
	else
		ms_json_push(cJSON_GetObjectItemCaseSensitive(it, "content"), part_of(r->kind, t));
	ms_json_replace(it, "status", cJSON_CreateString(status));
	if (jb->rq->stream) {
		cJSON *j;
		if (r->kind == IT_CALL) {
			j = ev_item(r, "response.function_call_arguments.done", idx, false);
			cJSON_AddStringToObject(j, "arguments", t);
			ev_send(jb, j);
		} else {
			bool rs = r->kind == IT_REASONING;
			j = ev_item(r, rs ? "response.reasoning_text.done" : "response.output_text.done",
				    idx, true);
			cJSON_AddStringToObject(j, "text", t);
			if (!rs)
				cJSON_AddArrayToObject(j, "logprobs");
			ev_send(jb, j);
			j = ev_item(r, "response.content_part.done", idx, true);
			ms_json_put(j, "part", part_of(r->kind, t));
			ev_send(jb, j);
		}
		j = ev_new(r, "response.output_item.done");
		cJSON_AddNumberToObject(j, "output_index", idx);
		ms_json_put(j, "item", cJSON_Duplicate(it, true));
		ev_send(jb, j);
	}
	ms_strbuf_reset(&r->text);
	r->kind = IT_NONE;
}

static void item_close(struct ms_job *jb, struct ms_rsp *r)
{
	item_close_as(jb, r, r->cut ? "incomplete" : "completed");
}

/* Open an item of kind k (closing the one before); streamed, announced. */
static void item_open(struct ms_job *jb, struct ms_rsp *r, enum item_kind k, const char *name,
		      size_t nlen)
{
	item_close(jb, r);
	cJSON *it = item_new(jb, k, name, nlen);
	if (!ms_json_push(r->output, it)) {
		jb->failed = true; /* the answer lacks the item */
		return;
	}
	r->kind = k;
	if (!jb->rq->stream)
		return;
	int idx = cJSON_GetArraySize(r->output) - 1;
	cJSON *j = ev_new(r, "response.output_item.added");
	cJSON_AddNumberToObject(j, "output_index", idx);
	ms_json_put(j, "item", cJSON_Duplicate(it, true));
	ev_send(jb, j);
	if (k == IT_CALL)
		return;
	j = ev_item(r, "response.content_part.added", idx, true);
	ms_json_put(j, "part", part_of(k, ""));
	ev_send(jb, j);
}

/* Text for an item of kind k: onto the open one (a new one if the open
 * one is of another kind), and streamed as a delta. */
static void item_text(struct ms_job *jb, struct ms_rsp *r, enum item_kind k, const char *data,
		      size_t len)
{
	if (r->kind != k && k != IT_CALL)
		item_open(jb, r, k, NULL, 0);
	if (r->kind != k)
		return; /* arguments without a call: the parser never sends that */
	ms_strbuf_add(&r->text, data, len);
	if (!jb->rq->stream)
		return;
	int idx = cJSON_GetArraySize(r->output) - 1;
	cJSON *j = ev_item(r, k == IT_REASONING ? "response.reasoning_text.delta" : k == IT_MESSAGE
			   ? "response.output_text.delta" : "response.function_call_arguments.delta",
			   idx, k != IT_CALL);
	char *d = malloc(len + 1);
	if (d) {
		memcpy(d, data, len);
		d[len] = '\0';
		cJSON_AddStringToObject(j, "delta", d);
		free(d);
	} else {
		jb->failed = true;
	}
	if (k == IT_MESSAGE)
		cJSON_AddArrayToObject(j, "logprobs");
	ev_send(jb, j);
}

struct rctx {
	struct ms_job *jb;
	struct ms_rsp *r;
};

static int on_harmony(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct rctx *h = ctx;
	switch (ev) {
	case MS_HARMONY_REASONING:
		item_text(h->jb, h->r, IT_REASONING, data, len);
		break;
	case MS_HARMONY_CONTENT:
		item_text(h->jb, h->r, IT_MESSAGE, data, len);
		break;
	case MS_HARMONY_TOOL_CALL_BEGIN:
		item_open(h->jb, h->r, IT_CALL, data, len);
		break;
	case MS_HARMONY_TOOL_ARGS:
		item_text(h->jb, h->r, IT_CALL, data, len);
		break;
	case MS_HARMONY_TOOL_CALL_END:
		item_close(h->jb, h->r);
		break;
	default:
		break;
	}
	return 0;
}

/* ---- the response object ---- */

static const cJSON *req_field(const struct ms_job *jb, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(jb->rq->rsp, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The request's field k as given, or def (taken; NULL: JSON null). */
static void echo(cJSON *j, const struct ms_job *jb, const char *k, cJSON *def)
{
	const cJSON *v = req_field(jb, k);
	if (v) {
		cJSON_Delete(def);
		ms_json_put(j, k, cJSON_Duplicate(v, true));
		return;
	}
	ms_json_put(j, k, def ? def : cJSON_CreateNull());
}

static const char *status_of(const struct ms_rsp *r)
{
	if (!r->finished)
		return "in_progress";
	switch (r->finish) {
	case MS_FINISH_STOP: return "completed";
	case MS_FINISH_LENGTH:
	case MS_FINISH_CONTEXT: return "incomplete";
	case MS_FINISH_CANCELLED: return "cancelled";
	default: return "failed";
	}
}

static void add_usage(cJSON *j, const struct ms_job *jb, const struct ms_rsp *r)
{
	const struct ms_choice *ch = &jb->ch[0];
	if (!r->finished) {
		cJSON_AddNullToObject(j, "usage");
		return;
	}
	cJSON *u = cJSON_AddObjectToObject(j, "usage"), *d;
	cJSON_AddNumberToObject(u, "input_tokens", (double)ch->prompt_tok);
	d = cJSON_AddObjectToObject(u, "input_tokens_details");
	cJSON_AddNumberToObject(d, "cached_tokens", (double)ch->cached_tok);
	cJSON_AddNumberToObject(u, "output_tokens", (double)ch->completion_tok);
	d = cJSON_AddObjectToObject(u, "output_tokens_details");
	cJSON_AddNumberToObject(d, "reasoning_tokens", (double)r->reasoning_tokens);
	cJSON_AddNumberToObject(u, "total_tokens", (double)(ch->prompt_tok + ch->completion_tok));
}

/* status, error and incomplete_details as the finish says. */
static void add_status(cJSON *j, const struct ms_rsp *r)
{
	const char *st = status_of(r);
	cJSON_AddStringToObject(j, "status", st);
	if (!strcmp(st, "failed")) {
		cJSON *e = cJSON_AddObjectToObject(j, "error");
		cJSON_AddStringToObject(e, "code", "server_error");
		cJSON_AddStringToObject(e, "message", r->error[0] ? r->error : "generation failed");
	} else {
		cJSON_AddNullToObject(j, "error");
	}
	if (!strcmp(st, "incomplete"))
		cJSON_AddStringToObject(cJSON_AddObjectToObject(j, "incomplete_details"), "reason",
					"max_output_tokens");
	else
		cJSON_AddNullToObject(j, "incomplete_details");
}

/* The response as it stands (in progress while streaming starts). */
static cJSON *response_of(struct ms_job *jb, const struct ms_rsp *r)
{
	cJSON *j = cJSON_CreateObject(), *rs;
	cJSON_AddStringToObject(j, "id", jb->id);
	cJSON_AddStringToObject(j, "object", "response");
	cJSON_AddNumberToObject(j, "created_at", (double)jb->created);
	add_status(j, r);
	echo(j, jb, "instructions", NULL);
	echo(j, jb, "max_output_tokens", NULL);
	cJSON_AddStringToObject(j, "model", jb->api->cfg.model_name);
	ms_json_put(j, "output", cJSON_Duplicate(r->output, true));
	echo(j, jb, "parallel_tool_calls", cJSON_CreateTrue());
	echo(j, jb, "previous_response_id", NULL);
	rs = cJSON_CreateObject();
	cJSON_AddNullToObject(rs, "effort");
	cJSON_AddNullToObject(rs, "summary");
	echo(j, jb, "reasoning", rs);
	cJSON_AddBoolToObject(j, "store", jb->rq->store);
	echo(j, jb, "temperature", cJSON_CreateNumber(1.0));
	cJSON *tx = cJSON_CreateObject();
	cJSON_AddStringToObject(cJSON_AddObjectToObject(tx, "format"), "type", "text");
	echo(j, jb, "text", tx);
	echo(j, jb, "tool_choice", cJSON_CreateString("auto"));
	echo(j, jb, "tools", cJSON_CreateArray());
	echo(j, jb, "top_p", cJSON_CreateNumber(1.0));
	cJSON_AddStringToObject(j, "truncation", "disabled");
	add_usage(j, jb, r);
	echo(j, jb, "user", NULL);
	cJSON_AddBoolToObject(j, "background", jb->rq->background);
	echo(j, jb, "metadata", cJSON_CreateObject());
	return j;
}

/* ---- events ---- */

static void announce(struct ms_job *jb, struct ms_rsp *r)
{
	static const char *const types[] = {"response.created", "response.in_progress"};
	r->announced = true;
	for (int k = 0; k < 2; k++) {
		cJSON *j = ev_new(r, types[k]);
		ms_json_put(j, "response", response_of(jb, r));
		ev_send(jb, j);
	}
}

static void finish(struct ms_job *jb, struct ms_rsp *r, const struct ms_ev *e)
{
	struct ms_choice *ch = &jb->ch[0];
	/* an item still open (a call's too, which the parser closes) was cut */
	r->cut = e->finish != MS_FINISH_STOP;
	ms_harmony_parser_finish(&ch->hp);
	item_close(jb, r);
	jb->harmony_errors += ch->hp.n_malformed;
	r->finish = e->finish;
	r->finished = true;
	if (e->finish == MS_FINISH_ERROR)
		snprintf(r->error, sizeof(r->error), "%s", e->error ? e->error : "");
	ch->prompt_tok = e->prompt_tokens;
	ch->cached_tok = e->cached_tokens;
	ch->completion_tok = e->completion_tokens;
	ch->fin = status_of(r);
}

void ms_responses_event(struct ms_job *jb, const struct ms_ev *e)
{
	struct ms_rsp *r = rsp_of(jb);
	if (!r)
		return;
	if (jb->rq->stream && !r->announced)
		announce(jb, r);
	struct ms_choice *ch = &jb->ch[0];
	struct rctx h = {jb, r};
	ch->hp.cb = on_harmony;
	ch->hp.ctx = &h;
	if (e->kind == MS_EV_TOKEN) {
		/* a token of the analysis channel's text (not the <|end|> after
		 * it): reasoning */
		const struct ms_harmony_ids *hi = &jb->api->hids;
		bool in_rs = ch->hp.state == MS_HARMONY_IN_BODY &&
			     ch->hp.body == MS_HARMONY_BODY_REASONING;
		r->reasoning_tokens += in_rs && e->token != hi->end && e->token != hi->ret &&
				       e->token != hi->call && e->token != hi->start;
		ms_harmony_parser_push(&ch->hp, e->token, e->text ? e->text : "", e->len);
	} else if (e->kind == MS_EV_FINISH) {
		finish(jb, r, e);
	}
}

/* The conversation to store: the request's items, then the output's. */
static void store(struct ms_job *jb, const cJSON *resp, const struct ms_rsp *r)
{
	if (!jb->rq->store || !jb->api->rstore.cap || jb->failed)
		return;
	cJSON *items = cJSON_Duplicate(jb->rq->items, true), *it;
	cJSON_ArrayForEach(it, r->output)
		ms_json_push(items, cJSON_Duplicate(it, true));
	ms_responses_store_put(&jb->api->rstore, jb->id, cJSON_Duplicate(resp, true), items);
}

cJSON *ms_responses_snapshot(struct ms_job *jb)
{
	struct ms_rsp *r = rsp_of(jb);
	return r ? response_of(jb, r) : NULL;
}

cJSON *ms_responses_final(struct ms_job *jb)
{
	struct ms_rsp *r = rsp_of(jb);
	if (!r)
		return NULL;
	cJSON *j = response_of(jb, r);
	store(jb, j, r);
	return j;
}

void ms_responses_stream_end(struct ms_job *jb)
{
	struct ms_rsp *r = rsp_of(jb);
	if (!r)
		return;
	if (!r->announced)
		announce(jb, r);
	const char *st = status_of(r);
	cJSON *j = ev_new(r, !strcmp(st, "completed") ? "response.completed"
			  : !strcmp(st, "incomplete") ? "response.incomplete" : "response.failed");
	cJSON *resp = response_of(jb, r);
	store(jb, resp, r);
	ms_json_put(j, "response", resp);
	ev_send(jb, j);
}
