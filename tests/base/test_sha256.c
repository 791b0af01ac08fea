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

/* The rest of RFC 4231 (cases 3, 4, 5 truncated to 128 bits, 7). */
static void hmac_rfc4231_remaining_cases(void)
{
    unsigned char key[131], msg[160], d[32];
    char h[65];
    memset(key, 0xaa, 20);
    memset(msg, 0xdd, 50);
    sh_hmac_sha256(key, 20, msg, 50, d);
    hex(d, h);
    CHECK(strcmp(h, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe") == 0, "case 3: %s", h);
    for (int i = 0; i < 25; i++) key[i] = (unsigned char)(i + 1);
    memset(msg, 0xcd, 50);
    sh_hmac_sha256(key, 25, msg, 50, d);
    hex(d, h);
    CHECK(strcmp(h, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b") == 0, "case 4: %s", h);
    memset(key, 0x0c, 20);
    sh_hmac_sha256(key, 20, "Test With Truncation", 20, d);
    hex(d, h);
    CHECK(strncmp(h, "a3b6167473100ee06e0c796c2955552b", 32) == 0, "case 5: %s", h);
    memset(key, 0xaa, 131);
    const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. "
                     "The key needs to be hashed before being used by the HMAC algorithm.";
    sh_hmac_sha256(key, 131, m7, strlen(m7), d);
    hex(d, h);
    CHECK(strcmp(h, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2") == 0, "case 7: %s", h);
}

/* Lengths around the 64-byte block and the 56-byte padding edge (values from Python's
 * hashlib), each fed whole and byte by byte. */
static void sha256_block_edges_whole_and_in_pieces(void)
{
    struct { size_t n; const char *want; } v[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
        {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
    };
    char a[128];
    memset(a, 'a', sizeof a);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sh_sha256 s;
        unsigned char d[32];
        char h[65];
        sh_sha256_init(&s);
        sh_sha256_update(&s, a, v[i].n);
        sh_sha256_final(&s, d);
        hex(d, h);
        CHECK(strcmp(h, v[i].want) == 0, "%zu bytes whole: %s", v[i].n, h);
        sh_sha256_init(&s);
        for (size_t k = 0; k < v[i].n; k++) sh_sha256_update(&s, a + k, 1);
        sh_sha256_final(&s, d);
        hex(d, h);
        CHECK(strcmp(h, v[i].want) == 0, "%zu bytes one by one: %s", v[i].n, h);
    }
    /* FIPS 180-4's 896-bit message (two blocks after padding) */
    const char *m = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                    "klmnopqrlmnopqrsmnopqrstnopqrstu";
    sh_sha256 s;
    unsigned char d[32];
    char h[65];
    sh_sha256_init(&s);
    sh_sha256_update(&s, m, strlen(m));
    sh_sha256_final(&s, d);
    hex(d, h);
    CHECK(strcmp(h, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0, "896-bit: %s", h);
}

int main(void)
{
    check_begin("test_sha256", 30);
    RUN(sha256_vectors);
    RUN(hmac_rfc4231);
    RUN(hmac_rfc4231_remaining_cases);
    RUN(sha256_block_edges_whole_and_in_pieces);
    return check_end();
}
