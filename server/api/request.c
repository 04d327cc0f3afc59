/*
 * request.c: the OpenAI request bodies into engine requests (see
 * request.h). Field order of the checks is the order of the refusals: the
 * first bad field is the one named.
 */
#include "request.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-json.h"
#include "ms-strbuf.h"
#include "request-int.h"

/* ---- refusals ---- */

/* A value as a message shows it: a number as JSON would write it, a string
 * quoted and cut at 40 bytes on a character boundary, a list with its
 * length, other kinds by name. */
static const char *shown(const cJSON *v, char *b, size_t n)
{
	if (cJSON_IsNumber(v)) {
		snprintf(b, n, "%.15g", v->valuedouble);
		if (strtod(b, NULL) != v->valuedouble)
			snprintf(b, n, "%.17g", v->valuedouble);
	} else if (cJSON_IsString(v)) {
		size_t len = strlen(v->valuestring), cut = len > 40 ? 40 : len;
		while (cut < len && cut > 0 && ((unsigned char)v->valuestring[cut] & 0xC0) == 0x80)
			cut--;
		snprintf(b, n, "\"%.*s%s\"", (int)cut, v->valuestring, cut < len ? "..." : "");
	} else if (cJSON_IsArray(v)) {
		snprintf(b, n, "a list of %d", cJSON_GetArraySize(v));
	} else {
		snprintf(b, n, "%s", cJSON_IsObject(v) ? "an object" : cJSON_IsTrue(v) ? "true"
				     : cJSON_IsFalse(v) ? "false" : "null");
	}
	return b;
}

#define refuse ms_req_refuse
#define refuse_code ms_req_refuse_code
#define oom ms_req_oom
#define jget ms_req_jget

/* The refusal's message from fmt and ap, then " (got v)". */
static void refusal_v(struct ms_req_error *e, const char *code, const cJSON *got, const char *fmt,
		      va_list ap)
{
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	size_t l = strlen(e->msg);
	if (got) {
		char v[64];
		snprintf(e->msg + l, sizeof(e->msg) - l, " (got %s)", shown(got, v, sizeof(v)));
	}
	e->status = 400;
	e->type = "invalid_request_error";
	e->code = code;
}

/* param into e->path (it may be there already), e->param pointing at it. */
static void set_param(struct ms_req_error *e, const char *param)
{
	if (param && param != e->path)
		snprintf(e->path, sizeof(e->path), "%s", param);
	e->param = param ? e->path : NULL;
}

void ms_req_refusal_code(struct ms_req_error *e, const char *code, const char *param, const cJSON *got,
			 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	refusal_v(e, code, got, fmt, ap);
	va_end(ap);
	set_param(e, param);
}

/* OpenAI's wording: "<head>'<path>'<mid> (got v)." with e->path from
 * pathfmt; show: the value is shown even when absent or null. */
static void path_refusal(struct ms_req_error *e, const char *code, const cJSON *got, bool show,
			 const char *head, const char *mid, const char *pathfmt, va_list ap)
{
	vsnprintf(e->path, sizeof(e->path), pathfmt, ap);
	snprintf(e->msg, sizeof(e->msg), "%s'%s'%s", head, e->path, mid);
	size_t l = strlen(e->msg);
	if (got || show) {
		char v[64];
		snprintf(e->msg + l, sizeof(e->msg) - l, " (got %s)", shown(got, v, sizeof(v)));
		l = strlen(e->msg);
	}
	snprintf(e->msg + l, sizeof(e->msg) - l, ".");
	e->status = 400;
	e->type = "invalid_request_error";
	e->code = code;
	e->param = e->path;
}

/* The three refusals of one field: their code, wording and whether the
 * value is shown when absent or null; detail follows the head's ": ". */
static const struct {
	const char *code, *head, *lead;
	bool show;
} field_refusals[] = {
	[MS_REQ_INVALID_TYPE] = {"invalid_type", "Invalid type for ", ": expected ", true},
	[MS_REQ_MISSING] = {"missing_required_parameter", "Missing required parameter: ", "", false},
	[MS_REQ_INVALID_VALUE] = {"invalid_value", "Invalid value for ", ": ", false},
};

void ms_req_field_refusal(struct ms_req_error *e, enum ms_req_field_kind kind, const cJSON *got,
			  const char *detail, const char *pathfmt, ...)
{
	char mid[512];
	snprintf(mid, sizeof(mid), "%s%s", field_refusals[kind].lead, detail);
	va_list ap;
	va_start(ap, pathfmt);
	path_refusal(e, field_refusals[kind].code, got, field_refusals[kind].show,
		     field_refusals[kind].head, mid, pathfmt, ap);
	va_end(ap);
}

int ms_req_oom(struct ms_req_error *e)
{
	snprintf(e->msg, sizeof(e->msg), "out of memory");
	e->status = 500;
	e->type = "server_error";
	e->param = NULL;
	e->code = NULL;
	return -ENOMEM;
}

/* ---- fields ---- */

cJSON *ms_req_push_message(cJSON *msgs, const char *role, const char *content)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", role);
	if (content)
		cJSON_AddStringToObject(m, "content", content);
	else
		cJSON_AddNullToObject(m, "content");
	return ms_json_push(msgs, m) ? m : NULL;
}

bool ms_req_has_tool(const cJSON *tools, const char *name)
{
	const cJSON *t;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *n = ms_req_jget(ms_req_jget(t, "function"), "name");
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			return true;
	}
	return false;
}

bool ms_req_named_choice(cJSON *body, const char *name)
{
	cJSON *c = cJSON_AddObjectToObject(body, "tool_choice");
	return c && cJSON_AddStringToObject(c, "type", "function") &&
	       cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name);
}

const cJSON *ms_req_jget(const cJSON *o, const char *k)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
	return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer in [lo, hi] at name: 1 with *out set, 0 when absent, or the
 * refusal "\"name\" must be <rule>". */
static int int_field(const cJSON *j, const char *name, double lo, double hi, const char *rule,
		     int64_t *out, struct ms_req_error *e)
{
	const cJSON *v = jget(j, name);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
	    v->valuedouble > hi)
		return refuse(e, name, v, "\"%s\" must be %s", name, rule);
	*out = (int64_t)v->valuedouble;
	return 1;
}

static int bool_field(const cJSON *j, const char *name, bool *out, struct ms_req_error *e)
{
	const cJSON *v = jget(j, name);
	if (!v)
		return 0;
	if (!cJSON_IsBool(v))
		return refuse(e, name, v, "\"%s\" must be true or false", name);
	*out = cJSON_IsTrue(v);
	return 1;
}

