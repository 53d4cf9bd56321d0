/* Config table: parsing of sizes/ints/bools, precedence env > file >
 * default, unknown names, every entry documented and typed, the one rule
 * for values out of range or not numbers (with the warning it logs, once)
 * and for text that is not one of its values, defaults read from the
 * table alone, and the bounded SWY_CONFIG reader. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "coll/coll.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/config_table.h"
#include "util/file.h"
#include "util/status.h"

static char log_path[64];

static void test_parse_size(void)
{
    size_t v = 0;
    CHECK(swy_config_parse_size("4096", &v) == 0 && v == 4096);
    CHECK(swy_config_parse_size("64K", &v) == 0 && v == 65536);
    CHECK(swy_config_parse_size("2M", &v) == 0 && v == 2u << 20);
    CHECK(swy_config_parse_size("2MiB", &v) == 0 && v == 2u << 20);
    CHECK(swy_config_parse_size("1g", &v) == 0 && v == 1u << 30);
    CHECK(swy_config_parse_size("", &v) != 0);
    CHECK(swy_config_parse_size("-1", &v) != 0);
    CHECK(swy_config_parse_size("12Q", &v) != 0);
    CHECK(swy_config_parse_size("99999999999999999999", &v) != 0);
    CHECK(swy_config_parse_size("17179869184G", &v) != 0);
}

static void test_parse_int(void)
{
    int64_t v = 0;
    CHECK(swy_config_parse_int("300", &v) == 0 && v == 300);
    CHECK(swy_config_parse_int("-5", &v) == 0 && v == -5);
    CHECK(swy_config_parse_int("5x", &v) != 0);
    CHECK(swy_config_parse_int("", &v) != 0);
}

static void test_precedence(void)
{
    char path[] = "/tmp/swy-config-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *text = "# tuned\nSWY_PARTITION_BYTES = 1M\n"
                       "SWY_TIMEOUT_S=7\nSWY_NOT_A_VAR=1\nbroken line\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    setenv("SWY_CONFIG", path, 1);
    setenv("SWY_TIMEOUT_S", "9", 1);
    setenv("SWY_TYPO_VARIABLE", "1", 1); /* warns, ignored */
    swy_config_reload();
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 0) == (1u << 20));
    CHECK(swy_config_get_int("SWY_TIMEOUT_S", 0) == 9); /* env wins */
    CHECK(swy_config_get("SWY_TYPO_VARIABLE") == NULL);
    unsetenv("SWY_TIMEOUT_S");
    unsetenv("SWY_CONFIG");
    swy_config_reload();
    CHECK(swy_config_get_int("SWY_TIMEOUT_S", 0) == 300); /* default */
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 123) == 123); /* auto */
    setenv("SWY_TIMEOUT_S", "soon", 1);
    swy_config_reload();
    CHECK(swy_config_get_int("SWY_TIMEOUT_S", 42) == 42); /* malformed */
    unsetenv("SWY_TIMEOUT_S");
    setenv("SWY_TOPO_PROBE", "yes", 1);
    swy_config_reload();
    CHECK(swy_config_get_bool("SWY_TOPO_PROBE", 0) == 1);
    unsetenv("SWY_TOPO_PROBE");
    unlink(path);
}

static void test_table_documented(void)
{
    for (const swy_config_entry_t *e = swy_config_table; e->name; e++) {
        CHECK(strncmp(e->name, "SWY_", 4) == 0);
        CHECK(e->help != NULL && strlen(e->help) > 10);
        for (const swy_config_entry_t *f = e + 1; f->name; f++)
            CHECK(strcmp(e->name, f->name) != 0);
    }
}

/* Lines of the log that contain every one of the given strings. */
static int log_count(const char *a, const char *b)
{
    FILE *file = fopen(log_path, "r");
    if (file == NULL)
        return -1;
    char line[2048];
    int count = 0;
    while (fgets(line, sizeof(line), file) != NULL)
        count += strstr(line, a) != NULL && (b == NULL || strstr(line, b));
    fclose(file);
    return count;
}

