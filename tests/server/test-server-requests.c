/*
 * test-server-requests.c: the OpenAI request parsers (server/api/request.c) on
 * JSON text, without a daemon.
 *
 * Every field of /v1/completions, /v1/chat/completions, /tokenize and
 * /detokenize accepted at its edge values and read back from the engine
 * request; every refusal (malformed JSON, wrong type, out of range, unknown
 * enum value, missing field, another model) with its status, the field
 * named as "param" and a message that names the field and the value given.
 * Prompts are encoded with the default model's tokenizer (harmony tokens
 * included, so chat renders for real). Allocation failures injected into
 * cJSON answer 500, never a 400 or a shorter request.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "ms-json.h"
#include "grammar-cache.h"
#include "request.h"
#include "sampler.h"
#include "tokenizer.h"
#include "tool-force.h"

#include "reqtest.h"
#include "test-server-requests.h"

/* ==== the body ==== */

START_TEST(body_refusals)
{
	struct ms_req_model m = model();
	struct {
		const char *json;
		const char *needle;
	} bad[] = {
		{"{bad json", "not valid JSON: expected a key (a string), not 'b', at line 1, column 2 (byte 1)"},
		{"", "not valid JSON: the body ends where a JSON value should be, at line 1, column 1 (byte 0)"},
		{"{\"prompt\": \"x\",}", "expected a key (a string), not '}', at line 1, column 16 (byte 15)"},
		{"{\"messages\": [", "not valid JSON"},
		{"[1, 2]", "(got a list of 2)"},
		{"\"str\"", "(got \"str\")"},
		{"42", "(got 42)"},
		{"null", "(got null)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *req = (cJSON *)1;
		struct ms_req_error e = {0};
		int rc = ms_req_body(&m, bad[i].json, strlen(bad[i].json), &req, &e);
		ck_assert_msg(rc == -EINVAL && !req, "%s: accepted", bad[i].json);
		ck_assert_int_eq(e.status, 400);
		ck_assert_str_eq(e.type, "invalid_request_error");
		ck_assert_ptr_null(e.param);
		ck_assert_msg((strstr(e.msg, "the body is not a JSON object") ||
			       strstr(e.msg, "the body is not valid JSON: ")) && strstr(e.msg, bad[i].needle),
			      "%s: \"%s\" lacks \"%s\"", bad[i].json, e.msg, bad[i].needle);
	}
	/* the length is the body's, not the string's */
	const char *two = "{\"prompt\": \"x\"}{\"prompt\": 5}";
	cJSON *req;
	struct ms_req_error e = {0};
	ck_assert_int_eq(ms_req_body(&m, two, 15, &req, &e), 0);
	ck_assert_str_eq(cJSON_GetObjectItem(req, "prompt")->valuestring, "x");
	cJSON_Delete(req);
	ck_assert_int_eq(ms_req_body(&m, two, 14, &req, &e), -EINVAL);
	/* another model: 404 naming both */
	refused(ms_req_completion, "{\"model\": \"nope\", \"prompt\": \"x\"}", 404, "model",
		NEEDLES("the model \"nope\" does not exist", "this server has \"kjv\""));
	refused(ms_req_chat, "{\"model\": \"gpt-4\", \"messages\": []}", 404, "model", NEEDLES("\"gpt-4\""));
	/* this model, or none: accepted; null is none */
	ms_req_gen_free(CMPL("{\"model\": \"kjv\", \"prompt\": \"x\"}"));
	ms_req_gen_free(CMPL("{\"model\": null, \"prompt\": \"x\"}"));
	CMPL_BAD("{\"model\": 5, \"prompt\": \"x\"}", "model", "\"model\" must be a string (got 5)");
	CMPL_BAD("{\"model\": [\"kjv\"], \"prompt\": \"x\"}", "model", "(got a list of 1)");
}
END_TEST

START_TEST(unknown_fields)
{
	cJSON *req = cJSON_Parse("{\"prompt\": \"x\", \"temperature\": 1, \"tool_choice\": \"auto\"}");
	ck_assert_ptr_null(ms_req_unknown_field(req));
	cJSON_Delete(req);
	req = cJSON_Parse("{\"prompt\": \"x\", \"guided_json\": {}, \"foo\": 1}");
	ck_assert_str_eq(ms_req_unknown_field(req), "foo");
	cJSON_Delete(req);
}
END_TEST

/* ==== /v1/completions ==== */

START_TEST(completion_defaults)
{
	struct ms_req_gen *r = CMPL("{\"prompt\": \"In the beginning God created\"}");
	struct ms_sampling d;
	ms_sampling_defaults(&d);
	const struct ms_sampling *s = &r->params.sampling;
	ck_assert(!r->chat && !r->stream && !r->include_usage && !r->echo);
	ck_assert_int_eq(r->n, 1);
	ck_assert_int_eq(r->logprobs, -1);
	ck_assert_int_eq(r->params.max_tokens, 16);
	ck_assert(s->temperature == d.temperature && s->top_p == d.top_p && s->min_p == d.min_p);
	ck_assert_int_eq(s->top_k, d.top_k);
	ck_assert(s->presence_penalty == d.presence_penalty && s->frequency_penalty == d.frequency_penalty);
	ck_assert(s->repetition_penalty == d.repetition_penalty);
	ck_assert(!s->has_seed);
	ck_assert_int_eq(s->n_logprobs, -1);
	ck_assert_ptr_null(s->logit_bias);
	ck_assert_int_eq(r->params.prompt_logprobs, -1);
	ck_assert(r->params.skip_special);
	ck_assert_int_eq(r->params.n_stop, 0);
	ck_assert_int_eq(r->params.n_stop_ids, 2);
	ck_assert_int_eq(r->params.stop_ids[0], 4084);
	ck_assert_int_eq(r->params.stop_ids[1], 4081);
	/* the prompt: encoded with special tokens as text, and kept for echo */
	int32_t *ids;
	size_t n = encode("In the beginning God created", &ids);
	ck_assert_int_eq(r->n_prompts, 1);
	ck_assert_int_eq(r->n_prompt[0], (int64_t)n);
	ck_assert_mem_eq(r->prompts[0], ids, n * sizeof(int32_t));
	ck_assert_str_eq(r->echo_text[0], "In the beginning God created");
	free(ids);
	ms_req_gen_free(r);
	/* null is absent */
	r = CMPL("{\"prompt\": \"x\", \"temperature\": null, \"max_tokens\": null, \"n\": null, "
		 "\"stop\": null, \"seed\": null, \"logprobs\": null, \"echo\": null, \"stream\": null}");
	ck_assert_int_eq(r->params.max_tokens, 16);
	ck_assert(r->params.sampling.temperature == d.temperature && !r->params.sampling.has_seed);
	ms_req_gen_free(r);
}
END_TEST

START_TEST(completion_sampling_edges)
{
	struct {
		const char *json;
		float temperature, top_p, min_p, presence, frequency, repetition;
	} f[] = {
		{"{\"prompt\": \"x\", \"temperature\": 0, \"top_p\": 0, \"min_p\": 0, \"presence_penalty\": -2, "
		 "\"frequency_penalty\": -2, \"repetition_penalty\": 0}", 0, 0, 0, -2, -2, 0},
		{"{\"prompt\": \"x\", \"temperature\": 100, \"top_p\": 1, \"min_p\": 1, \"presence_penalty\": 2, "
		 "\"frequency_penalty\": 2, \"repetition_penalty\": 10}", 100, 1, 1, 2, 2, 10},
		{"{\"prompt\": \"x\", \"temperature\": 0.7, \"top_p\": 0.95, \"min_p\": 0.05, "
		 "\"presence_penalty\": 0.5, \"frequency_penalty\": -0.25, \"repetition_penalty\": 1.1}",
		 0.7f, 0.95f, 0.05f, 0.5f, -0.25f, 1.1f},
	};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		struct ms_req_gen *r = CMPL(f[i].json);
		const struct ms_sampling *s = &r->params.sampling;
		ck_assert_float_eq(s->temperature, f[i].temperature);
		ck_assert_float_eq(s->top_p, f[i].top_p);
		ck_assert_float_eq(s->min_p, f[i].min_p);
		ck_assert_float_eq(s->presence_penalty, f[i].presence);
		ck_assert_float_eq(s->frequency_penalty, f[i].frequency);
		ck_assert_float_eq(s->repetition_penalty, f[i].repetition);
		ms_req_gen_free(r);
	}
	struct {
		const char *json;
		int32_t top_k;
	} k[] = {
		{"{\"prompt\": \"x\", \"top_k\": -1}", -1},
		{"{\"prompt\": \"x\", \"top_k\": 0}", 0},
		{"{\"prompt\": \"x\", \"top_k\": 40}", 40},
		{"{\"prompt\": \"x\", \"top_k\": 1e9}", 1000000000},
	};
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		struct ms_req_gen *r = CMPL(k[i].json);
		ck_assert_int_eq(r->params.sampling.top_k, k[i].top_k);
		ms_req_gen_free(r);
	}
	/* seeds: signed or unsigned 64-bit, negative ones as two's complement */
	struct {
		const char *json;
		uint64_t seed;
	} sd[] = {
		{"{\"prompt\": \"x\", \"seed\": 0}", 0},
		{"{\"prompt\": \"x\", \"seed\": 1234}", 1234},
		{"{\"prompt\": \"x\", \"seed\": -1}", UINT64_MAX},
		{"{\"prompt\": \"x\", \"seed\": -9223372036854775808}", (uint64_t)1 << 63},
		{"{\"prompt\": \"x\", \"seed\": 9223372036854775808}", (uint64_t)1 << 63},
		{"{\"prompt\": \"x\", \"seed\": 18446744073709549568}", UINT64_MAX - 2047},
	};
	for (size_t i = 0; i < sizeof(sd) / sizeof(sd[0]); i++) {
		struct ms_req_gen *r = CMPL(sd[i].json);
		ck_assert(r->params.sampling.has_seed);
		ck_assert_msg(r->params.sampling.seed == sd[i].seed, "%s: seed %llu", sd[i].json,
			      (unsigned long long)r->params.sampling.seed);
		ms_req_gen_free(r);
	}
}
END_TEST

