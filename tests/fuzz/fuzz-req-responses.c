/* req-responses: POST /v1/responses bodies as server/api/api.c takes them:
 * ms_req_body, then ms_req_responses with a previous_response_id's stored
 * items. Input: the body, then optionally FUZZ_SEP and the stored items
 * (a JSON array, as the store keeps them). */
#include "fuzz.h"
#include "fuzz-req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ms_req_model m = fuzz_req_model();
	const uint8_t *p = data, *body, *prev_text;
	size_t n = size, body_len, prev_len;
	fuzz_part(&p, &n, &body, &body_len);
	cJSON *prev = NULL;
	if (fuzz_part(&p, &n, &prev_text, &prev_len)) {
		/* the store's items were the daemon's own JSON: any parse will do */
		prev = cJSON_ParseWithLength((const char *)prev_text, prev_len);
		if (!cJSON_IsArray(prev)) {
			cJSON_Delete(prev);
			prev = NULL;
		}
	}
	cJSON *req = fuzz_req_body(&m, body, body_len);
	if (req) {
		struct ms_req_gen *r = NULL;
		struct ms_req_error e = {0};
		int rc = ms_req_responses(&m, req, prev, &r, &e); /* req taken, prev not */
		fuzz_req_outcome(rc, r, &e);
		ms_req_gen_free(r);
	}
	cJSON_Delete(prev);
	return 0;
}
