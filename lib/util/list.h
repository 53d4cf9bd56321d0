/* The intrusive list is public and header-only (switchyard/list.h) so that
 * plugins, which do not link libswitchyard, share it with the library. */
#ifndef SWY_UTIL_LIST_H
#define SWY_UTIL_LIST_H

#include "switchyard/list.h"

#endif