static int float_fields(const cJSON *j, struct ms_sampling *sp, struct ms_req_error *e)
{
	const struct {
		const char *name;
		float *dst;
		double lo, hi;
	} floats[] = {
		{"temperature", &sp->temperature, 0, 100},
		{"top_p", &sp->top_p, 0, 1},
		{"min_p", &sp->min_p, 0, 1},
		{"presence_penalty", &sp->presence_penalty, -2, 2},
		{"frequency_penalty", &sp->frequency_penalty, -2, 2},
		{"repetition_penalty", &sp->repetition_penalty, 0, 10},
	};
	for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++) {
		const cJSON *v = jget(j, floats[i].name);
		if (!v)
			continue;
		if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < floats[i].lo ||
		    v->valuedouble > floats[i].hi)
			return refuse(e, floats[i].name, v, "\"%s\" must be a number in [%g, %g]",
				      floats[i].name, floats[i].lo, floats[i].hi);
		*floats[i].dst = (float)v->valuedouble;
	}
	return 0;
}

/* Any integer a 64-bit seed can hold, negative ones as two's complement
 * (what clients send as a signed or an unsigned seed). */
static int seed_field(const cJSON *j, struct ms_sampling *sp, struct ms_req_error *e)
{
	const cJSON *v = jget(j, "seed");
	if (!v)
		return 0;
	double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
	if (!(d == floor(d) && d >= -0x1p63 && d < 0x1p64))
		return refuse(e, "seed", v, "\"seed\" must be an integer in [-2^63, 2^64)");
	sp->seed = d >= 0x1p63 ? (uint64_t)d : (uint64_t)(int64_t)d;
	sp->has_seed = true;
	return 0;
}

/* logprobs: completions take the top-N as an integer; chat a boolean plus
 * top_logprobs. */
static int logprob_fields(const cJSON *j, bool chat, struct ms_sampling *sp, struct ms_req_error *e)
{
	int64_t v;
	int rc;
	if (!chat) {
		rc = int_field(j, "logprobs", 0, 20, "an integer in [0, 20]", &v, e);
		if (rc > 0)
			sp->n_logprobs = (int)v;
		return rc < 0 ? rc : 0;
	}
	bool on = false;
	if ((rc = bool_field(j, "logprobs", &on, e)) < 0)
		return rc;
	if (on)
		sp->n_logprobs = 0;
	if ((rc = int_field(j, "top_logprobs", 0, 20, "an integer in [0, 20]", &v, e)) <= 0)
		return rc;
	if (sp->n_logprobs < 0)
		return refuse(e, "top_logprobs", NULL, "\"top_logprobs\" needs \"logprobs\": true");
	sp->n_logprobs = (int)v;
	return 0;
}

static int logit_bias_field(const cJSON *j, int64_t vocab, struct ms_req_gen *r,
			    struct ms_req_error *e)
{
	const cJSON *v = jget(j, "logit_bias"), *it;
	if (!v)
		return 0;
	if (!cJSON_IsObject(v))
		return refuse(e, "logit_bias", v, "\"logit_bias\" must be an object of token id -> bias");
	r->bias = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof(*r->bias));
	if (!r->bias)
		return oom(e);
	size_t k = 0;
	cJSON_ArrayForEach(it, v) {
		/* keys are token ids in decimal, digits only: strtol alone would
		 * take " 5", "+5" and "0x5"-less forms as ids */
		size_t nd = strspn(it->string, "0123456789");
		long id = nd && !it->string[nd] && nd < 10 ? strtol(it->string, NULL, 10) : -1;
		if (id < 0 || id >= vocab)
			return refuse_code(e, "invalid_value", "logit_bias", NULL, "Invalid value for "
					   "'logit_bias': the key \"%.40s\" is not a token id in [0, %lld) "
					   "(a decimal number)", it->string, (long long)vocab);
		if (!cJSON_IsNumber(it) || fabs(it->valuedouble) > 100)
			return refuse_code(e, cJSON_IsNumber(it) ? "invalid_value" : "invalid_type",
					   "logit_bias", it, "Invalid value for 'logit_bias': the bias of "
					   "token %ld must be a number in [-100, 100]", id);
		r->bias[k++] = (struct ms_logit_bias){(int32_t)id, (float)it->valuedouble};
	}
	r->params.sampling.logit_bias = r->bias;
	r->params.sampling.n_logit_bias = k;
	return 0;
}

static int sampling_fields(const cJSON *j, int64_t vocab, struct ms_req_gen *r,
			   struct ms_req_error *e)
{
	struct ms_sampling *sp = &r->params.sampling;
	int64_t v;
	int rc;
	if ((rc = float_fields(j, sp, e)))
		return rc;
	if ((rc = int_field(j, "top_k", -1, 1e9, "an integer >= -1", &v, e)) < 0)
		return rc;
	if (rc)
		sp->top_k = (int32_t)v;
	if ((rc = seed_field(j, sp, e)) || (rc = logprob_fields(j, r->chat, sp, e)))
		return rc;
	return logit_bias_field(j, vocab, r, e);
}

/* "stop": a string or a list of up to 16 strings; empty ones are dropped. */
static int stop_field(const cJSON *j, struct ms_req_gen *r, struct ms_req_error *e)
{
	const cJSON *v = jget(j, "stop"), *it;
	r->n_stops = 0;
	if (!v)
		return 0;
	if (cJSON_IsString(v)) {
		if (v->valuestring[0])
			r->stops[r->n_stops++] = v->valuestring;
		return 0;
	}
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > MS_REQ_MAX_STOPS)
		return refuse(e, "stop", v, "\"stop\" must be a string or a list of at most 16 strings");
	int i = 0;
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it))
			return ms_req_wrong_type(e, it, "a string (\"stop\" is a string or a list of "
						 "strings)", "stop[%d]", i);
		i++;
		if (it->valuestring[0])
			r->stops[r->n_stops++] = it->valuestring;
	}
	return 0;
}

/* The fields both endpoints share. */
static int common_fields(const struct ms_req_model *m, struct ms_req_gen *r, struct ms_req_error *e)
{
	const cJSON *j = r->req, *v;
	int64_t x;
	int rc;
	if ((rc = sampling_fields(j, m->vocab, r, e)))
		return rc;
	if (!r->chat)
		r->logprobs = r->params.sampling.n_logprobs;
	r->params.max_tokens = r->chat ? m->max_model_len : 16;
	const char *mt = r->chat && jget(j, "max_completion_tokens") ? "max_completion_tokens"
								      : "max_tokens";
	if ((rc = int_field(j, mt, 0, 1e9, "an integer in [0, 1000000000]", &x, e)) < 0)
		return rc;
	if (rc)
		r->params.max_tokens = x;
	if ((rc = int_field(j, "n", 1, 16, "an integer in [1, 16]", &x, e)) < 0)
		return rc;
	if (rc)
		r->n = (int)x;
	if ((rc = bool_field(j, "stream", &r->stream, e)) < 0)
		return rc;
	/* vLLM's, which benchmark tools send */
	if ((rc = bool_field(j, "ignore_eos", &r->ignore_eos, e)) < 0)
		return rc;
	if ((rc = int_field(j, "min_tokens", 0, 1e9, "an integer in [0, 1000000000]", &x, e)) < 0)
		return rc;
	if (rc)
		r->params.min_tokens = x;
	const cJSON *so = jget(j, "stream_options");
	if (so && cJSON_IsObject(so))
		r->include_usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
	if ((rc = stop_field(j, r, e)))
		return rc;
	if ((v = jget(j, "model")) && !cJSON_IsString(v))
		return refuse(e, "model", v, "\"model\" must be a string");
	return 0;
}

/* ---- the body ---- */

int ms_req_body(const struct ms_req_model *m, const char *body, size_t len, cJSON **out,
		struct ms_req_error *e)
{
	*out = NULL;
	cJSON *req;
	char why[sizeof(e->msg)];
	int prc = ms_json_parse_strict(body ? body : "", body ? len : 0, &req, why, sizeof(why));
	if (prc == -ENOMEM)
		return oom(e);
	if (prc)
		return refuse(e, NULL, NULL, "%s", why);
	if (!cJSON_IsObject(req)) {
		int rc = refuse(e, NULL, req, "the body is not a JSON object");
		cJSON_Delete(req);
		return rc;
	}
	const cJSON *model = jget(req, "model");
	if (m->name && model && cJSON_IsString(model) && strcmp(model->valuestring, m->name)) {
		snprintf(e->msg, sizeof(e->msg), "the model \"%s\" does not exist (this server has \"%s\")",
			 model->valuestring, m->name);
		e->status = 404;
		e->type = "invalid_request_error";
		e->param = "model";
		e->code = "model_not_found";
		cJSON_Delete(req);
		return -ENOENT;
	}
	*out = req;
	return 0;
}

bool ms_req_known_field(const char *name)
{
	static const char *const known[] = {
		"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature",
		"top_p", "top_k", "min_p", "seed", "stop", "n", "presence_penalty",
		"frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "top_logprobs",
		"echo", "stream", "stream_options", "tools", "tool_choice", "reasoning_effort", "user",
		"suffix", "best_of", "parallel_tool_calls", "response_format", "structured_outputs",
		"ignore_eos", "min_tokens",
		"guided_json", "guided_regex", "guided_choice", "guided_grammar", "grammar", "json_schema",
		NULL,
	};
	for (const char *const *k = known; *k; k++)
		if (!strcmp(*k, name))
			return true;
	return false;
}

const char *ms_req_unknown_field(const cJSON *req)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, req)
		if (!ms_req_known_field(it->string))
			return it->string;
	return NULL;
}

static struct ms_req_gen *gen_new(cJSON *req, bool chat)
{
	struct ms_req_gen *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->req = req;
	r->chat = chat;
	r->n = 1;
	r->logprobs = -1;
	ms_sampling_defaults(&r->params.sampling);
	r->params.sampling.n_logprobs = -1;
	r->params.prompt_logprobs = -1;
	r->params.skip_special = true;
	return r;
}

void ms_req_gen_free(struct ms_req_gen *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->n_prompts; i++) {
		free(r->prompts ? r->prompts[i] : NULL);
		free(r->echo_text ? r->echo_text[i] : NULL);
	}
	free(r->prompts);
	free(r->n_prompt);
	free(r->echo_text);
	free(r->bias);
	cJSON_Delete(r->req);
	cJSON_Delete(r->rsp);
	cJSON_Delete(r->items);
	ms_tool_force_free(r->force);
	free(r);
}

/* ---- POST /v1/completions ---- */

/* A list of token ids into *out (its length in *n). */
static int prompt_ids(const struct ms_req_model *m, const cJSON *p, int at, int32_t **out, int64_t *n,
		      struct ms_req_error *e)
{
	*out = malloc((size_t)(cJSON_GetArraySize(p) + 1) * sizeof(int32_t));
	if (!*out)
		return oom(e);
	const cJSON *it;
	int64_t k = 0;
	cJSON_ArrayForEach(it, p) {
		if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
		    it->valuedouble >= (double)m->vocab)
		{
			char p[48];
			if (at < 0)
				snprintf(p, sizeof(p), "prompt[%lld]", (long long)k);
			else
				snprintf(p, sizeof(p), "prompt[%d][%lld]", at, (long long)k);
			return refuse_code(e, cJSON_IsNumber(it) ? "invalid_value" : "invalid_type", p, it,
					   "Invalid value for '%s': a prompt token must be an id in "
					   "[0, %lld)", p, (long long)m->vocab);
		}
		(*out)[k++] = (int32_t)it->valuedouble;
	}
	*n = k;
	return 0;
}

/* Tokens of one prompt element: a string (encoded, special tokens as plain
 * text) or a list of ids; *text is what echo shows of it. */
static int prompt_tokens(const struct ms_req_model *m, const cJSON *p, int at, int32_t **out,
			 int64_t *n, char **text, struct ms_req_error *e)
{
	struct ms_err err = {0};
	*out = NULL;
	*text = NULL;
	if (cJSON_IsString(p)) {
		if (!m->tok)
			return refuse(e, "prompt", NULL, "this model has no tokenizer.json: send token ids");
		size_t k;
		int rc = ms_tokenizer_encode(m->tok, p->valuestring, strlen(p->valuestring), false, out,
					     &k, &err);
		if (rc)
			return rc == -ENOMEM ? oom(e) : refuse(e, "prompt", NULL, "%.400s", err.msg);
		*n = (int64_t)k;
		*text = strdup(p->valuestring);
		return *text ? 0 : oom(e);
	}
	int rc = prompt_ids(m, p, at, out, n, e);
	if (rc)
		return rc;
	size_t tl;
	/* ids the tokenizer cannot decode (past its vocabulary) echo as nothing */
	if (m->tok && ms_tokenizer_decode(m->tok, *out, (size_t)*n, false, text, &tl, &err) == -ENOMEM)
		return oom(e);
	if (!*text && !(*text = strdup("")))
		return oom(e);
	return 0;
}

/* "prompt": a string, a list of strings, a list of ids or a list of lists
 * of ids (at most 64 prompts). */