static void test_table_typed(void)
{
    for (const swy_config_entry_t *e = swy_config_table; e->name; e++) {
        if (e->type == SWY_CONFIG_UNTYPED)
            fprintf(stderr, "%s has no type\n", e->name);
        CHECK(e->type != SWY_CONFIG_UNTYPED);
        int number = e->type == SWY_CONFIG_INT ||
                     e->type == SWY_CONFIG_DOUBLE ||
                     e->type == SWY_CONFIG_SIZE;
        if (!number || e->default_value == NULL ||
            strcmp(e->default_value, "auto") == 0)
            continue;
        /* A default inside its own range. */
        double value = 0;
        CHECK(swy_config_parse_double(e->default_value, &value) == 0 ||
              e->type == SWY_CONFIG_SIZE);
        if (e->type == SWY_CONFIG_SIZE) {
            size_t size = 0;
            CHECK(swy_config_parse_size(e->default_value, &size) == 0);
            value = (double)size;
        }
        CHECK(e->min <= value && value <= e->max);
    }
    const swy_config_entry_t *timeout = swy_config_entry("SWY_TIMEOUT_S");
    CHECK(timeout != NULL && timeout->type == SWY_CONFIG_DOUBLE);
    CHECK(swy_config_entry("SWY_NOT_A_VAR") == NULL);
}

static void set_value(const char *name, const char *value)
{
    setenv(name, value, 1);
    swy_config_reload();
}

/* One rule for every number: out of range (inf too) -> the nearer bound;
 * not a number (nan too) -> the caller's default; a warning each, once. */
static void test_bad_values(void)
{
    double d;
    CHECK(swy_config_parse_double("inf", &d) == 0 && isinf(d));
    CHECK(swy_config_parse_double("1e400", &d) == 0 && isinf(d));
    CHECK(swy_config_parse_double("nan", &d) != 0);
    CHECK(swy_config_parse_double("2 s", &d) != 0);
    CHECK(swy_config_parse_double(" 2.5 ", &d) != 0 || d == 2.5);

    set_value("SWY_TIMEOUT_S", "inf");
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 1e7);
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 1e7);
    CHECK(log_count("SWY_TIMEOUT_S='inf' is outside its range 0.1..1e+07; "
                    "using 1e+07", NULL) == 1); /* once */
    set_value("SWY_TIMEOUT_S", "1e400");
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 1e7);
    set_value("SWY_TIMEOUT_S", "0");
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 0.1);
    CHECK(log_count("SWY_TIMEOUT_S='0' is outside its range", "using 0.1") ==
          1);
    set_value("SWY_TIMEOUT_S", "-1");
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 0.1);
    set_value("SWY_TIMEOUT_S", "nan");
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 300);
    CHECK(log_count("SWY_TIMEOUT_S='nan' is not a number; using 300",
                    NULL) == 1);
    set_value("SWY_TIMEOUT_S", "12.5");
    CHECK(swy_config_get_double("SWY_TIMEOUT_S", 300) == 12.5);
    unsetenv("SWY_TIMEOUT_S");

    set_value("SWY_HEARTBEAT_S", "1e308");
    CHECK(swy_config_get_double("SWY_HEARTBEAT_S", 2) == 3600);
    CHECK(log_count("SWY_HEARTBEAT_S='1e308'", "using 3600") == 1);
    unsetenv("SWY_HEARTBEAT_S");

    set_value("SWY_PARTITION_BYTES", "0");
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 65536) == 4096);
    CHECK(log_count("SWY_PARTITION_BYTES='0' is outside its range",
                    "using 4096") == 1);
    set_value("SWY_PARTITION_BYTES", "-4");
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 65536) == 4096);
    set_value("SWY_PARTITION_BYTES", "99999999999999999999");
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 65536) == (1u << 30));
    set_value("SWY_PARTITION_BYTES", "lots");
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 65536) == 65536);
    set_value("SWY_PARTITION_BYTES", "auto");
    CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 65536) == 65536);
    unsetenv("SWY_PARTITION_BYTES");

    set_value("SWY_SPIN_US", "-5");
    CHECK(swy_config_get_int("SWY_SPIN_US", 200) == 0);
    set_value("SWY_SPIN_US", "99999999999");
    CHECK(swy_config_get_int("SWY_SPIN_US", 200) == 1000000);
    unsetenv("SWY_SPIN_US");
    swy_config_reload();
}

/* The values of a text variable, item i ("" past the last). */
static void value_item(const char *values, int i, char *buf, size_t len)
{
    for (; i > 0 && *values; i--)
        values += strcspn(values, ",") + (values[strcspn(values, ",")] != 0);
    snprintf(buf, len, "%.*s", (int)strcspn(values, ","), values);
}

/* Text variables that name a choice list their values in the table, the
 * default among them, and the readers' names (algorithms, pull modes,
 * progress) in the table's order, so that a value's index is its enum. */
