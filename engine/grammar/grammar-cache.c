/* grammar-cache.c: compiled grammars by text, an LRU (grammar-cache.h). */
#include "grammar-cache.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-json.h"
#include "grammar-text.h"
#include "ms-clock.h"
#include "ms-list.h"

struct gentry {
	enum ms_grammar_kind kind;
	char *text;
	struct ms_tmask *t;
	struct ms_list_node link;     /* in the LRU */
};

struct ms_grammar_cache {
	struct ms_vocab voc;
	ms_mask_words_fn *write;
	int64_t vocab;
	int cap;
	pthread_mutex_t lock;
	struct ms_vocab_trie *trie;
	struct ms_list lru;
	struct ms_grammar_cache_stats st;
};

int ms_grammar_cache_new(struct ms_vocab voc, int64_t vocab, int capacity,
			 ms_mask_words_fn *write, struct ms_grammar_cache **out,
			 struct ms_err *err)
{
	struct ms_grammar_cache *c = calloc(1, sizeof(*c));
	*out = c;
	if (!c)
		return ms_err_set(err, -ENOMEM, "out of memory");
	c->voc = voc;
	c->write = write;
	c->vocab = vocab;
	c->cap = capacity > 0 ? capacity : 64;
	pthread_mutex_init(&c->lock, NULL);
	return 0;
}

static void gentry_free(struct gentry *e)
{
	ms_tmask_unref(e->t);
	free(e->text);
	free(e);
}

