/* harmony-render: a chat body's "messages", "tools", "reasoning_effort"
 * and answer schema as server/api/request.c hands them to the harmony
 * renderer (ms_req_chat_messages, ms_req_answer_schema), rendered with
 * ms_harmony_render_ex. The special-token spans must be in order, inside
 * the text, and each a special token of the tokenizer; the plain
 * renderer must write the same text. */
#include "fuzz.h"
#include "fuzz-req.h"

static void check_spans(const char *text, size_t len, const struct ms_harmony_span *sp, size_t n)
{
	size_t end = 0;
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(sp[i].off >= end && sp[i].len > 0 && sp[i].off + sp[i].len <= len,
			   "span %zu [%zu, +%zu) after %zu in %zu bytes", i, sp[i].off, sp[i].len, end,
			   len);
		char tok[64];
		FUZZ_CHECK(sp[i].len < sizeof(tok), "span %zu of %zu bytes", i, sp[i].len);
		memcpy(tok, text + sp[i].off, sp[i].len);
		tok[sp[i].len] = '\0';
		int32_t id = ms_tokenizer_find(fuzz_tokenizer(), tok);
		FUZZ_CHECK(id >= 0 && ms_tokenizer_is_special(fuzz_tokenizer(), id),
			   "span %zu \"%s\" is no special token", i, tok);
		end = sp[i].off + sp[i].len;
	}
}

static void render(struct ms_req_chat *c)
{
	char *text = NULL, *plain = NULL;
	size_t len = 0, plain_len = 0, n = 0;
	struct ms_harmony_span *sp = NULL;
	struct ms_err err = {0};
	c->cr.date = "2025-06-28"; /* the same text every run */
	int rc = ms_harmony_render_ex(&c->cr, &text, &len, &sp, &n, &err);
	if (rc) {
		FUZZ_CHECK(!text && err.msg[0], "refused (%d) without a message", rc);
		return;
	}
	check_spans(text, len, sp, n);
	FUZZ_CHECK(ms_harmony_render(&c->cr, &plain, &plain_len, &err) == 0, "plain: %s", err.msg);
	FUZZ_CHECK(plain_len == len && !memcmp(plain, text, len), "render and render_ex differ");
	free(plain);
	free(sp);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ms_req_model m = fuzz_req_model();
	cJSON *req = fuzz_req_body(&m, data, size);
	if (!req)
		return 0;
	struct ms_req_chat c;
	struct ms_req_error e = {0};
	int rc = ms_req_chat_messages(req, &c, &e);
	if (!rc) {
		const char *name = NULL, *desc = NULL;
		const cJSON *sch = ms_req_answer_schema(req, &name, &desc);
		char *sch_text = sch && !cJSON_IsString(sch) ? cJSON_PrintUnformatted(sch) : NULL;
		c.cr.response_format = cJSON_IsString(sch) ? sch->valuestring : sch_text;
		c.cr.response_format_name = name;
		c.cr.response_format_desc = desc;
		render(&c);
		free(sch_text);
	} else {
		FUZZ_CHECK(e.status >= 400 && e.msg[0], "messages refused (%d) without a message", rc);
	}
	ms_req_chat_free(&c);
	cJSON_Delete(req);
	return 0;
}