START_TEST(completion_logprobs_and_bias)
{
	struct ms_req_gen *r = CMPL("{\"prompt\": \"x\", \"logprobs\": 0}");
	ck_assert_int_eq(r->logprobs, 0);
	ck_assert_int_eq(r->params.sampling.n_logprobs, 0);
	ck_assert_int_eq(r->params.prompt_logprobs, -1); /* no echo: no prompt logprobs */
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"logprobs\": 20, \"echo\": true}");
	ck_assert_int_eq(r->logprobs, 20);
	ck_assert_int_eq(r->params.prompt_logprobs, 20);
	ck_assert(r->echo);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"echo\": true}");
	ck_assert_int_eq(r->params.prompt_logprobs, -1);
	ms_req_gen_free(r);
	/* top_logprobs is chat's: completions ignore it */
	r = CMPL("{\"prompt\": \"x\", \"top_logprobs\": 99}");
	ck_assert_int_eq(r->params.sampling.n_logprobs, -1);
	ms_req_gen_free(r);
	/* logit_bias: ids at both ends of the vocabulary, biases at both ends */
	r = CMPL("{\"prompt\": \"x\", \"logit_bias\": {\"0\": -100, \"4095\": 100, \"17\": 0.5}}");
	const struct ms_sampling *s = &r->params.sampling;
	ck_assert_uint_eq(s->n_logit_bias, 3);
	ck_assert_int_eq(s->logit_bias[0].id, 0);
	ck_assert_float_eq(s->logit_bias[0].bias, -100);
	ck_assert_int_eq(s->logit_bias[1].id, 4095);
	ck_assert_float_eq(s->logit_bias[1].bias, 100);
	ck_assert_int_eq(s->logit_bias[2].id, 17);
	ck_assert_float_eq(s->logit_bias[2].bias, 0.5f);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"logit_bias\": {}}");
	ck_assert_uint_eq(r->params.sampling.n_logit_bias, 0);
	ms_req_gen_free(r);
}
END_TEST

START_TEST(completion_limits_and_stops)
{
	struct ms_req_gen *r = CMPL("{\"prompt\": \"x\", \"max_tokens\": 0, \"echo\": true}");
	ck_assert_int_eq(r->params.max_tokens, 0);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"max_tokens\": 1e9}");
	ck_assert_int_eq(r->params.max_tokens, 1000000000);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"n\": 16, \"stream\": true, \"stream_options\": {\"include_usage\": true}}");
	ck_assert_int_eq(r->n, 16);
	ck_assert(r->stream && r->include_usage);
	ms_req_gen_free(r);
	/* stream_options that are not an object, or false: no usage chunk */
	r = CMPL("{\"prompt\": \"x\", \"stream\": false, \"stream_options\": \"yes\"}");
	ck_assert(!r->stream && !r->include_usage);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": false}}");
	ck_assert(!r->include_usage);
	ms_req_gen_free(r);
	/* stop strings: a string, or a list; empty ones dropped; 16 at most */
	r = CMPL("{\"prompt\": \"x\", \"stop\": \"\"}");
	ck_assert_int_eq(r->n_stops, 0);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"stop\": \"\\n\\n\"}");
	ck_assert_int_eq(r->n_stops, 1);
	ck_assert_str_eq(r->stops[0], "\n\n");
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"stop\": [\"a\", \"\", \"bc\"]}");
	ck_assert_int_eq(r->n_stops, 2);
	ck_assert_str_eq(r->stops[0], "a");
	ck_assert_str_eq(r->stops[1], "bc");
	/* completions hand them to the engine */
	ck_assert_int_eq(r->params.n_stop, 2);
	ck_assert_ptr_eq(r->params.stop, r->stops);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
		 "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\"]}");
	ck_assert_int_eq(r->n_stops, 16);
	ck_assert_str_eq(r->stops[15], "16");
	ms_req_gen_free(r);
}
END_TEST

/* vLLM's ignore_eos and min_tokens; the fields refused rather than
 * ignored (best_of other than n, a suffix, echo on chat). */
START_TEST(benchmark_fields)
{
	struct ms_req_gen *r = CMPL("{\"prompt\": \"x\", \"max_tokens\": 9, \"ignore_eos\": true, "
				    "\"min_tokens\": 4, \"best_of\": 2, \"n\": 2, \"suffix\": \"\"}");
	ck_assert(r->ignore_eos);
	ck_assert_int_eq(r->params.n_stop_ids, 0);
	ck_assert_int_eq(r->params.min_tokens, 4);
	ms_req_gen_free(r);
	r = CMPL("{\"prompt\": \"x\"}");
	ck_assert_int_eq(r->params.n_stop_ids, 2); /* the model's eos */
	ck_assert_int_eq(r->params.min_tokens, 0);
	ms_req_gen_free(r);
	r = CHAT("{" USER_HI ", \"ignore_eos\": true, \"min_tokens\": 3, \"echo\": false, "
		 "\"parallel_tool_calls\": false}");
	ck_assert_int_eq(r->params.n_stop_ids, 0); /* not even harmony's end of turn */
	ck_assert_int_eq(r->params.min_tokens, 3);
	ms_req_gen_free(r);
	CMPL_BAD("{\"prompt\": \"x\", \"max_tokens\": 5, \"min_tokens\": 6}", "min_tokens", "at most");
	CMPL_BAD("{\"prompt\": \"x\", \"min_tokens\": -1}", "min_tokens", "[0, 1000000000]");
	CMPL_BAD("{\"prompt\": \"x\", \"ignore_eos\": 1}", "ignore_eos", "");
	CMPL_BAD("{\"prompt\": \"x\", \"best_of\": 3}", "best_of", "equal to n");
	CMPL_BAD("{\"prompt\": \"x\", \"suffix\": \"end\"}", "suffix", "fill-in-the-middle");
	CHAT_BAD("{" USER_HI ", \"echo\": true}", "echo", "/v1/completions");
	CHAT_BAD("{" USER_HI ", \"parallel_tool_calls\": 1}", "parallel_tool_calls", "boolean");
}
END_TEST

START_TEST(completion_prompts)
{
	/* a list of strings: one prompt each */
	struct ms_req_gen *r = CMPL("{\"prompt\": [\"And God said\", \"Let there be light\"], \"n\": 3}");
	ck_assert_int_eq(r->n_prompts, 2);
	ck_assert_int_eq(r->n, 3);
	ck_assert_str_eq(r->echo_text[1], "Let there be light");
	int32_t *ids;
	size_t n = encode("Let there be light", &ids);
	ck_assert_int_eq(r->n_prompt[1], (int64_t)n);
	ck_assert_mem_eq(r->prompts[1], ids, n * sizeof(int32_t));
	ms_req_gen_free(r);
	/* a list of ids, echoed as their text; ids at both ends */
	r = CMPL("{\"prompt\": [0, 4095]}");
	ck_assert_int_eq(r->n_prompts, 1);
	ck_assert_int_eq(r->n_prompt[0], 2);
	ck_assert_int_eq(r->prompts[0][0], 0);
	ck_assert_int_eq(r->prompts[0][1], 4095);
	ms_req_gen_free(r);
	char body[256];
	snprintf(body, sizeof(body), "{\"prompt\": [%d, %d, %d]}", ids[0], ids[1], ids[2]);
	r = CMPL(body);
	char *text;
	size_t tl;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_tokenizer_decode(tok, ids, 3, false, &text, &tl, &err), 0);
	ck_assert_str_eq(r->echo_text[0], text);
	free(text);
	ms_req_gen_free(r);
	free(ids);
	/* a list of lists of ids */
	r = CMPL("{\"prompt\": [[1, 2, 3], [4]]}");
	ck_assert_int_eq(r->n_prompts, 2);
	ck_assert_int_eq(r->n_prompt[0], 3);
	ck_assert_int_eq(r->n_prompt[1], 1);
	ck_assert_int_eq(r->prompts[1][0], 4);
	ms_req_gen_free(r);
	/* a string's special tokens are text */
	r = CMPL("{\"prompt\": \"<|start|>user\"}");
	ck_assert_int_eq(count_id(r, ms_tokenizer_find(tok, "<|start|>")), 0);
	ck_assert_int_gt(r->n_prompt[0], 1);
	ms_req_gen_free(r);
	/* 64 prompts: the most */
	char big[64 * 6 + 32];
	int at = snprintf(big, sizeof(big), "{\"prompt\": [");
	for (int i = 0; i < 64; i++)
		at += snprintf(big + at, sizeof(big) - (size_t)at, "%s\"a\"", i ? "," : "");
	snprintf(big + at, sizeof(big) - (size_t)at, "]}");
	r = CMPL(big);
	ck_assert_int_eq(r->n_prompts, 64);
	ms_req_gen_free(r);
	/* without a tokenizer: ids only, echoed as nothing */
	struct ms_req_model m = model();
	m.tok = NULL;
	struct ms_req_error e;
	ck_assert_int_eq(parse_with(&m, ms_req_completion, "{\"prompt\": [5, 6]}", &r, &e), 0);
	ck_assert_str_eq(r->echo_text[0], "");
	ms_req_gen_free(r);
	refused_by(&m, ms_req_completion, "{\"prompt\": \"x\"}", 400, "prompt",
		   NEEDLES("this model has no tokenizer.json: send token ids"));
}
END_TEST

