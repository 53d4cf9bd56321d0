/* swy-tune's pieces: the JSON line parser, the search space, the
 * objective on fabricated candidate sets, the config file (read back by
 * lib/util/config.c itself), the CSV and the SVG. One case per run:
 * test_tune CASE. */
#include "check.h"
#include "tune.h"

#include "tool_find.h"

#include "util/config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GOOD_LINE                                                            \
    "{\"bench\":\"interference\",\"impl\":\"switchyard\",\"policy\":"        \
    "\"lina\",\"sweep\":\"partition\",\"partition_bytes\":262144,"           \
    "\"credit_bytes\":262144,\"a2a_bytes\":2097152,\"allreduce_bytes\":"     \
    "16777216,\"a2a_alone_ms\":18.1,\"a2a_loaded_ms\":19.9,"                 \
    "\"a2a_loaded_p95_ms\":21.0,\"slowdown\":1.10,\"allreduce_MBps\":95.2,"  \
    "\"allreduce_alone_MBps\":101.0,\"backlog_overlap\":1.000,\"ranks\":4,"  \
    "\"nodes\":2,\"check\":\"ok\"}"

static void case_json(void)
{
    swyt_json_object_t obj;
    char why[128];

    CHECK(swyt_json_parse(GOOD_LINE, &obj, why, sizeof(why)) == 0);
    CHECK(obj.nfields == 18);
    const swyt_json_field_t *f = swyt_json_find(&obj, "policy");
    CHECK(f != NULL && f->type == SWYT_JSON_STRING &&
          strcmp(f->text, "lina") == 0);
    f = swyt_json_find(&obj, "a2a_loaded_ms");
    CHECK(f != NULL && f->type == SWYT_JSON_NUMBER && f->number == 19.9);
    CHECK(swyt_json_find(&obj, "missing") == NULL);

    /* Numbers in every JSON form, literals, white space, escapes. */
    CHECK(swyt_json_parse(" { \"a\" : -0.5e+2 , \"b\":0,\"c\":true,"
                          "\"d\":false,\"e\":null,\"f\":\"x\\\"y\\\\z\\/"
                          "\\u00e9\\n\"}\r\n", &obj, why, sizeof(why)) == 0);
    CHECK(obj.nfields == 6);
    CHECK(swyt_json_find(&obj, "a")->number == -50.0);
    CHECK(swyt_json_find(&obj, "b")->number == 0.0);
    CHECK(swyt_json_find(&obj, "c")->type == SWYT_JSON_BOOL &&
          swyt_json_find(&obj, "c")->number == 1);
    CHECK(swyt_json_find(&obj, "d")->number == 0);
    CHECK(swyt_json_find(&obj, "e")->type == SWYT_JSON_NULL);
    CHECK(strcmp(swyt_json_find(&obj, "f")->text, "x\"y\\z/\xc3\xa9\n") == 0);
    CHECK(swyt_json_parse("{}", &obj, why, sizeof(why)) == 0 &&
          obj.nfields == 0);

    /* Launcher prefixes. */
    CHECK(strcmp(swyt_line_strip_prefix("[0] {\"a\":1}"), "{\"a\":1}") == 0);
    CHECK(strcmp(swyt_line_strip_prefix("[12] x"), "x") == 0);
    CHECK(strcmp(swyt_line_strip_prefix("{\"a\":1}"), "{\"a\":1}") == 0);
    CHECK(strcmp(swyt_line_strip_prefix("[x] y"), "[x] y") == 0);
    CHECK(strcmp(swyt_line_strip_prefix("[3]y"), "[3]y") == 0);
    CHECK(strcmp(swyt_line_strip_prefix("[] y"), "[] y") == 0);

    /* Malformed: each must be refused with a reason. */
    static const char *const bad[] = {
        "",
        "{",
        "{\"a\":1",
        "{\"a\":1,}",
        "{\"a\":nan}",
        "{\"a\":NaN}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1e}",
        "{\"a\":+1}",
        "{\"a\":0x10}",
        "{\"a\":{}}",
        "{\"a\":[1]}",
        "{\"a\":1} trailing",
        "{\"a\":1}{\"b\":2}",
        "{\"a\":\"unterminated}",
        "{a:1}",
        "{\"a\" 1}",
        "{\"a\":1 \"b\":2}",
        "{\"a\":1,\"a\":2}",
        "{\"a\":\"tab\there\"}",
        "{\"a\":\"\\q\"}",
        "{\"a\":\"\\u12g4\"}",
        "{\"a\":tru}",
        "[1,2]",
        "{\"bench\":\"interference\",\"policy\":\"lina\",\"partition_bytes"
        "\":262144,\"a2a_loa",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        int rc = swyt_json_parse(bad[i], &obj, why, sizeof(why));
        if (rc == 0)
            fprintf(stderr, "accepted malformed line: %s\n", bad[i]);
        CHECK(rc == -1 && why[0] != '\0');
    }
}

