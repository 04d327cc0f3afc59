/*
 * harmony-render.c: the harmony renderer of harmony.h (chat messages ->
 * prompt text).
 *
 * Reading order: the output (text and special-token spans); Jinja's join
 * and `in` on JSON values; the template's render_typescript_type /
 * render_tool_namespace macros (JSON Schema -> TypeScript); the checks of
 * a request; the system and developer messages; the message loop.
 *
 * Where the template's behaviour depends on Jinja rather than on intent,
 * this file follows Jinja (and says so): the exact text matters because the
 * model was trained on it and because a prompt that stays byte-identical
 * across turns keeps the KV cache reusable.
 */
#include "harmony.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harmony-int.h"
#include "ms-strbuf.h"
#include "ms-utf8.h"

/* ============================================================== output */

/* The rendered text, and the spans of the special tokens the template
 * wrote in it (for ms_harmony_render_ex). A span that cannot be recorded
 * sets text.oom: the render then fails as for the text itself. */
struct render {
	struct ms_strbuf text;
	struct ms_harmony_span *sp;
	size_t n_sp, cap_sp;
};

/* The special tokens the template writes. */
static const char *const harmony_specials[] = {
	"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>",
};

/* Length of the special token at s, or 0. */
static size_t special_at(const char *s)
{
	if (s[0] != '<' || s[1] != '|')
		return 0;
	for (size_t i = 0; i < sizeof(harmony_specials) / sizeof(harmony_specials[0]); i++) {
		size_t l = strlen(harmony_specials[i]);
		if (!strncmp(s, harmony_specials[i], l))
			return l;
	}
	return 0;
}

static void span_add(struct render *r, size_t len)
{
	if (r->text.oom)
		return;
	if (r->n_sp == r->cap_sp) {
		size_t cap = r->cap_sp ? 2 * r->cap_sp : 32;
		struct ms_harmony_span *q = realloc(r->sp, cap * sizeof(*q));
		if (!q) {
			r->text.oom = true;
			return;
		}
		r->sp = q;
		r->cap_sp = cap;
	}
	r->sp[r->n_sp++] = (struct ms_harmony_span){r->text.len, len};
}

/* Append template text (never request data): each special token in it is
 * recorded as a span. */
static void tpl(struct render *r, const char *s)
{
	while (*s) {
		size_t n = special_at(s);
		if (n) {
			span_add(r, n);
		} else {
			const char *e = strstr(s + 1, "<|");
			n = e ? (size_t)(e - s) : strlen(s);
		}
		ms_strbuf_add(&r->text, s, n);
		s += n;
	}
}

/* ============================================ Jinja operations on values */

/* `items|join(sep)` for a Jinja iterable: a list's items, a string's
 * characters, a dict's keys. */
static void py_join(struct ms_strbuf *b, const struct jv *v, const char *sep)
{
	if (v->t == J_STR) {
		for (size_t i = 0; i < v->n;) {
			size_t l = 1;
			while (i + l < v->n && ((unsigned char)v->s[i + l] & 0xC0) == 0x80)
				l++;
			if (i)
				ms_strbuf_str(b, sep);
			ms_strbuf_add(b, v->s + i, l);
			i += l;
		}
	} else if (v->t == J_ARR || v->t == J_OBJ) {
		bool first = true;
		for (const struct jv *c = v->child; c; c = c->next) {
			if (v->t == J_OBJ && !ms_hj_member(v, c))
				continue;
			if (!first)
				ms_strbuf_str(b, sep);
			first = false;
			if (v->t == J_OBJ)
				ms_strbuf_add(b, c->k, c->kn);
			else
				ms_hj_str(b, c);
		}
	}
}

/* `name in (required or [])`: list membership, substring of a string,
 * key of a dict. */
