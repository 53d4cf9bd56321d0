/* swy_dtype_size (public API): each swy_dtype_t has the size of the C
 * type that holds one of its elements; a value outside swy_dtype_t gives
 * 0 and SWY_ERR_INVALID_ARG's message naming the value, and a valid one
 * leaves an earlier message alone. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "switchyard/switchyard.h"

static void expect(swy_dtype_t dtype, const char *name, size_t want)
{
    size_t got = swy_dtype_size(dtype);
    CHECK(got == want, "swy_dtype_size(%s) = %zu, expected %zu", name, got,
          want);
}

static void expect_refused(int value)
{
    char quoted[32];
    size_t got = swy_dtype_size((swy_dtype_t)value);
    snprintf(quoted, sizeof(quoted), "dtype %d", value);
    CHECK(got == 0, "swy_dtype_size(%d) = %zu, expected 0", value, got);
    CHECK(strstr(swy_last_error(NULL), quoted) != NULL,
          "swy_dtype_size(%d): message \"%s\" does not say \"%s\"", value,
          swy_last_error(NULL), quoted);
}

int main(void)
{
    expect(SWY_INT8, "SWY_INT8", sizeof(int8_t));
    expect(SWY_UINT8, "SWY_UINT8", sizeof(uint8_t));
    expect(SWY_INT32, "SWY_INT32", sizeof(int32_t));
    expect(SWY_INT64, "SWY_INT64", sizeof(int64_t));
    expect(SWY_FLOAT16, "SWY_FLOAT16", sizeof(uint16_t));
    expect(SWY_BFLOAT16, "SWY_BFLOAT16", sizeof(uint16_t));
    expect(SWY_FLOAT32, "SWY_FLOAT32", sizeof(float));
    expect(SWY_FLOAT64, "SWY_FLOAT64", sizeof(double));
    expect_refused(-1);
    expect_refused(SWY_FLOAT64 + 1);
    expect_refused(1000);
    /* The last failure's message survives a valid call. */
    char before[256];
    snprintf(before, sizeof(before), "%s", swy_last_error(NULL));
    expect(SWY_FLOAT32, "SWY_FLOAT32", sizeof(float));
    CHECK(strcmp(before, swy_last_error(NULL)) == 0, "a valid call changed "
          "the last error from \"%s\" to \"%s\"", before,
          swy_last_error(NULL));
    if (check_failures == 0)
        printf("PASS: swy_dtype_size\n");
    return check_failures != 0;
}
