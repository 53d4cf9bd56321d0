/* Intrusive doubly linked list (as the Linux kernel's and UCX's ucs_list). */
#ifndef SWY_UTIL_LIST_H
#define SWY_UTIL_LIST_H

#include <stddef.h>

typedef struct swy_list {
    struct swy_list *prev, *next;
} swy_list_t;

#define swy_container_of(ptr, type, member)                                   \
    ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void swy_list_init(swy_list_t *head)
{
    head->prev = head->next = head;
}
static inline int swy_list_empty(const swy_list_t *head)
{
    return head->next == head;
}
static inline void swy_list_insert_before(swy_list_t *pos, swy_list_t *item)
{
    item->prev = pos->prev;
    item->next = pos;
    pos->prev->next = item;
    pos->prev = item;
}
static inline void swy_list_push_back(swy_list_t *head, swy_list_t *item)
{
    swy_list_insert_before(head, item);
}
static inline void swy_list_del(swy_list_t *item)
{
    item->prev->next = item->next;
    item->next->prev = item->prev;
    item->prev = item->next = item;
}

#define swy_list_for_each_safe(pos, tmp, head)                                \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);          \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif
