/* The checks of every C test (unit, plugins, multiproc, gpu): the one copy,
 * header-only, with no dependency on libswitchyard. The status checks that
 * print swy_last_error are in check_swy.h.
 *
 * A failed check prints one line on stderr,
 *     FILE:LINE: check failed: COND[: MESSAGE][ (last error: ...)]
 * where MESSAGE is an optional printf-style format and its arguments, and
 * then does what its variant says:
 *   CHECK(cond, ...)       counts the failure in check_failures and goes on,
 *                          so that a test reports every wrong value before
 *                          it ends with `return check_failures != 0;` (the
 *                          unit tests, the gpu tests);
 *   CHECK_RET(cond, ...)   returns 1 from the calling function (a rank's
 *                          function in a multi-process test, whose exit code
 *                          the harness reports; a main that stops);
 *   CHECK_EXIT(cond, ...)  exits 1 (helpers and threads with no caller to
 *                          tell: the boot tests, test_run).
 * A test that lacks what it needs (a GPU, root) exits TEST_SKIP, which meson
 * counts as skipped.
 *
 * A test whose failures the library's last error explains defines
 * CHECK_LAST_ERROR() (an expression giving a string, e.g. swy_err_last())
 * before it includes this header.
 *
 * CHECK(cond) without a message leaves the macro's `...` empty, which gcc
 * and clang accept (and C23 allows); the project builds as gnu11. */
#ifndef SWY_TEST_CHECK_H
#define SWY_TEST_CHECK_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define TEST_SKIP 77

/* Atomic: the transport and boot tests check from several threads. */
static atomic_int check_failures __attribute__((unused));

#ifndef CHECK_LAST_ERROR
#define CHECK_LAST_ERROR() NULL
#endif

/* note is " " followed by the caller's format (see CHECK_REPORT_). */
__attribute__((format(printf, 5, 6))) static inline void
check_report_(const char *file, int line, const char *cond,
              const char *last_error, const char *note, ...)
{
    va_list ap;

    flockfile(stderr); /* one line, even when threads fail together */
    fprintf(stderr, "%s:%d: check failed: %s", file, line, cond);
    if (note[1] != '\0') {
        fputc(':', stderr);
        va_start(ap, note);
        vfprintf(stderr, note, ap);
        va_end(ap);
    }
    if (last_error != NULL)
        fprintf(stderr, " (last error: %s)", last_error);
    fputc('\n', stderr);
    funlockfile(stderr);
}

/* " " glued to the message's format keeps the format a literal that the
 * compiler checks, and never empty when there is no message. */
#define CHECK_REPORT_(cond_text, ...)                                         \
    check_report_(__FILE__, __LINE__, cond_text, CHECK_LAST_ERROR(),          \
                  " " __VA_ARGS__)

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            CHECK_REPORT_(#cond, __VA_ARGS__);                                \
            check_failures++;                                                 \
        }                                                                     \
    } while (0)

#define CHECK_RET(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) {                                                        \
            CHECK_REPORT_(#cond, __VA_ARGS__);                                \
            return 1;                                                         \
        }                                                                     \
    } while (0)

#define CHECK_EXIT(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond)) {                                                        \
            CHECK_REPORT_(#cond, __VA_ARGS__);                                \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#endif
