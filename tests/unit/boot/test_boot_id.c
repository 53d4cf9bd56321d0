/* Job id encode/decode, host:port parsing, and the SHA-256 behind the
 * secret proof (checked against the FIPS 180-4 example vectors). */
#include "boot_test.h"
#include "boot/wire.h"

static void hex(const uint8_t *bytes, size_t len, char *text)
{
    for (size_t i = 0; i < len; i++)
        sprintf(text + 2 * i, "%02x", bytes[i]);
}

static void check_sha256(const char *input, size_t repeat,
                         const char *expected)
{
    swy_boot_sha256_t ctx;
    swy_boot_sha256_init(&ctx);
    for (size_t i = 0; i < repeat; i++)
        swy_boot_sha256_update(&ctx, input, strlen(input));
    uint8_t digest[32];
    swy_boot_sha256_final(&ctx, digest);
    char text[65];
    hex(digest, 32, text);
    if (strcmp(text, expected) != 0) {
        fprintf(stderr, "sha256(\"%s\" x %zu) = %s, expected %s\n", input,
                repeat, text, expected);
        exit(1);
    }
}

static void test_sha256(void)
{
    check_sha256("", 1,
                 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b"
                 "7852b855");
    check_sha256("abc", 1,
                 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61"
                 "f20015ad");
    check_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                 1,
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd4"
                 "19db06c1");
    /* One million 'a', fed 1000 bytes at a time: exercises block
     * boundaries that do not line up with the updates. */
    char thousand[1001];
    memset(thousand, 'a', 1000);
    thousand[1000] = '\0';
    check_sha256(thousand, 1000,
                 "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39cc"
                 "c7112cd0");
}

static void test_secret_derivation(void)
{
    uint8_t a[SWY_BOOT_SECRET_LEN], b[SWY_BOOT_SECRET_LEN],
        c[SWY_BOOT_SECRET_LEN];
    swy_boot_secret_from_text("job-1234", a);
    swy_boot_secret_from_text("job-1234", b);
    swy_boot_secret_from_text("job-1235", c);
    CHECK_EXIT(memcmp(a, b, sizeof(a)) == 0);
    CHECK_EXIT(memcmp(a, c, sizeof(a)) != 0);

    uint8_t r1[SWY_BOOT_SECRET_LEN], r2[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(r1), NULL);
    CHECK_OK_EXIT(swy_boot_secret_random(r2), NULL);
    CHECK_EXIT(memcmp(r1, r2, sizeof(r1)) != 0);

    /* The proofs are HMAC-SHA256 (RFC 2104) keyed with the secret; the
     * reference digests come from Python's hmac module:
     *   hmac.new(secret, label + b"\\0" + root_nonce + rank_nonce
     *            + struct.pack(">I", len(hello)) + hello, sha256)
     * with secret = sha256(b"switchyard job key v1\\0job-1234"). */
    static const char rank_hex[] =
        "0187470869a3d4a5b35b3f943a1d4f1071a70cc86a1ff791cc9b8294f5ba130e";
    static const char root_hex[] =
        "6fb5d6894f2d23b632ede0149163546151da82ead9fc535bb1f7ce04040faf1f";
    uint8_t root_nonce[SWY_BOOT_NONCE_LEN] = {1, 2, 3};
    uint8_t rank_nonce[SWY_BOOT_NONCE_LEN];
    for (int i = 0; i < SWY_BOOT_NONCE_LEN; i++)
        rank_nonce[i] = (uint8_t)i;
    uint8_t hello[16] = {0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 7, 'h', 'o', 's',
                         't'};
    uint8_t p1[32], p2[32], p3[32], p4[32], p5[32], p6[32];
    swy_boot_proof(a, SWY_BOOT_PROOF_RANK, root_nonce, rank_nonce, hello,
                   sizeof(hello), p1);
    swy_boot_proof(a, SWY_BOOT_PROOF_ROOT, root_nonce, rank_nonce, hello,
                   sizeof(hello), p2);
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", p1[i]);
    CHECK_EXIT(strcmp(hex, rank_hex) == 0);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", p2[i]);
    CHECK_EXIT(strcmp(hex, root_hex) == 0);
    /* ... and on every input: secret, each nonce, the HELLO (the rank). */
    swy_boot_proof(c, SWY_BOOT_PROOF_RANK, root_nonce, rank_nonce, hello,
                   sizeof(hello), p3);
    rank_nonce[31] ^= 1;
    swy_boot_proof(a, SWY_BOOT_PROOF_RANK, root_nonce, rank_nonce, hello,
                   sizeof(hello), p4);
    rank_nonce[31] ^= 1;
    root_nonce[31] = 9;
    swy_boot_proof(a, SWY_BOOT_PROOF_RANK, root_nonce, rank_nonce, hello,
                   sizeof(hello), p5);
    root_nonce[31] = 0;
    hello[3] = 0; /* rank 0 instead of 1 */
    swy_boot_proof(a, SWY_BOOT_PROOF_RANK, root_nonce, rank_nonce, hello,
                   sizeof(hello), p6);
    CHECK_EXIT(!swy_boot_digest_equal(p1, p3, 32));
    CHECK_EXIT(!swy_boot_digest_equal(p1, p4, 32));
    CHECK_EXIT(!swy_boot_digest_equal(p1, p5, 32));
    CHECK_EXIT(!swy_boot_digest_equal(p1, p6, 32));
    CHECK_EXIT(swy_boot_digest_equal(p1, p1, 32));
}