static bool py_in(const char *name, size_t nl, const struct jv *req)
{
	if (!ms_hj_truthy(req))
		return false;
	if (req->t == J_STR)
		return memmem(req->s, req->n, name, nl) != NULL;
	if (req->t == J_OBJ) {
		for (const struct jv *c = req->child; c; c = c->next)
			if (c->kn == nl && !memcmp(c->k, name, nl))
				return true;
		return false;
	}
	if (req->t == J_ARR)
		for (const struct jv *c = req->child; c; c = c->next)
			if (c->t == J_STR && c->n == nl && !memcmp(c->s, name, nl))
				return true;
	return false;
}

/* ==================================== JSON Schema -> TypeScript (the macros) */

/* render_typescript_type(spec) writes into b. Each returns 0, -ENOMEM, or
 * -EINVAL (properties that are not an object: the template's .items() call
 * fails there). */
static int ts_type(struct ms_strbuf *b, const struct jv *spec);

/* Array items that are not a plain string/number/boolean: their own type
 * followed by [], unless that type is "object | object" or longer than 50
 * characters (Jinja's `|length` on a str: code points), then any[]. */
static int ts_items(struct ms_strbuf *b, const struct jv *items)
{
	struct ms_strbuf in = {0};
	int rc = ts_type(&in, items);
	if (rc || in.oom) {
		ms_strbuf_free(&in);
		return rc ? rc : -ENOMEM;
	}
	const char *s = ms_strbuf_cstr(&in);
	if ((in.len == 15 && !memcmp(s, "object | object", 15)) || ms_utf8_chars(s, in.len) > 50) {
		ms_strbuf_str(b, "any[]");
	} else {
		ms_strbuf_add(b, s, in.len);
		ms_strbuf_str(b, "[]");
	}
	ms_strbuf_free(&in);
	return 0;
}

static int ts_array(struct ms_strbuf *b, const struct jv *spec)
{
	const struct jv *items = ms_hj_get(spec, "items");
	const struct jv *it = ms_hj_get(items, "type");
	int rc = 0;
	if (!items) /* 'items' not in param_spec */
		ms_strbuf_str(b, "any[]");
	else if (ms_hj_is(it, "string"))
		ms_strbuf_str(b, "string[]");
	else if (ms_hj_is(it, "number") || ms_hj_is(it, "integer"))
		ms_strbuf_str(b, "number[]");
	else if (ms_hj_is(it, "boolean"))
		ms_strbuf_str(b, "boolean[]");
	else
		rc = ts_items(b, items);
	if (!rc && ms_hj_truthy(ms_hj_get(spec, "nullable")))
		ms_strbuf_str(b, " | null");
	return rc;
}

/* The oneOf branch. The template sets has_object_variants inside a for
 * loop; Jinja scopes that assignment to the loop, so the "any" fallback it
 * guards is never taken and every variant is rendered. Whitespace is
 * Jinja's: a default is preceded by 20 spaces and " | " is followed by a
 * newline. */
static int ts_one_of(struct ms_strbuf *b, const struct jv *one)
{
	if (one->t != J_ARR)
		return 0;
	for (const struct jv *v = one->child; v; v = v->next) {
		int rc = ts_type(b, v);
		if (rc)
			return rc;
		const struct jv *d = ms_hj_get(v, "description");
		if (ms_hj_truthy(d)) {
			ms_strbuf_str(b, "// ");
			ms_hj_str(b, d);
		}
		const struct jv *def = ms_hj_get(v, "default");
		if (def) {
			ms_strbuf_str(b, "                    // default: ");
			ms_hj_dump(b, def);
		}
		if (v->next)
			ms_strbuf_str(b, " | \n");
	}
	return 0;
}

/* The object branch. In it `{{ render_typescript_type(...) }}` has no `-`,
 * so the newline and the 16 spaces of indentation before it are output. */