static void case_lines(void)
{
    swyt_candidate_list_t list = {0};

    /* A result, the same result from another rank, a rank-prefixed one. */
    CHECK(swyt_run_line_take(GOOD_LINE, &list) == 1);
    CHECK(swyt_run_line_take("[1] " GOOD_LINE, &list) == 0);
    CHECK(swyt_run_line_take(
              "[0] {\"bench\":\"interference\",\"policy\":\"fair\","
              "\"partition_bytes\":65536,\"credit_bytes\":\"auto\","
              "\"a2a_loaded_ms\":30.5,\"allreduce_MBps\":99.5}",
              &list) == 1);
    CHECK(list.count == 2);
    const swyt_candidate_t *c = &list.items[0];
    CHECK(strcmp(c->policy, "lina") == 0 && c->partition_bytes == 262144 &&
          c->credit_bytes == 262144 && c->a2a_bytes == 2097152 &&
          c->allreduce_bytes == 16777216 && c->a2a_alone_ms == 18.1 &&
          c->a2a_loaded_ms == 19.9 && c->a2a_loaded_p95_ms == 21.0 &&
          c->slowdown == 1.10 && c->allreduce_MBps == 95.2 &&
          c->allreduce_alone_MBps == 101.0 && c->ranks == 4 &&
          c->nodes == 2 && c->check_ok && c->backlog_overlap == 1.0 &&
          strcmp(c->sweep, "partition") == 0);
    c = &list.items[1];
    /* Optional fields absent: NAN, slowdown unknown; "auto" credit is 0. */
    CHECK(c->credit_bytes == 0 && isnan(c->a2a_alone_ms) &&
          isnan(c->slowdown) && isnan(c->a2a_loaded_p95_ms) && c->check_ok);

    /* Not results: table lines, headers, other benchmarks. */
    CHECK(swyt_run_line_take("# bench: interference", &list) == 0);
    CHECK(swyt_run_line_take("[0] lina  256K ...", &list) == 0);
    CHECK(swyt_run_line_take("{\"bench\":\"coll\",\"op\":\"allreduce\"}",
                             &list) == 0);
    /* Malformed JSON, and results missing what the objective needs. */
    CHECK(swyt_run_line_take("[0] {\"bench\":\"interference\",", &list) ==
          -1);
    CHECK(swyt_run_line_take("{\"bench\":\"interference\",\"policy\":"
                             "\"lina\",\"partition_bytes\":65536,"
                             "\"credit_bytes\":0,\"allreduce_MBps\":9}",
                             &list) == -1);
    CHECK(swyt_run_line_take("{\"bench\":\"interference\",\"policy\":"
                             "\"lina\",\"partition_bytes\":65536,"
                             "\"credit_bytes\":0,\"a2a_loaded_ms\":-1,"
                             "\"allreduce_MBps\":9}", &list) == -1);
    CHECK(swyt_run_line_take("{\"bench\":\"interference\",\"policy\":7,"
                             "\"partition_bytes\":65536,\"credit_bytes\":0,"
                             "\"a2a_loaded_ms\":1,\"allreduce_MBps\":9}",
                             &list) == -1);
    CHECK(swyt_run_line_take("{\"bench\":\"interference\",\"policy\":"
                             "\"lina\",\"partition_bytes\":0.5,"
                             "\"credit_bytes\":0,\"a2a_loaded_ms\":1,"
                             "\"allreduce_MBps\":9}", &list) == -1);
    /* A wrong check is kept (and shown) but marked. */
    CHECK(swyt_run_line_take("{\"bench\":\"interference\",\"policy\":"
                             "\"credit\",\"partition_bytes\":65536,"
                             "\"credit_bytes\":131072,\"a2a_loaded_ms\":1,"
                             "\"allreduce_MBps\":9,\"check\":\"WRONG\","
                             "\"backlog_overlap\":0.5}", &list) == 1);
    CHECK(list.count == 3 && !list.items[2].check_ok &&
          list.items[2].backlog_overlap == 0.5);
    swyt_candidate_list_clear(&list);
}