static void test_id_roundtrip(void)
{
    swy_boot_addr_t addr;
    memset(&addr, 0, sizeof(addr));
    snprintf(addr.host, sizeof(addr.host), "10.1.2.3");
    addr.port = 51234;
    for (int i = 0; i < SWY_BOOT_SECRET_LEN; i++)
        addr.secret[i] = (uint8_t)(i * 37 + 5);
    swy_unique_id_t id;
    CHECK_OK_EXIT(swy_boot_id_encode(&addr, &id), NULL);
    CHECK_EXIT(memcmp(id.bytes, "SWYID", 5) == 0);
    swy_boot_addr_t back;
    memset(&back, 0xee, sizeof(back));
    CHECK_OK_EXIT(swy_boot_id_decode(&id, &back), NULL);
    CHECK_EXIT(strcmp(back.host, "10.1.2.3") == 0);
    CHECK_EXIT(back.port == 51234);
    CHECK_EXIT(memcmp(back.secret, addr.secret, SWY_BOOT_SECRET_LEN) == 0);

    /* IPv6 host. */
    snprintf(addr.host, sizeof(addr.host), "fd00:1234::42");
    CHECK_OK_EXIT(swy_boot_id_encode(&addr, &id), NULL);
    CHECK_OK_EXIT(swy_boot_id_decode(&id, &back), NULL);
    CHECK_EXIT(strcmp(back.host, "fd00:1234::42") == 0);

    /* Bad magic and bad version are rejected; the output is untouched. */
    swy_unique_id_t bad = id;
    bad.bytes[0] = 'X';
    swy_boot_addr_t untouched;
    memset(&untouched, 0x5a, sizeof(untouched));
    CHECK_EXIT(swy_boot_id_decode(&bad, &untouched) == SWY_ERR_INVALID_ARG);
    CHECK_EXIT(strstr(swy_err_last(), "magic") != NULL);
    CHECK_EXIT(((uint8_t *)&untouched)[0] == 0x5a);
    bad = id;
    bad.bytes[5] = 7;
    CHECK_EXIT(swy_boot_id_decode(&bad, &untouched) == SWY_ERR_INVALID_ARG);
    CHECK_EXIT(strstr(swy_err_last(), "version 7") != NULL);
    swy_unique_id_t zero;
    memset(&zero, 0, sizeof(zero));
    CHECK_EXIT(swy_boot_id_decode(&zero, &untouched) == SWY_ERR_INVALID_ARG);
}

static void test_parse_hostport(void)
{
    char host[64];
    uint16_t port = 0;
    CHECK_OK_EXIT(swy_boot_parse_hostport("127.0.0.1:29500", host, sizeof(host),
                                          &port), NULL);
    CHECK_EXIT(strcmp(host, "127.0.0.1") == 0 && port == 29500);
    CHECK_OK_EXIT(
        swy_boot_parse_hostport("[::1]:80", host, sizeof(host), &port), NULL);
    CHECK_EXIT(strcmp(host, "::1") == 0 && port == 80);
    CHECK_OK_EXIT(swy_boot_parse_hostport("localhost:1234", host, sizeof(host),
                                          &port), NULL);
    CHECK_EXIT((strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0) &&
               port == 1234);

    const char *bad[] = {"127.0.0.1",      "127.0.0.1:",  "127.0.0.1:0",
                         "127.0.0.1:70000", "::1:80",     "[::1]80",
                         ":80",             "1.2.3.4:8x", "[::1:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (swy_boot_parse_hostport(bad[i], host, sizeof(host), &port) !=
            SWY_ERR_INVALID_ARG) {
            fprintf(stderr, "\"%s\" was accepted\n", bad[i]);
            exit(1);
        }
    }
    CHECK_EXIT(swy_boot_parse_hostport("no-such-host.invalid:80", host,
                                       sizeof(host),
                                       &port) == SWY_ERR_INVALID_ARG);
}

int main(void)
{
    test_sha256();
    test_secret_derivation();
    test_id_roundtrip();
    test_parse_hostport();
    printf("boot id: ok\n");
    return 0;
}
