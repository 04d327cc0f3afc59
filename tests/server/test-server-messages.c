/*
 * test-server-messages.c: POST /v1/messages (Anthropic's Messages API)
 * without a daemon.
 *
 * The request (server/api/messages-request.c): system prompts, text
 * blocks, a tool_use / tool_result turn, thinking passed back (by its text,
 * or by our signature when the text was omitted), system entries inside
 * messages, tool_choice none render exactly the prompt the equivalent
 * chat request renders (the same ids); what Claude Code sends is accepted;
 * max_tokens is a ceiling; the thinking and effort mapping; every refusal
 * names the Messages field; count_tokens counts the same prompt.
 *
 * The answer (server/api/messages-answer.c): scripted harmony output fed
 * token by token as the engine's events: the blocks in the order
 * generated (thinking with a signature that carries it, text, tool_use
 * with its input parsed), stop_reason and stop_sequence, the usage split;
 * streamed, every "event:" line equal to its data's type, message_start
 * first, each block's start / deltas / stop in order with the deltas adding
 * up to the final blocks, message_delta and message_stop last, and the
 * same message as not streamed. Errors in Anthropic's envelope.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "api.h"
#include "check-run.h"
#include "messages-answer.h"
#include "ms-json.h"
#include "request.h"
#include "tokenizer.h"

#include "reqtest.h"

#define MSG(json) accepted(ms_req_messages, json)
#define MSG_BAD(json, param, ...) refused(ms_req_messages, json, 400, param, NEEDLES(__VA_ARGS__))

static void same_prompt(struct ms_req_gen *a, struct ms_req_gen *b, const char *what)
{
	same_prompt_as(a, b, "messages", what);
}

static const char *const MSG_TOOLS =
	"\"tools\": [{\"name\": \"get_weather\", \"description\": \"Current weather\", "
	"\"input_schema\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}, "
	"\"cache_control\": {\"type\": \"ephemeral\"}}, {\"type\": \"web_search_20250305\", "
	"\"name\": \"web_search\"}]";
static const char *const CHAT_TOOLS =
	"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
	"\"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
	"{\"city\": {\"type\": \"string\"}}}}}]";

/* ==== the request ==== */