START_TEST(completion_type_refusals)
{
	CMPL_BAD("{\"prompt\": \"x\", \"max_tokens\": \"8\"}", "max_tokens",
		 "\"max_tokens\" must be an integer in [0, 1000000000] (got \"8\")");
	CMPL_BAD("{\"prompt\": \"x\", \"max_tokens\": 2.5}", "max_tokens", "(got 2.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature",
		 "\"temperature\" must be a number in [0, 100] (got \"hot\")");
	CMPL_BAD("{\"prompt\": \"x\", \"temperature\": true}", "temperature", "(got true)");
	CMPL_BAD("{\"prompt\": \"x\", \"top_p\": [1]}", "top_p", "\"top_p\"", "(got a list of 1)");
	CMPL_BAD("{\"prompt\": \"x\", \"top_k\": \"5\"}", "top_k", "\"top_k\" must be an integer >= -1",
		 "(got \"5\")");
	CMPL_BAD("{\"prompt\": \"x\", \"top_k\": 1.5}", "top_k", "(got 1.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"stream\": \"yes\"}", "stream",
		 "\"stream\" must be true or false (got \"yes\")");
	CMPL_BAD("{\"prompt\": \"x\", \"stream\": 1}", "stream", "(got 1)");
	CMPL_BAD("{\"prompt\": \"x\", \"echo\": 1}", "echo", "\"echo\" must be true or false (got 1)");
	CMPL_BAD("{\"prompt\": \"x\", \"n\": \"2\"}", "n", "\"n\" must be an integer in [1, 16] (got \"2\")");
	CMPL_BAD("{\"prompt\": \"x\", \"stop\": 5}", "stop",
		 "\"stop\" must be a string or a list of at most 16 strings (got 5)");
	CMPL_BAD("{\"prompt\": \"x\", \"stop\": {\"a\": 1}}", "stop", "(got an object)");
	CMPL_BAD("{\"prompt\": \"x\", \"stop\": [\"a\", 1]}", "stop[1]",
		 "Invalid type for 'stop[1]': expected a string", "(got 1)");
	CMPL_BAD("{\"prompt\": \"x\", \"stop\": [null]}", "stop[0]", "(got null)");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": [1]}", "logit_bias",
		 "\"logit_bias\" must be an object of token id -> bias (got a list of 1)");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"x\": 1}}", "logit_bias",
		 "the key \"x\" is not a token id");
	/* decimal digits only: strtol would take these as ids */
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\" 5\": 1}}", "logit_bias", "the key \" 5\"");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"+5\": 1}}", "logit_bias", "the key \"+5\"");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"\": 1}}", "logit_bias", "the key \"\"");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"5\": null}}", "logit_bias",
		 "the bias of token 5 must be a number", "(got null)");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"5.0\": 1}}", "logit_bias", "\"5.0\"");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"a\"}}", "logit_bias", "(got \"a\")");
	CMPL_BAD("{\"prompt\": \"x\", \"seed\": \"s\"}", "seed", "\"seed\" must be an integer", "(got \"s\")");
	CMPL_BAD("{\"prompt\": \"x\", \"seed\": 1.5}", "seed", "(got 1.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"logprobs\": true}", "logprobs",
		 "\"logprobs\" must be an integer in [0, 20] (got true)");
	CMPL_BAD("{\"prompt\": \"x\", \"logprobs\": 2.5}", "logprobs", "(got 2.5)");
	/* the first bad field is the one named: sampling, then the others */
	CMPL_BAD("{\"max_tokens\": -1, \"temperature\": -1, \"prompt\": 5}", "temperature", "(got -1)");
	CMPL_BAD("{\"n\": 0, \"prompt\": 5}", "n", "(got 0)");
	CMPL_BAD("{\"prompt\": 5, \"echo\": \"no\"}", "echo", "(got \"no\")");
}
END_TEST

START_TEST(completion_range_refusals)
{
	CMPL_BAD("{\"prompt\": \"x\", \"max_tokens\": -1}", "max_tokens", "(got -1)");
	CMPL_BAD("{\"prompt\": \"x\", \"max_tokens\": 1e10}", "max_tokens", "(got 10000000000)");
	CMPL_BAD("{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens",
		 "\"max_tokens\" 0 only makes sense with \"echo\"");
	CMPL_BAD("{\"prompt\": \"x\", \"temperature\": -0.1}", "temperature", "[0, 100]", "(got -0.1)");
	CMPL_BAD("{\"prompt\": \"x\", \"temperature\": 100.5}", "temperature", "(got 100.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"temperature\": 1e999}", "temperature", "(got inf)");
	CMPL_BAD("{\"prompt\": \"x\", \"top_p\": 1.5}", "top_p", "\"top_p\" must be a number in [0, 1] (got 1.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"min_p\": -0.5}", "min_p", "[0, 1]", "(got -0.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"min_p\": 1.01}", "min_p", "(got 1.01)");
	CMPL_BAD("{\"prompt\": \"x\", \"presence_penalty\": 3}", "presence_penalty", "[-2, 2]", "(got 3)");
	CMPL_BAD("{\"prompt\": \"x\", \"frequency_penalty\": -2.5}", "frequency_penalty", "(got -2.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"repetition_penalty\": 10.5}", "repetition_penalty", "[0, 10]",
		 "(got 10.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"repetition_penalty\": -1}", "repetition_penalty", "(got -1)");
	CMPL_BAD("{\"prompt\": \"x\", \"top_k\": -2}", "top_k", "(got -2)");
	CMPL_BAD("{\"prompt\": \"x\", \"top_k\": 2e9}", "top_k", "(got 2000000000)");
	CMPL_BAD("{\"prompt\": \"x\", \"n\": 0}", "n", "[1, 16]", "(got 0)");
	CMPL_BAD("{\"prompt\": \"x\", \"n\": -3}", "n", "(got -3)");
	CMPL_BAD("{\"prompt\": \"x\", \"n\": 17}", "n", "(got 17)");
	CMPL_BAD("{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs", "(got 21)");
	CMPL_BAD("{\"prompt\": \"x\", \"logprobs\": -1}", "logprobs", "(got -1)");
	CMPL_BAD("{\"prompt\": \"x\", \"seed\": 18446744073709551616}", "seed", "[-2^63, 2^64)",
		 "(got 1.8446744073709552e+19)");
	CMPL_BAD("{\"prompt\": \"x\", \"seed\": -1e19}", "seed", "(got -1e+19)");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"4096\": 1}}", "logit_bias",
		 "Invalid value for 'logit_bias': the key \"4096\" is not a token id in [0, 4096)");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"-1\": 1}}", "logit_bias", "\"-1\"");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"5\": 101}}", "logit_bias", "(got 101)");
	CMPL_BAD("{\"prompt\": \"x\", \"logit_bias\": {\"5\": -100.5}}", "logit_bias", "(got -100.5)");
	CMPL_BAD("{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
		 "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "stop", "at most 16", "(got a list of 17)");
}
END_TEST

