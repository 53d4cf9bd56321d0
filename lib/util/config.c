/* Configuration: the single reader of the environment (see config.h). */
#include "util/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/abi.h"
#include "util/alloc.h"
#include "util/config_table.h"
#include "util/file.h"
#include "util/log.h"
#include "util/status.h"

/* SWY_CONFIG holds a few dozen lines; a larger file is a wrong path. */
#define CONFIG_FILE_MAX_BYTES (1u << 20)
#define CONFIG_LINE_MAX 4096

extern char **environ;

typedef struct {
    char *file_value; /* from SWY_CONFIG, NULL if absent */
    char *env_value;  /* from the environment, NULL if absent */
    char *warned;     /* the value last warned about (warn once) */
} swy_config_slot_t;

/* Recursive: loading warns through the log, which reads the config. */
static pthread_mutex_t config_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static swy_config_slot_t *config_slots;
static size_t config_count; /* entries of swy_config_table */
static int config_loaded;
/* Old values are kept (never freed) so returned pointers stay valid. */

/* Plugins' variables (swy_config_register), after the table's: slot
 * config_count + i is config_extra[i]'s. Never freed: a plugin may be
 * closed, its variables stay known. */
static swy_config_entry_t **config_extra;
static size_t config_extra_count;

/* Arrays that config_add replaced while lock-free readers
 * (swy_config_get) may still hold them: kept, never freed, and reachable
 * from here for the process's life, so that they are no leak. */
static void **config_retired;
static size_t config_retired_count;

static void config_retire(void *old)
{
    if (old == NULL)
        return;
    void **list = realloc(config_retired,
                          (config_retired_count + 1) * sizeof(*list));
    if (list == NULL)
        return; /* unreachable then, but never freed under a reader */
    list[config_retired_count++] = old;
    config_retired = list;
}

/* SWY_* names of the environment and of SWY_CONFIG that are not known
 * yet but may be a configured plugin's (SWY_<PLUGIN>_*): they warn when
 * that plugin registers its variables without them. */
typedef struct {
    char *name;
    char *file_value; /* the SWY_CONFIG file's value, or NULL */
} swy_config_pending_t;
static swy_config_pending_t *config_pending;
static size_t config_pending_count;

static const swy_config_entry_t *config_at(size_t i)
{
    return i < config_count ? &swy_config_table[i]
                            : config_extra[i - config_count];
}

static ssize_t config_index(const char *name)
{
    for (size_t i = 0; i < config_count + config_extra_count; i++)
        if (strcmp(config_at(i)->name, name) == 0)
            return (ssize_t)i;
    return -1;
}

/* Is name SWY_<P>_... for an item P of the comma list? */
static int config_prefix_in(const char *name, const char *list)
{
    if (list == NULL || strncmp(name, "SWY_", 4) != 0)
        return 0;
    const char *p = list;
    while (*p != '\0') {
        while (*p == ',' || *p == '^' || isspace((unsigned char)*p))
            p++;
        size_t n = 0;
        while (p[n] != '\0' && p[n] != ',' && !isspace((unsigned char)p[n]))
            n++;
        if (n > 0 && strlen(name) > 4 + n + 1 && name[4 + n] == '_') {
            size_t k = 0;
            while (k < n && toupper((unsigned char)p[k]) == name[4 + k])
                k++;
            if (k == n)
                return 1;
        }
        p += n;
    }
    return 0;
}

/* May an unknown name belong to a plugin that has not registered yet:
 * one of SWY_TRANSPORT_PLUGINS (environment or default) or SWY_POLICY? */
static int config_maybe_plugins(const char *name)
{
    static const char *const lists[] = {"SWY_TRANSPORT_PLUGINS",
                                        "SWY_POLICY"};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        ssize_t idx = config_index(lists[i]);
        if (idx < 0 || (size_t)idx >= config_count)
            continue;
        const char *list = config_slots[idx].env_value != NULL
                               ? config_slots[idx].env_value
                               : swy_config_table[idx].default_value;
        if (config_prefix_in(name, list))
            return 1;
    }
    return 0;
}

