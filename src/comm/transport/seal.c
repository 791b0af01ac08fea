/* seal.c — sealed links: the byte stream cut into AES-256-GCM records (libcrypto EVP) under the
 * direction's key, the nonce a record count both sides keep; a record's plaintext released only
 * after its tag checks, decrypted in place where reductions read it (recv_peek).
 * Not here: keys' secrecy (the job key), the handshake (boot/sock.c), connecting (tcp.c).
 * Proved by tests/comm/test_seal.c. */
#include "comm/transport/seal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "base/err.h"

/* Record: len u32 (plaintext bytes, 1..SH_SEAL_RECORD_NBYTES; also the record's AAD) |
 * ciphertext | tag[16], with the nonce 0^32 | record number (64 bits, big-endian), counted by
 * both sides and never sent: a replayed, dropped or reordered record decrypts under the wrong
 * nonce and fails its tag. A send seals one record at a time and reports its bytes once the
 * kernel took the whole record, so nothing sealed is left behind when an operation ends. */

enum { HDR = 4, TAG = 16, IV = 12, MAX_WIRE = HDR + SH_SEAL_RECORD_NBYTES + TAG };
/* The buffers: a record starts at FRONT, so its ciphertext and plaintext are 64-byte
 * aligned (for the cipher and the reduction kernels); AHEAD bytes past a header are read
 * with it, so a small record comes in one recv. */
enum { FRONT = 64 - HDR, AHEAD = 60, IN_NBYTES = FRONT + MAX_WIRE + HDR + AHEAD };

typedef struct {
    EVP_CIPHER_CTX *enc, *dec;
    uint64_t send_seq, recv_seq;
    /* the record being sent: out[out_off .. out_nbytes) still to go; it carries out_plain
     * bytes of the caller's buffer at out_src */
    unsigned char *out, *out_mem; /* out = out_mem + FRONT: the ciphertext 64-byte aligned */
    size_t out_off, out_nbytes, out_plain;
    const void *out_src;
    /* received bytes in[rd .. wr); a record whose tag checked is plaintext at
     * in[plain_off .. plain_end), and the record ends at rec_end */
    unsigned char *in;
    size_t rd, wr, plain_off, plain_end, rec_end;
    int have_plain;
    uint64_t flip_record; /* tests: UINT64_MAX = none */
} seal;

shoal_result sh_seal_derive(const char *job_key, const sh_auth_nonces *n, const char *context,
                            int is_client, sh_seal_keys *out)
{
    static const char label[] = "shoal seal v1";
    unsigned char salt[64], info[sizeof label + SH_AUTH_CTX_NBYTES], okm[2 * SH_SEAL_KEY_NBYTES];
    memcpy(salt, n->client, 32);
    memcpy(salt + 32, n->server, 32);
    size_t clen = strnlen(context, SH_AUTH_CTX_NBYTES);
    memcpy(info, label, sizeof label); /* with its NUL: the label ends where the context starts */
    memcpy(info + sizeof label, context, clen);
    size_t okm_nbytes = sizeof okm;
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = pc && EVP_PKEY_derive_init(pc) > 0 && EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, (int)sizeof salt) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(pc, (const unsigned char *)job_key, (int)strlen(job_key)) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)(sizeof label + clen)) > 0 &&
             EVP_PKEY_derive(pc, okm, &okm_nbytes) > 0 && okm_nbytes == sizeof okm;
    EVP_PKEY_CTX_free(pc);
    if (!ok) return SH_FAIL(SHOAL_ERR_INTERNAL, "HKDF-SHA256 failed in libcrypto");
    const unsigned char *c2s = okm, *s2c = okm + SH_SEAL_KEY_NBYTES;
    memcpy(out->send, is_client ? c2s : s2c, SH_SEAL_KEY_NBYTES);
    memcpy(out->recv, is_client ? s2c : c2s, SH_SEAL_KEY_NBYTES);
    OPENSSL_cleanse(okm, sizeof okm);
    return SHOAL_OK;
}

static void iv_of(uint64_t seq, unsigned char iv[IV])
{
    memset(iv, 0, 4);
    for (int i = 0; i < 8; i++) iv[4 + i] = (unsigned char)(seq >> (56 - 8 * i));
}