static int ts_object(struct ms_strbuf *b, const struct jv *spec)
{
	static const char indent16[] = "\n                ";
	const struct jv *props = ms_hj_get(spec, "properties");
	if (!ms_hj_truthy(props)) {
		ms_strbuf_str(b, "object");
		return 0;
	}
	if (props->t != J_OBJ)
		return -EINVAL;
	const struct jv *req = ms_hj_get(spec, "required");
	bool first = true;
	ms_strbuf_str(b, "{\n");
	for (const struct jv *c = props->child; c; c = c->next) {
		const struct jv *m = ms_hj_member(props, c);
		if (!m)
			continue;
		if (!first)
			ms_strbuf_str(b, ", ");
		first = false;
		ms_strbuf_add(b, c->k, c->kn);
		if (!py_in(c->k, c->kn, req))
			ms_strbuf_add(b, "?", 1);
		ms_strbuf_str(b, ": ");
		ms_strbuf_str(b, indent16);
		int rc = ts_type(b, m);
		if (rc)
			return rc;
	}
	ms_strbuf_str(b, "}");
	return 0;
}

static void ts_string(struct ms_strbuf *b, const struct jv *spec)
{
	const struct jv *en = ms_hj_get(spec, "enum");
	if (ms_hj_truthy(en)) {
		ms_strbuf_add(b, "\"", 1);
		py_join(b, en, "\" | \"");
		ms_strbuf_add(b, "\"", 1);
		return;
	}
	ms_strbuf_str(b, "string");
	if (ms_hj_truthy(ms_hj_get(spec, "nullable")))
		ms_strbuf_str(b, " | null");
}

static int ts_type(struct ms_strbuf *b, const struct jv *spec)
{
	const struct jv *type = ms_hj_get(spec, "type");
	if (ms_hj_is(type, "array"))
		return ts_array(b, spec);
	if (type && type->t == J_ARR && type->child) {
		/* a list of types, e.g. ["string", "number"] */
		if (type->child->next)
			py_join(b, type, " | ");
		else
			ms_hj_str(b, type->child);
		return 0;
	}
	if (ms_hj_truthy(ms_hj_get(spec, "oneOf")))
		return ts_one_of(b, ms_hj_get(spec, "oneOf"));
	if (ms_hj_is(type, "string"))
		ts_string(b, spec);
	else if (ms_hj_is(type, "number") || ms_hj_is(type, "integer"))
		ms_strbuf_str(b, "number");
	else if (ms_hj_is(type, "boolean"))
		ms_strbuf_str(b, "boolean");
	else if (ms_hj_is(type, "object"))
		return ts_object(b, spec);
	else
		ms_strbuf_str(b, "any");
	return 0;
}

/* One parameter of a tool: its description line, `name[?]: type`, its
 * default. */
static int ts_param(struct ms_strbuf *b, const struct jv *name, const struct jv *spec,
		    const struct jv *req)
{
	const struct jv *d = ms_hj_get(spec, "description");
	if (ms_hj_truthy(d)) {
		ms_strbuf_str(b, "// ");
		ms_hj_str(b, d);
		ms_strbuf_str(b, "\n");
	}
	ms_strbuf_add(b, name->k, name->kn);
	if (!py_in(name->k, name->kn, req))
		ms_strbuf_add(b, "?", 1);
	ms_strbuf_str(b, ": ");
	int rc = ts_type(b, spec);
	if (rc)
		return rc;
	const struct jv *def = ms_hj_get(spec, "default");
	if (def) {
		/* enum and oneOf defaults are concatenated as strings
		 * (Jinja would fail on a non-string; str() is written). */
		if (ms_hj_truthy(ms_hj_get(spec, "enum"))) {
			ms_strbuf_str(b, ", // default: ");
			ms_hj_str(b, def);
		} else if (ms_hj_truthy(ms_hj_get(spec, "oneOf"))) {
			ms_strbuf_str(b, "// default: ");
			ms_hj_str(b, def);
		} else {
			ms_strbuf_str(b, ", // default: ");
			ms_hj_dump(b, def);
		}
	}
	ms_strbuf_str(b, ",\n");
	return 0;
}

