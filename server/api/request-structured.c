/* request-structured.c: the structured-output fields of a request, as
 * grammars and the constraint that holds the answer to them (request.h's
 * ms_req_answer_schema, ms_req_answer_grammar, ms_req_shape). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-cache.h"
#include "ms-utf8.h"
#include "request-int.h"

#define refuse ms_req_refuse
#define jget ms_req_jget

/* What one field asks for. */
struct want {
	const char *field;          /* the param named in errors */
	enum ms_grammar_kind kind;
	const cJSON *value;         /* the schema, regex, grammar or choices */
};

static int schema_value(const char *field, const cJSON *v, struct want *w, struct ms_req_error *e)
{
	if (!v || !(cJSON_IsObject(v) || cJSON_IsBool(v) || cJSON_IsString(v)))
		return refuse(e, field, v, "\"%s\" must be a JSON Schema (an object)", field);
	*w = (struct want){field, MS_GK_JSON_SCHEMA, v};
	return 1;
}

/* OpenAI's response_format (and llama-server's "schema" inside it). */
static int response_format(const cJSON *rf, struct want *w, struct ms_req_error *e)
{
	const cJSON *t = jget(rf, "type");
	if (!cJSON_IsObject(rf) || !cJSON_IsString(t))
		return refuse(e, "response_format", rf, "\"response_format\" must be {\"type\": \"text\", "
			      "\"json_object\" or \"json_schema\", ...}");
	const char *ty = t->valuestring;
	if (!strcmp(ty, "text"))
		return 0;
	const cJSON *flat = jget(rf, "schema");
	if (!strcmp(ty, "json_object")) {
		if (flat)
			return schema_value("response_format.schema", flat, w, e);
		*w = (struct want){"response_format", MS_GK_JSON_OBJECT, NULL};
		return 1;
	}
	if (!strcmp(ty, "json_schema")) {
		const cJSON *js = jget(rf, "json_schema");
		if (js && !cJSON_IsObject(js))
			return refuse(e, "response_format.json_schema", js, "\"response_format.json_schema\" "
				      "must be {\"name\", \"schema\", \"strict\"}");
		if (js && jget(js, "schema"))
			return schema_value("response_format.json_schema.schema", jget(js, "schema"), w, e);
		if (flat)
			return schema_value("response_format.schema", flat, w, e);
		return refuse(e, "response_format.json_schema.schema", NULL, "\"response_format\" of "
			      "type json_schema needs json_schema.schema");
	}
	return refuse(e, "response_format.type", t, "\"response_format.type\" must be \"text\", "
		      "\"json_object\" or \"json_schema\"");
}

/* vLLM's structured_outputs {json, regex, choice, grammar, json_object}. */
static int vllm_object(const char *field, const cJSON *so, struct want *w, struct ms_req_error *e)
{
	static const char *const keys[] = {"json", "regex", "choice", "grammar", "json_object"};
	static const enum ms_grammar_kind kinds[] = {MS_GK_JSON_SCHEMA, MS_GK_REGEX, MS_GK_CHOICE,
						     MS_GK_GBNF, MS_GK_JSON_OBJECT};
	/* vLLM's options with no meaning here (whitespace is bounded anyway) */
	static const char *const hints[] = {"disable_fallback", "disable_any_whitespace",
					    "disable_additional_properties"};
	if (!cJSON_IsObject(so))
		return refuse(e, field, so, "\"%s\" must be an object", field);
	const cJSON *it;
	cJSON_ArrayForEach(it, so) {
		bool known = cJSON_IsNull(it);
		for (int i = 0; i < 5 && !known; i++)
			known = !strcmp(it->string, keys[i]);
		for (int i = 0; i < 3 && !known; i++)
			known = !strcmp(it->string, hints[i]);
		if (!known)
			return refuse(e, field, NULL, "\"%s.%s\" is not supported (json, regex, choice, "
				      "grammar, json_object are)", field, it->string);
	}
	int found = 0;
	for (int i = 0; i < 5; i++) {
		const cJSON *v = jget(so, keys[i]);
		if (!v || (i == 4 && cJSON_IsFalse(v)))
			continue;
		if (found++)
			return refuse(e, field, NULL, "\"%s\" may hold only one of json, regex, choice, "
				      "grammar, json_object", field);
		*w = (struct want){keys[i], kinds[i], v};
	}
	return found;
}

/* The one field of the request that names a grammar for the answer: 1
 * with *w, 0 when none does. */
