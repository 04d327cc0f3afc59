/*
 * test-harmony.c: the harmony renderer against texts written out by hand
 * from the gpt-oss chat template (newest revision, llama.cpp
 * models/templates/openai-gpt-oss-120b.jinja, rendered with
 * add_generation_prompt=True), and the streaming parser on well-formed,
 * split, truncated and malformed model output. Token ids are the
 * o200k_harmony ones; no tokenizer is needed.
 */
#include <check.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "harmony.h"

/* ============================================================ rendering */

#define DATE "2025-08-05"

/* The system message of the template, with and without tools. */
#define SYS_HEAD(effort)                                                              \
	"<|start|>system<|message|>You are ChatGPT, a large language model trained by " \
	"OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: " DATE "\n\nReasoning: " effort \
	"\n\n# Valid channels: analysis, commentary, final. Channel must be included for " \
	"every message."
#define SYS(effort) SYS_HEAD(effort) "<|end|>"
#define SYS_TOOLS(effort) \
	SYS_HEAD(effort) "\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"

#define WEATHER_PARAMS                                                                 \
	"{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\","       \
	"\"description\":\"City\"}},\"required\":[\"location\"]}"
#define WEATHER_DEV                                                                    \
	"<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n" \
	"// Get weather\ntype get_weather = (_: {\n// City\nlocation: string,\n}) => any;\n\n" \
	"} // namespace functions<|end|>"

static const struct ms_chat_tool weather_tool = {"get_weather", "Get weather", WEATHER_PARAMS};

static char *render(const struct ms_chat_message *m, int n, const struct ms_chat_tool *t, int nt,
		    const char *effort)
{
	struct ms_chat_request req = {.messages = m, .n_messages = n, .tools = t, .n_tools = nt,
				      .reasoning_effort = effort, .date = DATE};
	struct ms_err err = {0};
	char *out = NULL;
	size_t len = 0;
	int rc = ms_harmony_render(&req, &out, &len, &err);
	ck_assert_msg(rc == 0, "render failed: %d %s", rc, err.msg);
	ck_assert_uint_eq(len, strlen(out));
	return out;
}

static void expect_render(const struct ms_chat_message *m, int n, const struct ms_chat_tool *t,
			  int nt, const char *effort, const char *want)
{
	char *got = render(m, n, t, nt, effort);
	ck_assert_msg(!strcmp(got, want), "rendered\n---\n%s\n---\nwanted\n---\n%s\n---", got, want);
	free(got);
}

START_TEST(render_plain_user)
{
	struct ms_chat_message m[] = {{.role = "user", .content = "Hello"}};
	expect_render(m, 1, NULL, 0, NULL,
		      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
		      "Knowledge cutoff: 2024-06\n"
		      "Current date: 2025-08-05\n"
		      "\n"
		      "Reasoning: medium\n"
		      "\n"
		      "# Valid channels: analysis, commentary, final. Channel must be included for every message."
		      "<|end|><|start|>user<|message|>Hello<|end|><|start|>assistant");
}
END_TEST

START_TEST(render_reasoning_effort)
{
	struct ms_chat_message m[] = {{.role = "user", .content = "Hello"}};
	expect_render(m, 1, NULL, 0, "low",
		      SYS("low") "<|start|>user<|message|>Hello<|end|><|start|>assistant");
	expect_render(m, 1, NULL, 0, "high",
		      SYS("high") "<|start|>user<|message|>Hello<|end|><|start|>assistant");
	expect_render(m, 1, NULL, 0, "medium",
		      SYS("medium") "<|start|>user<|message|>Hello<|end|><|start|>assistant");
}
END_TEST

/* The answer's schema as the harmony guide's "# Response Formats"
 * section, last in the developer message (with or without instructions
 * and tools), and no developer message without any of the three. */
START_TEST(render_response_format)
{
	struct ms_chat_message m[] = {{.role = "developer", .content = "Be exact."},
				      {.role = "user", .content = "List"}};
	struct ms_chat_tool t[] = {{.name = "f", .description = "Eff"}};
	struct ms_chat_request req = {.messages = m, .n_messages = 2, .date = DATE,
				      .response_format = "{\"type\":\"object\"}",
				      .response_format_name = "shopping_list",
				      .response_format_desc = "what to buy"};
	struct ms_err err = {0};
	char *out;
	size_t len;
	ck_assert_int_eq(ms_harmony_render(&req, &out, &len, &err), 0);
	ck_assert_str_eq(out, SYS("medium") "<|start|>developer<|message|># Instructions\n\nBe exact.\n\n"
			      "# Response Formats\n\n## shopping_list\n\n// what to buy\n{\"type\":\"object\"}"
			      "<|end|><|start|>user<|message|>List<|end|><|start|>assistant");
	free(out);
	req.tools = t;
	req.n_tools = 1;
	req.response_format_name = NULL;
	req.response_format_desc = NULL;
	ck_assert_int_eq(ms_harmony_render(&req, &out, &len, &err), 0);
	ck_assert_ptr_nonnull(strstr(out, "} // namespace functions\n\n# Response Formats\n\n## response\n\n"
					  "{\"type\":\"object\"}<|end|><|start|>user"));
	free(out);
	req.messages = m + 1;
	req.n_messages = 1;
	req.n_tools = 0;
	ck_assert_int_eq(ms_harmony_render(&req, &out, &len, &err), 0);
	ck_assert_ptr_nonnull(strstr(out, "<|start|>developer<|message|># Response Formats\n\n## response"));
	free(out);
	req.response_format = NULL;
	ck_assert_int_eq(ms_harmony_render(&req, &out, &len, &err), 0);
	ck_assert_ptr_null(strstr(out, "developer"));
	free(out);
}
END_TEST