/* One tool of render_tool_namespace("functions", tools). */
static int ts_tool(struct ms_strbuf *b, const struct ms_chat_tool *t, const struct jv *params)
{
	/* The template writes "// " + tool.description unconditionally (and
	 * fails without one); a tool without a description gets no line. */
	if (t->description) {
		ms_strbuf_str(b, "// ");
		ms_strbuf_str(b, t->description);
		ms_strbuf_str(b, "\n");
	}
	ms_strbuf_str(b, "type ");
	ms_strbuf_str(b, t->name);
	ms_strbuf_str(b, " = ");
	const struct jv *props = ms_hj_get(params, "properties");
	if (!ms_hj_truthy(params) || !ms_hj_truthy(props)) {
		ms_strbuf_str(b, "() => any;\n\n");
		return 0;
	}
	if (props->t != J_OBJ)
		return -EINVAL;
	const struct jv *req = ms_hj_get(params, "required");
	ms_strbuf_str(b, "(_: {\n");
	for (const struct jv *c = props->child; c; c = c->next) {
		const struct jv *spec = ms_hj_member(props, c);
		int rc = spec ? ts_param(b, c, spec, req) : 0;
		if (rc)
			return rc;
	}
	ms_strbuf_str(b, "}) => any;\n\n");
	return 0;
}

/* ============================================================ renderer */

static bool streq(const char *a, const char *b)
{
	return a && !strcmp(a, b);
}

static bool nonempty(const char *s)
{
	return s && *s;
}

/* Tool-call arguments: the template writes `arguments|tojson`, and expects
 * them as a mapping (transformers' convention; llama.cpp parses OpenAI's
 * JSON-string arguments into one for this template). So JSON text is
 * parsed and written back as json.dumps does ({"a": 1}); text that is not
 * JSON stays a string and is written as a JSON string, as tojson would. */
static int put_arguments(struct ms_strbuf *b, const char *args)
{
	if (!args) {
		ms_strbuf_str(b, "{}");
		return 0;
	}
	struct jv *v;
	int rc = ms_hj_parse(args, strlen(args), &v, NULL, NULL);
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		ms_hj_dump_string(b, args, strlen(args));
	else
		ms_hj_dump(b, v);
	ms_hj_free(v);
	return 0;
}

static const char *const msg_roles[] = {"system", "developer", "user", "assistant", "tool"};

/* The request's own fields: counts, effort, date, tool names. */
static int check_fields(const struct ms_chat_request *req, struct ms_err *err)
{
	if (!req)
		return ms_err_set(err, -EINVAL, "harmony: no request");
	if (req->n_messages < 0 || (req->n_messages > 0 && !req->messages))
		return ms_err_set(err, -EINVAL, "harmony: messages: %d messages given without an array",
				  req->n_messages);
	if (req->n_tools < 0 || (req->n_tools > 0 && !req->tools))
		return ms_err_set(err, -EINVAL, "harmony: tools: %d tools given without an array",
				  req->n_tools);
	const char *e = req->reasoning_effort;
	if (e && !streq(e, "low") && !streq(e, "medium") && !streq(e, "high"))
		return ms_err_set(err, -EINVAL,
				  "harmony: reasoning_effort: \"%s\" is not one of low, medium, high", e);
	const char *d = req->date;
	if (d) {
		bool ok = strlen(d) == 10;
		for (int i = 0; ok && i < 10; i++)
			ok = (i == 4 || i == 7) ? d[i] == '-' : (d[i] >= '0' && d[i] <= '9');
		if (!ok)
			return ms_err_set(err, -EINVAL, "harmony: date: \"%s\" is not YYYY-MM-DD", d);
	}
	for (int i = 0; i < req->n_tools; i++)
		if (!nonempty(req->tools[i].name))
			return ms_err_set(err, -EINVAL, "harmony: tools[%d].name: missing", i);
	return 0;
}