START_TEST(renders_as_chat)
{
	same_prompt(MSG("{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}"),
		    CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}"), "a string");
	/* system blocks joined, Claude Code's billing block dropped; text blocks joined */
	same_prompt(MSG("{\"max_tokens\": 9, \"system\": [{\"type\": \"text\", \"text\": "
			"\"x-anthropic-billing-header: cc_version=1;\"}, {\"type\": \"text\", \"text\": "
			"\"Be \", \"cache_control\": {\"type\": \"ephemeral\"}}, {\"type\": \"text\", "
			"\"text\": \"brief.\"}], \"messages\": [{\"role\": \"user\", \"content\": "
			"[{\"type\": \"text\", \"text\": \"Weather \"}, {\"type\": \"text\", \"text\": "
			"\"in Paris?\"}]}]}"),
		    CHAT("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
			 "{\"role\": \"user\", \"content\": \"Weather in Paris?\"}]}"), "system blocks");
	/* a tool-calling turn sent back: thinking, a call, its result, then text */
	char m[2048], c[2048];
	snprintf(m, sizeof(m), "{\"max_tokens\": 9, %s, \"messages\": ["
		 "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
		 "{\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": "
		 "\"Call the tool.\", \"signature\": \"EqQBCkYIBxgCKkBv\"}, {\"type\": \"text\", "
		 "\"text\": \"Checking.\"}, {\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": "
		 "\"get_weather\", \"input\": {\"city\": \"Paris\"}}]},"
		 "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": "
		 "\"toolu_1\", \"content\": [{\"type\": \"text\", \"text\": \"18C\"}]}, "
		 "{\"type\": \"text\", \"text\": \"Thanks\"}]}]}", MSG_TOOLS);
	snprintf(c, sizeof(c), "{%s, \"messages\": ["
		 "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
		 "{\"role\": \"assistant\", \"reasoning_content\": \"Call the tool.\", \"content\": "
		 "\"Checking.\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": "
		 "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
		 "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18C\"},"
		 "{\"role\": \"user\", \"content\": \"Thanks\"}]}", CHAT_TOOLS);
	same_prompt(MSG(m), CHAT(c), "a tool turn");
	/* the analysis comes back from our signature when its text was omitted */
	struct ms_strbuf sig = {0};
	ms_messages_sign("Call the tool.", 14, &sig);
	snprintf(m, sizeof(m), "{\"max_tokens\": 9, %s, \"messages\": ["
		 "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
		 "{\"role\": \"assistant\", \"content\": [{\"type\": \"redacted_thinking\", \"data\": \"x\"},"
		 "{\"type\": \"thinking\", \"thinking\": \"\", \"signature\": \"%s\"}, {\"type\": "
		 "\"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": {\"city\": "
		 "\"Paris\"}}]}, {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", "
		 "\"tool_use_id\": \"toolu_1\", \"content\": \"18C\", \"is_error\": false}]}]}",
		 MSG_TOOLS, ms_strbuf_cstr(&sig));
	ms_strbuf_free(&sig);
	snprintf(c, sizeof(c), "{%s, \"messages\": ["
		 "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
		 "{\"role\": \"assistant\", \"reasoning_content\": \"Call the tool.\", \"content\": null, "
		 "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": "
		 "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
		 "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18C\"}]}", CHAT_TOOLS);
	same_prompt(MSG(m), CHAT(c), "thinking from its signature");
	/* in a tool result: an image said to be omitted, a tool search's
	 * references by name; a plain-text document is its text */
	snprintf(m, sizeof(m), "{\"max_tokens\": 9, %s, \"messages\": ["
		 "{\"role\": \"user\", \"content\": [{\"type\": \"document\", \"source\": {\"type\": "
		 "\"text\", \"media_type\": \"text/plain\", \"data\": \"Notes.\"}}]},"
		 "{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"t1\", "
		 "\"name\": \"get_weather\", \"input\": {}}]},"
		 "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"t1\", "
		 "\"content\": [{\"type\": \"image\", \"source\": {}}, {\"type\": \"tool_reference\", "
		 "\"tool_name\": \"Read\"}]}]}]}", MSG_TOOLS);
	snprintf(c, sizeof(c), "{%s, \"messages\": [{\"role\": \"user\", \"content\": \"Notes.\"},"
		 "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", "
		 "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
		 "\"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": "
		 "\"[image omitted: this model reads text only]Read\\n\"}]}", CHAT_TOOLS);
	same_prompt(MSG(m), CHAT(c), "media and references in a tool result");
	/* a system entry inside messages is said where it stands, as a user turn */
	same_prompt(MSG("{\"max_tokens\": 9, \"system\": \"S\", \"messages\": [{\"role\": \"user\", "
			"\"content\": \"Hi\"}, {\"role\": \"system\", \"content\": [{\"type\": \"text\", "
			"\"text\": \"Env: linux\"}]}, {\"role\": \"user\", \"content\": \"Go\"}]}"),
		    CHAT("{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", "
			 "\"content\": \"Hi\"}, {\"role\": \"user\", \"content\": \"Env: linux\"}, "
			 "{\"role\": \"user\", \"content\": \"Go\"}]}"), "a system entry");
	/* tool_choice none renders no tools, as chat's none */
	snprintf(m, sizeof(m), "{\"max_tokens\": 9, %s, \"tool_choice\": {\"type\": \"none\"}, %s}",
		 MSG_TOOLS, USER_HI);
	snprintf(c, sizeof(c), "{%s, \"tool_choice\": \"none\", %s}", CHAT_TOOLS, USER_HI);
	same_prompt(MSG(m), CHAT(c), "tool_choice none");
}
END_TEST

/* The thinking budget and output_config.effort onto harmony's efforts. */
START_TEST(thinking_to_effort)
{
	static const struct {
		const char *fields, *effort;
		bool shown, omitted;
	} cases[] = {
		{"", "medium", false, false},
		{"\"thinking\": {\"type\": \"disabled\"},", "low", false, false},
		{"\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 4000},", "low", true, false},
		{"\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 10000},", "medium", true, false},
		{"\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 31999},", "high", true, false},
		{"\"thinking\": {\"type\": \"adaptive\", \"display\": \"omitted\"}, \"output_config\": "
		 "{\"effort\": \"high\"},", "high", true, true},
		{"\"thinking\": {\"type\": \"adaptive\"}, \"output_config\": {\"effort\": \"max\"},", "high",
		 true, false},
		{"\"output_config\": {\"effort\": \"low\"},", "low", false, false},
		/* past long long's range: whole, so taken, and no cast overflows */
		{"\"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 1e300},", "high", true, false},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char m[512], c[256];
		snprintf(m, sizeof(m), "{\"max_tokens\": 9, %s %s}", cases[k].fields, USER_HI);
		snprintf(c, sizeof(c), "{\"reasoning_effort\": \"%s\", %s}", cases[k].effort, USER_HI);
		struct ms_req_gen *r = MSG(m);
		ck_assert_msg(r->thinking == cases[k].shown && r->thinking_omitted == cases[k].omitted,
			      "%s: thinking %d omitted %d", m, r->thinking, r->thinking_omitted);
		/* budget_tokens also caps the analysis: a constraint that only an
		 * enabled thinking brings here */
		bool budgeted = strstr(m, "budget_tokens") != NULL;
		ck_assert_msg((r->reason_budget > 0) == budgeted && (r->params.constraint != NULL) == budgeted,
			      "%s: reasoning budget %lld, constraint %p", m, (long long)r->reason_budget,
			      (const void *)r->params.constraint);
		same_prompt(r, CHAT(c), m);
	}
	struct ms_req_gen *r = MSG("{\"max_tokens\": 9, \"thinking\": {\"type\": \"enabled\", "
				   "\"budget_tokens\": 4000}, " USER_HI "}");
	ck_assert_int_eq(r->reason_budget, 4000);
	ms_req_gen_free(r);
}
END_TEST

/* A body shaped as Claude Code's: adaptive thinking, output_config,
 * context_management, metadata, cache_control everywhere, a dozen tools
 * (one deferred), a system entry inside messages, max_tokens 32000. */
START_TEST(claude_code_body)
{
	struct ms_strbuf b = {0};
	ms_strbuf_str(&b, "{\"model\": \"claude-sonnet-4-5\", \"max_tokens\": 32000, \"stream\": true, "
		      "\"thinking\": {\"type\": \"adaptive\", \"display\": \"omitted\"}, "
		      "\"output_config\": {\"effort\": \"high\"}, \"context_management\": {\"edits\": "
		      "[{\"type\": \"clear_thinking_20251015\", \"keep\": \"all\"}]}, \"metadata\": "
		      "{\"user_id\": \"{\\\"session_id\\\":\\\"s\\\"}\"}, \"system\": [{\"type\": \"text\", "
		      "\"text\": \"You are an agent.\", \"cache_control\": {\"type\": \"ephemeral\"}}], "
		      "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
		      "\"<system-reminder>x</system-reminder>\"}, {\"type\": \"text\", \"text\": \"say hi\", "
		      "\"cache_control\": {\"type\": \"ephemeral\"}}]}, {\"role\": \"system\", \"content\": "
		      "[{\"type\": \"text\", \"text\": \"# Environment\"}]}], \"tools\": [");
	for (int t = 0; t < 12; t++)
		ms_strbuf_printf(&b, "%s{\"name\": \"Tool%d\", \"description\": \"does %d\", \"input_schema\": "
				 "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\"}}, "
				 "\"required\": [\"x\"], \"additionalProperties\": false}%s}", t ? ", " : "", t,
				 t, t == 10 ? ", \"defer_loading\": true" : "");
	ms_strbuf_str(&b, "]}");
	struct ms_req_model md = model();
	md.name = NULL; /* as the daemon parses a Messages body: any model */
	struct ms_req_gen *r;
	struct ms_req_error e = {0};
	ck_assert_msg(!parse_with(&md, ms_req_messages, ms_strbuf_cstr(&b), &r, &e), "%s", e.msg);
	ck_assert(r->messages && r->stream && r->thinking && r->thinking_omitted);
	ck_assert_int_eq(r->tool_choice, MS_TC_AUTO);
	/* 32000 is a ceiling: the context left after the prompt */
	ck_assert_int_eq(r->params.max_tokens, CONTEXT - r->n_prompt[0]);
	char *text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "Tool11") && strstr(text, "# Environment") &&
		      strstr(text, "Reasoning: high"), "%s", text);
	free(text);
	ms_req_gen_free(r);
	ms_strbuf_free(&b);
}
END_TEST

