/* answer.c: the OpenAI wire formats of answers (see answer.h). */
#include "answer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "job.h"
#include "ms-json.h"
#include "ms-utf8.h"
#include "request.h"
#include "messages-answer.h"
#include "responses-answer.h"

#define OOM_ERROR "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"," \
		  "\"param\":null,\"code\":500}}"
#define OOM_ANTHROPIC "{\"type\":\"error\",\"error\":{\"type\":\"api_error\"," \
		      "\"message\":\"out of memory\"}}"

const char *ms_answer_oom_body(enum ms_dialect d)
{
	return d == MS_DIALECT_ANTHROPIC ? OOM_ANTHROPIC : OOM_ERROR;
}

const char *ms_answer_oom_event(enum ms_dialect d)
{
	return d == MS_DIALECT_ANTHROPIC ? "event: error\ndata: " OOM_ANTHROPIC "\n\n"
					 : "data: " OOM_ERROR "\n\n";
}

enum ms_dialect ms_answer_dialect(const struct ms_job *jb)
{
	return jb->rq->messages ? MS_DIALECT_ANTHROPIC : MS_DIALECT_OPENAI;
}

const char *ms_answer_keepalive(const struct ms_job *jb)
{
	/* Anthropic's clients read a ping event; others ignore an SSE comment */
	return jb->rq->messages ? "event: ping\ndata: {\"type\":\"ping\"}\n\n" : ": keep-alive\n\n";
}

char *ms_answer_error_event(const struct ms_job *jb)
{
	int status;
	const char *msg = ms_job_error(jb, &status);
	bool anth = jb->rq->messages;
	unsigned long f0 = ms_json_failures();
	char *body = ms_json_print(anth ? ms_answer_anthropic_error("api_error", msg)
				   : ms_answer_error(status, "server_error", NULL, msg), f0), *ev = NULL;
	if (body && asprintf(&ev, "%sdata: %s\n\n", anth ? "event: error\n" : "", body) < 0)
		ev = NULL;
	free(body);
	return ev;
}

cJSON *ms_answer_anthropic_error(const char *type, const char *msg)
{
	cJSON *j = cJSON_CreateObject(), *e;
	cJSON_AddStringToObject(j, "type", "error");
	e = cJSON_AddObjectToObject(j, "error");
	cJSON_AddStringToObject(e, "type", type);
	cJSON_AddStringToObject(e, "message", msg);
	return j;
}

/* ---- small helpers ---- */

/* A text that may have lost an append; NULL then (the job is failed). */
static const char *text_of(struct ms_job *jb, const struct ms_strbuf *b)
{
	const char *s = ms_strbuf_cstr(b);
	if (!s)
		jb->failed = true;
	return s;
}

/* A token's text on its own, made valid UTF-8 (a byte-level token may be
 * part of a character), "<id>" for one the tokenizer cannot decode: for
 * logprobs' "tokens". NULL when out of memory. */
static char *token_text(const struct ms_tokenizer *t, int32_t id)
{
	char *out = NULL;
	size_t len = 0;
	struct ms_err err;
	int rc = t ? ms_tokenizer_decode(t, &id, 1, false, &out, &len, &err) : -EINVAL;
	if (rc == -ENOMEM)
		return NULL;
	if (rc) {
		char buf[32];
		snprintf(buf, sizeof(buf), "<%d>", id);
		return strdup(buf);
	}
	return out;
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

static void finish_counts(struct ms_choice *ch, const struct ms_ev *e)
{
	ch->prompt_tok = e->prompt_tokens;
	ch->cached_tok = e->cached_tokens;
	ch->completion_tok = e->completion_tokens;
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

static void add_usage_totals(const struct ms_job *jb, cJSON *j)
{
	int64_t prompt = 0, cached = 0, completion = 0;
	int per = jb->rq->n;
	for (int i = 0; i < jb->n; i++) {
		completion += jb->ch[i].completion_tok;
		if (i % per == 0) { /* a prompt counts once, whatever n is */
			prompt += jb->ch[i].prompt_tok;
			cached += jb->ch[i].cached_tok;
		}
	}
	add_usage(j, prompt, completion, cached);
}

/* ---- SSE ---- */

static void sse_json(struct ms_job *jb, cJSON *j)
{
	char *s = ms_json_print(j, jb->json0);
	if (!s) {
		jb->failed = true;
		return;
	}
	ms_strbuf_str(&jb->out, "data: ");
	ms_strbuf_str(&jb->out, s);
	ms_strbuf_str(&jb->out, "\n\n");
	free(s);
}

static cJSON *chunk_head(const struct ms_job *jb)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "id", jb->id);
	cJSON_AddStringToObject(j, "object", jb->rq->chat ? "chat.completion.chunk" : "text_completion");
	cJSON_AddNumberToObject(j, "created", (double)jb->created);
	cJSON_AddStringToObject(j, "model", jb->api->cfg.model_name);
	return j;
}

