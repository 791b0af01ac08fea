/* codec.h — the encoders and decoders of the compressed allreduce, and the compressor that
 * carries a buffer's error-feedback residual and lowrank's Q from call to call.
 * Not here: moving payloads between ranks (allreduce.c), the public declarations
 * (include/shoal/comm.h).
 * Proved by tests/comm/test_compress.c. */
#ifndef SH_COMPRESS_CODEC_H
#define SH_COMPRESS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/comm.h"

struct shoal_compressor {
    uint64_t magic;
    shoal_codec_opts o;
    size_t count;         /* elements per call */
    size_t cols, rows;    /* the buffer as a rows x cols matrix (1bit groups are its rows) */
    size_t k;             /* topk: entries sent */
    int rank;             /* lowrank: min(R, rows, cols) */
    int lowrank_dense;    /* lowrank where R (rows + cols) >= rows x cols: float32 instead */
    float *state;         /* residual (count), then Q (cols x rank) for lowrank */
    size_t state_count;
    float *work;          /* (count) input plus residual; NULL for 1bit */
    float *mags;          /* (count) lowrank: the approximation sent point to point */
    uint32_t *hist;       /* topk: 65536 counts for the selection */
    float *pq;            /* lowrank: P (rows x rank) then Q (cols x rank) of this rank */
    uint8_t *mine;        /* this rank's payload */
    uint8_t *all;         /* every rank's payload, rank order */
    size_t all_cap;       /* bytes allocated at all */
    double residual_norm;
};

#define SH_COMPRESSOR_MAGIC 0x73686f616c637a31ULL /* "shoalcz1" */

/* Bytes of one rank's payload for the allgather codecs (1bit, topk, dense lowrank). */
size_t sh_codec_payload_nbytes(const shoal_compressor *z);

/* 1bit: encode send (count) plus the residual into out (sh_codec_payload_nbytes); the
 * residual becomes what the decoded values miss (zero without error feedback), its norm
 * z->residual_norm. */
void sh_codec_1bit_encode(shoal_compressor *z, const float *send, uint8_t *out);
/* acc += decode(payload) */
void sh_codec_1bit_accumulate(const shoal_compressor *z, const uint8_t *payload, float *acc);
/* recv = decode(payload 0) + ... + decode(payload world - 1), added in rank order to 0
 * (then divided by world where mean): what a zeroed recv, sh_codec_1bit_accumulate of
 * each payload and the division give, bit for bit. Payload k is at all + k nbytes. */
void sh_codec_1bit_sum(const shoal_compressor *z, const uint8_t *all, size_t nbytes, int world, int mean,
                       float *recv);

/* topk: choose z->k entries of x by magnitude (ties: lower index; NaN above infinity),
 * into out as k uint32 indices (ascending) then k float values. The chosen entries of x
 * are set to 0 (x then holds the error). */
void sh_codec_topk_encode(shoal_compressor *z, float *x, uint8_t *out);
void sh_codec_topk_accumulate(const shoal_compressor *z, const uint8_t *payload, float *acc);

/* Lowrank helpers on row-major matrices, accumulating in double:
 * p (rows x r) = m (rows x cols) q (cols x r); q (cols x r) = m^T p; m = p q^T. */
void sh_codec_mat_mq(const float *m, const float *q, float *p, size_t rows, size_t cols, int r);
void sh_codec_mat_mtp(const float *m, const float *p, float *q, size_t rows, size_t cols, int r);
void sh_codec_mat_pqt(const float *p, const float *q, float *m, size_t rows, size_t cols, int r);
/* Orthonormalise the r columns of p (rows x r) by modified Gram-Schmidt; a column that
 * vanishes becomes zeros. */
void sh_codec_orthonormalize(float *p, size_t rows, int r);

#endif
