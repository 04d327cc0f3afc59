/* tool-force.c: tool_choice enforced by a token constraint (tool-force.h). */
#include "tool-force.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES 128

/* The spans of seq[]: fixed pieces, then each name's tokens. */
enum { SP_ANALYSIS, SP_ASSISTANT, SP_HEAD, SP_TAIL, SP_BANS, SP_COUNT };

/* One contiguous block, so that a request's state is a copy of it. */
struct ms_tool_force {
	size_t bytes;
	int32_t channel, message, start, end, call;
	int32_t off[SP_COUNT], len[SP_COUNT];
	int n_names;
	int32_t name_off[MAX_NAMES], name_len[MAX_NAMES];
	int32_t seq[];
};

enum phase {
	PH_CHANNEL,     /* the header's <|channel|> */
	PH_CHOOSE,      /* analysis (once), or the call's header */
	PH_ANALYSIS,    /* "analysis", then <|message|> */
	PH_REASON,      /* free text up to <|end|> */
	PH_RESTART,     /* <|start|> assistant */
	PH_HEAD,        /* "commentary to=functions." */
	PH_NAME,        /* one of the names, token by token */
	PH_TAIL,        /* <|constrain|> json <|message|> */
	PH_ARGS,        /* free text up to <|call|> */
	PH_DONE,
};

struct state {
	enum phase ph;
	int pos;
	bool reasoned;
	bool cand[MAX_NAMES];
	struct ms_tool_force f;   /* a copy; its seq follows */
};

/* ---- building ---- */

int ms_tool_force_new(const struct ms_tokenizer *tok, const struct ms_harmony_ids *ids,
		      const int32_t *eos, int n_eos, const char *const *names, int n,
		      struct ms_tool_force **out, struct ms_err *err)
{
	*out = NULL;
	if (n < 1 || n > MAX_NAMES)
		return ms_err_set(err, -EINVAL, "tool_choice: %d functions (1 to %d)", n, MAX_NAMES);
	/* in SP_ANALYSIS .. SP_TAIL order; the tail's specials added below */
	const char *fixed[] = {"analysis", "assistant", "commentary to=functions.", "json"};
	int32_t *parts[4 + MAX_NAMES] = {0};
	size_t lens[4 + MAX_NAMES] = {0}, total = 0;
	int rc = 0;
	for (int i = 0; i < 4 + n && !rc; i++) {
		const char *t = i < 4 ? fixed[i] : names[i - 4];
		rc = ms_tokenizer_encode(tok, t, strlen(t), false, &parts[i], &lens[i], err);
		total += lens[i];
	}
	size_t n_bans = 7 + (size_t)n_eos;
	struct ms_tool_force *f = rc ? NULL : calloc(1, sizeof(*f) + (total + 2 + n_bans) * 4);
	if (!rc && !f)
		rc = ms_err_set(err, -ENOMEM, "out of memory");
	if (!rc) {
		f->bytes = sizeof(*f) + (total + 2 + n_bans) * 4;
		f->channel = ids->channel, f->message = ids->message, f->start = ids->start;
		f->end = ids->end, f->call = ids->call;
		size_t at = 0;
		for (int i = 0; i < 4 + n; i++) {
			int32_t *o = i < 4 ? &f->off[i] : &f->name_off[i - 4];
			int32_t *l = i < 4 ? &f->len[i] : &f->name_len[i - 4];
			*o = (int32_t)at;
			if (i == SP_TAIL) /* <|constrain|> json <|message|> */
				f->seq[at++] = ids->constrain;
			memcpy(f->seq + at, parts[i], lens[i] * 4);
			at += lens[i];
			if (i == SP_TAIL)
				f->seq[at++] = ids->message;
			*l = (int32_t)at - *o;
		}
		/* banned in a message's text: every special token and end of text */
		f->off[SP_BANS] = (int32_t)at;
		int32_t sp[7] = {ids->start, ids->end, ids->message, ids->channel, ids->constrain,
				 ids->ret, ids->call};
		memcpy(f->seq + at, sp, sizeof(sp));
		memcpy(f->seq + at + 7, eos, (size_t)n_eos * 4);
		f->len[SP_BANS] = (int32_t)n_bans;
		f->n_names = n;
	}
	for (int i = 0; i < 4 + n; i++)
		free(parts[i]);
	*out = f;
	return rc;
}

void ms_tool_force_free(struct ms_tool_force *f)
{
	free(f);
}

/* ---- the state machine ---- */

static const int32_t *span(const struct ms_tool_force *f, int s)
{
	return f->seq + f->off[s];
}

static void *st_init(const void *arg)
{
	const struct ms_tool_force *f = arg;
	struct state *s = calloc(1, offsetof(struct state, f) + f->bytes);
	if (!s)
		return NULL;
	memcpy(&s->f, f, f->bytes);
	s->ph = PH_CHANNEL;
	for (int i = 0; i < f->n_names; i++)
		s->cand[i] = true;
	return s;
}

static void st_free(void *st)
{
	free(st);
}

/* The tokens allowed now, when only some are: into a[], their count; -1
 * when only the bans apply (free text). */