static int answer_field(const cJSON *req, struct want *w, struct ms_req_error *e)
{
	static const char *const fields[] = {"response_format", "structured_outputs", "guided_json",
					     "guided_regex", "guided_choice", "guided_grammar", "grammar",
					     "json_schema"};
	static const enum ms_grammar_kind kinds[] = {0, 0, MS_GK_JSON_SCHEMA, MS_GK_REGEX, MS_GK_CHOICE,
						     MS_GK_GBNF, MS_GK_GBNF, MS_GK_JSON_SCHEMA};
	const char *first = NULL;
	int found = 0;
	for (int i = 0; i < 8; i++) {
		const cJSON *v = jget(req, fields[i]);
		if (!v)
			continue;
		struct want x;
		int rc = i == 0 ? response_format(v, &x, e) : i == 1 ? vllm_object(fields[i], v, &x, e)
			 : (x = (struct want){fields[i], kinds[i], v}, 1);
		if (rc <= 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		if (found)
			return refuse(e, fields[i], NULL, "\"%s\" and \"%s\" both constrain the answer; give "
				      "one", first, fields[i]);
		first = fields[i];
		*w = x;
		found = 1;
	}
	return found;
}

/* The grammar text of w: schemas printed, strings as they are. */
static int want_text(const struct want *w, char **text, struct ms_req_error *e)
{
	const cJSON *v = w->value;
	*text = NULL;
	if (w->kind == MS_GK_JSON_OBJECT)
		return (*text = strdup("")) ? 0 : ms_req_oom(e);
	if (w->kind == MS_GK_REGEX || w->kind == MS_GK_GBNF) {
		if (!cJSON_IsString(v) || !*v->valuestring)
			return refuse(e, w->field, v, "\"%s\" must be a non-empty string", w->field);
		return (*text = strdup(v->valuestring)) ? 0 : ms_req_oom(e);
	}
	if (w->kind == MS_GK_CHOICE && !cJSON_IsArray(v))
		return refuse(e, w->field, v, "\"%s\" must be a list of strings", w->field);
	if (cJSON_IsString(v)) /* guided_json as a JSON text */
		return (*text = strdup(v->valuestring)) ? 0 : ms_req_oom(e);
	if (cJSON_IsBool(v))   /* true: anything; false: nothing (refused there) */
		return (*text = strdup(cJSON_IsTrue(v) ? "{}" : "false")) ? 0 : ms_req_oom(e);
	return (*text = cJSON_PrintUnformatted(v)) ? 0 : ms_req_oom(e);
}

static int get(const struct ms_req_model *m, const struct want *w, struct ms_tmask **out,
	       struct ms_req_error *e)
{
	if (!m->grammars)
		return refuse(e, w->field, NULL, "\"%s\": structured outputs need the model's tokenizer",
			      w->field);
	char *text;
	int rc = want_text(w, &text, e);
	if (rc)
		return rc;
	if (w->kind == MS_GK_CHOICE && ms_nul_carried(text, strlen(text))) {
		free(text); /* a choice is raw text, which a NUL would cut */
		return refuse(e, w->field, NULL, "\"%s\": a choice holding a NUL (\\u0000) is not "
			      "supported", w->field);
	}
	struct ms_err err = {0};
	rc = ms_grammar_cache_get(m->grammars, w->kind, text, out, &err);
	free(text);
	if (rc == -ENOMEM)
		return ms_req_oom(e);
	if (rc)
		return refuse(e, w->field, NULL, "%s: %s", w->field, err.msg);
	return 0;
}

const cJSON *ms_req_answer_schema(const cJSON *req, const char **name, const char **desc)
{
	struct want w;
	struct ms_req_error e = {0};
	*name = *desc = NULL;
	if (answer_field(req, &w, &e) <= 0 || w.kind != MS_GK_JSON_SCHEMA ||
	    !(cJSON_IsObject(w.value) || cJSON_IsString(w.value)))
		return NULL;  /* the refusals are ms_req_shape's */
	const cJSON *js = jget(jget(req, "response_format"), "json_schema");
	if (js && w.value == jget(js, "schema")) {
		const cJSON *n = jget(js, "name"), *d = jget(js, "description");
		*name = cJSON_IsString(n) ? n->valuestring : NULL;
		*desc = cJSON_IsString(d) ? d->valuestring : NULL;
	}
	return w.value;
}

int ms_req_answer_grammar(const struct ms_req_model *m, const cJSON *req, struct ms_tmask **out,
			  struct ms_req_error *e)
{
	struct want w;
	*out = NULL;
	int rc = answer_field(req, &w, e);
	if (rc > 0 && !(rc = get(m, &w, out, e)))
		rc = 1;
	return rc;
}

/* The arguments' grammar of function fn (tools[k].function): its
 * "parameters" (any object without). A schema that does not compile is a
 * refusal when the function is strict; otherwise the arguments are held
 * to be a JSON object only, as they would be free without tool_choice. */
static int tool_grammar(const struct ms_req_model *m, const cJSON *fn, int k, bool strict,
			struct ms_tmask **out, struct ms_req_error *e)
{
	char field[64];
	snprintf(field, sizeof(field), "tools[%d].function.parameters", k);
	const cJSON *ps = jget(fn, "parameters");
	struct want w = {field, ps ? MS_GK_JSON_SCHEMA : MS_GK_JSON_OBJECT, ps};
	*out = NULL;
	int rc = get(m, &w, out, e);
	if (rc == -EINVAL && !strict) {
		w.kind = MS_GK_JSON_OBJECT;
		rc = get(m, &w, out, e);
	}
	if (rc && e->param == field) /* field is on this stack */
		e->param = "tools";
	return rc;
}

static bool call_forced(const struct ms_req_gen *r)
{
	return r->tool_choice == MS_TC_REQUIRED || r->tool_choice == MS_TC_NAMED;
}

static void unref_all(struct ms_tmask **t, int n)
{
	for (int i = 0; i < n; i++)
		ms_tmask_unref(t[i]);
}

/* Each function of the chat body's tools that a call may name (all, or
 * the named one), with its arguments' grammar: every one when a call is
 * forced, the strict ones otherwise. The count, or an error (with no
 * grammar held). */
static int call_targets(const struct ms_req_model *m, const struct ms_req_gen *r,
			const char **names, struct ms_tmask **args, bool *any_strict,
			struct ms_req_error *e)
{
	const cJSON *tools = jget(r->req, "tools"), *t;
	bool forced = call_forced(r);
	int n = 0, k = 0, rc = 0;
	*any_strict = false;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = jget(t, "function"), *nm = jget(fn, "name");
		bool strict = cJSON_IsTrue(jget(fn, "strict"));
		k++;
		if (!cJSON_IsString(nm) || (r->tool_named && strcmp(r->tool_named, nm->valuestring)))
			continue;
		if (n == MS_FORCE_MAX_NAMES) {
			rc = refuse(e, "tools", NULL, "at most %d functions can be called under "
				    "tool_choice or strict", MS_FORCE_MAX_NAMES);
		} else {
			names[n] = nm->valuestring;
			args[n] = NULL;
			if (forced || strict)
				rc = tool_grammar(m, fn, k - 1, strict, &args[n], e);
		}
		if (rc) {
			unref_all(args, n);
			return rc;
		}
		*any_strict |= strict;
		n++;
	}
	return n;
}

