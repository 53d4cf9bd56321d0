/**
 * @file list.h
 * @brief Intrusive doubly linked list (as the Linux kernel's and UCX's
 *        ucs_list), header-only.
 *
 * The one list of the library and of its plugins. Plugins do not link
 * libswitchyard, so everything here is static inline and needs nothing
 * but this header. An item is a swy_list_t embedded in the element; a
 * list is a swy_list_t head, empty when it points at itself.
 */
#ifndef SWITCHYARD_LIST_H
#define SWITCHYARD_LIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct swy_list {
    struct swy_list *prev, *next;
} swy_list_t;

/** The element of type @p type whose @p member is at @p ptr. */
#define swy_container_of(ptr, type, member)                                   \
    ((type *)((char *)(ptr)-offsetof(type, member)))

/** Make @p head an empty list (or an item that is on no list). */
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

/** Take @p item off its list; it is then on none (swy_list_init'ed). */
static inline void swy_list_del(swy_list_t *item)
{
    item->prev->next = item->next;
    item->next->prev = item->prev;
    item->prev = item->next = item;
}

/** Move every item of @p src, in order, to @p dst, which is overwritten
 *  (its old items are lost, not freed); @p src is left empty. */
static inline void swy_list_take(swy_list_t *dst, swy_list_t *src)
{
    swy_list_init(dst);
    if (swy_list_empty(src))
        return;
    dst->next = src->next;
    dst->prev = src->prev;
    dst->next->prev = dst;
    dst->prev->next = dst;
    swy_list_init(src);
}

/** Walk @p head with @p pos; @p pos may be deleted in the body. */
#define swy_list_for_each_safe(pos, tmp, head)                                \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);          \
         (pos) = (tmp), (tmp) = (pos)->next)

#ifdef __cplusplus
}
#endif
#endif /* SWITCHYARD_LIST_H */