static int prompts_field(const struct ms_req_model *m, struct ms_req_gen *r, struct ms_req_error *e)
{
	const cJSON *pr = jget(r->req, "prompt");
	if (!pr)
		return ms_req_missing(e, "prompt");
	const cJSON *first = cJSON_GetArrayItem(pr, 0);
	bool list_of = cJSON_IsArray(pr) && (cJSON_IsString(first) || cJSON_IsArray(first));
	int np = list_of ? cJSON_GetArraySize(pr) : 1;
	if ((!cJSON_IsString(pr) && !cJSON_IsArray(pr)) || np > 64)
		return refuse(e, "prompt", pr, "\"prompt\" must be a string, a list of strings, a list "
			      "of token ids or a list of lists of ids (at most 64)");
	r->prompts = calloc((size_t)np, sizeof(*r->prompts));
	r->n_prompt = calloc((size_t)np, sizeof(*r->n_prompt));
	r->echo_text = calloc((size_t)np, sizeof(*r->echo_text));
	if (!r->prompts || !r->n_prompt || !r->echo_text)
		return oom(e);
	r->n_prompts = np;
	for (int i = 0; i < np; i++) {
		const cJSON *one = list_of ? cJSON_GetArrayItem(pr, i) : pr;
		char at[32];
		snprintf(at, sizeof(at), "prompt[%d]", i);
		if (!list_of)
			at[strlen("prompt")] = '\0';
		if (list_of && !cJSON_IsString(one) && !cJSON_IsArray(one))
			return ms_req_wrong_type(e, one, "a string or a list of token ids", "%s", at);
		int rc = prompt_tokens(m, one, list_of ? i : -1, &r->prompts[i], &r->n_prompt[i],
				       &r->echo_text[i], e);
		if (rc)
			return rc;
		if (r->n_prompt[i] == 0)
			return refuse_code(e, "invalid_value", at, NULL, "\"%s\" is empty", at);
	}
	return 0;
}

/* The fields this server refuses rather than ignores: best_of other than
 * n (drawing best_of and keeping the n likeliest is not done here, and
 * vLLM's V1 engine dropped it too), a suffix (no fill-in-the-middle), echo
 * on chat (the prompt is not repeated there). */
static int unsupported_fields(const struct ms_req_gen *r, struct ms_req_error *e)
{
	const cJSON *j = r->req, *bo = jget(j, "best_of"), *sf = jget(j, "suffix"), *ec = jget(j, "echo");
	const cJSON *ptc = jget(j, "parallel_tool_calls");
	if (!r->chat && bo && (!cJSON_IsNumber(bo) || bo->valuedouble != r->n))
		return ms_req_bad_value(e, bo, "only best_of equal to n is supported (drawing best_of "
					"answers and keeping the n likeliest is not); use \"n\"", "best_of");
	if (!r->chat && sf && (!cJSON_IsString(sf) || sf->valuestring[0]))
		return ms_req_bad_value(e, sf, "this model has no fill-in-the-middle: \"suffix\" must be "
					"empty or absent", "suffix");
	if (r->chat && ec && !cJSON_IsFalse(ec))
		return ms_req_bad_value(e, ec, "\"echo\" is a /v1/completions field: chat does not repeat "
					"the prompt", "echo");
	/* harmony ends the turn at a call: false holds whatever is asked */
	if (ptc && !cJSON_IsBool(ptc))
		return ms_req_wrong_type(e, ptc, "a boolean", "parallel_tool_calls");
	return 0;
}

/* After max_tokens' default is known: min_tokens within it. */
static int min_tokens_check(const struct ms_req_gen *r, struct ms_req_error *e)
{
	if (r->params.min_tokens <= r->params.max_tokens)
		return 0;
	return ms_req_bad_value(e, jget(r->req, "min_tokens"), "\"min_tokens\" must be at most "
				"max_tokens", "min_tokens");
}

static int completion_fields(const struct ms_req_model *m, struct ms_req_gen *r,
			     struct ms_req_error *e)
{
	int rc;
	if ((rc = common_fields(m, r, e)) || (rc = bool_field(r->req, "echo", &r->echo, e)) < 0 ||
	    (rc = unsupported_fields(r, e)) || (rc = min_tokens_check(r, e)))
		return rc;
	if (r->params.max_tokens == 0 && !r->echo)
		return refuse(e, "max_tokens", NULL, "\"max_tokens\" 0 only makes sense with \"echo\"");
	return prompts_field(m, r, e);
}

int ms_req_completion(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		      struct ms_req_error *e)
{
	*out = NULL;
	struct ms_req_gen *r = gen_new(req, false);
	if (!r) {
		cJSON_Delete(req);
		return oom(e);
	}
	int rc = completion_fields(m, r, e);
	if (!rc)
		rc = ms_req_shape(m, r, e);
	if (rc) {
		ms_req_gen_free(r);
		return rc;
	}
	if (r->echo && r->logprobs >= 0)
		r->params.prompt_logprobs = r->logprobs;
	r->params.stop = r->stops;
	r->params.n_stop = r->n_stops;
	int ne = 0;
	for (int i = 0; !r->ignore_eos && i < m->n_eos && ne < 8; i++)
		r->stop_ids[ne++] = m->eos[i];
	r->params.stop_ids = r->stop_ids;
	r->params.n_stop_ids = ne;
	*out = r;
	return 0;
}

/* ---- POST /v1/chat/completions: messages and tools ---- */

/* Keep s (made for the request) until ms_req_chat_free; NULL when s is
 * NULL or cannot be kept (s is freed). */
static const char *keep(struct ms_req_chat *c, char *s)
{
	char **ns = s ? realloc(c->strs, (size_t)(c->n_strs + 1) * sizeof(char *)) : NULL;
	if (!ns) {
		free(s);
		return NULL;
	}
	c->strs = ns;
	return c->strs[c->n_strs++] = s;
}

/* v printed as JSON text and kept, or NULL (out of memory). */
static const char *keep_json(struct ms_req_chat *c, const cJSON *v)
{
	return keep(c, cJSON_PrintUnformatted(v));
}

/* The roles of the API ("function" is its deprecated tool result: a tool
 * message named by "name"). */
enum role { R_SYSTEM, R_DEVELOPER, R_USER, R_ASSISTANT, R_TOOL, R_FUNCTION, R_N };
static const char *const role_names[R_N] = {"system", "developer", "user", "assistant", "tool",
					    "function"};

/* One content part of messages[i].content[j] onto b: "text" for every
 * role, "refusal" for the assistant's; the user's image, audio and file
 * parts are the API's but this model reads text only. */
static int part_text(const cJSON *p, int i, int j, enum role role, struct ms_strbuf *b,
		     struct ms_req_error *e)
{
	static const char *const media[] = {"image_url", "input_audio", "file"};
	if (!cJSON_IsObject(p))
		return ms_req_wrong_type(e, p, "an object", "messages[%d].content[%d]", i, j);
	const cJSON *ty = jget(p, "type");
	if (!ty)
		return ms_req_missing(e, "messages[%d].content[%d].type", i, j);
	if (!cJSON_IsString(ty))
		return ms_req_wrong_type(e, ty, "a string", "messages[%d].content[%d].type", i, j);
	const char *key = !strcmp(ty->valuestring, "text") ? "text"
			  : role == R_ASSISTANT && !strcmp(ty->valuestring, "refusal") ? "refusal" : NULL;
	for (int k = 0; !key && role == R_USER && k < 3; k++)
		if (!strcmp(ty->valuestring, media[k]))
			return ms_req_bad_value(e, ty, "content parts of this type are not supported by "
						"this model (it reads text only: send \"text\" parts)",
						"messages[%d].content[%d].type", i, j);
	if (!key)
		return ms_req_bad_value(e, ty, role == R_USER ? "supported values are \"text\" (and "
					"\"image_url\", \"input_audio\", \"file\", which this model cannot "
					"read)" : role == R_ASSISTANT ? "supported values are \"text\" and "
					"\"refusal\"" : "supported values are \"text\"",
					"messages[%d].content[%d].type", i, j);
	const cJSON *t = jget(p, key);
	if (!t)
		return ms_req_missing(e, "messages[%d].content[%d].%s", i, j, key);
	if (!cJSON_IsString(t))
		return ms_req_wrong_type(e, t, "a string", "messages[%d].content[%d].%s", i, j, key);
	ms_strbuf_str(b, t->valuestring);
	return 0;
}