/* A chunk for one choice: *choices and the choice *ch made here. */
static cJSON *choice_chunk(const struct ms_job *jb, cJSON **choices, cJSON **ch)
{
	cJSON *j = chunk_head(jb);
	*choices = cJSON_AddArrayToObject(j, "choices");
	*ch = cJSON_CreateObject();
	return j;
}

/* Close a chunk's choice (finish_reason, null while running) and queue the
 * chunk. */
static void send_choice_chunk(struct ms_job *jb, cJSON *j, cJSON *choices, cJSON *ch, const char *fin)
{
	if (fin)
		cJSON_AddStringToObject(ch, "finish_reason", fin);
	else
		cJSON_AddNullToObject(ch, "finish_reason");
	ms_json_push(choices, ch);
	sse_json(jb, j);
}

void ms_answer_stream_end(struct ms_job *jb)
{
	if (jb->rq->responses) {
		ms_responses_stream_end(jb);
		return;
	}
	if (jb->rq->messages) {
		ms_messages_stream_end(jb);
		return;
	}
	if (jb->rq->include_usage) {
		cJSON *j = chunk_head(jb);
		cJSON_AddArrayToObject(j, "choices");
		add_usage_totals(jb, j);
		sse_json(jb, j);
	}
	ms_strbuf_str(&jb->out, "data: [DONE]\n\n");
}

/* ---- completions ---- */

/* The four logprobs arrays of a completion choice, or of one stream delta. */
struct lp_arrays {
	cJSON *tokens, *values, *top, *offset;
};

/* {token text: logprob} of the alternatives, or NULL (none, or out of
 * memory: the job is failed). */
static cJSON *top_object(struct ms_job *jb, const struct ms_token_logprobs *lp)
{
	cJSON *top = cJSON_CreateObject();
	for (int t = 0; top && t < lp->n_top; t++) {
		char *x = token_text(jb->api->tok, lp->top[t].id);
		if (!x) {
			jb->failed = true;
			break;
		}
		if (!cJSON_GetObjectItemCaseSensitive(top, x))
			cJSON_AddNumberToObject(top, x, lp->top[t].logprob);
		free(x);
	}
	return top;
}

/* One token's logprobs onto the choice's arrays, and onto the delta's when
 * there is one. */
static void lp_append(struct ms_job *jb, struct ms_choice *ch, const struct ms_ev *e,
		      struct lp_arrays *delta)
{
	char *tt = token_text(jb->api->tok, e->token);
	if (!tt) {
		jb->failed = true;
		return;
	}
	bool has = e->has_lp && !isnan(e->lp.logprob);
	cJSON *top = has && e->lp.n_top >= 0 ? top_object(jb, &e->lp) : NULL;
	struct lp_arrays all = {ch->lp_tokens, ch->lp_values, ch->lp_top, ch->lp_offset};
	struct lp_arrays *to[2] = {&all, delta};
	for (int w = 0; w < 2; w++) {
		if (!to[w]->tokens)
			continue;
		ms_json_push(to[w]->tokens, cJSON_CreateString(tt));
		ms_json_push(to[w]->values, has ? cJSON_CreateNumber(e->lp.logprob) : cJSON_CreateNull());
		ms_json_push(to[w]->top, top ? cJSON_Duplicate(top, true) : cJSON_CreateNull());
		ms_json_push(to[w]->offset, cJSON_CreateNumber((double)ch->offset));
	}
	ch->offset += ms_utf8_chars(tt, strlen(tt));
	cJSON_Delete(top);
	free(tt);
}

static void cmpl_chunk(struct ms_job *jb, int i, const char *text, struct lp_arrays *d,
		       const char *fin)
{
	cJSON *chs, *ch, *j = choice_chunk(jb, &chs, &ch);
	cJSON_AddNumberToObject(ch, "index", i);
	cJSON_AddStringToObject(ch, "text", text);
	if (d->tokens && cJSON_GetArraySize(d->tokens)) {
		cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
		ms_json_put(l, "tokens", d->tokens);
		ms_json_put(l, "token_logprobs", d->values);
		ms_json_put(l, "top_logprobs", d->top);
		ms_json_put(l, "text_offset", d->offset);
		*d = (struct lp_arrays){0};
	} else {
		cJSON_AddNullToObject(ch, "logprobs");
	}
	send_choice_chunk(jb, j, chs, ch, fin);
}