START_TEST(completion_prompt_refusals)
{
	CMPL_BAD("{\"max_tokens\": 4}", "prompt", "Missing required parameter: 'prompt'");
	CMPL_BAD("{\"prompt\": null}", "prompt", "Missing required parameter: 'prompt'");
	CMPL_BAD("{\"prompt\": 5}", "prompt", "\"prompt\" must be a string, a list of strings, a list "
		 "of token ids or a list of lists of ids (at most 64) (got 5)");
	CMPL_BAD("{\"prompt\": {\"text\": \"x\"}}", "prompt", "(got an object)");
	/* each element named by its path, with the value */
	CMPL_BAD("{\"prompt\": [1, \"a\"]}", "prompt[1]",
		 "Invalid value for 'prompt[1]': a prompt token must be an id in [0, 4096) (got \"a\")");
	CMPL_BAD("{\"prompt\": [1, 2.5]}", "prompt[1]", "(got 2.5)");
	CMPL_BAD("{\"prompt\": [4096]}", "prompt[0]", "(got 4096)");
	CMPL_BAD("{\"prompt\": [-1]}", "prompt[0]", "(got -1)");
	CMPL_BAD("{\"prompt\": [1, null]}", "prompt[1]", "(got null)");
	CMPL_BAD("{\"prompt\": [[1], 2]}", "prompt[1]",
		 "Invalid type for 'prompt[1]': expected a string or a list of token ids (got 2)");
	CMPL_BAD("{\"prompt\": [\"a\", {}]}", "prompt[1]", "(got an object)");
	CMPL_BAD("{\"prompt\": [\"a\", null]}", "prompt[1]", "(got null)");
	CMPL_BAD("{\"prompt\": [[1], [2, \"a\"]]}", "prompt[1][1]", "'prompt[1][1]'", "(got \"a\")");
	CMPL_BAD("{\"prompt\": []}", "prompt", "\"prompt\" is empty");
	CMPL_BAD("{\"prompt\": \"\"}", "prompt", "\"prompt\" is empty");
	CMPL_BAD("{\"prompt\": [[]]}", "prompt[0]", "\"prompt[0]\" is empty");
	CMPL_BAD("{\"prompt\": [\"a\", \"\"]}", "prompt[1]", "\"prompt[1]\" is empty");
	/* the valid neighbours */
	ms_req_gen_free(CMPL("{\"prompt\": [[1], [2, 3]]}"));
	ms_req_gen_free(CMPL("{\"prompt\": [\"a\", \"b\"]}"));
	/* invalid UTF-8 in the text: the body's refusal (strict JSON), naming the byte */
	CMPL_BAD("{\"prompt\": \"ab\xff\"}", NULL, "not valid UTF-8", "byte 14");
	char big[65 * 4 + 32];
	int at = snprintf(big, sizeof(big), "{\"prompt\": [");
	for (int i = 0; i < 65; i++)
		at += snprintf(big + at, sizeof(big) - (size_t)at, "%s\"a\"", i ? "," : "");
	snprintf(big + at, sizeof(big) - (size_t)at, "]}");
	CMPL_BAD(big, "prompt", "(at most 64) (got a list of 65)");
	/* a long string given is cut at 40 bytes, on a character boundary */
	CMPL_BAD("{\"prompt\": \"x\", \"temperature\": \"a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
		 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}", "temperature",
		 "(got \"a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
		 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9...\")");
}
END_TEST

/* ==== /v1/chat/completions ==== */


START_TEST(chat_defaults)
{
	struct ms_req_gen *r = CHAT("{" USER_HI "}");
	ck_assert(r->chat && !r->echo);
	ck_assert_int_eq(r->n_prompts, 1);
	ck_assert_int_eq(r->n, 1);
	ck_assert_int_eq(r->logprobs, -1);
	ck_assert_int_eq(r->params.sampling.n_logprobs, -1);
	char *text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "<|start|>user<|message|>Who is the king of Israel?<|end|>"), "%s", text);
	size_t tl = strlen(text);
	ck_assert_str_eq(text + tl - strlen("<|start|>assistant"), "<|start|>assistant");
	ck_assert_msg(strstr(text, "Reasoning: medium"), "%s", text);
	free(text);
	/* the rest of the context by default */
	ck_assert_int_eq(r->params.max_tokens, CONTEXT - r->n_prompt[0]);
	/* stops at <|return|> and <|call|>, then the model's eos */
	ck_assert_int_eq(r->params.n_stop_ids, 4);
	ck_assert_int_eq(r->params.stop_ids[0], ms_tokenizer_find(tok, "<|return|>"));
	ck_assert_int_eq(r->params.stop_ids[1], ms_tokenizer_find(tok, "<|call|>"));
	ck_assert_int_eq(r->params.stop_ids[2], 4084);
	ck_assert(r->params.skip_special);
	ms_req_gen_free(r);
}
END_TEST

START_TEST(chat_fields)
{
	struct ms_req_gen *r = CHAT("{" USER_HI ", \"max_tokens\": 5}");
	ck_assert_int_eq(r->params.max_tokens, 5);
	ms_req_gen_free(r);
	/* max_completion_tokens wins over max_tokens; null is absent */
	r = CHAT("{" USER_HI ", \"max_tokens\": 5, \"max_completion_tokens\": 7}");
	ck_assert_int_eq(r->params.max_tokens, 7);
	ms_req_gen_free(r);
	r = CHAT("{" USER_HI ", \"max_tokens\": 5, \"max_completion_tokens\": null}");
	ck_assert_int_eq(r->params.max_tokens, 5);
	ms_req_gen_free(r);
	r = CHAT("{" USER_HI ", \"max_completion_tokens\": 0}");
	ck_assert_int_eq(r->params.max_tokens, 0);
	ms_req_gen_free(r);
	/* logprobs: a boolean, and top_logprobs 0..20 with it */
	r = CHAT("{" USER_HI ", \"logprobs\": true}");
	ck_assert_int_eq(r->params.sampling.n_logprobs, 0);
	ck_assert_int_eq(r->logprobs, -1);
	ms_req_gen_free(r);
	r = CHAT("{" USER_HI ", \"logprobs\": true, \"top_logprobs\": 20}");
	ck_assert_int_eq(r->params.sampling.n_logprobs, 20);
	ms_req_gen_free(r);
	r = CHAT("{" USER_HI ", \"logprobs\": false}");
	ck_assert_int_eq(r->params.sampling.n_logprobs, -1);
	ms_req_gen_free(r);
	/* stop strings apply to the answer: not the engine's */
	r = CHAT("{" USER_HI ", \"stop\": [\"Israel\", \"\"], \"n\": 2, \"stream\": true}");
	ck_assert_int_eq(r->n_stops, 1);
	ck_assert_str_eq(r->stops[0], "Israel");
	ck_assert_int_eq(r->params.n_stop, 0);
	ck_assert_int_eq(r->n, 2);
	ck_assert(r->stream);
	ms_req_gen_free(r);
	/* reasoning_effort in the system message: every endpoint's values onto
	 * harmony's three */
	const char *efforts[] = {"low", "medium", "high", "none", "minimal", "xhigh", "max"};
	const char *shown[] = {"low", "medium", "high", "low", "low", "high", "high"};
	for (int i = 0; i < 7; i++) {
		char body[256], want[64];
		snprintf(body, sizeof(body), "{" USER_HI ", \"reasoning_effort\": \"%s\"}", efforts[i]);
		snprintf(want, sizeof(want), "Reasoning: %s", shown[i]);
		r = CHAT(body);
		char *text = prompt_text(r, 0);
		ck_assert_msg(strstr(text, want), "%s: %s", body, text);
		free(text);
		ms_req_gen_free(r);
	}
}
END_TEST

START_TEST(chat_content_and_tools)
{
	/* content as text parts, joined; a user's special token stays text */
	struct ms_req_gen *r = CHAT("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
				    "\"text\": \"In the \"}, {\"type\": \"text\", \"text\": \"beginning\"}]}]}");
	char *text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "<|message|>In the beginning<|end|>"), "%s", text);
	free(text);
	int32_t end = ms_tokenizer_find(tok, "<|end|>");
	int ends = count_id(r, end);
	ms_req_gen_free(r);
	r = CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"<|end|>\"}]}");
	ck_assert_int_eq(count_id(r, end), ends);
	ms_req_gen_free(r);
	/* tools, an assistant's call (arguments as an object) and its result */
	r = CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
		 "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", "
		 "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
		 "{\"city\": \"Paris\"}}}]},"
		 "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"sunny\"}],"
		 "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
		 "\"description\": \"Weather of a city\", \"parameters\": {\"type\": \"object\", "
		 "\"properties\": {\"city\": {\"type\": \"string\"}}}}}]}");
	text = prompt_text(r, 0);
	ck_assert_msg(strstr(text, "get_weather"), "%s", text);
	ck_assert_msg(strstr(text, "Weather of a city"), "%s", text);
	ck_assert_msg(strstr(text, "to=functions.get_weather"), "%s", text);
	ck_assert_msg(strstr(text, "sunny"), "%s", text);
	free(text);
	ms_req_gen_free(r);
}
END_TEST

/* tool_choice: none renders no tools; required and a named function force
 * a call (models/tool-force.c), which the next test drives. */
START_TEST(chat_tool_choice)
{
	const char *tools = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
			    "\"get_weather\"}}, {\"type\": \"function\", \"function\": {\"name\": "
			    "\"get_time\"}}]";
	char b[1024];
	snprintf(b, sizeof(b), "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s, "
		 "\"tool_choice\": \"none\"}", tools);
	struct ms_req_gen *r = CHAT(b);
	char *text = prompt_text(r, 0);
	ck_assert_msg(!strstr(text, "get_weather") && !r->params.constraint, "%s", text);
	free(text);
	ms_req_gen_free(r);
	const char *forced[] = {"\"required\"", "\"auto\"",
				"{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}"};
	for (int k = 0; k < 3; k++) {
		snprintf(b, sizeof(b), "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
			 "%s, \"tool_choice\": %s}", tools, forced[k]);
		r = CHAT(b);
		ck_assert_msg((r->params.constraint != NULL) == (k != 1), "%s", b);
		ms_req_gen_free(r);
	}
	snprintf(b, sizeof(b), "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s, "
		 "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}}",
		 tools);
	CHAT_BAD(b, "tool_choice", "nope");
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": "
		 "\"required\"}", "tool_choice", "needs tools");
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": 3}",
		 "tool_choice", "\"auto\"");
}
END_TEST

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