static void case_space(void)
{
    swyt_space_t space;
    char why[128], buf[256];

    swyt_size_format(65536, buf, sizeof(buf));
    CHECK(strcmp(buf, "64K") == 0);
    swyt_size_format(3u << 20, buf, sizeof(buf));
    CHECK(strcmp(buf, "3M") == 0);
    swyt_size_format(1000, buf, sizeof(buf));
    CHECK(strcmp(buf, "1000") == 0);
    swyt_size_format(245760, buf, sizeof(buf));
    CHECK(strcmp(buf, "240K") == 0);

    CHECK(swyt_space_parse("fifo,fair,lina,credit",
                           "64K,128K,256K,512K,1M,2M", "auto,2x,4x", &space,
                           why, sizeof(why)) == 0);
    CHECK(space.npolicies == 4 && space.npartitions == 6 &&
          space.ncredits == 3);
    CHECK(swyt_space_size(&space) == 4 * 6 * 3);
    CHECK(swyt_space_has_relative_credit(&space));
    swyt_space_destroy(&space);

    /* Relative credits resolved per partition; coinciding ones once. */
    CHECK(swyt_space_parse("lina,lina", "64K,128K,64K", "auto,2x,256K",
                           &space, why, sizeof(why)) == 0);
    CHECK(space.npolicies == 1 && space.npartitions == 2);
    CHECK(swyt_credits_resolve(&space, space.partitions, 2, buf,
                               sizeof(buf)) == 0);
    CHECK(strcmp(buf, "auto,128K,256K") == 0);
    CHECK(swyt_credits_resolve(&space, &space.partitions[1], 1, buf,
                               sizeof(buf)) == 0);
    CHECK(strcmp(buf, "auto,256K") == 0);
    /* 64K: auto, 128K, 256K; 128K: auto, 256K (2x = 256K given). */
    CHECK(swyt_space_size(&space) == 3 + 2);
    CHECK(swyt_credits_resolve(&space, space.partitions, 2, buf, 8) == -1);
    swyt_space_destroy(&space);

    static const char *const bad[][3] = {
        {"", "64K", "auto"},       {"lina,", "64K", "auto"},
        {"li na", "64K", "auto"},  {"lina", "0", "auto"},
        {"lina", "64Q", "auto"},   {"lina", "", "auto"},
        {"lina", "64K", "0x"},     {"lina", "64K", "x"},
        {"lina", "64K", "-2x"},    {"lina", "64K", "auto,,2x"},
        {"lina", "64K", "1.5x"},   {"lina", "64K", "0"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        int rc = swyt_space_parse(bad[i][0], bad[i][1], bad[i][2], &space,
                                  why, sizeof(why));
        if (rc == 0)
            fprintf(stderr, "accepted bad space %s / %s / %s\n", bad[i][0],
                    bad[i][1], bad[i][2]);
        CHECK(rc == -1 && why[0] != '\0');
    }
}

static void add(swyt_candidate_list_t *list, const char *policy,
                uint64_t partition, uint64_t credit, double loaded_ms,
                double ar_MBps)
{
    swyt_candidate_t c;

    memset(&c, 0, sizeof(c));
    snprintf(c.policy, sizeof(c.policy), "%s", policy);
    c.partition_bytes = partition;
    c.credit_bytes = credit;
    c.a2a_loaded_ms = loaded_ms;
    c.a2a_alone_ms = 8.0;
    c.a2a_loaded_p95_ms = loaded_ms * 1.1;
    c.slowdown = loaded_ms / 8.0;
    c.allreduce_MBps = ar_MBps;
    c.allreduce_alone_MBps = 110.0;
    c.check_ok = 1;
    c.backlog_overlap = 1.0;
    c.ranks = 4;
    c.nodes = 2;
    CHECK(swyt_candidate_list_add(list, &c) == 0);
}

static void case_select(void)
{
    swyt_candidate_list_t list = {0};
    size_t w = 99;

    /* The constraint, against fair at the same partition. */
    add(&list, "fair", 65536, 65536, 20.0, 100.0);  /* 0 */
    add(&list, "lina", 65536, 65536, 10.0, 85.0);   /* 1: < 90 */
    add(&list, "lina", 65536, 131072, 12.0, 95.0);  /* 2 */
    add(&list, "fair", 262144, 262144, 22.0, 50.0); /* 3 */
    add(&list, "lina", 262144, 262144, 13.0, 44.0); /* 4: < 45 */
    add(&list, "fifo", 262144, 262144, 30.0, 60.0); /* 5: above fair */
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0);
    CHECK(w == 2);
    CHECK(list.items[1].reference_MBps == 100.0 && !list.items[1].feasible &&
          strcmp(list.items[1].verdict, "ar<floor") == 0);
    CHECK(list.items[4].reference_MBps == 50.0 && !list.items[4].feasible);
    CHECK(list.items[5].feasible && list.items[3].feasible &&
          list.items[0].feasible && list.items[2].feasible);
    CHECK(list.items[2].score == 12.0);
    /* Exactly at the floor is feasible; the faster one now wins. */
    list.items[4].allreduce_MBps = 45.0;
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0 && w == 2);
    list.items[4].a2a_loaded_ms = 11.0;
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0 && w == 4);
    swyt_candidate_list_clear(&list);

    /* Ties within 2% go to the higher allreduce throughput. */
    add(&list, "fair", 65536, 65536, 20.0, 100.0);
    add(&list, "lina", 65536, 65536, 10.0, 91.0);
    add(&list, "credit", 65536, 131072, 10.15, 99.0); /* +1.5% */
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0 && w == 2);
    list.items[2].a2a_loaded_ms = 10.3; /* +3%: no longer a tie */
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0 && w == 1);
    /* A faster candidate below the floor changes nothing. */
    add(&list, "lina", 65536, 262144, 5.0, 89.9);
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0 && w == 1);
    swyt_candidate_list_clear(&list);

    /* Without fair, the reference is the best at the partition. */
    add(&list, "lina", 65536, 65536, 10.0, 80.0);
    add(&list, "credit", 65536, 65536, 12.0, 100.0);
    add(&list, "lina", 131072, 131072, 11.0, 50.0);
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0);
    CHECK(list.items[0].reference_MBps == 100.0 && !list.items[0].feasible);
    CHECK(list.items[2].reference_MBps == 50.0 && list.items[2].feasible);
    CHECK(w == 2);
    swyt_candidate_list_clear(&list);

    /* Wrong results and missing load are never chosen nor a reference. */
    add(&list, "fair", 65536, 65536, 20.0, 100.0);
    add(&list, "lina", 65536, 65536, 10.0, 95.0);
    list.items[0].check_ok = 0;
    list.items[1].backlog_overlap = 0.8;
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == -1);
    CHECK(strcmp(list.items[0].verdict, "WRONG") == 0);
    CHECK(strcmp(list.items[1].verdict, "no-load") == 0);
    CHECK(list.items[1].reference_MBps == 95.0);
    swyt_candidate_list_clear(&list);
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == -1);

    /* Balanced: loaded / best alone + best allreduce alone / allreduce. */
    add(&list, "fair", 65536, 65536, 16.0, 110.0);
    add(&list, "lina", 65536, 65536, 9.0, 99.0);
    add(&list, "lina", 65536, 131072, 8.8, 100.0);
    list.items[1].a2a_alone_ms = 7.5; /* the best alone */
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_BALANCED, &w) == 0);
    CHECK(fabs(list.items[0].score - (16.0 / 7.5 + 1.0)) < 1e-12);
    CHECK(fabs(list.items[1].score - (9.0 / 7.5 + 110.0 / 99.0)) < 1e-12);
    CHECK(w == 2);
    CHECK(strstr(swyt_objective_describe(SWYT_OBJECTIVE_A2A), "90%") &&
          strstr(swyt_objective_describe(SWYT_OBJECTIVE_BALANCED), "2%"));
    swyt_candidate_list_clear(&list);
}