START_TEST(fields)
{
	char m[1024];
	struct ms_req_gen *r = MSG("{\"max_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9, "
				   "\"top_k\": 40, \"stop_sequences\": [\"END\", \"\", \"STOP\"], "
				   "\"metadata\": {\"user_id\": \"u\"}, " USER_HI "}");
	ck_assert_int_eq(r->params.max_tokens, 7);
	ck_assert(r->params.sampling.temperature == 0.5f && r->params.sampling.top_p == 0.9f);
	ck_assert_int_eq(r->params.sampling.top_k, 40);
	ck_assert_int_eq(r->n_stops, 2);
	ck_assert_str_eq(r->stops[1], "STOP");
	ck_assert(!r->stream && !r->thinking);
	ms_req_gen_free(r);
	/* serve's --max-tokens is the ceiling too */
	struct ms_req_model md = model();
	md.default_max_tokens = 5;
	struct ms_req_error e = {0};
	ck_assert_int_eq(parse_with(&md, ms_req_messages, "{\"max_tokens\": 32000, " USER_HI "}", &r,
				    &e), 0);
	ck_assert_int_eq(r->params.max_tokens, 5);
	ms_req_gen_free(r);
	/* tool_choice: any is chat's required, tool a named function */
	snprintf(m, sizeof(m), "{\"max_tokens\": 99, %s, \"tool_choice\": {\"type\": \"any\", "
		 "\"disable_parallel_tool_use\": true}, %s}", MSG_TOOLS, USER_HI);
	r = MSG(m);
	ck_assert_int_eq(r->tool_choice, MS_TC_REQUIRED);
	ck_assert_ptr_nonnull(r->force);
	ck_assert_str_eq(r->ignored_tool, "web_search_20250305");
	ms_req_gen_free(r);
	snprintf(m, sizeof(m), "{\"max_tokens\": 99, %s, \"tool_choice\": {\"type\": \"tool\", "
		 "\"name\": \"get_weather\"}, %s}", MSG_TOOLS, USER_HI);
	r = MSG(m);
	ck_assert_int_eq(r->tool_choice, MS_TC_NAMED);
	ck_assert_str_eq(r->tool_named, "get_weather");
	ms_req_gen_free(r);
	/* any model name is the served one */
	md.name = NULL;
	ck_assert_int_eq(parse_with(&md, ms_req_messages, "{\"model\": \"claude-opus-4-1\", "
				    "\"max_tokens\": 3, " USER_HI "}", &r, &e), 0);
	ms_req_gen_free(r);
}
END_TEST