static void test_table_values(void)
{
    static const char *const listed[] = {
        "SWY_LOG_LEVEL", "SWY_LOG_SUBSYS", "SWY_TRANSPORT",
        "SWY_TRANSPORT_PLUGINS", "SWY_ALLREDUCE_ALGO", "SWY_ALLTOALLV_ALGO",
        "SWY_SHM_PULL", "SWY_POLICY", "SWY_PROGRESS"};
    for (size_t i = 0; i < sizeof(listed) / sizeof(listed[0]); i++) {
        const swy_config_entry_t *e = swy_config_entry(listed[i]);
        CHECK(e != NULL && e->values != NULL);
        if (e == NULL || e->values == NULL)
            fprintf(stderr, "%s lists no values\n", listed[i]);
    }
    for (const swy_config_entry_t *e = swy_config_table; e->name; e++) {
        if (e->values == NULL)
            continue;
        CHECK(e->type == SWY_CONFIG_TEXT || e->type == SWY_CONFIG_LIST);
        CHECK(swy_config_text_ok(e->name, e->default_value));
    }
    char item[32];
    const swy_config_entry_t *ar = swy_config_entry("SWY_ALLREDUCE_ALGO");
    for (int a = 0; ar != NULL && a <= SWY_COLL_AR_NALGOS; a++) {
        value_item(ar->values, a, item, sizeof(item));
        CHECK(strcmp(item, a < SWY_COLL_AR_NALGOS
                                ? swy_coll_allreduce_algo_name(
                                      (swy_coll_ar_algo_t)a)
                                : "") == 0);
    }
    const swy_config_entry_t *a2a = swy_config_entry("SWY_ALLTOALLV_ALGO");
    for (int a = 0; a2a != NULL && a <= SWY_COLL_A2A_NALGOS; a++) {
        value_item(a2a->values, a, item, sizeof(item));
        CHECK(strcmp(item, a < SWY_COLL_A2A_NALGOS
                                ? swy_coll_alltoallv_algo_name(
                                      (swy_coll_a2a_algo_t)a)
                                : "") == 0);
    }
    set_value("SWY_SHM_PULL", "never");
    CHECK(swy_config_get_choice("SWY_SHM_PULL") == SWY_COLL_PULL_NEVER);
    set_value("SWY_SHM_PULL", "ALWAYS"); /* any case */
    CHECK(swy_config_get_choice("SWY_SHM_PULL") == SWY_COLL_PULL_ALWAYS);
    unsetenv("SWY_SHM_PULL");
    swy_config_reload();
    CHECK(swy_config_get_choice("SWY_SHM_PULL") == SWY_COLL_PULL_AUTO);
    CHECK(swy_config_get_choice("SWY_PROGRESS") == 0); /* thread */
}

/* Text outside its values: the table's default and one warning naming
 * the variable, the value and the default, as for numbers. */