/* Seal n bytes of src as the next record into s->out. */
static int seal_record(seal *s, const unsigned char *src, size_t n)
{
    unsigned char iv[IV], *hdr = s->out, *ct = s->out + HDR;
    uint32_t len = (uint32_t)n;
    memcpy(hdr, &len, HDR);
    iv_of(s->send_seq, iv);
    int outl = 0, finl = 0;
    if (EVP_EncryptInit_ex(s->enc, NULL, NULL, NULL, iv) != 1 ||
        EVP_EncryptUpdate(s->enc, NULL, &outl, hdr, HDR) != 1 ||
        EVP_EncryptUpdate(s->enc, ct, &outl, src, (int)n) != 1 ||
        EVP_EncryptFinal_ex(s->enc, ct + outl, &finl) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->enc, EVP_CTRL_GCM_GET_TAG, TAG, ct + n) != 1)
        return -1;
    if (s->send_seq == s->flip_record) ct[n / 2] ^= 0x20;
    s->send_seq++;
    s->out_off = 0;
    s->out_nbytes = HDR + n + TAG;
    return 0;
}

/* Hand the record in flight to the kernel; 1 when all of it went, 0 when some waits, -1. */
static int flush(sh_link *l, seal *s)
{
    while (s->out_off < s->out_nbytes) {
        ssize_t n = send(l->fd, s->out + s->out_off, s->out_nbytes - s->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            s->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        SH_FAIL(SHOAL_ERR_PEER, "connection lost (%s)", n < 0 ? strerror(errno) : "send returned 0");
        return -1;
    }
    return 1;
}

static ssize_t seal_send_some(sh_link *l, const void *buf, size_t nbytes)
{
    seal *s = l->impl;
    if (s->out_off < s->out_nbytes) { /* a record in flight: it carries this buf's first bytes */
        int f = flush(l, s);
        if (f <= 0) return f;
        size_t k = s->out_plain;
        s->out_plain = 0;
        if (buf == s->out_src) return (ssize_t)k;
        /* else an operation that gave up left it: its bytes went; start on this one */
    }
    if (nbytes == 0) return 0;
    size_t k = nbytes < SH_SEAL_RECORD_NBYTES ? nbytes : SH_SEAL_RECORD_NBYTES;
    if (seal_record(s, buf, k) != 0) {
        SH_FAIL(SHOAL_ERR_INTERNAL, "AES-256-GCM sealing failed in libcrypto");
        return -1;
    }
    int f = flush(l, s);
    if (f < 0) return -1;
    if (f == 1) return (ssize_t)k;
    s->out_src = buf;
    s->out_plain = k;
    return 0;
}

/* Make the next record's plaintext available: 1 when there is some, 0 when more bytes must
 * arrive first, -1 after sh_fail() (the peer left, or a record failed). */
static int ready(sh_link *l, seal *s)
{
    if (s->have_plain) {
        if (s->plain_off < s->plain_end) return 1;
        s->have_plain = 0;
        s->rd = s->rec_end;
    }
    for (;;) {
        size_t have = s->wr - s->rd, need = HDR;
        if (have >= HDR) {
            uint32_t len;
            memcpy(&len, s->in + s->rd, HDR);
            if (len == 0 || len > SH_SEAL_RECORD_NBYTES) {
                SH_FAIL(SHOAL_ERR_PEER, "record %llu on the wire is malformed (length %u; a sealed link "
                        "carries 1..%d bytes a record): tampered with, or the peer does not run "
                        "SHOAL_SECURE=1", (unsigned long long)s->recv_seq, len, SH_SEAL_RECORD_NBYTES);
                return -1;
            }
            need = HDR + len + TAG;
            if (have >= need) {
                unsigned char iv[IV], *p = s->in + s->rd;
                iv_of(s->recv_seq, iv);
                int outl = 0, finl = 0;
                int ok = EVP_DecryptInit_ex(s->dec, NULL, NULL, NULL, iv) == 1 &&
                         EVP_DecryptUpdate(s->dec, NULL, &outl, p, HDR) == 1 &&
                         EVP_DecryptUpdate(s->dec, p + HDR, &outl, p + HDR, (int)len) == 1 &&
                         EVP_CIPHER_CTX_ctrl(s->dec, EVP_CTRL_GCM_SET_TAG, TAG, p + HDR + len) == 1 &&
                         EVP_DecryptFinal_ex(s->dec, p + HDR + outl, &finl) == 1;
                if (!ok) {
                    SH_FAIL(SHOAL_ERR_PEER, "record %llu (%u bytes) failed authentication: changed, "
                            "replayed or reordered on the wire (SHOAL_SECURE)",
                            (unsigned long long)s->recv_seq, len);
                    return -1;
                }
                s->recv_seq++;
                s->plain_off = s->rd + HDR;
                s->plain_end = s->plain_off + len;
                s->rec_end = s->rd + need;
                s->have_plain = 1;
                return 1;
            }
        }
        if (s->rd != FRONT) { /* a few bytes past the last record: they go in front */
            memmove(s->in + FRONT, s->in + s->rd, have);
            s->wr = FRONT + have;
            s->rd = FRONT;
        }
        /* Read up to this record's end and the next one's header, no further (or, not
         * knowing the length yet, a header and AHEAD bytes): the buffer then holds one
         * record and a few bytes at most. */
        size_t want = need > HDR ? need - have + HDR : HDR - have + AHEAD;
        ssize_t n = recv(l->fd, s->in + s->wr, want, MSG_DONTWAIT);
        if (n > 0) {
            s->wr += (size_t)n;
            continue;
        }
        if (n == 0) {
            SH_FAIL(SHOAL_ERR_PEER, have ? "connection closed by the peer in the middle of a record"
                                         : "connection closed by the peer");
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        SH_FAIL(SHOAL_ERR_PEER, "connection lost (%s)", strerror(errno));
        return -1;
    }
}

static ssize_t seal_recv_some(sh_link *l, void *buf, size_t nbytes)
{
    seal *s = l->impl;
    size_t got = 0;
    while (got < nbytes) {
        int r = ready(l, s);
        if (r < 0) return -1;
        if (r == 0) break;
        size_t n = s->plain_end - s->plain_off;
        if (n > nbytes - got) n = nbytes - got;
        memcpy((unsigned char *)buf + got, s->in + s->plain_off, n);
        s->plain_off += n;
        got += n;
    }
    return (ssize_t)got;
}

static const void *seal_recv_peek(sh_link *l, size_t *nbytes)
{
    seal *s = l->impl;
    *nbytes = 0;
    int r = ready(l, s);
    if (r < 0) return NULL;
    if (r == 0) return s->in;
    *nbytes = s->plain_end - s->plain_off;
    return s->in + s->plain_off;
}

static void seal_recv_consume(sh_link *l, size_t nbytes)
{
    seal *s = l->impl;
    SH_ASSERT(s->have_plain && nbytes <= s->plain_end - s->plain_off);
    s->plain_off += nbytes;
}

static void seal_abort(sh_link *l, const char *reason)
{
    (void)reason;
    shutdown(l->fd, SHUT_RDWR);
}

static void seal_free(seal *s)
{
    if (!s) return;
    EVP_CIPHER_CTX_free(s->enc);
    EVP_CIPHER_CTX_free(s->dec);
    free(s->out_mem);
    free(s->in);
    free(s);
}

static void seal_close(sh_link *l)
{
    close(l->fd);
    seal_free(l->impl);
    free(l);
}

static const sh_link_ops seal_ops = {
    .name = "tcp",
    .send_some = seal_send_some,
    .recv_some = seal_recv_some,
    .recv_peek = seal_recv_peek,
    .recv_consume = seal_recv_consume,
    .abort = seal_abort,
    .close = seal_close,
};

shoal_result sh_seal_link_create(int fd, int peer, const sh_seal_keys *k, sh_link **out)
{
    *out = NULL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return SH_FAIL(SHOAL_ERR_IO, "cannot make socket non-blocking: %s", strerror(e));
    }
    seal *s = calloc(1, sizeof *s);
    sh_link *l = calloc(1, sizeof *l);
    if (s) {
        s->enc = EVP_CIPHER_CTX_new();
        s->dec = EVP_CIPHER_CTX_new();
        void *in = NULL, *outm = NULL;
        if (posix_memalign(&in, 64, IN_NBYTES) == 0) s->in = in;
        if (posix_memalign(&outm, 64, FRONT + MAX_WIRE) == 0) s->out_mem = outm, s->out = s->out_mem + FRONT;
        s->rd = s->wr = FRONT;
        s->flip_record = UINT64_MAX;
    }
    if (!l || !s || !s->enc || !s->dec || !s->out || !s->in) {
        close(fd);
        seal_free(s);
        free(l);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for a sealed link");
    }
    /* The key is set once; each record then sets only its nonce. */
    if (EVP_EncryptInit_ex(s->enc, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->enc, EVP_CTRL_GCM_SET_IVLEN, IV, NULL) != 1 ||
        EVP_EncryptInit_ex(s->enc, NULL, NULL, k->send, NULL) != 1 ||
        EVP_DecryptInit_ex(s->dec, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->dec, EVP_CTRL_GCM_SET_IVLEN, IV, NULL) != 1 ||
        EVP_DecryptInit_ex(s->dec, NULL, NULL, k->recv, NULL) != 1) {
        close(fd);
        seal_free(s);
        free(l);
        return SH_FAIL(SHOAL_ERR_INTERNAL, "AES-256-GCM setup failed in libcrypto");
    }
    l->ops = &seal_ops;
    l->peer = peer;
    l->fd = fd;
    l->impl = s;
    *out = l;
    return SHOAL_OK;
}

int sh_seal_is_sealed(const sh_link *l) { return l && l->ops == &seal_ops; }

void sh_seal_test_flip(sh_link *l, uint64_t record)
{
    SH_ASSERT(l->ops == &seal_ops);
    ((seal *)l->impl)->flip_record = record;
}
