/* responses-store.c: the Responses API's store, an LRU (responses-store.h). */
#include "responses-store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	struct ms_list_node link;     /* in the LRU */
	char id[64];
	cJSON *response, *items;
};

void ms_responses_store_init(struct ms_responses_store *st, int cap)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_init(&st->mu, NULL);
	st->cap = cap > 0 ? cap : 0;
}

static void entry_free(struct entry *e)
{
	cJSON_Delete(e->response);
	cJSON_Delete(e->items);
	free(e);
}

void ms_responses_store_free(struct ms_responses_store *st)
{
	for (struct ms_list_node *n = st->lru.head, *next; n; n = next) {
		next = n->next;
		entry_free(ms_list_entry(n, struct entry, link));
	}
	st->lru = (struct ms_list){0};
	st->n = 0;
	pthread_mutex_destroy(&st->mu);
}

/* id's entry (under the lock), taken out of the store (unlink) or moved to
 * the front; NULL when there is none. */
static struct entry *find(struct ms_responses_store *st, const char *id, bool unlink)
{
	for (struct ms_list_node *n = st->lru.head; n; n = n->next) {
		struct entry *e = ms_list_entry(n, struct entry, link);
		if (strcmp(e->id, id))
			continue;
		ms_list_unlink(&st->lru, n);
		if (unlink)
			st->n--;
		else
			ms_list_push_front(&st->lru, n);
		return e;
	}
	return NULL;
}

void ms_responses_store_put(struct ms_responses_store *st, const char *id, cJSON *response,
			    cJSON *items)
{
	struct entry *e = calloc(1, sizeof(*e));
	if (!e || !response || !items || !st->cap) {
		free(e);
		cJSON_Delete(response);
		cJSON_Delete(items);
		return;
	}
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->response = response;
	e->items = items;
	pthread_mutex_lock(&st->mu);
	struct entry *old = find(st, id, true), *drop = NULL;
	ms_list_push_front(&st->lru, &e->link);
	st->n++;
	if (st->n > st->cap) { /* the least recently used is the last */
		drop = ms_list_entry(st->lru.tail, struct entry, link);
		ms_list_unlink(&st->lru, &drop->link);
		st->n--;
	}
	pthread_mutex_unlock(&st->mu);
	if (old)
		entry_free(old);
	if (drop)
		entry_free(drop);
}

bool ms_responses_store_get(struct ms_responses_store *st, const char *id, cJSON **response,
			    cJSON **items)
{
	pthread_mutex_lock(&st->mu);
	struct entry *e = find(st, id, false);
	if (e && response)
		*response = cJSON_Duplicate(e->response, true);
	if (e && items)
		*items = cJSON_Duplicate(e->items, true);
	pthread_mutex_unlock(&st->mu);
	return e != NULL;
}

bool ms_responses_store_delete(struct ms_responses_store *st, const char *id)
{
	pthread_mutex_lock(&st->mu);
	struct entry *e = find(st, id, true);
	pthread_mutex_unlock(&st->mu);
	if (e)
		entry_free(e);
	return e != NULL;
}
