/* sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for proving job membership.
 * Not here: the handshake that uses them (src/comm/boot/sock.c).
 * Proved by tests/base/test_sha256.c (FIPS and RFC 4231 vectors). */
#ifndef SH_SHA256_H
#define SH_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t nbytes;
    unsigned char buf[64];
    size_t buf_nbytes;
} sh_sha256;

void sh_sha256_init(sh_sha256 *s);
void sh_sha256_update(sh_sha256 *s, const void *data, size_t nbytes);
void sh_sha256_final(sh_sha256 *s, unsigned char out[32]);
void sh_hmac_sha256(const void *key, size_t key_nbytes, const void *msg, size_t msg_nbytes,
                    unsigned char out[32]);
/* Constant-time comparison: 1 when equal. */
int sh_mem_equal_ct(const void *a, const void *b, size_t nbytes);

#endif