static char *file_read(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text;
    long len;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, (size_t)len + 1);
    if (text != NULL && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

static void conf_check(const swyt_candidate_t *winner, const char *command,
                       const char *policy, const char *partition,
                       const char *credit)
{
    char path[] = "/tmp/swy-tune-conf-XXXXXX";
    int fd = mkstemp(path);

    CHECK(fd >= 0);
    close(fd);
    CHECK(swyt_conf_write(path, winner, command, "grid search over 2",
                          SWYT_OBJECTIVE_A2A) == 0);
    char *text = file_read(path);
    CHECK(text != NULL);
    if (text == NULL)
        return;
    /* Every line fits config.c's 1024-byte buffer; only three settings. */
    int settings = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        CHECK(strlen(line) < 1000);
        if (line[0] == '#')
            continue;
        settings++;
        CHECK(strncmp(line, "SWY_POLICY=", 11) == 0 ||
              strncmp(line, "SWY_PARTITION_BYTES=", 20) == 0 ||
              strncmp(line, "SWY_CREDIT_BYTES=", 17) == 0);
    }
    CHECK(settings == 3);
    free(text);

    /* Loaded by the library's own config module. */
    unsetenv("SWY_POLICY");
    unsetenv("SWY_PARTITION_BYTES");
    unsetenv("SWY_CREDIT_BYTES");
    setenv("SWY_CONFIG", path, 1);
    swy_config_reload();
    CHECK(strcmp(swy_config_get("SWY_POLICY"), policy) == 0);
    CHECK(strcmp(swy_config_get("SWY_PARTITION_BYTES"), partition) == 0);
    CHECK(strcmp(swy_config_get("SWY_CREDIT_BYTES"), credit) == 0);
    if (strcmp(partition, "auto") != 0)
        CHECK(swy_config_get_size("SWY_PARTITION_BYTES", 1) ==
              strtoull(partition, NULL, 10));
    unsetenv("SWY_CONFIG");
    swy_config_reload();
    unlink(path);
}