/* messages[i].content v (present, not null): a string, or a non-empty list
 * of parts joined. */
static int content_text(struct ms_req_chat *c, const cJSON *v, int i, enum role role,
			const char **out, struct ms_req_error *e)
{
	if (cJSON_IsString(v)) {
		*out = v->valuestring;
		return 0;
	}
	if (!cJSON_IsArray(v))
		return ms_req_wrong_type(e, v, "a string or a list of content parts",
					 "messages[%d].content", i);
	if (!cJSON_GetArraySize(v))
		return ms_req_bad_value(e, v, "expected a string or a non-empty list of content parts",
					"messages[%d].content", i);
	struct ms_strbuf b = {0};
	const cJSON *part;
	int j = 0, rc = 0;
	cJSON_ArrayForEach(part, v) {
		if ((rc = part_text(part, i, j++, role, &b, e))) {
			ms_strbuf_free(&b);
			return rc;
		}
	}
	*out = keep(c, ms_strbuf_take(&b));
	return *out ? 0 : oom(e);
}

/* A call's function {name, arguments} at messages[i].<at>: arguments a
 * string of JSON (an object is taken as its text, as some clients send
 * it), or absent. */
static int call_function(struct ms_req_chat *c, const cJSON *fn, int i, const char *at,
			 struct ms_chat_tool_call *call, struct ms_req_error *e)
{
	if (!cJSON_IsObject(fn))
		return ms_req_wrong_type(e, fn, "an object", "messages[%d].%s", i, at);
	const cJSON *nm = jget(fn, "name"), *args = jget(fn, "arguments");
	if (!nm)
		return ms_req_missing(e, "messages[%d].%s.name", i, at);
	if (!cJSON_IsString(nm))
		return ms_req_wrong_type(e, nm, "a string", "messages[%d].%s.name", i, at);
	if (args && !cJSON_IsString(args) && !cJSON_IsObject(args))
		return ms_req_wrong_type(e, args, "a string (the arguments as JSON text)",
					 "messages[%d].%s.arguments", i, at);
	call->name = nm->valuestring;
	call->arguments = cJSON_IsString(args) ? args->valuestring : NULL;
	/* the model reads this text: a NUL as the escape, not the carrier */
	if (cJSON_IsObject(args) && !(call->arguments = keep(c, ms_json_text(args))))
		return oom(e);
	return 0;
}

/* One of messages[i].tool_calls: {id, type "function", function}. */
static int tool_call_of(struct ms_req_chat *c, const cJSON *c1, int i, int j,
			struct ms_chat_tool_call *call, struct ms_req_error *e)
{
	if (!cJSON_IsObject(c1))
		return ms_req_wrong_type(e, c1, "an object", "messages[%d].tool_calls[%d]", i, j);
	const cJSON *id = jget(c1, "id"), *ty = jget(c1, "type"), *fn = jget(c1, "function");
	if (id && !cJSON_IsString(id))
		return ms_req_wrong_type(e, id, "a string", "messages[%d].tool_calls[%d].id", i, j);
	if (ty && !cJSON_IsString(ty))
		return ms_req_wrong_type(e, ty, "a string", "messages[%d].tool_calls[%d].type", i, j);
	if (ty && strcmp(ty->valuestring, "function"))
		return ms_req_bad_value(e, ty, "supported values are \"function\"",
					"messages[%d].tool_calls[%d].type", i, j);
	if (!fn)
		return ms_req_missing(e, "messages[%d].tool_calls[%d].function", i, j);
	char at[64];
	snprintf(at, sizeof(at), "tool_calls[%d].function", j);
	call->id = id ? id->valuestring : NULL;
	return call_function(c, fn, i, at, call, e);
}

/* An assistant message's tool calls (and the deprecated function_call),
 * from c->tcalls[*t] on. */
static int tool_calls_of(struct ms_req_chat *c, const cJSON *m, int i, struct ms_chat_message *cm,
			 int *t, struct ms_req_error *e)
{
	const cJSON *tc = jget(m, "tool_calls"), *fc = jget(m, "function_call"), *c1;
	if (tc && !cJSON_IsArray(tc))
		return ms_req_wrong_type(e, tc, "a list of tool calls", "messages[%d].tool_calls", i);
	cm->tool_calls = &c->tcalls[*t];
	int j = 0, rc;
	cJSON_ArrayForEach(c1, tc) {
		if ((rc = tool_call_of(c, c1, i, j++, &c->tcalls[*t], e)))
			return rc;
		(*t)++;
		cm->n_tool_calls++;
	}
	if (fc) {
		if ((rc = call_function(c, fc, i, "function_call", &c->tcalls[*t], e)))
			return rc;
		(*t)++;
		cm->n_tool_calls++;
	}
	if (!cm->n_tool_calls)
		cm->tool_calls = NULL;
	return 0;
}

/* A tool result's function: its "name", or that of the earlier call its
 * "tool_call_id" names (the first t calls). */
static int tool_name_of(const struct ms_req_chat *c, const cJSON *m, int i, enum role role,
			struct ms_chat_message *cm, int t, struct ms_req_error *e)
{
	const cJSON *id = jget(m, "tool_call_id");
	if (role == R_FUNCTION) {
		if (!cm->name)
			return ms_req_missing(e, "messages[%d].name", i);
		return 0;
	}
	if (!id)
		return ms_req_missing(e, "messages[%d].tool_call_id", i);
	if (!cJSON_IsString(id))
		return ms_req_wrong_type(e, id, "a string", "messages[%d].tool_call_id", i);
	for (int q = 0; !cm->name && q < t; q++)
		if (c->tcalls[q].id && !strcmp(c->tcalls[q].id, id->valuestring))
			cm->name = c->tcalls[q].name;
	if (!cm->name)
		return ms_req_bad_value(e, id, "no earlier tool call has this id (or give the "
					"function's \"name\")", "messages[%d].tool_call_id", i);
	return 0;
}

/* messages[i]'s content by its role's rules: required (a string or parts)
 * for system, developer, user and tool messages; an assistant's may be
 * absent or null when it calls a tool, refuses or only reasons. */
