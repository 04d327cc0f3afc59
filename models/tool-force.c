/* tool-force.c: the answer's shape enforced by a token constraint (tool-force.h). */
#include "tool-force.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAMES MS_FORCE_MAX_NAMES
#define CLOSE_SLACK 8   /* tokens beyond the shortest completion when closing starts */
/* Within NEAR tokens of closing, one token could open more than the rest
 * of the budget can close (a key that starts a nested object): there only
 * the NEAR_TOP likeliest allowed tokens are candidates, each kept only
 * when the answer can still be finished after it. */
#define NEAR 64
#define NEAR_TOP 64

/* The choices after <|channel|>: reasoning, the final answer, a call of
 * each function (`commentary to=functions.NAME <|constrain|>json
 * <|message|>`, the harmony guide's header, its text encoded in one piece
 * as the model read it in training). */
enum { C_ANALYSIS, C_FINAL, C_NAMES, N_CAND = C_NAMES + MAX_NAMES };

/* One contiguous block, so that a request's state is a copy of it. */
struct ms_tool_force {
	size_t bytes;
	int32_t channel, message, end, call, ret;
	int32_t cand_off[N_CAND], cand_len[N_CAND];  /* len 0: not allowed */
	int n_names;
	int32_t restart_off, restart_len;            /* <|start|> assistant <|channel|> */
	int32_t bans_off, bans_len;                  /* specials and end of text */
	int32_t eos_off, n_eos;
	struct ms_tmask *final, *args[MAX_NAMES];
	bool plain;
	int64_t budget;
	int64_t reason_budget;     /* the analysis's tokens at most (0: unbounded) */
	int64_t cost[N_CAND];      /* tokens of each answer, at the fewest (not C_ANALYSIS) */
	int64_t cost_answer;       /* the cheapest answer's */
	int32_t seq[];
};

enum phase {
	PH_FIXED,   /* fixed tokens, then next */
	PH_PICK,    /* one of the candidates [lo, hi), token by token */
	PH_REASON,  /* free text up to <|end|> */
	PH_BODY,    /* a message's body (free or a grammar's) up to its end */
	PH_DONE,
};

struct state {
	enum phase ph, next;
	int pos;
	int32_t fixed_off, fixed_len;
	int lo, hi;
	bool reasoned;
	bool alive[N_CAND];
	int64_t n_out;
	int64_t n_reason;         /* the analysis's tokens so far */
	struct ms_tmask *gt;      /* the body's grammar, or NULL */
	struct ms_gmatch gm;
	bool gm_ok;
	int32_t body_end;         /* the body's end token; -1: end of text */
	struct ms_tool_force f;   /* a copy; its seq follows */
};

/* ---- building ---- */

/* Append text's tokens (or one special id when text is NULL) to f->seq. */
static int put(struct ms_tool_force *f, size_t *at, size_t cap, const struct ms_tokenizer *tok,
	       const char *text, int32_t special, struct ms_err *err)
{
	if (!text) {
		if (*at >= cap)
			return ms_err_set(err, -E2BIG, "tool_choice: the sequences are too long");
		f->seq[(*at)++] = special;
		return 0;
	}
	int32_t *ids;
	size_t n;
	int rc = ms_tokenizer_encode(tok, text, strlen(text), false, &ids, &n, err);
	if (rc)
		return rc;
	if (*at + n > cap) {
		free(ids);
		return ms_err_set(err, -E2BIG, "tool_choice: the sequences are too long");
	}
	memcpy(f->seq + *at, ids, n * 4);
	*at += n;
	free(ids);
	return 0;
}

/* A candidate's tokens: parts (text, or NULL for the next special). */
static int cand(struct ms_tool_force *f, int c, size_t *at, size_t cap, const struct ms_tokenizer *tok,
		const char *const *texts, const int32_t *specials, int n, struct ms_err *err)
{
	f->cand_off[c] = (int32_t)*at;
	int rc = 0;
	for (int i = 0, k = 0; i < n && !rc; i++)
		rc = put(f, at, cap, tok, texts[i], texts[i] ? 0 : specials[k++], err);
	f->cand_len[c] = (int32_t)(*at - (size_t)f->cand_off[c]);
	return rc;
}

static int64_t grammar_min(const struct ms_tmask *t)
{
	if (!t)
		return 0;
	struct ms_gmatch m;
	if (ms_gmatch_init(&m, ms_tmask_grammar(t)))
		return 0;
	int64_t v = ms_gmatch_min_bytes(&m);
	ms_gmatch_free(&m);
	return v > INT32_MAX ? INT32_MAX : v;
}

