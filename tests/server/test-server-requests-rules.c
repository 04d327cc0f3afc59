/*
 * test-server-requests-rules.c: chat requests validated field by field,
 * each refusal naming the field by its JSON path with OpenAI's error code
 * and the valid neighbour of each taken (messages' roles, contents, tool
 * calls; tools and their parameters), as test-server-requests' main runs
 * them (test-server-requests.h).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "tokenizer.h"

#include "reqtest.h"
#include "test-server-requests.h"

/* ==== validated requests: each field by its JSON path ==== */

#define MSG(role, rest) "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"" role "\"" rest "}]}"

/* json refused with param and the OpenAI error code. */
static void refused_code(parse_fn fn, const char *json, const char *param, const char *code,
			 const char *needle)
{
	struct ms_req_model m = model();
	struct ms_req_gen *r;
	struct ms_req_error e = {0};
	int rc = parse_with(&m, fn, json, &r, &e);
	ck_assert_msg(rc == -EINVAL && !r, "%s: accepted", json);
	ck_assert_msg(e.status == 400 && e.param && !strcmp(e.param, param), "%s: %d param %s, want %s (%s)",
		      json, e.status, e.param ? e.param : "null", param, e.msg);
	ck_assert_msg(e.code && !strcmp(e.code, code), "%s: code %s, want %s", json,
		      e.code ? e.code : "null", code);
	ck_assert_msg(strstr(e.msg, needle), "%s: \"%s\" lacks \"%s\"", json, e.msg, needle);
	ck_assert_msg(strstr(e.msg, param), "%s: \"%s\" does not name %s", json, e.msg, param);
}

#define CHAT_CODE(json, param, code, needle) refused_code(ms_req_chat, json, param, code, needle)

