/*
 * messages-request.c: POST /v1/messages (Anthropic's Messages API) into
 * the chat request of the same conversation (request.h's ms_req_messages),
 * so that both APIs render the same prompt on the same harmony renderer:
 *
 *   system (a string or text blocks)   the system message, first
 *   user: text blocks                  a user message (text blocks in a
 *                                      row: one message, joined as chat
 *                                      joins content parts)
 *   user: tool_result                  a tool message, its function named
 *                                      by the tool_use its tool_use_id names
 *   assistant: thinking                the message's reasoning (from the
 *                                      signature when it is ours: it holds
 *                                      the whole analysis even when the
 *                                      answer showed it "omitted")
 *   assistant: text, tool_use          its content and tool calls
 *   role "system" inside messages      a user message where it stands
 *                                      (harmony's template keeps only the
 *                                      first system message; in place, it
 *                                      keeps the cached prefix valid)
 *
 * redacted_thinking and the blocks of Anthropic's server tools have
 * nothing to render and are skipped. Fields are checked here, each refusal
 * naming its Messages path (messages[i].content[j].tool_use_id), before
 * chat sees the messages made of them.
 */
#include "request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages-answer.h"
#include "ms-json.h"
#include "ms-strbuf.h"
#include "request-int.h"

#define refuse ms_req_refuse
#define jget ms_req_jget

/* What the messages build: the chat messages and the tool_use ids seen. */
struct conv {
	cJSON *msgs;
	cJSON *names;          /* {tool_use id: function name} */
	cJSON *user;           /* the open user message's content parts, or NULL */
	char at[48];           /* messages[i] */
};

static int str_field(const cJSON *o, const char *k, bool required, const char **out,
		     struct ms_req_error *e, const char *at)
{
	const cJSON *v = jget(o, k);
	*out = NULL;
	if (!v)
		return required ? ms_req_missing(e, "%s.%s", at, k) : 0;
	if (!cJSON_IsString(v))
		return ms_req_wrong_type(e, v, "a string", "%s.%s", at, k);
	*out = v->valuestring;
	return 0;
}

/* A block's "type" at path at. */
static int block_type(const cJSON *b, const char *at, const char **type, struct ms_req_error *e)
{
	if (!cJSON_IsObject(b))
		return ms_req_wrong_type(e, b, "an object (a content block)", "%s", at);
	return str_field(b, "type", true, type, e, at);
}

/* The media this model cannot read: refused by name, not ignored. */
static bool media_block(const char *type)
{
	return !strcmp(type, "image") || !strcmp(type, "document") || !strcmp(type, "search_result") ||
	       !strcmp(type, "container_upload");
}

static int media_refusal(const cJSON *ty, const char *at, struct ms_req_error *e)
{
	return ms_req_bad_value(e, ty, "content blocks of this type are not supported by this model "
				"(it reads text only: send \"text\" blocks)", "%s.type", at);
}

/* A tool result's block other than text onto t as the text the model
 * reads; false when it has none. The agent's own tool made it (Claude
 * Code's Read of an image): refused, it would stop the conversation for
 * good, as every later turn sends it again, so the model is told what it
 * cannot see instead. */
static bool result_block(const cJSON *b, const char *type, struct ms_strbuf *t)
{
	if (!strcmp(type, "tool_reference")) { /* a tool search's find: every tool is shown */
		const cJSON *n = jget(b, "tool_name");
		ms_strbuf_str(t, cJSON_IsString(n) ? n->valuestring : "");
		ms_strbuf_str(t, "\n");
		return true;
	}
	if (!strcmp(type, "image") || !strcmp(type, "document")) {
		ms_strbuf_printf(t, "[%s omitted: this model reads text only]", type);
		return true;
	}
	return false;
}

/* A document block whose source is plain text: its text. */
static const char *text_document(const cJSON *b)
{
	const cJSON *src = jget(b, "source"), *ty = jget(src, "type"), *data = jget(src, "data");
	return cJSON_IsString(ty) && !strcmp(ty->valuestring, "text") && cJSON_IsString(data)
	       ? data->valuestring : NULL;
}

