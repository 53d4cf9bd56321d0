/* swy_parse_size: the public face of the parser that reads the SWY_* size
 * variables (swy_config_parse_size), so that a tool reads "--min-size 4M"
 * exactly as the library reads SWY_PARTITION_BYTES=4M. */
#include <stdint.h>
#include <string.h>

#include "switchyard/switchyard.h"
#include "util/config.h"
#include "util/status.h"

swy_status_t swy_parse_size(const char *text, size_t *bytes_p)
{
    static const char fn[] = "swy_parse_size";
    size_t bytes;
    swy_err_clear();
    if (text == NULL || bytes_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "util", "%s: %s is NULL", fn,
                           text == NULL ? "text" : "bytes_p");
    if (swy_config_parse_size(text, &bytes) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "util",
                           "%s: \"%.100s\"%s is not a size (digits, then "
                           "optionally K, M or G and iB or B; at most %zu "
                           "bytes)", fn, text,
                           strlen(text) > 100 ? "..." : "", (size_t)SIZE_MAX);
    *bytes_p = bytes;
    return SWY_OK;
}
