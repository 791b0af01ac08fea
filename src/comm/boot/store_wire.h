/* store_wire.h — the store's wire format, shared by its server (store_server.c) and its
 * client (store_client.c) only.
 * Not here: the calls the rest of comm makes (store.h).
 * Proved by tests/comm/test_store.c and tests/fuzz/fuzz_store.c. */
#ifndef SH_STORE_WIRE_H
#define SH_STORE_WIRE_H

#include "comm/boot/store.h"

/* Little-endian as the hosts are (all ranks run the same build):
 *   request: len u32 | op u8 | timeout_ms u32 | keylen u16 | key | value   (len counts from op)
 *   reply:   len u32 | status u8 | value                                   (len counts from status) */
enum { SH_STORE_OP_SET = 1, SH_STORE_OP_GET = 2, SH_STORE_OP_ADD = 3, SH_STORE_OP_CLAIM = 4 };
/* REFUSED: a claim refused (value: why). STOPPED: the job was stopped by a claim that
 * cannot be (value: why); every request gets it from then on. */
enum { SH_STORE_ST_OK = 0, SH_STORE_ST_TIMEOUT = 1, SH_STORE_ST_BAD = 2, SH_STORE_ST_REFUSED = 3,
       SH_STORE_ST_STOPPED = 4 };
/* A claim's value: rank i32 | world i32 | id u64 (random, the process's) | who (text). */
enum { SH_STORE_CLAIM_HDR_NBYTES = 16, SH_STORE_CLAIM_WHO_NBYTES = 160 };
enum {
    SH_STORE_MAX_KEY = 512,
    SH_STORE_MAX_FRAME = SH_STORE_MAX_VALUE_NBYTES + SH_STORE_MAX_KEY + 16 /* the largest request */
};

#endif