/* v at <at>: a string, or a list of text blocks joined; *out malloc'd. A
 * plain-text document is its text; in a tool result (result), tool
 * references and media become text too (result_block). */
static int text_blocks(const cJSON *v, const char *at, bool result, char **out,
		       struct ms_req_error *e)
{
	*out = NULL;
	if (cJSON_IsString(v))
		return (*out = strdup(v->valuestring)) ? 0 : ms_req_oom(e);
	if (!cJSON_IsArray(v))
		return ms_req_wrong_type(e, v, "a string or a list of text blocks", "%s", at);
	struct ms_strbuf b = {0};
	const cJSON *blk;
	int j = 0, rc = 0;
	cJSON_ArrayForEach(blk, v) {
		char bat[MS_REQ_PATH];
		const char *type, *text;
		snprintf(bat, sizeof(bat), "%s[%d]", at, j++);
		if ((rc = block_type(blk, bat, &type, e)))
			break;
		if (!strcmp(type, "document") && text_document(blk)) {
			ms_strbuf_str(&b, text_document(blk));
			continue;
		}
		if (result && result_block(blk, type, &b))
			continue;
		if (strcmp(type, "text")) {
			rc = media_block(type) ? media_refusal(jget(blk, "type"), bat, e)
			     : ms_req_bad_value(e, jget(blk, "type"), "supported values are \"text\"",
						"%s.type", bat);
			break;
		}
		if ((rc = str_field(blk, "text", true, &text, e, bat)))
			break;
		ms_strbuf_str(&b, text);
	}
	if (rc) {
		ms_strbuf_free(&b);
		return rc;
	}
	return (*out = ms_strbuf_take(&b)) ? 0 : ms_req_oom(e);
}

/* A new chat message at the end; the open user message is closed. */
static cJSON *add_msg(struct conv *c, const char *role, const char *content)
{
	c->user = NULL;
	return ms_req_push_message(c->msgs, role, content);
}

/* Text onto the open user message (a new one if none is open), as one
 * of its content parts. */
static int user_text(struct conv *c, const char *text, struct ms_req_error *e)
{
	if (!c->user) {
		cJSON *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "user");
		c->user = cJSON_AddArrayToObject(m, "content");
		if (!ms_json_push(c->msgs, m) || !c->user)
			return ms_req_oom(e);
	}
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "type", "text");
	cJSON_AddStringToObject(p, "text", text);
	return ms_json_push(c->user, p) ? 0 : ms_req_oom(e);
}

/* ---- user ---- */

static int tool_result(struct conv *c, const cJSON *b, const char *at, struct ms_req_error *e)
{
	const char *id;
	int rc = str_field(b, "tool_use_id", true, &id, e, at);
	if (rc)
		return rc;
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(c->names, id), *err = jget(b, "is_error");
	if (!name)
		return ms_req_bad_value(e, jget(b, "tool_use_id"), "no earlier tool_use block has this id",
					"%s.tool_use_id", at);
	if (err && !cJSON_IsBool(err))
		return ms_req_wrong_type(e, err, "a boolean", "%s.is_error", at);
	/* the result's text says what went wrong: is_error adds nothing the
	 * model could read */
	const cJSON *ct = jget(b, "content");
	char *text = NULL, cat[MS_REQ_PATH + 16];
	snprintf(cat, sizeof(cat), "%s.content", at);
	if (ct && (rc = text_blocks(ct, cat, true, &text, e)))
		return rc;
	cJSON *m = add_msg(c, "tool", text ? text : "");
	free(text);
	if (!m)
		return ms_req_oom(e);
	cJSON_AddStringToObject(m, "tool_call_id", id);
	cJSON_AddStringToObject(m, "name", name->valuestring);
	return 0;
}

/* Block j of the message: its path into at, its type, and for a text
 * block its text (else NULL). */
static int block_of(const struct conv *c, const cJSON *b, int j, char *at, const char **type,
		    const char **text, struct ms_req_error *e)
{
	snprintf(at, MS_REQ_PATH, "%s.content[%d]", c->at, j);
	*text = NULL;
	int rc = block_type(b, at, type, e);
	return rc || strcmp(*type, "text") ? rc : str_field(b, "text", true, text, e, at);
}