/* A call's header: its text in one piece, then <|constrain|> json <|message|>. */
static int call_cand(struct ms_tool_force *f, int c, size_t *at, size_t cap,
		     const struct ms_tokenizer *tok, const char *name, const int32_t cj[2],
		     struct ms_err *err)
{
	size_t n = strlen(name) + 32;
	char *head = malloc(n);
	if (!head)
		return ms_err_set(err, -ENOMEM, "out of memory");
	snprintf(head, n, "commentary to=functions.%s ", name);
	int rc = cand(f, c, at, cap, tok, (const char *[]){head, NULL, "json", NULL}, cj, 4, err);
	free(head);
	return rc;
}

static void costs(struct ms_tool_force *f, const struct ms_force_spec *sp)
{
	f->cost_answer = INT32_MAX;
	for (int c = C_FINAL; c < C_NAMES + f->n_names; c++) {
		const struct ms_tmask *g = c == C_FINAL ? sp->final : sp->args ? sp->args[c - C_NAMES] : NULL;
		f->cost[c] = f->cand_len[c] ? f->cand_len[c] + grammar_min(g) + 1 : INT32_MAX;
		if (f->cost[c] < f->cost_answer)
			f->cost_answer = f->cost[c];
	}
}

static int build(struct ms_tool_force *f, size_t cap, const struct ms_tokenizer *tok,
		 const struct ms_harmony_ids *ids, const int32_t *eos, int n_eos,
		 const struct ms_force_spec *sp, struct ms_err *err)
{
	size_t at = 0;
	int rc = 0;
	const int32_t msg[1] = {ids->message}, cj[2] = {ids->constrain, ids->message};
	const int32_t rs[2] = {ids->start, ids->channel};
	if (!sp->plain) {
		rc = cand(f, C_ANALYSIS, &at, cap, tok, (const char *[]){"analysis", NULL}, msg, 2, err);
		if (!rc && sp->final_ok && sp->final)
			rc = cand(f, C_FINAL, &at, cap, tok, (const char *[]){"final", NULL, "json", NULL}, cj, 4, err);
		else if (!rc && sp->final_ok)
			rc = cand(f, C_FINAL, &at, cap, tok, (const char *[]){"final", NULL}, msg, 2, err);
		for (int i = 0; !rc && i < sp->n_names; i++)
			rc = call_cand(f, C_NAMES + i, &at, cap, tok, sp->names[i], cj, err);
		f->restart_off = (int32_t)at;
		if (!rc)
			rc = put(f, &at, cap, tok, NULL, rs[0], err);
		if (!rc)
			rc = put(f, &at, cap, tok, "assistant", 0, err);
		if (!rc)
			rc = put(f, &at, cap, tok, NULL, rs[1], err);
		f->restart_len = (int32_t)at - f->restart_off;
	}
	/* banned in free text: every special token and end of text */
	int32_t sp7[7] = {ids->start, ids->end, ids->message, ids->channel, ids->constrain, ids->ret, ids->call};
	f->bans_off = (int32_t)at;
	for (int i = 0; !rc && i < 7 + n_eos; i++)
		rc = put(f, &at, cap, tok, NULL, i < 7 ? sp7[i] : eos[i - 7], err);
	f->bans_len = (int32_t)at - f->bans_off;
	f->eos_off = f->bans_off + 7;
	f->n_eos = n_eos;
	return rc;
}

