/*
 * responses-request.c: POST /v1/responses into a chat request (see
 * request.h's ms_req_responses). The Responses items become the chat
 * messages the harmony renderer already takes, so both endpoints render
 * the same prompt for the same conversation:
 *
 *   instructions                   a developer message, first
 *   message (role, content)        that message; content a string or its
 *                                  input_text / output_text parts joined
 *   reasoning (content | summary)  the reasoning of the assistant turn that
 *                                  follows it (kept by the renderer while a
 *                                  tool-calling sequence lasts)
 *   function_call                  a tool call of an assistant message
 *                                  (calls in a row: one message)
 *   function_call_output           a tool message, named by its call_id
 *
 * Items of hosted tools (web_search_call, local_shell_call, ...) and item
 * references have nothing to render and are skipped. Each rendered item's
 * fields are checked here, refusals naming input[i]... (its index in this
 * request's input), before chat sees the messages made of them.
 */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-json.h"
#include "ms-strbuf.h"
#include "request-int.h"

#define refuse ms_req_refuse
#define jget ms_req_jget

/* What the items build: the chat messages, and the reasoning waiting for
 * the assistant turn it belongs to. */
struct conv {
	cJSON *msgs;
	char *reasoning;           /* malloc'd */
	cJSON *calls;              /* the open assistant message's tool_calls, or NULL */
	int n_prev;                /* the items of previous_response_id, first */
	char at[48];               /* the item's path: input[i] */
};

