/* The one table of SWY_* configuration variables. Only this module reads
 * the environment. Values come from, in order: the environment, the file
 * named by SWY_CONFIG (lines "NAME=value", '#' comments), the default.
 * Unknown SWY_* names in the environment or file warn once. */
#ifndef SWY_UTIL_CONFIG_H
#define SWY_UTIL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"

typedef struct {
    const char *name;
    const char *default_value; /* NULL: unset by default */
    const char *help;
} swy_config_entry_t;

/* Value of a table variable, or NULL when unknown or unset. The pointer
 * stays valid for the life of the process. */
const char *swy_config_get(const char *name);
/* Parsers: on a malformed value, log a warning naming the variable and
 * return the fallback. Sizes accept K, M, G (powers of 1024) and "KiB". */
int64_t swy_config_get_int(const char *name, int64_t fallback);
double swy_config_get_double(const char *name, double fallback);
size_t swy_config_get_size(const char *name, size_t fallback);
int swy_config_get_bool(const char *name, int fallback);

/* Parse helpers shared with tools and tests. Return 0 on success. */
int swy_config_parse_size(const char *text, size_t *value_p);
int swy_config_parse_int(const char *text, int64_t *value_p);

/* A variable outside the SWY_ namespace (launcher conventions such as
 * RANK, OMPI_COMM_WORLD_RANK); NULL when unset. */
const char *swy_config_getenv_foreign(const char *name);

/* Walk the table (for swy-info -c). */
void swy_config_foreach(void (*cb)(const swy_config_entry_t *entry,
                                   const char *value, void *arg),
                        void *arg);
/* Re-read the environment and SWY_CONFIG (tests; tools after setenv). */
void swy_config_reload(void);

#endif
