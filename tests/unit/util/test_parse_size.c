/* swy_parse_size (public API): every spelling the SWY_* size variables
 * accept gives the size a plain multiplication gives; every other text,
 * a NULL argument and a size beyond size_t fail with SWY_ERR_INVALID_ARG,
 * leave the output alone and say in swy_last_error(NULL) which text it
 * was. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "switchyard/switchyard.h"

static void expect_size(const char *text, size_t want)
{
    size_t got = 12345;
    swy_status_t status = swy_parse_size(text, &got);
    CHECK(status == SWY_OK && got == want,
          "\"%s\": status %s, %zu, expected %zu", text,
          swy_status_string(status), got, want);
}

static void expect_refused(const char *text)
{
    size_t got = 12345;
    swy_status_t status = swy_parse_size(text, &got);
    int refused = status == SWY_ERR_INVALID_ARG && got == 12345;
    CHECK(refused, "\"%s\": status %s, %zu, expected SWY_ERR_INVALID_ARG "
          "and the output untouched", text ? text : "(NULL)",
          swy_status_string(status), got);
    if (refused && text != NULL)
        CHECK(strstr(swy_last_error(NULL), text) != NULL,
              "\"%s\": message \"%s\" does not quote it", text,
              swy_last_error(NULL));
}

int main(void)
{
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},    {"b", 0},     {"B", 0},    {"K", 10},
                 {"k", 10},  {"KB", 10},   {"KiB", 10}, {"kib", 10},
                 {"M", 20},  {"m", 20},    {"MB", 20},  {"MiB", 20},
                 {"G", 30},  {"g", 30},    {"GB", 30},  {"GiB", 30}};
    static const size_t numbers[] = {0, 1, 3, 64, 1000, 4096, 65535};
    char text[64];
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++)
        for (size_t n = 0; n < sizeof(numbers) / sizeof(numbers[0]); n++) {
            snprintf(text, sizeof(text), "%zu%s", numbers[n], units[u].suffix);
            expect_size(text, numbers[n] << units[u].shift);
        }
    expect_size(" 4M ", (size_t)4 << 20);
    expect_size("007", 7);
    /* The largest size_t, in bytes and as a whole number of GiB. */
    snprintf(text, sizeof(text), "%zu", (size_t)SIZE_MAX);
    expect_size(text, SIZE_MAX);
    snprintf(text, sizeof(text), "%zuG", (size_t)(SIZE_MAX >> 30));
    expect_size(text, (SIZE_MAX >> 30) << 30);

    static const char *const bad[] = {
        "", " ", "K", "M", "-1", "+1", "1.5M", "1e6", "4Kx", "4 K", "4KiBB",
        "4T", "0x10", "inf", "nan", "12 34", "four"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_refused(bad[i]);
    /* One past size_t, and a multiplier that would overflow it. */
    snprintf(text, sizeof(text), "%zu0", (size_t)SIZE_MAX);
    expect_refused(text);
    snprintf(text, sizeof(text), "%zuG", (size_t)(SIZE_MAX >> 30) + 1);
    expect_refused(text);
    expect_refused(NULL);
    CHECK(swy_parse_size("1K", NULL) == SWY_ERR_INVALID_ARG &&
              strstr(swy_last_error(NULL), "bytes_p") != NULL,
          "a NULL bytes_p is not refused by name");
    if (check_failures != 0)
        return 1;
    printf("PASS: swy_parse_size\n");
    return 0;
}
