/* Status helpers and the per-thread "last error" message.
 *
 * The function that first sees an error calls swy_err_set() with the exact
 * cause; it logs the message (debug level: the caller decides whether the
 * user sees it through swy_last_error) and keeps it for the thread.
 * Callers propagate with SWY_CHECK. */
#ifndef SWY_UTIL_STATUS_H
#define SWY_UTIL_STATUS_H

#include <stddef.h>

#include "switchyard/switchyard.h"

#define SWY_ERRMSG_MAX 512

/* Record (and log under subsys at warn level) the cause of a failure for
 * this thread; returns status so that `return swy_err_set(...)` reads. */
swy_status_t swy_err_set(swy_status_t status, const char *subsys,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* This thread's last message ("" if none). */
const char *swy_err_last(void);
/* Replace this thread's last message without logging. */
void swy_err_store(const char *msg);
void swy_err_clear(void);

#define SWY_CHECK(expr)                                                       \
    do {                                                                      \
        swy_status_t swy_check_status_ = (expr);                              \
        if (swy_check_status_ < 0)                                            \
            return swy_check_status_;                                         \
    } while (0)

#define SWY_CHECK_GOTO(expr, status_var, label)                               \
    do {                                                                      \
        (status_var) = (expr);                                                \
        if ((status_var) < 0)                                                 \
            goto label;                                                       \
    } while (0)

#endif