static int content_of(struct ms_req_chat *c, const cJSON *m, int i, enum role role,
		      struct ms_chat_message *cm, struct ms_req_error *e)
{
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (content && !cJSON_IsNull(content))
		return content_text(c, content, i, role, &cm->content, e);
	if (role == R_ASSISTANT) {
		const cJSON *rf = jget(m, "refusal");
		if (rf && !cJSON_IsString(rf))
			return ms_req_wrong_type(e, rf, "a string", "messages[%d].refusal", i);
		if (rf)
			cm->content = rf->valuestring;
		if (rf || jget(m, "tool_calls") || jget(m, "function_call") || cm->reasoning)
			return 0;
	}
	if (!content)
		return ms_req_missing(e, "messages[%d].content", i);
	return ms_req_wrong_type(e, content, role == R_ASSISTANT ? "a string or a list of content "
				 "parts (null only with \"tool_calls\")" : "a string or a list of "
				 "content parts", "messages[%d].content", i);
}

static int message_of(struct ms_req_chat *c, const cJSON *m, int i, int *t, struct ms_req_error *e)
{
	struct ms_chat_message *cm = &c->msgs[i];
	if (!cJSON_IsObject(m))
		return ms_req_wrong_type(e, m, "an object", "messages[%d]", i);
	const cJSON *role = jget(m, "role"), *nm = jget(m, "name");
	if (!role)
		return ms_req_missing(e, "messages[%d].role", i);
	if (!cJSON_IsString(role))
		return ms_req_wrong_type(e, role, "a string", "messages[%d].role", i);
	int r = 0;
	while (r < R_N && strcmp(role_names[r], role->valuestring))
		r++;
	if (r == R_N)
		return ms_req_bad_value(e, role, "supported values are \"system\", \"developer\", "
					"\"user\", \"assistant\", \"tool\" and \"function\"",
					"messages[%d].role", i);
	cm->role = r == R_FUNCTION ? "tool" : role_names[r];
	if (nm && !cJSON_IsString(nm))
		return ms_req_wrong_type(e, nm, "a string", "messages[%d].name", i);
	if (nm && (r == R_TOOL || r == R_FUNCTION))
		cm->name = nm->valuestring;
	const cJSON *rs = jget(m, "reasoning_content");
	if (rs && !cJSON_IsString(rs))
		return ms_req_wrong_type(e, rs, "a string", "messages[%d].reasoning_content", i);
	rs = rs ? rs : jget(m, "reasoning");
	if (r == R_ASSISTANT && cJSON_IsString(rs))
		cm->reasoning = rs->valuestring;
	int rc = content_of(c, m, i, (enum role)r, cm, e);
	if (!rc && r == R_ASSISTANT)
		rc = tool_calls_of(c, m, i, cm, t, e);
	if (!rc && (r == R_TOOL || r == R_FUNCTION))
		rc = tool_name_of(c, m, i, (enum role)r, cm, *t, e);
	return rc;
}

static int messages_field(const cJSON *req, struct ms_req_chat *c, struct ms_req_error *e)
{
	const cJSON *ms = jget(req, "messages"), *m;
	if (!ms)
		return ms_req_missing(e, "messages");
	if (!cJSON_IsArray(ms) || !cJSON_GetArraySize(ms))
		return refuse(e, "messages", ms, "\"messages\" must be a non-empty list");
	int n = cJSON_GetArraySize(ms), ntc = 0;
	cJSON_ArrayForEach(m, ms) {
		const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		ntc += cJSON_IsArray(tc) ? cJSON_GetArraySize(tc) : 0;
		ntc += jget(m, "function_call") != NULL;
	}
	c->msgs = calloc((size_t)n, sizeof(*c->msgs));
	c->tcalls = calloc((size_t)ntc + 1, sizeof(*c->tcalls));
	if (!c->msgs || !c->tcalls)
		return oom(e);
	int i = 0, t = 0, rc;
	cJSON_ArrayForEach(m, ms) {
		if ((rc = message_of(c, m, i, &t, e)))
			return rc;
		i++;
	}
	c->cr.messages = c->msgs;
	c->cr.n_messages = n;
	return 0;
}

/* ---- tool definitions (their functions: request-tools.c) ---- */

/* Chat's tools: [{"type": "function", "function": {...}}]; "type" may be
 * left out (vLLM's default), any other type is refused. */
static int tools_field(const cJSON *req, struct ms_req_chat *c, struct ms_req_error *e)
{
	const cJSON *tools = jget(req, "tools"), *tl;
	if (!tools)
		return 0;
	if (!cJSON_IsArray(tools))
		return refuse(e, "tools", tools, "\"tools\" must be a list");
	c->tools = calloc((size_t)cJSON_GetArraySize(tools) + 1, sizeof(*c->tools));
	if (!c->tools)
		return oom(e);
	int k = 0, rc;
	cJSON_ArrayForEach(tl, tools) {
		if (!cJSON_IsObject(tl))
			return ms_req_wrong_type(e, tl, "an object", "tools[%d]", k);
		const cJSON *ty = jget(tl, "type"), *fn = jget(tl, "function");
		if (ty && !cJSON_IsString(ty))
			return ms_req_wrong_type(e, ty, "a string", "tools[%d].type", k);
		if (ty && strcmp(ty->valuestring, "function"))
			return ms_req_bad_value(e, ty, "supported values are \"function\"",
						"tools[%d].type", k);
		if (!fn)
			return ms_req_missing(e, "tools[%d].function", k);
		if (!cJSON_IsObject(fn))
			return ms_req_wrong_type(e, fn, "an object", "tools[%d].function", k);
		char at[32];
		snprintf(at, sizeof(at), "tools[%d].function", k);
		if ((rc = ms_req_check_function(fn, at, e)))
			return rc;
		const cJSON *ds = jget(fn, "description"), *ps = jget(fn, "parameters");
		c->tools[k].name = jget(fn, "name")->valuestring;
		c->tools[k].description = ds ? ds->valuestring : NULL;
		if (ps && !(c->tools[k].parameters = keep_json(c, ps)))
			return oom(e);
		k++;
	}
	c->cr.tools = c->tools;
	c->cr.n_tools = k;
	return 0;
}

int ms_req_chat_messages(const cJSON *req, struct ms_req_chat *c, struct ms_req_error *e)
{
	memset(c, 0, sizeof(*c));
	int rc;
	if ((rc = messages_field(req, c, e)) || (rc = tools_field(req, c, e)))
		return rc;
	const cJSON *re = jget(req, "reasoning_effort");
	if (!re)
		return 0;
	if (!cJSON_IsString(re) || !(c->cr.reasoning_effort = ms_req_effort(re->valuestring)))
		return refuse(e, "reasoning_effort", re, "\"reasoning_effort\" must be " MS_REQ_EFFORTS);
	return 0;
}

