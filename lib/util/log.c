/* Logging (see log.h). Configuration is read once, at first use. */
#include "util/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/config.h"

/* 0: not read yet, 1: being read, 2: ready. Reading the config may warn
 * (unknown SWY_* names): such messages are printed with the defaults
 * instead of waiting for an initialization that is waiting for them. */
static atomic_int log_state;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static swy_log_level_t log_level = SWY_LOG_WARN;
static char log_subsys[256];
static int log_subsys_exclude;
static FILE *log_file;
static char log_host[64];
static volatile int log_rank = -1;

static const char *level_names[] = {"", "ERROR", "WARN", "INFO", "DEBUG",
                                    "TRACE"};

static void log_open_file(const char *pattern)
{
    char path[1024];
    size_t out = 0;
    for (const char *p = pattern; *p != '\0' && out + 64 < sizeof(path); p++) {
        if (p[0] == '%' && p[1] == 'h') {
            out += (size_t)snprintf(path + out, sizeof(path) - out, "%s",
                                    log_host);
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            out += (size_t)snprintf(path + out, sizeof(path) - out, "%d",
                                    (int)getpid());
            p++;
        } else {
            path[out++] = *p;
        }
    }
    path[out] = '\0';
    log_file = fopen(path, "a");
    if (log_file == NULL) {
        log_file = stderr;
        fprintf(stderr, "SWY WARN util: SWY_LOG_FILE=%s cannot be opened; "
                        "logging to stderr\n", path);
    } else {
        setvbuf(log_file, NULL, _IOLBF, 0);
    }
}

/* swy_config_get_text's rule, with its warning on stderr. */
static const char *log_setting(const char *name)
{
    const char *value = swy_config_get(name);
    if (swy_config_text_ok(name, value))
        return value;
    const swy_config_entry_t *entry = swy_config_entry(name);
    fprintf(stderr, "SWY WARN util: %s='%s' is not %s%s; using %s\n", name,
            value, entry->type == SWY_CONFIG_LIST ? "a list of " : "one of ",
            entry->values,
            entry->default_value ? entry->default_value : "none (unset)");
    return entry->default_value;
}

static void log_init(void)
{
    gethostname(log_host, sizeof(log_host) - 1);
    /* The table's rule for a value it does not list, warned here on
     * stderr: the log cannot warn through itself while it starts. */
    const char *level = log_setting("SWY_LOG_LEVEL");
    for (int i = 1; level != NULL && i <= SWY_LOG_TRACE; i++)
        if (strcasecmp(level, level_names[i]) == 0 ||
            (i == SWY_LOG_WARN && strcasecmp(level, "warning") == 0))
            log_level = (swy_log_level_t)i;
    if (level != NULL && level[0] >= '0' && level[0] <= '5' && level[1] == 0)
        log_level = (swy_log_level_t)(level[0] - '0');
    const char *subsys = log_setting("SWY_LOG_SUBSYS");
    if (subsys != NULL) {
        if (subsys[0] == '^') {
            log_subsys_exclude = 1;
            subsys++;
        }
        snprintf(log_subsys, sizeof(log_subsys), ",%s,", subsys);
    }
    const char *file = swy_config_get("SWY_LOG_FILE");
    if (file != NULL && file[0] != '\0')
        log_open_file(file);
}

static void log_ensure(void)
{
    int expected = 0;
    if (atomic_load(&log_state) == 2)
        return;
    if (atomic_compare_exchange_strong(&log_state, &expected, 1)) {
        log_init();
        atomic_store(&log_state, 2);
    }
}

int swy_log_enabled(swy_log_level_t level, const char *subsys)
{
    log_ensure();
    if (level > log_level)
        return 0;
    if (log_subsys[0] == '\0' || subsys == NULL)
        return 1;
    char key[64];
    snprintf(key, sizeof(key), ",%s,", subsys);
    int listed = strstr(log_subsys, key) != NULL;
    return log_subsys_exclude ? !listed : listed;
}

void swy_log_set_rank(int rank)
{
    log_rank = rank;
}

void swy_vlog(swy_log_level_t level, const char *subsys, const char *fmt,
              va_list ap)
{
    if (!swy_log_enabled(level, subsys))
        return;
    char message[2048];
    vsnprintf(message, sizeof(message), fmt, ap);
    struct timeval now;
    gettimeofday(&now, NULL);
    char who[32] = "";
    if (log_rank >= 0)
        snprintf(who, sizeof(who), ":r%d", log_rank);
    pthread_mutex_lock(&log_lock);
    fprintf(log_file ? log_file : stderr,
            "[%ld.%06ld %s:%d%s] SWY %s %s: %s\n", (long)now.tv_sec,
            (long)now.tv_usec, log_host, (int)getpid(), who,
            level_names[level < 1 || level > 5 ? 2 : level],
            subsys ? subsys : "-", message);
    pthread_mutex_unlock(&log_lock);
}

void swy_log(swy_log_level_t level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    swy_vlog(level, subsys, fmt, ap);
    va_end(ap);
}

int swy_log_limit(swy_log_limit_t *limit, double period_s, unsigned burst,
                  unsigned *suppressed_p)
{
    double now = swy_time_s();
    if (now - limit->window_start_s >= period_s) {
        limit->window_start_s = now;
        limit->in_window = 0;
    }
    if (limit->in_window >= burst) {
        limit->suppressed++;
        return 0;
    }
    limit->in_window++;
    *suppressed_p = limit->suppressed;
    limit->suppressed = 0;
    return 1;
}