struct calls_seen {
	int begins, content;
	char name[64];
	bool stop_call;
};

static int on_parsed(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct calls_seen *c = ctx;
	if (ev == MS_HARMONY_TOOL_CALL_BEGIN) {
		c->begins++;
		snprintf(c->name, sizeof(c->name), "%.*s", (int)len, data);
	}
	c->content += ev == MS_HARMONY_CONTENT;
	if (ev == MS_HARMONY_STOP)
		c->stop_call = len == 10 && !memcmp(data, "tool_calls", 10);
	return 0;
}

/* Ids whose bytes are a lone lead byte of a multi-byte character: a
 * reasoning that ends on one leaves its character incomplete. */
static int lead_byte_ids(int32_t *out, int cap)
{
	int n = 0;
	for (int32_t id = 0; id < VOCAB && n < cap; id++) {
		size_t len;
		const char *b = ms_tokenizer_bytes(tok, id, &len);
		if (b && len == 1 && (unsigned char)b[0] >= 0xC2 && (unsigned char)b[0] <= 0xF4)
			out[n++] = id;
	}
	return n;
}

/* One forced run as the engine runs it: random logits, the mask, the
 * largest survivor, accept; each token's text from the streaming decoder
 * (special tokens skipped), into the harmony parser. The model pulls hard
 * towards ending (eos and <|return|> far ahead), reasons for about `think`
 * tokens and often stops on a lone lead byte. Returns the tokens made. */
static int forced_run(struct ms_constraint *c, void *st, struct ms_harmony_parser *hp, int think,
		      int64_t budget, uint32_t *seed)
{
	const struct ms_harmony_ids *h = &hp->ids;
	static int32_t leads[64];
	static int n_leads;
	if (!n_leads)
		n_leads = lead_byte_ids(leads, 64);
	ck_assert_int_gt(n_leads, 0);
	struct ms_detok d;
	ms_detok_init(&d, tok, true);
	static float z[VOCAB];
	int steps = 0;
	for (; steps < 2000 && hp->state != MS_HARMONY_DONE; steps++) {
		for (int i = 0; i < VOCAB; i++)
			z[i] = (float)(lcg(seed) % 1000) / 100.0f;
		z[h->ret] = z[eos[0]] = z[eos[1]] = 50.0f;
		if (lcg(seed) % 3 == 0)
			z[leads[lcg(seed) % (uint32_t)n_leads]] = 45.0f;
		z[h->end] = steps >= think && lcg(seed) % 2 ? 40.0f : 0.0f;
		z[h->call] = lcg(seed) % 4 == 0 ? 40.0f : 0.0f;
		c->mask(st, z, VOCAB);
		int best = 0;
		for (int i = 1; i < VOCAB; i++)
			best = z[i] > z[best] ? i : best;
		ck_assert_msg(best != eos[0] && best != eos[1] && best != h->ret,
			      "step %d: an end of text got through", steps);
		c->accept(st, best);
		char *text = NULL;
		size_t len = 0, cap = 0;
		ck_assert_int_eq(ms_detok_push(&d, best, &text, &len, &cap), 0);
		ms_harmony_parser_push(hp, best, text ? text : "", len);
		free(text);
	}
	ck_assert_msg(!budget || steps <= budget, "%d tokens for max_tokens %lld", steps,
		      (long long)budget);
	return steps;
}

/* The forced call, over thousands of runs of random logits, reasoning
 * lengths and budgets: every run is one call of an allowed function,
 * parsed as such, with no content before it, within its max_tokens; a
 * budget too small for the call's frame is refused up front. */
START_TEST(tool_choice_forces_a_call)
{
	struct ms_req_model m = model();
	const char *names[] = {"get_weather", "get_time", "get"};
	int chosen[3] = {0}, refused = 0;
	uint32_t seed = 99u;
	for (int run = 0; run < 3000; run++) {
		int n = run % 2 ? 3 : 1; /* required (three, one a prefix of the others) or named */
		const char *const *nm = run % 2 ? names : &names[1 + run % 3 % 2];
		int64_t budget = run % 4 == 0 ? 0 : 1 + (int64_t)(lcg(&seed) % 120);
		struct ms_tool_force *f;
		struct ms_err err = {0};
		struct ms_force_spec sp = {.names = nm, .n_names = n, .budget = budget};
		int rc = ms_tool_force_new(tok, &m.hids, eos, 2, &sp, &f, &err);
		if (rc) {
			ck_assert_msg(rc == -ERANGE && budget < 24 && strstr(err.msg, "max_tokens"),
				      "run %d: max_tokens %lld: %d %s", run, (long long)budget, rc, err.msg);
			refused++;
			continue;
		}
		struct ms_constraint c = ms_tool_force_constraint(f);
		void *st = c.init(c.arg);
		ms_tool_force_free(f); /* the state does not need it */
		struct calls_seen seen = {0};
		struct ms_harmony_parser hp;
		ms_harmony_parser_init(&hp, &m.hids, on_parsed, &seen);
		int steps = forced_run(&c, st, &hp, (int)(lcg(&seed) % 200), budget, &seed);
		c.free(st);
		ck_assert_msg(hp.state == MS_HARMONY_DONE && seen.stop_call, "run %d: no call after %d "
			      "tokens (max_tokens %lld)", run, steps, (long long)budget);
		ck_assert_int_eq(seen.begins, 1);
		ck_assert_msg(seen.content == 0, "run %d: content before the call", run);
		ck_assert_int_eq(hp.n_malformed, 0);
		bool ok = false;
		for (int i = 0; i < n; i++)
			if (!strcmp(seen.name, nm[i]))
				ok = true, chosen[i] += n == 3;
		ck_assert_msg(ok, "run %d: a call of \"%s\"", run, seen.name);
		ms_harmony_parser_free(&hp);
	}
	/* with a choice, the model's logits choose: every name comes up; some
	 * budgets were too small, most were not */
	for (int i = 0; i < 3; i++)
		ck_assert_msg(chosen[i] > 0, "\"%s\" never chosen", names[i]);
	ck_assert_msg(refused > 0 && refused < 500, "%d refused", refused);
}
END_TEST

/* A reasoning budget (Messages' thinking.budget_tokens) over hundreds of
 * runs of random logits: a model that would think on is stopped at the
 * budget, one that stops sooner is not cut, and the answer (a call or the
 * final text) follows either way, well formed. */
START_TEST(reasoning_budget_ends_the_analysis)
{
	struct ms_req_model m = model();
	const struct ms_harmony_ids *h = &m.hids;
	const char *names[] = {"get_weather", "get_time", "get"};
	uint32_t seed = 7u;
	int capped = 0, ended = 0;
	static float z[VOCAB];
	for (int run = 0; run < 600; run++) {
		int64_t rb = 1 + (int64_t)(lcg(&seed) % 80);
		int think = run % 3 == 0 ? (int)(lcg(&seed) % (uint32_t)(2 * rb)) : 1 << 30;
		struct ms_force_spec sp = {.names = names, .n_names = 3, .final_ok = true,
					   .budget = run % 2 ? 0 : rb + 120, .reason_budget = rb};
		struct ms_tool_force *f;
		struct ms_err err = {0};
		ck_assert_int_eq(ms_tool_force_new(tok, h, eos, 2, &sp, &f, &err), 0);
		struct ms_constraint c = ms_tool_force_constraint(f);
		void *st = c.init(c.arg);
		ms_tool_force_free(f);
		struct calls_seen seen = {0};
		struct ms_harmony_parser hp;
		ms_harmony_parser_init(&hp, h, on_parsed, &seen);
		int32_t seq[4096];
		int n = 0;
		for (; n < 4096 && hp.state != MS_HARMONY_DONE; n++) {
			for (int i = 0; i < VOCAB; i++)
				z[i] = (float)(lcg(&seed) % 1000) / 100.0f;
			z[eos[0]] = z[eos[1]] = 0.0f; /* (<|return|> may be one of them) */
			z[h->ret] = z[h->call] = lcg(&seed) % 8 == 0 ? 50.0f : 0.0f;
			z[h->end] = n >= think ? 40.0f : 0.0f;
			c.mask(st, z, VOCAB);
			int best = 0;
			for (int i = 1; i < VOCAB; i++)
				best = z[i] > z[best] ? i : best;
			c.accept(st, best);
			seq[n] = best;
			size_t len = 0;
			const char *b = ms_tokenizer_bytes(tok, best, &len);
			ms_harmony_parser_push(&hp, best, b ? b : "", b ? len : 0);
		}
		c.free(st);
		ck_assert_msg(hp.state == MS_HARMONY_DONE && hp.n_malformed == 0,
			      "run %d: no well-formed answer in %d tokens", run, n);
		/* the header after <|channel|>: analysis, or the answer's */
		char head[64] = "";
		int mi = 1;
		for (size_t hl = 0; mi < n && seq[mi] != h->message; mi++) {
			size_t len = 0;
			const char *b = ms_tokenizer_bytes(tok, seq[mi], &len);
			for (size_t k = 0; b && k < len && hl + 1 < sizeof(head); k++)
				head[hl++] = b[k];
			head[hl] = 0;
		}
		if (strcmp(head, "analysis"))
			continue;
		int ei = mi + 1;
		while (ei < n && seq[ei] != h->end)
			ei++;
		int64_t said = ei - mi - 1;
		ck_assert_msg(said <= rb, "run %d: %lld tokens of analysis, budget %lld", run,
			      (long long)said, (long long)rb);
		/* the model pulls towards <|end|> from step `think` on; the text
		 * starts after <|message|> */
		bool on = think >= mi + 1 + rb;
		if (on)
			ck_assert_msg(said == rb, "run %d: the analysis stopped at %lld of %lld", run,
				      (long long)said, (long long)rb);
		capped += on;
		ended += said < rb;
		ms_harmony_parser_free(&hp);
	}
	ck_assert_msg(capped > 20 && ended > 5, "%d capped, %d ended by the model", capped, ended);
}
END_TEST

