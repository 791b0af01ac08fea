/* _shoal.h — what the C files of the Python module `shoal._shoal` share: the exception
 * classes, buffers seen through the buffer protocol, the Ctrl-C watcher, the types.
 * Not here: the Python-level package (python/shoal/).
 * Proved by tests/python/ (make test runs them). */
#ifndef SH_PY_SHOAL_H
#define SH_PY_SHOAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

#include "shoal/comm.h"

/* shoal.Error and its subclasses (set up by _shoal.c). */
extern PyObject *sh_py_Error, *sh_py_PeerError, *sh_py_TimeoutError, *sh_py_MismatchError,
    *sh_py_InvalidError, *sh_py_FormatError, *sh_py_BrokenError;

/* Raise the exception class of rc with shoal's last error message of this thread; NULL. */
PyObject *sh_py_raise(shoal_result rc);
/* The same with the message given (a message saved on another thread). */
PyObject *sh_py_raise_msg(shoal_result rc, const char *msg);

/* A buffer-protocol object seen as count elements of dt, C-contiguous, in place. */
typedef struct {
    Py_buffer view;
    int held;          /* view must be released */
    shoal_dtype dt;
    size_t count;
} sh_py_buf;

enum { SH_PY_READ = 0, SH_PY_WRITE = 1 };
/* Look at obj: numpy arrays, bytearray, memoryview, anything with the buffer protocol, and
 * (through the adapter shoal/__init__.py registers) torch CPU tensors. A non-contiguous or
 * (for SH_PY_WRITE) read-only buffer, or an element type shoal lacks, is a ValueError naming
 * `what` (the call and argument). dt_override >= 0 reads the elements as that dtype (bfloat16
 * in a 2-byte buffer). Returns 0, or -1 with the exception set. */
int sh_py_buf_get(PyObject *obj, int mode, int dt_override, const char *what, sh_py_buf *b);
void sh_py_buf_release(sh_py_buf *b);
/* "sum", "avg", "min", "max", "prod" (or a shoal_op int) into *op; -1 with ValueError. */
int sh_py_op_parse(PyObject *o, shoal_op *op);
/* A dtype name ("float32", "bfloat16", ...) or None (-1) into *dt; -1 with ValueError. */
int sh_py_dtype_parse(PyObject *o, int *dt);

/* A buffer-protocol view of memory the library owns (a net's parameters, a compressor's
 * residual): numpy.asarray(view) is a zero-copy array that keeps owner alive. 1-D, count
 * elements of fmt ("f": float32). */
PyObject *sh_py_view_new(PyObject *owner, void *ptr, Py_ssize_t count, const char *fmt, Py_ssize_t itemsize,
                         int readonly);

/* Ctrl-C during a call that may wait on other ranks: the watcher thread (started by
 * sh_py_watch_start, on Python's signal wakeup fd) aborts the communicator the main thread
 * is in, so the call returns at once; the caller then raises KeyboardInterrupt.
 * enter/leave bracket the call (the GIL released); leave returns 1 when the call was
 * interrupted (the communicator is then aborted). Threads other than the main one are not
 * interrupted (Python delivers signals to the main thread only). */
void sh_py_watch_start(void);
void sh_py_watch_enter(shoal_comm *c);
int sh_py_watch_leave(void);

/* shoal._shoal.Comm and Handle (_shoal_comm.c), Compressor (_shoal_compress.c), Net
 * (_shoal_net.c), train_run (_shoal_train.c). Each adds its types and functions to the module; -1 on error. */
int sh_py_comm_add(PyObject *m);
int sh_py_compress_add(PyObject *m);
int sh_py_net_add(PyObject *m);
int sh_py_train_add(PyObject *m);
int sh_py_window_add(PyObject *m); /* window() and SharedBuffer (_shoal_window.c) */

/* The communicator inside a shoal._shoal.Comm, locked for one call: one thread at a time
 * may call on a shoal_comm (comm.h). NULL with the exception set when it is closed or was
 * interrupted. Unlock with sh_py_comm_unlock. */
typedef struct sh_py_comm sh_py_comm;
extern PyTypeObject sh_py_CommType;
shoal_comm *sh_py_comm_lock(PyObject *comm, const char *what);
void sh_py_comm_unlock(PyObject *comm);
/* After an interrupted call: the Comm refuses further calls, naming what was interrupted. */
void sh_py_comm_mark_interrupted(PyObject *comm, const char *what);
/* The common end of a call that waited with the GIL released: rc, whether the watcher
 * interrupted it, and the error message saved right after the call. Returns 0 on success,
 * -1 with KeyboardInterrupt (or shoal.Error) set. */
int sh_py_comm_finish(PyObject *comm, const char *what, shoal_result rc, int interrupted, const char *msg);

/* For work done on another thread (a compressor's started allreduce): pin keeps the
 * communicator alive past close() until unpin (called without the GIL, the work done), and
 * the mutex serialises that thread's calls with the others'. pin: NULL with the exception
 * set when the Comm is closed or interrupted. */
shoal_comm *sh_py_comm_pin(PyObject *comm, const char *what);
void sh_py_comm_unpin(PyObject *comm);
pthread_mutex_t *sh_py_comm_mutex(PyObject *comm);

#endif