static void case_conf(void)
{
    swyt_candidate_t w;
    char long_command[4000];

    memset(&w, 0, sizeof(w));
    snprintf(w.policy, sizeof(w.policy), "credit");
    w.partition_bytes = 262144;
    w.credit_bytes = 524288;
    w.a2a_alone_ms = 18.1;
    w.a2a_loaded_ms = 19.9;
    w.a2a_loaded_p95_ms = NAN;
    w.slowdown = 1.1;
    w.allreduce_MBps = 95.2;
    w.allreduce_alone_MBps = 101.0;
    w.reference_MBps = 99.0;
    w.ranks = 4;
    w.nodes = 2;
    conf_check(&w, "swy-tune --out x -- swy-run -n 2", "credit", "262144",
               "524288");

    /* A command far longer than a config line, with a word longer too
     * and a line break inside an argument. */
    size_t n = 0;
    n += (size_t)snprintf(long_command, sizeof(long_command),
                          "swy-tune --bench-args 'a\nSWY_POLICY=fifo' -- ");
    while (n < 1500)
        n += (size_t)snprintf(long_command + n, sizeof(long_command) - n,
                              "--flag=value%zu ", n);
    memset(long_command + n, 'w', 1200);
    long_command[n + 1200] = '\0';
    snprintf(w.policy, sizeof(w.policy), "lina");
    w.credit_bytes = 0;
    conf_check(&w, long_command, "lina", "262144", "auto");
}