static void cmpl_event(struct ms_job *jb, int i, const struct ms_ev *e)
{
	struct ms_choice *ch = &jb->ch[i];
	bool lp_on = jb->rq->logprobs >= 0;
	struct lp_arrays d = {0};      /* stream: this event's logprobs */
	struct ms_strbuf delta = {0};  /* stream: this event's text */
	if (jb->rq->stream && lp_on) {
		d = (struct lp_arrays){cJSON_CreateArray(), cJSON_CreateArray(), cJSON_CreateArray(),
				       cJSON_CreateArray()};
		if (!d.tokens || !d.values || !d.top || !d.offset)
			jb->failed = true;
	}
	if (jb->rq->echo && !ch->started) {
		/* the prompt first: its text, and its tokens' logprobs as they come */
		const char *pt = jb->rq->echo_text[ch->prompt];
		ms_strbuf_str(&ch->text, pt);
		ms_strbuf_str(&delta, pt);
	}
	ch->started = true;
	if (e->kind != MS_EV_FINISH && lp_on)
		lp_append(jb, ch, e, &d);
	if (e->kind != MS_EV_PROMPT_TOKEN && e->len) {
		ms_strbuf_add(&ch->text, e->text, e->len);
		ms_strbuf_add(&delta, e->text, e->len);
	}
	if (e->kind == MS_EV_FINISH) {
		ch->fin = finish_reason(e->finish, false);
		finish_counts(ch, e);
	}
	const char *text = text_of(jb, &delta);
	if (text && jb->rq->stream &&
	    (delta.len || e->kind == MS_EV_FINISH || (d.tokens && cJSON_GetArraySize(d.tokens))))
		cmpl_chunk(jb, i, text, &d, e->kind == MS_EV_FINISH ? ch->fin : NULL);
	cJSON_Delete(d.tokens), cJSON_Delete(d.values), cJSON_Delete(d.top), cJSON_Delete(d.offset);
	ms_strbuf_free(&delta);
}

/* ---- chat: the harmony events of one engine event, as deltas ---- */

struct hctx {
	struct ms_job *jb;
	struct ms_choice *ch;
	struct ms_stopper *stop;       /* content stop strings (chat applies them to content) */
	struct ms_strbuf content, reasoning;  /* this event's deltas */
	cJSON *tool_delta;             /* stream: the tool_calls delta array */
};

static void tool_delta_add(struct hctx *h, cJSON *d)
{
	if (!h->tool_delta)
		h->tool_delta = cJSON_CreateArray();
	ms_json_push(h->tool_delta, d);
}

static void tool_call_begin(struct hctx *h, const char *data, size_t len)
{
	struct ms_job *jb = h->jb;
	struct ms_choice *ch = h->ch;
	char id[40], name[256];
	uint64_t cid = (uint64_t)atomic_fetch_add(&jb->api->counter, 1) * 0x9e3779b97f4a7c15ull;
	snprintf(id, sizeof(id), "call_%016" PRIx64, cid);
	snprintf(name, sizeof(name), "%.*s", (int)len, data);
	int t = ch->n_calls++;
	if (!ch->tool_calls)
		ch->tool_calls = cJSON_CreateArray();
	cJSON *tc = cJSON_CreateObject(), *fn;
	cJSON_AddStringToObject(tc, "id", id);
	cJSON_AddStringToObject(tc, "type", "function");
	fn = cJSON_AddObjectToObject(tc, "function");
	cJSON_AddStringToObject(fn, "name", name);
	cJSON_AddStringToObject(fn, "arguments", "");
	if (jb->rq->stream) {
		cJSON *d = cJSON_Duplicate(tc, true);
		cJSON_AddNumberToObject(d, "index", t);
		tool_delta_add(h, d);
	}
	ms_json_push(ch->tool_calls, tc);
}

/* More of the last call's arguments: onto its "arguments", and for a stream
 * as deltas of at most 4095 bytes. */