/* The answer's text, collected by the harmony parser. */
struct answer_seen {
	char text[8192];
	size_t len;
	int reasoning;
	bool stopped;
};

static int on_answer(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct answer_seen *a = ctx;
	a->reasoning += ev == MS_HARMONY_REASONING;
	a->stopped |= ev == MS_HARMONY_STOP;
	if ((ev == MS_HARMONY_CONTENT || ev == MS_HARMONY_TOOL_ARGS) && a->len + len < sizeof(a->text)) {
		memcpy(a->text + a->len, data, len);
		a->len += len;
	}
	return 0;
}

/* One constrained answer driven as the sampler would (random logits with
 * the ends pulled far ahead at random steps, the mask, the largest
 * survivor). The answer's bytes (tokens as the vocabulary spells them:
 * a token may hold part of a character) into a. */
static void drive(const struct ms_req_gen *r, const struct ms_req_model *m, const struct ms_tmask *t,
		  uint32_t *seed, struct answer_seen *a)
{
	const struct ms_constraint *c = r->params.constraint;
	void *st = c->init(c->arg);
	ck_assert_ptr_nonnull(st);
	struct ms_harmony_parser hp;
	ms_harmony_parser_init(&hp, &m->hids, on_answer, a);
	static float z[VOCAB];
	bool end = false;
	for (int steps = 0; steps < r->params.max_tokens && !end; steps++) {
		bool pull = lcg(seed) % 3 == 0;
		for (int i = 0; i < VOCAB; i++)
			z[i] = (float)(lcg(seed) % 1000) / 100.0f;
		z[m->hids.ret] = z[m->hids.end] = z[m->hids.call] = z[eos[0]] = pull ? 50.0f : 0.0f;
		c->mask(st, z, VOCAB);
		int best = 0;
		for (int i = 1; i < VOCAB; i++)
			best = z[i] > z[best] ? i : best;
		ck_assert_msg(z[best] > -INFINITY, "step %d: nothing allowed", steps);
		c->accept(st, best);
		end = best == m->hids.ret || best == m->hids.call || best == eos[0] || best == eos[1];
		uint32_t len = 0;
		const uint8_t *b = ms_vocab_trie_bytes(ms_tmask_vocab(t), best, &len);
		if (r->chat) {
			ms_harmony_parser_push(&hp, best, b ? (const char *)b : "", b ? len : 0);
		} else if (!end) {
			ck_assert_uint_lt(a->len + len, sizeof(a->text));
			memcpy(a->text + a->len, b, len);
			a->len += len;
		}
	}
	c->free(st);
	ck_assert_msg(end, "no end within max_tokens %lld", (long long)r->params.max_tokens);
}

/* Every answer held to a grammar is a sentence of it, complete within
 * max_tokens (from the shortest that fits the frame and the shortest
 * sentence up), whether the model reasons first or not, in chat and
 * plain completions; the JSON ones parse. */
START_TEST(grammar_answers_within_budget)
{
	static const char *const fields[] = {
		"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a\", "
		"\"schema\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, "
		"\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"x\", \"yy\"]}, \"maxItems\": 3}, "
		"\"sub\": {\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\", "
		"\"maxLength\": 5}}, \"required\": [\"s\"]}}, \"required\": [\"n\", \"sub\"]}}}",
		"\"response_format\": {\"type\": \"json_object\"}",
		"\"guided_json\": {\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"k\": "
		"{\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/t\"}}}, \"required\": [\"k\"]}}, "
		"\"$ref\": \"#/$defs/t\"}",
		"\"guided_regex\": \"[a-z]{3,6}(-[0-9]{2})+\"",
		"\"guided_choice\": [\"alpha\", \"beta\", \"gamma delta\"]",
		"\"grammar\": \"root ::= \\\"(\\\" [a-c]+ (\\\",\\\" [a-c]+)* \\\")\\\"\"",
	};
	struct ms_req_model m = model();
	uint32_t seed = 7u;
	for (int run = 0; run < 240; run++) {
		bool chat = run % 2;
		const char *f = fields[run / 2 % 6];
		long budget = 40 + (long)(lcg(&seed) % 160);
		char json[2048];
		snprintf(json, sizeof(json), chat ? "{\"messages\": [{\"role\": \"user\", \"content\": "
			 "\"x\"}], \"max_tokens\": %ld, %s}" : "{\"prompt\": \"x\", \"max_tokens\": %ld, %s}",
			 budget, f);
		struct ms_req_gen *r = chat ? CHAT(json) : CMPL(json);
		ck_assert_ptr_nonnull(r->params.constraint);
		struct ms_tmask *t;
		struct ms_req_error e = {0};
		ck_assert_int_eq(ms_req_answer_grammar(&m, r->req, &t, &e), 1);
		struct answer_seen a = {0};
		drive(r, &m, t, &seed, &a);
		a.text[a.len] = 0;
		if (run / 2 % 6 < 3) { /* the JSON ones: objects */
			cJSON *v = cJSON_ParseWithLength(a.text, a.len);
			ck_assert_msg(cJSON_IsObject(v), "run %d (%s): not a JSON object: %s", run, f, a.text);
			cJSON_Delete(v);
		}
		ck_assert_msg(ms_grammar_accepts(ms_tmask_grammar(t), a.text, a.len), "run %d (%s): "
			      "not a sentence: %s", run, f, a.text);
		ms_tmask_unref(t);
		ms_req_gen_free(r);
	}
}
END_TEST

/* Each field that asks for a grammar builds a constraint; what cannot be
 * enforced is refused naming the field (and, for a schema, the keyword
 * and its JSON path). */
START_TEST(structured_fields)
{
	static const char *const ok[] = {
		"\"response_format\": {\"type\": \"json_object\"}",
		"\"response_format\": {\"type\": \"json_object\", \"schema\": {\"type\": \"object\"}}",
		"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a\", "
		"\"schema\": {\"type\": \"integer\"}, \"strict\": true}}",
		"\"structured_outputs\": {\"regex\": \"a+\", \"disable_any_whitespace\": true}",
		"\"structured_outputs\": {\"json_object\": true}",
		"\"guided_json\": \"{\\\"type\\\": \\\"boolean\\\"}\"",
		"\"guided_json\": {\"enum\": [1, \"a\", null]}",
		"\"guided_regex\": \"[0-9]{4}\"", "\"guided_choice\": [\"a\", \"b\"]",
		"\"guided_grammar\": \"root ::= [a-z]+\"", "\"grammar\": \"root ::= \\\"x\\\" | \\\"y\\\"\"",
		"\"json_schema\": {\"type\": \"array\", \"maxItems\": 2}",
	};
	for (int i = 0; i < (int)(sizeof(ok) / sizeof(ok[0])); i++) {
		char json[512];
		snprintf(json, sizeof(json), "{\"prompt\": \"x\", %s}", ok[i]);
		struct ms_req_gen *r = CMPL(json);
		ck_assert_msg(r->params.constraint && r->force, "%s: no constraint", json);
		ms_req_gen_free(r);
	}
	struct ms_req_gen *r = CMPL("{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}}");
	ck_assert_ptr_null(r->params.constraint);
	ms_req_gen_free(r);
	CMPL_BAD("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
		 "{\"schema\": {\"properties\": {\"a\": {\"not\": {}}}}}}}",
		 "response_format.json_schema.schema", "\"not\"", "/properties/a");
	CMPL_BAD("{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\"}}",
		 "response_format.json_schema.schema", "needs");
	CMPL_BAD("{\"prompt\": \"x\", \"response_format\": \"json\"}", "response_format", "type");
	CMPL_BAD("{\"prompt\": \"x\", \"response_format\": {\"type\": \"xml\"}}", "response_format.type",
		 "json_schema");
	CMPL_BAD("{\"prompt\": \"x\", \"structured_outputs\": {\"structural_tag\": \"{}\"}}",
		 "structured_outputs", "structural_tag");
	CMPL_BAD("{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"a\", \"choice\": [\"a\"]}}",
		 "structured_outputs", "only one");
	CMPL_BAD("{\"prompt\": \"x\", \"guided_regex\": \"a\", \"guided_choice\": [\"a\"]}",
		 "guided_choice", "both");
	CMPL_BAD("{\"prompt\": \"x\", \"guided_regex\": \"(a\"}", "guided_regex", "guided_regex");
	CMPL_BAD("{\"prompt\": \"x\", \"guided_regex\": \"(a)\\\\1\"}", "guided_regex", "backreference");
	CMPL_BAD("{\"prompt\": \"x\", \"guided_regex\": \"\"}", "guided_regex", "non-empty");
	CMPL_BAD("{\"prompt\": \"x\", \"guided_choice\": \"a\"}", "guided_choice", "list");
	CMPL_BAD("{\"prompt\": \"x\", \"grammar\": \"root ::= nowhere\"}", "grammar", "nowhere");
	CMPL_BAD("{\"prompt\": \"x\", \"grammar\": \"root ::= root \\\"a\\\"\"}", "grammar", "left-recursive");
	CMPL_BAD("{\"prompt\": \"x\", \"json_schema\": {\"$ref\": \"#/$defs/none\"}}", "json_schema",
		 "/$defs/none");
	/* tools: a strict function's schema must compile; a forced call's
	 * that does not falls back to any object */
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
		 "\"function\", \"function\": {\"name\": \"f\", \"strict\": true, \"parameters\": "
		 "{\"type\": \"object\", \"if\": {}}}}]}", "tools[0].function.parameters", "\"if\"",
		 "tools[0]");
	/* the second strict function refused after the first's grammar was taken */
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
		 "\"function\", \"function\": {\"name\": \"f\", \"strict\": true, \"parameters\": "
		 "{\"type\": \"object\"}}}, {\"type\": \"function\", \"function\": {\"name\": \"g\", "
		 "\"strict\": true, \"parameters\": {\"not\": {}}}}]}", "tools[1].function.parameters",
		 "\"not\"", "tools[1]");
	r = CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": "
		 "\"required\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
		 "\"parameters\": {\"type\": \"object\", \"if\": {}}}}]}");
	ck_assert_ptr_nonnull(r->params.constraint);
	ms_req_gen_free(r);
	r = CHAT("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": "
		 "\"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}]}");
	ck_assert_ptr_null(r->params.constraint); /* auto, nothing strict: free */
	ms_req_gen_free(r);
}
END_TEST

