/*
 * reqtest.h: what the request parsers' tests share (test-server-requests.c,
 * test-server-responses.c, test-server-messages.c): the model they parse
 * for (the default model's tokenizer, harmony tokens included), parsing a
 * body as the server does, the checks of an accepted and a refused body,
 * the prompts of two APIs compared, and scripted model output fed to an
 * answer writer. The tokenizer and the
 * grammar cache are one per program, in reqtest.c, whatever files include
 * this.
 */
#ifndef MS_TEST_REQTEST_H
#define MS_TEST_REQTEST_H

#include <check.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-cache.h"
#include "api.h"
#include "harmony.h"
#include "job.h"
#include "request.h"
#include "tokenizer.h"

#ifndef MS_DEFAULT_MODEL
#define MS_DEFAULT_MODEL "models/default/bf16"
#endif

/* reqtest.c: one of each per test program, whatever its files */
extern struct ms_tokenizer *tok;
extern struct ms_grammar_cache *grammars; /* made at the first model(), kept */
extern const int32_t eos[2];               /* the default model's */

#define VOCAB 4096
#define CONTEXT 8192

static inline struct ms_req_model model(void)
{
	struct ms_req_model m = {
		.name = "kjv", .vocab = VOCAB, .max_model_len = CONTEXT, .tok = tok, .eos = eos, .n_eos = 2,
	};
	m.hids = ms_harmony_ids_find(tok);
	m.harmony = true;
	struct ms_err err = {0};
	if (!grammars && ms_grammar_cache_new(ms_tokenizer_vocab(tok), VOCAB, 0, NULL, &grammars, &err)) {
		fprintf(stderr, "reqtest: %s\n", err.msg);
		abort(); /* outside a test case too: no ck_assert here */
	}
	m.grammars = grammars;
	return m;
}

typedef int (*parse_fn)(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
			struct ms_req_error *e);

/* The body as the server takes it: ms_req_body, then the endpoint's parser. */
static inline int parse_with(const struct ms_req_model *m, parse_fn fn, const char *json,
		      struct ms_req_gen **r, struct ms_req_error *e)
{
	cJSON *req;
	*r = NULL;
	int rc = ms_req_body(m, json, strlen(json), &req, e);
	return rc ? rc : fn(m, req, r, e);
}

static inline struct ms_req_gen *accepted(parse_fn fn, const char *json)
{
	struct ms_req_model m = model();
	struct ms_req_gen *r;
	struct ms_req_error e = {0};
	int rc = parse_with(&m, fn, json, &r, &e);
	ck_assert_msg(rc == 0, "%s: refused: %d %s (param %s)", json, e.status, e.msg,
		      e.param ? e.param : "null");
	ck_assert_ptr_nonnull(r);
	return r;
}

#define CMPL(json) accepted(ms_req_completion, json)
#define CHAT(json) accepted(ms_req_chat, json)

/* json refused with status and param (NULL: none), the message holding
 * every needle. */
static inline void refused_by(const struct ms_req_model *m, parse_fn fn, const char *json, int status,
		       const char *param, const char *const *needles)
{
	struct ms_req_gen *r;
	struct ms_req_error e = {0};
	int rc = parse_with(m, fn, json, &r, &e);
	ck_assert_msg(rc < 0, "%s: accepted", json);
	ck_assert_msg(r == NULL, "%s: refused, yet a request came out", json);
	ck_assert_msg(e.status == status, "%s: status %d, want %d (%s)", json, e.status, status, e.msg);
	if (param)
		ck_assert_msg(e.param && !strcmp(e.param, param), "%s: param %s, want %s (%s)", json,
			      e.param ? e.param : "null", param, e.msg);
	else
		ck_assert_msg(!e.param, "%s: param %s, want null (%s)", json, e.param, e.msg);
	for (const char *const *n = needles; *n; n++)
		ck_assert_msg(strstr(e.msg, *n), "%s: the message \"%s\" lacks \"%s\"", json, e.msg, *n);
}

static inline void refused(parse_fn fn, const char *json, int status, const char *param,
		    const char *const *needles)
{
	struct ms_req_model m = model();
	refused_by(&m, fn, json, status, param, needles);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define CMPL_BAD(json, param, ...) refused(ms_req_completion, json, 400, param, NEEDLES(__VA_ARGS__))
#define CHAT_BAD(json, param, ...) refused(ms_req_chat, json, 400, param, NEEDLES(__VA_ARGS__))

/* The ids of text, encoded as a completion prompt is (special tokens as text). */
static inline size_t encode(const char *text, int32_t **ids)
{
	size_t n;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_tokenizer_encode(tok, text, strlen(text), false, ids, &n, &err), 0);
	return n;
}

/* The prompt as text, special tokens spelled out. */
static inline char *prompt_text(const struct ms_req_gen *r, int i)
{
	char *text;
	size_t len;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_tokenizer_decode(tok, r->prompts[i], (size_t)r->n_prompt[i], false, &text,
					     &len, &err), 0);
	return text;
}

/* The default model's tokenizer into tok; 1 (said on stderr) when it
 * cannot be read. */
int reqtest_load(const char *who);

