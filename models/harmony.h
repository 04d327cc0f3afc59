/*
 * harmony.h: the gpt-oss "harmony" chat format, both ways.
 *
 * Rendering: OpenAI-style chat messages -> the exact text the gpt-oss chat
 * template renders with add_generation_prompt=True, special tokens written
 * inline (`<|start|>`, `<|message|>`, ...), ending with `<|start|>assistant`.
 * The caller encodes it with special tokens allowed (or, to keep user text
 * from smuggling in control tokens, encodes only the spans that
 * ms_harmony_render_ex reports as special with them allowed).
 *
 * Template followed: the newest revision of the openai/gpt-oss hub
 * chat_template.jinja found, as vendored in llama.cpp
 * (models/templates/openai-gpt-oss-120b.jinja; read in the copy of
 * corbinjurgens/llama.cpp at 33732cb). It differs from the first hub
 * revision (EchoCog/gpt-oss-20b mirror, chat_template.jinja) in: the
 * "Calls to these tools must go to the commentary channel: 'functions'."
 * line only when tools are given; "\n\n" after the developer instructions
 * whether or not tools follow; tool calls end with <|call|> instead of
 * <|end|>; the analysis of a tool-call turn is kept unless a later assistant
 * message without tool calls exists; parameter descriptions are optional;
 * tools without parameters render as `() => any;`; enum defaults are
 * written bare.
 *
 * Where the template fails or cannot express the request, this renderer
 * does the following instead (each is marked in harmony-render.c):
 *  - a NULL content renders as "" (a tool result's as `null`);
 *  - a tool without a description gets no `// ...` line;
 *  - every tool call of a message is rendered (the template: the first);
 *  - a tool result's header uses the message's name (the template: the
 *    name of the last call);
 *  - an assistant tool-call message with both reasoning and content (the
 *    template refuses it) renders the reasoning as the analysis and the
 *    content as a commentary preamble;
 *  - a non-string enum/oneOf default is written as Python's str().
 * Tool-call arguments are JSON text: they are parsed and written back as
 * json.dumps writes the mapping the template expects ({"a": 1}); text that
 * is not JSON is written as a JSON string, as tojson writes a string.
 *
 * Parsing: a streaming state machine over generated token ids that routes
 * the analysis channel to reasoning, final and recipient-less commentary to
 * content, and `to=functions.NAME` messages to tool calls (the recipient in
 * the role header or after the channel, `<|constrain|>json` or a bare
 * `json`, ended by <|call|> or <|end|>; the name is its [A-Za-z0-9_.-]
 * characters). It never fails on malformed model output: what cannot be
 * parsed becomes content and is counted in n_malformed; special tokens
 * never become text.
 */
#ifndef MS_HARMONY_H
#define MS_HARMONY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ms-error.h"

/* ---------------------------------------------------------------- render */

/* All strings below are UTF-8, NUL-terminated and owned by the caller;
 * the renderer only reads them. */

struct ms_chat_tool_call {
	const char *id;        /* not rendered (harmony has no call ids) */
	const char *name;      /* function name, required */
	const char *arguments; /* JSON text; NULL = "{}" */
};

struct ms_chat_message {
	const char *role;      /* "system" "developer" "user" "assistant" "tool" */
	const char *content;   /* may be NULL */
	const char *reasoning; /* assistant analysis (reasoning_content / thinking), may be NULL */
	const char *name;      /* tool messages: the function name (caller resolves tool_call_id) */
	const struct ms_chat_tool_call *tool_calls; /* assistant only; NULL when n_tool_calls == 0 */
	int n_tool_calls;
};

struct ms_chat_tool {
	const char *name;        /* required */
	const char *description; /* may be NULL (then no `// ...` line) */
	const char *parameters;  /* JSON Schema text, may be NULL */
};

struct ms_chat_request {
	const struct ms_chat_message *messages;
	int n_messages;
	const struct ms_chat_tool *tools;
	int n_tools;
	const char *reasoning_effort; /* "low" "medium" "high"; NULL = medium */
	const char *date;             /* "YYYY-MM-DD"; NULL = today (UTC) */
	const char *model_identity;   /* NULL = the template's default */
	/* Structured output: the answer's JSON Schema (text), rendered as the
	 * developer message's "# Response Formats" section, which tells the
	 * model what the grammar will hold it to; NULL: none. */
	const char *response_format;
	const char *response_format_name;  /* NULL: "response" */
	const char *response_format_desc;  /* NULL: no `// ...` line */
};

/* Render req. On success *out is malloc'd (NUL-terminated, the caller
 * frees it) and *len is its length in bytes. Invalid input (unknown role, a
 * tool message without a name, a tool call without a name, parameters that
 * are not JSON, an effort other than low/medium/high, a malformed date,
 * channel tags inside assistant content) is -EINVAL with a message naming
 * the message index and the field; -ENOMEM on allocation failure. *out is
 * NULL after a failure. *len is authoritative: a schema key or description
 * spelling \u0000 puts a NUL byte in the text, as Python would. */
int ms_harmony_render(const struct ms_chat_request *req, char **out, size_t *len,
		      struct ms_err *err);

