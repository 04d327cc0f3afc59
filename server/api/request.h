/*
 * request.h: the OpenAI request bodies, parsed and validated into what the
 * engine takes (no HTTP here, so tests drive it on JSON text).
 *
 * Every refusal names the field by its JSON path (the error envelope's
 * "param", e.g. messages[2].content) and says what the field must be, with
 * the value that was given; type errors, missing fields and bad values
 * carry OpenAI's wording and "code" (invalid_type,
 * missing_required_parameter, invalid_value, invalid_function_parameters). An allocation
 * failure is a refusal too, status 500, never a crash or a shorter request.
 * Fields that are absent or JSON null take their defaults.
 */
#ifndef MS_API_REQUEST_H
#define MS_API_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "harmony.h"
#include "tokenizer.h"
#include "tool-force.h"

struct ms_grammar_cache;

/* What the parsers need to know of the model served. */
struct ms_req_model {
	const char *name;               /* the served model id ("model" must match) */
	int64_t vocab;                  /* token ids are in [0, vocab) */
	int64_t max_model_len;          /* the context advertised */
	const struct ms_tokenizer *tok; /* NULL: token prompts only, no chat */
	struct ms_grammar_cache *grammars; /* structured outputs (NULL: none: no tokenizer) */
	bool harmony;                   /* tok has the harmony special tokens (chat) */
	struct ms_harmony_ids hids;
	const int32_t *eos;             /* the model's eos ids (generation stops there) */
	int n_eos;
	int64_t default_max_tokens;     /* chat without a limit: at most this; 0: the context */
};

#define MS_REQ_PATH 256

/* A refusal in the OpenAI error envelope's terms. param points into path
 * (or at a static string), so the struct is passed by pointer, never
 * copied. */
struct ms_req_error {
	int status;         /* 400, 404 (another model), 500 (out of memory) */
	const char *type;   /* the envelope's "type" */
	const char *param;  /* the field's JSON path ("messages[2].content"), or NULL */
	const char *code;   /* OpenAI's "code" ("invalid_type", "missing_required_parameter",
			     * "invalid_value", ...), or NULL: the status */
	char path[MS_REQ_PATH];
	char msg[1024];
};

#define MS_REQ_MAX_STOPS 16

/* A parsed /v1/completions or /v1/chat/completions request: one engine
 * request per prompt and choice. */
struct ms_req_gen {
	bool chat, stream, include_usage, echo;
	bool ignore_eos;                /* no stop id: exactly max_tokens (benchmarks) */
	int n;                          /* choices per prompt, 1..16 */
	int logprobs;                   /* completions: top-N per token; -1: none */
	int n_prompts;                  /* completions: 1..64; chat: 1 */
	int32_t **prompts;              /* (n_prompts) token ids */
	int64_t *n_prompt;
	char **echo_text;               /* completions: each prompt's text, for echo */
	/* What the engine gets. Completions pass the stop strings to it; chat
	 * applies them to the answer (not to channel headers or reasoning), so
	 * its params.n_stop is 0. */
	struct ms_request_params params;
	const char *stops[MS_REQ_MAX_STOPS]; /* non-empty, pointing into req */
	int n_stops;
	int32_t stop_ids[12];
	struct ms_logit_bias *bias;
	cJSON *req;                     /* the body (for /v1/responses: the chat body made of it) */
	/* POST /v1/responses (responses-request.c) */
	bool responses, store, background;
	cJSON *rsp;                     /* the Responses body, echoed back and stored */
	cJSON *items;                   /* the conversation: previous_response_id's items, then
					 * this turn's input, as Responses items */
	const char *ignored_tool;       /* the first tool type other than function (ignored) */
	/* POST /v1/messages (messages-request.c) */
	bool messages;
	bool thinking;                  /* the answer shows the analysis as thinking blocks */
	bool thinking_omitted;          /* ... with their text "" (the signature carries it) */
	int64_t reason_budget;          /* the analysis's tokens at most (0: unbounded) */
	/* The answer's shape (request-structured.c): tool_choice, strict
	 * tools, a grammar for the answer; force NULL when it is free. */
	enum ms_req_tool_choice { MS_TC_AUTO, MS_TC_NONE, MS_TC_REQUIRED, MS_TC_NAMED } tool_choice;
	const char *tool_named;         /* MS_TC_NAMED: the function (in req) */
	struct ms_tool_force *force;
	struct ms_constraint con;       /* params.constraint points here */
};

/* The body: a JSON object whose "model", when a string, is the served one
 * (any, when m->name is NULL).
 * *out is the parsed body (the caller deletes it). */
int ms_req_body(const struct ms_req_model *m, const char *body, size_t len, cJSON **out,
		struct ms_req_error *e);

/* Whether completions or chat know the field (the others are ignored; the
 * server logs them), and the first one of req they do not know, or NULL. */
bool ms_req_known_field(const char *name);
const char *ms_req_unknown_field(const cJSON *req);