/* What only an assistant message can get wrong: its tool calls, and
 * channel tags in its text. */
static int check_assistant(const struct ms_chat_message *m, int i, struct ms_err *err)
{
	if (m->n_tool_calls < 0 || (m->n_tool_calls > 0 && !m->tool_calls))
		return ms_err_set(err, -EINVAL, "harmony: messages[%d].tool_calls: %d calls given "
				  "without an array", i, m->n_tool_calls);
	for (int j = 0; j < m->n_tool_calls; j++)
		if (!nonempty(m->tool_calls[j].name))
			return ms_err_set(err, -EINVAL,
					  "harmony: messages[%d].tool_calls[%d].name: missing", i, j);
	/* The template refuses channel tags in content and thinking. */
	static const char *const tags[] = {"<|channel|>analysis<|message|>",
					   "<|channel|>final<|message|>"};
	for (int t = 0; t < 2; t++) {
		if (m->content && strstr(m->content, tags[t]))
			return ms_err_set(err, -EINVAL, "harmony: messages[%d].content: contains "
					  "%s; pass the analysis as reasoning", i, tags[t]);
		if (m->reasoning && strstr(m->reasoning, tags[t]))
			return ms_err_set(err, -EINVAL, "harmony: messages[%d].reasoning: contains "
					  "%s", i, tags[t]);
	}
	return 0;
}

static int check_request(const struct ms_chat_request *req, struct ms_err *err)
{
	int rc = check_fields(req, err);
	if (rc)
		return rc;
	for (int i = 0; i < req->n_messages; i++) {
		const struct ms_chat_message *m = &req->messages[i];
		bool known = false;
		for (size_t r = 0; r < sizeof(msg_roles) / sizeof(msg_roles[0]); r++)
			known |= streq(m->role, msg_roles[r]);
		if (!known)
			return ms_err_set(err, -EINVAL,
					  "harmony: messages[%d].role: \"%s\" is not one of system, developer, "
					  "user, assistant, tool", i, m->role ? m->role : "(null)");
		if (streq(m->role, "tool") && !nonempty(m->name))
			return ms_err_set(err, -EINVAL,
					  "harmony: messages[%d].name: a tool message needs the function name", i);
		if (streq(m->role, "assistant") && (rc = check_assistant(m, i, err)))
			return rc;
	}
	return 0;
}