/* A special token the renderer wrote: bytes [off, off + len) of the text. */
struct ms_harmony_span {
	size_t off, len;
};

/* ms_harmony_render, and also the spans of every special token it wrote
 * (in order; *specials malloc'd, the caller frees it). Text outside these
 * spans came from the request or the template's plain text: encode it with
 * special tokens disallowed so that "<|end|>" typed by a user stays text.
 * specials and n_specials may both be NULL. */
int ms_harmony_render_ex(const struct ms_chat_request *req, char **out, size_t *len,
			 struct ms_harmony_span **specials, size_t *n_specials,
			 struct ms_err *err);

/* ---------------------------------------------------------------- parse */

/* The ids of the harmony special tokens, filled by the caller from the
 * tokenizer (o200k_harmony: 200006, 200007, 200008, 200005, 200003,
 * 200002, 200012). */
struct ms_harmony_ids {
	int32_t start, end, message, channel, constrain, ret, call;
};

struct ms_tokenizer;

/* The ids as tok spells them, -1 for each it lacks. */
struct ms_harmony_ids ms_harmony_ids_find(const struct ms_tokenizer *tok);

/* Whether a tokenizer speaks harmony: every id but <|constrain|> (which
 * only structured tool calls write) is there. */
bool ms_harmony_ids_complete(const struct ms_harmony_ids *h);

enum ms_harmony_event {
	MS_HARMONY_REASONING,       /* data = analysis text fragment */
	MS_HARMONY_CONTENT,         /* data = user-visible text fragment */
	MS_HARMONY_TOOL_CALL_BEGIN, /* data = function name (without "functions.") */
	MS_HARMONY_TOOL_ARGS,       /* data = argument text fragment */
	MS_HARMONY_TOOL_CALL_END,   /* data = NULL, len = 0 */
	MS_HARMONY_STOP,            /* data = "stop" or "tool_calls" */
};

/* Called for each event; data is valid only during the call and is not
 * NUL-terminated. Text events never carry len == 0. A nonzero return aborts
 * the push/finish in progress, which returns that value. */
typedef int (*ms_harmony_cb)(void *ctx, enum ms_harmony_event ev, const char *data, size_t len);

/* Longest header kept (bytes of raw header text, special tokens spelled
 * out). A longer one is not a header: it is flushed as content. */
#define MS_HARMONY_HEADER_MAX 512

enum ms_harmony_state {
	MS_HARMONY_IN_HEADER,  /* between <|start|> (or the prompt's end) and <|message|> */
	MS_HARMONY_IN_BODY,    /* after <|message|> */
	MS_HARMONY_BETWEEN,    /* after <|end|>, waiting for <|start|> */
	MS_HARMONY_DONE,       /* after a stop token or finish: input is ignored */
};

enum ms_harmony_body {
	MS_HARMONY_BODY_REASONING, /* analysis */
	MS_HARMONY_BODY_CONTENT,   /* final, recipient-less commentary, or a malformed header */
	MS_HARMONY_BODY_TOOL,      /* to=functions.NAME: the text is the arguments */
};

/* One generation's parser. The model continues the rendered prompt right
 * after `<|start|>assistant`, so the parser starts inside a header whose
 * role is already given. Init with ms_harmony_parser_init; no allocation,
 * ms_harmony_parser_free is there for the pairing. */
struct ms_harmony_parser {
	struct ms_harmony_ids ids;
	ms_harmony_cb cb;
	void *ctx;
	enum ms_harmony_state state;
	enum ms_harmony_body body;       /* IN_BODY: where text goes */
	char hdr[MS_HARMONY_HEADER_MAX]; /* raw header, <|channel|>/<|constrain|> spelled out */
	size_t hdr_len;
	int hdr_tokens;                  /* tokens in this header; 0: nothing seen yet */
	size_t chan_at, cons_at;         /* offsets of the spelled <|channel|>/<|constrain|>, or SIZE_MAX */
	int hdr_dup;                     /* a second <|channel|> or <|constrain|> in the header */
	int n_malformed;                 /* deviations from the format seen (a metric) */
	int n_tool_calls;                /* TOOL_CALL_BEGIN events emitted */
};

void ms_harmony_parser_init(struct ms_harmony_parser *p, const struct ms_harmony_ids *ids,
			    ms_harmony_cb cb, void *ctx);
void ms_harmony_parser_free(struct ms_harmony_parser *p); /* NULL is fine */

/* Feed one generated token. Special tokens are recognised by id; any other
 * id is text, `text` (len bytes, whole UTF-8, may be empty) being its
 * decoded form. Returns 0, or the callback's nonzero value. Stop tokens
 * (<|return|>, <|call|>) emit STOP, with "tool_calls" when this generation
 * produced a tool call and "stop" otherwise; <|end|> is not a stop. After
 * STOP further tokens are ignored. */
int ms_harmony_parser_push(struct ms_harmony_parser *p, int32_t id, const char *text, size_t len);

/* End of generation without a stop token (max tokens, cancellation): a
 * buffered header is flushed as content (counted as malformed), an open
 * tool call gets its TOOL_CALL_END. No STOP event: the caller reports why
 * generation ended. */
int ms_harmony_parser_finish(struct ms_harmony_parser *p);

#endif
