/*
 * request-tools.c: a tool's function definition, as chat's tools[i].function
 * and Responses' flat tools give it (ms_req_check_function, request-int.h):
 * its name and flags, and its "parameters" walked as a JSON Schema, keyword
 * by keyword and into every nested schema, each refusal naming the path.
 */
#include <stdio.h>
#include <string.h>

#include "request-int.h"

#define jget ms_req_jget

/* Where a schema check is: the function (named in messages) and the path,
 * grown and cut back as the check descends. */
struct schema_at {
	const char *fn;
	bool strict;
	char p[MS_REQ_PATH];
};

static int schema_check(struct schema_at *a, const cJSON *s, int depth, struct ms_req_error *e);

/* a->p with fmt (of a key k, or an index i) appended: the length to cut
 * back to. */
static size_t descend(struct schema_at *a, const char *fmt, const char *k)
{
	size_t l = strlen(a->p);
	snprintf(a->p + l, sizeof(a->p) - l, fmt, k);
	return l;
}

static size_t descend_i(struct schema_at *a, const char *fmt, int i)
{
	size_t l = strlen(a->p);
	snprintf(a->p + l, sizeof(a->p) - l, fmt, i);
	return l;
}

static int bad_schema(struct schema_at *a, const cJSON *got, const char *rule, struct ms_req_error *e)
{
	return ms_req_refuse_code(e, "invalid_function_parameters", a->p, got, "Invalid schema for "
				  "function '%s': '%s' must be %s", a->fn, a->p, rule);
}

/* A subschema at a->p + fmt(k or i). */
static int sub_schema(struct schema_at *a, const cJSON *v, const char *fmt, const char *k, int i,
		      int depth, struct ms_req_error *e)
{
	size_t l = k ? descend(a, fmt, k) : descend_i(a, fmt, i);
	int rc = schema_check(a, v, depth + 1, e);
	a->p[l] = '\0';
	return rc;
}

/* "type": one of JSON Schema's seven names, or a list of them. */
static bool type_name(const cJSON *v)
{
	static const char *const names[] = {"string", "number", "integer", "boolean", "object",
					    "array", "null"};
	for (int k = 0; cJSON_IsString(v) && k < 7; k++)
		if (!strcmp(v->valuestring, names[k]))
			return true;
	return false;
}

static int type_keyword(struct schema_at *a, const cJSON *t, struct ms_req_error *e)
{
	const cJSON *it;
	bool ok = type_name(t) || (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0);
	const cJSON *list = cJSON_IsArray(t) ? t : NULL;
	cJSON_ArrayForEach(it, list)
		ok = ok && type_name(it);
	size_t l = descend(a, ".%s", "type");
	int rc = ok ? 0 : bad_schema(a, t, "one of \"string\", \"number\", \"integer\", \"boolean\", "
				     "\"object\", \"array\", \"null\" or a list of them", e);
	a->p[l] = '\0';
	return rc;
}

/* "properties" (an object of schemas) and "required" (a list of strings;
 * under strict, each one of the properties, as OpenAI's strict mode has
 * it: JSON Schema itself allows other names). */
static int object_keywords(struct schema_at *a, const cJSON *s, int depth, struct ms_req_error *e)
{
	const cJSON *ps = jget(s, "properties"), *rq = jget(s, "required"), *it;
	int rc = 0, i = 0;
	size_t l;
	if (ps && !cJSON_IsObject(ps)) {
		l = descend(a, ".%s", "properties");
		rc = bad_schema(a, ps, "an object of property schemas", e);
		a->p[l] = '\0';
		return rc;
	}
	cJSON_ArrayForEach(it, ps) {
		/* (an object's members always have a key; -O3 cannot tell) */
		if ((rc = sub_schema(a, it, ".properties.%s", it->string ? it->string : "", 0, depth, e)))
			return rc;
	}
	if (!rq)
		return 0;
	l = descend(a, ".%s", "required");
	if (!cJSON_IsArray(rq))
		rc = bad_schema(a, rq, "a list of property names", e);
	const cJSON *names = rc ? NULL : rq;
	cJSON_ArrayForEach(it, names) {
		descend_i(a, "[%d]", i++);
		if (!cJSON_IsString(it))
			rc = bad_schema(a, it, "a string (a property name)", e);
		else if (a->strict && ps && !cJSON_GetObjectItemCaseSensitive(ps, it->valuestring))
			rc = bad_schema(a, it, "one of \"properties\" (the function is strict)", e);
		if (rc)
			break;
		a->p[l + strlen(".required")] = '\0';
	}
	a->p[l] = '\0';
	return rc;
}

/* The keywords whose values are schemas, lists of schemas or objects of
 * schemas, each checked in turn. */
