/* libFuzzer harness: the configuration value parsers and the one rule of
 * config.h. Input: a selector byte (the variable), then the value text.
 * Every result must be the caller's default or lie within the table's
 * range (abort otherwise, which the fuzzer reports). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"

static const char *const names[] = {
    "SWY_TIMEOUT_S",       "SWY_HEARTBEAT_S",     "SWY_OUTAGE_S",
    "SWY_PARTITION_BYTES", "SWY_WINDOW_BYTES",    "SWY_SPIN_US",
    "SWY_COPY_THREADS",    "SWY_CREDIT_BYTES",    "SWY_TOPO_PROBE",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

static void check_range(const char *name, double value, double fallback)
{
    const swy_config_entry_t *entry = swy_config_entry(name);
    if (value == fallback)
        return;
    if (!(value >= entry->min && value <= entry->max))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 256)
        return 0;
    static int quiet;
    if (!quiet) {
        setenv("SWY_LOG_LEVEL", "error", 1); /* one warning per input */
        quiet = 1;
    }
    char text[257];
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';

    /* The parsers on their own. */
    size_t size_value;
    int64_t int_value;
    double double_value;
    (void)swy_config_parse_size(text, &size_value);
    (void)swy_config_parse_int(text, &int_value);
    if (swy_config_parse_double(text, &double_value) == 0 &&
        isnan(double_value))
        abort();

    /* The rule, as the getters apply it to a variable's value. */
    const char *name = names[data[0] % NNAMES];
    switch (swy_config_entry(name)->type) {
    case SWY_CONFIG_DOUBLE:
        check_range(name, swy_config_double_of(name, text, -7.0), -7.0);
        break;
    case SWY_CONFIG_INT:
        check_range(name, (double)swy_config_int_of(name, text, -7), -7.0);
        break;
    case SWY_CONFIG_SIZE:
        check_range(name, (double)swy_config_size_of(name, text, 7), 7.0);
        break;
    default:
        break;
    }
    return 0;
}
