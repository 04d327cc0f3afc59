/* req-completions: POST /v1/completions bodies as server/api/api.c takes them:
 * ms_req_body, ms_req_unknown_field, then ms_req_completion; everything freed. */
#include "fuzz.h"
#include "fuzz-req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_req_gen(data, size, ms_req_completion);
}
