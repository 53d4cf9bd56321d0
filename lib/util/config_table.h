#ifndef SWY_UTIL_CONFIG_TABLE_H
#define SWY_UTIL_CONFIG_TABLE_H

#include "util/config.h"

/* Terminated by an entry whose name is NULL. */
extern const swy_config_entry_t swy_config_table[];

#endif