/* The cases, each refused by its path; the valid neighbour taken. */
START_TEST(chat_message_rules)
{
	/* user, system, developer: content required, a string or text parts */
	CHAT_CODE("{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content",
		  "missing_required_parameter", "Missing required parameter");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": null}]}", "messages[0].content",
		  "invalid_type", "(got null)");
	CHAT_CODE("{\"messages\": [{\"role\": \"system\", \"content\": null}, {\"role\": \"user\", "
		  "\"content\": \"a\"}]}", "messages[0].content", "invalid_type", "(got null)");
	CHAT_CODE("{\"messages\": [{\"role\": \"developer\"}]}", "messages[0].content",
		  "missing_required_parameter", "'messages[0].content'");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content",
		  "invalid_type", "expected a string or a list of content parts (got 5)");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": []}]}", "messages[0].content",
		  "invalid_value", "non-empty");
	ms_req_gen_free(CHAT("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": "
			     "\"developer\", \"content\": [{\"type\": \"text\", \"text\": \"d\"}]}, "
			     "{\"role\": \"user\", \"content\": \"\"}]}"));
	/* roles: the API's five and the deprecated "function" */
	CHAT_CODE("{\"messages\": [{\"content\": \"no role\"}]}", "messages[0].role",
		  "missing_required_parameter", "Missing required parameter: 'messages[0].role'.");
	CHAT_CODE("{\"messages\": [{\"role\": 5}]}", "messages[0].role", "invalid_type", "(got 5)");
	CHAT_CODE("{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}", "messages[0].role",
		  "invalid_value", "\"developer\"");
	CHAT_CODE(MSG("user", ", \"content\": \"b\", \"name\": 3"), "messages[1].name", "invalid_type",
		  "(got 3)");
	/* parts: objects with a type; media the model cannot read refused by name */
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [\"a\"]}]}", "messages[0].content[0]",
		  "invalid_type", "expected an object");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"a\"}]}]}",
		  "messages[0].content[0].type", "missing_required_parameter", "Missing");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
		  "{\"type\": \"image_url\", \"image_url\": {\"url\": \"http://x\"}}]}]}",
		  "messages[0].content[1].type", "invalid_value", "not supported by this model");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_audio\"}]}]}",
		  "messages[0].content[0].type", "invalid_value", "not supported by this model");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\"}]}]}",
		  "messages[0].content[0].type", "invalid_value", "supported values are \"text\"");
	CHAT_CODE("{\"messages\": [{\"role\": \"system\", \"content\": [{\"type\": \"refusal\", "
		  "\"refusal\": \"no\"}]}]}", "messages[0].content[0].type", "invalid_value", "\"text\"");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 5}]}]}",
		  "messages[0].content[0].text", "invalid_type", "(got 5)");
	CHAT_CODE("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
		  "messages[0].content[0].text", "missing_required_parameter", "Missing");
	/* assistant: content may be null or absent with tool calls, a refusal
	 * or reasoning, and holds text and refusal parts */
	CHAT_CODE(MSG("assistant", ""), "messages[1].content", "missing_required_parameter", "Missing");
	CHAT_CODE(MSG("assistant", ", \"content\": null"), "messages[1].content", "invalid_type",
		  "null only with \"tool_calls\"");
	CHAT_CODE(MSG("assistant", ", \"content\": null, \"tool_calls\": \"x\""), "messages[1].tool_calls",
		  "invalid_type", "(got \"x\")");
	CHAT_CODE(MSG("assistant", ", \"tool_calls\": [5]"), "messages[1].tool_calls[0]", "invalid_type",
		  "expected an object");
	CHAT_CODE(MSG("assistant", ", \"tool_calls\": [{\"id\": 1, \"function\": {\"name\": \"f\"}}]"),
		  "messages[1].tool_calls[0].id", "invalid_type", "(got 1)");
	CHAT_CODE(MSG("assistant", ", \"tool_calls\": [{\"type\": \"custom\", \"function\": {\"name\": \"f\"}}]"),
		  "messages[1].tool_calls[0].type", "invalid_value", "\"function\"");
	CHAT_CODE(MSG("assistant", ", \"tool_calls\": [{\"id\": \"c\", \"type\": \"function\"}]"),
		  "messages[1].tool_calls[0].function", "missing_required_parameter", "Missing");
	CHAT_CODE(MSG("assistant", ", \"tool_calls\": [{\"function\": \"f\"}]"),
		  "messages[1].tool_calls[0].function", "invalid_type", "(got \"f\")");
	CHAT_CODE(MSG("assistant", ", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": 5}}]"),
		  "messages[1].tool_calls[0].function.arguments", "invalid_type", "(got 5)");
	CHAT_CODE(MSG("assistant", ", \"refusal\": 5"), "messages[1].refusal", "invalid_type", "(got 5)");
	CHAT_CODE(MSG("assistant", ", \"content\": [{\"type\": \"image_url\"}]"),
		  "messages[1].content[0].type", "invalid_value", "\"refusal\"");
	CHAT_CODE(MSG("assistant", ", \"function_call\": {\"arguments\": \"{}\"}"),
		  "messages[1].function_call.name", "missing_required_parameter", "Missing");
	CHAT_CODE(MSG("assistant", ", \"content\": \"x\", \"reasoning_content\": 5"),
		  "messages[1].reasoning_content", "invalid_type", "(got 5)");
	struct ms_req_gen *r = CHAT(MSG("assistant", ", \"content\": null, \"tool_calls\": [{\"id\": \"c\", "
				       "\"type\": \"function\", \"function\": {\"name\": \"f\", "
				       "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": "
				       "\"c\", \"content\": [{\"type\": \"text\", \"text\": \"42\"}]"));
	char *text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "to=functions.f") && strstr(text, "42"), "%s", text);
	free(text);
	ms_req_gen_free(r);
	r = CHAT(MSG("assistant", ", \"refusal\": \"I cannot.\"}, {\"role\": \"user\", \"content\": \"b\""));
	text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "I cannot."), "the refusal is the turn's text: %s", text);
	free(text);
	ms_req_gen_free(r);
	ms_req_gen_free(CHAT(MSG("assistant", ", \"content\": [{\"type\": \"text\", \"text\": \"x\"}, "
				 "{\"type\": \"refusal\", \"refusal\": \"y\"}]}, {\"role\": \"user\", "
				 "\"content\": \"b\"")));
	/* the deprecated function_call and "function" role: a call and its result */
	r = CHAT(MSG("assistant", ", \"content\": null, \"function_call\": {\"name\": \"g\", "
		     "\"arguments\": \"{}\"}}, {\"role\": \"function\", \"name\": \"g\", \"content\": \"7\""));
	text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "to=functions.g") && strstr(text, "functions.g to=assistant"), "%s",
		      text);
	free(text);
	ms_req_gen_free(r);
	CHAT_CODE(MSG("function", ", \"content\": \"7\""), "messages[1].name", "missing_required_parameter",
		  "Missing");
	/* tool: content and tool_call_id required */
	CHAT_CODE(MSG("tool", ", \"tool_call_id\": \"c\", \"name\": \"f\""), "messages[1].content",
		  "missing_required_parameter", "Missing");
	CHAT_CODE(MSG("tool", ", \"tool_call_id\": 5, \"content\": \"x\""), "messages[1].tool_call_id",
		  "invalid_type", "(got 5)");
}
END_TEST