static int user_block(struct conv *c, const cJSON *b, int j, struct ms_req_error *e)
{
	char at[MS_REQ_PATH];
	const char *type, *text;
	int rc = block_of(c, b, j, at, &type, &text, e);
	if (rc)
		return rc;
	if (text)
		return user_text(c, text, e);
	if (!strcmp(type, "tool_result"))
		return tool_result(c, b, at, e);
	if (!strcmp(type, "document") && text_document(b))
		return user_text(c, text_document(b), e);
	if (media_block(type))
		return media_refusal(jget(b, "type"), at, e);
	return ms_req_bad_value(e, jget(b, "type"), "supported values for a user message are "
				"\"text\" and \"tool_result\"", "%s.type", at);
}

/* A user message, or a system one given where it stands. */
static int user_message(struct conv *c, const cJSON *content, struct ms_req_error *e)
{
	c->user = NULL; /* a new message starts a new user turn */
	if (cJSON_IsString(content))
		return user_text(c, content->valuestring, e);
	const cJSON *b;
	int j = 0, rc = 0;
	cJSON_ArrayForEach(b, content) {
		if ((rc = user_block(c, b, j++, e)))
			return rc;
	}
	return 0;
}

/* ---- assistant ---- */

/* What one assistant message's blocks build. */
struct turn {
	struct ms_strbuf text, reasoning;
	cJSON *calls;          /* chat's tool_calls, or NULL */
};

static int thinking_block(struct turn *t, const cJSON *b, const char *at, struct ms_req_error *e)
{
	const char *text, *sig;
	int rc;
	if ((rc = str_field(b, "thinking", true, &text, e, at)) ||
	    (rc = str_field(b, "signature", false, &sig, e, at)))
		return rc;
	/* ours carries the whole analysis (the text may have been omitted) */
	if (!sig || !ms_messages_unsign(sig, &t->reasoning))
		ms_strbuf_str(&t->reasoning, text);
	return 0;
}

static int tool_use_block(struct conv *c, struct turn *t, const cJSON *b, const char *at,
			  struct ms_req_error *e)
{
	const char *id, *name;
	int rc;
	if ((rc = str_field(b, "id", true, &id, e, at)) ||
	    (rc = str_field(b, "name", true, &name, e, at)))
		return rc;
	const cJSON *in = jget(b, "input");
	if (!in)
		return ms_req_missing(e, "%s.input", at);
	if (!cJSON_IsObject(in))
		return ms_req_wrong_type(e, in, "an object", "%s.input", at);
	if (!t->calls && !(t->calls = cJSON_CreateArray()))
		return ms_req_oom(e);
	cJSON *tc = cJSON_CreateObject(), *fn;
	cJSON_AddStringToObject(tc, "id", id);
	cJSON_AddStringToObject(tc, "type", "function");
	fn = cJSON_AddObjectToObject(tc, "function");
	cJSON_AddStringToObject(fn, "name", name);
	ms_json_put(fn, "arguments", cJSON_Duplicate(in, true));
	cJSON_DeleteItemFromObjectCaseSensitive(c->names, id);
	if (!ms_json_push(t->calls, tc) || !cJSON_AddStringToObject(c->names, id, name))
		return ms_req_oom(e);
	return 0;
}

/* The blocks of Anthropic's server tools (their calls and results): run by
 * Anthropic's servers, never by this one; nothing to render. */
static bool server_tool_block(const char *type)
{
	size_t n = strlen(type);
	return !strcmp(type, "server_tool_use") || !strcmp(type, "mcp_tool_use") ||
	       !strcmp(type, "mcp_tool_result") || (n > 12 && !strcmp(type + n - 12, "_tool_result"));
}

