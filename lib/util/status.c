/* Status strings and the per-thread last-error message (see status.h). */
#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"

static _Thread_local char thread_last_error[SWY_ERRMSG_MAX];

const char *swy_status_string(swy_status_t status)
{
    switch (status) {
    case SWY_OK: return "success";
    case SWY_INPROGRESS: return "in progress";
    case SWY_ERR_INVALID_ARG: return "invalid argument";
    case SWY_ERR_NO_MEMORY: return "out of memory";
    case SWY_ERR_UNSUPPORTED: return "unsupported";
    case SWY_ERR_TIMEOUT: return "timed out";
    case SWY_ERR_REMOTE: return "remote peer failed";
    case SWY_ERR_MISMATCH: return "ranks disagree";
    case SWY_ERR_TRANSPORT: return "transport error";
    case SWY_ERR_SYSTEM: return "system error";
    case SWY_ERR_ABORTED: return "aborted";
    case SWY_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

swy_status_t swy_err_set(swy_status_t status, const char *subsys,
                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(thread_last_error, sizeof(thread_last_error), fmt, ap);
    va_end(ap);
    swy_warn(subsys, "%s (%s)", thread_last_error, swy_status_string(status));
    return status;
}

const char *swy_err_last(void)
{
    return thread_last_error;
}

void swy_err_store(const char *msg)
{
    snprintf(thread_last_error, sizeof(thread_last_error), "%s",
             msg ? msg : "");
}

void swy_err_clear(void)
{
    thread_last_error[0] = '\0';
}
