/* req-completions: POST /v1/completions bodies as server/http.c takes them:
 * ms_req_body, ms_req_unknown_field, then ms_req_completion; everything freed. */
#include "fuzz.h"
#include "fuzz-req.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fuzz_req_init();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ms_req_model m = fuzz_req_model();
	cJSON *req = fuzz_req_body(&m, data, size);
	if (!req)
		return 0;
	(void)ms_req_unknown_field(req);
	struct ms_req_gen *r = NULL;
	struct ms_req_error e = {0};
	int rc = ms_req_completion(&m, req, &r, &e); /* req taken */
	fuzz_req_outcome(rc, r, &e);
	ms_req_gen_free(r);
	return 0;
}