static const char *str_of(const cJSON *o, const char *k)
{
	const cJSON *v = jget(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The part types whose text is read ("refusal" holds its own key), and
 * the API's that this model cannot read. */
static const char *const text_parts[] = {"input_text", "output_text", "text", "summary_text",
					 "reasoning_text", "refusal"};
static const char *const media_parts[] = {"input_image", "input_file", "input_audio"};

/* Part j of <at>.<field>: its text. */
static int part_of(const cJSON *p, const char *at, const char *field, int j, const char **out,
		   struct ms_req_error *e)
{
	if (!cJSON_IsObject(p))
		return ms_req_wrong_type(e, p, "an object", "%s.%s[%d]", at, field, j);
	const cJSON *ty = jget(p, "type");
	if (!ty)
		return ms_req_missing(e, "%s.%s[%d].type", at, field, j);
	if (!cJSON_IsString(ty))
		return ms_req_wrong_type(e, ty, "a string", "%s.%s[%d].type", at, field, j);
	for (int k = 0; k < 3; k++)
		if (!strcmp(ty->valuestring, media_parts[k]))
			return ms_req_bad_value(e, ty, "content parts of this type are not supported by "
						"this model (it reads text only: input_text, output_text)",
						"%s.%s[%d].type", at, field, j);
	int k = 0;
	while (k < 6 && strcmp(ty->valuestring, text_parts[k]))
		k++;
	if (k == 6)
		return ms_req_bad_value(e, ty, "supported values are \"input_text\", \"output_text\", "
					"\"refusal\", \"summary_text\" and \"reasoning_text\"",
					"%s.%s[%d].type", at, field, j);
	const char *key = k == 5 ? "refusal" : "text";
	const cJSON *t = jget(p, key);
	if (!t)
		return ms_req_missing(e, "%s.%s[%d].%s", at, field, j, key);
	if (!cJSON_IsString(t))
		return ms_req_wrong_type(e, t, "a string", "%s.%s[%d].%s", at, field, j, key);
	*out = t->valuestring;
	return 0;
}

/* <at>.<field> v: a string, or a list of text parts joined; *out malloc'd. */
static int parts_text(const cJSON *v, const char *at, const char *field, char **out,
		      struct ms_req_error *e)
{
	*out = NULL;
	if (cJSON_IsString(v))
		return (*out = strdup(v->valuestring)) ? 0 : ms_req_oom(e);
	if (!cJSON_IsArray(v))
		return ms_req_wrong_type(e, v, "a string or a list of content parts", "%s.%s", at, field);
	struct ms_strbuf b = {0};
	const cJSON *p;
	int j = 0, rc;
	cJSON_ArrayForEach(p, v) {
		const char *t;
		if ((rc = part_of(p, at, field, j++, &t, e))) {
			ms_strbuf_free(&b);
			return rc;
		}
		ms_strbuf_str(&b, t);
	}
	return (*out = ms_strbuf_take(&b)) ? 0 : ms_req_oom(e);
}

/* A new chat message at the end; the open assistant message's calls end. */
static cJSON *add_msg(struct conv *c, const char *role, const char *content)
{
	c->calls = NULL;
	return ms_req_push_message(c->msgs, role, content);
}

/* The waiting reasoning onto assistant message m. */
static void take_reasoning(struct conv *c, cJSON *m)
{
	if (c->reasoning)
		cJSON_AddStringToObject(m, "reasoning_content", c->reasoning);
	free(c->reasoning);
	c->reasoning = NULL;
}

/* A string field of the item: required (a missing or wrong one refused
 * by its path), or NULL when absent and not required. */
static int item_str(const cJSON *it, const char *at, const char *k, bool required, const char **out,
		    struct ms_req_error *e)
{
	const cJSON *v = jget(it, k);
	*out = NULL;
	if (!v)
		return required ? ms_req_missing(e, "%s.%s", at, k) : 0;
	if (!cJSON_IsString(v))
		return ms_req_wrong_type(e, v, "a string", "%s.%s", at, k);
	*out = v->valuestring;
	return 0;
}

static int item_message(struct conv *c, const cJSON *it, struct ms_req_error *e)
{
	static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
	const char *role;
	int r = 0, rc = item_str(it, c->at, "role", true, &role, e);
	if (rc)
		return rc;
	while (roles[r] && strcmp(roles[r], role))
		r++;
	if (!roles[r])
		return ms_req_bad_value(e, jget(it, "role"), "supported values are \"user\", \"assistant\", "
					"\"system\" and \"developer\"", "%s.role", c->at);
	const cJSON *content = jget(it, "content");
	if (!content)
		return ms_req_missing(e, "%s.content", c->at);
	char *text;
	if ((rc = parts_text(content, c->at, "content", &text, e)))
		return rc;
	cJSON *m = add_msg(c, role, text);
	free(text);
	if (!m)
		return ms_req_oom(e);
	if (!strcmp(role, "assistant"))
		take_reasoning(c, m);
	return 0;
}

static int item_reasoning(struct conv *c, const cJSON *it, struct ms_req_error *e)
{
	char *text = NULL, *sum = NULL;
	const cJSON *ct = jget(it, "content"), *sm = jget(it, "summary");
	int rc = ct ? parts_text(ct, c->at, "content", &text, e) : 0;
	if (!rc && sm)
		rc = parts_text(sm, c->at, "summary", &sum, e);
	if (!rc && (!text || !*text)) { /* no content text: the summary's */
		free(text);
		text = sum;
		sum = NULL;
	}
	free(sum);
	if (rc || !text || !*text) { /* only encrypted_content, or nothing: nothing to render */
		free(text);
		return rc;
	}
	free(c->reasoning); /* two in a row: the later one */
	c->reasoning = text;
	return 0;
}

static int item_call(struct conv *c, const cJSON *it, struct ms_req_error *e)
{
	const char *name, *id, *args;
	int rc;
	if ((rc = item_str(it, c->at, "call_id", true, &id, e)) ||
	    (rc = item_str(it, c->at, "name", true, &name, e)) ||
	    (rc = item_str(it, c->at, "arguments", true, &args, e)))
		return rc;
	if (!c->calls) {
		cJSON *m = add_msg(c, "assistant", NULL);
		if (!m)
			return ms_req_oom(e);
		take_reasoning(c, m);
		if (!(c->calls = cJSON_AddArrayToObject(m, "tool_calls")))
			return ms_req_oom(e);
	}
	cJSON *tc = cJSON_CreateObject(), *fn;
	cJSON_AddStringToObject(tc, "id", id);
	cJSON_AddStringToObject(tc, "type", "function");
	fn = cJSON_AddObjectToObject(tc, "function");
	cJSON_AddStringToObject(fn, "name", name);
	cJSON_AddStringToObject(fn, "arguments", args);
	ms_json_push(c->calls, tc);
	return 0;
}

static int item_output(struct conv *c, const cJSON *it, struct ms_req_error *e)
{
	const char *id;
	int rc = item_str(it, c->at, "call_id", true, &id, e);
	if (rc)
		return rc;
	const cJSON *out = jget(it, "output");
	if (!out)
		return ms_req_missing(e, "%s.output", c->at);
	char *text;
	if ((rc = parts_text(out, c->at, "output", &text, e)))
		return rc;
	cJSON *m = add_msg(c, "tool", text);
	free(text);
	if (!m)
		return ms_req_oom(e);
	cJSON_AddStringToObject(m, "tool_call_id", id);
	return 0;
}

/* One item; i its index in the conversation (previous_response_id's
 * items, then input's). */
static int item_of(struct conv *c, const cJSON *it, int i, struct ms_req_error *e)
{
	if (i < c->n_prev)
		snprintf(c->at, sizeof(c->at), "previous_response_id");
	else
		snprintf(c->at, sizeof(c->at), "input[%d]", i - c->n_prev);
	if (!cJSON_IsObject(it))
		return ms_req_wrong_type(e, it, "an object (an input item)", "%s", c->at);
	const char *type;
	int rc = item_str(it, c->at, "type", false, &type, e);
	if (rc)
		return rc;
	if (!type || !strcmp(type, "message"))
		return item_message(c, it, e);
	if (!strcmp(type, "reasoning"))
		return item_reasoning(c, it, e);
	if (!strcmp(type, "function_call"))
		return item_call(c, it, e);
	if (!strcmp(type, "function_call_output"))
		return item_output(c, it, e);
	return 0; /* hosted tools' calls and outputs, item references: nothing to render */
}

/* The conversation's items: prev's, then "input" (a string is one user
 * message), into r->items. */
static int items_field(const cJSON *req, const cJSON *prev, struct ms_req_gen *r,
		       struct ms_req_error *e)
{
	const cJSON *in = jget(req, "input");
	if (!in || (!cJSON_IsString(in) && !cJSON_IsArray(in)))
		return refuse(e, "input", in, "\"input\" must be a string or a list of items");
	r->items = prev ? cJSON_Duplicate(prev, true) : cJSON_CreateArray();
	if (!r->items)
		return ms_req_oom(e);
	if (cJSON_IsArray(in)) {
		const cJSON *it;
		cJSON_ArrayForEach(it, in)
			ms_json_push(r->items, cJSON_Duplicate(it, true));
		return 0;
	}
	cJSON *m = cJSON_CreateObject(), *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "type", "input_text");
	cJSON_AddStringToObject(p, "text", in->valuestring);
	cJSON_AddStringToObject(m, "type", "message");
	cJSON_AddStringToObject(m, "role", "user");
	ms_json_push(cJSON_AddArrayToObject(m, "content"), p);
	return ms_json_push(r->items, m) ? 0 : ms_req_oom(e);
}

static int messages_of(const cJSON *req, struct ms_req_gen *r, cJSON *body, struct ms_req_error *e)
{
	const cJSON *in = jget(req, "input");
	struct conv c = {.msgs = cJSON_AddArrayToObject(body, "messages"),
			 .n_prev = cJSON_GetArraySize(r->items) -
				   (cJSON_IsArray(in) ? cJSON_GetArraySize(in) : 1)};
	const cJSON *ins = jget(req, "instructions");
	if (ins && !cJSON_IsString(ins))
		return refuse(e, "instructions", ins, "\"instructions\" must be a string");
	if (ins && !add_msg(&c, "developer", ins->valuestring))
		return ms_req_oom(e);
	int i = 0, rc = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, r->items) {
		if ((rc = item_of(&c, it, i++, e)))
			break;
	}
	free(c.reasoning); /* none followed it */
	if (!rc && !cJSON_GetArraySize(c.msgs))
		return refuse(e, "input", NULL, "\"input\" holds no message (and there are no "
			      "\"instructions\")");
	return rc;
}