static int nested_keywords(struct schema_at *a, const cJSON *s, int depth, struct ms_req_error *e)
{
	static const char *const one[] = {"items", "additionalProperties", "additionalItems", "not",
					  "contains", "propertyNames", "if", "then", "else",
					  "unevaluatedProperties", "unevaluatedItems"};
	static const char *const lists[] = {"anyOf", "oneOf", "allOf", "prefixItems"};
	static const char *const maps[] = {"$defs", "definitions", "patternProperties",
					   "dependentSchemas"};
	const cJSON *v, *it;
	int rc = 0;
	char f[80];
	for (size_t k = 0; k < sizeof(one) / sizeof(one[0]) && !rc; k++) {
		if (!(v = jget(s, one[k])))
			continue;
		snprintf(f, sizeof(f), ".%s", one[k]);
		if (!cJSON_IsArray(v) || strcmp(one[k], "items")) {
			rc = sub_schema(a, v, "%s", f, 0, depth, e);
			continue;
		}
		int i = 0; /* items as a list: the older drafts' tuple form */
		snprintf(f, sizeof(f), ".items[%%d]");
		cJSON_ArrayForEach(it, v)
			if (!rc)
				rc = sub_schema(a, it, f, NULL, i++, depth, e);
	}
	for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]) && !rc; k++) {
		if (!(v = jget(s, lists[k])))
			continue;
		snprintf(f, sizeof(f), ".%s[%%d]", lists[k]);
		if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v)) {
			size_t l = descend(a, ".%s", lists[k]);
			rc = bad_schema(a, v, "a non-empty list of schemas", e);
			a->p[l] = '\0';
		}
		int i = 0;
		const cJSON *list = rc ? NULL : v;
		cJSON_ArrayForEach(it, list)
			if (!rc)
				rc = sub_schema(a, it, f, NULL, i++, depth, e);
	}
	for (size_t k = 0; k < sizeof(maps) / sizeof(maps[0]) && !rc; k++) {
		if (!(v = jget(s, maps[k])))
			continue;
		snprintf(f, sizeof(f), ".%s.%%s", maps[k]);
		if (!cJSON_IsObject(v)) {
			size_t l = descend(a, ".%s", maps[k]);
			rc = bad_schema(a, v, "an object of schemas", e);
			a->p[l] = '\0';
		}
		const cJSON *map = rc ? NULL : v;
		cJSON_ArrayForEach(it, map)
			if (!rc)
				rc = sub_schema(a, it, f, it->string, 0, depth, e);
	}
	return rc;
}

/* The keywords with plain values: strings, lists, numbers. */
static int plain_keywords(struct schema_at *a, const cJSON *s, struct ms_req_error *e)
{
	static const char *const strs[] = {"description", "title", "pattern", "format", "$ref"};
	static const char *const nums[] = {"minimum", "maximum", "multipleOf", "minLength",
					   "maxLength", "minItems", "maxItems", "minProperties",
					   "maxProperties"};
	const cJSON *v = NULL;
	const char *rule = NULL, *key = NULL;
	for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]) && !rule; k++)
		if ((v = jget(s, key = strs[k])) && !cJSON_IsString(v))
			rule = "a string";
	for (size_t k = 0; k < sizeof(nums) / sizeof(nums[0]) && !rule; k++)
		if ((v = jget(s, key = nums[k])) && !cJSON_IsNumber(v))
			rule = "a number";
	/* exclusive bounds: numbers, or booleans in draft 4 */
	const char *const excl[] = {"exclusiveMinimum", "exclusiveMaximum"};
	for (int k = 0; k < 2 && !rule; k++)
		if ((v = jget(s, key = excl[k])) && !cJSON_IsNumber(v) && !cJSON_IsBool(v))
			rule = "a number";
	if (!rule && (v = jget(s, key = "enum")) && !cJSON_IsArray(v))
		rule = "a list of values";
	if (!rule)
		return 0;
	size_t l = descend(a, ".%s", key);
	int rc = bad_schema(a, v, rule, e);
	a->p[l] = '\0';
	return rc;
}

/* A JSON Schema (an object, or a boolean below the top), keyword by
 * keyword: what the meta-schema holds the keywords to. Keywords unknown
 * here are left to the grammar compiler (strict) or the model. */
static int schema_check(struct schema_at *a, const cJSON *s, int depth, struct ms_req_error *e)
{
	if (cJSON_IsBool(s) && depth > 0)
		return 0;
	if (!cJSON_IsObject(s))
		return bad_schema(a, s, depth ? "a schema (an object or a boolean)" : "a JSON Schema "
				  "object", e);
	if (depth > 64)
		return bad_schema(a, NULL, "nested at most 64 schemas deep", e);
	const cJSON *t = jget(s, "type");
	int rc = t ? type_keyword(a, t, e) : 0;
	if (!rc)
		rc = object_keywords(a, s, depth, e);
	if (!rc)
		rc = nested_keywords(a, s, depth, e);
	if (!rc)
		rc = plain_keywords(a, s, e);
	return rc;
}

/* The API's function names: ^[a-zA-Z0-9_-]{1,64}$. */
static bool function_name_ok(const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return false;
	return n >= 1 && n <= 64;
}

int ms_req_check_function(const cJSON *fn, const char *at, struct ms_req_error *e)
{
	const cJSON *nm = jget(fn, "name"), *ds = jget(fn, "description");
	const cJSON *ps = jget(fn, "parameters"), *st = jget(fn, "strict");
	if (!nm)
		return ms_req_missing(e, "%s.name", at);
	if (!cJSON_IsString(nm))
		return ms_req_wrong_type(e, nm, "a string", "%s.name", at);
	if (!function_name_ok(nm->valuestring))
		return ms_req_bad_value(e, nm, "a function name is 1 to 64 of a-z, A-Z, 0-9, _ and - "
					"(the pattern ^[a-zA-Z0-9_-]{1,64}$)", "%s.name", at);
	if (ds && !cJSON_IsString(ds))
		return ms_req_wrong_type(e, ds, "a string", "%s.description", at);
	if (st && !cJSON_IsBool(st))
		return ms_req_wrong_type(e, st, "a boolean", "%s.strict", at);
	if (!ps)
		return 0;
	struct schema_at a = {.fn = nm->valuestring, .strict = cJSON_IsTrue(st)};
	snprintf(a.p, sizeof(a.p), "%s.parameters", at);
	return schema_check(&a, ps, 0, e);
}
