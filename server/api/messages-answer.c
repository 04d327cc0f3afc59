/* messages-answer.c: Anthropic's Messages API answers (messages-answer.h). */
#include "messages-answer.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ms-json.h"
#include "request.h"

enum block { B_NONE, B_THINKING, B_TEXT, B_TOOL };

struct ms_msg {
	cJSON *content;              /* the blocks, in the order generated */
	enum block kind;             /* the open (last) block's, or B_NONE */
	struct ms_strbuf text;       /* its text so far: thinking, text or input JSON */
	bool started;                /* stream: message_start sent */
	bool finished;
	const char *stop_reason;
	bool called;                 /* a tool_use block was made */
};

#define SIGN_PREFIX "moeserve-thinking-1."

static struct ms_msg *msg_of(struct ms_job *jb)
{
	if (!jb->msg && (jb->msg = calloc(1, sizeof(*jb->msg))))
		jb->msg->content = cJSON_CreateArray();
	if (!jb->msg || !jb->msg->content)
		jb->failed = true;
	return jb->msg && jb->msg->content ? jb->msg : NULL;
}

void ms_messages_free(struct ms_msg *m)
{
	if (!m)
		return;
	cJSON_Delete(m->content);
	ms_strbuf_free(&m->text);
	free(m);
}

void ms_messages_sign(const char *text, size_t len, struct ms_strbuf *out)
{
	ms_strbuf_str(out, SIGN_PREFIX);
	ms_strbuf_base64(out, text, len);
}

bool ms_messages_unsign(const char *sig, struct ms_strbuf *out)
{
	size_t n = strlen(SIGN_PREFIX);
	if (strncmp(sig, SIGN_PREFIX, n))
		return false;
	struct ms_strbuf t = {0};
	bool ok = ms_strbuf_unbase64(&t, sig + n, strlen(sig + n)) && !t.oom;
	if (ok && t.len)
		ms_strbuf_add(out, t.p, t.len);
	ms_strbuf_free(&t);
	return ok;
}

/* ---- SSE ---- */

/* "event: TYPE" and the data line; j deleted. */
static void ev_send(struct ms_job *jb, cJSON *j)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
	char type[48];
	snprintf(type, sizeof(type), "%s", cJSON_IsString(t) ? t->valuestring : "error");
	char *s = ms_json_print(j, jb->json0);
	if (!s) {
		jb->failed = true;
		return;
	}
	ms_strbuf_printf(&jb->out, "event: %s\ndata: %s\n\n", type, s);
	free(s);
}

/* An event about block `index`. */
static cJSON *ev_block(const char *type, int index)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "type", type);
	cJSON_AddNumberToObject(j, "index", index);
	return j;
}

static void send_delta(struct ms_job *jb, int index, const char *type, const char *key,
		       const char *data, size_t len)
{
	cJSON *j = ev_block("content_block_delta", index), *d = cJSON_AddObjectToObject(j, "delta");
	char *v = malloc(len + 1);
	if (!v) {
		jb->failed = true;
		cJSON_Delete(j);
		return;
	}
	memcpy(v, data, len);
	v[len] = '\0';
	cJSON_AddStringToObject(d, "type", type);
	cJSON_AddStringToObject(d, key, v);
	free(v);
	ev_send(jb, j);
}

/* ---- usage, the message ---- */

/* Anthropic's split of the prompt: input_tokens are those not read from
 * the cache; the prefix cache fills itself (nothing to create). */
static cJSON *usage_of(int64_t prompt, int64_t cached, int64_t output)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "input_tokens", (double)(prompt - cached));
	cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
	cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)cached);
	cJSON_AddNumberToObject(u, "output_tokens", (double)output);
	return u;
}

static cJSON *message_of(struct ms_job *jb, const struct ms_msg *m, bool start)
{
	const struct ms_choice *ch = &jb->ch[0];
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "id", jb->id);
	cJSON_AddStringToObject(j, "type", "message");
	cJSON_AddStringToObject(j, "role", "assistant");
	cJSON_AddStringToObject(j, "model", jb->api->cfg.model_name);
	ms_json_put(j, "content", start ? cJSON_CreateArray() : cJSON_Duplicate(m->content, true));
	if (start || !m->stop_reason)
		cJSON_AddNullToObject(j, "stop_reason");
	else
		cJSON_AddStringToObject(j, "stop_reason", m->stop_reason);
	const struct ms_stopper *st = &ch->stop;
	if (!start && ch->stopped && st->matched >= 0)
		cJSON_AddStringToObject(j, "stop_sequence", st->stops[st->matched]);
	else
		cJSON_AddNullToObject(j, "stop_sequence");
	ms_json_put(j, "usage", start ? usage_of(jb->rq->n_prompt[0], 0, 0)
				      : usage_of(ch->prompt_tok, ch->cached_tok, ch->completion_tok));
	return j;
}