static int assistant_block(struct conv *c, struct turn *t, const cJSON *b, int j,
			   struct ms_req_error *e)
{
	char at[MS_REQ_PATH];
	const char *type, *text;
	int rc = block_of(c, b, j, at, &type, &text, e);
	if (rc)
		return rc;
	if (text) {
		ms_strbuf_str(&t->text, text);
		return 0;
	}
	if (!strcmp(type, "thinking"))
		return thinking_block(t, b, at, e);
	if (!strcmp(type, "tool_use"))
		return tool_use_block(c, t, b, at, e);
	if (!strcmp(type, "redacted_thinking") || server_tool_block(type))
		return 0;
	return ms_req_bad_value(e, jget(b, "type"), "supported values for an assistant message are "
				"\"text\", \"thinking\", \"redacted_thinking\" and \"tool_use\"",
				"%s.type", at);
}

/* The turn as one chat assistant message (none when it rendered nothing). */
static int assistant_flush(struct conv *c, struct turn *t, struct ms_req_error *e)
{
	if (t->text.oom || t->reasoning.oom)
		return ms_req_oom(e);
	if (!t->text.len && !t->reasoning.len && !t->calls)
		return 0;
	cJSON *m = add_msg(c, "assistant", t->text.len || !t->calls ? ms_strbuf_cstr(&t->text) : NULL);
	if (!m)
		return ms_req_oom(e);
	if (t->reasoning.len)
		cJSON_AddStringToObject(m, "reasoning_content", ms_strbuf_cstr(&t->reasoning));
	if (t->calls) {
		ms_json_put(m, "tool_calls", t->calls);
		t->calls = NULL;
	}
	return 0;
}

static int assistant_message(struct conv *c, const cJSON *content, struct ms_req_error *e)
{
	struct turn t = {0};
	int rc = 0, j = 0;
	if (cJSON_IsString(content)) {
		ms_strbuf_str(&t.text, content->valuestring);
	} else {
		const cJSON *b;
		cJSON_ArrayForEach(b, content) {
			if ((rc = assistant_block(c, &t, b, j++, e)))
				break;
		}
	}
	if (!rc)
		rc = assistant_flush(c, &t, e);
	ms_strbuf_free(&t.text);
	ms_strbuf_free(&t.reasoning);
	cJSON_Delete(t.calls);
	return rc;
}

/* ---- messages, system ---- */

static int message_of(struct conv *c, const cJSON *m, int i, struct ms_req_error *e)
{
	snprintf(c->at, sizeof(c->at), "messages[%d]", i);
	if (!cJSON_IsObject(m))
		return ms_req_wrong_type(e, m, "an object (a message)", "%s", c->at);
	const char *role;
	int rc = str_field(m, "role", true, &role, e, c->at);
	if (rc)
		return rc;
	const cJSON *content = jget(m, "content");
	if (!content)
		return ms_req_missing(e, "%s.content", c->at);
	if (!cJSON_IsString(content) && !cJSON_IsArray(content))
		return ms_req_wrong_type(e, content, "a string or a list of content blocks",
					 "%s.content", c->at);
	if (!strcmp(role, "user"))
		return user_message(c, content, e);
	if (!strcmp(role, "assistant")) {
		c->user = NULL;
		return assistant_message(c, content, e);
	}
	if (strcmp(role, "system"))
		return ms_req_bad_value(e, jget(m, "role"), "supported values are \"user\" and "
					"\"assistant\" (and \"system\")", "%s.role", c->at);
	char *text, at[sizeof(c->at) + 16];
	snprintf(at, sizeof(at), "%s.content", c->at);
	if ((rc = text_blocks(content, at, false, &text, e)))
		return rc;
	c->user = NULL;
	rc = user_text(c, text, e);
	c->user = NULL; /* its own turn */
	free(text);
	return rc;
}

/* Claude Code's first system block is its billing metadata, not an
 * instruction; it changes with the client's version. */
static bool billing_block(const cJSON *b)
{
	const cJSON *t = jget(b, "text");
	return cJSON_IsString(t) && !strncmp(t->valuestring, "x-anthropic-billing-header:", 27);
}

static int system_field(const cJSON *req, struct conv *c, struct ms_req_error *e)
{
	const cJSON *sys = jget(req, "system");
	if (!sys)
		return 0;
	cJSON *kept = NULL;
	if (cJSON_IsArray(sys) && cJSON_GetArraySize(sys) && billing_block(cJSON_GetArrayItem(sys, 0))) {
		if (!(kept = cJSON_Duplicate(sys, true)))
			return ms_req_oom(e);
		cJSON_DeleteItemFromArray(kept, 0);
	}
	char *text;
	int rc = text_blocks(kept ? kept : sys, "system", false, &text, e);
	cJSON_Delete(kept);
	if (rc)
		return rc;
	if (*text && !add_msg(c, "system", text))
		rc = ms_req_oom(e);
	free(text);
	return rc;
}

