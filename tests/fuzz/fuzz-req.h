/*
 * fuzz-req.h: the request model of the req-* and harmony-render targets:
 * the default model's tokenizer with its harmony tokens, a grammar cache,
 * cJSON's counting allocator, as server/http/http.c sets them up; it defines
 * the target's LLVMFuzzerInitialize. Include after fuzz.h.
 */
#ifndef MS_TEST_FUZZ_REQ_H
#define MS_TEST_FUZZ_REQ_H

#include "grammar-cache.h"
#include "ms-json.h"
#include "request.h"

static struct ms_grammar_cache *fuzz_grammars;
static const int32_t fuzz_eos[] = {4084, 4081};

static void fuzz_grammars_free(void)
{
	ms_grammar_cache_free(fuzz_grammars);
	fuzz_grammars = NULL;
}

/* What server/api/api.c's req_model gives the parsers for the default model
 * (4,096 ids, an 8,192-token context). */
static inline struct ms_req_model fuzz_req_model(void)
{
	struct ms_tokenizer *tok = fuzz_tokenizer();
	struct ms_req_model m = {
		.name = "bf16", .vocab = 4096, .max_model_len = 8192, .tok = tok,
		.eos = fuzz_eos, .n_eos = 2,
	};
	m.hids = ms_harmony_ids_find(tok);
	m.harmony = true;
	if (!fuzz_grammars) {
		struct ms_err err = {0};
		/* a small LRU: most inputs compile their grammar afresh */
		if (ms_grammar_cache_new(ms_tokenizer_vocab(tok), 4096, 4, NULL, &fuzz_grammars, &err)) {
			fprintf(stderr, "fuzz: %s\n", err.msg);
			exit(1);
		}
		atexit(fuzz_grammars_free);
	}
	m.grammars = fuzz_grammars;
	return m;
}

/* Every includer's one-time setup: the tokenizer, the grammar cache,
 * cJSON's allocator (before the first parse, as the server does). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	ms_json_init();
	(void)fuzz_req_model();
	return 0;
}

/* The body as server/api/api.c's ms_api_body takes it: ms_req_body on
 * exactly size bytes. The error, when refused, must say something. */
static inline cJSON *fuzz_req_body(const struct ms_req_model *m, const uint8_t *data, size_t size)
{
	char *body = fuzz_dup(data, size, false);
	cJSON *req = NULL;
	struct ms_req_error e = {0};
	int rc = ms_req_body(m, body, size, &req, &e);
	free(body);
	if (rc) {
		FUZZ_CHECK(!req, "refused body, yet a tree");
		FUZZ_CHECK(e.status >= 400 && e.msg[0], "refusal without status or message");
		return NULL;
	}
	FUZZ_CHECK(req, "accepted body without a tree");
	return req;
}

/* A parser's outcome: a request, or a refusal with status and message. */
static inline void fuzz_req_outcome(int rc, const struct ms_req_gen *r, const struct ms_req_error *e)
{
	if (rc) {
		FUZZ_CHECK(r == NULL, "refused (%d), yet a request", rc);
		FUZZ_CHECK(e->status >= 400 && e->status < 600 && e->msg[0], "status %d msg \"%s\"",
			   e->status, e->msg);
		return;
	}
	FUZZ_CHECK(r && r->n_prompts >= 1 && r->n >= 1, "accepted, without prompts");
	for (int i = 0; i < r->n_prompts; i++)
		for (int64_t j = 0; j < r->n_prompt[i]; j++)
			FUZZ_CHECK(r->prompts[i][j] >= 0 && r->prompts[i][j] < 4096,
				   "prompt %d token %lld is %d", i, (long long)j, r->prompts[i][j]);
}

/* A body of POST /v1/completions or /v1/chat/completions as
 * server/api/api.c takes it: ms_req_body, ms_req_unknown_field, then the
 * endpoint's parser (which takes the tree); everything freed. */
typedef int (*fuzz_req_parser)(const struct ms_req_model *m, cJSON *req, struct ms_req_gen **out,
			       struct ms_req_error *e);

static inline int fuzz_req_gen(const uint8_t *data, size_t size, fuzz_req_parser parse)
{
	struct ms_req_model m = fuzz_req_model();
	cJSON *req = fuzz_req_body(&m, data, size);
	if (!req)
		return 0;
	(void)ms_req_unknown_field(req);
	struct ms_req_gen *r = NULL;
	struct ms_req_error e = {0};
	int rc = parse(&m, req, &r, &e);
	fuzz_req_outcome(rc, r, &e);
	ms_req_gen_free(r);
	return 0;
}

#endif