START_TEST(count_tokens)
{
	char m[1024];
	snprintf(m, sizeof(m), "{\"max_tokens\": 99, \"system\": \"S\", %s, \"thinking\": {\"type\": "
		 "\"enabled\", \"budget_tokens\": 20000}, %s}", MSG_TOOLS, USER_HI);
	struct ms_req_gen *r = MSG(m);
	struct ms_req_model md = model();
	struct ms_req_error e = {0};
	cJSON *body = cJSON_Parse(m);
	cJSON_DeleteItemFromObject(body, "max_tokens"); /* not needed to count */
	int64_t n = -1;
	ck_assert_int_eq(ms_req_messages_count(&md, body, &n, &e), 0);
	ck_assert_int_eq(n, r->n_prompt[0]);
	cJSON_Delete(body);
	ms_req_gen_free(r);
	body = cJSON_Parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]}");
	ck_assert_int_eq(ms_req_messages_count(&md, body, &n, &e), -EINVAL);
	ck_assert_str_eq(e.param, "messages[0].content[0].type");
	cJSON_Delete(body);
}
END_TEST

START_TEST(refusals)
{
	MSG_BAD("{" USER_HI "}", "max_tokens", "Missing required parameter");
	MSG_BAD("{\"max_tokens\": 0, " USER_HI "}", "max_tokens", "integer >= 1");
	MSG_BAD("{\"max_tokens\": 2.5, " USER_HI "}", "max_tokens", "integer >= 1");
	MSG_BAD("{\"max_tokens\": 1e300, " USER_HI "}", "max_tokens", "[0, 1000000000]");
	MSG_BAD("{\"max_tokens\": 9, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": "
		"0.5}, " USER_HI "}", "thinking.budget_tokens", "integer >= 1");
	MSG_BAD("{\"max_tokens\": 9}", "messages", "Missing");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": []}", "messages", "non-empty");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": 5}]}",
		"messages[0].content", "string or a list");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}",
		"messages[0].role", "\"user\" and \"assistant\"");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
		"\"image\", \"source\": {}}]}]}", "messages[0].content[0].type", "text only");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
		"\"tool_result\", \"tool_use_id\": \"nope\"}]}]}", "messages[0].content[0].tool_use_id",
		"no earlier tool_use");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": "
		"\"tool_use\", \"id\": \"a\", \"name\": \"f\", \"input\": \"{}\"}]}]}",
		"messages[0].content[0].input", "an object");
	MSG_BAD("{\"max_tokens\": 9, \"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": "
		"\"thinking\", \"signature\": \"s\"}]}]}", "messages[0].content[0].thinking", "Missing");
	MSG_BAD("{\"max_tokens\": 9, \"tools\": [{\"name\": \"f\"}], " USER_HI "}",
		"tools[0].input_schema", "Missing");
	MSG_BAD("{\"max_tokens\": 9, \"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": 3}}], "
		USER_HI "}", "tools[0].input_schema.type", "");
	MSG_BAD("{\"max_tokens\": 9, \"tools\": [{\"type\": \"frobnicate\", \"name\": \"f\"}], " USER_HI "}",
		"tools[0].type", "custom");
	MSG_BAD("{\"max_tokens\": 9, \"tool_choice\": {\"type\": \"any\"}, " USER_HI "}",
		"tool_choice.type", "no tools");
	char m[1024];
	snprintf(m, sizeof(m), "{\"max_tokens\": 9, %s, \"tool_choice\": {\"type\": \"tool\", "
		 "\"name\": \"nope\"}, %s}", MSG_TOOLS, USER_HI);
	MSG_BAD(m, "tool_choice.name", "no tool of this name");
	MSG_BAD("{\"max_tokens\": 9, \"thinking\": {\"type\": \"enabled\"}, " USER_HI "}",
		"thinking.budget_tokens", "Missing");
	MSG_BAD("{\"max_tokens\": 9, \"thinking\": {\"type\": \"sometimes\"}, " USER_HI "}",
		"thinking.type", "adaptive");
	MSG_BAD("{\"max_tokens\": 9, \"output_config\": {\"effort\": \"huge\"}, " USER_HI "}",
		"output_config.effort", "\"low\"");
	MSG_BAD("{\"max_tokens\": 9, \"stop_sequences\": [\"a\", 3], " USER_HI "}", "stop_sequences[1]",
		"a string");
	MSG_BAD("{\"max_tokens\": 9, \"metadata\": 3, " USER_HI "}", "metadata", "an object");
	/* a prompt that fills the context, in the words Claude Code reads */
	struct ms_strbuf b = {0};
	ms_strbuf_str(&b, "{\"max_tokens\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"");
	for (int i = 0; i < CONTEXT; i++)
		ms_strbuf_str(&b, "word ");
	ms_strbuf_str(&b, "\"}]}");
	MSG_BAD(ms_strbuf_cstr(&b), "messages", "prompt is too long: ", "maximum");
	ms_strbuf_free(&b);
}
END_TEST