START_TEST(chat_messages_parsed)
{
	cJSON *req = cJSON_Parse(
		"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
		"{\"role\": \"assistant\", \"reasoning_content\": \"think\", \"tool_calls\": ["
		"{\"id\": \"a\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}},"
		"{\"id\": \"b\", \"function\": {\"name\": \"g\", \"arguments\": {\"y\": [1, 2]}}},"
		"{\"function\": {\"name\": \"h\"}}]},"
		"{\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": \"2\"},"
		"{\"role\": \"tool\", \"name\": \"f\", \"tool_call_id\": \"b\", \"content\": \"1\"},"
		"{\"role\": \"assistant\", \"reasoning\": \"hmm\", \"content\": null}],"
		"\"tools\": [{\"function\": {\"name\": \"f\"}}, {\"function\": {\"name\": \"g\", "
		"\"description\": \"gee\", \"parameters\": {\"type\": \"object\"}}}],"
		"\"reasoning_effort\": \"high\"}");
	struct ms_req_chat c;
	struct ms_req_error e = {0};
	ck_assert_int_eq(ms_req_chat_messages(req, &c, &e), 0);
	ck_assert_int_eq(c.cr.n_messages, 5);
	ck_assert_str_eq(c.msgs[0].role, "system");
	ck_assert_str_eq(c.msgs[0].content, "Be brief.");
	ck_assert_str_eq(c.msgs[1].reasoning, "think");
	ck_assert_ptr_null(c.msgs[1].content);
	ck_assert_int_eq(c.msgs[1].n_tool_calls, 3);
	ck_assert_str_eq(c.msgs[1].tool_calls[0].name, "f");
	ck_assert_str_eq(c.msgs[1].tool_calls[0].id, "a");
	ck_assert_str_eq(c.msgs[1].tool_calls[0].arguments, "{\"x\": 1}");
	ck_assert_str_eq(c.msgs[1].tool_calls[1].arguments, "{\"y\":[1,2]}");
	ck_assert_ptr_null(c.msgs[1].tool_calls[2].arguments);
	ck_assert_ptr_null(c.msgs[1].tool_calls[2].id);
	/* a tool result's function: by its call's id, or its own name first */
	ck_assert_str_eq(c.msgs[2].name, "g");
	ck_assert_str_eq(c.msgs[3].name, "f");
	ck_assert_str_eq(c.msgs[4].reasoning, "hmm");
	ck_assert_int_eq(c.cr.n_tools, 2);
	ck_assert_str_eq(c.tools[0].name, "f");
	ck_assert_ptr_null(c.tools[0].description);
	ck_assert_ptr_null(c.tools[0].parameters);
	ck_assert_str_eq(c.tools[1].description, "gee");
	ck_assert_str_eq(c.tools[1].parameters, "{\"type\":\"object\"}");
	ck_assert_str_eq(c.cr.reasoning_effort, "high");
	ms_req_chat_free(&c);
	cJSON_Delete(req);
}
END_TEST

START_TEST(chat_refusals)
{
	CHAT_BAD("{\"messages\": \"hi\"}", "messages", "\"messages\" must be a non-empty list (got \"hi\")");
	CHAT_BAD("{\"messages\": []}", "messages", "(got a list of 0)");
	CHAT_BAD("{\"prompt\": \"hi\"}", "messages", "Missing required parameter: 'messages'.");
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, \"b\"]}", "messages[1]",
		 "Invalid type for 'messages[1]': expected an object (got \"b\")");
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
		 "\"tool_calls\": [{\"function\": {\"name\": \"f\"}}, {\"function\": {}}]}]}",
		 "messages[1].tool_calls[1].function.name",
		 "Missing required parameter: 'messages[1].tool_calls[1].function.name'.");
	CHAT_BAD("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": 7}}]}]}",
		 "messages[0].tool_calls[0].function.name", "(got 7)");
	CHAT_BAD("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", "
		 "\"content\": \"1\"}]}", "messages[1].tool_call_id",
		 "Missing required parameter: 'messages[1].tool_call_id'.");
	CHAT_BAD("{\"messages\": [{\"role\": \"tool\", \"tool_call_id\": \"nope\", \"content\": \"1\"}]}",
		 "messages[0].tool_call_id", "no earlier tool call has this id", "(got \"nope\")");
	CHAT_BAD("{" USER_HI ", \"tools\": {\"a\": 1}}", "tools", "\"tools\" must be a list (got an object)");
	CHAT_BAD("{" USER_HI ", \"tools\": [{\"type\": \"function\", \"function\": {}}]}",
		 "tools[0].function.name", "Missing required parameter: 'tools[0].function.name'.");
	CHAT_BAD("{" USER_HI ", \"tools\": [{\"function\": {\"name\": \"f\"}}, {\"function\": {\"name\": 1}}]}",
		 "tools[1].function.name", "Invalid type for 'tools[1].function.name'", "(got 1)");
	CHAT_BAD("{" USER_HI ", \"reasoning_effort\": \"extreme\"}", "reasoning_effort",
		 "\"reasoning_effort\" must be \"none\", \"minimal\", \"low\", \"medium\", \"high\", "
		 "\"xhigh\" or \"max\" (got \"extreme\")");
	CHAT_BAD("{" USER_HI ", \"reasoning_effort\": 2}", "reasoning_effort", "(got 2)");
	CHAT_BAD("{" USER_HI ", \"logprobs\": 1}", "logprobs", "\"logprobs\" must be true or false (got 1)");
	CHAT_BAD("{" USER_HI ", \"top_logprobs\": 2}", "top_logprobs",
		 "\"top_logprobs\" needs \"logprobs\": true");
	CHAT_BAD("{" USER_HI ", \"logprobs\": true, \"top_logprobs\": 21}", "top_logprobs",
		 "\"top_logprobs\" must be an integer in [0, 20] (got 21)");
	CHAT_BAD("{" USER_HI ", \"max_completion_tokens\": \"x\"}", "max_completion_tokens",
		 "\"max_completion_tokens\" must be an integer in [0, 1000000000] (got \"x\")");
	CHAT_BAD("{" USER_HI ", \"max_tokens\": -5}", "max_tokens", "(got -5)");
	CHAT_BAD("{" USER_HI ", \"temperature\": -1}", "temperature", "(got -1)");
	CHAT_BAD("{" USER_HI ", \"n\": 0}", "n", "(got 0)");

	/* chat needs the harmony tokens */
	struct ms_req_model m = model();
	m.harmony = false;
	refused_by(&m, ms_req_chat, "{" USER_HI "}", 400, NULL,
		   NEEDLES("chat needs the model's tokenizer.json with the harmony special tokens"));
	m.tok = NULL;
	refused_by(&m, ms_req_chat, "{" USER_HI "}", 400, NULL, NEEDLES("use /v1/completions"));
}
END_TEST

/* ==== /tokenize, /detokenize ==== */