/* Tool definitions: function tools only, named by the API's pattern,
 * parameters a JSON Schema object checked keyword by keyword. */
START_TEST(chat_tool_rules)
{
	static const struct {
		const char *tool, *param, *code, *needle;
	} bad[] = {
		{"5", "tools[0]", "invalid_type", "expected an object"},
		{"{\"type\": \"banana\", \"function\": {\"name\": \"f\"}}", "tools[0].type", "invalid_value",
		 "supported values are \"function\" (got \"banana\")"},
		{"{\"type\": 5, \"function\": {\"name\": \"f\"}}", "tools[0].type", "invalid_type", "(got 5)"},
		{"{\"type\": \"function\"}", "tools[0].function", "missing_required_parameter", "Missing"},
		{"{\"type\": \"function\", \"function\": []}", "tools[0].function", "invalid_type", "object"},
		{"{\"function\": {\"name\": \"get weather\"}}", "tools[0].function.name", "invalid_value",
		 "^[a-zA-Z0-9_-]{1,64}$"},
		{"{\"function\": {\"name\": \"\"}}", "tools[0].function.name", "invalid_value", "1 to 64"},
		{"{\"function\": {\"name\": \"a1234567890123456789012345678901234567890123456789012345678901234\"}}",
		 "tools[0].function.name", "invalid_value", "1 to 64"},
		{"{\"function\": {\"name\": \"f\", \"description\": 5}}", "tools[0].function.description",
		 "invalid_type", "(got 5)"},
		{"{\"function\": {\"name\": \"f\", \"strict\": \"yes\"}}", "tools[0].function.strict",
		 "invalid_type", "a boolean"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": \"x\"}}", "tools[0].function.parameters",
		 "invalid_function_parameters", "Invalid schema for function 'f'"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": []}}", "tools[0].function.parameters",
		 "invalid_function_parameters", "(got a list of 0)"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": true}}", "tools[0].function.parameters",
		 "invalid_function_parameters", "a JSON Schema object"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": 5}}}",
		 "tools[0].function.parameters.type", "invalid_function_parameters", "(got 5)"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"obj\"}}}",
		 "tools[0].function.parameters.type", "invalid_function_parameters", "\"object\""},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": [\"string\", 1]}}}",
		 "tools[0].function.parameters.type", "invalid_function_parameters", "a list of them"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": 5}}}",
		 "tools[0].function.parameters.properties", "invalid_function_parameters", "(got 5)"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
		 "{\"a\": 5}}}}", "tools[0].function.parameters.properties.a", "invalid_function_parameters",
		 "(got 5)"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"required\": \"a\"}}}",
		 "tools[0].function.parameters.required", "invalid_function_parameters", "(got \"a\")"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"required\": "
		 "[\"a\", 1]}}}", "tools[0].function.parameters.required[1]", "invalid_function_parameters",
		 "(got 1)"},
		{"{\"function\": {\"name\": \"f\", \"strict\": true, \"parameters\": {\"type\": \"object\", "
		 "\"properties\": {\"a\": {}}, \"required\": [\"a\", \"b\"]}}}",
		 "tools[0].function.parameters.required[1]", "invalid_function_parameters", "strict"},
		/* nested schemas, by their path */
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
		 "{\"a\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {\"b\": "
		 "{\"type\": 7}}}}}}}}", "tools[0].function.parameters.properties.a.items.properties.b.type",
		 "invalid_function_parameters", "(got 7)"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"anyOf\": [{\"type\": \"string\"}, 3]}}}",
		 "tools[0].function.parameters.anyOf[1]", "invalid_function_parameters", "(got 3)"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"anyOf\": []}}}",
		 "tools[0].function.parameters.anyOf", "invalid_function_parameters", "non-empty"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"$defs\": {\"p\": \"x\"}}}}",
		 "tools[0].function.parameters.$defs.p", "invalid_function_parameters", "(got \"x\")"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"string\", \"maxLength\": \"5\"}}}",
		 "tools[0].function.parameters.maxLength", "invalid_function_parameters", "a number"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"enum\": \"a\"}}}",
		 "tools[0].function.parameters.enum", "invalid_function_parameters", "a list"},
		{"{\"function\": {\"name\": \"f\", \"parameters\": {\"description\": 1}}}",
		 "tools[0].function.parameters.description", "invalid_function_parameters", "a string"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char json[1024];
		snprintf(json, sizeof(json), "{" USER_HI ", \"tools\": [%s]}", bad[i].tool);
		CHAT_CODE(json, bad[i].param, bad[i].code, bad[i].needle);
	}
	/* the second tool named by its index */
	CHAT_CODE("{" USER_HI ", \"tools\": [{\"function\": {\"name\": \"f\"}}, {\"type\": \"banana\"}]}",
		  "tools[1].type", "invalid_value", "banana");
	/* valid neighbours: booleans as subschemas, type lists, required names
	 * outside properties (JSON Schema allows them; only strict refuses),
	 * keywords left to the grammar compiler, the draft-4 tuple form */
	ms_req_gen_free(CHAT("{" USER_HI ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
			     "\"get_weather-2\", \"description\": \"d\", \"strict\": false, \"parameters\": "
			     "{\"type\": \"object\", \"properties\": {\"a\": true, \"b\": {\"type\": "
			     "[\"string\", \"null\"], \"maxLength\": 5}, \"c\": {\"type\": \"array\", "
			     "\"items\": [{\"type\": \"integer\"}], \"additionalItems\": false}, \"d\": "
			     "{\"anyOf\": [{\"$ref\": \"#/$defs/p\"}, {\"const\": 1}]}}, \"required\": "
			     "[\"a\", \"z\"], \"additionalProperties\": false, \"$defs\": {\"p\": "
			     "{\"type\": \"number\", \"exclusiveMinimum\": 0}}, \"x-extra\": [1]}}}]}"));
	ms_req_gen_free(CHAT("{" USER_HI ", \"tools\": [{\"function\": {\"name\": \"f\", \"strict\": true, "
			     "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
			     "\"string\"}}, \"required\": [\"a\"], \"additionalProperties\": false}}}]}"));
	ms_req_gen_free(CHAT("{" USER_HI ", \"tools\": [{\"function\": {\"name\": \"f\", \"parameters\": "
			     "{}}}]}"));
	/* tool_choice's shape */
	CHAT_CODE("{" USER_HI ", \"tool_choice\": \"sometimes\"}", "tool_choice", "invalid_value",
		  "\"required\"");
	CHAT_CODE("{" USER_HI ", \"tool_choice\": {\"type\": \"custom\", \"function\": {\"name\": \"f\"}}}",
		  "tool_choice.type", "invalid_value", "\"function\"");
	CHAT_CODE("{" USER_HI ", \"tool_choice\": {\"type\": \"function\"}}", "tool_choice.function.name",
		  "missing_required_parameter", "Missing");
	CHAT_CODE("{" USER_HI ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": 1}}}",
		  "tool_choice.function.name", "invalid_type", "(got 1)");
}
END_TEST

TCase *requests_rules_tcase(void)
{
	TCase *tr = tcase_create("rules");
	tcase_add_test(tr, chat_message_rules);
	tcase_add_test(tr, chat_tool_rules);
	return tr;
}