/* POST /v1/completions and /v1/chat/completions. req is taken (owned by
 * *out on success, deleted otherwise). 0, or -EINVAL / -ENOMEM with e set;
 * *out is NULL then. Chat renders the messages with harmony and encodes the
 * text between the renderer's special tokens with special tokens off (a
 * user's "<|end|>" stays text). */
int ms_req_completion(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		      struct ms_req_error *e);
int ms_req_chat(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		struct ms_req_error *e);
void ms_req_gen_free(struct ms_req_gen *r);   /* NULL is fine */

/* POST /v1/responses: the Responses body req (taken) as a chat request on
 * the same renderer: "instructions" the developer message, prev (the
 * stored conversation of previous_response_id, or NULL; not taken) then
 * "input" as messages, function tools flat or nested, "tool_choice",
 * "reasoning.effort", "max_output_tokens", "temperature", "top_p",
 * "stream". Fields of other endpoints' clients that do not apply here are
 * accepted and ignored. Errors name the Responses field. */
int ms_req_responses(const struct ms_req_model *m, cJSON *req, const cJSON *prev,
		     struct ms_req_gen **out, struct ms_req_error *e);

/* POST /v1/messages (Anthropic's Messages API): the body req (taken) as
 * the chat request of the same conversation, on the same renderer (see
 * messages-request.c for what maps to what). max_tokens is required and is
 * a ceiling: the answer gets what the context leaves after the prompt, at
 * most serve's --max-tokens. Errors name the Messages field; a prompt that
 * fills the context is "prompt is too long: N tokens > M maximum". */
int ms_req_messages(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		    struct ms_req_error *e);
/* POST /v1/messages/count_tokens: the prompt's token count of the same
 * body (max_tokens not needed). req is not taken. */
int ms_req_messages_count(const struct ms_req_model *m, const cJSON *req, int64_t *n,
			  struct ms_req_error *e);

/* The chat parser with max_tokens as a ceiling (see ms_req_messages) and
 * the analysis held to reason_budget tokens (0: free); req taken as by
 * ms_req_chat. */
int ms_req_chat_within(const struct ms_req_model *m, cJSON *req, int64_t reason_budget,
		       struct ms_req_gen **out, struct ms_req_error *e);
/* A chat body's rendered prompt: its ids (*ids malloc'd; ids may be
 * NULL) and count, as chat encodes it ("messages", "tools",
 * "reasoning_effort", "tool_choice", "response_format"); req not taken. */
int ms_req_chat_ids(const struct ms_req_model *m, const cJSON *req, int32_t **ids, int64_t *n,
		    struct ms_req_error *e);
int ms_req_chat_count(const struct ms_req_model *m, const cJSON *req, int64_t *n,
		      struct ms_req_error *e);

/* A chat request's messages and tools as harmony takes them: strings point
 * into the body, or into strs (joined content parts, tool-call arguments
 * and tool parameters printed as JSON). */
struct ms_req_chat {
	struct ms_chat_request cr;
	struct ms_chat_message *msgs;
	struct ms_chat_tool *tools;
	struct ms_chat_tool_call *tcalls;
	char **strs;
	int n_strs;
};

/* "messages", "tools" and "reasoning_effort" of a chat body. 0 or an
 * error; c is to be freed with ms_req_chat_free either way. */
int ms_req_chat_messages(const cJSON *req, struct ms_req_chat *c, struct ms_req_error *e);
void ms_req_chat_free(struct ms_req_chat *c);

/* Structured outputs (request-structured.c). r's constraint, once its
 * prompt, tool_choice and max_tokens are known: a forced call, strict
 * tool arguments, the answer held to a grammar (chat: harmony's final
 * message; completions, plain: the whole output). Sets r->force and
 * params.constraint, or leaves both unset when the answer is free. */
int ms_req_shape(const struct ms_req_model *m, struct ms_req_gen *r, struct ms_req_error *e);

/* The JSON Schema the answer is held to (a JSON object or its text), with
 * response_format's name and description (or NULL): what the prompt
 * shows the model. NULL when the answer is not held to a schema. */
const cJSON *ms_req_answer_schema(const cJSON *req, const char **name, const char **desc);

/* The grammar the request's
 * answer must match (response_format, structured_outputs, guided_json,
 * guided_regex, guided_choice, guided_grammar, grammar, json_schema: one
 * of them): 1 with *out a reference, 0 when none is asked for. */
int ms_req_answer_grammar(const struct ms_req_model *m, const cJSON *req, struct ms_tmask **out,
			  struct ms_req_error *e);
/* POST /tokenize ({"prompt" or "text", "add_special_tokens"}, or a chat
 * conversation: "messages" with "tools", "reasoning_effort", rendered as
 * chat renders it): *ids malloc'd. POST /detokenize ({"tokens"}): *text malloc'd. */
int ms_req_tokenize(const struct ms_req_model *m, const cJSON *req, int32_t **ids, size_t *n,
		    struct ms_req_error *e);
int ms_req_detokenize(const struct ms_req_model *m, const cJSON *req, char **text, size_t *len,
		      struct ms_req_error *e);

#endif
