/*
 * harmony-parse.c: the streaming parser of harmony.h (generated tokens ->
 * reasoning, content and tool calls). It never fails on malformed model
 * output: what does not parse becomes content and is counted; special
 * tokens never become text, so none reaches a client in content, names or
 * arguments.
 */
#include "harmony.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <string.h>

#define NO_OFF SIZE_MAX

void ms_harmony_parser_init(struct ms_harmony_parser *p, const struct ms_harmony_ids *ids,
			    ms_harmony_cb cb, void *ctx)
{
	memset(p, 0, sizeof(*p));
	p->ids = *ids;
	p->cb = cb;
	p->ctx = ctx;
	p->state = MS_HARMONY_IN_HEADER; /* the prompt ended with <|start|>assistant */
	p->chan_at = p->cons_at = NO_OFF;
}

void ms_harmony_parser_free(struct ms_harmony_parser *p)
{
	(void)p; /* nothing allocated */
}

static int emit(struct ms_harmony_parser *p, enum ms_harmony_event ev, const char *s, size_t n)
{
	bool text = ev == MS_HARMONY_REASONING || ev == MS_HARMONY_CONTENT || ev == MS_HARMONY_TOOL_ARGS;
	if (!p->cb || (text && n == 0))
		return 0;
	return p->cb(p->ctx, ev, s, n);
}

static void hdr_reset(struct ms_harmony_parser *p)
{
	p->state = MS_HARMONY_IN_HEADER;
	p->hdr_len = 0;
	p->hdr_tokens = 0;
	p->chan_at = p->cons_at = NO_OFF;
	p->hdr_dup = 0;
}

/* The buffered header cannot be a header: its text becomes content, the
 * special tokens in it do not (they never reach a client as text). */
static int hdr_flush(struct ms_harmony_parser *p)
{
	static const char *const spelled[] = {"<|channel|>", "<|constrain|>"};
	p->n_malformed++;
	size_t from = 0, i = 0;
	int rc = 0;
	while (i < p->hdr_len && !rc) {
		size_t sl = 0;
		for (int k = 0; k < 2 && !sl; k++)
			if (p->hdr_len - i >= strlen(spelled[k]) &&
			    !memcmp(p->hdr + i, spelled[k], strlen(spelled[k])))
				sl = strlen(spelled[k]);
		if (!sl) {
			i++;
			continue;
		}
		rc = emit(p, MS_HARMONY_CONTENT, p->hdr + from, i - from);
		i += sl;
		from = i;
	}
	if (!rc)
		rc = emit(p, MS_HARMONY_CONTENT, p->hdr + from, p->hdr_len - from);
	p->hdr_len = 0;
	return rc;
}

/* Append to the header; a header that outgrows the buffer is flushed as
 * content together with s, and the message is content from then on. */
static int hdr_add(struct ms_harmony_parser *p, const char *s, size_t n)
{
	p->hdr_tokens++;
	if (p->hdr_len + n > sizeof(p->hdr)) {
		int rc = hdr_flush(p);
		if (!rc)
			rc = emit(p, MS_HARMONY_CONTENT, s, n);
		p->state = MS_HARMONY_IN_BODY;
		p->body = MS_HARMONY_BODY_CONTENT;
		return rc;
	}
	memcpy(p->hdr + p->hdr_len, s, n);
	p->hdr_len += n;
	return 0;
}

/* The current message ends (a terminator, or the start of another message
 * where <|end|> was missing). */
static int body_end(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_BODY && p->body == MS_HARMONY_BODY_TOOL)
		rc = emit(p, MS_HARMONY_TOOL_CALL_END, NULL, 0);
	p->state = MS_HARMONY_BETWEEN;
	return rc;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Next whitespace-separated word of s[*i, end); false at the end. */
static bool next_word(const char *s, size_t end, size_t *i, size_t *w, size_t *wn)
{
	while (*i < end && is_space(s[*i]))
		(*i)++;
	if (*i >= end)
		return false;
	*w = *i;
	while (*i < end && !is_space(s[*i]))
		(*i)++;
	*wn = *i - *w;
	return true;
}

static bool word_is(const char *s, size_t w, size_t wn, const char *lit)
{
	return wn == strlen(lit) && !memcmp(s + w, lit, wn);
}

/* End of the header segment that starts at `from`: the next spelled
 * special token, or the end. */
static size_t seg_end(const struct ms_harmony_parser *p, size_t from)
{
	size_t e = p->hdr_len;
	if (p->chan_at != NO_OFF && p->chan_at >= from && p->chan_at < e)
		e = p->chan_at;
	if (p->cons_at != NO_OFF && p->cons_at >= from && p->cons_at < e)
		e = p->cons_at;
	return e;
}

