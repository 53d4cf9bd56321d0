/* Bounded reading of the small text files a user names (SWY_CONFIG,
 * SWY_TOPO_FILE, SWY_TOPO_XML): a FIFO, a device or /dev/zero must not
 * block the process or fill its memory, and a huge file is refused
 * rather than read until the address space runs out. */
#ifndef SWY_UTIL_FILE_H
#define SWY_UTIL_FILE_H

#include <stddef.h>

#include "switchyard/switchyard.h"

/* Read the whole regular file at path (at most max_bytes) into one
 * NUL-terminated allocation (swy_free). what names the file in messages
 * ("topology file"). SWY_ERR_INVALID_ARG, naming path and the reason,
 * for a file that cannot be opened, is not a regular file, is larger
 * than max_bytes or holds a NUL byte (not text). */
swy_status_t swy_file_read_text(const char *path, const char *what,
                                const char *subsys, size_t max_bytes,
                                char **text_p, size_t *len_p);

/* The next line of a text read above, cut at '\n' (which is replaced by
 * NUL; a '\r' before it too); NULL after the last line. *cursor_p starts
 * at the text. */
char *swy_file_next_line(char **cursor_p);

#endif
