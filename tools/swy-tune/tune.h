/* swy-tune: chooses Switchyard's scheduling policy, partition size and
 * credit for a cluster by measuring them with `swy-bench interference`.
 * Pieces, one file each: json.c (the JSON line parser), search.c (the
 * candidate grid and the objective), run.c (spawning the benchmark under a
 * launcher and turning its JSON lines into candidates), report.c (table,
 * CSV, SVG) and conf.c (the SWY_CONFIG file). The tool does not link
 * libswitchyard: it only drives the benchmark. */
#ifndef SWY_TUNE_H
#define SWY_TUNE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- json.c: flat JSON objects, one per line ---- */

enum {
    SWYT_JSON_MAX_FIELDS = 48,
    SWYT_JSON_MAX_KEY = 64,
    SWYT_JSON_MAX_TEXT = 256,
};

typedef enum {
    SWYT_JSON_STRING,
    SWYT_JSON_NUMBER,
    SWYT_JSON_BOOL,
    SWYT_JSON_NULL,
} swyt_json_type_t;

typedef struct {
    char key[SWYT_JSON_MAX_KEY];
    swyt_json_type_t type;
    char text[SWYT_JSON_MAX_TEXT]; /* STRING: the decoded string */
    double number;                 /* NUMBER; BOOL: 0 or 1 */
} swyt_json_field_t;

typedef struct {
    int nfields;
    swyt_json_field_t fields[SWYT_JSON_MAX_FIELDS];
} swyt_json_object_t;

/**
 * Skip a launcher's "[n] " rank prefix (swy-run prints one per line), if
 * the line has one; returns the rest of the line.
 */
const char *swyt_line_strip_prefix(const char *line);

/**
 * Parse one flat JSON object (string, number, true/false/null values; no
 * nesting) that fills the line up to trailing white space. Returns 0, or
 * -1 with the reason in @p why.
 */
int swyt_json_parse(const char *line, swyt_json_object_t *object_p,
                    char *why, size_t why_len);

/** The field named @p key, or NULL. */
const swyt_json_field_t *swyt_json_find(const swyt_json_object_t *object,
                                        const char *key);

/* ---- sizes ---- */

/* Sizes are read with swy_parse_size (switchyard.h). */
/** Format 65536 as "64K", 1048576 as "1M", 1000 as "1000". */
void swyt_size_format(uint64_t bytes, char *buf, size_t len);

/* ---- search.c: candidates, search space, objective ---- */

/** One measured (policy, partition, credit) point. */
typedef struct {
    char policy[32];
    uint64_t partition_bytes;
    uint64_t credit_bytes;   /* 0 when the benchmark reported "auto" */
    uint64_t a2a_bytes;
    uint64_t allreduce_bytes;
    double a2a_alone_ms;
    double a2a_loaded_ms;
    double a2a_loaded_p95_ms; /* NAN when not reported */
    double slowdown;          /* loaded / alone */
    double allreduce_MBps;    /* under the concurrent all-to-all */
    double allreduce_alone_MBps;
    int ranks;
    int nodes;
    char sweep[16];          /* the benchmark's group: policies, credit,
                                partition ("" when not reported) */
    int check_ok;            /* the benchmark verified the results */
    double backlog_overlap;  /* share of reps the allreduce outlasted the
                                all-to-all; < 1: not a full load */
    /* Set by swyt_select(): */
    double reference_MBps; /* the allreduce throughput the floor is 90% of */
    int feasible;
    const char *verdict;   /* "ok", "ar<floor", "WRONG", "no-load" */
    double score;          /* lower is better */
} swyt_candidate_t;

typedef struct {
    swyt_candidate_t *items;
    size_t count;
    size_t capacity;
} swyt_candidate_list_t;

/** Append a copy; returns 0 or -1 (out of memory). */
int swyt_candidate_list_add(swyt_candidate_list_t *list,
                            const swyt_candidate_t *candidate);
/** Index of the candidate with this key, or -1. */
long swyt_candidate_list_find(const swyt_candidate_list_t *list,
                              const char *policy, uint64_t partition_bytes,
                              uint64_t credit_bytes);
void swyt_candidate_list_clear(swyt_candidate_list_t *list);

/**
 * Fill a candidate from one benchmark JSON object. Lines of other
 * benchmarks return 1 (ignored); missing or mistyped required fields
 * return -1 with the reason in @p why.
 */
int swyt_candidate_from_json(const swyt_json_object_t *object,
                             swyt_candidate_t *candidate_p, char *why,
                             size_t why_len);

/** A credit as asked for: "auto", N partitions ("2x") or a size. */
typedef struct {
    enum { SWYT_CREDIT_AUTO, SWYT_CREDIT_PARTITIONS, SWYT_CREDIT_BYTES } kind;
    uint64_t value; /* partitions or bytes */
} swyt_credit_spec_t;

