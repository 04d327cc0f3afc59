/*
 * test-server-responses.c: POST /v1/responses without a daemon.
 *
 * The request (server/api/responses-request.c): every kind of input item, the
 * instructions, flat and nested function tools, tool_choice none, a
 * stored conversation and reasoning effort render exactly the prompt the
 * equivalent chat request renders (the same ids); hosted tools are
 * ignored and named; the fields Codex sends are accepted; every refusal
 * names the Responses field.
 *
 * The answer (server/api/responses-answer.c): scripted harmony output (reasoning,
 * a function call, a final answer, a cut-off one) fed token by token as
 * the engine's events: the output items in the order generated, their
 * status, the usage's reasoning tokens; streamed, every event's "event:"
 * line equal to its type, sequence numbers from 0 without a gap, each
 * item's lifecycle in order, the deltas adding up to the final items and
 * the final event's response equal to the non-streamed one. The store:
 * what it keeps, least recently used evicted, deleted.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "api.h"
#include "ms-json.h"
#include "grammar-cache.h"
#include "request.h"
#include "responses-answer.h"
#include "responses-store.h"
#include "tokenizer.h"

#include "reqtest.h"

static int rsp_parse(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		     struct ms_req_error *e)
{
	return ms_req_responses(m, req, NULL, out, e);
}

#define RSP(json) accepted(rsp_parse, json)
#define RSP_BAD(json, param, ...) refused(rsp_parse, json, 400, param, NEEDLES(__VA_ARGS__))

static void same_prompt(struct ms_req_gen *a, struct ms_req_gen *b, const char *what)
{
	same_prompt_as(a, b, "responses", what);
}

/* ==== the request ==== */