/* build_system_message(). */
static void put_system(struct render *r, const struct ms_chat_request *req)
{
	struct ms_strbuf *b = &r->text;
	char today[16];
	const char *date = req->date;
	if (!date) {
		time_t now = time(NULL);
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(today, sizeof(today), "%Y-%m-%d", &tm);
		date = today;
	}
	tpl(r, "<|start|>system<|message|>");
	ms_strbuf_str(b, req->model_identity ? req->model_identity
				     : "You are ChatGPT, a large language model trained by OpenAI.");
	ms_strbuf_str(b, "\nKnowledge cutoff: 2024-06\nCurrent date: ");
	ms_strbuf_str(b, date);
	ms_strbuf_str(b, "\n\nReasoning: ");
	ms_strbuf_str(b, req->reasoning_effort ? req->reasoning_effort : "medium");
	ms_strbuf_str(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included "
			 "for every message.");
	/* Newest revision: only with tools (the first one always wrote it). */
	if (req->n_tools > 0)
		ms_strbuf_str(b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
	tpl(r, "<|end|>");
}

/* Tool i of the functions namespace, its parameters parsed from JSON. */
static int put_tool(struct ms_strbuf *b, const struct ms_chat_request *req, int i,
		    struct ms_err *err)
{
	const struct ms_chat_tool *t = &req->tools[i];
	struct jv *params = NULL;
	if (t->parameters) {
		const char *why;
		size_t at;
		int rc = ms_hj_parse(t->parameters, strlen(t->parameters), &params, &why, &at);
		if (rc == -ENOMEM)
			return ms_err_set(err, rc, "harmony: out of memory");
		if (rc)
			return ms_err_set(err, rc, "harmony: tools[%d].parameters: not JSON (%s "
					  "at byte %zu)", i, why, at);
	}
	int rc = ts_tool(b, t, params);
	ms_hj_free(params);
	if (rc == -ENOMEM)
		return ms_err_set(err, rc, "harmony: out of memory");
	if (rc)
		return ms_err_set(err, rc, "harmony: tools[%d].parameters: a \"properties\" "
				  "is not an object", i);
	return 0;
}

/* The "# Response Formats" section (the harmony guide's structured
 * output): the format's name, its description as a comment, the schema. */
static void put_response_format(struct ms_strbuf *b, const struct ms_chat_request *req)
{
	ms_strbuf_str(b, "# Response Formats\n\n## ");
	ms_strbuf_str(b, nonempty(req->response_format_name) ? req->response_format_name : "response");
	ms_strbuf_str(b, "\n\n");
	if (nonempty(req->response_format_desc)) {
		ms_strbuf_str(b, "// ");
		ms_strbuf_str(b, req->response_format_desc);
		ms_strbuf_str(b, "\n");
	}
	ms_strbuf_str(b, req->response_format);
}

/* The developer message: the first message's content when it is a system
 * or developer message, then the tools, then the response format. */
static int put_developer(struct render *r, const struct ms_chat_request *req, const char *instr,
			 struct ms_err *err)
{
	struct ms_strbuf *b = &r->text;
	bool fmt = nonempty(req->response_format);
	if (!nonempty(instr) && req->n_tools == 0 && !fmt)
		return 0;
	tpl(r, "<|start|>developer<|message|>");
	if (nonempty(instr)) {
		ms_strbuf_str(b, "# Instructions\n\n");
		ms_strbuf_str(b, instr);
		ms_strbuf_str(b, "\n\n");
	}
	if (req->n_tools > 0) {
		ms_strbuf_str(b, "# Tools\n\n## functions\n\nnamespace functions {\n\n");
		for (int i = 0; i < req->n_tools; i++) {
			int rc = put_tool(b, req, i, err);
			if (rc)
				return rc;
		}
		ms_strbuf_str(b, "} // namespace functions");
		if (fmt)
			ms_strbuf_str(b, "\n\n");
	}
	if (fmt)
		put_response_format(b, req);
	tpl(r, "<|end|>");
	return 0;
}

/* An assistant message with tool calls. The analysis (reasoning, or the
 * content when there is no reasoning: the template's reading of content in
 * a tool-call turn) is kept only while no later assistant message without
 * tool calls exists: once a final answer follows, it is dropped. */
static int put_tool_calls(struct render *r, const struct ms_chat_message *m, bool later_final)
{
	struct ms_strbuf *b = &r->text;
	const char *analysis = nonempty(m->reasoning) ? m->reasoning : m->content;
	if (nonempty(analysis) && !later_final) {
		tpl(r, "<|start|>assistant<|channel|>analysis<|message|>");
		ms_strbuf_str(b, analysis);
		tpl(r, "<|end|>");
	}
	/* Both reasoning and content: the template refuses this; here the
	 * content is the user-visible preamble the model wrote on the
	 * commentary channel, and is rendered back there. */
	if (nonempty(m->reasoning) && nonempty(m->content)) {
		tpl(r, "<|start|>assistant<|channel|>commentary<|message|>");
		ms_strbuf_str(b, m->content);
		tpl(r, "<|end|>");
	}
	/* The template renders only tool_calls[0]; every call is rendered
	 * here, each as its own message (the same text for one call). */
	for (int j = 0; j < m->n_tool_calls; j++) {
		tpl(r, "<|start|>assistant to=functions.");
		ms_strbuf_str(b, m->tool_calls[j].name);
		tpl(r, "<|channel|>commentary json<|message|>");
		int rc = put_arguments(b, m->tool_calls[j].arguments);
		if (rc)
			return rc;
		tpl(r, "<|call|>");
	}
	return 0;
}

/* A tool result. The template writes content|tojson: a string result
 * becomes a quoted JSON string (NULL: null). The name is the message's
 * (the template: the last call's). */
static void put_tool_result(struct render *r, const struct ms_chat_message *m)
{
	tpl(r, "<|start|>functions.");
	ms_strbuf_str(&r->text, m->name);
	tpl(r, " to=assistant<|channel|>commentary<|message|>");
	if (m->content)
		ms_hj_dump_string(&r->text, m->content, strlen(m->content));
	else
		ms_strbuf_str(&r->text, "null");
	tpl(r, "<|end|>");
}

/* Message i of the conversation (after the system/developer one). */
static int put_message(struct render *r, const struct ms_chat_request *req, int i,
		       struct ms_err *err)
{
	const struct ms_chat_message *m = &req->messages[i];
	if (streq(m->role, "assistant") && m->n_tool_calls > 0) {
		bool later_final = false;
		for (int j = i + 1; j < req->n_messages; j++)
			later_final |= streq(req->messages[j].role, "assistant") &&
				       req->messages[j].n_tool_calls == 0;
		int rc = put_tool_calls(r, m, later_final);
		return rc ? ms_err_set(err, rc, "harmony: out of memory") : 0;
	}
	if (streq(m->role, "assistant")) {
		/* Earlier turns' analysis is never rendered. A NULL content
		 * is "" (the template would fail). */
		tpl(r, "<|start|>assistant<|channel|>final<|message|>");
		ms_strbuf_str(&r->text, m->content ? m->content : "");
		tpl(r, "<|end|>");
	} else if (streq(m->role, "tool")) {
		put_tool_result(r, m);
	} else if (streq(m->role, "user")) {
		tpl(r, "<|start|>user<|message|>");
		ms_strbuf_str(&r->text, m->content ? m->content : "");
		tpl(r, "<|end|>");
	}
	/* A system or developer message after the first is skipped, as the
	 * template's loop skips it. */
	return 0;
}

static int render(struct render *r, const struct ms_chat_request *req, struct ms_err *err)
{
	put_system(r, req);
	int first = 0;
	const char *instr = NULL;
	if (req->n_messages > 0 && (streq(req->messages[0].role, "system") ||
				    streq(req->messages[0].role, "developer"))) {
		instr = req->messages[0].content;
		first = 1;
	}
	int rc = put_developer(r, req, instr, err);
	for (int i = first; i < req->n_messages && !rc; i++)
		rc = put_message(r, req, i, err);
	if (rc)
		return rc;
	tpl(r, "<|start|>assistant");
	if (r->text.oom)
		return ms_err_set(err, -ENOMEM, "harmony: out of memory");
	return 0;
}

int ms_harmony_render_ex(const struct ms_chat_request *req, char **out, size_t *len,
			 struct ms_harmony_span **specials, size_t *n_specials,
			 struct ms_err *err)
{
	*out = NULL;
	if (len)
		*len = 0;
	if (specials)
		*specials = NULL;
	if (n_specials)
		*n_specials = 0;
	int rc = check_request(req, err);
	if (rc)
		return rc;
	struct render r = {0};
	if ((rc = render(&r, req, err))) {
		ms_strbuf_free(&r.text);
		free(r.sp);
		return rc;
	}
	if (len)
		*len = r.text.len;
	*out = ms_strbuf_take(&r.text); /* not NULL: the text is never empty */
	if (specials) {
		*specials = r.sp;
		r.sp = NULL;
	}
	if (n_specials)
		*n_specials = r.n_sp;
	free(r.sp);
	return 0;
}

int ms_harmony_render(const struct ms_chat_request *req, char **out, size_t *len,
		      struct ms_err *err)
{
	return ms_harmony_render_ex(req, out, len, NULL, NULL, err);
}