/* Remember an unknown name for its plugin; 0 when it is no plugin's. */
static int config_defer(const char *name, const char *file_value)
{
    if (!config_maybe_plugins(name))
        return 0;
    for (size_t i = 0; i < config_pending_count; i++)
        if (strcmp(config_pending[i].name, name) == 0) {
            if (file_value != NULL) {
                swy_free(config_pending[i].file_value);
                config_pending[i].file_value = swy_strdup(file_value);
            }
            return 1;
        }
    swy_config_pending_t *grown =
        realloc(config_pending,
                (config_pending_count + 1) * sizeof(*config_pending));
    if (grown == NULL)
        return 0;
    config_pending = grown;
    config_pending[config_pending_count].name = swy_strdup(name);
    config_pending[config_pending_count].file_value =
        file_value != NULL ? swy_strdup(file_value) : NULL;
    config_pending_count++;
    return 1;
}

static char *trim(char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    char *end = text + strlen(text);
    while (end > text && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return text;
}

static void config_load_file(const char *path)
{
    char *text = NULL;
    if (swy_file_read_text(path, "SWY_CONFIG file", "util",
                           CONFIG_FILE_MAX_BYTES, &text, NULL) != SWY_OK) {
        swy_warn("util", "SWY_CONFIG ignored: %s", swy_err_last());
        return;
    }
    char *cursor = text, *line;
    int lineno = 0;
    while ((line = swy_file_next_line(&cursor)) != NULL) {
        lineno++;
        if (strlen(line) > CONFIG_LINE_MAX) {
            swy_warn("util", "%s:%d: line of %zu bytes (over %d) ignored",
                     path, lineno, strlen(line), CONFIG_LINE_MAX);
            continue;
        }
        char *text_line = trim(line);
        if (*text_line == '\0' || *text_line == '#')
            continue;
        char *eq = strchr(text_line, '=');
        if (eq == NULL) {
            swy_warn("util", "%s:%d: expected NAME=value, got '%s'", path,
                     lineno, text_line);
            continue;
        }
        *eq = '\0';
        char *name = trim(text_line), *value = trim(eq + 1);
        ssize_t idx = config_index(name);
        if (idx < 0) {
            if (!config_defer(name, value))
                swy_warn("util", "%s:%d: unknown variable %s ignored", path,
                         lineno, name);
            continue;
        }
        if (strcmp(name, "SWY_CONFIG") == 0)
            continue;
        config_slots[idx].file_value = swy_strdup(value);
    }
    swy_free(text);
}

static void config_load_locked(void)
{
    if (config_count == 0)
        while (swy_config_table[config_count].name != NULL)
            config_count++;
    size_t total = config_count + config_extra_count;
    swy_config_slot_t *slots = calloc(total, sizeof(*slots));
    if (slots == NULL)
        return;
    config_retire(config_slots); /* readers may still hold it */
    config_slots = slots;
    for (size_t i = 0; i < total; i++) {
        const char *value = getenv(config_at(i)->name);
        if (value != NULL)
            slots[i].env_value = swy_strdup(value);
    }
    config_pending_count = 0; /* their names leak, as old values do */
    config_loaded = 1; /* before any warning: the log reads the table */
    /* Unknown SWY_* names warn: a typo must not silently do nothing. */
    for (char **env = environ; env != NULL && *env != NULL; env++) {
        if (strncmp(*env, "SWY_", 4) != 0)
            continue;
        const char *eq = strchr(*env, '=');
        size_t len = eq ? (size_t)(eq - *env) : strlen(*env);
        char name[128];
        if (len >= sizeof(name))
            len = sizeof(name) - 1;
        memcpy(name, *env, len);
        name[len] = '\0';
        if (config_index(name) < 0 && !config_defer(name, NULL))
            swy_warn("util", "unknown configuration variable %s ignored "
                     "(swy-info -c lists them)", name);
    }
    ssize_t cfg = config_index("SWY_CONFIG");
    if (cfg >= 0 && slots[cfg].env_value != NULL &&
        slots[cfg].env_value[0] != '\0')
        config_load_file(slots[cfg].env_value);
}

static void config_ensure(void)
{
    pthread_mutex_lock(&config_lock);
    if (!config_loaded)
        config_load_locked();
    pthread_mutex_unlock(&config_lock);
}

void swy_config_reload(void)
{
    pthread_mutex_lock(&config_lock);
    config_load_locked();
    pthread_mutex_unlock(&config_lock);
}

const char *swy_config_get(const char *name)
{
    if (name == NULL)
        return NULL;
    config_ensure();
    ssize_t idx = config_index(name);
    if (idx < 0 || config_slots == NULL)
        return NULL;
    if (config_slots[idx].env_value != NULL)
        return config_slots[idx].env_value;
    if (config_slots[idx].file_value != NULL)
        return config_slots[idx].file_value;
    return config_at((size_t)idx)->default_value;
}

const char *swy_config_getenv_foreign(const char *name)
{
    return name ? getenv(name) : NULL;
}

int swy_config_parse_int(const char *text, int64_t *value_p)
{
    if (text == NULL || *text == '\0')
        return -1;
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    *value_p = value;
    return 0;
}

int swy_config_parse_size(const char *text, size_t *value_p)
{
    if (text == NULL)
        return -1;
    while (isspace((unsigned char)*text))
        text++;
    if (!isdigit((unsigned char)*text))
        return -1;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0)
        return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift != 0) {
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
    } else if (*end == 'b' || *end == 'B') {
        end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    if (shift != 0 && value > (SIZE_MAX >> shift))
        return -1;
    *value_p = (size_t)(value << shift);
    return 0;
}