/* How often id occurs in the first prompt of r. */
static inline int count_id(const struct ms_req_gen *r, int32_t id)
{
	int c = 0;
	for (int64_t i = 0; i < r->n_prompt[0]; i++)
		c += r->prompts[0][i] == id;
	return c;
}

/* Two parsers' prompts, the same ids (both requests freed); api names the
 * first parser, what the case. */
static inline void same_prompt_as(struct ms_req_gen *a, struct ms_req_gen *b, const char *api,
				  const char *what)
{
	char *ta = prompt_text(a, 0), *tb = prompt_text(b, 0);
	ck_assert_msg(a->n_prompt[0] == b->n_prompt[0] &&
		      !memcmp(a->prompts[0], b->prompts[0], (size_t)a->n_prompt[0] * 4),
		      "%s: %s renders\n%s\nchat renders\n%s", what, api, ta, tb);
	free(ta), free(tb);
	ms_req_gen_free(a);
	ms_req_gen_free(b);
}

/* The model's output, harmony text with special tokens spelled out, as
 * the engine's token events to fn (special tokens without text, as the
 * engine sends them), then the finish (50 prompt tokens, 10 cached). */
static inline void feed_script(struct ms_job *jb, const struct ms_harmony_ids *h,
			       void (*fn)(struct ms_job *, const struct ms_ev *), const char *script,
			       enum ms_finish fin)
{
	int32_t *ids;
	size_t n;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_tokenizer_encode(tok, script, strlen(script), true, &ids, &n, &err), 0);
	for (size_t i = 0; i < n; i++) {
		char *text = NULL;
		size_t len = 0;
		bool special = ids[i] == h->start || ids[i] == h->end || ids[i] == h->message ||
			       ids[i] == h->channel || ids[i] == h->constrain || ids[i] == h->ret ||
			       ids[i] == h->call;
		if (!special)
			ck_assert_int_eq(ms_tokenizer_decode(tok, &ids[i], 1, false, &text, &len, &err), 0);
		struct ms_ev e = {.kind = MS_EV_TOKEN, .token = ids[i], .text = text, .len = len};
		fn(jb, &e);
		free(text);
	}
	struct ms_ev f = {.kind = MS_EV_FINISH, .finish = fin, .prompt_tokens = 50,
			  .cached_tokens = 10, .completion_tokens = (int64_t)n};
	fn(jb, &f);
	free(ids);
}

/* A job of one choice as job.c makes one, for the parsed request rq on
 * srv, its id prefix then a number; test_job_free frees what both make. */
static inline struct ms_job *test_job(struct ms_api *srv, struct ms_req_gen *rq, const char *prefix)
{
	struct ms_job *jb = calloc(1, sizeof(*jb));
	jb->api = srv;
	jb->rq = rq;
	jb->n = 1;
	jb->ch = calloc(1, sizeof(*jb->ch));
	jb->created = 1700000000;
	snprintf(jb->id, sizeof(jb->id), "%s%d", prefix, (int)atomic_fetch_add(&srv->counter, 1));
	ms_harmony_parser_init(&jb->ch[0].hp, &srv->hids, NULL, NULL);
	return jb;
}

static inline void test_job_free(struct ms_job *jb)
{
	ms_harmony_parser_free(&jb->ch[0].hp);
	ms_req_gen_free(jb->rq);
	ms_strbuf_free(&jb->out);
	free(jb->ch);
	free(jb);
}

/* An answer's fields, the test failing when one is missing. */
static inline const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static inline const char *sget(const cJSON *o, const char *k)
{
	const cJSON *v = get(o, k);
	ck_assert_msg(cJSON_IsString(v), "no string \"%s\"", k);
	return v->valuestring;
}

static inline double nget(const cJSON *o, const char *k)
{
	const cJSON *v = get(o, k);
	ck_assert_msg(cJSON_IsNumber(v), "no number \"%s\"", k);
	return v->valuedouble;
}

/* An SSE text's events, parsed: each "event: T\ndata: J\n\n" with T J's
 * type; numbered: each J's sequence_number counts from 0. */
static inline cJSON *sse_events(const char *sse, bool numbered)
{
	cJSON *evs = cJSON_CreateArray();
	const char *p = sse;
	long seq = 0;
	while (*p) {
		const char *end = strstr(p, "\n\n");
		ck_assert_msg(end, "an SSE event without its blank line: %s", p);
		ck_assert_msg(!strncmp(p, "event: ", 7), "no event line: %.80s", p);
		const char *nl = strchr(p, '\n');
		ck_assert_msg(!strncmp(nl + 1, "data: ", 6), "no data line: %.80s", p);
		cJSON *j = cJSON_ParseWithLength(nl + 7, (size_t)(end - nl - 7));
		ck_assert_msg(j, "data is not JSON: %.80s", nl + 7);
		char type[96];
		snprintf(type, sizeof(type), "%.*s", (int)(nl - p - 7), p + 7);
		ck_assert_str_eq(sget(j, "type"), type);
		if (numbered)
			ck_assert_int_eq((long)nget(j, "sequence_number"), seq++);
		cJSON_AddItemToArray(evs, j);
		p = end + 2;
	}
	return evs;
}

#define USER_HI "\"messages\": [{\"role\": \"user\", \"content\": \"Who is the king of Israel?\"}]"

#endif