START_TEST(render_identity_and_today)
{
	struct ms_chat_message m[] = {{.role = "user", .content = "Hi"}};
	struct ms_chat_request req = {.messages = m, .n_messages = 1, .date = DATE,
				      .model_identity = "You are Bob."};
	struct ms_err err = {0};
	char *out;
	size_t len;
	ck_assert_int_eq(ms_harmony_render(&req, &out, &len, &err), 0);
	ck_assert_str_eq(out, "<|start|>system<|message|>You are Bob.\nKnowledge cutoff: 2024-06\n"
			      "Current date: " DATE "\n\nReasoning: medium\n\n# Valid channels: analysis, "
			      "commentary, final. Channel must be included for every message.<|end|>"
			      "<|start|>user<|message|>Hi<|end|><|start|>assistant");
	free(out);

	/* date NULL: today, as YYYY-MM-DD */
	req.date = NULL;
	req.model_identity = NULL;
	ck_assert_int_eq(ms_harmony_render(&req, &out, &len, &err), 0);
	const char *d = strstr(out, "Current date: ");
	ck_assert_ptr_nonnull(d);
	d += strlen("Current date: ");
	for (int i = 0; i < 10; i++)
		ck_assert_msg(i == 4 || i == 7 ? d[i] == '-' : (d[i] >= '0' && d[i] <= '9'),
			      "date \"%.10s\"", d);
	ck_assert_int_eq(d[10], '\n');
	free(out);
}
END_TEST

START_TEST(render_system_to_developer)
{
	struct ms_chat_message m[] = {{.role = "system", .content = "Be brief."},
				      {.role = "user", .content = "Hi"}};
	const char *want = SYS("medium") "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n"
					 "<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant";
	expect_render(m, 2, NULL, 0, NULL, want);
	m[0].role = "developer";
	expect_render(m, 2, NULL, 0, NULL, want);

	/* an empty system message: no developer message at all */
	m[0].content = "";
	expect_render(m, 2, NULL, 0, NULL,
		      SYS("medium") "<|start|>user<|message|>Hi<|end|><|start|>assistant");

	/* with tools: instructions, a blank line, then the tools */
	m[0].content = "Be brief.";
	expect_render(m, 2, &weather_tool, 1, NULL,
		      SYS_TOOLS("medium") "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n"
		      "# Tools\n\n## functions\n\nnamespace functions {\n\n// Get weather\n"
		      "type get_weather = (_: {\n// City\nlocation: string,\n}) => any;\n\n"
		      "} // namespace functions<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant");

	/* a system message later on is skipped, as the template's loop does */
	struct ms_chat_message m2[] = {{.role = "user", .content = "x"},
				       {.role = "system", .content = "late"},
				       {.role = "user", .content = "y"}};
	expect_render(m2, 3, NULL, 0, NULL,
		      SYS("medium") "<|start|>user<|message|>x<|end|><|start|>user<|message|>y<|end|>"
				    "<|start|>assistant");
}
END_TEST

START_TEST(render_multi_turn)
{
	/* an earlier answer is rendered on the final channel; its analysis
	 * is dropped */
	struct ms_chat_message m[] = {
		{.role = "user", .content = "Hi"},
		{.role = "assistant", .content = "Hello!", .reasoning = "The user greets me."},
		{.role = "user", .content = "Bye"},
	};
	expect_render(m, 3, NULL, 0, NULL,
		      SYS("medium") "<|start|>user<|message|>Hi<|end|>"
				    "<|start|>assistant<|channel|>final<|message|>Hello!<|end|>"
				    "<|start|>user<|message|>Bye<|end|><|start|>assistant");
}
END_TEST

START_TEST(render_tool_round_trip)
{
	/* reasoning + tool call + result, no final answer yet: the analysis
	 * of the tool-call turn is kept; arguments are re-serialized as
	 * json.dumps writes them; the string result is written as a JSON
	 * string (content|tojson) */
	struct ms_chat_tool_call call = {"call_1", "get_weather", "{\"location\":\"Paris\"}"};
	struct ms_chat_message m[] = {
		{.role = "user", .content = "Weather in Paris?"},
		{.role = "assistant", .reasoning = "Need the weather tool.", .tool_calls = &call,
		 .n_tool_calls = 1},
		{.role = "tool", .name = "get_weather", .content = "{\"temp\": 20}"},
	};
	const char *head = SYS_TOOLS("medium") WEATHER_DEV
		"<|start|>user<|message|>Weather in Paris?<|end|>";
	const char *call_txt =
		"<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
		"{\"location\": \"Paris\"}<|call|>"
		"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
		"\"{\\\"temp\\\": 20}\"<|end|>";
	char want[4096];
	snprintf(want, sizeof(want), "%s%s%s%s", head,
		 "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>",
		 call_txt, "<|start|>assistant");
	expect_render(m, 3, &weather_tool, 1, NULL, want);

	/* the follow-up: once a final answer exists, the tool-call turn's
	 * analysis is dropped (and the final answer's own analysis too) */
	struct ms_chat_message m2[] = {
		m[0], m[1], m[2],
		{.role = "assistant", .content = "It is 20 degrees.", .reasoning = "Answer."},
		{.role = "user", .content = "Thanks"},
	};
	snprintf(want, sizeof(want), "%s%s%s", head, call_txt,
		 "<|start|>assistant<|channel|>final<|message|>It is 20 degrees.<|end|>"
		 "<|start|>user<|message|>Thanks<|end|><|start|>assistant");
	expect_render(m2, 5, &weather_tool, 1, NULL, want);

	/* content without reasoning in a tool-call turn is the analysis (the
	 * template's reading); both: the reasoning is the analysis and the
	 * content the commentary preamble (the template refuses both) */
	struct ms_chat_message m3[] = {m[0], m[1], m[2]};
	m3[1].reasoning = NULL;
	m3[1].content = "Let me check.";
	snprintf(want, sizeof(want), "%s%s%s%s", head,
		 "<|start|>assistant<|channel|>analysis<|message|>Let me check.<|end|>", call_txt,
		 "<|start|>assistant");
	expect_render(m3, 3, &weather_tool, 1, NULL, want);
	m3[1].reasoning = "Need the weather tool.";
	snprintf(want, sizeof(want), "%s%s%s%s", head,
		 "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
		 "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>",
		 call_txt, "<|start|>assistant");
	expect_render(m3, 3, &weather_tool, 1, NULL, want);
}
END_TEST