void ms_grammar_cache_free(struct ms_grammar_cache *c)
{
	if (!c)
		return;
	for (struct ms_list_node *n = c->lru.head, *next; n; n = next) {
		next = n->next;
		gentry_free(ms_list_entry(n, struct gentry, link));
	}
	ms_vocab_trie_free(c->trie);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* A list of strings, the output exactly one of them. */
static int choice_rules(struct ms_gb *b, const char *text, int *root, struct ms_err *err)
{
	cJSON *j = cJSON_Parse(text);
	int n = cJSON_GetArraySize(j), k = 0;
	if (!cJSON_IsArray(j) || !n) {
		cJSON_Delete(j);
		return ms_err_set(err, -EINVAL, "the choices must be a non-empty list of strings");
	}
	ms_gx *alts = calloc((size_t)n, sizeof(ms_gx));
	const cJSON *it;
	int rc = alts ? 0 : ms_err_set(err, -ENOMEM, "out of memory");
	cJSON_ArrayForEach(it, j) {
		if (rc)
			break;
		if (!cJSON_IsString(it) || !*it->valuestring)
			rc = ms_err_set(err, -EINVAL, "choice %d is not a non-empty string", k);
		else
			alts[k++] = ms_gb_str(b, it->valuestring);
	}
	*root = ms_gb_rule(b, "root");
	if (!rc)
		ms_gb_define(b, *root, ms_gb_alt(b, alts, n));
	free(alts);
	cJSON_Delete(j);
	return rc;
}

static int compile(enum ms_grammar_kind kind, const char *text, struct ms_grammar **g, struct ms_err *err)
{
	struct ms_gb *b;
	int root = -1, rc = 0;
	if (ms_gb_new(&b))
		return ms_err_set(err, -ENOMEM, "out of memory");
	if (kind == MS_GK_JSON_SCHEMA || kind == MS_GK_JSON_OBJECT) {
		cJSON *s = kind == MS_GK_JSON_SCHEMA ? cJSON_Parse(text) : NULL;
		if (kind == MS_GK_JSON_SCHEMA && !s)
			rc = ms_err_set(err, -EINVAL, "the schema is not JSON");
		if (!rc)
			rc = ms_json_schema_rules(b, s, &root, err);
		cJSON_Delete(s);
	} else if (kind == MS_GK_REGEX) {
		root = ms_gb_rule(b, "root");
		ms_gx x = ms_regex_expr(b, text, MS_REGEX_FULL, err);
		rc = x < 0 ? (err && err->code ? err->code : -EINVAL) : 0;
		ms_gb_define(b, root, x);
	} else if (kind == MS_GK_GBNF) {
		rc = ms_gbnf_parse(b, text, &root, err);
	} else {
		rc = choice_rules(b, text, &root, err);
	}
	if (!rc)
		rc = ms_gb_compile(b, root, g, err);
	ms_gb_free(b);
	return rc;
}

/* The grammar's first mask, walked now, outside the lock (a request's
 * first step then finds it cached): a grammar whose mask costs more than
 * MS_TMASK_MAX_WORK is refused here, as the request's 400, rather than
 * ending an answer part way. */
static int first_mask(struct ms_tmask *t, int64_t vocab, struct ms_err *err)
{
	struct ms_gmatch m;
	uint64_t *bits = malloc((size_t)(vocab + 63) / 64 * 8);
	int rc = bits ? ms_gmatch_init(&m, ms_tmask_grammar(t)) : -ENOMEM;
	if (!rc) {
		rc = ms_tmask_bits(t, &m, bits);
		ms_gmatch_free(&m);
	}
	free(bits);
	if (rc == -E2BIG)
		return ms_err_set(err, rc, "grammar too ambiguous: its first token mask expands "
				  "more than %d parser configurations", MS_TMASK_MAX_WORK);
	return rc ? ms_err_set(err, rc, "out of memory") : 0;
}

int ms_grammar_cache_get(struct ms_grammar_cache *c, enum ms_grammar_kind kind, const char *text,
			 struct ms_tmask **out, struct ms_err *err)
{
	*out = NULL;
	if (kind == MS_GK_JSON_OBJECT)
		text = "";
	pthread_mutex_lock(&c->lock);
	for (struct ms_list_node *n = c->lru.head; n; n = n->next) {
		struct gentry *e = ms_list_entry(n, struct gentry, link);
		if (e->kind == kind && !strcmp(e->text, text)) {
			ms_list_unlink(&c->lru, n);
			ms_list_push_front(&c->lru, n);
			c->st.hits++;
			*out = ms_tmask_ref(e->t);
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
	}
	int rc = 0;
	if (!c->trie)
		rc = ms_vocab_trie_new(&c->voc, c->vocab, &c->trie, err);
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	/* compiled outside the lock: other requests go on meanwhile */
	struct ms_grammar *g = NULL;
	double t0 = ms_now_s();
	rc = compile(kind, text, &g, err);
	struct gentry *e = rc ? NULL : calloc(1, sizeof(*e));
	if (!rc && (!e || !(e->text = strdup(text)))) {
		rc = ms_err_set(err, -ENOMEM, "out of memory");
		ms_grammar_free(g);
	}
	if (!rc)
		rc = ms_tmask_new(g, c->trie, 0, c->write, &e->t, err);
	if (!rc)
		rc = first_mask(e->t, c->vocab, err);
	if (rc) {
		if (e) {
			ms_tmask_unref(e->t);
			free(e->text);
		}
		free(e);
		return rc;
	}
	e->kind = kind;
	pthread_mutex_lock(&c->lock);
	c->st.misses++;
	c->st.compile_s += ms_now_s() - t0;
	ms_list_push_front(&c->lru, &e->link);
	c->st.entries++;
	*out = ms_tmask_ref(e->t);
	while (c->st.entries > c->cap) {
		struct gentry *old = ms_list_entry(c->lru.tail, struct gentry, link);
		ms_list_unlink(&c->lru, &old->link);
		gentry_free(old);  /* requests still using it hold their references */
		c->st.entries--;
		c->st.evictions++;
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void ms_grammar_cache_get_stats(struct ms_grammar_cache *c, struct ms_grammar_cache_stats *s)
{
	pthread_mutex_lock(&c->lock);
	*s = c->st;
	pthread_mutex_unlock(&c->lock);
}