/* The words after a channel or content type, up to end: a recipient
 * (`to=R`, one in the whole header: *to is NO_OFF until then) or a content
 * type such as "json" (ignored). false on a second recipient. */
static bool seg_rest(const char *h, size_t end, size_t i, size_t *to, size_t *to_len)
{
	size_t w, wn;
	while (next_word(h, end, &i, &w, &wn)) {
		if (wn < 3 || memcmp(h + w, "to=", 3))
			continue;
		if (*to != NO_OFF)
			return false;
		*to = w + 3;
		*to_len = wn - 3;
	}
	return true;
}

/* How much of s is a function name ([A-Za-z0-9_.-]): what follows a name
 * written without a space (a "json" after a quote, text that spells a
 * special token) is not part of it. */
static size_t name_chars(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
			 (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-'))
		i++;
	return i;
}

/* Parse the buffered header at <|message|>. The header is
 *   [assistant] [to=R] <|channel|>CHANNEL [to=R] [json] [<|constrain|>json]
 * in that order or with the recipient on either side. Returns false when
 * it does not parse; else *body, and for a tool call the name in the
 * header buffer. */
static bool hdr_parse(struct ms_harmony_parser *p, enum ms_harmony_body *body,
		      size_t *name, size_t *name_len)
{
	const char *h = p->hdr;
	size_t i, w, wn, to = NO_OFF, to_len = 0;
	int k;
	if (p->hdr_dup || p->chan_at == NO_OFF)
		return false;

	/* role part: an optional "assistant" (given by the prompt for the
	 * first message), then only a recipient */
	i = 0;
	size_t end = seg_end(p, 0);
	for (k = 0; next_word(h, end, &i, &w, &wn); k++) {
		if (k == 0 && word_is(h, w, wn, "assistant"))
			continue;
		if (wn < 3 || memcmp(h + w, "to=", 3) || to != NO_OFF)
			return false;
		to = w + 3;
		to_len = wn - 3;
	}

	/* channel part: the channel, then a recipient or a content type */
	i = p->chan_at + strlen("<|channel|>");
	end = seg_end(p, i);
	if (!next_word(h, end, &i, &w, &wn))
		return false;
	if (word_is(h, w, wn, "analysis"))
		*body = MS_HARMONY_BODY_REASONING;
	else if (word_is(h, w, wn, "final") || word_is(h, w, wn, "commentary"))
		*body = MS_HARMONY_BODY_CONTENT;
	else
		return false;
	if (!seg_rest(h, end, i, &to, &to_len))
		return false;

	/* constrain part: json */
	if (p->cons_at != NO_OFF) {
		i = p->cons_at + strlen("<|constrain|>");
		end = seg_end(p, i);
		if (!next_word(h, end, &i, &w, &wn) || !word_is(h, w, wn, "json") ||
		    !seg_rest(h, end, i, &to, &to_len))
			return false;
	}

	if (to != NO_OFF) {
		static const char fn[] = "functions.";
		size_t fl = sizeof(fn) - 1;
		if (to_len <= fl || memcmp(h + to, fn, fl))
			return false; /* no name, or not a function (no built-in tools here) */
		*body = MS_HARMONY_BODY_TOOL;
		*name = to + fl;
		*name_len = name_chars(h + *name, to_len - fl);
		if (!*name_len)
			return false;
	}
	return true;
}

static int on_message(struct ms_harmony_parser *p)
{
	enum ms_harmony_body body;
	size_t name = 0, name_len = 0;
	int rc = 0;
	p->state = MS_HARMONY_IN_BODY;
	if (!hdr_parse(p, &body, &name, &name_len)) {
		p->body = MS_HARMONY_BODY_CONTENT;
		return hdr_flush(p);
	}
	p->body = body;
	if (body == MS_HARMONY_BODY_TOOL) {
		p->n_tool_calls++;
		rc = emit(p, MS_HARMONY_TOOL_CALL_BEGIN, p->hdr + name, name_len);
	}
	return rc;
}

static int on_stop(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_HEADER && p->hdr_tokens > 0)
		rc = hdr_flush(p);
	if (!rc)
		rc = body_end(p);
	p->state = MS_HARMONY_DONE;
	const char *why = p->n_tool_calls > 0 ? "tool_calls" : "stop";
	return rc ? rc : emit(p, MS_HARMONY_STOP, why, strlen(why));
}