START_TEST(render_tool_arguments)
{
	/* JSON arguments: json.dumps of the parsed value (", " and ": ",
	 * non-ASCII kept, escapes normalised, 1.50 -> 1.5); text that is not
	 * JSON: a JSON string; none: {} */
	struct ms_chat_tool_call calls[] = {
		{NULL, "f", "{\"a\":[1,2.50,{\"b\":null}],\"c\":\"\\u00e9\\/\\n\",\"d\":true}"},
		{NULL, "f", "not json"},
		{NULL, "f", NULL},
	};
	struct ms_chat_tool f = {"f", "F", NULL};
	const char *want[] = {
		"{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"\xc3\xa9/\\n\", \"d\": true}",
		"\"not json\"",
		"{}",
	};
	for (int i = 0; i < 3; i++) {
		struct ms_chat_message m[] = {
			{.role = "user", .content = "x"},
			{.role = "assistant", .tool_calls = &calls[i], .n_tool_calls = 1},
		};
		char exp[2048];
		snprintf(exp, sizeof(exp),
			 SYS_TOOLS("medium") "<|start|>developer<|message|># Tools\n\n## functions\n\n"
			 "namespace functions {\n\n// F\ntype f = () => any;\n\n} // namespace functions"
			 "<|end|><|start|>user<|message|>x<|end|><|start|>assistant to=functions.f"
			 "<|channel|>commentary json<|message|>%s<|call|><|start|>assistant", want[i]);
		expect_render(m, 2, &f, 1, NULL, exp);
	}

	/* several calls in one message: each its own message (the template
	 * renders only the first); a NULL tool result is null */
	struct ms_chat_tool_call two[] = {{NULL, "f", "{}"}, {NULL, "g", "{\"x\":1}"}};
	struct ms_chat_message m[] = {
		{.role = "user", .content = "x"},
		{.role = "assistant", .tool_calls = two, .n_tool_calls = 2},
		{.role = "tool", .name = "f", .content = NULL},
		{.role = "tool", .name = "g", .content = "ok"},
	};
	char *got = render(m, 4, &f, 1, NULL);
	const char *tail =
		"<|start|>user<|message|>x<|end|>"
		"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>"
		"<|start|>assistant to=functions.g<|channel|>commentary json<|message|>{\"x\": 1}<|call|>"
		"<|start|>functions.f to=assistant<|channel|>commentary<|message|>null<|end|>"
		"<|start|>functions.g to=assistant<|channel|>commentary<|message|>\"ok\"<|end|>"
		"<|start|>assistant";
	ck_assert_msg(strlen(got) > strlen(tail) && !strcmp(got + strlen(got) - strlen(tail), tail),
		      "got %s", got);
	free(got);
}
END_TEST

START_TEST(render_tools_schema)
{
	/* Every branch of render_typescript_type that a schema reaches,
	 * including Jinja's whitespace: a nested object's member types
	 * follow a newline and 16 spaces, a oneOf default follows 20 spaces
	 * and " | " is followed by a newline. */
	static const char params[] =
		"{\"type\":\"object\",\"properties\":{"
		"\"location\":{\"type\":\"string\",\"description\":\"City name\"},"
		"\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"],\"default\":\"c\"},"
		"\"days\":{\"type\":\"integer\",\"description\":\"Days\",\"default\":3},"
		"\"scale\":{\"type\":\"number\",\"default\":0.5},"
		"\"verbose\":{\"type\":\"boolean\",\"default\":false},"
		"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
		"\"ids\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"nullable\":true},"
		"\"pt\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}}}},"
		"\"points\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
		"{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},\"required\":[\"x\"]}},"
		"\"opts\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"enum\":[\"p\",\"q\"]},"
		"\"b\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
		"\"meta\":{\"type\":\"object\",\"default\":{\"k\":[1,2.0,null]}},"
		"\"nul\":{\"type\":\"string\",\"nullable\":true},"
		"\"multi\":{\"type\":[\"string\",\"number\"]},"
		"\"one\":{\"oneOf\":[{\"type\":\"string\",\"description\":\"as text\"},{\"type\":\"number\",\"default\":1}]},"
		"\"anything\":{}"
		"},\"required\":[\"location\"]}";
	struct ms_chat_tool tools[] = {
		{"get_weather", "Get the weather", params},
		{"noargs", "No args", NULL},
		{"nodesc", NULL, "{\"type\":\"object\",\"properties\":{}}"},
	};
	struct ms_chat_message m[] = {{.role = "user", .content = "x"}};
	expect_render(m, 1, tools, 3, NULL,
		      SYS_TOOLS("medium")
		      "<|start|>developer<|message|># Tools\n"
		      "\n"
		      "## functions\n"
		      "\n"
		      "namespace functions {\n"
		      "\n"
		      "// Get the weather\n"
		      "type get_weather = (_: {\n"
		      "// City name\n"
		      "location: string,\n"
		      "unit?: \"c\" | \"f\", // default: c,\n"
		      "// Days\n"
		      "days?: number, // default: 3,\n"
		      "scale?: number, // default: 0.5,\n"
		      "verbose?: boolean, // default: false,\n"
		      "tags?: string[],\n"
		      "ids?: number[] | null,\n"
		      "pt?: {\n"
		      "x?: \n"
		      "                number}[],\n"
		      "points?: any[],\n" /* the inner type is over 50 characters */
		      "opts?: {\n"
		      "a: \n"
		      "                \"p\" | \"q\", b?: \n"
		      "                number},\n"
		      "meta?: object, // default: {\"k\": [1, 2.0, null]},\n"
		      "nul?: string | null,\n"
		      "multi?: string | number,\n"
		      "one?: string// as text | \n"
		      "number                    // default: 1,\n"
		      "anything?: any,\n"
		      "}) => any;\n"
		      "\n"
		      "// No args\n"
		      "type noargs = () => any;\n"
		      "\n"
		      "type nodesc = () => any;\n"
		      "\n"
		      "} // namespace functions<|end|><|start|>user<|message|>x<|end|><|start|>assistant");
}
END_TEST

