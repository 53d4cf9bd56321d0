/* Job secrets and the challenge proofs: a small SHA-256 (FIPS 180-4) and
 * HMAC (RFC 2104) so the control plane needs no crypto library. The
 * secret never crosses the wire; rank and root each prove they know it by
 * an HMAC over both nonces and the rank's HELLO (wire.h). */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "boot/boot.h"
#include "boot/wire.h"
#include "util/alloc.h"
#include "util/status.h"

static const uint32_t sha256_round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr32(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void sha256_compress(uint32_t state[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = swy_boot_get_u32(block + 4 * i);
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^
                      (w[i - 15] >> 3);
        uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^
                      (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }

    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int i = 0; i < 64; i++) {
        uint32_t sum1 = rotr32(e, 6) ^ rotr32(e, 11) ^ rotr32(e, 25);
        uint32_t choose = (e & f) ^ (~e & g);
        uint32_t t1 = h + sum1 + choose + sha256_round_constants[i] + w[i];
        uint32_t sum0 = rotr32(a, 2) ^ rotr32(a, 13) ^ rotr32(a, 22);
        uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = sum0 + majority;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

void swy_boot_sha256_init(swy_boot_sha256_t *ctx)
{
    static const uint32_t initial[8] = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    };
    memcpy(ctx->state, initial, sizeof(initial));
    ctx->total_bytes = 0;
    ctx->block_len = 0;
}

void swy_boot_sha256_update(swy_boot_sha256_t *ctx, const void *data,
                            size_t len)
{
    const uint8_t *bytes = data;
    ctx->total_bytes += len;
    while (len > 0) {
        size_t take = SWY_MIN(64 - ctx->block_len, len);
        memcpy(ctx->block + ctx->block_len, bytes, take);
        ctx->block_len += take;
        bytes += take;
        len -= take;
        if (ctx->block_len == 64) {
            sha256_compress(ctx->state, ctx->block);
            ctx->block_len = 0;
        }
    }
}

void swy_boot_sha256_final(swy_boot_sha256_t *ctx,
                           uint8_t digest[SWY_BOOT_DIGEST_LEN])
{
    uint64_t total_bits = ctx->total_bytes * 8;
    uint8_t pad = 0x80;
    /* Padding: one 1 bit, zeros up to 56 mod 64, then the bit length. */
    swy_boot_sha256_update(ctx, &pad, 1);
    uint8_t zero = 0;
    while (ctx->block_len != 56)
        swy_boot_sha256_update(ctx, &zero, 1);
    uint8_t length_be[8];
    swy_boot_put_u64(length_be, total_bits);
    swy_boot_sha256_update(ctx, length_be, 8);
    for (int i = 0; i < 8; i++)
        swy_boot_put_u32(digest + 4 * i, ctx->state[i]);
    memset(ctx, 0, sizeof(*ctx));
}

/* HMAC-SHA256 with the 32-byte secret as key: SHA256((K^opad) ||
 * SHA256((K^ipad) || message)). Unlike SHA256(secret || message), an
 * observed proof cannot be extended into another valid one. */
static void proof_hmac_begin(swy_boot_sha256_t *ctx,
                             const uint8_t secret[SWY_BOOT_SECRET_LEN],
                             uint8_t pad_byte)
{
    uint8_t pad[64];
    memset(pad, pad_byte, sizeof(pad));
    for (size_t i = 0; i < SWY_BOOT_SECRET_LEN; i++)
        pad[i] ^= secret[i];
    swy_boot_sha256_init(ctx);
    swy_boot_sha256_update(ctx, pad, sizeof(pad));
}

void swy_boot_proof(const uint8_t secret[SWY_BOOT_SECRET_LEN],
                    swy_boot_proof_role_t role,
                    const uint8_t root_nonce[SWY_BOOT_NONCE_LEN],
                    const uint8_t rank_nonce[SWY_BOOT_NONCE_LEN],
                    const void *hello, size_t hello_len,
                    uint8_t digest_p[SWY_BOOT_DIGEST_LEN])
{
    /* The role label keeps the root's proof from being the rank's proof
     * sent back; the HELLO in it keeps a relayed proof from joining as
     * another rank. */
    static const char rank_label[] = "switchyard rank proof v2";
    static const char root_label[] = "switchyard root proof v2";
    const char *label = role == SWY_BOOT_PROOF_ROOT ? root_label
                                                    : rank_label;
    uint8_t hello_len_be[4];
    swy_boot_put_u32(hello_len_be, (uint32_t)hello_len);
    uint8_t inner[SWY_BOOT_DIGEST_LEN];
    swy_boot_sha256_t ctx;
    proof_hmac_begin(&ctx, secret, 0x36);
    swy_boot_sha256_update(&ctx, label, sizeof(rank_label));
    swy_boot_sha256_update(&ctx, root_nonce, SWY_BOOT_NONCE_LEN);
    swy_boot_sha256_update(&ctx, rank_nonce, SWY_BOOT_NONCE_LEN);
    swy_boot_sha256_update(&ctx, hello_len_be, sizeof(hello_len_be));
    if (hello_len > 0)
        swy_boot_sha256_update(&ctx, hello, hello_len);
    swy_boot_sha256_final(&ctx, inner);
    proof_hmac_begin(&ctx, secret, 0x5c);
    swy_boot_sha256_update(&ctx, inner, sizeof(inner));
    swy_boot_sha256_final(&ctx, digest_p);
}

int swy_boot_digest_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
    /* No early exit: the time taken must not tell how many bytes matched. */
    uint8_t diff = 0;
    for (size_t i = 0; i < len; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

void swy_boot_secret_from_text(const char *text,
                               uint8_t secret[SWY_BOOT_SECRET_LEN])
{
    /* A fixed prefix separates this use of SHA-256 from any other hash of
     * the same text (e.g. a launcher that hashes its job id itself). */
    static const char domain[] = "switchyard job key v1";
    swy_boot_sha256_t ctx;
    swy_boot_sha256_init(&ctx);
    swy_boot_sha256_update(&ctx, domain, sizeof(domain));
    if (text != NULL)
        swy_boot_sha256_update(&ctx, text, strlen(text));
    swy_boot_sha256_final(&ctx, secret);
}

swy_status_t swy_boot_secret_random(uint8_t secret[SWY_BOOT_SECRET_LEN])
{
    size_t filled = 0;
    while (filled < SWY_BOOT_SECRET_LEN) {
        ssize_t got = getrandom(secret + filled, SWY_BOOT_SECRET_LEN - filled,
                                0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return swy_err_set(SWY_ERR_SYSTEM, "boot",
                               "getrandom(%d bytes) for the job secret "
                               "failed: %s",
                               SWY_BOOT_SECRET_LEN, strerror(errno));
        }
        filled += (size_t)got;
    }
    return SWY_OK;
}
