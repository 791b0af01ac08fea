/* test_sha256.c — proves src/base/sha256.c against FIPS 180-4 and RFC 4231 vectors. */
#include "base/sha256.h"
#include "check.h"

static void hex(const unsigned char *d, char *out)
{
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha256_vectors(void)
{
    struct { const char *msg; const char *want; } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sh_sha256 s;
        unsigned char d[32];
        char h[65];
        sh_sha256_init(&s);
        sh_sha256_update(&s, v[i].msg, strlen(v[i].msg));
        sh_sha256_final(&s, d);
        hex(d, h);
        CHECK(strcmp(h, v[i].want) == 0, "sha256(\"%s\") = %s", v[i].msg, h);
    }
    /* a million 'a', fed in odd pieces */
    sh_sha256 s;
    unsigned char d[32];
    char h[65], a[977];
    memset(a, 'a', sizeof a);
    sh_sha256_init(&s);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof a ? left : sizeof a;
        sh_sha256_update(&s, a, n);
        left -= n;
    }
    sh_sha256_final(&s, d);
    hex(d, h);
    CHECK(strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0, "%s", h);
}

static void hmac_rfc4231(void)
{
    unsigned char key[20], d[32], big[131];
    char h[65];
    memset(key, 0x0b, sizeof key);
    sh_hmac_sha256(key, 20, "Hi There", 8, d);
    hex(d, h);
    CHECK(strcmp(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7") == 0, "%s", h);
    sh_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
    hex(d, h);
    CHECK(strcmp(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0, "%s", h);
    memset(big, 0xaa, sizeof big);
    const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
    sh_hmac_sha256(big, 131, m, strlen(m), d);
    hex(d, h);
    CHECK(strcmp(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54") == 0, "%s", h);
    CHECK(sh_mem_equal_ct("abc", "abc", 3) && !sh_mem_equal_ct("abc", "abd", 3), "ct compare");
}

int main(void)
{
    check_begin("test_sha256", 30);
    RUN(sha256_vectors);
    RUN(hmac_rfc4231);
    return check_end();
}