typedef struct {
    char **policies;
    size_t npolicies;
    uint64_t *partitions;
    size_t npartitions;
    swyt_credit_spec_t *credits;
    size_t ncredits;
} swyt_space_t;

/** Parse the comma lists of --policies, --partitions, --credits into
 * @p space; 0 or -1 with the reason in @p why. */
int swyt_space_parse(const char *policies, const char *partitions,
                     const char *credits, swyt_space_t *space_p, char *why,
                     size_t why_len);
void swyt_space_destroy(swyt_space_t *space);
/** Number of (policy, partition, credit) points the grid asks for, with
 * credits that coincide at a partition counted once. */
size_t swyt_space_size(const swyt_space_t *space);

/**
 * The benchmark's --credits argument for the given partitions: "auto"
 * stays "auto", "Nx" becomes N * partition in bytes, sizes stay; duplicates
 * are dropped. Writes a comma list into @p buf; -1 if it does not fit.
 */
int swyt_credits_resolve(const swyt_space_t *space,
                         const uint64_t *partitions, size_t npartitions,
                         char *buf, size_t len);

/** Whether the grid has a credit relative to the partition ("Nx"). */
int swyt_space_has_relative_credit(const swyt_space_t *space);

typedef enum {
    SWYT_OBJECTIVE_A2A,      /* minimize the loaded all-to-all time */
    SWYT_OBJECTIVE_BALANCED, /* both slowdowns against the best alone */
} swyt_objective_t;

/* The allreduce floor (fraction of the reference) and the tie band. */
#define SWYT_ALLREDUCE_FLOOR 0.90
#define SWYT_TIE_FRACTION 0.02

/** One sentence stating the objective (for the table and the config). */
const char *swyt_objective_describe(swyt_objective_t objective);

/**
 * Mark each candidate feasible or not and score it, then choose the
 * winner. Returns 0 and the winner's index, or -1 when no candidate is
 * feasible (the marks and scores are still set).
 */
int swyt_select(swyt_candidate_list_t *list, swyt_objective_t objective,
                size_t *winner_p);

/* ---- run.c: the benchmark under the launcher ---- */

typedef struct {
    int exit_status;     /* the launcher's exit status, or 128 + signal */
    int timed_out;
    size_t json_lines;   /* accepted as candidates */
    size_t rejected;     /* malformed JSON lines */
    char header[2048];   /* the benchmark's "# " lines (command, commit,
                            machine), from its first rank to print them */
    char stderr_tail[4096];
} swyt_run_result_t;

/**
 * Run @p argv (launcher, benchmark, arguments), relay nothing to the
 * terminal unless @p verbose, and add every interference line to @p list
 * (a key seen before keeps its first measurement). @p timeout_s <= 0: no
 * limit. Returns 0 when the command ran (whatever its status), -1 when it
 * could not be started.
 */
int swyt_run_command(char *const argv[], double timeout_s, int verbose,
                     swyt_candidate_list_t *list,
                     swyt_run_result_t *result_p);

/**
 * Feed one line of the benchmark's standard output (as swyt_run_command
 * does): JSON lines become candidates, other lines are skipped. Returns 1
 * for an added candidate, 0 for a skipped line, -1 for a malformed JSON
 * line (warned about on stderr).
 */
int swyt_run_line_take(const char *line, swyt_candidate_list_t *list);

/**
 * Run `@p bench interference --help` directly (no launcher: the help
 * needs no ranks) and return its standard output in @p buf. 0 or -1.
 */
int swyt_bench_help_read(const char *bench, char *buf, size_t len);

/** The benchmark: next to this executable, else `swy-bench` on PATH. */
void swyt_bench_path_find(char *buf, size_t len);
/* The same for swy-sim (swy-tune --sim). */
void swyt_sim_path_find(char *buf, size_t len);

/* ---- report.c ---- */

void swyt_report_table_print(FILE *out, const swyt_candidate_list_t *list,
                             long winner);
int swyt_report_csv_write(const char *path, const swyt_candidate_list_t *list,
                          long winner);
int swyt_report_svg_write(const char *path, const swyt_candidate_list_t *list,
                          long winner, const char *title);

/* ---- conf.c ---- */

/**
 * Write the SWY_CONFIG file for @p winner: a '#' header (date, command,
 * search, objective, measured figures), then SWY_POLICY,
 * SWY_PARTITION_BYTES and SWY_CREDIT_BYTES. Returns 0 or -1 (errno set).
 */
int swyt_conf_write(const char *path, const swyt_candidate_t *winner,
                    const char *command, const char *search,
                    swyt_objective_t objective);

#endif