START_TEST(renders_as_chat)
{
	same_prompt(RSP("{\"input\": \"Hello\"}"),
		    CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}"), "string");
	/* a reasoning item with nothing to render (only encrypted_content) */
	same_prompt(RSP("{\"input\": [{\"type\": \"reasoning\", \"summary\": [], "
			"\"encrypted_content\": \"gAAA\"}, {\"role\": \"user\", \"content\": "
			"\"Hello\"}]}"),
		    CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}"),
		    "an encrypted reasoning item");
	same_prompt(RSP("{\"instructions\": \"Be brief.\", \"reasoning\": {\"effort\": \"high\"},"
			"\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\","
			"\"text\": \"Weather \"}, {\"type\": \"input_text\", \"text\": \"in Paris?\"}]}]}"),
		    CHAT("{\"reasoning_effort\": \"high\", \"messages\": [{\"role\": \"developer\","
			 "\"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Weather in "
			 "Paris?\"}]}"), "instructions, parts, effort");
	/* a tool-calling turn sent back: reasoning, two calls in a row, their outputs */
	const char *tools_flat = "\"tools\": [{\"type\": \"function\", \"name\": \"get_weather\","
				 "\"description\": \"Current weather\", \"parameters\": {\"type\": "
				 "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}},"
				 "\"strict\": true}, {\"type\": \"web_search\"}]";
	const char *tools_chat = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
				 "\"get_weather\", \"description\": \"Current weather\", \"parameters\": "
				 "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
				 "\"string\"}}}}}]";
	char rb[4096], cb[4096];
	snprintf(rb, sizeof(rb), "{%s, \"input\": [{\"type\": \"message\", \"role\": \"user\", "
		 "\"content\": \"Paris and Rome?\"}, {\"type\": \"reasoning\", \"summary\": [], "
		 "\"content\": [{\"type\": \"reasoning_text\", \"text\": \"Two cities.\"}]}, "
		 "{\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"get_weather\", "
		 "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}, {\"type\": \"function_call\", "
		 "\"call_id\": \"c2\", \"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
		 "\\\"Rome\\\"}\"}, {\"type\": \"function_call_output\", \"call_id\": \"c1\", "
		 "\"output\": \"21 C\"}, {\"type\": \"function_call_output\", \"call_id\": \"c2\", "
		 "\"output\": [{\"type\": \"input_text\", \"text\": \"25 C\"}]}, "
		 "{\"type\": \"web_search_call\", \"id\": \"ws_1\", \"status\": \"completed\"}]}",
		 tools_flat);
	snprintf(cb, sizeof(cb), "{%s, \"messages\": [{\"role\": \"user\", \"content\": \"Paris and "
		 "Rome?\"}, {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": "
		 "\"Two cities.\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", "
		 "\"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
		 "\\\"Paris\\\"}\"}}, {\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": "
		 "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}}]}, {\"role\": "
		 "\"tool\", \"tool_call_id\": \"c1\", \"content\": \"21 C\"}, {\"role\": \"tool\", "
		 "\"tool_call_id\": \"c2\", \"content\": \"25 C\"}]}", tools_chat);
	struct ms_req_gen *r = RSP(rb);
	ck_assert_str_eq(r->ignored_tool, "web_search");
	char *txt = prompt_text(r, 0);
	ck_assert_msg(strstr(txt, "Two cities."), "the tool-calling turn's reasoning is kept: %s", txt);
	free(txt);
	same_prompt(r, CHAT(cb), "a tool-calling turn");
	/* tool_choice none: no tools rendered */
	snprintf(rb, sizeof(rb), "{%s, \"tool_choice\": \"none\", \"input\": \"Hi\"}", tools_flat);
	same_prompt(RSP(rb), CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}"),
		    "tool_choice none");
	/* nested tools as chat's, tool_choice named */
	snprintf(rb, sizeof(rb), "{%s, \"tool_choice\": {\"type\": \"function\", \"name\": "
		 "\"get_weather\"}, \"input\": \"Hi\"}", tools_chat);
	snprintf(cb, sizeof(cb), "{%s, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
		 tools_chat);
	same_prompt(RSP(rb), CHAT(cb), "nested tools");
	/* text.format as response_format: the schema in the developer message */
	struct ms_req_gen *r2 = RSP("{\"input\": \"Hi\", \"text\": {\"format\": {\"type\": "
				   "\"json_schema\", \"name\": \"pt\", \"description\": \"a point\", "
				   "\"strict\": true, \"schema\": {\"type\": \"object\"}}}}");
	char *t2 = prompt_text(r2, 0);
	ck_assert_msg(strstr(t2, "# Response Formats\n\n## pt\n\n// a point\n{\"type\":\"object\"}"
			      "<|end|>"), "%s", t2);
	ck_assert_ptr_nonnull(r2->params.constraint);
	free(t2);
	same_prompt(r2, CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
			     "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": "
			     "\"pt\", \"description\": \"a point\", \"schema\": {\"type\": \"object\"}}}}"),
		    "text.format");
}
END_TEST

