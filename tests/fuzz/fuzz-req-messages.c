/* req-messages: POST /v1/messages and /v1/messages/count_tokens bodies as
 * server/api/api.c takes them: ms_req_body with any model name, the count,
 * then ms_req_messages; everything freed. */
#include "fuzz.h"
#include "fuzz-req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ms_req_model m = fuzz_req_model();
	m.name = NULL; /* Anthropic's clients name their own models */
	cJSON *req = fuzz_req_body(&m, data, size);
	if (!req)
		return 0;
	int64_t n = -1;
	struct ms_req_error e = {0};
	int rc = ms_req_messages_count(&m, req, &n, &e); /* req not taken */
	FUZZ_CHECK(rc ? e.status >= 400 && e.msg[0] : n > 0, "a count without a prompt, or a "
		   "refusal without a message");
	struct ms_req_gen *r = NULL;
	e = (struct ms_req_error){0};
	rc = ms_req_messages(&m, req, &r, &e); /* req taken */
	fuzz_req_outcome(rc, r, &e);
	FUZZ_CHECK(rc || (r->messages && r->params.max_tokens >= 1 &&
			  r->n_prompt[0] + r->params.max_tokens <= m.max_model_len),
		   "max_tokens not held within the context");
	ms_req_gen_free(r);
	return 0;
}