/* ==== the answer ==== */

static struct ms_api srv;

/* A job as job.c makes one, for the parsed request body. */
static struct ms_job *job_for(const char *body)
{
	struct ms_job *jb = test_job(&srv, MSG(body), "msg_");
	struct ms_err err = {0};
	ck_assert_int_eq(ms_stopper_init(&jb->ch[0].stop, jb->rq->stops, (size_t)jb->rq->n_stops,
					 false, &err), 0);
	ms_messages_begin(jb);
	return jb;
}

static void job_free(struct ms_job *jb)
{
	ms_messages_free(jb->msg);
	ms_stopper_free(&jb->ch[0].stop);
	test_job_free(jb);
}

static void feed(struct ms_job *jb, const char *script, enum ms_finish fin)
{
	feed_script(jb, &srv.hids, ms_messages_event, script, fin);
}

static const char *SCRIPT_CALL =
	"<|channel|>analysis<|message|>The user wants weather. Call it.<|end|><|start|>assistant"
	"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
	"{\"city\": \"Paris\"}<|call|>";
static const char *SCRIPT_FINAL =
	"<|channel|>analysis<|message|>Say hello.<|end|><|start|>assistant<|channel|>final"
	"<|message|>Hello, world! Bye.<|return|>";

/* The analysis a thinking block's signature carries. */
static void signed_as(const cJSON *blk, const char *want)
{
	struct ms_strbuf t = {0};
	ck_assert(ms_messages_unsign(sget(blk, "signature"), &t));
	ck_assert_str_eq(ms_strbuf_cstr(&t), want);
	ms_strbuf_free(&t);
}