/* previous_response_id's stored items come before this turn's input. */
START_TEST(continues_a_conversation)
{
	struct ms_req_model m = model();
	cJSON *prev = cJSON_Parse("[{\"type\": \"message\", \"role\": \"user\", \"content\": "
				  "[{\"type\": \"input_text\", \"text\": \"Hi\"}]}, {\"id\": \"rs_1\", "
				  "\"type\": \"reasoning\", \"summary\": [], \"content\": [{\"type\": "
				  "\"reasoning_text\", \"text\": \"Greet back.\"}]}, {\"id\": \"msg_1\", "
				  "\"type\": \"message\", \"role\": \"assistant\", \"status\": "
				  "\"completed\", \"content\": [{\"type\": \"output_text\", \"text\": "
				  "\"Hello!\", \"annotations\": []}]}]");
	const char *body = "{\"input\": \"And now?\", \"previous_response_id\": \"resp_1\"}";
	cJSON *req;
	struct ms_req_gen *r;
	struct ms_req_error e = {0};
	ck_assert_int_eq(ms_req_body(&m, body, strlen(body), &req, &e), 0);
	ck_assert_msg(ms_req_responses(&m, req, prev, &r, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(cJSON_GetArraySize(r->items), 4);
	/* after a final answer the reasoning is dropped, as the template does */
	same_prompt(r, CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": "
			    "\"assistant\", \"content\": \"Hello!\", \"reasoning_content\": \"Greet "
			    "back.\"}, {\"role\": \"user\", \"content\": \"And now?\"}]}"), "continued");
	cJSON_Delete(prev);
}
END_TEST

START_TEST(fields)
{
	struct ms_req_gen *r = RSP("{\"model\": \"kjv\", \"input\": \"x\", \"max_output_tokens\": 77, "
				   "\"temperature\": 0.5, \"top_p\": 0.9, \"stream\": true, \"store\": "
				   "false, \"include\": [\"reasoning.encrypted_content\"], "
				   "\"prompt_cache_key\": \"k\", \"service_tier\": \"auto\", "
				   "\"truncation\": \"disabled\", \"client_metadata\": {\"a\": 1}, "
				   "\"metadata\": {\"b\": \"c\"}, \"user\": \"u\", "
				   "\"parallel_tool_calls\": false, \"text\": {\"format\": {\"type\": "
				   "\"text\"}}, \"reasoning\": {\"effort\": \"minimal\", \"summary\": "
				   "\"auto\"}}");
	ck_assert(r->responses && r->chat && r->stream && !r->store);
	ck_assert_int_eq(r->params.max_tokens, 77);
	ck_assert_float_eq(r->params.sampling.temperature, 0.5f);
	ck_assert_float_eq(r->params.sampling.top_p, 0.9f);
	char *txt = prompt_text(r, 0);
	ck_assert_msg(strstr(txt, "Reasoning: low"), "minimal effort is harmony's low: %s", txt);
	free(txt);
	ms_req_gen_free(r);
	r = RSP("{\"input\": [], \"instructions\": \"Be brief.\"}");
	ck_assert(r->store && !r->stream);
	ck_assert_int_eq(r->params.max_tokens, CONTEXT - r->n_prompt[0]);
	ms_req_gen_free(r);
}
END_TEST

START_TEST(refusals)
{
	RSP_BAD("{}", "input", "\"input\"");
	RSP_BAD("{\"input\": 3}", "input", "\"input\" must be");
	RSP_BAD("{\"input\": []}", "input", "no message");
	RSP_BAD("{\"input\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "input[0].role",
		"Invalid value for 'input[0].role'", "(got \"robot\")");
	RSP_BAD("{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", "
		"\"image_url\": \"x\"}]}]}", "input[0].content[0].type", "input_image",
		"not supported by this model");
	RSP_BAD("{\"input\": [{\"type\": \"function_call\", \"name\": \"f\"}]}", "input[0].call_id",
		"Missing required parameter: 'input[0].call_id'");
	RSP_BAD("{\"input\": [{\"type\": \"function_call_output\", \"output\": \"x\"}]}",
		"input[0].call_id", "Missing");
	RSP_BAD("{\"input\": \"x\", \"instructions\": 4}", "instructions", "string");
	RSP_BAD("{\"input\": \"x\", \"tools\": {}}", "tools", "list");
	RSP_BAD("{\"input\": \"x\", \"tools\": [{\"type\": \"function\"}]}", "tools[0].name",
		"Missing required parameter: 'tools[0].name'");
	RSP_BAD("{\"input\": \"x\", \"tool_choice\": \"always\"}", "tool_choice", "\"auto\"");
	RSP_BAD("{\"input\": \"x\", \"tool_choice\": {\"type\": \"function\", \"name\": \"nope\"}}",
		"tool_choice", "\"nope\"");
	RSP_BAD("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\"}}}",
		"text.format.schema", "json_schema");
	RSP_BAD("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"yaml\"}}}",
		"text.format", "json_object");
	RSP_BAD("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"n\", "
		"\"schema\": {\"type\": \"object\", \"not\": {}}}}}", "text.format.schema", "\"not\" at /");
	RSP_BAD("{\"input\": \"x\", \"reasoning\": {\"effort\": \"extreme\"}}", "reasoning.effort",
		"extreme");
	RSP_BAD("{\"input\": \"x\", \"max_output_tokens\": 0}", "max_output_tokens", ">= 1");
	RSP_BAD("{\"input\": \"x\", \"store\": \"yes\"}", "store", "true or false");
	RSP_BAD("{\"input\": \"x\", \"previous_response_id\": 5}", "previous_response_id", "string");
	RSP_BAD("{\"input\": \"x\", \"temperature\": -1}", "temperature", "temperature");
}
END_TEST

/* Every item field by its path under input (after previous_response_id's
 * items, input's own index), the code as OpenAI's; the valid neighbour
 * accepted. */
START_TEST(item_rules)
{
	static const struct {
		const char *input, *param, *needle;
	} bad[] = {
		{"[5]", "input[0]", "expected an object"},
		{"[{\"type\": 5}]", "input[0].type", "(got 5)"},
		{"[{\"type\": \"message\", \"content\": \"x\"}]", "input[0].role", "Missing"},
		{"[{\"role\": 1, \"content\": \"x\"}]", "input[0].role", "(got 1)"},
		{"[{\"role\": \"user\"}]", "input[0].content", "Missing"},
		{"[{\"role\": \"user\", \"content\": null}]", "input[0].content", "Missing"},
		{"[{\"role\": \"user\", \"content\": 5}]", "input[0].content", "(got 5)"},
		{"[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": [{\"type\": "
		 "\"input_text\", \"text\": \"a\"}, {\"type\": \"input_text\", \"text\": 5}]}]",
		 "input[1].content[1].text", "(got 5)"},
		{"[{\"role\": \"user\", \"content\": [{\"text\": \"a\"}]}]", "input[0].content[0].type",
		 "Missing"},
		{"[{\"role\": \"user\", \"content\": [\"a\"]}]", "input[0].content[0]", "an object"},
		{"[{\"role\": \"user\", \"content\": [{\"type\": \"input_file\"}]}]",
		 "input[0].content[0].type", "not supported by this model"},
		{"[{\"role\": \"user\", \"content\": [{\"type\": \"banana\", \"text\": \"a\"}]}]",
		 "input[0].content[0].type", "supported values"},
		{"[{\"role\": \"assistant\", \"content\": [{\"type\": \"refusal\"}]}]",
		 "input[0].content[0].refusal", "Missing"},
		{"[{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"f\"}]", "input[0].arguments",
		 "Missing"},
		{"[{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"f\", \"arguments\": {}}]",
		 "input[0].arguments", "(got an object)"},
		{"[{\"type\": \"function_call\", \"call_id\": 3, \"name\": \"f\", \"arguments\": \"{}\"}]",
		 "input[0].call_id", "(got 3)"},
		{"[{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": [], \"arguments\": \"{}\"}]",
		 "input[0].name", "(got a list of 0)"},
		{"[{\"type\": \"function_call_output\", \"call_id\": \"c\"}]", "input[0].output", "Missing"},
		{"[{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": 5}]", "input[0].output",
		 "(got 5)"},
		{"[{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": [{\"type\": "
		 "\"input_image\"}]}]", "input[0].output[0].type", "not supported"},
		{"[{\"type\": \"reasoning\", \"summary\": 5}]", "input[0].summary", "(got 5)"},
		{"[{\"type\": \"reasoning\", \"summary\": [], \"content\": [{\"type\": \"reasoning_text\", "
		 "\"text\": 1}]}]", "input[0].content[0].text", "(got 1)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char json[1024];
		snprintf(json, sizeof(json), "{\"input\": %s}", bad[i].input);
		RSP_BAD(json, bad[i].param, bad[i].needle, bad[i].param);
	}
	/* the neighbours: every item kind well formed, extra fields as Codex
	 * sends them, a hosted tool's call skipped */
	ms_req_gen_free(RSP("{\"input\": [{\"type\": \"message\", \"role\": \"user\", \"id\": \"m1\", "
			    "\"content\": [{\"type\": \"input_text\", \"text\": \"a\"}]}, {\"type\": "
			    "\"reasoning\", \"id\": \"rs\", \"summary\": [{\"type\": \"summary_text\", "
			    "\"text\": \"s\"}], \"encrypted_content\": null}, {\"type\": \"function_call\", "
			    "\"id\": \"fc\", \"status\": \"completed\", \"call_id\": \"c\", \"name\": \"f\", "
			    "\"arguments\": \"{}\"}, {\"type\": \"function_call_output\", \"call_id\": \"c\", "
			    "\"output\": \"ok\"}, {\"type\": \"web_search_call\", \"id\": \"w\"}, "
			    "{\"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": "
			    "\"b\", \"annotations\": []}, {\"type\": \"refusal\", \"refusal\": \"r\"}]}, "
			    "{\"role\": \"user\", \"content\": \"c\"}]}"));
	/* after previous_response_id's items the index is input's own */
	struct ms_req_model m = model();
	cJSON *prev = cJSON_Parse("[{\"type\": \"message\", \"role\": \"user\", \"content\": \"Hi\"}]");
	const char *body = "{\"input\": [{\"role\": \"user\", \"content\": 7}]}";
	cJSON *req;
	struct ms_req_gen *r;
	struct ms_req_error e = {0};
	ck_assert_int_eq(ms_req_body(&m, body, strlen(body), &req, &e), 0);
	ck_assert_int_eq(ms_req_responses(&m, req, prev, &r, &e), -EINVAL);
	ck_assert_str_eq(e.param, "input[0].content");
	ck_assert_str_eq(e.code, "invalid_type");
	cJSON_Delete(prev);
}
END_TEST

/* Tools: function tools flat or nested, checked as chat's; the API's
 * hosted tools ignored; other types refused. */
START_TEST(tool_rules)
{
	static const struct {
		const char *tools, *param, *needle;
	} bad[] = {
		{"[5]", "tools[0]", "an object"},
		{"[{\"name\": \"f\"}]", "tools[0].type", "Missing"},
		{"[{\"type\": \"banana\"}]", "tools[0].type", "(got \"banana\")"},
		{"[{\"type\": 3}]", "tools[0].type", "(got 3)"},
		{"[{\"type\": \"function\", \"name\": \"a b\"}]", "tools[0].name", "^[a-zA-Z0-9_-]{1,64}$"},
		{"[{\"type\": \"web_search\"}, {\"type\": \"function\", \"name\": \"f\", \"parameters\": "
		 "\"x\"}]", "tools[1].parameters", "Invalid schema for function 'f'"},
		{"[{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"type\": \"object\", "
		 "\"properties\": {\"a\": 5}}}]", "tools[0].parameters.properties.a", "(got 5)"},
		{"[{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"required\": \"a\"}}]",
		 "tools[0].parameters.required", "(got \"a\")"},
		{"[{\"type\": \"function\", \"name\": \"f\", \"strict\": 1}]", "tools[0].strict", "(got 1)"},
		{"[{\"type\": \"function\", \"name\": \"f\", \"description\": []}]", "tools[0].description",
		 "a string"},
		{"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": []}}]",
		 "tools[0].function.parameters", "(got a list of 0)"},
		{"[{\"type\": \"function\", \"function\": 5}]", "tools[0].function", "an object"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char json[1024];
		snprintf(json, sizeof(json), "{\"input\": \"x\", \"tools\": %s}", bad[i].tools);
		RSP_BAD(json, bad[i].param, bad[i].needle, bad[i].param);
	}
	struct ms_req_gen *r = RSP("{\"input\": \"x\", \"tools\": [{\"type\": \"custom\", \"name\": "
				   "\"apply_patch\"}, {\"type\": \"local_shell\"}, {\"type\": "
				   "\"web_search_preview\"}, {\"type\": \"function\", \"name\": \"f\", "
				   "\"strict\": false, \"parameters\": {\"type\": \"object\", "
				   "\"properties\": {\"a\": {\"type\": \"string\"}}, \"required\": [\"a\"], "
				   "\"additionalProperties\": false}}]}");
	ck_assert_str_eq(r->ignored_tool, "custom");
	char *txt = prompt_text(r, 0);
	ck_assert_msg(strstr(txt, "type f = "), "the function tool is rendered: %s", txt);
	free(txt);
	ms_req_gen_free(r);
}
END_TEST

/* ==== the answer ==== */

static struct ms_api srv;

/* A job as job.c makes one, for the parsed request body. */
static struct ms_job *job_for(const char *body)
{
	return test_job(&srv, RSP(body), "resp_");
}

static void job_free(struct ms_job *jb)
{
	ms_responses_free(jb->rsp);
	test_job_free(jb);
}

static void feed(struct ms_job *jb, const char *script, enum ms_finish fin)
{
	feed_script(jb, &srv.hids, ms_responses_event, script, fin);
}

static size_t n_tokens(const char *text)
{
	int32_t *ids;
	size_t n = encode(text, &ids);
	free(ids);
	return n;
}

/* Item i's text: a message's or reasoning's content[0].text, a call's
 * arguments. */
static const char *item_text(const cJSON *out, int i)
{
	const cJSON *it = cJSON_GetArrayItem(out, i);
	if (!strcmp(sget(it, "type"), "function_call"))
		return sget(it, "arguments");
	return sget(cJSON_GetArrayItem(get(it, "content"), 0), "text");
}

static const char *SCRIPT_CALL =
	"<|channel|>analysis<|message|>The user wants weather. Call it.<|end|><|start|>assistant"
	"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
	"{\"city\": \"Paris\"}<|call|>";
static const char *SCRIPT_FINAL =
	"<|channel|>analysis<|message|>Say hello.<|end|><|start|>assistant<|channel|>final"
	"<|message|>Hello, world!<|return|>";
static const char *TOOLS = "\"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", "
			   "\"parameters\": {\"type\": \"object\"}}]";

START_TEST(items_in_order)
{
	char body[512];
	snprintf(body, sizeof(body), "{\"input\": \"Weather?\", \"instructions\": \"x\", %s}", TOOLS);
	struct ms_job *jb = job_for(body);
	feed(jb, SCRIPT_CALL, MS_FINISH_STOP);
	cJSON *r = ms_responses_final(jb);
	ck_assert_str_eq(sget(r, "object"), "response");
	ck_assert_str_eq(sget(r, "status"), "completed");
	ck_assert_str_eq(sget(r, "instructions"), "x");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(get(r, "tools"), 0), "name"), "get_weather");
	const cJSON *out = get(r, "output");
	ck_assert_int_eq(cJSON_GetArraySize(out), 2);
	const cJSON *rs = cJSON_GetArrayItem(out, 0), *fc = cJSON_GetArrayItem(out, 1);
	ck_assert_str_eq(sget(rs, "type"), "reasoning");
	ck_assert(!strncmp(sget(rs, "id"), "rs_", 3));
	ck_assert_str_eq(item_text(out, 0), "The user wants weather. Call it.");
	ck_assert_str_eq(sget(fc, "type"), "function_call");
	ck_assert_str_eq(sget(fc, "name"), "get_weather");
	ck_assert(!strncmp(sget(fc, "call_id"), "call_", 5) && !strncmp(sget(fc, "id"), "fc_", 3));
	ck_assert_str_eq(sget(fc, "arguments"), "{\"city\": \"Paris\"}");
	ck_assert_str_eq(sget(fc, "status"), "completed");
	const cJSON *u = get(r, "usage");
	ck_assert_int_eq((int)nget(u, "input_tokens"), 50);
	ck_assert_int_eq((int)nget(get(u, "input_tokens_details"), "cached_tokens"), 10);
	ck_assert_int_eq((int)nget(get(u, "output_tokens_details"), "reasoning_tokens"),
			 (int)n_tokens("The user wants weather. Call it."));
	ck_assert_int_eq((int)nget(u, "total_tokens"), 50 + (int)nget(u, "output_tokens"));
	cJSON_Delete(r);
	job_free(jb);
	/* a final answer after reasoning; then one cut off by max_output_tokens */
	jb = job_for("{\"input\": \"Hi\"}");
	feed(jb, SCRIPT_FINAL, MS_FINISH_STOP);
	r = ms_responses_final(jb);
	out = get(r, "output");
	ck_assert_int_eq(cJSON_GetArraySize(out), 2);
	ck_assert_str_eq(sget(cJSON_GetArrayItem(out, 1), "type"), "message");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(out, 1), "role"), "assistant");
	ck_assert_str_eq(item_text(out, 1), "Hello, world!");
	ck_assert(cJSON_IsNull(get(r, "incomplete_details")) && cJSON_IsNull(get(r, "error")));
	cJSON_Delete(r);
	job_free(jb);
	jb = job_for("{\"input\": \"Hi\", \"max_output_tokens\": 9}");
	feed(jb, "<|channel|>final<|message|>Hello, wor", MS_FINISH_LENGTH);
	r = ms_responses_final(jb);
	ck_assert_str_eq(sget(r, "status"), "incomplete");
	ck_assert_str_eq(sget(get(r, "incomplete_details"), "reason"), "max_output_tokens");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(get(r, "output"), 0), "status"), "incomplete");
	ck_assert_int_eq((int)nget(r, "max_output_tokens"), 9);
	cJSON_Delete(r);
	job_free(jb);
}
END_TEST