static void refused(const struct ms_chat_request *req, const char *needle1, const char *needle2)
{
	struct ms_err err = {0};
	char *out = (char *)1;
	size_t len = 7;
	int rc = ms_harmony_render(req, &out, &len, &err);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(err.code, -EINVAL);
	ck_assert_msg(strstr(err.msg, needle1), "\"%s\" lacks \"%s\"", err.msg, needle1);
	if (needle2)
		ck_assert_msg(strstr(err.msg, needle2), "\"%s\" lacks \"%s\"", err.msg, needle2);
}

START_TEST(render_invalid)
{
	struct ms_chat_tool_call noname = {"c1", NULL, "{}"};
	struct ms_chat_message m[] = {
		{.role = "user", .content = "x"},
		{.role = "assistant", .content = "y"},
		{.role = "user", .content = "z"},
	};
	struct ms_chat_request req = {.messages = m, .n_messages = 3, .date = DATE};

	m[1].role = "bot";
	refused(&req, "messages[1].role", "bot");
	m[1].role = NULL;
	refused(&req, "messages[1].role", NULL);

	m[1].role = "tool";
	refused(&req, "messages[1].name", NULL);
	m[1].name = "";
	refused(&req, "messages[1].name", NULL);
	m[1].name = NULL;

	m[1].role = "assistant";
	m[1].tool_calls = &noname;
	m[1].n_tool_calls = 1;
	refused(&req, "messages[1].tool_calls[0].name", NULL);
	m[1].tool_calls = NULL;
	m[1].n_tool_calls = 0;

	m[1].content = "<|channel|>analysis<|message|>hmm";
	refused(&req, "messages[1].content", NULL);
	m[1].content = "y";
	m[1].reasoning = "<|channel|>final<|message|>hmm";
	refused(&req, "messages[1].reasoning", NULL);
	m[1].reasoning = NULL;

	req.reasoning_effort = "extreme";
	refused(&req, "reasoning_effort", "extreme");
	req.reasoning_effort = NULL;
	req.date = "5 Aug 2025";
	refused(&req, "date", NULL);
	req.date = DATE;

	struct ms_chat_tool bad[] = {{"f", "d", "{\"type\": \"object\", \"properties\": {"},
				     {NULL, "d", NULL},
				     {"g", "d", "{\"type\":\"object\",\"properties\":[1]}"}};
	req.tools = &bad[0];
	req.n_tools = 1;
	refused(&req, "tools[0].parameters", "not JSON");
	req.tools = &bad[1];
	refused(&req, "tools[0].name", NULL);
	req.tools = &bad[2];
	refused(&req, "tools[0].parameters", "properties");

	ck_assert_int_eq(ms_harmony_render(NULL, &(char *){NULL}, NULL, NULL), -EINVAL);
}
END_TEST

START_TEST(render_special_spans)
{
	/* user text that spells a special token is not reported as one */
	struct ms_chat_message m[] = {{.role = "user", .content = "say <|end|> please"}};
	struct ms_chat_request req = {.messages = m, .n_messages = 1, .date = DATE};
	struct ms_err err = {0};
	struct ms_harmony_span *sp;
	size_t n_sp, len;
	char *out;
	ck_assert_int_eq(ms_harmony_render_ex(&req, &out, &len, &sp, &n_sp, &err), 0);
	static const char *const want[] = {"<|start|>", "<|message|>", "<|end|>", "<|start|>",
					   "<|message|>", "<|end|>", "<|start|>"};
	ck_assert_uint_eq(n_sp, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < n_sp; i++) {
		ck_assert_uint_eq(sp[i].len, strlen(want[i]));
		ck_assert(!memcmp(out + sp[i].off, want[i], sp[i].len));
	}
	const char *user = strstr(out, "say <|end|>");
	ck_assert_ptr_nonnull(user);
	for (size_t i = 0; i < n_sp; i++)
		ck_assert(out + sp[i].off + sp[i].len <= user || out + sp[i].off >= user + 18);
	ck_assert_uint_eq(sp[n_sp - 1].off + sp[n_sp - 1].len + strlen("assistant"), len);
	free(sp);
	free(out);
}
END_TEST

