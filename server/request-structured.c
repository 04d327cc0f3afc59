/* request-structured.c: the structured-output fields of a request, as
 * grammars (request.h's ms_req_answer_grammar, ms_req_tool_grammar). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-cache.h"
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
	if (!cJSON_IsObject(so))
		return refuse(e, field, so, "\"%s\" must be an object", field);
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
	struct ms_err err = {0};
	rc = ms_grammar_cache_get(m->grammars, w->kind, text, out, &err);
	free(text);
	if (rc == -ENOMEM)
		return ms_req_oom(e);
	if (rc)
		return refuse(e, w->field, NULL, "%s: %s", w->field, err.msg);
	return 0;
}

int ms_req_answer_grammar(const struct ms_req_model *m, const cJSON *req, struct ms_tmask **out,
			  struct ms_req_error *e)
{
	struct want w;
	*out = NULL;
	int rc = answer_field(req, &w, e);
	return rc <= 0 ? rc : get(m, &w, out, e);
}

int ms_req_tool_grammar(const struct ms_req_model *m, const cJSON *fn, int k, struct ms_tmask **out,
			struct ms_req_error *e)
{
	char field[64];
	snprintf(field, sizeof(field), "tools[%d].function.parameters", k);
	const cJSON *ps = jget(fn, "parameters");
	struct want w = {field, ps ? MS_GK_JSON_SCHEMA : MS_GK_JSON_OBJECT, ps};
	*out = NULL;
	/* the error names the field; the text outlives the call only in copies */
	int rc = get(m, &w, out, e);
	if (rc && e->param == field)
		e->param = "tools";
	return rc;
}