/* ---- tools, tool_choice ---- */

/* The API's tool types other than function: hosted tools (and Codex's
 * namespace and custom tools) that this server cannot run. Clients such as
 * Codex send them with every request, so they are ignored (the server
 * logs the first), not refused; any other type is. */
static bool hosted_tool(const char *type)
{
	static const char *const hosted[] = {"file_search", "computer_use_preview", "computer_use",
					     "computer", "code_interpreter", "image_generation", "mcp",
					     "local_shell", "shell", "apply_patch", "custom",
					     "namespace", "tool_search"};
	if (!strncmp(type, "web_search", strlen("web_search")))
		return true;
	for (size_t k = 0; k < sizeof(hosted) / sizeof(hosted[0]); k++)
		if (!strcmp(type, hosted[k]))
			return true;
	return false;
}

/* A function tool (flat, or chat's nested form) as chat's; 0 when the tool
 * is a hosted one (ignored). */
static int tool_of(const cJSON *t, int i, cJSON *out, struct ms_req_gen *r, struct ms_req_error *e)
{
	if (!cJSON_IsObject(t))
		return ms_req_wrong_type(e, t, "an object", "tools[%d]", i);
	const cJSON *ty = jget(t, "type");
	if (!ty)
		return ms_req_missing(e, "tools[%d].type", i);
	if (!cJSON_IsString(ty))
		return ms_req_wrong_type(e, ty, "a string", "tools[%d].type", i);
	if (strcmp(ty->valuestring, "function")) {
		if (!hosted_tool(ty->valuestring))
			return ms_req_bad_value(e, ty, "supported values are \"function\" (and the API's "
						"hosted tools, which this server ignores)", "tools[%d].type", i);
		if (!r->ignored_tool)
			r->ignored_tool = ty->valuestring;
		return 0;
	}
	const cJSON *fn = jget(t, "function");
	char at[48];
	if (fn && !cJSON_IsObject(fn))
		return ms_req_wrong_type(e, fn, "an object", "tools[%d].function", i);
	snprintf(at, sizeof(at), fn ? "tools[%d].function" : "tools[%d]", i);
	fn = fn ? fn : t;
	int rc = ms_req_check_function(fn, at, e);
	if (rc)
		return rc;
	cJSON *o = cJSON_CreateObject(), *f;
	cJSON_AddStringToObject(o, "type", "function");
	f = cJSON_AddObjectToObject(o, "function");
	cJSON_AddStringToObject(f, "name", jget(fn, "name")->valuestring);
	const char *keys[] = {"description", "parameters", "strict"};
	for (int k = 0; k < 3; k++)
		if (jget(fn, keys[k]))
			ms_json_put(f, keys[k], cJSON_Duplicate(jget(fn, keys[k]), true));
	ms_json_push(out, o);
	return 1;
}