static int messages_field(const cJSON *req, cJSON *body, struct ms_req_error *e)
{
	const cJSON *ms = jget(req, "messages"), *m;
	if (!ms)
		return ms_req_missing(e, "messages");
	if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms))
		return refuse(e, "messages", ms, "\"messages\" must be a non-empty list");
	struct conv c = {.msgs = cJSON_AddArrayToObject(body, "messages"),
			 .names = cJSON_CreateObject()};
	int rc = c.msgs && c.names ? system_field(req, &c, e) : ms_req_oom(e), i = 0;
	cJSON_ArrayForEach(m, ms) {
		if (rc || (rc = message_of(&c, m, i++, e)))
			break;
	}
	cJSON_Delete(c.names);
	if (!rc && !cJSON_GetArraySize(c.msgs))
		return refuse(e, "messages", NULL, "\"messages\" holds nothing to answer");
	return rc;
}

/* ---- tools, tool_choice ---- */

/* A server tool's type ("web_search_20250305", "bash_20250124",
 * "text_editor_20250728", "mcp_toolset"): Anthropic runs those, not this
 * server; Claude Code and the SDKs send them, so they are skipped (the
 * server logs the first), not refused. */
static bool server_tool(const char *type)
{
	size_t n = strlen(type);
	bool dated = n > 9 && type[n - 9] == '_';
	for (size_t k = n - 8; dated && k < n; k++)
		dated = type[k] >= '0' && type[k] <= '9';
	return dated || !strcmp(type, "mcp_toolset");
}

/* tools[i] as chat's function tool: 1, or 0 for a server tool (skipped). */
static int tool_of(const cJSON *t, int i, cJSON *out, struct ms_req_gen *r, struct ms_req_error *e)
{
	char at[32];
	snprintf(at, sizeof(at), "tools[%d]", i);
	if (!cJSON_IsObject(t))
		return ms_req_wrong_type(e, t, "an object", "%s", at);
	const char *type;
	int rc = str_field(t, "type", false, &type, e, at);
	if (rc)
		return rc;
	if (type && strcmp(type, "custom")) {
		if (!server_tool(type))
			return ms_req_bad_value(e, jget(t, "type"), "supported values are \"custom\" (or "
						"absent), and Anthropic's server tools, which this server "
						"skips", "%s.type", at);
		if (!r->ignored_tool)
			r->ignored_tool = type;
		return 0;
	}
	const cJSON *sch = jget(t, "input_schema"), *keys[3] = {jget(t, "name"), jget(t, "description"),
								  jget(t, "strict")};
	if (!sch)
		return ms_req_missing(e, "%s.input_schema", at);
	cJSON *fn = cJSON_CreateObject(), *o = cJSON_CreateObject();
	static const char *const names[3] = {"name", "description", "strict"};
	for (int k = 0; k < 3; k++)
		if (keys[k])
			ms_json_put(fn, names[k], cJSON_Duplicate(keys[k], true));
	ms_json_put(fn, "parameters", cJSON_Duplicate(sch, true));
	cJSON_AddStringToObject(o, "type", "function");
	if (!ms_json_put(o, "function", fn) || !ms_json_push(out, o))
		return ms_req_oom(e);
	if ((rc = ms_req_check_function(fn, at, e))) {
		/* the schema is input_schema here */
		char *p = strstr(e->path, ".parameters");
		if (p && e->param == e->path) {
			char rest[MS_REQ_PATH];
			snprintf(rest, sizeof(rest), "%s", p + strlen(".parameters"));
			snprintf(p, sizeof(e->path) - (size_t)(p - e->path), ".input_schema%s", rest);
		}
		return rc;
	}
	return 1;
}

