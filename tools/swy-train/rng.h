/* Counter-based random numbers for swy-train: every value is a pure
 * function of (key, index), so a token, a label or a weight does not depend
 * on which rank draws it or in which order — what makes 1 rank with 4T
 * tokens and 4 ranks with T tokens see the same batch and the same
 * initial parameters. The mixer is SplitMix64's finalizer (Steele, Lea,
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014). */
#ifndef SWT_RNG_H
#define SWT_RNG_H

#include <stdint.h>

static inline uint64_t swt_rng_mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/** A stream key from up to four words (seed, purpose, layer, expert...). */
static inline uint64_t swt_rng_key(uint64_t a, uint64_t b, uint64_t c,
                                   uint64_t d)
{
    return swt_rng_mix(swt_rng_mix(swt_rng_mix(swt_rng_mix(a) ^ b) ^ c) ^ d);
}

/** The index-th 64-bit value of stream key. */
static inline uint64_t swt_rng_u64(uint64_t key, uint64_t index)
{
    return swt_rng_mix(key ^ swt_rng_mix(index));
}

/** Uniform in [0, 1) with 53 bits. */
static inline double swt_rng_unit(uint64_t key, uint64_t index)
{
    return (double)(swt_rng_u64(key, index) >> 11) * 0x1.0p-53;
}

/** Uniform in [0, n) (n >= 1); the modulo bias is below 2^-40 for the
 *  sizes used here. */
static inline int swt_rng_below(uint64_t key, uint64_t index, int n)
{
    return (int)(swt_rng_u64(key, index) % (uint64_t)n);
}

#endif /* SWT_RNG_H */