static void tool_args(struct hctx *h, const char *data, size_t len)
{
	struct ms_choice *ch = h->ch;
	cJSON *last = cJSON_GetArrayItem(ch->tool_calls, cJSON_GetArraySize(ch->tool_calls) - 1);
	cJSON *fn = cJSON_GetObjectItemCaseSensitive(last, "function");
	cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
	struct ms_strbuf a = {0};
	if (cJSON_IsString(args)) {
		ms_strbuf_str(&a, args->valuestring);
		ms_strbuf_add(&a, data, len);
	}
	/* no call to add to: its creation failed (out of memory) */
	const char *all = cJSON_IsString(args) ? ms_strbuf_cstr(&a) : NULL;
	if (!all || !cJSON_SetValuestring(args, all))
		h->jb->failed = true;
	ms_strbuf_free(&a);
	if (!h->jb->rq->stream)
		return;
	char frag[4096];
	for (size_t off = 0; off < len; off += sizeof(frag) - 1) {
		size_t m = len - off < sizeof(frag) - 1 ? len - off : sizeof(frag) - 1;
		memcpy(frag, data + off, m);
		frag[m] = '\0';
		cJSON *d = cJSON_CreateObject(), *f;
		cJSON_AddNumberToObject(d, "index", ch->n_calls - 1);
		f = cJSON_AddObjectToObject(d, "function");
		cJSON_AddStringToObject(f, "arguments", frag);
		tool_delta_add(h, d);
	}
}

/* Answer text, after the stop strings: nothing once one matched. */
static void content(struct hctx *h, const char *data, size_t len)
{
	struct ms_choice *ch = h->ch;
	if (ch->stopped)
		return;
	if (h->stop) {
		size_t emit = 0;
		bool stopped = false;
		if (ms_stopper_push(h->stop, data, len, &emit, &stopped))
			h->jb->failed = true;
		data = ms_stopper_text(h->stop);
		len = emit;
		ch->stopped = stopped;
	}
	ms_strbuf_add(&ch->text, data, len);
	ms_strbuf_add(&h->content, data, len);
}

static int on_harmony(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct hctx *h = ctx;
	switch (ev) {
	case MS_HARMONY_REASONING:
		ms_strbuf_add(&h->ch->reasoning, data, len);
		ms_strbuf_add(&h->reasoning, data, len);
		break;
	case MS_HARMONY_CONTENT:
		content(h, data, len);
		break;
	case MS_HARMONY_TOOL_CALL_BEGIN:
		tool_call_begin(h, data, len);
		break;
	case MS_HARMONY_TOOL_ARGS:
		tool_args(h, data, len);
		break;
	default:
		break;
	}
	return 0;
}

static cJSON *chat_lp_entry(struct ms_job *jb, int32_t tok, const struct ms_token_logprobs *lp)
{
	char *tt = token_text(jb->api->tok, tok);
	if (!tt) {
		jb->failed = true;
		return NULL;
	}
	cJSON *e = cJSON_CreateObject(), *tops;
	cJSON_AddStringToObject(e, "token", tt);
	cJSON_AddNumberToObject(e, "logprob", lp->logprob);
	cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
	for (const unsigned char *b = (const unsigned char *)tt; *b; b++)
		ms_json_push(bytes, cJSON_CreateNumber(*b));
	free(tt);
	tops = cJSON_AddArrayToObject(e, "top_logprobs");
	for (int k = 0; k < lp->n_top; k++) {
		char *s = token_text(jb->api->tok, lp->top[k].id);
		if (!s) {
			jb->failed = true;
			break;
		}
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "token", s);
		cJSON_AddNumberToObject(x, "logprob", lp->top[k].logprob);
		free(s);
		ms_json_push(tops, x);
	}
	return e;
}

static void chat_finish(struct hctx *h, const struct ms_ev *e)
{
	struct ms_choice *ch = h->ch;
	ms_harmony_parser_finish(&ch->hp);
	if (h->stop && !ch->stopped) {
		size_t emit = 0;
		ms_stopper_finish(h->stop, &emit);
		if (emit) {
			ms_strbuf_add(&ch->text, ms_stopper_text(h->stop), emit);
			ms_strbuf_add(&h->content, ms_stopper_text(h->stop), emit);
		}
	}
	h->jb->harmony_errors += ch->hp.n_malformed;
	ch->fin = finish_reason(ch->stopped ? MS_FINISH_STOP : e->finish, ch->n_calls > 0);
	finish_counts(ch, e);
}