int swy_config_parse_double(const char *text, double *value_p)
{
    if (text == NULL)
        return -1;
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    /* ERANGE: an overflow is an infinity (clamped like one), an
     * underflow a zero; both are numbers. */
    if (end == text || isnan(value))
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    *value_p = value;
    return 0;
}

const swy_config_entry_t *swy_config_entry(const char *name)
{
    if (name == NULL)
        return NULL;
    config_ensure();
    pthread_mutex_lock(&config_lock);
    ssize_t idx = config_index(name);
    pthread_mutex_unlock(&config_lock);
    return idx < 0 ? NULL : config_at((size_t)idx);
}

const char *swy_config_type_name(swy_config_type_t type)
{
    switch (type) {
    case SWY_CONFIG_UNTYPED: return "untyped";
    case SWY_CONFIG_TEXT: return "text";
    case SWY_CONFIG_PATH: return "path";
    case SWY_CONFIG_BOOL: return "bool";
    case SWY_CONFIG_INT: return "integer";
    case SWY_CONFIG_DOUBLE: return "number";
    case SWY_CONFIG_SIZE: return "size";
    case SWY_CONFIG_LIST: return "list";
    }
    return "?";
}

/* 1 the first time a variable has this (bad) value: the getters run at
 * every init, and one warning per value is enough. */
static int config_first_warning(const char *name, const char *text)
{
    int first = 1;
    pthread_mutex_lock(&config_lock);
    ssize_t idx = config_index(name);
    if (idx >= 0 && config_slots != NULL) {
        swy_config_slot_t *slot = &config_slots[idx];
        if (slot->warned != NULL && strcmp(slot->warned, text) == 0) {
            first = 0;
        } else {
            swy_free(slot->warned);
            slot->warned = swy_strdup(text);
        }
    }
    pthread_mutex_unlock(&config_lock);
    return first;
}

#define config_warn_once(name, text, ...)                                    \
    do {                                                                     \
        if (config_first_warning((name), (text)))                            \
            swy_warn("util", __VA_ARGS__);                                   \
    } while (0)

/* The table's range for a number, if name is one. */
static int config_range(const char *name, double *min_p, double *max_p)
{
    const swy_config_entry_t *entry = swy_config_entry(name);
    if (entry == NULL || (entry->type != SWY_CONFIG_INT &&
                          entry->type != SWY_CONFIG_DOUBLE &&
                          entry->type != SWY_CONFIG_SIZE))
        return 0;
    *min_p = entry->min;
    *max_p = entry->max;
    return 1;
}

/* 1 and the nearer bound in *used_p when value is outside the range
 * [*min_p, *max_p]. */
static int config_clamp(const char *name, double value, double *used_p,
                        double *min_p, double *max_p)
{
    double min, max;
    if (!config_range(name, &min, &max))
        return 0;
    *min_p = min;
    *max_p = max;
    if (value < min) {
        *used_p = min;
        return 1;
    }
    if (value > max) {
        *used_p = max;
        return 1;
    }
    return 0;
}

int64_t swy_config_get_int(const char *name, int64_t fallback)
{
    return swy_config_int_of(name, swy_config_get(name), fallback);
}

double swy_config_get_double(const char *name, double fallback)
{
    return swy_config_double_of(name, swy_config_get(name), fallback);
}

size_t swy_config_get_size(const char *name, size_t fallback)
{
    return swy_config_size_of(name, swy_config_get(name), fallback);
}

