/* Logging: SWY_LOG_LEVEL (error|warn|info|debug|trace, default warn),
 * SWY_LOG_SUBSYS (comma list, "^" prefix excludes: "boot,coll" or "^ucx"),
 * SWY_LOG_FILE (path; "%h" host and "%p" pid are expanded). Thread safe. */
#ifndef SWY_UTIL_LOG_H
#define SWY_UTIL_LOG_H

#include <stdarg.h>

#include "switchyard/swy_transport_v1.h" /* swy_log_level_t */

/* Is a message at this level for this subsystem wanted? Cheap. */
int swy_log_enabled(swy_log_level_t level, const char *subsys);

void swy_log(swy_log_level_t level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void swy_vlog(swy_log_level_t level, const char *subsys, const char *fmt,
              va_list ap);

/* Label that prefixes this process's lines, e.g. "rank 3". */
void swy_log_set_rank(int rank);

#define SWY_LOG_AT(level, subsys, ...)                                        \
    do {                                                                      \
        if (swy_log_enabled((level), (subsys)))                               \
            swy_log((level), (subsys), __VA_ARGS__);                          \
    } while (0)
#define swy_error(subsys, ...) SWY_LOG_AT(SWY_LOG_ERROR, subsys, __VA_ARGS__)
#define swy_warn(subsys, ...) SWY_LOG_AT(SWY_LOG_WARN, subsys, __VA_ARGS__)
#define swy_info(subsys, ...) SWY_LOG_AT(SWY_LOG_INFO, subsys, __VA_ARGS__)
#define swy_debug(subsys, ...) SWY_LOG_AT(SWY_LOG_DEBUG, subsys, __VA_ARGS__)
#define swy_trace(subsys, ...) SWY_LOG_AT(SWY_LOG_TRACE, subsys, __VA_ARGS__)

#endif