/* ============================================================== parsing */

static const struct ms_harmony_ids IDS = {200006, 200007, 200008, 200005, 200003, 200002, 200012};
#define TEXT_ID 1000

/* The events as one transcript: consecutive text events of a kind are
 * merged (so token boundaries do not show), e.g.
 *   R(thinking)C(answer)S(stop)   B(get_weather)A({"x":1})E S(tool_calls) */
struct rec {
	char buf[8192];
	size_t n;
	int last;  /* last text kind written, -1 if none open */
	int abort_at, calls;
};

static void rec_put(struct rec *r, const char *s, size_t n)
{
	ck_assert(r->n + n < sizeof(r->buf));
	memcpy(r->buf + r->n, s, n);
	r->n += n;
	r->buf[r->n] = '\0';
}

static int rec_cb(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct rec *r = ctx;
	static const char tag[] = "RCBAES";
	r->calls++;
	if (r->abort_at && r->calls == r->abort_at)
		return -42;
	bool text = ev == MS_HARMONY_REASONING || ev == MS_HARMONY_CONTENT || ev == MS_HARMONY_TOOL_ARGS;
	if (text)
		ck_assert_uint_gt(len, 0);
	if (text && r->last == (int)ev) {
		r->n--; /* reopen the ")" */
	} else {
		rec_put(r, &tag[ev], 1);
		if (ev != MS_HARMONY_TOOL_CALL_END)
			rec_put(r, "(", 1);
	}
	if (ev != MS_HARMONY_TOOL_CALL_END) {
		rec_put(r, data, len);
		rec_put(r, ")", 1);
	}
	r->last = text ? (int)ev : -1;
	return 0;
}

/* A script is model output with the special tokens spelled out; it is cut
 * into tokens: each special one, and the text between them. */
struct tok {
	int32_t id;
	const char *s;
	size_t n;
};

static int tokenize(const char *script, struct tok *t, int max)
{
	static const struct {
		const char *s;
		int32_t id;
	} sp[] = {{"<|start|>", 200006}, {"<|end|>", 200007}, {"<|message|>", 200008},
		  {"<|channel|>", 200005}, {"<|constrain|>", 200003}, {"<|return|>", 200002},
		  {"<|call|>", 200012}};
	int n = 0;
	const char *p = script;
	while (*p) {
		bool hit = false;
		for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++) {
			size_t l = strlen(sp[i].s);
			if (!strncmp(p, sp[i].s, l)) {
				ck_assert_int_lt(n, max);
				t[n++] = (struct tok){sp[i].id, sp[i].s, 0};
				p += l;
				hit = true;
				break;
			}
		}
		if (hit)
			continue;
		const char *q = p + 1;
		while (*q && strncmp(q, "<|", 2))
			q++;
		ck_assert_int_lt(n, max);
		t[n++] = (struct tok){TEXT_ID, p, (size_t)(q - p)};
		p = q;
	}
	return n;
}

/* Feed a script; text tokens are cut further at the byte offsets in
 * cuts[] (offsets into the script, sorted, -1 terminated; NULL: none). */
static void feed(const char *script, const int *cuts, bool empties, bool finish, struct rec *r,
		 struct ms_harmony_parser *p)
{
	struct tok t[256];
	int n = tokenize(script, t, 256);
	memset(r, 0, sizeof(*r));
	r->last = -1;
	ms_harmony_parser_init(p, &IDS, rec_cb, r);
	for (int i = 0; i < n; i++) {
		if (t[i].id != TEXT_ID) {
			ck_assert_int_eq(ms_harmony_parser_push(p, t[i].id, NULL, 0), 0);
			continue;
		}
		size_t a = (size_t)(t[i].s - script), e = a + t[i].n;
		while (a < e) {
			size_t b = e;
			for (const int *c = cuts; c && *c >= 0; c++)
				if ((size_t)*c > a && (size_t)*c < b)
					b = (size_t)*c;
			if (empties)
				ck_assert_int_eq(ms_harmony_parser_push(p, TEXT_ID, "", 0), 0);
			ck_assert_int_eq(ms_harmony_parser_push(p, TEXT_ID, script + a, b - a), 0);
			a = b;
		}
	}
	if (finish)
		ck_assert_int_eq(ms_harmony_parser_finish(p), 0);
	ms_harmony_parser_free(p);
}

static void expect_parse(const char *script, bool finish, const char *want, int malformed)
{
	struct rec r;
	struct ms_harmony_parser p;
	feed(script, NULL, false, finish, &r, &p);
	ck_assert_msg(!strcmp(r.buf, want), "script %s\n got  %s\n want %s", script, r.buf, want);
	ck_assert_msg(p.n_malformed == malformed, "script %s: n_malformed %d, want %d", script,
		      p.n_malformed, malformed);
}

START_TEST(parse_analysis_final)
{
	expect_parse("<|channel|>analysis<|message|>User says hi.<|end|>"
		     "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
		     false, "R(User says hi.)C(Hello!)S(stop)", 0);
	/* no analysis at all */
	expect_parse("<|channel|>final<|message|>2 + 2 = 4.<|return|>", false, "C(2 + 2 = 4.)S(stop)", 0);
}
END_TEST