int64_t swy_config_int_of(const char *name, const char *text,
                          int64_t fallback)
{
    int64_t value;
    if (text == NULL || strcmp(text, "auto") == 0)
        return fallback;
    if (swy_config_parse_int(text, &value) != 0) {
        config_warn_once(name, text,
                         "%s='%s' is not an integer; using %" PRId64, name,
                         text, fallback);
        return fallback;
    }
    double used, min, max;
    if (config_clamp(name, (double)value, &used, &min, &max)) {
        config_warn_once(name, text,
                         "%s='%s' is outside its range %g..%g; using %" PRId64,
                         name, text, min, max, (int64_t)used);
        return (int64_t)used;
    }
    return value;
}

double swy_config_double_of(const char *name, const char *text,
                            double fallback)
{
    double value;
    if (text == NULL || strcmp(text, "auto") == 0)
        return fallback;
    if (swy_config_parse_double(text, &value) != 0) {
        config_warn_once(name, text, "%s='%s' is not a number; using %g",
                         name, text, fallback);
        return fallback;
    }
    double used, min, max;
    if (config_clamp(name, value, &used, &min, &max)) {
        config_warn_once(name, text,
                         "%s='%s' is outside its range %g..%g; using %g",
                         name, text, min, max, used);
        return used;
    }
    return value;
}

size_t swy_config_size_of(const char *name, const char *text,
                          size_t fallback)
{
    size_t value;
    if (text == NULL || strcmp(text, "auto") == 0)
        return fallback;
    if (swy_config_parse_size(text, &value) != 0) {
        /* A negative or overflowing size is out of range rather than
         * malformed: clamp it like any other number. */
        double number, used, min, max;
        if (swy_config_parse_double(text, &number) == 0 &&
            config_clamp(name, number, &used, &min, &max)) {
            config_warn_once(name, text,
                             "%s='%s' is outside its range %.0f..%.0f; "
                             "using %zu",
                             name, text, min, max, (size_t)used);
            return (size_t)used;
        }
        config_warn_once(name, text,
                         "%s='%s' is not a size (e.g. 4096, 64K, 2M); "
                         "using %zu",
                         name, text, fallback);
        return fallback;
    }
    double used, min, max;
    if (config_clamp(name, (double)value, &used, &min, &max)) {
        config_warn_once(name, text,
                         "%s='%s' is outside its range %.0f..%.0f; using %zu",
                         name, text, min, max, (size_t)used);
        return (size_t)used;
    }
    return value;
}

int swy_config_get_bool(const char *name, int fallback)
{
    const char *text = swy_config_get(name);
    if (text == NULL)
        return fallback;
    if (!strcmp(text, "1") || !strcasecmp(text, "y") ||
        !strcasecmp(text, "yes") || !strcasecmp(text, "true") ||
        !strcasecmp(text, "on"))
        return 1;
    if (!strcmp(text, "0") || !strcasecmp(text, "n") ||
        !strcasecmp(text, "no") || !strcasecmp(text, "false") ||
        !strcasecmp(text, "off"))
        return 0;
    config_warn_once(name, text, "%s='%s' is not a boolean; using %d", name,
                     text, fallback);
    return fallback;
}

/* The table's default of name as fallback: a default that is not a
 * value of its type (test_config checks there is none) reads as 0. */
static const char *table_default(const char *name)
{
    const swy_config_entry_t *entry = swy_config_entry(name);
    return entry != NULL ? entry->default_value : NULL;
}

int64_t swy_config_int(const char *name)
{
    int64_t fallback = 0;
    const char *def = table_default(name);
    if (def != NULL)
        swy_config_parse_int(def, &fallback);
    return swy_config_get_int(name, fallback);
}

double swy_config_double(const char *name)
{
    double fallback = 0;
    const char *def = table_default(name);
    if (def != NULL)
        swy_config_parse_double(def, &fallback);
    return swy_config_get_double(name, fallback);
}

size_t swy_config_size(const char *name)
{
    size_t fallback = 0;
    const char *def = table_default(name);
    if (def != NULL)
        swy_config_parse_size(def, &fallback);
    return swy_config_get_size(name, fallback);
}

int swy_config_bool(const char *name)
{
    const char *def = table_default(name);
    return swy_config_get_bool(name, def != NULL && strcmp(def, "1") == 0);
}

