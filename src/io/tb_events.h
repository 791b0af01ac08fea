/* tb_events.h — TensorBoard event files: scalars (loss, accuracy, learning rate, throughput,
 * communication) and histograms (weights and gradients per layer) written as
 * TFRecords of hand-encoded Event protobufs, readable by TensorBoard without TensorFlow.
 * Not here: what to log (the trainer), the progress line (progress.h).
 * Proved by tests/io/test_tb_events.c. */
#ifndef SH_TB_EVENTS_H
#define SH_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

typedef struct sh_tb sh_tb;

/* Create dir (and its parents) when missing and open a new event file in it named
 * events.out.tfevents.<unix seconds>.<host> (".<n>" appended when that name is taken), then
 * write the first record, file_version "brain.Event:2". The caller owns *out; close it with
 * sh_tb_close. Errors: SHOAL_ERR_IO naming the path. Not thread safe: one writer per handle. */
shoal_result sh_tb_open(const char *dir, sh_tb **out);
/* Append one scalar: Event{wall_time = now, step, summary{value{tag, simple_value}}}. The
 * record is flushed to the kernel at once, so TensorBoard sees it while the run goes on. */
shoal_result sh_tb_scalar(sh_tb *tb, const char *tag, int64_t step, float value);
/* Append one histogram of count values (NaN and inf left out): min, max, num, sum,
 * sum_squares and 30 equal-width buckets between min and max, as TensorBoard's
 * HistogramProto. Same errors as sh_tb_scalar. */
shoal_result sh_tb_histogram(sh_tb *tb, const char *tag, int64_t step, const float *v, size_t count);
/* on = 0: records stay in the stdio buffer until sh_tb_flush (a writer of many records per
 * step flushes once per step); on = 1 (the default): each record is flushed at once. */
void sh_tb_set_autoflush(sh_tb *tb, int on);
shoal_result sh_tb_flush(sh_tb *tb);
/* Path of the event file, for messages ("logging to ..."). */
const char *sh_tb_path(const sh_tb *tb);
/* Flush and close; NULL is fine. */
void sh_tb_close(sh_tb *tb);

/* TFRecord's masked CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t sh_tb_masked_crc(const void *data, size_t nbytes);

#endif