/* The chat body's tools that name a function. */
static int n_functions(const struct ms_req_gen *r)
{
	const cJSON *t;
	int n = 0;
	cJSON_ArrayForEach(t, jget(r->req, "tools"))
		n += cJSON_IsString(jget(jget(t, "function"), "name"));
	return n;
}

int ms_req_shape(const struct ms_req_model *m, struct ms_req_gen *r, struct ms_req_error *e)
{
	struct ms_tmask *final = NULL, *args[MS_FORCE_MAX_NAMES];
	const char *names[MS_FORCE_MAX_NAMES];
	bool any_strict = false;
	/* a reasoning budget shapes the answer too (any call of any tool), so
	 * past the most names a shape holds it goes unenforced, not refused */
	if (r->reason_budget > 0 && r->tool_choice == MS_TC_AUTO && n_functions(r) > MS_FORCE_MAX_NAMES)
		r->reason_budget = 0;
	int rc = ms_req_answer_grammar(m, r->req, &final, e), n = 0;
	if (rc < 0)
		return rc;
	if (r->chat && r->tool_choice != MS_TC_NONE && (n = call_targets(m, r, names, args,
									   &any_strict, e)) < 0) {
		ms_tmask_unref(final);
		return n;
	}
	bool forced = call_forced(r);
	bool budgeted = r->chat && r->reason_budget > 0;
	if (!forced && !any_strict && !final && !budgeted) {
		unref_all(args, n);
		return 0;  /* free: no constraint at all */
	}
	struct ms_force_spec sp = {
		.names = names, .n_names = n, .args = args,
		.final_ok = !forced, .final = final, .plain = !r->chat,
		.budget = r->params.max_tokens, .reason_budget = budgeted ? r->reason_budget : 0,
	};
	struct ms_err err = {0};
	rc = ms_tool_force_new(m->tok, &m->hids, m->eos, m->n_eos, &sp, &r->force, &err);
	unref_all(args, n);
	ms_tmask_unref(final);
	if (rc)
		return rc == -ENOMEM ? ms_req_oom(e) : refuse(e, rc == -ERANGE ? "max_tokens" : forced
							       ? "tool_choice" : NULL, NULL, "%s", err.msg);
	r->con = ms_tool_force_constraint(r->force);
	r->params.constraint = &r->con;
	return 0;
}
