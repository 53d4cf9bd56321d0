/* The checks of every C test (unit, plugins, multiproc, gpu): the one copy,
 * header-only, with no dependency on libswitchyard. The status checks that
 * print swy_last_error are in check_swy.h.
 *
 * A failed check prints one line on stderr,
 *     FILE:LINE: check failed: COND[: MESSAGE][ (last error: ...)]
 * where MESSAGE is an optional printf-style format and its arguments, and
 * the last error appears where a test defines CHECK_LAST_ERROR (below) and
 * it is not empty; then the check does what its variant says:
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
 * A process whose CHECKs failed never exits 0: at exit, a count above zero
 * turns any status into 1 (and the multiproc harness fails such a rank).
 * So a test that forgets to return the count, or a multi-process rank
 * written for a CHECK that returned, still fails.
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
#include <unistd.h>

#define TEST_SKIP 77

/* One counter for the whole program (weak: every file that includes this
 * header defines it, the linker keeps one), so that the multiproc harness
 * sees the failures of a rank's function. Atomic: the transport tests
 * check from several threads. */
__attribute__((weak)) atomic_int check_failures;

/* Registered before main, so it runs after the exit handlers a test
 * registers (test_run's report of a failure); _exit skips the flush of
 * stdio, hence fflush. */
static void check_exit_status_(void)
{
    if (check_failures != 0) {
        fflush(NULL);
        _exit(1);
    }
}

__attribute__((constructor)) static void check_exit_status_register_(void)
{
    atexit(check_exit_status_);
}

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
    if (last_error != NULL && last_error[0] != '\0')
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