static void test_bad_text(void)
{
    set_value("SWY_POLICY", "no/such");
    CHECK(strcmp(swy_config_get_text("SWY_POLICY"), "lina") == 0);
    CHECK(strcmp(swy_config_get_text("SWY_POLICY"), "lina") == 0);
    CHECK(log_count("SWY_POLICY='no/such' is not fifo, fair, lina, credit "
                     "or a plugin name", "using lina") == 1); /* once */
    set_value("SWY_POLICY", "aging"); /* a plugin's name */
    CHECK(strcmp(swy_config_get_text("SWY_POLICY"), "aging") == 0);
    unsetenv("SWY_POLICY");

    set_value("SWY_ALLTOALLV_ALGO", "rong");
    CHECK(strcmp(swy_config_get_text("SWY_ALLTOALLV_ALGO"), "auto") == 0);
    CHECK(swy_coll_alltoallv_setting() == SWY_COLL_A2A_AUTO);
    CHECK(log_count("SWY_ALLTOALLV_ALGO='rong' is not auto, pairwise, shm or "
                     "hier", "using auto") == 1);
    set_value("SWY_ALLTOALLV_ALGO", "shm");
    CHECK(swy_coll_alltoallv_setting() == SWY_COLL_A2A_SHM);
    unsetenv("SWY_ALLTOALLV_ALGO");
    set_value("SWY_ALLREDUCE_ALGO", "fastest");
    CHECK(swy_coll_allreduce_setting() == SWY_COLL_AR_AUTO);
    CHECK(log_count("SWY_ALLREDUCE_ALGO='fastest' is not", "using auto") ==
          1);
    unsetenv("SWY_ALLREDUCE_ALGO");

    set_value("SWY_PROGRESS", "sometimes");
    CHECK(swy_config_get_choice("SWY_PROGRESS") == 0);
    CHECK(log_count("SWY_PROGRESS='sometimes' is not thread or caller",
                     "using thread") == 1);
    unsetenv("SWY_PROGRESS");

    /* Lists: every item, split as the readers split them. */
    set_value("SWY_TRANSPORT_PLUGINS", "nosuch, ucx");
    CHECK(strcmp(swy_config_get_text("SWY_TRANSPORT_PLUGINS"),
                  "nosuch, ucx") == 0);
    set_value("SWY_TRANSPORT_PLUGINS", "");
    CHECK(strcmp(swy_config_get_text("SWY_TRANSPORT_PLUGINS"), "") == 0);
    set_value("SWY_TRANSPORT_PLUGINS", "ucx,../../tmp/x");
    CHECK(strcmp(swy_config_get_text("SWY_TRANSPORT_PLUGINS"),
                  "ucx,nccl") == 0);
    CHECK(log_count("SWY_TRANSPORT_PLUGINS='ucx,../../tmp/x' is not a list "
                     "of", "using ucx,nccl") == 1);
    unsetenv("SWY_TRANSPORT_PLUGINS");
    set_value("SWY_LOG_SUBSYS", "^coll,sched");
    CHECK(swy_config_text_ok("SWY_LOG_SUBSYS",
                              swy_config_get("SWY_LOG_SUBSYS")));
    CHECK(!swy_config_text_ok("SWY_LOG_SUBSYS", "coll,shed"));
    CHECK(!swy_config_text_ok("SWY_LOG_LEVEL", "loud"));
    CHECK(swy_config_text_ok("SWY_LOG_LEVEL", "Debug"));
    CHECK(swy_config_text_ok("SWY_ROOT", "anything:1")); /* free text */
    unsetenv("SWY_LOG_SUBSYS");
    swy_config_reload();

    /* swy-info -c prints the values beside each such variable, and the
     * value used beside one that is not among them. */
    static char text[1 << 16];
    set_value("SWY_POLICY", "no/such");
    CHECK(swy_describe("config", text, sizeof(text)) == SWY_OK);
    CHECK(strstr(text, "list of ucx,nccl,self,<plugin>") != NULL);
    CHECK(strstr(text, "of fifo,fair,lina,credit,<plugin>") != NULL);
    CHECK(strstr(text, "no/such (not one of them: lina used)") != NULL);
    unsetenv("SWY_POLICY");
    swy_config_reload();
}

/* Defaults written once: the getters without a fallback give the table's
 * default, parsed by the variable's type, and the same rule. */
static void test_table_defaults(void)
{
    for (const swy_config_entry_t *e = swy_config_table; e->name; e++) {
        const char *def = e->default_value;
        if (def == NULL || strcmp(def, "auto") == 0 ||
            getenv(e->name) != NULL)
            continue;
        int64_t i;
        double d;
        size_t z;
        if (e->type == SWY_CONFIG_INT)
            CHECK(swy_config_parse_int(def, &i) == 0 &&
                  swy_config_int(e->name) == i);
        if (e->type == SWY_CONFIG_DOUBLE)
            CHECK(swy_config_parse_double(def, &d) == 0 &&
                  swy_config_double(e->name) == d);
        if (e->type == SWY_CONFIG_SIZE)
            CHECK(swy_config_parse_size(def, &z) == 0 &&
                  swy_config_size(e->name) == z);
        if (e->type == SWY_CONFIG_BOOL)
            CHECK(swy_config_bool(e->name) == (strcmp(def, "1") == 0));
    }
    set_value("SWY_SPIN_US", "-5");
    CHECK(swy_config_int("SWY_SPIN_US") == 0);
    set_value("SWY_WINDOW_BYTES", "lots");
    size_t window = 0;
    swy_config_parse_size(swy_config_entry("SWY_WINDOW_BYTES")->default_value,
                          &window);
    CHECK(swy_config_size("SWY_WINDOW_BYTES") == window);
    unsetenv("SWY_SPIN_US");
    unsetenv("SWY_WINDOW_BYTES");
    swy_config_reload();
}

/* SWY_CONFIG is read bounded: special files are refused (not read until
 * memory runs out, not blocked on), as are huge files; a long line is
 * skipped with a warning instead of being cut into pieces. */