START_TEST(blocks_in_order)
{
	char body[1024];
	snprintf(body, sizeof(body), "{\"max_tokens\": 99, \"thinking\": {\"type\": \"enabled\", "
		 "\"budget_tokens\": 2000}, %s, %s}", MSG_TOOLS, USER_HI);
	struct ms_job *jb = job_for(body);
	feed(jb, SCRIPT_CALL, MS_FINISH_STOP);
	cJSON *r = ms_messages_final(jb);
	ck_assert_str_eq(sget(r, "type"), "message");
	ck_assert_str_eq(sget(r, "role"), "assistant");
	ck_assert_str_eq(sget(r, "model"), "kjv");
	ck_assert(!strncmp(sget(r, "id"), "msg_", 4));
	ck_assert_str_eq(sget(r, "stop_reason"), "tool_use");
	ck_assert(cJSON_IsNull(get(r, "stop_sequence")));
	const cJSON *ct = get(r, "content"), *th = cJSON_GetArrayItem(ct, 0), *tu = cJSON_GetArrayItem(ct, 1);
	ck_assert_int_eq(cJSON_GetArraySize(ct), 2);
	ck_assert_str_eq(sget(th, "type"), "thinking");
	ck_assert_str_eq(sget(th, "thinking"), "The user wants weather. Call it.");
	signed_as(th, "The user wants weather. Call it.");
	ck_assert_str_eq(sget(tu, "type"), "tool_use");
	ck_assert(!strncmp(sget(tu, "id"), "toolu_", 6));
	ck_assert_str_eq(sget(tu, "name"), "get_weather");
	ck_assert_str_eq(sget(get(tu, "input"), "city"), "Paris");
	const cJSON *u = get(r, "usage");
	ck_assert_int_eq((int)nget(u, "input_tokens"), 40);
	ck_assert_int_eq((int)nget(u, "cache_read_input_tokens"), 10);
	ck_assert_int_eq((int)nget(u, "cache_creation_input_tokens"), 0);
	ck_assert_int_gt((int)nget(u, "output_tokens"), 10);
	cJSON_Delete(r);
	job_free(jb);
	/* thinking not asked for: the analysis is not shown */
	jb = job_for("{\"max_tokens\": 99, " USER_HI "}");
	feed(jb, SCRIPT_FINAL, MS_FINISH_STOP);
	r = ms_messages_final(jb);
	ct = get(r, "content");
	ck_assert_int_eq(cJSON_GetArraySize(ct), 1);
	ck_assert_str_eq(sget(cJSON_GetArrayItem(ct, 0), "type"), "text");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(ct, 0), "text"), "Hello, world! Bye.");
	ck_assert_str_eq(sget(r, "stop_reason"), "end_turn");
	cJSON_Delete(r);
	job_free(jb);
	/* omitted: "" shown, the signature carries it; cut off: max_tokens */
	jb = job_for("{\"max_tokens\": 99, \"thinking\": {\"type\": \"adaptive\", \"display\": "
		     "\"omitted\"}, " USER_HI "}");
	feed(jb, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
	     "<|message|>Hel", MS_FINISH_LENGTH);
	r = ms_messages_final(jb);
	ct = get(r, "content");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(ct, 0), "thinking"), "");
	signed_as(cJSON_GetArrayItem(ct, 0), "Think.");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(ct, 1), "text"), "Hel");
	ck_assert_str_eq(sget(r, "stop_reason"), "max_tokens");
	cJSON_Delete(r);
	job_free(jb);
	/* a stop sequence: the text before it, and which one */
	jb = job_for("{\"max_tokens\": 99, \"stop_sequences\": [\"zzz\", \"world\"], " USER_HI "}");
	feed(jb, SCRIPT_FINAL, MS_FINISH_STOP);
	r = ms_messages_final(jb);
	ck_assert_str_eq(sget(cJSON_GetArrayItem(get(r, "content"), 0), "text"), "Hello, ");
	ck_assert_str_eq(sget(r, "stop_reason"), "stop_sequence");
	ck_assert_str_eq(sget(r, "stop_sequence"), "world");
	cJSON_Delete(r);
	job_free(jb);
}
END_TEST

/* The tool_use ids: each answer draws its own. */
static void same_ids(cJSON *msg)
{
	cJSON *b;
	cJSON_ArrayForEach(b, cJSON_GetObjectItem(msg, "content"))
		if (cJSON_GetObjectItem(b, "id"))
			cJSON_ReplaceItemInObject(b, "id", cJSON_CreateString("toolu_x"));
}

