/* ps_proto.h — the parameter server's messages: a 32-byte header, then floats.
 * Not here: who sends them when (ps_server.c, ps_client.c).
 * Proved by tests/train/test_ps.c. */
#ifndef SH_PS_PROTO_H
#define SH_PS_PROTO_H

#include <stdint.h>

enum { PS_MAGIC = 0x31535053 /* "SPS1" */, PS_TAG_TO_SERVER = 20480, PS_TAG_TO_WORKER = 20481 };
enum { PS_PULL = 1, PS_PUSH = 2, PS_BYE = 3, PS_PARAMS = 4, PS_ABORT = 5 };

typedef struct {
    uint32_t magic, kind;
    int64_t clock;   /* PULL, PUSH: the worker's clock (pushes done); PARAMS: the clock served */
    uint64_t offset; /* PUSH, PARAMS: first parameter of the shard */
    uint64_t count;  /* PUSH, PARAMS: floats that follow; ABORT: bytes of the message */
} ps_hdr;

#endif