/* The stream's chunks of one event: the role first, then the deltas. */
static void chat_chunks(struct ms_job *jb, int i, struct hctx *h, cJSON **lp_entry, bool fin)
{
	struct ms_choice *ch = &jb->ch[i];
	cJSON *chs, *c, *j, *d;
	if (!ch->started) {
		ch->started = true;
		j = choice_chunk(jb, &chs, &c);
		d = cJSON_AddObjectToObject(c, "delta");
		cJSON_AddNumberToObject(c, "index", i);
		cJSON_AddStringToObject(d, "role", "assistant");
		cJSON_AddStringToObject(d, "content", "");
		cJSON_AddNullToObject(c, "logprobs");
		send_choice_chunk(jb, j, chs, c, NULL);
	}
	if (!h->content.len && !h->reasoning.len && !h->tool_delta && !*lp_entry && !fin)
		return;
	j = choice_chunk(jb, &chs, &c);
	d = cJSON_AddObjectToObject(c, "delta");
	cJSON_AddNumberToObject(c, "index", i);
	if (h->content.len)
		cJSON_AddStringToObject(d, "content", h->content.p);
	if (h->reasoning.len) {
		cJSON_AddStringToObject(d, "reasoning_content", h->reasoning.p);
		cJSON_AddStringToObject(d, "reasoning", h->reasoning.p);
	}
	if (h->tool_delta) {
		ms_json_put(d, "tool_calls", h->tool_delta);
		h->tool_delta = NULL;
	}
	if (*lp_entry) {
		cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
		ms_json_push(cJSON_AddArrayToObject(l, "content"), *lp_entry);
		*lp_entry = NULL;
	} else {
		cJSON_AddNullToObject(c, "logprobs");
	}
	send_choice_chunk(jb, j, chs, c, fin ? ch->fin : NULL);
}

static void chat_event(struct ms_job *jb, int i, const struct ms_ev *e)
{
	struct ms_choice *ch = &jb->ch[i];
	struct hctx h = {.jb = jb, .ch = ch, .stop = jb->rq->n_stops ? &ch->stop : NULL};
	ch->hp.cb = on_harmony;
	ch->hp.ctx = &h;
	cJSON *lp_entry = NULL;
	if (e->kind == MS_EV_TOKEN) {
		ms_harmony_parser_push(&ch->hp, e->token, e->text ? e->text : "", e->len);
		if (e->has_lp && jb->rq->params.sampling.n_logprobs >= 0) {
			lp_entry = chat_lp_entry(jb, e->token, &e->lp);
			if (!ch->chat_lp)
				ch->chat_lp = cJSON_CreateArray();
			ms_json_push(ch->chat_lp, cJSON_Duplicate(lp_entry, true));
		}
	} else if (e->kind == MS_EV_FINISH) {
		chat_finish(&h, e);
	}
	if (h.content.oom || h.reasoning.oom)
		jb->failed = true;
	else if (jb->rq->stream)
		chat_chunks(jb, i, &h, &lp_entry, e->kind == MS_EV_FINISH);
	cJSON_Delete(h.tool_delta);
	cJSON_Delete(lp_entry);
	ms_strbuf_free(&h.content);
	ms_strbuf_free(&h.reasoning);
}

void ms_answer_event(struct ms_job *jb, int i, const struct ms_ev *e)
{
	if (jb->rq->responses)
		ms_responses_event(jb, e);
	else if (jb->rq->messages)
		ms_messages_event(jb, e);
	else if (jb->rq->chat)
		chat_event(jb, i, e);
	else
		cmpl_event(jb, i, e);
}

/* ---- the non-streamed answer ---- */

static void chat_message(struct ms_job *jb, struct ms_choice *c, cJSON *ch)
{
	cJSON *m = cJSON_AddObjectToObject(ch, "message");
	const char *text = text_of(jb, &c->text), *reasoning = text_of(jb, &c->reasoning);
	cJSON_AddStringToObject(m, "role", "assistant");
	if (text && (c->text.len || !c->tool_calls))
		cJSON_AddStringToObject(m, "content", text);
	else
		cJSON_AddNullToObject(m, "content");
	if (reasoning && c->reasoning.len) {
		cJSON_AddStringToObject(m, "reasoning_content", reasoning);
		cJSON_AddStringToObject(m, "reasoning", reasoning);
	}
	if (c->tool_calls) {
		ms_json_put(m, "tool_calls", c->tool_calls);
		c->tool_calls = NULL;
	}
	if (c->chat_lp) {
		ms_json_put(cJSON_AddObjectToObject(ch, "logprobs"), "content", c->chat_lp);
		c->chat_lp = NULL;
	} else {
		cJSON_AddNullToObject(ch, "logprobs");
	}
}