/* "tool_choice" in chat's terms onto body. */
static int tool_choice_of(const cJSON *req, const cJSON *tools, cJSON *body,
			  struct ms_req_error *e)
{
	const cJSON *tc = jget(req, "tool_choice");
	if (!tc)
		return 0;
	const char *type, *name;
	int rc;
	if (!cJSON_IsObject(tc))
		return ms_req_wrong_type(e, tc, "an object ({\"type\": \"auto\" | \"any\" | \"tool\" | "
					 "\"none\"})", "tool_choice");
	if ((rc = str_field(tc, "type", true, &type, e, "tool_choice")))
		return rc;
	const cJSON *dp = jget(tc, "disable_parallel_tool_use");
	if (dp && !cJSON_IsBool(dp))
		return ms_req_wrong_type(e, dp, "a boolean", "tool_choice.disable_parallel_tool_use");
	/* harmony ends the turn at a call (<|call|> stops generation): one
	 * call per answer, parallel use or not */
	if (!strcmp(type, "auto"))
		return 0;
	if (!strcmp(type, "none"))
		return cJSON_AddStringToObject(body, "tool_choice", "none") ? 0 : ms_req_oom(e);
	if (!cJSON_GetArraySize(tools))
		return ms_req_bad_value(e, jget(tc, "type"), "tool_choice forces a tool, but the request "
					"has no tools", "tool_choice.type");
	if (!strcmp(type, "any"))
		return cJSON_AddStringToObject(body, "tool_choice", "required") ? 0 : ms_req_oom(e);
	if (strcmp(type, "tool"))
		return ms_req_bad_value(e, jget(tc, "type"), "supported values are \"auto\", \"any\", "
					"\"tool\" and \"none\"", "tool_choice.type");
	if ((rc = str_field(tc, "name", true, &name, e, "tool_choice")))
		return rc;
	if (!ms_req_has_tool(tools, name))
		return ms_req_bad_value(e, jget(tc, "name"), "no tool of this name is among the tools",
					"tool_choice.name");
	return ms_req_named_choice(body, name) ? 0 : ms_req_oom(e);
}

static int tools_field(const cJSON *req, struct ms_req_gen *r, cJSON *body, struct ms_req_error *e)
{
	const cJSON *tools = jget(req, "tools"), *t;
	if (tools && !cJSON_IsArray(tools))
		return ms_req_wrong_type(e, tools, "a list of tools", "tools");
	cJSON *out = cJSON_CreateArray();
	if (!out)
		return ms_req_oom(e);
	int i = 0, rc = 0;
	cJSON_ArrayForEach(t, tools) {
		if ((rc = tool_of(t, i++, out, r, e)) < 0)
			break;
	}
	if (rc >= 0)
		rc = tool_choice_of(req, out, body, e);
	if (rc >= 0 && cJSON_GetArraySize(out))
		return ms_json_put(body, "tools", out) ? 0 : ms_req_oom(e);
	cJSON_Delete(out);
	return rc < 0 ? rc : 0;
}

/* ---- thinking, sampling ---- */

/* A whole number >= 1; floor, not a cast, since a cast of a double past
 * long long's range is undefined. */
static bool is_count(const cJSON *v)
{
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 1 &&
	       v->valuedouble == floor(v->valuedouble);
}

/* thinking and output_config.effort onto harmony's three levels:
 *   thinking disabled                 low (harmony always reasons;
 *                                     the thinking is not shown)
 *   enabled, budget_tokens < 8192     low  (Claude Code's "think": 4000)
 *   enabled, budget_tokens < 24576    medium (its "megathink": 10000)
 *   enabled, larger                   high (its "ultrathink": 31999)
 *   output_config.effort              low, medium, high; max and xhigh
 *                                     are high (it wins over the budget)
 *   none of them                      medium, harmony's default
 * Thinking blocks are shown when thinking is enabled or adaptive, with
 * their text "" under display "omitted". Enabled, the analysis also ends
 * at budget_tokens tokens (tool-force.h's reasoning budget), as
 * Anthropic's budget is the most the thinking may take. */
