/* An intrusive doubly linked list with head and tail: the one list the
 * library's objects (operations, acquires, batches, permits, listeners)
 * keep themselves in. A link is embedded in the object; container_of gets
 * the object back. Removing a link that is not in the list is an error. */
#ifndef SLUICE_LIST_H
#define SLUICE_LIST_H

#include <stddef.h>

typedef struct sluice__link {
  struct sluice__link *prev, *next;
} sluice__link;

typedef struct sluice__list {
  sluice__link *head, *tail;
} sluice__list;

#define sluice__container_of(ptr, type, member) \
  ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static inline void sluice__list_append(sluice__list *l, sluice__link *n) {
  n->next = NULL;
  n->prev = l->tail;
  if (l->tail) l->tail->next = n;
  else l->head = n;
  l->tail = n;
}

static inline void sluice__list_prepend(sluice__list *l, sluice__link *n) {
  n->prev = NULL;
  n->next = l->head;
  if (l->head) l->head->prev = n;
  else l->tail = n;
  l->head = n;
}

/* Append the chain first..last (links of another list, in order) to l. */
static inline void sluice__list_splice(sluice__list *l, sluice__link *first, sluice__link *last) {
  first->prev = l->tail;
  if (l->tail) l->tail->next = first;
  else l->head = first;
  last->next = NULL;
  l->tail = last;
}

static inline void sluice__list_remove(sluice__list *l, sluice__link *n) {
  if (n->prev) n->prev->next = n->next;
  else l->head = n->next;
  if (n->next) n->next->prev = n->prev;
  else l->tail = n->prev;
  n->prev = n->next = NULL;
}

#endif
