/*
 * responses-store.h: the Responses API's store: the responses kept, in
 * memory, for previous_response_id and GET / DELETE /v1/responses/{id},
 * each with the conversation that led to it; at most cap of them, the
 * least recently used evicted. Thread-safe (one mutex): connection
 * threads put, get and delete.
 */
#ifndef MS_API_RESPONSES_STORE_H
#define MS_API_RESPONSES_STORE_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>

#include "ms-list.h"

struct ms_responses_store {
	pthread_mutex_t mu;
	int cap;                      /* responses kept; 0: none */
	int n;
	struct ms_list lru;           /* most recently used first */
};

void ms_responses_store_init(struct ms_responses_store *st, int cap);
void ms_responses_store_free(struct ms_responses_store *st);
/* Keep id's response and its conversation (the items that led to it and
 * its output), both taken. */
void ms_responses_store_put(struct ms_responses_store *st, const char *id, cJSON *response,
			    cJSON *items);
/* Copies of what id keeps (either pointer may be NULL); false when the
 * store has no such id (never was, evicted or deleted). */
bool ms_responses_store_get(struct ms_responses_store *st, const char *id, cJSON **response,
			    cJSON **items);
bool ms_responses_store_delete(struct ms_responses_store *st, const char *id);

#endif