#define PLUGIN_ITEM "<plugin>"

/* Whether item (len bytes) is one of values, or a plugin's name where
 * values admit one; *index_p: its place among values, or -1. */
static int value_known(const char *values, const char *item, size_t len,
                       int *index_p)
{
    int index = 0, plugin = 0;
    *index_p = -1;
    for (const char *at = values; *at != '\0'; index++) {
        size_t n = strcspn(at, ",");
        if (n == strlen(PLUGIN_ITEM) && strncmp(at, PLUGIN_ITEM, n) == 0)
            plugin = 1;
        else if (n == len && strncasecmp(at, item, len) == 0) {
            *index_p = index;
            return 1;
        }
        at += n + (at[n] == ',');
    }
    if (!plugin || len == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)item[i]) && item[i] != '_' &&
            item[i] != '-')
            return 0;
    return 1;
}

static int value_index(const char *name, const char *text)
{
    const swy_config_entry_t *entry = swy_config_entry(name);
    int index;
    if (entry == NULL || entry->values == NULL || text == NULL ||
        !value_known(entry->values, text, strlen(text), &index))
        return -1;
    return index;
}

/* Whether text is a value of entry: one of its values, or for a LIST
 * (after an optional '^') items each of them, separated by commas and
 * white space as its readers split them; an empty list is one. */
static int text_valid(const swy_config_entry_t *entry, const char *text)
{
    int index;
    if (entry->type != SWY_CONFIG_LIST)
        return value_known(entry->values, text, strlen(text), &index);
    if (*text == '^')
        text++;
    for (;;) {
        text += strspn(text, ", \t");
        if (*text == '\0')
            return 1;
        size_t n = strcspn(text, ", \t");
        if (!value_known(entry->values, text, n, &index))
            return 0;
        text += n;
    }
}

/* The values as a reader would say them: "a, b or c". */
static void values_text(const char *values, char *buf, size_t len)
{
    size_t at = 0, items = 1;
    for (const char *c = values; *c; c++)
        items += *c == ',';
    buf[0] = '\0';
    for (size_t i = 0; i < items && at < len; i++) {
        int n = (int)strcspn(values, ",");
        int plugin = n == (int)strlen(PLUGIN_ITEM) &&
                     strncmp(values, PLUGIN_ITEM, (size_t)n) == 0;
        const char *said = plugin ? "a plugin name" : values;
        at += (size_t)snprintf(buf + at, len - at, "%s%.*s",
                               i == 0 ? "" : i + 1 == items ? " or " : ", ",
                               plugin ? (int)strlen(said) : n, said);
        values += n + (values[n] == ',');
    }
}

int swy_config_text_ok(const char *name, const char *text)
{
    const swy_config_entry_t *entry = swy_config_entry(name);
    return entry == NULL || entry->values == NULL || text == NULL ||
           text_valid(entry, text);
}

const char *swy_config_get_text(const char *name)
{
    const char *text = swy_config_get(name);
    const swy_config_entry_t *entry = swy_config_entry(name);
    if (swy_config_text_ok(name, text))
        return text;
    char known[256];
    values_text(entry->values, known, sizeof(known));
    config_warn_once(name, text, "%s='%s' is not %s%s; using %s", name, text,
                     entry->type == SWY_CONFIG_LIST ? "a list of " : "",
                     known, entry->default_value ? entry->default_value
                                                 : "none (unset)");
    return entry->default_value;
}

int swy_config_get_choice(const char *name)
{
    return value_index(name, swy_config_get_text(name));
}

void swy_config_foreach(void (*cb)(const swy_config_entry_t *entry,
                                   const char *value, void *arg),
                        void *arg)
{
    config_ensure();
    pthread_mutex_lock(&config_lock);
    size_t total = config_count + config_extra_count;
    pthread_mutex_unlock(&config_lock);
    for (size_t i = 0; i < total; i++)
        cb(config_at(i), swy_config_get(config_at(i)->name), arg);
}

/* One variable of a plugin's table, read by the struct_size rule; the
 * strings are copied (the plugin may be closed). */
