/* result.h — the one result enum of the whole project, and how to read the last error.
 * Not here: how errors are raised inside shoal (src/base/err.h).
 * Proved by tests/base/test_err.c. */
#ifndef SHOAL_RESULT_H
#define SHOAL_RESULT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHOAL_OK = 0,
    SHOAL_ERR_INVALID,   /* the caller passed something wrong */
    SHOAL_ERR_NOMEM,
    SHOAL_ERR_IO,        /* a local file or socket call failed */
    SHOAL_ERR_TIMEOUT,   /* a deadline passed */
    SHOAL_ERR_PEER,      /* another rank died or hung up */
    SHOAL_ERR_MISMATCH,  /* ranks disagree: count, dtype, op order */
    SHOAL_ERR_FORMAT,    /* bad cfg, dataset or checkpoint */
    SHOAL_ERR_BROKEN,    /* communicator already failed; destroy it */
    SHOAL_ERR_INTERNAL,  /* a shoal bug */
    SHOAL_ERR_INTERRUPTED, /* stopped on request (SIGINT); state was saved */
    SHOAL_ERR_UNSUPPORTED  /* not possible here (e.g. shared windows across hosts); go on without */
} shoal_result;

/* Short name of a result ("SHOAL_ERR_TIMEOUT"); never NULL. */
const char *shoal_result_name(shoal_result rc);

/* The calling thread's last error: the message of the place that detected it, with its
 * source location, then one "from file:line" breadcrumb per caller that passed it up.
 * Empty string when there was none. Valid until the thread's next shoal call. */
const char *shoal_last_error(void);

/* Only the message of the last error, without locations: what a user should read. */
const char *shoal_last_error_message(void);

#ifdef __cplusplus
}
#endif
#endif