const char *ms_req_effort(const char *v)
{
	static const char *const from[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
	static const char *const to[] = {"low", "low", "low", "medium", "high", "high", "high"};
	for (size_t k = 0; k < sizeof(from) / sizeof(from[0]); k++)
		if (!strcmp(v, from[k]))
			return to[k];
	return NULL;
}

void ms_req_chat_free(struct ms_req_chat *c)
{
	for (int i = 0; i < c->n_strs; i++)
		free(c->strs[i]);
	free(c->strs);
	free(c->msgs);
	free(c->tools);
	free(c->tcalls);
	memset(c, 0, sizeof(*c));
}

/* ---- POST /v1/chat/completions: the prompt ---- */

/* The rendered text as ids: the text between the renderer's special tokens
 * with special tokens off (a user's "<|end|>" stays text), the specials by
 * id. */
static int encode_rendered(const struct ms_tokenizer *tok, const char *text, size_t tlen,
			   const struct ms_harmony_span *sp, size_t nsp, int32_t *ids, int64_t *nid,
			   struct ms_req_error *e)
{
	struct ms_err err = {0};
	size_t at = 0;
	*nid = 0;
	for (size_t q = 0; q <= nsp; q++) {
		size_t end = q < nsp ? sp[q].off : tlen;
		if (end > at) {
			int32_t *part;
			size_t np;
			int rc = ms_tokenizer_encode(tok, text + at, end - at, false, &part, &np, &err);
			if (rc)
				return rc == -ENOMEM ? oom(e) : refuse(e, "messages", NULL, "%s", err.msg);
			memcpy(ids + *nid, part, np * sizeof(int32_t));
			*nid += (int64_t)np;
			free(part);
		}
		if (q < nsp) {
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)sp[q].len, text + sp[q].off);
			if ((ids[(*nid)++] = ms_tokenizer_find(tok, name)) < 0)
				return refuse(e, "messages", NULL, "the tokenizer has no special token %s "
					      "(the harmony renderer wrote it)", name);
			at = sp[q].off + sp[q].len;
		}
	}
	return 0;
}

/* "tool_choice": none renders no tools; "required" or a named function
 * forces a call (request-structured.c builds it once max_tokens is known);
 * auto (and absent) leaves the model free. */
#define TOOL_CHOICES "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": " \
		     "{\"name\": ...}}"

/* tool_choice as an object: the function it names ({"function": {"name"}},
 * or the Responses API's flat {"name"}). */
static int tool_choice_named(const cJSON *tc, const char **name, struct ms_req_error *e)
{
	if (!cJSON_IsObject(tc))
		return ms_req_wrong_type(e, tc, TOOL_CHOICES, "tool_choice");
	const cJSON *ty = jget(tc, "type"), *fn = jget(tc, "function");
	if (ty && !cJSON_IsString(ty))
		return ms_req_wrong_type(e, ty, "a string", "tool_choice.type");
	if (ty && strcmp(ty->valuestring, "function"))
		return ms_req_bad_value(e, ty, "supported values are \"function\"", "tool_choice.type");
	if (fn && !cJSON_IsObject(fn))
		return ms_req_wrong_type(e, fn, "an object", "tool_choice.function");
	const cJSON *nm = jget(fn ? fn : tc, "name");
	if (!nm)
		return ms_req_missing(e, "tool_choice.function.name");
	if (!cJSON_IsString(nm))
		return ms_req_wrong_type(e, nm, "a string", fn ? "tool_choice.function.name"
					 : "tool_choice.name");
	*name = nm->valuestring;
	return 0;
}

static int tool_choice_field(struct ms_req_gen *r, struct ms_req_chat *c, struct ms_req_error *e)
{
	const cJSON *tc = jget(r->req, "tool_choice");
	if (!tc || (cJSON_IsString(tc) && !strcmp(tc->valuestring, "auto")))
		return 0;
	if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")) {
		r->tool_choice = MS_TC_NONE;
		c->cr.n_tools = 0;
		return 0;
	}
	r->tool_choice = MS_TC_REQUIRED;
	if (cJSON_IsString(tc) && strcmp(tc->valuestring, "required"))
		return ms_req_bad_value(e, tc, "supported values are " TOOL_CHOICES, "tool_choice");
	int rc;
	if (!cJSON_IsString(tc) && (rc = tool_choice_named(tc, &r->tool_named, e)))
		return rc;
	if (r->tool_named)
		r->tool_choice = MS_TC_NAMED;
	for (int i = 0; i < c->cr.n_tools; i++)
		if (!r->tool_named || !strcmp(r->tool_named, c->cr.tools[i].name))
			return 0;
	return refuse(e, "tool_choice", NULL, r->tool_named ? "tool_choice names the function \"%s\", "
		      "which is not among the tools" : "tool_choice \"required\" needs tools%s",
		      r->tool_named ? r->tool_named : "");
}

/* The answer's schema, shown to the model in the developer message. */
static int response_format_text(struct ms_req_gen *r, struct ms_req_chat *c, struct ms_req_error *e)
{
	const char *name, *desc;
	const cJSON *sch = ms_req_answer_schema(r->req, &name, &desc);
	if (!sch)
		return 0;
	c->cr.response_format = cJSON_IsString(sch) ? sch->valuestring : keep_json(c, sch);
	c->cr.response_format_name = name;
	c->cr.response_format_desc = desc;
	return c->cr.response_format ? 0 : oom(e);
}

/* The messages rendered with harmony and encoded: the request's one prompt. */
static int chat_prompt(const struct ms_req_model *m, struct ms_req_gen *r, struct ms_req_error *e)
{
	struct ms_req_chat c;
	char *text = NULL;
	size_t tlen = 0, nsp = 0;
	struct ms_harmony_span *sp = NULL;
	struct ms_err err = {0};
	int rc = ms_req_chat_messages(r->req, &c, e);
	if (!rc)
		rc = tool_choice_field(r, &c, e);
	if (!rc)
		rc = response_format_text(r, &c, e);
	if (!rc && (rc = ms_harmony_render_ex(&c.cr, &text, &tlen, &sp, &nsp, &err)))
		rc = rc == -ENOMEM ? oom(e) : refuse(e, "messages", NULL, "%s", err.msg);
	ms_req_chat_free(&c);
	if (!rc) {
		r->prompts = calloc(1, sizeof(*r->prompts));
		r->n_prompt = calloc(1, sizeof(*r->n_prompt));
		if (r->prompts && r->n_prompt)
			r->n_prompts = 1;
		/* each byte of text is at most one token */
		if (!r->n_prompts || !(r->prompts[0] = malloc((tlen + nsp + 1) * sizeof(int32_t))))
			rc = oom(e);
	}
	if (!rc)
		rc = encode_rendered(m->tok, text, tlen, sp, nsp, r->prompts[0], &r->n_prompt[0], e);
	free(text);
	free(sp);
	return rc;
}

/* max_tokens as a ceiling (ms_req_chat_within): what the context leaves
 * after the prompt, at most serve's --max-tokens; a prompt that leaves no
 * room is refused in Anthropic's words, which Claude Code reads to compact
 * the conversation. */