/* The message the events build, as Anthropic's SDKs accumulate it. */
static cJSON *accumulate(const cJSON *evs, const char *id)
{
	int n = cJSON_GetArraySize(evs), k = 0;
	const cJSON *e = cJSON_GetArrayItem(evs, k++);
	ck_assert_str_eq(sget(e, "type"), "message_start");
	cJSON *msg = cJSON_Duplicate(get(e, "message"), true), *ct = cJSON_GetObjectItem(msg, "content");
	ck_assert_str_eq(sget(msg, "id"), id);
	ck_assert_int_eq(cJSON_GetArraySize(ct), 0);
	for (int i = 0; k < n && !strcmp(sget(cJSON_GetArrayItem(evs, k), "type"),
					 "content_block_start"); i++) {
		e = cJSON_GetArrayItem(evs, k++);
		ck_assert_int_eq((int)nget(e, "index"), i);
		cJSON *b = cJSON_Duplicate(get(e, "content_block"), true);
		const char *type = sget(b, "type");
		char acc[1024] = "", sig[1024] = "";
		for (; strcmp(sget(cJSON_GetArrayItem(evs, k), "type"), "content_block_stop"); k++) {
			e = cJSON_GetArrayItem(evs, k);
			ck_assert_str_eq(sget(e, "type"), "content_block_delta");
			ck_assert_int_eq((int)nget(e, "index"), i);
			const cJSON *d = get(e, "delta");
			const char *dt = sget(d, "type");
			if (!strcmp(dt, "signature_delta")) {
				ck_assert_str_eq(type, "thinking");
				ck_assert_msg(!sig[0], "two signatures");
				snprintf(sig, sizeof(sig), "%s", sget(d, "signature"));
				continue;
			}
			ck_assert_msg(!sig[0], "a delta after the signature");
			const char *key = !strcmp(type, "text") ? "text" : !strcmp(type, "thinking")
					  ? "thinking" : "partial_json";
			ck_assert_str_eq(dt, !strcmp(type, "text") ? "text_delta" : !strcmp(type, "thinking")
					 ? "thinking_delta" : "input_json_delta");
			strncat(acc, sget(d, key), sizeof(acc) - strlen(acc) - 1);
		}
		ck_assert_int_eq((int)nget(cJSON_GetArrayItem(evs, k++), "index"), i);
		if (!strcmp(type, "tool_use"))
			cJSON_ReplaceItemInObject(b, "input", cJSON_Parse(acc));
		else
			cJSON_ReplaceItemInObject(b, type, cJSON_CreateString(acc));
		if (!strcmp(type, "thinking")) {
			ck_assert_msg(sig[0], "a thinking block without its signature");
			cJSON_ReplaceItemInObject(b, "signature", cJSON_CreateString(sig));
		}
		cJSON_AddItemToArray(ct, b);
	}
	e = cJSON_GetArrayItem(evs, k++);
	ck_assert_str_eq(sget(e, "type"), "message_delta");
	cJSON_ReplaceItemInObject(msg, "stop_reason", cJSON_Duplicate(get(get(e, "delta"),
									  "stop_reason"), true));
	cJSON_ReplaceItemInObject(msg, "stop_sequence", cJSON_Duplicate(get(get(e, "delta"),
									    "stop_sequence"), true));
	cJSON_ReplaceItemInObject(msg, "usage", cJSON_Duplicate(get(e, "usage"), true));
	ck_assert_str_eq(sget(cJSON_GetArrayItem(evs, k++), "type"), "message_stop");
	ck_assert_int_eq(k, n);
	return msg;
}

START_TEST(stream_events)
{
	const char *scripts[] = {SCRIPT_CALL, SCRIPT_FINAL, SCRIPT_FINAL};
	const char *extra[] = {"", "", "\"stop_sequences\": [\"Bye\"], "};
	for (int s = 0; s < 3; s++) {
		char body[1024];
		snprintf(body, sizeof(body), "{\"max_tokens\": 99, \"stream\": true, %s\"thinking\": "
			 "{\"type\": \"enabled\", \"budget_tokens\": 2000}, %s, %s}", extra[s], MSG_TOOLS,
			 USER_HI);
		struct ms_job *jb = job_for(body);
		feed(jb, scripts[s], MS_FINISH_STOP);
		ms_messages_stream_end(jb);
		ck_assert(!jb->failed);
		char *sse = ms_strbuf_take(&jb->out);
		cJSON *evs = sse_events(sse, false);
		cJSON *streamed = accumulate(evs, jb->id);
		/* the same message as not streamed */
		struct ms_job *j2 = job_for(body);
		j2->rq->stream = false;
		feed(j2, scripts[s], MS_FINISH_STOP);
		cJSON *whole = ms_messages_final(j2);
		cJSON_ReplaceItemInObject(whole, "id", cJSON_CreateString(jb->id));
		same_ids(whole);
		same_ids(streamed);
		char *a = cJSON_Print(streamed), *b = cJSON_Print(whole);
		ck_assert_msg(cJSON_Compare(streamed, whole, true), "streamed\n%s\nnot streamed\n%s", a, b);
		free(a), free(b);
		cJSON_Delete(whole);
		job_free(j2);
		cJSON_Delete(streamed);
		cJSON_Delete(evs);
		free(sse);
		job_free(jb);
	}
}
END_TEST