/* Each item's events in order; their deltas add up to the final items. */
static void check_lifecycle(const cJSON *evs, const cJSON *out)
{
	int n = cJSON_GetArraySize(evs), k = 0;
	ck_assert_str_eq(sget(cJSON_GetArrayItem(evs, k++), "type"), "response.created");
	ck_assert_str_eq(sget(cJSON_GetArrayItem(evs, k++), "type"), "response.in_progress");
	for (int i = 0; i < cJSON_GetArraySize(out); i++) {
		const cJSON *want = cJSON_GetArrayItem(out, i), *e = cJSON_GetArrayItem(evs, k++);
		const char *type = sget(want, "type");
		bool call = !strcmp(type, "function_call"), rs = !strcmp(type, "reasoning");
		ck_assert_str_eq(sget(e, "type"), "response.output_item.added");
		ck_assert_int_eq((int)nget(e, "output_index"), i);
		ck_assert_str_eq(sget(get(e, "item"), "id"), sget(want, "id"));
		ck_assert_str_eq(sget(get(e, "item"), "status"), "in_progress");
		if (!call)
			ck_assert_str_eq(sget(cJSON_GetArrayItem(evs, k++), "type"),
					 "response.content_part.added");
		const char *dt = call ? "response.function_call_arguments.delta" : rs
			? "response.reasoning_text.delta" : "response.output_text.delta";
		char acc[1024] = "";
		while (k < n && !strcmp(sget(cJSON_GetArrayItem(evs, k), "type"), dt)) {
			e = cJSON_GetArrayItem(evs, k++);
			ck_assert_str_eq(sget(e, "item_id"), sget(want, "id"));
			strncat(acc, sget(e, "delta"), sizeof(acc) - strlen(acc) - 1);
		}
		ck_assert_str_eq(acc, item_text(out, i));
		const char *done = call ? "response.function_call_arguments.done" : rs
			? "response.reasoning_text.done" : "response.output_text.done";
		e = cJSON_GetArrayItem(evs, k++);
		ck_assert_str_eq(sget(e, "type"), done);
		ck_assert_str_eq(sget(e, call ? "arguments" : "text"), acc);
		if (!call)
			ck_assert_str_eq(sget(cJSON_GetArrayItem(evs, k++), "type"),
					 "response.content_part.done");
		e = cJSON_GetArrayItem(evs, k++);
		ck_assert_str_eq(sget(e, "type"), "response.output_item.done");
		ck_assert(cJSON_Compare(get(e, "item"), want, true));
	}
	ck_assert_int_eq(k, n - 1);
}