START_TEST(parse_end_is_not_stop)
{
	struct rec r;
	struct ms_harmony_parser p;
	feed("<|channel|>analysis<|message|>think<|end|>", NULL, false, false, &r, &p);
	ck_assert_str_eq(r.buf, "R(think)");
	ck_assert_int_eq(p.state, MS_HARMONY_BETWEEN);
	/* the next message follows */
	ck_assert_int_eq(ms_harmony_parser_push(&p, IDS.start, NULL, 0), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "assistant", 9), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, IDS.channel, NULL, 0), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "final", 5), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, IDS.message, NULL, 0), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "ok", 2), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, IDS.ret, NULL, 0), 0);
	ck_assert_str_eq(r.buf, "R(think)C(ok)S(stop)");
	/* after a stop, input is ignored */
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "more", 4), 0);
	ck_assert_int_eq(ms_harmony_parser_finish(&p), 0);
	ck_assert_str_eq(r.buf, "R(think)C(ok)S(stop)");
	ck_assert_int_eq(p.n_malformed, 0);
}
END_TEST

START_TEST(parse_tool_calls)
{
	/* recipient after the channel, with <|constrain|>json */
	expect_parse("<|channel|>analysis<|message|>Need weather.<|end|>"
		     "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
		     "<|message|>{\"location\":\"SF\"}<|call|>",
		     false, "R(Need weather.)B(get_weather)A({\"location\":\"SF\"})ES(tool_calls)", 0);
	/* recipient before the channel: first message (role from the prompt) */
	expect_parse(" to=functions.get_weather<|channel|>commentary json<|message|>{}<|call|>",
		     false, "B(get_weather)A({})ES(tool_calls)", 0);
	/* recipient before the channel, after <|start|>assistant, constrain */
	expect_parse("<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.lookup"
		     "<|channel|>commentary <|constrain|>json<|message|>{\"q\":1}<|call|>",
		     false, "R(x)B(lookup)A({\"q\":1})ES(tool_calls)", 0);
	/* the spelling the template renders history in */
	expect_parse("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>[]<|call|>",
		     false, "B(f)A([])ES(tool_calls)", 0);
}
END_TEST

START_TEST(parse_preamble)
{
	/* commentary without a recipient is user-visible content */
	expect_parse("<|channel|>analysis<|message|>plan<|end|>"
		     "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
		     "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
		     "<|message|>{}<|call|>",
		     false, "R(plan)C(Let me check.)B(f)A({})ES(tool_calls)", 0);
}
END_TEST

/* Every script, fed whole, then with each text token cut at every byte
 * (one cut at a time), then one byte per token with empty tokens between,
 * then with random cuts: the transcript never changes. */
START_TEST(parse_streaming_splits)
{
	static const char *const scripts[] = {
		"<|channel|>analysis<|message|>User says hi.<|end|>"
		"<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>",
		"<|channel|>analysis<|message|>Need weather.<|end|>"
		"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
		"<|message|>{\"location\":\"San Francisco\"}<|call|>",
		" to=functions.get_weather<|channel|>commentary json<|message|>{\"a\":1}<|call|>",
		"<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final"
		"<|message|>Done<|return|>",
		"junk<|channel|>final<|message|>text<|return|>",
		"<|channel|>finale<|message|>text<|return|>",
		"<|channel|>analysis<|message|>cut off in the mid",
	};
	for (size_t s = 0; s < sizeof(scripts) / sizeof(scripts[0]); s++) {
		const char *sc = scripts[s];
		struct rec ref, r;
		struct ms_harmony_parser p;
		feed(sc, NULL, false, true, &ref, &p);
		int ref_bad = p.n_malformed;
		int len = (int)strlen(sc);
		for (int k = 1; k < len; k++) {
			int cuts[] = {k, -1};
			feed(sc, cuts, false, true, &r, &p);
			ck_assert_msg(!strcmp(r.buf, ref.buf), "cut at %d of %s:\n%s\nvs\n%s", k, sc, r.buf,
				      ref.buf);
			ck_assert_int_eq(p.n_malformed, ref_bad);
		}
		int all[1024];
		for (int k = 0; k < len; k++)
			all[k] = k + 1;
		all[len] = -1;
		feed(sc, all, true, true, &r, &p);
		ck_assert_msg(!strcmp(r.buf, ref.buf), "bytewise %s:\n%s\nvs\n%s", sc, r.buf, ref.buf);
		ck_assert_int_eq(p.n_malformed, ref_bad);
		unsigned seed = 12345u + (unsigned)s;
		for (int trial = 0; trial < 50; trial++) {
			int c[16], nc = 0;
			for (int k = 1; k < len && nc < 15; k++) {
				seed = seed * 1103515245u + 12345u;
				if ((seed >> 16) % 5 == 0)
					c[nc++] = k;
			}
			c[nc] = -1;
			feed(sc, c, trial % 2, true, &r, &p);
			ck_assert_msg(!strcmp(r.buf, ref.buf), "random cuts %s:\n%s", sc, r.buf);
		}
	}

	/* UTF-8: cut only between characters (the detokenizer's promise) */
	const char *u = "<|channel|>final<|message|>h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80!<|return|>";
	struct rec ref, r;
	struct ms_harmony_parser p;
	feed(u, NULL, false, true, &ref, &p);
	ck_assert_str_eq(ref.buf, "C(h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80!)S(stop)");
	int cuts[64], nc = 0;
	for (int k = 1; u[k]; k++)
		if (((unsigned char)u[k] & 0xC0) != 0x80)
			cuts[nc++] = k;
	cuts[nc] = -1;
	feed(u, cuts, true, true, &r, &p);
	ck_assert_str_eq(r.buf, ref.buf);
}
END_TEST