static size_t count(const char *text, const char *what)
{
    size_t n = 0;

    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

static void case_report(void)
{
    swyt_candidate_list_t list = {0};
    static const char *const policies[] = {"fair", "lina", "a&b"};
    char svg[] = "/tmp/swy-tune-svg-XXXXXX", csv[] = "/tmp/swy-tune-csv-XXXXXX";
    size_t w;
    int fd;

    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 3; k++)
            for (int c = 1; c <= 2; c++)
                add(&list, policies[p], (uint64_t)65536 << (2 * k),
                    (uint64_t)c * (65536u << (2 * k)),
                    10.0 + p + k + c * 0.5, 100.0 - p - c);
    CHECK(swyt_select(&list, SWYT_OBJECTIVE_A2A, &w) == 0);
    CHECK((fd = mkstemp(svg)) >= 0);
    close(fd);
    CHECK((fd = mkstemp(csv)) >= 0);
    close(fd);

    CHECK(swyt_report_svg_write(svg, &list, (long)w, "title <&>") == 0);
    char *text = file_read(svg);
    CHECK(text != NULL);
    if (text != NULL) {
        size_t len = strlen(text);

        CHECK(strncmp(text, "<svg", 4) == 0);
        CHECK(len > 7 && strcmp(text + len - 7, "</svg>\n") == 0);
        /* One line per policy in each of the two panels. */
        CHECK(count(text, "<polyline class=\"policy\"") == 6);
        CHECK(count(text, "data-policy=\"fair\"") == 2);
        CHECK(count(text, "data-policy=\"lina\"") == 2);
        CHECK(count(text, "data-policy=\"a&amp;b\"") == 2);
        CHECK(count(text, "a&b") == 0 && count(text, "<&>") == 0);
        CHECK(count(text, "<text") == count(text, "</text>"));
        CHECK(count(text, "<svg") == 1 && count(text, "</svg>") == 1);
        CHECK(count(text, ">chosen<") == 1);
        CHECK(count(text, "partition size") == 1 &&
              count(text, "a2a loaded (ms)") == 1 &&
              count(text, "allreduce (MB/s)") == 1);
        /* Each polyline has one point per partition (3). */
        for (const char *p = text; (p = strstr(p, "class=\"policy\"")) != NULL;
             p++) {
            const char *points = strstr(p, "points=\"") + 8;
            size_t commas = 0;

            for (; *points != '"'; points++)
                commas += *points == ',';
            CHECK(commas == 3);
        }
        free(text);
    }

    CHECK(swyt_report_csv_write(csv, &list, (long)w) == 0);
    text = file_read(csv);
    CHECK(text != NULL);
    if (text != NULL) {
        CHECK(count(text, "\n") == list.count + 1);
        CHECK(strncmp(text, "chosen,policy,partition_bytes,credit_bytes,",
                      43) == 0);
        CHECK(count(text, "\n1,") == 1);
        CHECK(count(text, "\"a&b\"") == 6);
        free(text);
    }
    /* The table names the chosen one. */
    FILE *table = tmpfile();
    swyt_report_table_print(table, &list, (long)w);
    CHECK(ftell(table) > 0);
    fclose(table);

    /* No winner: still written, nothing marked. */
    CHECK(swyt_report_svg_write(svg, &list, -1, "none") == 0);
    text = file_read(svg);
    CHECK(text != NULL && count(text, ">chosen<") == 0);
    free(text);
    unlink(svg);
    unlink(csv);
    swyt_candidate_list_clear(&list);
}