START_TEST(stream_events)
{
	const char *scripts[] = {SCRIPT_CALL, SCRIPT_FINAL};
	for (int s = 0; s < 2; s++) {
		char body[512];
		snprintf(body, sizeof(body), "{\"input\": \"Weather?\", \"stream\": true, %s}", TOOLS);
		struct ms_job *jb = job_for(body);
		feed(jb, scripts[s], MS_FINISH_STOP);
		ms_responses_stream_end(jb);
		ck_assert(!jb->failed);
		char *sse = ms_strbuf_take(&jb->out);
		cJSON *evs = sse_events(sse, true);
		const cJSON *last = cJSON_GetArrayItem(evs, cJSON_GetArraySize(evs) - 1);
		ck_assert_str_eq(sget(last, "type"), "response.completed");
		const cJSON *resp = get(last, "response");
		ck_assert_str_eq(sget(resp, "status"), "completed");
		ck_assert_str_eq(sget(resp, "id"), jb->id);
		check_lifecycle(evs, get(resp, "output"));
		/* the same output as the answer not streamed */
		struct ms_job *j2 = job_for(body);
		j2->rq->stream = false;
		feed(j2, scripts[s], MS_FINISH_STOP);
		cJSON *r2 = ms_responses_final(j2);
		const cJSON *o1 = get(resp, "output"), *o2 = get(r2, "output");
		ck_assert_int_eq(cJSON_GetArraySize(o1), cJSON_GetArraySize(o2));
		for (int i = 0; i < cJSON_GetArraySize(o1); i++)
			ck_assert_str_eq(item_text(o1, i), item_text(o2, i));
		cJSON_Delete(r2);
		job_free(j2);
		cJSON_Delete(evs);
		free(sse);
		job_free(jb);
	}
}
END_TEST

