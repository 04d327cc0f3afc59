/*
 * ms-list.h: an intrusive doubly linked list, newest first: the LRUs of
 * engine/grammar (compiled grammars, token masks) and of server/api (the
 * Responses store). A node lives in its entry;
 * ms_list_entry gets the entry back from it.
 */
#ifndef MS_CONFIG_LIST_H
#define MS_CONFIG_LIST_H

#include <stddef.h>

struct ms_list_node {
	struct ms_list_node *prev, *next;
};

struct ms_list {
	struct ms_list_node *head, *tail;   /* head: newest */
};

#define ms_list_entry(node, type, member) ((type *)((char *)(node) - offsetof(type, member)))

static inline void ms_list_unlink(struct ms_list *l, struct ms_list_node *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		l->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		l->tail = e->prev;
	e->prev = e->next = NULL;
}

static inline void ms_list_push_front(struct ms_list *l, struct ms_list_node *e)
{
	e->prev = NULL;
	e->next = l->head;
	if (l->head)
		l->head->prev = e;
	l->head = e;
	if (!l->tail)
		l->tail = e;
}

#endif
