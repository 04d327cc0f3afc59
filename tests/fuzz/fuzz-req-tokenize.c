/* req-tokenize: POST /tokenize and /detokenize bodies as server/api/api.c
 * takes them (ms_req_body, then ms_req_tokenize and ms_req_detokenize on
 * the same tree); tokenized ids are in the vocabulary, and decoding them
 * back through /detokenize's parser must be accepted. */
#include "fuzz.h"
#include "fuzz-req.h"

/* {"tokens": ids} through /detokenize: ids from /tokenize are valid. */
static void detokenize_ids(const struct ms_req_model *m, const int32_t *ids, size_t n)
{
	cJSON *j = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(j, "tokens");
	for (size_t i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
	char *text = NULL;
	size_t len = 0;
	struct ms_req_error e = {0};
	int rc = ms_req_detokenize(m, j, &text, &len, &e);
	/* an allocation that cJSON lost would be a shorter list, still valid */
	FUZZ_CHECK(rc == 0 || e.status == 500, "tokenize's ids refused by detokenize: %d %s",
		   e.status, e.msg);
	free(text);
	cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ms_req_model m = fuzz_req_model();
	cJSON *req = fuzz_req_body(&m, data, size);
	if (!req)
		return 0;
	int32_t *ids = NULL;
	size_t n = 0;
	struct ms_req_error e = {0};
	int rc = ms_req_tokenize(&m, req, &ids, &n, &e);
	if (!rc) {
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(ids[i] >= 0 && ids[i] < m.vocab, "id %zu is %d", i, ids[i]);
		detokenize_ids(&m, ids, n);
	} else {
		FUZZ_CHECK(e.status >= 400 && e.msg[0], "tokenize refusal %d \"%s\"", e.status, e.msg);
	}
	free(ids);
	char *text = NULL;
	size_t len = 0;
	memset(&e, 0, sizeof(e));
	rc = ms_req_detokenize(&m, req, &text, &len, &e);
	FUZZ_CHECK(rc == 0 || (e.status >= 400 && e.msg[0]), "detokenize refusal %d", e.status);
	free(text);
	cJSON_Delete(req);
	return 0;
}