static int tool_choice_check(const cJSON *req, const cJSON *tools, bool *none,
			     struct ms_req_error *e)
{
	const cJSON *tc = jget(req, "tool_choice");
	*none = false;
	if (!tc)
		return 0;
	if (cJSON_IsString(tc)) {
		if (!strcmp(tc->valuestring, "none"))
			*none = true;
		else if (strcmp(tc->valuestring, "auto") && strcmp(tc->valuestring, "required"))
			return refuse(e, "tool_choice", tc, "\"tool_choice\" must be \"auto\", "
				      "\"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
		return 0;
	}
	const char *type = str_of(tc, "type"), *name = str_of(tc, "name");
	if (!name && jget(tc, "function"))
		name = str_of(jget(tc, "function"), "name");
	if (type && !strcmp(type, "allowed_tools"))
		return 0;
	if (!type || strcmp(type, "function") || !name)
		return refuse(e, "tool_choice", tc, "\"tool_choice\" must be \"auto\", \"none\", "
			      "\"required\" or {\"type\": \"function\", \"name\": ...}");
	if (!ms_req_has_tool(tools, name))
		return refuse(e, "tool_choice", NULL, "tool_choice names the function \"%s\", which "
			      "is not among the function tools", name);
	return 0;
}

/* A tool_choice that forces a call, in chat's form for its parser. */
static int chat_tool_choice(const cJSON *req, cJSON *body)
{
	const cJSON *tc = jget(req, "tool_choice");
	const char *name = tc ? str_of(tc, "name") : NULL;
	if (!name && tc && jget(tc, "function"))
		name = str_of(jget(tc, "function"), "name");
	if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) {
		cJSON_AddStringToObject(body, "tool_choice", "required");
	} else if (name && !strcmp(str_of(tc, "type") ? str_of(tc, "type") : "", "function")) {
		ms_req_named_choice(body, name); /* a failure is counted (ms_json_failures) */
	}
	return 0;
}