static void cmpl_choice(struct ms_job *jb, struct ms_choice *c, cJSON *ch)
{
	const char *text = text_of(jb, &c->text);
	cJSON_AddStringToObject(ch, "text", text ? text : "");
	if (jb->rq->logprobs >= 0) {
		cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
		ms_json_put(l, "tokens", c->lp_tokens);
		ms_json_put(l, "token_logprobs", c->lp_values);
		ms_json_put(l, "top_logprobs", c->lp_top);
		ms_json_put(l, "text_offset", c->lp_offset);
		c->lp_tokens = c->lp_values = c->lp_top = c->lp_offset = NULL;
	} else {
		cJSON_AddNullToObject(ch, "logprobs");
	}
}

cJSON *ms_answer_final(struct ms_job *jb)
{
	if (jb->rq->responses)
		return ms_responses_final(jb);
	if (jb->rq->messages)
		return ms_messages_final(jb);
	cJSON *j = cJSON_CreateObject(), *chs;
	cJSON_AddStringToObject(j, "id", jb->id);
	cJSON_AddStringToObject(j, "object", jb->rq->chat ? "chat.completion" : "text_completion");
	cJSON_AddNumberToObject(j, "created", (double)jb->created);
	cJSON_AddStringToObject(j, "model", jb->api->cfg.model_name);
	chs = cJSON_AddArrayToObject(j, "choices");
	for (int i = 0; i < jb->n; i++) {
		struct ms_choice *c = &jb->ch[i];
		cJSON *ch = cJSON_CreateObject();
		cJSON_AddNumberToObject(ch, "index", i);
		if (jb->rq->chat)
			chat_message(jb, c, ch);
		else
			cmpl_choice(jb, c, ch);
		cJSON_AddStringToObject(ch, "finish_reason", c->fin ? c->fin : "error");
		ms_json_push(chs, ch);
	}
	add_usage_totals(jb, j);
	return j;
}

/* ---- small bodies ---- */

cJSON *ms_answer_error(int status, const char *type, const char *param, const char *msg)
{
	return ms_answer_error_code(status, type, param, NULL, msg);
}

cJSON *ms_answer_error_code(int status, const char *type, const char *param, const char *code,
			  const char *msg)
{
	cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddStringToObject(e, "type", type);
	if (param)
		cJSON_AddStringToObject(e, "param", param);
	else
		cJSON_AddNullToObject(e, "param");
	if (code)
		cJSON_AddStringToObject(e, "code", code);
	else
		cJSON_AddNumberToObject(e, "code", status);
	return j;
}

cJSON *ms_answer_status(const char *status, const char *reason)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "status", status);
	if (reason)
		cJSON_AddStringToObject(j, "reason", reason);
	return j;
}

cJSON *ms_answer_model(const char *name, int64_t max_model_len)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", 0);
	cJSON_AddStringToObject(m, "owned_by", "moeserve");
	cJSON_AddNumberToObject(m, "max_model_len", (double)max_model_len);
	/* Anthropic's model object too: its SDKs list models with these */
	cJSON_AddStringToObject(m, "type", "model");
	cJSON_AddStringToObject(m, "display_name", name);
	cJSON_AddStringToObject(m, "created_at", "1970-01-01T00:00:00Z");
	return m;
}

cJSON *ms_answer_models(const char *name, int64_t max_model_len)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "object", "list");
	ms_json_push(cJSON_AddArrayToObject(j, "data"), ms_answer_model(name, max_model_len));
	/* Anthropic's page of a list */
	cJSON_AddBoolToObject(j, "has_more", false);
	cJSON_AddStringToObject(j, "first_id", name);
	cJSON_AddStringToObject(j, "last_id", name);
	return j;
}

cJSON *ms_answer_tokens(const int32_t *ids, size_t n, int64_t max_model_len)
{
	cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "tokens");
	for (size_t i = 0; i < n; i++)
		ms_json_push(arr, cJSON_CreateNumber(ids[i]));
	cJSON_AddNumberToObject(j, "count", (double)n);
	cJSON_AddNumberToObject(j, "max_model_len", (double)max_model_len);
	return j;
}

cJSON *ms_answer_text(const char *text)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "prompt", text);
	return j;
}