static void test_config_file_bounds(void)
{
    set_value("SWY_CONFIG", "/dev/zero");
    CHECK(swy_config_get("SWY_TIMEOUT_S") != NULL);
    CHECK(log_count("SWY_CONFIG ignored", "is a character device") == 1);

    char fifo[] = "/tmp/swy-config-fifo-XXXXXX";
    int fd = mkstemp(fifo);
    CHECK(fd >= 0);
    close(fd);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    set_value("SWY_CONFIG", fifo);
    CHECK(log_count("SWY_CONFIG ignored", "is a FIFO") == 1);
    unlink(fifo);

    char path[] = "/tmp/swy-config-long-XXXXXX";
    fd = mkstemp(path);
    CHECK(fd >= 0);
    char line[6000];
    memset(line, 'x', sizeof(line));
    memcpy(line, "SWY_TIMEOUT_S=7", 15); /* then 'x's: not a number */
    line[sizeof(line) - 1] = '\n';
    CHECK(write(fd, line, sizeof(line)) == (ssize_t)sizeof(line));
    CHECK(write(fd, "SWY_SPIN_US=11\n", 15) == 15);
    close(fd);
    set_value("SWY_CONFIG", path);
    CHECK(swy_config_get_int("SWY_SPIN_US", 0) == 11);
    CHECK(swy_config_get("SWY_TIMEOUT_S") != NULL &&
          strcmp(swy_config_get("SWY_TIMEOUT_S"), "300") == 0);
    CHECK(log_count(":1: line of 5999 bytes (over 4096) ignored", NULL) ==
          1);

    /* Over the 1 MiB limit. */
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (2 << 20)) == 0);
    close(fd);
    set_value("SWY_CONFIG", path);
    CHECK(log_count("SWY_CONFIG ignored", "over the 1048576-byte limit") ==
          1);
    unlink(path);
    unsetenv("SWY_CONFIG");
    swy_config_reload();

    /* The reader itself: a NUL byte is not text; a missing file is
     * named. */
    char *text = NULL;
    size_t len = 0;
    CHECK(swy_file_read_text("/nonexistent/x", "test file", "util", 100,
                             &text, &len) == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "cannot open test file '/nonexistent/x'") !=
          NULL);
    char text_path[] = "/tmp/swy-config-text-XXXXXX";
    fd = mkstemp(text_path);
    CHECK(fd >= 0);
    CHECK(write(fd, "a\0b", 3) == 3);
    close(fd);
    CHECK(swy_file_read_text(text_path, "test file", "util", 100, &text,
                             &len) == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "holds a NUL byte") != NULL);
    fd = open(text_path, O_WRONLY | O_TRUNC);
    CHECK(write(fd, "one\r\ntwo", 8) == 8);
    close(fd);
    CHECK(swy_file_read_text(text_path, "test file", "util", 8, &text, &len) ==
          SWY_OK);
    CHECK(len == 8);
    char *cursor = text;
    CHECK(strcmp(swy_file_next_line(&cursor), "one") == 0);
    CHECK(strcmp(swy_file_next_line(&cursor), "two") == 0);
    CHECK(swy_file_next_line(&cursor) == NULL);
    swy_free(text);
    CHECK(swy_file_read_text(text_path, "test file", "util", 7, &text, &len) ==
          SWY_ERR_INVALID_ARG);
    unlink(text_path);
}

static void test_status(void)
{
    CHECK(strcmp(swy_status_string(SWY_OK), "success") == 0);
    CHECK(strcmp(swy_status_string((swy_status_t)-99), "unknown status") ==
          0);
    CHECK(swy_err_set(SWY_ERR_INVALID_ARG, "util", "bad %s", "thing") ==
          SWY_ERR_INVALID_ARG);
    CHECK(strcmp(swy_err_last(), "bad thing") == 0);
}

int main(void)
{
    /* Before anything reads the configuration: the warnings are read
     * back from this file. */
    snprintf(log_path, sizeof(log_path), "/tmp/swy-config-log-%d",
             (int)getpid());
    setenv("SWY_LOG_FILE", log_path, 1);
    test_parse_size();
    test_parse_int();
    test_precedence();
    test_table_documented();
    test_table_typed();
    test_bad_values();
    test_table_values();
    test_bad_text();
    test_table_defaults();
    test_config_file_bounds();
    test_status();
    unlink(log_path);
    if (check_failures)
        fprintf(stderr, "%d failure(s)\n", check_failures);
    return check_failures ? 1 : 0;
}
