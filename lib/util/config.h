/* The one table of SWY_* configuration variables. Only this module reads
 * the environment. Values come from, in order: the environment, the file
 * named by SWY_CONFIG (lines "NAME=value", '#' comments), the default.
 * Unknown SWY_* names in the environment or file warn once.
 *
 * Every entry has a type, and numbers a range. One rule for all of them
 * (SWY_CONFIG_RULE, printed by swy-info -c): a number outside its range,
 * an infinite one included, is clamped to the nearer bound; a value that
 * is not a number of its type (nan included) gives the caller's default.
 * Either way a warning names the variable, the value and the value used,
 * once per variable and value. Text variables with a list of values in
 * the table follow the same rule: a value that is not one of them gives
 * the table's default, with the same warning.
 *
 * Each default is written once, here in the table: readers take it from
 * there (swy_config_int and the like), and pass a fallback of their own
 * only for a default the table leaves unset or "auto", which the reader
 * works out. */
#ifndef SWY_UTIL_CONFIG_H
#define SWY_UTIL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"
#include "switchyard/swy_common.h"

/* The types (swy_config_type_t) and the entry are the plugins' too. */

#define SWY_CONFIG_RULE                                                      \
    "Numbers outside their range (inf included) are clamped to the nearer " \
    "bound; values that are not numbers of their type (nan included) give " \
    "the default; both with a warning naming the variable, the value and "  \
    "the value used. Text with a list of values takes one of them (a " \
    "list, each item one of them; <plugin>: a plugin's name); another "  \
    "gives the default, with the same warning. \"auto\" (or unset) "     \
    "means the default."

typedef swy_config_var_v1_t swy_config_entry_t;

/* Value of a table variable, or NULL when unknown or unset. The pointer
 * stays valid for the life of the process. */
const char *swy_config_get(const char *name);
/* Parsers: on a malformed value, log a warning naming the variable and
 * return the fallback; a value outside the table's range is clamped with
 * a warning (SWY_CONFIG_RULE). "auto" gives the fallback (sizes, doubles).
 * Sizes accept K, M, G (powers of 1024) and "KiB". */
int64_t swy_config_get_int(const char *name, int64_t fallback);
double swy_config_get_double(const char *name, double fallback);
size_t swy_config_get_size(const char *name, size_t fallback);
int swy_config_get_bool(const char *name, int fallback);
/* The same with the table's default as the fallback, for variables whose
 * default is a value (not unset, not "auto"): the default is written
 * once, in the table. */
int64_t swy_config_int(const char *name);
double swy_config_double(const char *name);
size_t swy_config_size(const char *name);
int swy_config_bool(const char *name);
/* A TEXT or LIST variable with values: its value when it is one of them
 * (every item of a LIST), else the table's default (NULL when unset) with
 * the rule's warning. Free text is returned as it is. */
const char *swy_config_get_text(const char *name);
/* The index among name's values of swy_config_get_text(name); -1 when
 * that is NULL or a plugin's name. */
int swy_config_get_choice(const char *name);
/* Whether text is a value of name by the table (one of its values, every
 * item of a LIST; any text where it lists none): for a reader that cannot
 * warn through the log (the log itself). */
int swy_config_text_ok(const char *name, const char *text);
/* The same rule applied to a text given for name (NULL: the fallback),
 * for settings that do not come from the environment (e.g. a per
 * communicator setting); the getters above are these on the variable's
 * value. */
int64_t swy_config_int_of(const char *name, const char *text,
                          int64_t fallback);
double swy_config_double_of(const char *name, const char *text,
                            double fallback);
size_t swy_config_size_of(const char *name, const char *text,
                          size_t fallback);

/* Parse helpers shared with tools and tests. Return 0 on success. */
int swy_config_parse_size(const char *text, size_t *value_p);
int swy_config_parse_int(const char *text, int64_t *value_p);
/* A finite or infinite number with nothing after it; nan is refused. */
int swy_config_parse_double(const char *text, double *value_p);

/* The table entry of name; NULL when it is not a table variable. */
const swy_config_entry_t *swy_config_entry(const char *name);
/* Name of a type for swy-info ("size", "seconds"...). */
const char *swy_config_type_name(swy_config_type_t type);

/* A variable outside the SWY_ namespace (launcher conventions such as
 * RANK, OMPI_COMM_WORLD_RANK); NULL when unset. */
const char *swy_config_getenv_foreign(const char *name);

/* Add a plugin's own variables (swy_transport_v1_t.config: count
 * entries of var_size bytes, read by the struct_size rule) to the table.
 * Their names must start with SWY_<OWNER>_ (owner: the plugin's name).
 * Registering them again (the plugin loaded by another communicator) is
 * a no-op. Unknown SWY_<OWNER>_* variables of the environment and of
 * SWY_CONFIG, held back until now, warn here: typos under a configured
 * plugin's prefix warn once the plugin registered, others at load. */
swy_status_t swy_config_register(const char *owner,
                                 const swy_config_var_v1_t *vars,
                                 size_t count, size_t var_size);

/* Walk the table (for swy-info -c), plugins' variables registered so far
 * included. */
void swy_config_foreach(void (*cb)(const swy_config_entry_t *entry,
                                   const char *value, void *arg),
                        void *arg);
/* Re-read the environment and SWY_CONFIG (tests; tools after setenv). */
void swy_config_reload(void);

#endif