START_TEST(parse_truncated)
{
	/* inside the analysis: what came is reasoning; no STOP (the caller
	 * reports "length") and nothing malformed */
	expect_parse("<|channel|>analysis<|message|>Let me th", true, "R(Let me th)", 0);
	/* inside a header: it becomes content */
	expect_parse("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin", true,
		     "R(x)C(assistantfin)", 1);
	/* right after <|channel|> */
	expect_parse("<|channel|>", true, "", 1);
	/* right after <|start|>: an empty header, nothing to show */
	expect_parse("<|channel|>final<|message|>a<|end|><|start|>", true, "C(a)", 1);
	/* inside tool arguments: the call is closed, no STOP */
	expect_parse("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":", true,
		     "B(f)A({\"a\":)E", 0);
	/* nothing generated at all */
	expect_parse("", true, "", 0);
	/* after <|end|>: nothing buffered */
	expect_parse("<|channel|>analysis<|message|>x<|end|>", true, "R(x)", 0);
}
END_TEST

START_TEST(parse_malformed)
{
	/* unknown channel: the raw header and the body are content */
	expect_parse("<|channel|>finale<|message|>Hi<|return|>", false,
		     "C(finaleHi)S(stop)", 1);
	/* <|message|> without a channel */
	expect_parse("<|message|>Hi<|return|>", false, "C(Hi)S(stop)", 1);
	expect_parse("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|message|>Hi<|return|>",
		     false, "R(a)C(assistantHi)S(stop)", 1);
	/* text before any <|channel|> */
	expect_parse("Sure!<|channel|>final<|message|>Hi<|return|>", false,
		     "C(Sure!finalHi)S(stop)", 1);
	/* text and no header at all */
	expect_parse("Just text.<|return|>", false, "C(Just text.)S(stop)", 1);
	/* to= without a name, to=functions. without one, a built-in tool */
	expect_parse("<|channel|>commentary to= <|constrain|>json<|message|>{}<|call|>", false,
		     "C(commentary to= json{})S(stop)", 1);
	expect_parse("<|channel|>commentary to=functions.<|message|>{}<|call|>", false,
		     "C(commentary to=functions.{})S(stop)", 1);
}
END_TEST

START_TEST(parse_malformed_more)
{
	/* a recipient that is not a function (no built-in tools here) */
	expect_parse("<|channel|>analysis to=python<|message|>print(1)<|call|>", false,
		     "C(analysis to=pythonprint(1))S(stop)", 1);
	/* <|constrain|> without json */
	expect_parse("<|channel|>commentary to=functions.f <|constrain|>xml<|message|><a/><|call|>",
		     false, "C(commentary to=functions.f xml<a/>)S(stop)", 1);
	/* two channels in one header */
	expect_parse("<|channel|>analysis <|channel|>final<|message|>x<|return|>", false,
		     "C(analysis finalx)S(stop)", 1);
	/* a header that never ends is flushed as content once too long */
	char big[MS_HARMONY_HEADER_MAX + 200];
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	char script[sizeof(big) + 64];
	snprintf(script, sizeof(script), "%s<|return|>", big);
	char want[sizeof(big) + 64];
	snprintf(want, sizeof(want), "C(%s)S(stop)", big);
	expect_parse(script, false, want, 1);
	/* a message with <|end|> before <|message|> */
	expect_parse("<|channel|>final<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>",
		     false, "C(finalok)S(stop)", 1);
	/* <|start|> missing between messages: parsed anyway, counted */
	expect_parse("<|channel|>analysis<|message|>a<|end|>assistant<|channel|>final<|message|>b<|return|>",
		     false, "R(a)C(b)S(stop)", 1);
	expect_parse("<|channel|>analysis<|message|>a<|end|><|channel|>final<|message|>b<|return|>",
		     false, "R(a)C(b)S(stop)", 1);
	/* <|end|> missing: a new header ends the message */
	expect_parse("<|channel|>analysis<|message|>a<|channel|>final<|message|>b<|return|>", false,
		     "R(a)C(b)S(stop)", 1);
	expect_parse("<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b"
		     "<|return|>", false, "R(a)C(b)S(stop)", 1);
	/* stray specials inside a body are dropped (never text) */
	expect_parse("<|channel|>final<|message|>a<|message|>b<|return|>", false,
		     "C(ab)S(stop)", 1);
	/* a tool message ended by <|end|>: the call ends, generation goes on;
	 * the finish reason says a tool call was made */
	expect_parse("<|channel|>commentary to=functions.f<|message|>{}<|end|><|start|>assistant"
		     "<|channel|>final<|message|>ok<|return|>", false,
		     "B(f)A({})EC(ok)S(tool_calls)", 0);
}
END_TEST

/* The header forms models and other servers get wrong, each parsed to the
 * call it is. */
