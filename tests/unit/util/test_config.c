/* Config table: parsing of sizes/ints/bools, precedence env > file >
 * default, unknown names, and every entry documented. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/config.h"
#include "util/config_table.h"
#include "util/status.h"

static int failures;
#define EXPECT(cond)                                                          \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__,       \
                    #cond);                                                   \
            failures++;                                                       \
        }                                                                     \
    } while (0)

static void test_parse_size(void)
{
    size_t v = 0;
    EXPECT(swy_config_parse_size("4096", &v) == 0 && v == 4096);
    EXPECT(swy_config_parse_size("64K", &v) == 0 && v == 65536);
    EXPECT(swy_config_parse_size("2M", &v) == 0 && v == 2u << 20);
    EXPECT(swy_config_parse_size("2MiB", &v) == 0 && v == 2u << 20);
    EXPECT(swy_config_parse_size("1g", &v) == 0 && v == 1u << 30);
    EXPECT(swy_config_parse_size("", &v) != 0);
    EXPECT(swy_config_parse_size("-1", &v) != 0);
    EXPECT(swy_config_parse_size("12Q", &v) != 0);
    EXPECT(swy_config_parse_size("99999999999999999999", &v) != 0);
    EXPECT(swy_config_parse_size("17179869184G", &v) != 0);
}

static void test_parse_int(void)
{
    int64_t v = 0;
    EXPECT(swy_config_parse_int("300", &v) == 0 && v == 300);
    EXPECT(swy_config_parse_int("-5", &v) == 0 && v == -5);
    EXPECT(swy_config_parse_int("5x", &v) != 0);
    EXPECT(swy_config_parse_int("", &v) != 0);
}

static void test_precedence(void)
{
    char path[] = "/tmp/swy-config-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    const char *text = "# tuned\nSWY_PARTITION_BYTES = 1M\n"
                       "SWY_TIMEOUT_S=7\nSWY_NOT_A_VAR=1\nbroken line\n";
    EXPECT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    setenv("SWY_CONFIG", path, 1);
    setenv("SWY_TIMEOUT_S", "9", 1);
    setenv("SWY_TYPO_VARIABLE", "1", 1); /* warns, ignored */
    swy_config_reload();
    EXPECT(swy_config_get_size("SWY_PARTITION_BYTES", 0) == (1u << 20));
    EXPECT(swy_config_get_int("SWY_TIMEOUT_S", 0) == 9); /* env wins */
    EXPECT(swy_config_get("SWY_TYPO_VARIABLE") == NULL);
    unsetenv("SWY_TIMEOUT_S");
    unsetenv("SWY_CONFIG");
    swy_config_reload();
    EXPECT(swy_config_get_int("SWY_TIMEOUT_S", 0) == 300); /* default */
    EXPECT(swy_config_get_size("SWY_PARTITION_BYTES", 123) == 123); /* auto */
    setenv("SWY_TIMEOUT_S", "soon", 1);
    swy_config_reload();
    EXPECT(swy_config_get_int("SWY_TIMEOUT_S", 42) == 42); /* malformed */
    unsetenv("SWY_TIMEOUT_S");
    setenv("SWY_TOPO_PROBE", "yes", 1);
    swy_config_reload();
    EXPECT(swy_config_get_bool("SWY_TOPO_PROBE", 0) == 1);
    unsetenv("SWY_TOPO_PROBE");
    unlink(path);
}

static void test_table_documented(void)
{
    for (const swy_config_entry_t *e = swy_config_table; e->name; e++) {
        EXPECT(strncmp(e->name, "SWY_", 4) == 0);
        EXPECT(e->help != NULL && strlen(e->help) > 10);
        for (const swy_config_entry_t *f = e + 1; f->name; f++)
            EXPECT(strcmp(e->name, f->name) != 0);
    }
}

static void test_status(void)
{
    EXPECT(strcmp(swy_status_string(SWY_OK), "success") == 0);
    EXPECT(strcmp(swy_status_string((swy_status_t)-99), "unknown status") ==
           0);
    EXPECT(swy_err_set(SWY_ERR_INVALID_ARG, "util", "bad %s", "thing") ==
           SWY_ERR_INVALID_ARG);
    EXPECT(strcmp(swy_err_last(), "bad thing") == 0);
}

int main(void)
{
    test_parse_size();
    test_parse_int();
    test_precedence();
    test_table_documented();
    test_status();
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