START_TEST(tokenize)
{
	struct ms_req_model m = model();
	struct ms_req_error e = {0};
	int32_t *ids, *want;
	size_t n, nw = encode("Let there be light", &want);
	cJSON *req = cJSON_Parse("{\"prompt\": \"Let there be light\"}");
	ck_assert_int_eq(ms_req_tokenize(&m, req, &ids, &n, &e), 0);
	ck_assert_uint_eq(n, nw);
	ck_assert_mem_eq(ids, want, n * sizeof(int32_t));
	free(ids);
	cJSON_Delete(req);
	/* "text" for "prompt" */
	req = cJSON_Parse("{\"text\": \"Let there be light\"}");
	ck_assert_int_eq(ms_req_tokenize(&m, req, &ids, &n, &e), 0);
	ck_assert_uint_eq(n, nw);
	free(ids);
	cJSON_Delete(req);
	free(want);
	/* special tokens in the text only when asked */
	int32_t start = ms_tokenizer_find(tok, "<|start|>");
	req = cJSON_Parse("{\"prompt\": \"<|start|>\", \"add_special_tokens\": true}");
	ck_assert_int_eq(ms_req_tokenize(&m, req, &ids, &n, &e), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(ids[0], start);
	free(ids);
	cJSON_Delete(req);
	req = cJSON_Parse("{\"prompt\": \"<|start|>\"}");
	ck_assert_int_eq(ms_req_tokenize(&m, req, &ids, &n, &e), 0);
	ck_assert_uint_gt(n, 1);
	free(ids);
	cJSON_Delete(req);
	/* refusals */
	const char *bad[][2] = {
		{"{\"prompt\": 5}", "\"prompt\" must be a string (got 5)"},
		{"{}", "\"prompt\" must be a string"},
		{"{\"prompt\": [\"a\"]}", "(got a list of 1)"},
		{"{\"prompt\": \"\xc3\"}", "not valid UTF-8"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		req = cJSON_Parse(bad[i][0]);
		ck_assert_int_eq(ms_req_tokenize(&m, req, &ids, &n, &e), -EINVAL);
		ck_assert_int_eq(e.status, 400);
		ck_assert_str_eq(e.param, "prompt");
		ck_assert_msg(strstr(e.msg, bad[i][1]), "%s: %s", bad[i][0], e.msg);
		cJSON_Delete(req);
	}
	m.tok = NULL;
	req = cJSON_Parse("{\"prompt\": \"x\"}");
	ck_assert_int_eq(ms_req_tokenize(&m, req, &ids, &n, &e), -EINVAL);
	ck_assert_ptr_null(e.param);
	ck_assert_str_eq(e.msg, "this model has no tokenizer.json");
	cJSON_Delete(req);
}
END_TEST

START_TEST(detokenize)
{
	struct ms_req_model m = model();
	struct ms_req_error e = {0};
	int32_t *ids;
	size_t n = encode("And God saw the light", &ids);
	char body[512], *text;
	int at = snprintf(body, sizeof(body), "{\"tokens\": [");
	for (size_t i = 0; i < n; i++)
		at += snprintf(body + at, sizeof(body) - (size_t)at, "%s%d", i ? "," : "", ids[i]);
	snprintf(body + at, sizeof(body) - (size_t)at, "]}");
	free(ids);
	cJSON *req = cJSON_Parse(body);
	size_t len;
	ck_assert_int_eq(ms_req_detokenize(&m, req, &text, &len, &e), 0);
	ck_assert_str_eq(text, "And God saw the light");
	ck_assert_uint_eq(len, strlen("And God saw the light"));
	free(text);
	cJSON_Delete(req);
	req = cJSON_Parse("{\"tokens\": []}");
	ck_assert_int_eq(ms_req_detokenize(&m, req, &text, &len, &e), 0);
	ck_assert_uint_eq(len, 0);
	ck_assert_str_eq(text, "");
	free(text);
	cJSON_Delete(req);
	const char *bad[][2] = {
		{"{\"tokens\": \"abc\"}", "\"tokens\" must be a list of ids (got \"abc\")"},
		{"{}", "\"tokens\" must be a list of ids"},
		{"{\"tokens\": [1, 10000000]}", "tokens[1] is not an id in [0, 4096) (got 10000000)"},
		{"{\"tokens\": [1.5]}", "tokens[0] is not an id in [0, 4096) (got 1.5)"},
		{"{\"tokens\": [-1]}", "tokens[0]", },
		{"{\"tokens\": [4096]}", "(got 4096)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		req = cJSON_Parse(bad[i][0]);
		ck_assert_int_eq(ms_req_detokenize(&m, req, &text, &len, &e), -EINVAL);
		ck_assert_int_eq(e.status, 400);
		ck_assert_str_eq(e.param, "tokens");
		ck_assert_msg(strstr(e.msg, bad[i][1]), "%s: %s", bad[i][0], e.msg);
		cJSON_Delete(req);
	}
	m.tok = NULL;
	req = cJSON_Parse("{\"tokens\": [1]}");
	ck_assert_int_eq(ms_req_detokenize(&m, req, &text, &len, &e), -EINVAL);
	ck_assert_str_eq(e.param, "tokens");
	ck_assert_str_eq(e.msg, "this model has no tokenizer.json");
	cJSON_Delete(req);
}
END_TEST

/* ==== allocation failures ==== */

/* Fail each cJSON allocation of parsing body in turn: every outcome is the
 * request, or a 500 when an allocation failed, never a refusal of the
 * client's (a 400 would blame the request) nor a crash or a leak. */
static void each_failure(parse_fn fn, const char *body)
{
	struct ms_req_model m = model();
	int oom = 0;
	for (unsigned long nth = 1;; nth++) {
		struct ms_req_gen *r;
		struct ms_req_error e = {0};
		unsigned long f0 = ms_json_failures();
		ms_json_fail_nth(nth);
		int rc = parse_with(&m, fn, body, &r, &e);
		ms_json_fail_nth(0);
		bool failed = ms_json_failures() != f0;
		if (!failed) {
			ck_assert_msg(rc == 0, "%s: allocation %lu: %s", body, nth, e.msg);
			ms_req_gen_free(r);
			break; /* past the last allocation */
		}
		oom++;
		ck_assert_msg(rc == -ENOMEM && !r, "%s: allocation %lu failed, yet rc %d (%s)", body, nth,
			      rc, e.msg);
		ck_assert_int_eq(e.status, 500);
		ck_assert_str_eq(e.type, "server_error");
		ck_assert_str_eq(e.msg, "out of memory");
	}
	ck_assert_int_gt(oom, 3);
}

START_TEST(allocation_failures)
{
	ms_json_init();
	each_failure(ms_req_completion, "{\"prompt\": [\"a\", \"b\"], \"logit_bias\": {\"5\": 1}, "
		     "\"stop\": [\"x\"]}");
	/* chat: tool-call arguments and tool parameters are printed as JSON */
	each_failure(ms_req_chat, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, "
		     "{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
		     "\"arguments\": {\"x\": [1, 2]}}}]}], \"tools\": [{\"function\": {\"name\": \"f\", "
		     "\"parameters\": {\"type\": \"object\"}}}]}");
	/* a failure while printing the arguments alone */
	cJSON *req = cJSON_Parse("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
				 "{\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}]}");
	struct ms_req_chat c;
	struct ms_req_error e = {0};
	ms_json_fail_nth(1);
	ck_assert_int_eq(ms_req_chat_messages(req, &c, &e), -ENOMEM);
	ms_json_fail_nth(0);
	ck_assert_int_eq(e.status, 500);
	ms_req_chat_free(&c);
	cJSON_Delete(req);
}
END_TEST

int main(void)
{
	if (reqtest_load("test-server-requests"))
		return 1;
	Suite *s = suite_create("server-requests");
	TCase *tb = tcase_create("body");
	tcase_add_test(tb, body_refusals);
	tcase_add_test(tb, unknown_fields);
	tcase_add_test(tb, allocation_failures);
	suite_add_tcase(s, tb);
	TCase *tc = tcase_create("completions");
	tcase_add_test(tc, completion_defaults);
	tcase_add_test(tc, completion_sampling_edges);
	tcase_add_test(tc, completion_logprobs_and_bias);
	tcase_add_test(tc, completion_limits_and_stops);
	tcase_add_test(tc, completion_prompts);
	tcase_add_test(tc, benchmark_fields);
	tcase_add_test(tc, completion_type_refusals);
	tcase_add_test(tc, completion_range_refusals);
	tcase_add_test(tc, completion_prompt_refusals);
	suite_add_tcase(s, tc);
	TCase *th = tcase_create("chat");
	tcase_add_test(th, chat_defaults);
	tcase_add_test(th, chat_fields);
	tcase_add_test(th, chat_content_and_tools);
	tcase_add_test(th, chat_messages_parsed);
	tcase_add_test(th, chat_tool_choice);
	tcase_add_test(th, tool_choice_forces_a_call);
	tcase_add_test(th, reasoning_budget_ends_the_analysis);
	tcase_add_test(th, grammar_answers_within_budget);
	tcase_add_test(th, structured_fields);
	tcase_add_test(th, chat_refusals);
	suite_add_tcase(s, th);
	TCase *tr = requests_rules_tcase();
	suite_add_tcase(s, tr);
	TCase *tt = tcase_create("tokenize");
	tcase_add_test(tt, tokenize);
	tcase_add_test(tt, detokenize);
	suite_add_tcase(s, tt);
	TCase *all[] = {tb, tc, th, tr, tt};
	for (int i = 0; i < 5; i++)
		tcase_set_timeout(all[i], 60);
	int failed = ms_check_run(s);
	ms_tokenizer_free(tok);
	return failed ? 1 : 0;
}
