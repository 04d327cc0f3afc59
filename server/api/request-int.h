/*
 * request-int.h: what the request parsers (request.c, responses-request.c)
 * share: the refusal that names a field, the out-of-memory refusal, and
 * field lookup where JSON null counts as absent.
 */
#ifndef MS_API_REQUEST_INT_H
#define MS_API_REQUEST_INT_H

#include <cjson/cJSON.h>
#include <errno.h>

#include "request.h"

/* 400 naming param (it may be e->path), with OpenAI's error code (NULL:
 * none) and the given value (got, when there is one) after the rule;
 * ms_req_refuse_code(...) is then -EINVAL, the code callers return.
 * The code is spelled in the macro, not returned by the function: a
 * variadic function is never inlined, so its value is opaque, and a caller
 * that tests a helper's rc > 0 (1 with *out set) would look to the
 * compiler as if it could read an output never set. */
void ms_req_refusal_code(struct ms_req_error *e, const char *code, const char *param, const cJSON *got,
			 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define ms_req_refuse_code(...) (ms_req_refusal_code(__VA_ARGS__), -EINVAL)
#define ms_req_refuse(e, ...) ms_req_refuse_code(e, NULL, __VA_ARGS__)

/* OpenAI's three refusals of one field, its path formatted from pathfmt:
 * "Invalid type for 'PATH': expected EXPECTED (got ...)." (invalid_type),
 * "Missing required parameter: 'PATH'." (missing_required_parameter),
 * "Invalid value for 'PATH': WHY (got ...)." (invalid_value). */
enum ms_req_field_kind { MS_REQ_INVALID_TYPE, MS_REQ_MISSING, MS_REQ_INVALID_VALUE };
void ms_req_field_refusal(struct ms_req_error *e, enum ms_req_field_kind kind, const cJSON *got,
			  const char *detail, const char *pathfmt, ...)
	__attribute__((format(printf, 5, 6)));
#define ms_req_wrong_type(e, got, expected, ...) \
	(ms_req_field_refusal(e, MS_REQ_INVALID_TYPE, got, expected, __VA_ARGS__), -EINVAL)
#define ms_req_missing(e, ...) (ms_req_field_refusal(e, MS_REQ_MISSING, NULL, "", __VA_ARGS__), -EINVAL)
#define ms_req_bad_value(e, got, why, ...) \
	(ms_req_field_refusal(e, MS_REQ_INVALID_VALUE, got, why, __VA_ARGS__), -EINVAL)

/* A function's definition at path `at` (chat's tools[i].function, a
 * Responses flat tool tools[i]): "name" required and matching the API's
 * ^[a-zA-Z0-9_-]{1,64}$, "description" a string, "strict" a boolean,
 * "parameters" a JSON Schema object (type-checked keyword by keyword,
 * nested schemas too; under strict, "required" names only properties). */
int ms_req_check_function(const cJSON *fn, const char *at, struct ms_req_error *e);

/* A new chat message {role, content} (content NULL: null) at the end of
 * msgs, for the APIs made into chat bodies; NULL when out of memory. */
cJSON *ms_req_push_message(cJSON *msgs, const char *role, const char *content);

/* A reasoning effort any endpoint takes onto harmony's three levels:
 * none and minimal are its lowest (harmony always reasons), xhigh and max
 * its highest; NULL for another value. */
const char *ms_req_effort(const char *v);
#define MS_REQ_EFFORTS "\"none\", \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\" or \"max\""

/* Whether chat-form tools ([{"function": {"name"}}], names checked) name
 * name; and chat's tool_choice naming it, onto body (false: out of
 * memory). For the APIs made into chat bodies. */
bool ms_req_has_tool(const cJSON *tools, const char *name);
bool ms_req_named_choice(cJSON *body, const char *name);

/* 500 "out of memory"; -ENOMEM. */
int ms_req_oom(struct ms_req_error *e);

/* o[k], or NULL when absent or JSON null. */
const cJSON *ms_req_jget(const cJSON *o, const char *k);

#endif