START_TEST(stored_and_evicted)
{
	ms_responses_store_free(&srv.rstore);
	ms_responses_store_init(&srv.rstore, 2);
	char ids[3][64];
	for (int i = 0; i < 3; i++) {
		struct ms_job *jb = job_for(i == 2 ? "{\"input\": \"Hi\", \"store\": false}"
					    : "{\"input\": \"Hi\"}");
		feed(jb, SCRIPT_FINAL, MS_FINISH_STOP);
		cJSON_Delete(ms_responses_final(jb));
		snprintf(ids[i], sizeof(ids[i]), "%s", jb->id);
		job_free(jb);
	}
	cJSON *resp, *items;
	ck_assert(!ms_responses_store_get(&srv.rstore, ids[2], NULL, NULL)); /* store: false */
	ck_assert(ms_responses_store_get(&srv.rstore, ids[0], &resp, &items));
	ck_assert_str_eq(sget(resp, "id"), ids[0]);
	/* the conversation: the input, then the output's reasoning and message */
	ck_assert_int_eq(cJSON_GetArraySize(items), 3);
	ck_assert_str_eq(sget(cJSON_GetArrayItem(items, 2), "type"), "message");
	cJSON_Delete(resp), cJSON_Delete(items);
	/* ids[0] was used last: a third stored evicts ids[1] */
	struct ms_job *jb = job_for("{\"input\": \"Hi\"}");
	feed(jb, SCRIPT_FINAL, MS_FINISH_STOP);
	cJSON_Delete(ms_responses_final(jb));
	ck_assert(ms_responses_store_get(&srv.rstore, jb->id, NULL, NULL));
	ck_assert(ms_responses_store_get(&srv.rstore, ids[0], NULL, NULL));
	ck_assert(!ms_responses_store_get(&srv.rstore, ids[1], NULL, NULL));
	ck_assert(ms_responses_store_delete(&srv.rstore, ids[0]));
	ck_assert(!ms_responses_store_delete(&srv.rstore, ids[0]));
	ck_assert(!ms_responses_store_get(&srv.rstore, ids[0], NULL, NULL));
	job_free(jb);
}
END_TEST

int main(void)
{
	if (reqtest_load("test-server-responses"))
		return 1;
	ms_json_init();
	struct ms_req_model m = model();
	srv.cfg.model_name = "kjv";
	srv.hids = m.hids;
	ms_responses_store_init(&srv.rstore, 100);
	Suite *s = suite_create("server-responses");
	TCase *tr = tcase_create("request");
	tcase_add_test(tr, renders_as_chat);
	tcase_add_test(tr, continues_a_conversation);
	tcase_add_test(tr, fields);
	tcase_add_test(tr, refusals);
	tcase_add_test(tr, item_rules);
	tcase_add_test(tr, tool_rules);
	suite_add_tcase(s, tr);
	TCase *ta = tcase_create("answer");
	tcase_add_test(ta, items_in_order);
	tcase_add_test(ta, stream_events);
	tcase_add_test(ta, stored_and_evicted);
	suite_add_tcase(s, ta);
	int failed = ms_check_run(s);
	ms_responses_store_free(&srv.rstore);
	ms_tokenizer_free(tok);
	return failed ? 1 : 0;
}