START_TEST(parse_header_forms)
{
	/* the recipient in the role header, <|constrain|>json after the channel */
	expect_parse("<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant "
		     "to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
		     "{\"city\":\"Paris\"}<|call|>", false,
		     "R(Need it.)B(get_weather)A({\"city\":\"Paris\"})ES(tool_calls)", 0);
	/* <|constrain|> right after the name, no space: not part of the name */
	expect_parse("<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{}"
		     "<|call|>", false, "B(get_weather)A({})ES(tool_calls)", 0);
	/* a bare json after the name; the call ended by <|end|> */
	expect_parse("<|channel|>commentary to=functions.get_weather json<|message|>{}<|end|>", true,
		     "B(get_weather)A({})E", 0);
	/* a call in the analysis channel (a system message without commentary) */
	expect_parse("<|channel|>analysis to=functions.lookup <|constrain|>json<|message|>{\"q\":1}"
		     "<|call|>", false, "B(lookup)A({\"q\":1})ES(tool_calls)", 0);
	/* the name written with text after it (a special token spelled as
	 * text, a quote): the name is its name characters */
	const struct { int32_t id; const char *t; } seq[2][6] = {
		{{IDS.channel, NULL}, {TEXT_ID, "commentary to=functions.get_weather<|constrain|>json"},
		 {IDS.message, NULL}, {TEXT_ID, "{}"}, {IDS.call, NULL}, {0, NULL}},
		{{TEXT_ID, " to=functions.f\"json"}, {IDS.channel, NULL}, {TEXT_ID, "commentary"},
		 {IDS.message, NULL}, {TEXT_ID, "[]"}, {IDS.call, NULL}},
	};
	const char *want[2] = {"B(get_weather)A({})ES(tool_calls)", "B(f)A([])ES(tool_calls)"};
	for (int k = 0; k < 2; k++) {
		struct rec r;
		struct ms_harmony_parser p;
		memset(&r, 0, sizeof(r));
		r.last = -1;
		ms_harmony_parser_init(&p, &IDS, rec_cb, &r);
		for (int i = 0; i < 6 && seq[k][i].id; i++)
			ck_assert_int_eq(ms_harmony_parser_push(&p, seq[k][i].id, seq[k][i].t,
								seq[k][i].t ? strlen(seq[k][i].t) : 0), 0);
		ck_assert_str_eq(r.buf, want[k]);
		ck_assert_int_eq(p.n_malformed, 0);
	}
}
END_TEST

/* Random mixtures of special tokens and words (none spelling a special
 * token): no special token ever reaches the text of any event. */
START_TEST(parse_never_leaks_specials)
{
	static const char *const words[] = {"analysis", "final", "commentary", " to=functions.f",
					    "json", "assistant", "hello ", "{}", " to=python", "x"};
	const int32_t sp[] = {IDS.start, IDS.end, IDS.message, IDS.channel, IDS.constrain,
			      IDS.ret, IDS.call};
	unsigned seed = 777u;
	for (int trial = 0; trial < 3000; trial++) {
		struct rec r;
		struct ms_harmony_parser p;
		memset(&r, 0, sizeof(r));
		r.last = -1;
		ms_harmony_parser_init(&p, &IDS, rec_cb, &r);
		for (int k = 0; k < 24; k++) {
			seed = seed * 1103515245u + 12345u;
			unsigned v = (seed >> 16) % 17;
			if (v < 7) {
				ck_assert_int_eq(ms_harmony_parser_push(&p, sp[v], NULL, 0), 0);
			} else {
				const char *w = words[v - 7];
				ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, w, strlen(w)), 0);
			}
		}
		ck_assert_int_eq(ms_harmony_parser_finish(&p), 0);
		ck_assert_msg(!strstr(r.buf, "<|"), "a special token leaked: %s", r.buf);
	}
}
END_TEST

START_TEST(parse_callback_abort)
{
	struct rec r;
	struct ms_harmony_parser p;
	memset(&r, 0, sizeof(r));
	r.last = -1;
	r.abort_at = 2;
	ms_harmony_parser_init(&p, &IDS, rec_cb, &r);
	ck_assert_int_eq(ms_harmony_parser_push(&p, IDS.channel, NULL, 0), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "analysis", 8), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, IDS.message, NULL, 0), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "a", 1), 0);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "b", 1), -42);
	/* finish reports the callback's value too */
	r.calls = 0;
	r.abort_at = 1;
	ms_harmony_parser_init(&p, &IDS, rec_cb, &r);
	ck_assert_int_eq(ms_harmony_parser_push(&p, TEXT_ID, "junk", 4), 0);
	ck_assert_int_eq(ms_harmony_parser_finish(&p), -42);
	ms_harmony_parser_free(&p);
	ms_harmony_parser_free(NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("harmony");
	TCase *tr = tcase_create("render");
	tcase_add_test(tr, render_plain_user);
	tcase_add_test(tr, render_reasoning_effort);
	tcase_add_test(tr, render_identity_and_today);
	tcase_add_test(tr, render_response_format);
	tcase_add_test(tr, render_system_to_developer);
	tcase_add_test(tr, render_multi_turn);
	tcase_add_test(tr, render_tool_round_trip);
	tcase_add_test(tr, render_tool_arguments);
	tcase_add_test(tr, render_tools_schema);
	tcase_add_test(tr, render_invalid);
	tcase_add_test(tr, render_special_spans);
	suite_add_tcase(s, tr);
	TCase *tp = tcase_create("parse");
	tcase_add_test(tp, parse_analysis_final);
	tcase_add_test(tp, parse_end_is_not_stop);
	tcase_add_test(tp, parse_tool_calls);
	tcase_add_test(tp, parse_preamble);
	tcase_add_test(tp, parse_streaming_splits);
	tcase_add_test(tp, parse_truncated);
	tcase_add_test(tp, parse_malformed);
	tcase_add_test(tp, parse_malformed_more);
	tcase_add_test(tp, parse_callback_abort);
	tcase_add_test(tp, parse_header_forms);
	tcase_add_test(tp, parse_never_leaks_specials);
	suite_add_tcase(s, tp);
	return ms_check_run(s);
}
