/* bf16 <-> float: hand-picked round-to-nearest-even cases, NaN/inf, and a
 * sweep against a reference that picks the nearer bf16 neighbour in
 * double. */
#include <string.h>

#include "ktest.h"
#include "swy_kernels.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t conv(uint32_t bits)
{
    float f = from_bits(bits);
    uint16_t h;
    swy_k_f32_to_bf16(&f, 1, &h);
    return h;
}

static int is_nan16(uint16_t h)
{
    return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0;
}

/* The nearer of the two bf16 values around a finite f, ties to the even
 * one, by exact comparison in double (no bit tricks). */
static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t lo = (uint16_t)(u >> 16); /* truncation: toward zero */
    uint16_t hi = (uint16_t)(lo + 1);  /* next away from zero */
    if ((u & 0xffff) == 0)
        return lo;
    double dl = fabs((double)f - from_bits((uint32_t)lo << 16));
    double dh;
    if ((hi & 0x7fff) == 0x7f80) {
        /* Above the largest bf16 (255 * 2^120): IEEE rounding treats
         * infinity as the next step, 2^128. */
        dh = fabs(fabs((double)f) - ldexp(1.0, 128));
    } else {
        dh = fabs((double)f - from_bits((uint32_t)hi << 16));
    }
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

int main(void)
{
    /* Exact values stay. */
    CHECK(conv(0x3f800000) == 0x3f80);     /* 1.0 */
    CHECK(conv(0x00000000) == 0x0000);
    CHECK(conv(0x80000000) == 0x8000);     /* -0.0 */
    /* Halfway cases go to the even neighbour. */
    CHECK(conv(0x3f808000) == 0x3f80);     /* between 3f80 and 3f81 */
    CHECK(conv(0x3f818000) == 0x3f82);     /* between 3f81 and 3f82 */
    CHECK(conv(0xbf808000) == 0xbf80);
    CHECK(conv(0xbf818000) == 0xbf82);
    CHECK(conv(0x00008000) == 0x0000);     /* subnormal, to even 0 */
    CHECK(conv(0x00018000) == 0x0002);
    /* Off the midpoint, to the nearer. */
    CHECK(conv(0x3f808001) == 0x3f81);
    CHECK(conv(0x3f807fff) == 0x3f80);
    CHECK(conv(0x3f80ffff) == 0x3f81);
    /* Carry into the exponent: 1.99999 -> 2.0. */
    CHECK(conv(0x3fffffff) == 0x4000);
    /* Overflow to infinity, and the largest bf16 below it. */
    CHECK(conv(0x7f7fffff) == 0x7f80);
    CHECK(conv(0x7f7f8000) == 0x7f80);     /* tie, 7f7f odd -> up */
    CHECK(conv(0x7f7f7fff) == 0x7f7f);
    CHECK(conv(0xff7fffff) == 0xff80);
    CHECK(conv(0x7f800000) == 0x7f80);     /* +inf */
    CHECK(conv(0xff800000) == 0xff80);     /* -inf */
    /* NaN stays NaN, signalling ones with only low payload bits too. */
    CHECK(conv(0x7fc00000) == 0x7fc0);
    CHECK(is_nan16(conv(0x7f800001)));
    CHECK(is_nan16(conv(0xff800001)) && (conv(0xff800001) & 0x8000));
    CHECK(is_nan16(conv(0x7fffffff)));

    /* Every non-NaN bf16 survives bf16 -> float -> bf16. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if (is_nan16((uint16_t)h))
            continue;
        float f;
        uint16_t h16 = (uint16_t)h, back;
        swy_k_bf16_to_f32(&h16, 1, &f);
        swy_k_f32_to_bf16(&f, 1, &back);
        if (back != h16) {
            CHECK(back == h16);
            break;
        }
    }

    /* Random bit patterns (finite) against the reference. */
    kt_seed(99);
    int bad = 0;
    for (int i = 0; i < 1000000 && bad < 5; i++) {
        uint32_t u = (uint32_t)kt_next();
        if (i % 4 == 0)
            u = (u & 0xffff0000u) | 0x8000u; /* force exact midpoints */
        if ((u & 0x7f800000u) == 0x7f800000u)
            continue; /* inf / NaN covered above */
        float f = from_bits(u);
        uint16_t got = conv(u), want = ref_bf16(f);
        if (got != want) {
            fprintf(stderr, "bf16(0x%08x) = 0x%04x, want 0x%04x\n", u, got,
                    want);
            bad++;
        }
    }
    CHECK(bad == 0);

    /* Arrays convert element by element. */
    float a[3] = {1.0f, -2.5f, 3.140625f}, b[3];
    uint16_t h[3];
    swy_k_f32_to_bf16(a, 3, h);
    swy_k_bf16_to_f32(h, 3, b);
    CHECK(memcmp(a, b, sizeof(a)) == 0); /* all exact in bf16 */
    return kt_finish("kernels_bf16");
}