static int tools_of(const cJSON *req, struct ms_req_gen *r, cJSON *body, struct ms_req_error *e)
{
	const cJSON *tools = jget(req, "tools"), *t;
	if (tools && !cJSON_IsArray(tools))
		return refuse(e, "tools", tools, "\"tools\" must be a list");
	cJSON *out = cJSON_CreateArray();
	int i = 0, rc = 0;
	cJSON_ArrayForEach(t, tools) {
		if ((rc = tool_of(t, i++, out, r, e)) < 0)
			break;
	}
	bool none = false;
	if (rc >= 0 && (rc = tool_choice_check(req, out, &none, e)) >= 0 && !none &&
	    cJSON_GetArraySize(out)) {
		ms_json_put(body, "tools", out);
		return chat_tool_choice(req, body);
	}
	cJSON_Delete(out);
	return rc < 0 ? rc : 0;
}

/* ---- the other fields ---- */

static int reasoning_of(const cJSON *req, cJSON *body, struct ms_req_error *e)
{
	const cJSON *rs = jget(req, "reasoning");
	if (!rs)
		return 0;
	if (!cJSON_IsObject(rs))
		return refuse(e, "reasoning", rs, "\"reasoning\" must be an object");
	const cJSON *ef = jget(rs, "effort");
	if (!ef)
		return 0;
	const char *to = cJSON_IsString(ef) ? ms_req_effort(ef->valuestring) : NULL;
	if (to)
		return cJSON_AddStringToObject(body, "reasoning_effort", to) ? 0 : ms_req_oom(e);
	return refuse(e, "reasoning.effort", ef, "\"reasoning.effort\" must be " MS_REQ_EFFORTS);
}

/* "text.format": the chat body's response_format of the same meaning
 * (json_schema's name, schema and strict sit flat in the format). */
static int text_format_of(const cJSON *req, cJSON *body, struct ms_req_error *e)
{
	const cJSON *tx = jget(req, "text"), *fmt = tx ? jget(tx, "format") : NULL;
	if (tx && !cJSON_IsObject(tx))
		return refuse(e, "text", tx, "\"text\" must be an object");
	if (!fmt)
		return 0;
	const char *type = str_of(fmt, "type");
	if (!cJSON_IsObject(fmt) || !type || (strcmp(type, "text") && strcmp(type, "json_object") &&
					      strcmp(type, "json_schema")))
		return refuse(e, "text.format", cJSON_IsObject(fmt) ? jget(fmt, "type") : fmt,
			      "\"text.format\" must be {\"type\": \"text\"}, {\"type\": \"json_object\"} "
			      "or {\"type\": \"json_schema\", \"name\", \"schema\", \"strict\"}");
	if (!strcmp(type, "text"))
		return 0;
	cJSON *rf = cJSON_AddObjectToObject(body, "response_format");
	if (!rf || !cJSON_AddStringToObject(rf, "type", type))
		return ms_req_oom(e);
	if (!strcmp(type, "json_object"))
		return 0;
	const cJSON *schema = jget(fmt, "schema");
	if (!schema)
		return refuse(e, "text.format.schema", NULL, "\"text.format\" of type json_schema needs "
			      "\"schema\"");
	cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
	if (!js || !ms_json_put(js, "schema", cJSON_Duplicate(schema, true)))
		return ms_req_oom(e);
	static const char *const keys[] = {"name", "description", "strict"};
	for (int k = 0; k < 3; k++)
		if (jget(fmt, keys[k]) && !ms_json_put(js, keys[k],
								 cJSON_Duplicate(jget(fmt, keys[k]), true)))
			return ms_req_oom(e);
	return 0;
}