/* <|channel|> or <|constrain|> while in a header. */
static int hdr_special(struct ms_harmony_parser *p, const char *spelled, size_t *at)
{
	if (*at != NO_OFF)
		p->hdr_dup = 1;
	size_t off = p->hdr_len;
	int rc = hdr_add(p, spelled, strlen(spelled));
	if (p->state == MS_HARMONY_IN_HEADER && *at == NO_OFF)
		*at = off;
	return rc;
}

/* <|end|>: the message ends, whatever state it is in. */
static int on_end(struct ms_harmony_parser *p)
{
	int rc;
	switch (p->state) {
	case MS_HARMONY_IN_HEADER: /* a message without <|message|> */
		rc = hdr_flush(p);
		p->state = MS_HARMONY_BETWEEN;
		return rc;
	case MS_HARMONY_IN_BODY:
		return body_end(p);
	default:
		p->n_malformed++; /* a stray <|end|> */
		return 0;
	}
}

static int on_start(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_HEADER && p->hdr_tokens > 0)
		rc = hdr_flush(p); /* a header cut short */
	else if (p->state == MS_HARMONY_IN_BODY) {
		p->n_malformed++; /* <|end|> missing */
		rc = body_end(p);
	}
	hdr_reset(p);
	p->hdr_tokens = 1;
	return rc;
}

/* <|channel|>, <|constrain|>, <|message|> or text. */
static int on_token(struct ms_harmony_parser *p, int32_t id, const char *text, size_t len)
{
	const struct ms_harmony_ids *ids = &p->ids;
	bool is_chan = id == ids->channel, is_cons = id == ids->constrain, is_msg = id == ids->message;
	int rc;
	if (p->state == MS_HARMONY_BETWEEN) {
		if (!is_chan && !is_cons && !is_msg && len == 0)
			return 0; /* held-back bytes: wait for the text */
		p->n_malformed++; /* <|start|> missing: read a header anyway */
		hdr_reset(p);
	} else if (p->state == MS_HARMONY_IN_BODY && is_chan) {
		p->n_malformed++; /* <|end|><|start|>assistant missing */
		if ((rc = body_end(p)))
			return rc;
		hdr_reset(p);
	} else if (p->state == MS_HARMONY_IN_BODY && (is_cons || is_msg)) {
		p->n_malformed++; /* a stray special in a body: dropped, never text */
		return 0;
	}

	if (p->state == MS_HARMONY_IN_HEADER) {
		if (is_chan)
			return hdr_special(p, "<|channel|>", &p->chan_at);
		if (is_cons)
			return hdr_special(p, "<|constrain|>", &p->cons_at);
		if (is_msg)
			return on_message(p);
		return hdr_add(p, text, len);
	}

	/* text in a body */
	switch (p->body) {
	case MS_HARMONY_BODY_REASONING: return emit(p, MS_HARMONY_REASONING, text, len);
	case MS_HARMONY_BODY_CONTENT: return emit(p, MS_HARMONY_CONTENT, text, len);
	case MS_HARMONY_BODY_TOOL: return emit(p, MS_HARMONY_TOOL_ARGS, text, len);
	}
	return 0;
}

int ms_harmony_parser_push(struct ms_harmony_parser *p, int32_t id, const char *text, size_t len)
{
	const struct ms_harmony_ids *ids = &p->ids;
	if (!text)
		len = 0;
	if (p->state == MS_HARMONY_DONE)
		return 0;
	if (id == ids->ret || id == ids->call)
		return on_stop(p);
	if (id == ids->end)
		return on_end(p);
	if (id == ids->start)
		return on_start(p);
	return on_token(p, id, text, len);
}

int ms_harmony_parser_finish(struct ms_harmony_parser *p)
{
	int rc = 0;
	if (p->state == MS_HARMONY_IN_HEADER && p->hdr_tokens > 0)
		rc = hdr_flush(p); /* generation ended inside a header */
	else if (p->state == MS_HARMONY_IN_BODY)
		rc = body_end(p);
	p->state = MS_HARMONY_DONE;
	return rc;
}

struct ms_harmony_ids ms_harmony_ids_find(const struct ms_tokenizer *tok)
{
	return (struct ms_harmony_ids){
		ms_tokenizer_find(tok, "<|start|>"), ms_tokenizer_find(tok, "<|end|>"),
		ms_tokenizer_find(tok, "<|message|>"), ms_tokenizer_find(tok, "<|channel|>"),
		ms_tokenizer_find(tok, "<|constrain|>"), ms_tokenizer_find(tok, "<|return|>"),
		ms_tokenizer_find(tok, "<|call|>")};
}

bool ms_harmony_ids_complete(const struct ms_harmony_ids *h)
{
	return h->start >= 0 && h->end >= 0 && h->message >= 0 && h->channel >= 0 && h->ret >= 0 &&
	       h->call >= 0;
}