/* Finding the programs a tool runs (tools/common/tool_find.c), as
 * swy-tune finds swy-bench: through PATH here, since no swy-bench sits
 * beside this test or in its build-tree sibling folder. */
static void make_file(const char *path, mode_t mode)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    if (f != NULL) {
        fputs("#!/bin/sh\n", f);
        fclose(f);
    }
    CHECK(chmod(path, mode) == 0);
}

static void case_find(void)
{
    char dir[] = "/tmp/swy-test-find-XXXXXX", real[PATH_MAX];
    char path[PATH_MAX + 64], buf[PATH_MAX], want[PATH_MAX + 64];
    char *old_path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

    CHECK(mkdtemp(dir) != NULL);
    CHECK(realpath(dir, real) != NULL);
    snprintf(path, sizeof(path), "%s/fakeprog", dir);
    make_file(path, 0755);
    snprintf(path, sizeof(path), "%s/plainfile", dir);
    make_file(path, 0644);
    snprintf(path, sizeof(path), "%s/linkprog", dir);
    CHECK(symlink("fakeprog", path) == 0);
    /* Empty and missing folders on the way are passed over. */
    snprintf(path, sizeof(path), "/nonexistent/swy::%s/", dir);
    setenv("PATH", path, 1);

    CHECK(swy_tool_find("fakeprog", NULL, buf, sizeof(buf)) == 1);
    snprintf(want, sizeof(want), "%s/fakeprog", real);
    CHECK(strcmp(buf, want) == 0);
    /* A link keeps its own name (mpirun, not the orterun it points to). */
    CHECK(swy_tool_find("linkprog", "nowhere", buf, sizeof(buf)) == 1);
    snprintf(want, sizeof(want), "%s/linkprog", real);
    CHECK(strcmp(buf, want) == 0);
    CHECK(swy_tool_find("plainfile", NULL, buf, sizeof(buf)) == 0);
    CHECK(swy_tool_find("absent", NULL, buf, sizeof(buf)) == 0);
    /* A path that does not fit is no path. */
    CHECK(swy_tool_find("fakeprog", NULL, buf, 8) == 0);

    /* swy-tune's default: the name alone where none is found, else the
     * absolute path. */
    swyt_bench_path_find(buf, sizeof(buf));
    CHECK(strcmp(buf, "swy-bench") == 0);
    snprintf(path, sizeof(path), "%s/swy-bench", dir);
    make_file(path, 0755);
    swyt_bench_path_find(buf, sizeof(buf));
    snprintf(want, sizeof(want), "%s/swy-bench", real);
    CHECK(strcmp(buf, want) == 0);

    if (old_path != NULL)
        setenv("PATH", old_path, 1);
    free(old_path);
    const char *names[] = {"fakeprog", "plainfile", "linkprog", "swy-bench"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"json", case_json},     {"lines", case_lines},
        {"space", case_space},   {"select", case_select},
        {"conf", case_conf},     {"report", case_report},
        {"find", case_find},
    };

    if (argc != 2) {
        fprintf(stderr, "usage: test_tune CASE\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            if (check_failures)
                fprintf(stderr, "%d check(s) failed\n", check_failures);
            return check_failures ? 1 : 0;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