static int clamp_max_tokens(const struct ms_req_model *m, struct ms_req_gen *r,
			    struct ms_req_error *e)
{
	int64_t left = m->max_model_len - r->n_prompt[0];
	if (left < 1)
		return refuse(e, "messages", NULL, "prompt is too long: %lld tokens > %lld maximum (the "
			      "context, less one token for the answer)", (long long)r->n_prompt[0],
			      (long long)(m->max_model_len - 1));
	if (r->params.max_tokens > left)
		r->params.max_tokens = left;
	if (m->default_max_tokens > 0 && r->params.max_tokens > m->default_max_tokens)
		r->params.max_tokens = m->default_max_tokens;
	return 0;
}

static int chat_request(const struct ms_req_model *m, cJSON *req, bool within,
			int64_t reason_budget, struct ms_req_gen **out, struct ms_req_error *e)
{
	*out = NULL;
	if (!m->tok || !m->harmony) {
		cJSON_Delete(req);
		return refuse(e, NULL, NULL, "chat needs the model's tokenizer.json with the harmony "
			      "special tokens (<|start|>, <|message|>, ...); use /v1/completions");
	}
	struct ms_req_gen *r = gen_new(req, true);
	if (!r) {
		cJSON_Delete(req);
		return oom(e);
	}
	r->reason_budget = reason_budget;
	int rc = common_fields(m, r, e);
	if (!rc)
		rc = unsupported_fields(r, e);
	if (!rc)
		rc = chat_prompt(m, r, e);
	if (!rc && within)
		rc = clamp_max_tokens(m, r, e);
	if (rc) {
		ms_req_gen_free(r);
		return rc;
	}
	/* the rest of the context; at least one token, so that a prompt that
	 * fills it is the engine's "exceeds the context" (both sizes named) */
	if (!within && !jget(req, "max_tokens") && !jget(req, "max_completion_tokens")) {
		r->params.max_tokens = m->max_model_len - r->n_prompt[0] > 1
				       ? m->max_model_len - r->n_prompt[0] : 1;
		if (m->default_max_tokens > 0 && m->default_max_tokens < r->params.max_tokens)
			r->params.max_tokens = m->default_max_tokens; /* serve --max-tokens */
	}
	if ((rc = min_tokens_check(r, e)) || (rc = ms_req_shape(m, r, e))) {
		ms_req_gen_free(r);
		return rc;
	}
	/* ignore_eos: not even harmony's end of turn stops it */
	int ne = 0;
	if (!r->ignore_eos) {
		r->stop_ids[ne++] = m->hids.ret;
		r->stop_ids[ne++] = m->hids.call;
	}
	for (int i = 0; !r->ignore_eos && i < m->n_eos && ne < 10; i++)
		r->stop_ids[ne++] = m->eos[i];
	r->params.stop_ids = r->stop_ids;
	r->params.n_stop_ids = ne;
	*out = r;
	return 0;
}

int ms_req_chat(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
		struct ms_req_error *e)
{
	return chat_request(m, req, false, 0, out, e);
}

int ms_req_chat_within(const struct ms_req_model *m, cJSON *req, int64_t reason_budget,
		       struct ms_req_gen **out, struct ms_req_error *e)
{
	return chat_request(m, req, true, reason_budget, out, e);
}

int ms_req_chat_ids(const struct ms_req_model *m, const cJSON *req, int32_t **ids, int64_t *n,
		    struct ms_req_error *e)
{
	*n = 0;
	if (ids)
		*ids = NULL;
	if (!m->tok || !m->harmony)
		return refuse(e, NULL, NULL, "a conversation's tokens need the model's tokenizer.json "
			      "with the harmony special tokens");
	/* the request is borrowed: the parsed request must not delete it */
	struct ms_req_gen *r = gen_new(NULL, true);
	if (!r)
		return oom(e);
	r->req = (cJSON *)req;
	int rc = chat_prompt(m, r, e);
	if (!rc) {
		*n = r->n_prompt[0];
		if (ids)
			*ids = r->prompts[0], r->prompts[0] = NULL;
	}
	r->req = NULL;
	ms_req_gen_free(r);
	return rc;
}

int ms_req_chat_count(const struct ms_req_model *m, const cJSON *req, int64_t *n,
		      struct ms_req_error *e)
{
	return ms_req_chat_ids(m, req, NULL, n, e);
}

/* ---- POST /tokenize, /detokenize ---- */

int ms_req_tokenize(const struct ms_req_model *m, const cJSON *req, int32_t **ids, size_t *n,
		    struct ms_req_error *e)
{
	const cJSON *p = jget(req, "prompt");
	if (!p)
		p = jget(req, "text");
	const cJSON *sp = jget(req, "add_special_tokens");
	*ids = NULL;
	*n = 0;
	if (!m->tok)
		return refuse(e, NULL, NULL, "this model has no tokenizer.json");
	if (jget(req, "messages")) { /* a chat conversation, as chat renders it */
		int64_t cn;
		int rc = ms_req_chat_ids(m, req, ids, &cn, e);
		*n = (size_t)cn;
		return rc;
	}
	if (!p || !cJSON_IsString(p))
		return refuse(e, "prompt", p, "\"prompt\" must be a string");
	/* special tokens written in the text count only when asked */
	bool special = sp && cJSON_IsTrue(sp);
	struct ms_err err = {0};
	int rc = ms_tokenizer_encode(m->tok, p->valuestring, strlen(p->valuestring), special, ids, n,
				     &err);
	if (rc)
		return rc == -ENOMEM ? oom(e) : refuse(e, "prompt", NULL, "%s", err.msg);
	return 0;
}

int ms_req_detokenize(const struct ms_req_model *m, const cJSON *req, char **text, size_t *len,
		      struct ms_req_error *e)
{
	const cJSON *t = jget(req, "tokens"), *it;
	*text = NULL;
	*len = 0;
	if (!m->tok)
		return refuse(e, "tokens", NULL, "this model has no tokenizer.json");
	if (!t || !cJSON_IsArray(t))
		return refuse(e, "tokens", t, "\"tokens\" must be a list of ids");
	int n = cJSON_GetArraySize(t), i = 0, n_ids = ms_tokenizer_n_ids(m->tok);
	int32_t *ids = malloc((size_t)(n + 1) * sizeof(int32_t));
	if (!ids)
		return oom(e);
	cJSON_ArrayForEach(it, t) {
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= n_ids ||
		    it->valuedouble != floor(it->valuedouble)) {
			free(ids);
			return refuse(e, "tokens", it, "tokens[%d] is not an id in [0, %d)", i, n_ids);
		}
		ids[i++] = (int32_t)it->valuedouble;
	}
	struct ms_err err = {0};
	int rc = ms_tokenizer_decode(m->tok, ids, (size_t)n, false, text, len, &err);
	free(ids);
	if (rc)
		return rc == -ENOMEM ? oom(e) : refuse(e, "tokens", NULL, "%s", err.msg);
	return 0;
}
