/* Status checks of calls that return swy_status_t (check.h has the rest).
 * Anything but SWY_OK prints
 *     FILE:LINE: EXPR returned STATUS (CODE): swy_last_error(comm)
 * on stderr and then, like the variants of check.h,
 *   CHECK_OK(expr, comm)       counts the failure in check_failures and
 *                              goes on;
 *   CHECK_OK_RET(expr, comm)   returns 1 from the calling function;
 *   CHECK_OK_EXIT(expr, comm)  exits 1.
 * comm is the communicator the call was about, or NULL for calls without
 * one (and for the library's layers below the API: swy_last_error(NULL)
 * is the calling thread's last error). */
#ifndef SWY_TEST_CHECK_SWY_H
#define SWY_TEST_CHECK_SWY_H

#include "check.h"
#include "switchyard/switchyard.h"

#define CHECK_OK_REPORT_(expr_text, status, comm)                             \
    fprintf(stderr, "%s:%d: %s returned %s (%d): %s\n", __FILE__, __LINE__,   \
            expr_text, swy_status_string(status), (int)(status),              \
            swy_last_error(comm))

#define CHECK_OK(expr, comm)                                                  \
    do {                                                                      \
        swy_status_t check_status_ = (expr);                                  \
        if (check_status_ != SWY_OK) {                                        \
            CHECK_OK_REPORT_(#expr, check_status_, comm);                     \
            check_failures++;                                                 \
        }                                                                     \
    } while (0)

#define CHECK_OK_RET(expr, comm)                                              \
    do {                                                                      \
        swy_status_t check_status_ = (expr);                                  \
        if (check_status_ != SWY_OK) {                                        \
            CHECK_OK_REPORT_(#expr, check_status_, comm);                     \
            return 1;                                                         \
        }                                                                     \
    } while (0)

#define CHECK_OK_EXIT(expr, comm)                                             \
    do {                                                                      \
        swy_status_t check_status_ = (expr);                                  \
        if (check_status_ != SWY_OK) {                                        \
            CHECK_OK_REPORT_(#expr, check_status_, comm);                     \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#endif