void ms_messages_begin(struct ms_job *jb)
{
	struct ms_msg *m = msg_of(jb);
	if (!m || !jb->rq->stream || m->started)
		return;
	m->started = true;
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "type", "message_start");
	ms_json_put(j, "message", message_of(jb, m, true));
	ev_send(jb, j);
}

/* ---- blocks ---- */

static void new_id(struct ms_job *jb, char *out, size_t len)
{
	uint64_t v = ((uint64_t)atomic_fetch_add(&jb->api->counter, 1) + 1) * 0x9e3779b97f4a7c15ull;
	snprintf(out, len, "toolu_%016" PRIx64, v);
}

/* A tool's arguments as "input": a JSON object, or {} when the model
 * wrote something else (a forced or strict call is held to valid JSON). */
static cJSON *input_of(struct ms_job *jb, const char *args)
{
	cJSON *in = cJSON_Parse(args);
	if (cJSON_IsObject(in))
		return in;
	cJSON_Delete(in);
	jb->harmony_errors++;
	return cJSON_CreateObject();
}

/* The open block done: its text in place; streamed, a thinking block's
 * signature, then content_block_stop. */
static void block_close(struct ms_job *jb, struct ms_msg *m)
{
	if (m->kind == B_NONE)
		return;
	int idx = cJSON_GetArraySize(m->content) - 1;
	cJSON *b = cJSON_GetArrayItem(m->content, idx);
	const char *t = m->text.oom ? NULL : ms_strbuf_cstr(&m->text);
	if (!t) {
		jb->failed = true;
		t = "";
	}
	if (m->kind == B_TOOL) {
		ms_json_replace(b, "input", input_of(jb, t));
	} else if (m->kind == B_TEXT) {
		ms_json_replace(b, "text", cJSON_CreateString(t));
	} else {
		struct ms_strbuf sig = {0};
		ms_messages_sign(t, m->text.len, &sig);
		const char *s = sig.oom ? NULL : ms_strbuf_cstr(&sig);
		jb->failed |= !s;
		ms_json_replace(b, "thinking", cJSON_CreateString(jb->rq->thinking_omitted ? "" : t));
		ms_json_replace(b, "signature", cJSON_CreateString(s ? s : ""));
		if (s && jb->rq->stream)
			send_delta(jb, idx, "signature_delta", "signature", s, sig.len);
		ms_strbuf_free(&sig);
	}
	if (jb->rq->stream)
		ev_send(jb, ev_block("content_block_stop", idx));
	ms_strbuf_reset(&m->text);
	m->kind = B_NONE;
}

/* The block as content_block_start shows it: empty. */
static cJSON *block_new(struct ms_job *jb, enum block k, const char *name, size_t nlen)
{
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "type", k == B_THINKING ? "thinking" : k == B_TEXT ? "text"
					   : "tool_use");
	if (k == B_THINKING) {
		cJSON_AddStringToObject(b, "thinking", "");
		cJSON_AddStringToObject(b, "signature", "");
	} else if (k == B_TEXT) {
		cJSON_AddStringToObject(b, "text", "");
	} else {
		char id[48], nm[256];
		new_id(jb, id, sizeof(id));
		snprintf(nm, sizeof(nm), "%.*s", (int)nlen, name);
		cJSON_AddStringToObject(b, "id", id);
		cJSON_AddStringToObject(b, "name", nm);
		cJSON_AddObjectToObject(b, "input");
	}
	return b;
}

static void block_open(struct ms_job *jb, struct ms_msg *m, enum block k, const char *name,
		       size_t nlen)
{
	block_close(jb, m);
	cJSON *b = block_new(jb, k, name, nlen);
	if (!ms_json_push(m->content, b)) {
		jb->failed = true; /* the answer lacks the block */
		return;
	}
	m->kind = k;
	m->called |= k == B_TOOL;
	if (!jb->rq->stream)
		return;
	cJSON *j = ev_block("content_block_start", cJSON_GetArraySize(m->content) - 1);
	ms_json_put(j, "content_block", cJSON_Duplicate(b, true));
	ev_send(jb, j);
}

/* Text for a block of kind k: onto the open one (a new one if the open
 * one is of another kind), streamed as its delta. */
static void block_text(struct ms_job *jb, struct ms_msg *m, enum block k, const char *data,
		       size_t len)
{
	if (!len)
		return;
	if (m->kind != k && k != B_TOOL)
		block_open(jb, m, k, NULL, 0);
	if (m->kind != k)
		return; /* arguments without a call: the parser never sends that */
	ms_strbuf_add(&m->text, data, len);
	if (!jb->rq->stream || (k == B_THINKING && jb->rq->thinking_omitted))
		return;
	int idx = cJSON_GetArraySize(m->content) - 1;
	if (k == B_THINKING)
		send_delta(jb, idx, "thinking_delta", "thinking", data, len);
	else if (k == B_TEXT)
		send_delta(jb, idx, "text_delta", "text", data, len);
	else
		send_delta(jb, idx, "input_json_delta", "partial_json", data, len);
}

