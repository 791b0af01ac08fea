/* tfrecord.h — a reader of TensorBoard event files for tests, written from the formats'
 * specifications (TFRecord framing with masked CRC-32C; the Event, Summary and
 * HistogramProto protobuf messages) without shoal's code: its own CRC-32C, varints and
 * fields. Not here: writing (src/io/tb_events.c). Used by tests/cli/test_train_logdir.c,
 * test_train_pipeline.c, test_train_hybrid.c and tests/io/test_tb_events.c. */
#ifndef SH_TEST_TFRECORD_H
#define SH_TEST_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#define TBR_BUCKETS_MAX 256

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[32];
    char tag[256];          /* of the summary's (first) value; "" when none */
    int has_value;
    float value;            /* simple_value */
    int has_histo;
    double hmin, hmax, hnum, hsum, hsum_sq;
    int nlimits, ncounts;
    double limit[TBR_BUCKETS_MAX], count[TBR_BUCKETS_MAX];
} tbr_event;

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit. */
uint32_t tbr_crc32c(const void *data, size_t nbytes);

/* Every record of the file, checked (lengths, both masked CRCs) and decoded into a malloc'd
 * array (*out, the caller frees). Returns the count, or -1 with the reason in err. */
int tbr_read_file(const char *path, tbr_event **out, char *err, size_t err_nbytes);
/* The same for every events.out.tfevents.* file of dir, appended in name order; *nfiles
 * says how many files there were. A --logdir holding one run's folder and no events of its
 * own (shoal train's layout: DIR/<run-name>) is read through that folder; with several it is
 * an error. */
int tbr_read_dir(const char *dir, tbr_event **out, int *nfiles, char *err, size_t err_nbytes);

/* The scalar `tag` at steps lo..hi of two log directories: 1 when every step is in both
 * and the values agree within rel of the first's, else 0 with the first difference (or the
 * read error) in why. */
int tbr_same_scalars(const char *dir_a, const char *dir_b, const char *tag, int64_t lo, int64_t hi, double rel,
                     char *why, size_t why_nbytes);

#endif
