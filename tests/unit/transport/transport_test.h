/* Helpers shared by the transport and plugin tests: a CHECK that counts
 * failures (thread safe: test_connect runs ranks as threads) and a
 * completion record for transport callbacks. */
#ifndef SWY_TEST_TRANSPORT_TEST_H
#define SWY_TEST_TRANSPORT_TEST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "switchyard/swy_transport_v1.h"
#include "util/status.h"

static atomic_int failures;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n",     \
                    __FILE__, __LINE__, #cond, swy_err_last());               \
            atomic_fetch_add(&failures, 1);                                   \
        }                                                                     \
    } while (0)

typedef struct {
    int calls;
    swy_status_t status;
    size_t bytes;
} completion_t;

static inline void on_complete(void *arg, swy_status_t status, size_t bytes)
{
    completion_t *c = arg;
    c->calls++;
    c->status = status;
    c->bytes = bytes;
}

#endif
