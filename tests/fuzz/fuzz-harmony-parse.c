/* harmony-parse: token id sequences through the streaming harmony parser
 * (models/harmony-parse.c) as the server feeds it: each id with its text
 * from the streaming decoder. Input: one byte, the event at which the
 * callback aborts (0: never); then the ids: a byte >= 0xF0 is the special
 * token 4080 + its low nibble (the default model's harmony tokens), any
 * other byte and the next form an id below 4080. The events must nest:
 * text events non-empty, arguments only inside a call, one STOP at most
 * and nothing after it, "tool_calls" exactly when a call was made, no
 * call left open by finish. */
#include "fuzz.h"
#include "harmony.h"

struct state {
	int events, abort_at;
	bool in_call, stopped;
	int calls;
};

static int on_event(void *ctx, enum ms_harmony_event ev, const char *data, size_t len)
{
	struct state *s = ctx;
	FUZZ_CHECK(!s->stopped, "event %d after STOP", ev);
	switch (ev) {
	case MS_HARMONY_REASONING:
	case MS_HARMONY_CONTENT:
		FUZZ_CHECK(data && len > 0, "text event %d of %zu bytes", ev, len);
		FUZZ_CHECK(!s->in_call, "text event %d inside a call", ev);
		break;
	case MS_HARMONY_TOOL_ARGS:
		FUZZ_CHECK(data && len > 0 && s->in_call, "arguments (%zu bytes) outside a call", len);
		break;
	case MS_HARMONY_TOOL_CALL_BEGIN:
		FUZZ_CHECK(!s->in_call, "a call begins inside a call");
		FUZZ_CHECK(data && len > 0, "a call without a name");
		s->in_call = true;
		s->calls++;
		break;
	case MS_HARMONY_TOOL_CALL_END:
		FUZZ_CHECK(s->in_call, "a call ends outside a call");
		s->in_call = false;
		break;
	case MS_HARMONY_STOP:
		FUZZ_CHECK(!s->in_call, "STOP inside a call");
		FUZZ_CHECK(len == (s->calls ? 10u : 4u) &&
				   !memcmp(data, s->calls ? "tool_calls" : "stop", len),
			   "STOP \"%.*s\" after %d calls", (int)len, data, s->calls);
		s->stopped = true;
		break;
	}
	return ++s->events == s->abort_at ? 7 : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	(void)fuzz_tokenizer();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const struct ms_tokenizer *t = fuzz_tokenizer();
	struct ms_harmony_ids ids = ms_harmony_ids_find(t);
	struct state s = {.abort_at = data[0]};
	struct ms_harmony_parser p;
	ms_harmony_parser_init(&p, &ids, on_event, &s);
	struct ms_detok d;
	ms_detok_init(&d, t, true);
	char *buf = NULL;
	size_t cap = 0;
	int rc = 0;
	for (size_t i = 1; i < size && !rc;) {
		int32_t id;
		if (data[i] >= 0xF0) {
			id = 4080 + (data[i] & 15);
			i++;
		} else {
			id = (int32_t)((((unsigned)data[i] << 8) | (i + 1 < size ? data[i + 1] : 0)) % 4080);
			i += 2;
		}
		size_t len = 0;
		FUZZ_CHECK(ms_detok_push(&d, id, &buf, &len, &cap) == 0, "detok %d", id);
		rc = ms_harmony_parser_push(&p, id, buf ? buf : "", len);
		FUZZ_CHECK(rc == 0 || rc == 7, "push returned %d", rc);
	}
	if (!rc) {
		rc = ms_harmony_parser_finish(&p);
		FUZZ_CHECK(rc == 0 || rc == 7, "finish returned %d", rc);
		FUZZ_CHECK(rc || !s.in_call, "a call left open by finish");
	}
	FUZZ_CHECK(p.n_tool_calls == s.calls, "%d calls counted, %d seen", p.n_tool_calls, s.calls);
	ms_harmony_parser_free(&p);
	free(buf);
	return 0;
}