static swy_status_t config_add(const char *owner, const void *given,
                               size_t var_size)
{
    swy_config_entry_t var;
    if (swy_struct_import(&var, sizeof(var), given, var_size,
                          SWY_STRUCT_END(swy_config_var_v1_t, values)) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "util", "plugin %s: config "
                           "variable size %zu is below the %zu bytes of "
                           "swy_config_var_v1_t's first release", owner,
                           var_size,
                           SWY_STRUCT_END(swy_config_var_v1_t, values));
    char prefix[64];
    int n = snprintf(prefix, sizeof(prefix), "SWY_%s_", owner);
    for (int i = 4; i < n; i++)
        prefix[i] = (char)toupper((unsigned char)prefix[i]);
    if (var.name == NULL || strncmp(var.name, prefix, (size_t)n) != 0 ||
        var.help == NULL || var.type == SWY_CONFIG_UNTYPED ||
        var.type > SWY_CONFIG_LIST)
        return swy_err_set(SWY_ERR_INVALID_ARG, "util", "plugin %s: config "
                           "variable %s: a name %s*, help and a type are "
                           "required", owner,
                           var.name != NULL ? var.name : "(NULL)", prefix);
    ssize_t idx = config_index(var.name);
    if (idx >= 0)
        return (size_t)idx < config_count
                   ? swy_err_set(SWY_ERR_INVALID_ARG, "util", "plugin %s: "
                                 "config variable %s is the library's",
                                 owner, var.name)
                   : SWY_OK; /* loaded before (another communicator) */
    /* New arrays, the old ones retired, not freed (config_retire):
     * swy_config_get() reads them without the lock. */
    swy_config_entry_t *entry = swy_calloc(1, sizeof(*entry));
    swy_config_entry_t **extra =
        calloc(config_extra_count + 1, sizeof(*extra));
    swy_config_slot_t *slots =
        calloc(config_count + config_extra_count + 1, sizeof(*slots));
    if (entry == NULL || extra == NULL || slots == NULL) {
        swy_free(entry);
        free(extra);
        free(slots);
        return swy_err_set(SWY_ERR_NO_MEMORY, "util", "plugin %s: out of "
                           "memory", owner);
    }
    if (config_extra_count > 0)
        memcpy(extra, config_extra, config_extra_count * sizeof(*extra));
    *entry = var;
    entry->name = swy_strdup(var.name);
    entry->help = swy_strdup(var.help);
    entry->default_value = var.default_value != NULL
                               ? swy_strdup(var.default_value)
                               : NULL;
    entry->values = var.values != NULL ? swy_strdup(var.values) : NULL;
    /* The slots grow by one. */
    memcpy(slots, config_slots,
           (config_count + config_extra_count) * sizeof(*slots));
    swy_config_slot_t *slot = &slots[config_count + config_extra_count];
    const char *env = getenv(entry->name);
    if (env != NULL)
        slot->env_value = swy_strdup(env);
    for (size_t i = 0; i < config_pending_count; i++)
        if (strcmp(config_pending[i].name, entry->name) == 0) {
            slot->file_value = config_pending[i].file_value;
            swy_free(config_pending[i].name);
            config_pending[i] = config_pending[--config_pending_count];
            break;
        }
    extra[config_extra_count] = entry;
    config_retire(config_extra);
    config_retire(config_slots);
    config_extra = extra;
    config_slots = slots;
    config_extra_count++;
    return SWY_OK;
}

swy_status_t swy_config_register(const char *owner,
                                 const swy_config_var_v1_t *vars,
                                 size_t count, size_t var_size)
{
    if (owner == NULL || (count > 0 && vars == NULL))
        return swy_err_set(SWY_ERR_INVALID_ARG, "util", "config register: "
                           "%s is NULL", owner == NULL ? "owner" : "vars");
    config_ensure();
    swy_status_t status = SWY_OK;
    pthread_mutex_lock(&config_lock);
    for (size_t i = 0; i < count && status == SWY_OK; i++)
        status = config_add(owner, (const char *)vars + i * var_size,
                            var_size);
    /* What is still pending under this plugin's prefix is a typo. */
    char list[64];
    snprintf(list, sizeof(list), "%s", owner);
    for (size_t i = 0; i < config_pending_count;) {
        if (config_prefix_in(config_pending[i].name, list)) {
            swy_warn("util", "unknown configuration variable %s ignored "
                     "(no variable of plugin %s; swy-info -c lists them)",
                     config_pending[i].name, owner);
            swy_free(config_pending[i].name);
            swy_free(config_pending[i].file_value);
            config_pending[i] = config_pending[--config_pending_count];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&config_lock);
    return status;
}
