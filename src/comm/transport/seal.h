/* seal.h — sealed links (SHOAL_SECURE=1): a TCP link whose bytes travel in AES-256-GCM
 * records, with keys of the connection's own derived from the job key and both handshake
 * nonces, one key per direction, and each direction's record number as the GCM nonce, so a
 * changed, replayed, dropped or reordered record fails the tag check.
 * Not here: the handshake (boot/sock.c), making connections (tcp.c), moving bytes on
 * several links at once (xfer.c).
 * Proved by tests/comm/test_seal.c. */
#ifndef SH_COMM_SEAL_H
#define SH_COMM_SEAL_H

#include <stdint.h>

#include "comm/boot/sock.h"
#include "comm/transport/link.h"

/* Plaintext bytes per record at most: large enough that the per-record cost (a header, a
 * tag, the cipher's setup) is small beside the bytes, small enough that a receiver can
 * start on a record while the next is on the wire. */
enum { SH_SEAL_RECORD_NBYTES = 64 << 10, SH_SEAL_KEY_NBYTES = 32 };

typedef struct {
    unsigned char send[SH_SEAL_KEY_NBYTES], recv[SH_SEAL_KEY_NBYTES];
} sh_seal_keys;

/* HKDF-SHA256 (libcrypto): secret the job key, salt the client's then the server's nonce,
 * info "shoal seal v1" and the handshake's context; 64 bytes out, the client's sending key
 * then the server's. is_client says which side this is. Errors: SHOAL_ERR_INTERNAL when
 * libcrypto fails. */
shoal_result sh_seal_derive(const char *job_key, const sh_auth_nonces *n, const char *context,
                            int is_client, sh_seal_keys *out);

/* A sealed link over a connected stream socket; takes ownership of fd (closed on error
 * too) and makes it non-blocking. A record that fails authentication, or is malformed, is
 * SHOAL_ERR_PEER ("record N ... failed authentication"), which xfer.c and p2p.c prefix with
 * the operation and the peer's name. */
shoal_result sh_seal_link_create(int fd, int peer, const sh_seal_keys *k, sh_link **out);

/* 1 when l is a sealed link. */
int sh_seal_is_sealed(const sh_link *l);

/* Tests only: flip one byte of the ciphertext of this link's record number `record`
 * (counted from 0) after sealing it, as a relay on the wire would. */
void sh_seal_test_flip(sh_link *l, uint64_t record);

#endif
