/* Helpers shared by the transport and plugin tests: the checks of check.h
 * (counted, thread safe: test_connect runs ranks as threads; each failure
 * ends with the library's last error) and a completion record for
 * transport callbacks. */
#ifndef SWY_TEST_TRANSPORT_TEST_H
#define SWY_TEST_TRANSPORT_TEST_H

#include <stddef.h>

#define CHECK_LAST_ERROR() swy_err_last()

#include "check.h"
#include "switchyard/swy_transport_v1.h"
#include "util/status.h"

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