static int allowed(const struct state *s, int32_t *a)
{
	const struct ms_tool_force *f = &s->f;
	int n = 0;
	switch (s->ph) {
	case PH_CHANNEL: a[n++] = f->channel; return n;
	case PH_CHOOSE:
		a[n++] = span(f, SP_HEAD)[0];
		if (!s->reasoned && span(f, SP_ANALYSIS)[0] != a[0])
			a[n++] = span(f, SP_ANALYSIS)[0];
		return n;
	case PH_ANALYSIS:
		a[n++] = s->pos < f->len[SP_ANALYSIS] ? span(f, SP_ANALYSIS)[s->pos] : f->message;
		return n;
	case PH_RESTART:
		a[n++] = s->pos == 0 ? f->start : s->pos <= f->len[SP_ASSISTANT]
			 ? span(f, SP_ASSISTANT)[s->pos - 1] : f->channel;
		return n;
	case PH_HEAD: a[n++] = span(f, SP_HEAD)[s->pos]; return n;
	case PH_TAIL: a[n++] = span(f, SP_TAIL)[s->pos]; return n;
	case PH_NAME:
		for (int i = 0; i < f->n_names; i++) {
			if (!s->cand[i])
				continue;
			/* a name complete here: the tail may follow */
			a[n++] = s->pos < f->name_len[i] ? f->seq[f->name_off[i] + s->pos]
							  : span(f, SP_TAIL)[0];
		}
		return n;
	default:
		return -1;
	}
}

static void st_mask(void *st, float *z, int64_t vocab)
{
	struct state *s = st;
	const struct ms_tool_force *f = &s->f;
	int32_t a[MAX_NAMES + 2];
	int n = allowed(s, a);
	if (n < 0) {
		/* free text: no special token but the one that ends it */
		int32_t keep = s->ph == PH_REASON ? f->end : s->ph == PH_ARGS ? f->call : -1;
		const int32_t *b = span(f, SP_BANS);
		for (int i = 0; i < f->len[SP_BANS]; i++)
			if (b[i] != keep && b[i] >= 0 && b[i] < vocab)
				z[b[i]] = -INFINITY;
		return;
	}
	float v[MAX_NAMES + 2];
	for (int i = 0; i < n; i++)
		v[i] = a[i] >= 0 && a[i] < vocab ? z[a[i]] : -INFINITY;
	for (int64_t i = 0; i < vocab; i++)
		z[i] = -INFINITY;
	/* an allowed token the model gives no chance still wins over nothing */
	for (int i = 0; i < n; i++)
		if (a[i] >= 0 && a[i] < vocab)
			z[a[i]] = isfinite(v[i]) ? v[i] : -1e30f;
}

/* The name phase: keep the names that continue with tok. */
static void name_accept(struct state *s, int32_t tok)
{
	const struct ms_tool_force *f = &s->f;
	bool tail = tok == span(f, SP_TAIL)[0];
	for (int i = 0; i < f->n_names; i++)
		if (s->cand[i])
			s->cand[i] = tail ? s->pos == f->name_len[i]
				     : s->pos < f->name_len[i] && f->seq[f->name_off[i] + s->pos] == tok;
	if (tail) {
		s->ph = PH_TAIL;
		s->pos = 1;
		if (s->pos == f->len[SP_TAIL])
			s->ph = PH_ARGS;
	} else {
		s->pos++;
	}
}

/* A forced step's move to its next position or phase. */
static void step(struct state *s, int len, enum phase next)
{
	if (++s->pos >= len) {
		s->ph = next;
		s->pos = 0;
	}
}

static void st_accept(void *st, int32_t tok)
{
	struct state *s = st;
	const struct ms_tool_force *f = &s->f;
	switch (s->ph) {
	case PH_CHANNEL: s->ph = PH_CHOOSE; break;
	case PH_CHOOSE:
		s->ph = tok == span(f, SP_HEAD)[0] ? PH_HEAD : PH_ANALYSIS;
		s->pos = 0;
		step(s, s->ph == PH_HEAD ? f->len[SP_HEAD] : f->len[SP_ANALYSIS] + 1,
		     s->ph == PH_HEAD ? PH_NAME : PH_REASON);
		break;
	case PH_ANALYSIS: step(s, f->len[SP_ANALYSIS] + 1, PH_REASON); break;
	case PH_REASON:
		if (tok == f->end)
			s->ph = PH_RESTART, s->pos = 0, s->reasoned = true;
		break;
	case PH_RESTART: step(s, f->len[SP_ASSISTANT] + 2, PH_CHOOSE); break;
	case PH_HEAD: step(s, f->len[SP_HEAD], PH_NAME); break;
	case PH_NAME: name_accept(s, tok); break;
	case PH_TAIL: step(s, f->len[SP_TAIL], PH_ARGS); break;
	case PH_ARGS:
		if (tok == f->call)
			s->ph = PH_DONE;
		break;
	default: break;
	}
}

struct ms_constraint ms_tool_force_constraint(const struct ms_tool_force *f)
{
	return (struct ms_constraint){.init = st_init, .mask = st_mask, .accept = st_accept,
				      .free = st_free, .arg = f};
}