/* ==== errors, signatures ==== */

START_TEST(error_envelope)
{
	static const struct {
		int status;
		const char *code, *type;
		int wire;
	} cases[] = {
		{400, NULL, "invalid_request_error", 400}, {401, NULL, "authentication_error", 401},
		{404, NULL, "not_found_error", 404}, {413, NULL, "request_too_large", 413},
		{429, NULL, "rate_limit_error", 429}, {500, NULL, "api_error", 500},
		{503, "kv_cache_exhausted", "overloaded_error", 529}, {503, NULL, "overloaded_error", 503},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct ms_api_reply r = {.dialect = MS_DIALECT_ANTHROPIC};
		ms_api_error_code(&r, cases[k].status, "server_error", "x", cases[k].code, "why");
		ck_assert_int_eq(r.status, cases[k].wire);
		cJSON *j = cJSON_Parse(r.text);
		ck_assert_str_eq(sget(j, "type"), "error");
		ck_assert_str_eq(sget(get(j, "error"), "type"), cases[k].type);
		ck_assert_str_eq(sget(get(j, "error"), "message"), "why");
		cJSON_Delete(j);
		free(r.text);
	}
	cJSON *j = cJSON_Parse(ms_answer_oom_body(MS_DIALECT_ANTHROPIC));
	ck_assert_str_eq(sget(get(j, "error"), "type"), "api_error");
	cJSON_Delete(j);
	ck_assert(!strncmp(ms_answer_oom_event(MS_DIALECT_ANTHROPIC), "event: error\ndata: {", 20));
	/* a body naming another model is the served one's */
	struct ms_api_reply r = {.dialect = MS_DIALECT_ANTHROPIC};
	cJSON *req;
	const char *body = "{\"model\": \"claude-haiku-4-5\"}";
	ck_assert(ms_api_body(&srv, body, strlen(body), &req, &r));
	cJSON_Delete(req);
	r = (struct ms_api_reply){0};
	ck_assert(!ms_api_body(&srv, body, strlen(body), &req, &r));
	ck_assert_int_eq(r.status, 404);
	free(r.text);
}
END_TEST

START_TEST(signatures)
{
	for (int len = 0; len < 70; len++) {
		char text[80];
		for (int i = 0; i < len; i++)
			text[i] = (char)(1 + (i * 37 + len * 11) % 255);
		text[len] = '\0';
		struct ms_strbuf sig = {0}, back = {0};
		ms_messages_sign(text, (size_t)len, &sig);
		ck_assert(ms_messages_unsign(ms_strbuf_cstr(&sig), &back));
		ck_assert_int_eq(back.len, len);
		ck_assert(!len || !memcmp(back.p, text, (size_t)len));
		/* cut or foreign: not ours, nothing taken */
		char *cut = strdup(ms_strbuf_cstr(&sig));
		if (len) {
			cut[strlen(cut) - 1] = '\0';
			ms_strbuf_reset(&back);
			ck_assert(!ms_messages_unsign(cut, &back));
			ck_assert_int_eq(back.len, 0);
		}
		free(cut);
		ms_strbuf_free(&sig);
		ms_strbuf_free(&back);
	}
	struct ms_strbuf b = {0};
	ck_assert(!ms_messages_unsign("EqQBCkYIBxgCKkBv", &b));
	ck_assert_int_eq(b.len, 0);
}
END_TEST

int main(void)
{
	if (reqtest_load("test-server-messages"))
		return 1;
	ms_json_init();
	struct ms_req_model m = model();
	srv.cfg.model_name = "kjv";
	srv.hids = m.hids;
	srv.tok = tok;
	srv.harmony = true;
	Suite *s = suite_create("server-messages");
	TCase *tr = tcase_create("request");
	tcase_add_test(tr, renders_as_chat);
	tcase_add_test(tr, thinking_to_effort);
	tcase_add_test(tr, claude_code_body);
	tcase_add_test(tr, fields);
	tcase_add_test(tr, count_tokens);
	tcase_add_test(tr, refusals);
	suite_add_tcase(s, tr);
	TCase *ta = tcase_create("answer");
	tcase_add_test(ta, blocks_in_order);
	tcase_add_test(ta, stream_events);
	tcase_add_test(ta, error_envelope);
	tcase_add_test(ta, signatures);
	suite_add_tcase(s, ta);
	int failed = ms_check_run(s);
	ms_tokenizer_free(tok);
	return failed ? 1 : 0;
}