static int thinking_field(const cJSON *req, struct ms_req_gen *r, const char **effort,
			  struct ms_req_error *e)
{
	const cJSON *th = jget(req, "thinking");
	if (!th)
		return 0;
	const char *type, *display;
	int rc;
	if (!cJSON_IsObject(th))
		return ms_req_wrong_type(e, th, "an object", "thinking");
	if ((rc = str_field(th, "type", true, &type, e, "thinking")) ||
	    (rc = str_field(th, "display", false, &display, e, "thinking")))
		return rc;
	/* "updates" (progress notes shown, the rest hidden) is a beta: shown
	 * here, as summarized */
	if (display && strcmp(display, "summarized") && strcmp(display, "omitted") &&
	    strcmp(display, "updates"))
		return ms_req_bad_value(e, jget(th, "display"), "supported values are \"summarized\", "
					"\"omitted\" and \"updates\"", "thinking.display");
	r->thinking_omitted = display && !strcmp(display, "omitted");
	if (!strcmp(type, "disabled")) {
		*effort = "low";
		return 0;
	}
	r->thinking = true;
	if (!strcmp(type, "adaptive"))
		return 0;
	if (strcmp(type, "enabled"))
		return ms_req_bad_value(e, jget(th, "type"), "supported values are \"enabled\", "
					"\"adaptive\" and \"disabled\"", "thinking.type");
	const cJSON *bt = jget(th, "budget_tokens");
	if (!bt)
		return ms_req_missing(e, "thinking.budget_tokens");
	if (!is_count(bt))
		return ms_req_wrong_type(e, bt, "an integer >= 1", "thinking.budget_tokens");
	*effort = bt->valuedouble < 8192 ? "low" : bt->valuedouble < 24576 ? "medium" : "high";
	/* and the analysis stops there (a whole number >= 1; past any context) */
	r->reason_budget = bt->valuedouble < 1e15 ? (int64_t)bt->valuedouble : INT64_C(1000000000000000);
	return 0;
}

static int effort_field(const cJSON *req, const char **effort, cJSON *body, struct ms_req_error *e)
{
	const cJSON *oc = jget(req, "output_config");
	if (oc && !cJSON_IsObject(oc))
		return ms_req_wrong_type(e, oc, "an object", "output_config");
	const cJSON *ef = oc ? jget(oc, "effort") : NULL;
	const char *to = cJSON_IsString(ef) ? ms_req_effort(ef->valuestring) : NULL;
	if (ef && !to)
		return ms_req_bad_value(e, ef, "supported values are " MS_REQ_EFFORTS,
					"output_config.effort");
	if (to)
		*effort = to;
	if (*effort && !cJSON_AddStringToObject(body, "reasoning_effort", *effort))
		return ms_req_oom(e);
	/* structured output: output_config.format is chat's json_schema */
	const cJSON *fmt = oc ? jget(oc, "format") : NULL, *sch;
	if (!fmt)
		return 0;
	const char *type;
	int rc = cJSON_IsObject(fmt) ? str_field(fmt, "type", true, &type, e, "output_config.format")
		 : ms_req_wrong_type(e, fmt, "an object", "output_config.format");
	if (rc)
		return rc;
	if (strcmp(type, "json_schema"))
		return ms_req_bad_value(e, jget(fmt, "type"), "supported values are \"json_schema\"",
					"output_config.format.type");
	if (!(sch = jget(fmt, "schema")))
		return ms_req_missing(e, "output_config.format.schema");
	cJSON *rf = cJSON_AddObjectToObject(body, "response_format"), *js;
	cJSON_AddStringToObject(rf, "type", "json_schema");
	js = cJSON_AddObjectToObject(rf, "json_schema");
	cJSON_AddStringToObject(js, "name", "response");
	return ms_json_put(js, "schema", cJSON_Duplicate(sch, true)) ? 0 : ms_req_oom(e);
}

/* max_tokens (required: Anthropic's clients always send one), sampling,
 * stop_sequences, stream, metadata. */
