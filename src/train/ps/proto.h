/* ps/proto.h — the parameter server's messages: a 32-byte header, then floats.
 * Not here: who sends them when (ps/server.c, ps/client.c).
 * Proved by tests/train/test_ps.c. */
#ifndef SH_PS_PROTO_H
#define SH_PS_PROTO_H

#include <stdint.h>

enum { PS_MAGIC = 0x31535053 /* "SPS1" */, PS_TAG_TO_SERVER = 20480, PS_TAG_TO_WORKER = 20481 };
/* BYE is answered by DONE once every lower worker has said goodbye or been dropped, so the
 * worker learns for sure whether it is the lead (the one that reports). While a pull or a
 * goodbye waits on other workers, HOLD every quarter SHOAL_TIMEOUT says the server lives. */
enum { PS_PULL = 1, PS_PUSH = 2, PS_BYE = 3, PS_PARAMS = 4, PS_ABORT = 5, PS_DONE = 6, PS_HOLD = 7 };
/* HELLO is a worker's first message to each server: its settings as text (count bytes,
 * sh_ps_settings_text); a server whose own differ stops the job (ABORT) naming the option. */
enum { PS_HELLO = 8 };
/* The longest text a message carries behind its header (HELLO's settings, ABORT's reason). */
#define PS_TEXT_MAX_NBYTES 12288

typedef struct {
    uint32_t magic, kind;
    int64_t clock;   /* PULL, PUSH: the worker's clock (pushes done); PARAMS: the clock served */
    uint64_t offset; /* PUSH, PARAMS: first parameter of the shard */
    uint64_t count;  /* PUSH, PARAMS: floats that follow; ABORT, HELLO: bytes of the text */
    int32_t lead;    /* PARAMS, DONE: the lowest worker this server has not dropped (-1: none) */
    int32_t pad[3];  /* 48 bytes: the floats behind a header stay 16-byte aligned. PUSH:
                        pad[0], pad[1] the codec (sh_ps_codec_words); PARAMS: pad[0], pad[1]
                        the server's rounds of updates (low, high 32 bits) */
} ps_hdr;
_Static_assert(sizeof(ps_hdr) % 16 == 0, "ps_hdr keeps the floats behind it aligned");

#endif