/* Sampling and length: the chat fields of the same meaning. */
static int params_of(const cJSON *req, struct ms_req_gen *r, cJSON *body, struct ms_req_error *e)
{
	static const char *const from[] = {"max_output_tokens", "temperature", "top_p", "stream"};
	static const char *const to[] = {"max_tokens", "temperature", "top_p", "stream"};
	for (int k = 0; k < 4; k++)
		if (jget(req, from[k]))
			ms_json_put(body, to[k], cJSON_Duplicate(jget(req, from[k]), true));
	const cJSON *st = jget(req, "store"), *prev = jget(req, "previous_response_id");
	const cJSON *bg = jget(req, "background");
	if (st && !cJSON_IsBool(st))
		return refuse(e, "store", st, "\"store\" must be true or false");
	if (bg && !cJSON_IsBool(bg))
		return refuse(e, "background", bg, "\"background\" must be true or false");
	r->background = cJSON_IsTrue(bg);
	if (prev && !cJSON_IsString(prev))
		return refuse(e, "previous_response_id", prev, "\"previous_response_id\" must be a "
			      "string");
	r->store = !st || cJSON_IsTrue(st);
	const cJSON *mo = jget(req, "max_output_tokens");
	if (mo && (!cJSON_IsNumber(mo) || mo->valuedouble < 1))
		return refuse(e, "max_output_tokens", mo, "\"max_output_tokens\" must be an integer "
			      ">= 1");
	return 0;
}

/* The chat parser's refusal, named by the Responses field. Items and
 * tools were checked here first, so what chat still refuses of them
 * (a strict tool's schema the grammar cannot hold, the rendered prompt)
 * is named by the field alone: chat's indices are not the request's. */
static void rename_param(struct ms_req_error *e)
{
	static const char *const from[] = {"messages", "max_tokens", "reasoning_effort",
					   "response_format", "response_format.json_schema.schema",
					   "tools"};
	static const char *const to[] = {"input", "max_output_tokens", "reasoning.effort",
					 "text.format", "text.format.schema", "tools"};
	for (int k = 0; e->param && k < 6; k++) {
		size_t n = strlen(from[k]);
		if (!strncmp(e->param, from[k], n) && (!e->param[n] || (k == 0 || k == 5))) {
			e->param = to[k];
			break;
		}
	}
}

int ms_req_responses(const struct ms_req_model *m, cJSON *req, const cJSON *prev,
		     struct ms_req_gen **out, struct ms_req_error *e)
{
	*out = NULL;
	struct ms_req_gen tmp = {0};
	/* a field lost to a failed allocation would make another request (a
	 * default max_tokens, a conversation without a message, a refusal of
	 * what the client did send): out of memory, whatever came of it */
	unsigned long f0 = ms_json_failures();
	cJSON *body = cJSON_CreateObject();
	int rc = body ? 0 : ms_req_oom(e);
	if (!rc)
		rc = params_of(req, &tmp, body, e);
	if (!rc)
		rc = items_field(req, prev, &tmp, e);
	if (!rc)
		rc = messages_of(req, &tmp, body, e);
	if (!rc)
		rc = tools_of(req, &tmp, body, e);
	if (!rc)
		rc = reasoning_of(req, body, e);
	if (!rc)
		rc = text_format_of(req, body, e);
	if (ms_json_failures() != f0)
		rc = ms_req_oom(e);
	if (!rc && (rc = ms_req_chat(m, body, out, e)))
		rename_param(e);
	else if (rc)
		cJSON_Delete(body);
	if (rc) {
		cJSON_Delete(tmp.items);
		cJSON_Delete(req);
		return rc;
	}
	struct ms_req_gen *r = *out;
	r->responses = true;
	r->store = tmp.store;
	r->background = tmp.background;
	r->items = tmp.items;
	r->rsp = req;
	r->ignored_tool = tmp.ignored_tool; /* points into req, now r's */
	return 0;
}