static int params_field(const cJSON *req, cJSON *body, bool count, struct ms_req_error *e)
{
	const cJSON *mt = jget(req, "max_tokens"), *md = jget(req, "metadata");
	if (!mt && !count)
		return ms_req_missing(e, "max_tokens");
	if (mt && !is_count(mt))
		return ms_req_wrong_type(e, mt, "an integer >= 1", "max_tokens");
	if (md && !cJSON_IsObject(md))
		return ms_req_wrong_type(e, md, "an object", "metadata");
	static const char *const from[] = {"max_tokens", "temperature", "top_p", "top_k", "stream",
					   "stop_sequences"};
	static const char *const to[] = {"max_tokens", "temperature", "top_p", "top_k", "stream",
					 "stop"};
	for (int k = 0; k < 6; k++)
		if (jget(req, from[k]) && !ms_json_put(body, to[k], cJSON_Duplicate(jget(req, from[k]),
										    true)))
			return ms_req_oom(e);
	const cJSON *ss = jget(req, "stop_sequences"), *s;
	if (ss && !cJSON_IsArray(ss))
		return ms_req_wrong_type(e, ss, "a list of strings", "stop_sequences");
	if (cJSON_GetArraySize(ss) > MS_REQ_MAX_STOPS)
		return ms_req_bad_value(e, NULL, "at most 16 stop sequences", "stop_sequences");
	int i = 0;
	cJSON_ArrayForEach(s, ss) {
		if (!cJSON_IsString(s))
			return ms_req_wrong_type(e, s, "a string", "stop_sequences[%d]", i);
		i++;
	}
	return 0;
}

/* The chat parser's refusal, named by the Messages field. The messages and
 * tools were checked here first, so what chat still refuses of them (the
 * rendered prompt, a strict tool's schema) is named by the field alone:
 * chat's indices are not the request's. */
static void rename_param(struct ms_req_error *e)
{
	static const char *const from[] = {"messages", "stop", "reasoning_effort", "response_format",
					   "tools", "tool_choice"};
	static const char *const to[] = {"messages", "stop_sequences", "thinking",
					 "output_config.format", "tools", "tool_choice"};
	for (int k = 0; e->param && k < 6; k++)
		if (!strncmp(e->param, from[k], strlen(from[k]))) {
			e->param = to[k];
			break;
		}
}

/* The chat body of the Messages body req. */
static int chat_body(const cJSON *req, bool count, struct ms_req_gen *tmp, cJSON **out,
		     struct ms_req_error *e)
{
	unsigned long f0 = ms_json_failures();
	const char *effort = NULL;
	cJSON *body = *out = cJSON_CreateObject();
	int rc = body ? 0 : ms_req_oom(e);
	if (!rc)
		rc = params_field(req, body, count, e);
	if (!rc)
		rc = thinking_field(req, tmp, &effort, e);
	if (!rc)
		rc = effort_field(req, &effort, body, e);
	if (!rc)
		rc = messages_field(req, body, e);
	if (!rc)
		rc = tools_field(req, tmp, body, e);
	/* a field lost to a failed allocation would make another request */
	if (!rc && ms_json_failures() != f0)
		rc = ms_req_oom(e);
	if (rc) {
		cJSON_Delete(body);
		*out = NULL;
	}
	return rc;
}

int ms_req_messages(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		    struct ms_req_error *e)
{
	*out = NULL;
	struct ms_req_gen tmp = {0};
	cJSON *body;
	int rc = chat_body(req, false, &tmp, &body, e);
	if (!rc && (rc = ms_req_chat_within(m, body, tmp.reason_budget, out, e)))
		rename_param(e);
	if (rc) {
		cJSON_Delete(req);
		return rc;
	}
	struct ms_req_gen *r = *out;
	r->messages = true;
	r->thinking = tmp.thinking;
	r->thinking_omitted = tmp.thinking_omitted;
	r->rsp = req; /* kept: ignored_tool points into it */
	r->ignored_tool = tmp.ignored_tool;
	return 0;
}

int ms_req_messages_count(const struct ms_req_model *m, const cJSON *req, int64_t *n,
			  struct ms_req_error *e)
{
	struct ms_req_gen tmp = {0};
	cJSON *body;
	*n = 0;
	int rc = chat_body(req, true, &tmp, &body, e);
	if (!rc && (rc = ms_req_chat_count(m, body, n, e)))
		rename_param(e);
	cJSON_Delete(body);
	return rc;
}
