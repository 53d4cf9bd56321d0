/* Logging: SWY_LOG_LEVEL (error|warn|info|debug|trace, default warn),
 * SWY_LOG_SUBSYS (comma list, "^" prefix excludes: "boot,coll" or "^ucx"),
 * SWY_LOG_FILE (path; "%h" host and "%p" pid are expanded). Thread safe. */
#ifndef SWY_UTIL_LOG_H
#define SWY_UTIL_LOG_H

#include <stdarg.h>

#include "switchyard/switchyard.h"
#include "switchyard/swy_common.h"

/* Is a message at this level for this subsystem wanted? Cheap. */
int swy_log_enabled(swy_log_level_t level, const char *subsys);

void swy_log(swy_log_level_t level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void swy_vlog(swy_log_level_t level, const char *subsys, const char *fmt,
              va_list ap);

/* A limit for a warning that a peer can make repeat (a flood of bad
 * connections): at most `burst` lines per `period_s`; zero-initialize. */
typedef struct {
    double window_start_s;
    unsigned in_window;
    unsigned suppressed;
} swy_log_limit_t;

/* 1 when this occurrence may be logged; then *suppressed_p is how many
 * were held back since the last one logged (to say so in the line). Not
 * thread safe: one limit per thread (a loop's callbacks). */
int swy_log_limit(swy_log_limit_t *limit, double period_s, unsigned burst,
                  unsigned *suppressed_p);

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
