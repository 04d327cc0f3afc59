/*
 * request-int.h: what the request parsers (request.c, request-responses.c)
 * share: the refusal that names a field, the out-of-memory refusal, and
 * field lookup where JSON null counts as absent.
 */
#ifndef MS_SERVER_REQUEST_INT_H
#define MS_SERVER_REQUEST_INT_H

#include <cjson/cJSON.h>
#include <errno.h>

#include "request.h"

/* 400 naming param, with the given value (got, when there is one) after
 * the rule; ms_req_refuse(...) is then -EINVAL, the code callers return.
 * The code is spelled in the macro, not returned by the function: a
 * variadic function is never inlined, so its value is opaque, and a caller
 * that tests a helper's rc > 0 (1 with *out set) would look to the
 * compiler as if it could read an output never set. */
void ms_req_refusal(struct ms_req_error *e, const char *param, const cJSON *got, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
#define ms_req_refuse(...) (ms_req_refusal(__VA_ARGS__), -EINVAL)

/* 500 "out of memory"; -ENOMEM. */
int ms_req_oom(struct ms_req_error *e);

/* o[k], or NULL when absent or JSON null. */
const cJSON *ms_req_jget(const cJSON *o, const char *k);

#endif