int ms_tool_force_new(const struct ms_tokenizer *tok, const struct ms_harmony_ids *ids,
		      const int32_t *eos, int n_eos, const struct ms_force_spec *sp,
		      struct ms_tool_force **out, struct ms_err *err)
{
	*out = NULL;
	if (sp->n_names < 0 || sp->n_names > MAX_NAMES)
		return ms_err_set(err, -EINVAL, "tool_choice: %d functions (at most %d)", sp->n_names, MAX_NAMES);
	if (!sp->n_names && !sp->final_ok)
		return ms_err_set(err, -EINVAL, "tool_choice: no function to call");
	size_t cap = 64 + (size_t)n_eos;
	for (int i = 0; i < sp->n_names; i++)
		cap += strlen(sp->names[i]) + 16;
	struct ms_tool_force *f = calloc(1, sizeof(*f) + cap * 4);
	if (!f)
		return ms_err_set(err, -ENOMEM, "out of memory");
	f->bytes = sizeof(*f) + cap * 4;
	f->channel = ids->channel, f->message = ids->message, f->end = ids->end;
	f->call = ids->call, f->ret = ids->ret;
	f->n_names = sp->n_names;
	f->plain = sp->plain;
	f->budget = sp->budget;
	f->reason_budget = sp->reason_budget > 0 ? sp->reason_budget : 0;
	int rc = build(f, cap, tok, ids, eos, n_eos, sp, err);
	if (rc) {
		free(f);
		return rc;
	}
	f->final = sp->final ? ms_tmask_ref(sp->final) : NULL;
	for (int i = 0; i < sp->n_names; i++)
		f->args[i] = sp->args && sp->args[i] ? ms_tmask_ref(sp->args[i]) : NULL;
	costs(f, sp);
	/* a forced call that cannot fit would end cut, without its call: the
	 * request is refused before it runs (<|channel|>, then the answer) */
	if (!sp->plain && !sp->final_ok && sp->budget > 0 && sp->budget < 1 + f->cost_answer) {
		rc = ms_err_set(err, -ERANGE, "max_tokens %lld cannot hold the forced call: its "
				"frame and the shortest valid arguments take %lld tokens",
				(long long)sp->budget, (long long)(1 + f->cost_answer));
		ms_tool_force_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

void ms_tool_force_free(struct ms_tool_force *f)
{
	if (!f)
		return;
	ms_tmask_unref(f->final);
	for (int i = 0; i < f->n_names; i++)
		ms_tmask_unref(f->args[i]);
	free(f);
}

/* ---- the state machine ---- */

static int64_t left(const struct state *s)
{
	return s->f.budget > 0 ? s->f.budget - s->n_out : INT64_MAX / 4;
}

static void fixed(struct state *s, int32_t off, int32_t len, enum phase next)
{
	s->ph = PH_FIXED;
	s->fixed_off = off;
	s->fixed_len = len;
	s->next = next;
	s->pos = 0;
}

/* The candidates [lo, hi) from their first token. An answer is kept only
 * while it fits the budget (the cheapest whatever the budget), reasoning
 * only once and while the cheapest answer still fits after it. */
static void pick(struct state *s, int lo, int hi)
{
	s->ph = PH_PICK;
	s->lo = lo;
	s->hi = hi;
	s->pos = 0;
	int best = -1;
	for (int c = lo; c < hi; c++) {
		s->alive[c] = s->f.cand_len[c] > 0;
		if (c == C_ANALYSIS || !s->alive[c])
			continue;
		if (best < 0 || s->f.cost[c] < s->f.cost[best])
			best = c;
		s->alive[c] = s->f.cost[c] <= left(s);
	}
	if (best >= 0)
		s->alive[best] = true;
	int64_t need = s->f.cand_len[C_ANALYSIS] + 2 + s->f.restart_len + s->f.cost_answer;
	s->alive[C_ANALYSIS] &= !s->reasoned && left(s) > need;
}

static void body(struct state *s, struct ms_tmask *t, int32_t end)
{
	s->ph = PH_BODY;
	s->gt = t;
	s->body_end = end;
	s->gm_ok = t && !ms_gmatch_init(&s->gm, ms_tmask_grammar(t));
}

static void st_free(void *st)
{
	struct state *s = st;
	if (s->gm_ok)
		ms_gmatch_free(&s->gm);
	ms_tmask_unref(s->f.final);
	for (int i = 0; i < s->f.n_names; i++)
		ms_tmask_unref(s->f.args[i]);
	free(s);
}

static void *st_init(const void *arg)
{
	const struct ms_tool_force *f = arg;
	struct state *s = calloc(1, offsetof(struct state, f) + f->bytes);
	if (!s)
		return NULL;
	memcpy(&s->f, f, f->bytes);
	/* the grammars are the state's too: the request may outlive the parse */
	if (s->f.final)
		ms_tmask_ref(s->f.final);
	for (int i = 0; i < s->f.n_names; i++)
		if (s->f.args[i])
			ms_tmask_ref(s->f.args[i]);
	if (f->plain) {
		body(s, s->f.final, -1);
		if (s->f.final && !s->gm_ok) {
			st_free(s);  /* out of memory: the grammars' references go too */
			return NULL;
		}
	} else {
		s->ph = PH_FIXED;
		s->fixed_off = -1;  /* <|channel|> */
		s->fixed_len = 1;
		s->next = PH_PICK;
	}
	return s;
}

static int32_t fixed_tok(const struct state *s)
{
	return s->fixed_off < 0 ? s->f.channel : s->f.seq[s->fixed_off + s->pos];
}

/* The most tokens only() keeps: closing()'s 256 bytes and the ends (the
 * other callers keep fewer). */
#define ONLY_MAX (256 + 16)

/* Leave only a[0..n) (n <= ONLY_MAX; an allowed token the model gives no
 * chance still wins over nothing). */
static void only(float *z, int64_t vocab, const int32_t *a, int n)
{
	float v[ONLY_MAX];
	for (int i = 0; i < n; i++)
		v[i] = a[i] >= 0 && a[i] < vocab ? z[a[i]] : -INFINITY;
	for (int64_t i = 0; i < vocab; i++)
		z[i] = -INFINITY;
	for (int i = 0; i < n; i++)
		if (a[i] >= 0 && a[i] < vocab)
			z[a[i]] = isfinite(v[i]) ? v[i] : -1e30f;
}

/* The body's end tokens into a (its count). */
static int ends(const struct state *s, int32_t *a)
{
	if (s->body_end >= 0) {
		a[0] = s->body_end;
		return 1;
	}
	int n = s->f.n_eos < 16 ? s->f.n_eos : 16;
	memcpy(a, s->f.seq + s->f.eos_off, (size_t)n * 4);
	return n;
}

/* Free text: no special token but end (or end of text when end < 0). */
static void free_text(const struct state *s, float *z, int64_t vocab, int32_t end)
{
	const int32_t *b = s->f.seq + s->f.bans_off;
	for (int i = 0; i < s->f.bans_len; i++) {
		bool keep = end >= 0 ? b[i] == end : i >= 7;
		if (!keep && b[i] >= 0 && b[i] < vocab)
			z[b[i]] = -INFINITY;
	}
}

/* Closing: only the bytes along a shortest completion (each a token of its
 * own), and the end once complete. */
static void closing(struct state *s, float *z, int64_t vocab)
{
	int32_t a[ONLY_MAX];
	int n = 0;
	const struct ms_vocab_trie *v = ms_tmask_vocab(s->gt);
	int64_t need = ms_gmatch_min_bytes(&s->gm);
	for (int b = 0; b < 256 && need > 0; b++) {
		int32_t t = ms_vocab_trie_byte_token(v, (uint8_t)b);
		struct ms_gmatch c;
		if (t < 0 || ms_gmatch_copy(&c, &s->gm))
			continue;
		uint8_t byte = (uint8_t)b;
		if (ms_gmatch_feed(&c, &byte, 1) && ms_gmatch_min_bytes(&c) < need)
			a[n++] = t;
		ms_gmatch_free(&c);
	}
	if (s->gm.accept || !n)
		n += ends(s, a + n);
	only(z, vocab, a, n);
}

/* Whether the answer can still be finished after token t (its end
 * included) within the budget left after t. */
static bool finishes_after(const struct state *s, int32_t t)
{
	uint32_t len;
	const uint8_t *b = ms_vocab_trie_bytes(ms_tmask_vocab(s->gt), t, &len);
	struct ms_gmatch c;
	if (!b || !len || ms_gmatch_copy(&c, &s->gm))
		return false;
	bool ok = ms_gmatch_feed(&c, b, len) && ms_gmatch_min_bytes(&c) + 1 <= left(s) - 1;
	ms_gmatch_free(&c);
	return ok;
}

/* Near the end of the budget: of the allowed tokens (z already masked),
 * the NEAR_TOP likeliest that leave the answer finishable, and the ends
 * when complete; never nothing (the bytes of closing() otherwise). */
static void near_end(struct state *s, float *z, int64_t vocab, const int32_t *e, int ne,
		     const float *keep)
{
	int32_t top[NEAR_TOP];
	int n = 0;
	for (int64_t i = 0; i < vocab; i++) {
		if (z[i] == -INFINITY)
			continue;
		int k = n < NEAR_TOP ? n++ : NEAR_TOP; /* insertion into the sorted top */
		if (k == NEAR_TOP && z[i] <= z[top[NEAR_TOP - 1]])
			continue;
		for (k = k == NEAR_TOP ? NEAR_TOP - 1 : k; k > 0 && z[top[k - 1]] < z[i]; k--)
			top[k] = top[k - 1];
		top[k] = (int32_t)i;
	}
	int32_t ok[NEAR_TOP + 16];
	int m = 0;
	for (int i = 0; i < n; i++)
		if (finishes_after(s, top[i]))
			ok[m++] = top[i];
	if (!m && !s->gm.accept) {
		closing(s, z, vocab);
		return;
	}
	only(z, vocab, ok, m);
	for (int i = 0; s->gm.accept && i < ne; i++)
		if (e[i] >= 0 && e[i] < vocab)
			z[e[i]] = isfinite(keep[i]) ? keep[i] : -1e30f;
}

static void body_mask(struct state *s, float *z, int64_t vocab)
{
	int32_t e[16];
	int ne = ends(s, e);
	if (!s->gt) {
		if (left(s) <= 1)
			only(z, vocab, e, ne);
		else
			free_text(s, z, vocab, s->body_end);
		return;
	}
	if (!s->gm_ok || (!ms_gmatch_open(&s->gm) && s->gm.accept)) {
		only(z, vocab, e, ne);
		return;
	}
	int64_t need = ms_gmatch_min_bytes(&s->gm);
	if (left(s) <= need + 1 + CLOSE_SLACK) {
		closing(s, z, vocab);
		return;
	}
	float keep[16];
	for (int i = 0; i < ne; i++)
		keep[i] = e[i] >= 0 && e[i] < vocab ? z[e[i]] : -INFINITY;
	if (ms_tmask_apply(s->gt, &s->gm, z, vocab)) {
		only(z, vocab, e, ne);  /* out of memory: end the body */
		return;
	}
	if (left(s) <= need + 1 + CLOSE_SLACK + NEAR) {
		near_end(s, z, vocab, e, ne, keep);
		return;
	}
	if (s->gm.accept)
		for (int i = 0; i < ne; i++)
			if (e[i] >= 0 && e[i] < vocab)
				z[e[i]] = keep[i];
}

static void st_mask(void *st, float *z, int64_t vocab)
{
	struct state *s = st;
	int32_t a[N_CAND];
	int n = 0;
	switch (s->ph) {
	case PH_FIXED:
		a[n++] = fixed_tok(s);
		break;
	case PH_PICK:
		for (int c = s->lo; c < s->hi; c++)
			if (s->alive[c] && n < MAX_NAMES + 8)
				a[n++] = s->f.seq[s->f.cand_off[c] + s->pos];
		break;
	case PH_REASON:
		if (left(s) > 1 + s->f.restart_len + s->f.cost_answer &&
		    (!s->f.reason_budget || s->n_reason < s->f.reason_budget)) {
			free_text(s, z, vocab, s->f.end);
			return;
		}
		a[n++] = s->f.end;  /* the answer needs the rest, or the thinking is spent */
		break;
	case PH_BODY:
		body_mask(s, z, vocab);
		return;
	default:
		break;
	}
	if (!n)  /* nothing left to choose (done): the end */
		n = ends(s, a);
	only(z, vocab, a, n);
}

/* A candidate complete: its phase. */
static void chosen(struct state *s, int c)
{
	if (c == C_ANALYSIS)
		s->ph = PH_REASON;
	else if (c == C_FINAL)
		body(s, s->f.final, s->f.ret);
	else
		body(s, s->f.args[c - C_NAMES], s->f.call);
}

static void pick_accept(struct state *s, int32_t tok)
{
	int done = -1;
	for (int c = s->lo; c < s->hi; c++) {
		if (!s->alive[c])
			continue;
		s->alive[c] = s->f.seq[s->f.cand_off[c] + s->pos] == tok;
		if (s->alive[c] && s->pos + 1 == s->f.cand_len[c])
			done = c;
	}
	s->pos++;
	if (done >= 0)
		chosen(s, done);
}

static void body_accept(struct state *s, int32_t tok)
{
	int32_t e[16];
	int ne = ends(s, e);
	for (int i = 0; i < ne; i++)
		if (tok == e[i]) {
			s->ph = PH_DONE;
			return;
		}
	if (!s->gt || !s->gm_ok)
		return;
	uint32_t len;
	const uint8_t *b = ms_vocab_trie_bytes(ms_tmask_vocab(s->gt), tok, &len);
	if (!b || !ms_gmatch_feed(&s->gm, b, len)) {
		ms_gmatch_free(&s->gm);  /* cannot happen under the mask: end it */
		s->gm_ok = false;
	}
}

static void st_accept(void *st, int32_t tok)
{
	struct state *s = st;
	s->n_out++;
	switch (s->ph) {
	case PH_FIXED:
		if (++s->pos >= s->fixed_len) {
			if (s->next == PH_PICK)
				pick(s, C_ANALYSIS, C_NAMES + s->f.n_names);
			else
				s->ph = s->next;
		}
		break;
	case PH_PICK: pick_accept(s, tok); break;
	case PH_REASON:
		if (tok == s->f.end) {
			s->reasoned = true;
			fixed(s, s->f.restart_off, s->f.restart_len, PH_PICK);
		} else {
			s->n_reason++;
		}
		break;
	case PH_BODY: body_accept(s, tok); break;
	default: break;
	}
}

struct ms_constraint ms_tool_force_constraint(const struct ms_tool_force *f)
{
	return (struct ms_constraint){.init = st_init, .mask = st_mask, .accept = st_accept,
				      .free = st_free, .arg = f};
}