/* Answer text, after the stop sequences: nothing once one matched. */
static void text(struct ms_job *jb, struct ms_msg *m, const char *data, size_t len)
{
	struct ms_choice *ch = &jb->ch[0];
	if (ch->stopped)
		return;
	if (jb->rq->n_stops) {
		size_t emit = 0;
		bool stopped = false;
		if (ms_stopper_push(&ch->stop, data, len, &emit, &stopped))
			jb->failed = true;
		data = ms_stopper_text(&ch->stop);
		len = emit;
		ch->stopped = stopped;
	}
	block_text(jb, m, B_TEXT, data, len);
}

struct mctx {
	struct ms_job *jb;
	struct ms_msg *m;
};

static int on_harmony(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct mctx *h = ctx;
	switch (ev) {
	case MS_HARMONY_REASONING:
		if (h->jb->rq->thinking)
			block_text(h->jb, h->m, B_THINKING, data, len);
		break;
	case MS_HARMONY_CONTENT:
		text(h->jb, h->m, data, len);
		break;
	case MS_HARMONY_TOOL_CALL_BEGIN:
		block_open(h->jb, h->m, B_TOOL, data, len);
		break;
	case MS_HARMONY_TOOL_ARGS:
		block_text(h->jb, h->m, B_TOOL, data, len);
		break;
	case MS_HARMONY_TOOL_CALL_END:
		block_close(h->jb, h->m);
		break;
	default:
		break;
	}
	return 0;
}

/* ---- events ---- */

static const char *stop_reason(const struct ms_job *jb, const struct ms_msg *m, enum ms_finish f)
{
	if (jb->ch[0].stopped)
		return "stop_sequence";
	if (f == MS_FINISH_LENGTH || f == MS_FINISH_CONTEXT)
		return "max_tokens";
	return m->called ? "tool_use" : "end_turn";
}

static void finish(struct ms_job *jb, struct ms_msg *m, const struct ms_ev *e)
{
	struct ms_choice *ch = &jb->ch[0];
	ms_harmony_parser_finish(&ch->hp);
	if (jb->rq->n_stops && !ch->stopped) {
		size_t emit = 0;
		ms_stopper_finish(&ch->stop, &emit);
		block_text(jb, m, B_TEXT, ms_stopper_text(&ch->stop), emit);
	}
	block_close(jb, m);
	jb->harmony_errors += ch->hp.n_malformed;
	m->finished = true;
	m->stop_reason = stop_reason(jb, m, e->finish);
	ch->fin = m->stop_reason;
	ch->prompt_tok = e->prompt_tokens;
	ch->cached_tok = e->cached_tokens;
	ch->completion_tok = e->completion_tokens;
}

void ms_messages_event(struct ms_job *jb, const struct ms_ev *e)
{
	struct ms_msg *m = msg_of(jb);
	if (!m)
		return;
	struct ms_choice *ch = &jb->ch[0];
	struct mctx h = {jb, m};
	ch->hp.cb = on_harmony;
	ch->hp.ctx = &h;
	if (e->kind == MS_EV_TOKEN)
		ms_harmony_parser_push(&ch->hp, e->token, e->text ? e->text : "", e->len);
	else if (e->kind == MS_EV_FINISH)
		finish(jb, m, e);
}

void ms_messages_stream_end(struct ms_job *jb)
{
	struct ms_msg *m = msg_of(jb);
	if (!m)
		return;
	ms_messages_begin(jb);
	const struct ms_choice *ch = &jb->ch[0];
	cJSON *j = cJSON_CreateObject(), *d;
	cJSON_AddStringToObject(j, "type", "message_delta");
	d = cJSON_AddObjectToObject(j, "delta");
	cJSON *full = message_of(jb, m, false);
	ms_json_put(d, "stop_reason", cJSON_DetachItemFromObject(full, "stop_reason"));
	ms_json_put(d, "stop_sequence", cJSON_DetachItemFromObject(full, "stop_sequence"));
	cJSON_Delete(full);
	ms_json_put(j, "usage", usage_of(ch->prompt_tok, ch->cached_tok, ch->completion_tok));
	ev_send(jb, j);
	j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "type", "message_stop");
	ev_send(jb, j);
}

cJSON *ms_messages_final(struct ms_job *jb)
{
	struct ms_msg *m = msg_of(jb);
	return m ? message_of(jb, m, false) : NULL;
}
