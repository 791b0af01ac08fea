/* _shoal.c — the CPython extension module shoal._shoal: its exceptions (shoal.Error and
 * subclasses carrying shoal's message), buffers through the buffer protocol (dtype from the
 * format, contiguity, writability), op and dtype names, and the Ctrl-C watcher that aborts
 * the communicator a blocking call waits in.
 * Not here: the communicator's methods (_shoal_comm.c), compressors (_shoal_compress.c), the
 * network and the training job (_shoal_net.c), the Python package (python/shoal/).
 * Proved by tests/python/test_collectives.py and test_errors.py. */
#include "_shoal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

PyObject *sh_py_Error, *sh_py_PeerError, *sh_py_TimeoutError, *sh_py_MismatchError, *sh_py_InvalidError,
    *sh_py_FormatError, *sh_py_BrokenError;

/* ---- errors ---- */

static PyObject *class_of(shoal_result rc)
{
    switch (rc) {
    case SHOAL_ERR_PEER: return sh_py_PeerError;
    case SHOAL_ERR_TIMEOUT: return sh_py_TimeoutError;
    case SHOAL_ERR_MISMATCH: return sh_py_MismatchError;
    case SHOAL_ERR_INVALID: return sh_py_InvalidError;
    case SHOAL_ERR_FORMAT: return sh_py_FormatError;
    case SHOAL_ERR_BROKEN: return sh_py_BrokenError;
    case SHOAL_ERR_NOMEM: return PyExc_MemoryError;
    default: return sh_py_Error;
    }
}

PyObject *sh_py_raise_msg(shoal_result rc, const char *msg)
{
    PyObject *cls = class_of(rc);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg && msg[0] ? msg : shoal_result_name(rc));
    if (!exc) return NULL;
    if (cls != PyExc_MemoryError) {
        PyObject *code = PyUnicode_FromString(shoal_result_name(rc));
        if (code) PyObject_SetAttrString(exc, "code", code);
        Py_XDECREF(code);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *sh_py_raise(shoal_result rc) { return sh_py_raise_msg(rc, shoal_last_error_message()); }

/* ---- dtypes, ops ---- */

static const char *const dtype_names[SHOAL_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};

int sh_py_dtype_parse(PyObject *o, int *dt)
{
    *dt = -1;
    if (!o || o == Py_None) return 0;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    shoal_dtype d;
    if (!s || shoal_dtype_parse(s, &d) != SHOAL_OK) {
        PyErr_Format(PyExc_ValueError, "dtype %R: shoal takes int8, uint8, int32, int64, float16, bfloat16, "
                     "float32 or float64", o);
        return -1;
    }
    *dt = (int)d;
    return 0;
}

/* Interned at import: an op given as one of these literals is found by pointer. */
static PyObject *op_names[SHOAL_OP_COUNT];

int sh_py_op_parse(PyObject *o, shoal_op *op)
{
    for (int i = 0; i < SHOAL_OP_COUNT; i++)
        if (o == op_names[i]) {
            *op = (shoal_op)i;
            return 0;
        }
    if (PyUnicode_Check(o)) {
        for (int i = 0; i < SHOAL_OP_COUNT; i++)
            if (PyUnicode_Compare(o, op_names[i]) == 0) {
                *op = (shoal_op)i;
                return 0;
            }
        const char *s = PyUnicode_AsUTF8(o);
        if (s && (!strcmp(s, "average") || !strcmp(s, "mean"))) {
            *op = SHOAL_AVG;
            return 0;
        }
    } else if (PyLong_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v >= 0 && v < SHOAL_OP_COUNT) {
            *op = (shoal_op)v;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "op %R: use \"sum\", \"avg\", \"min\", \"max\" or \"prod\"", o);
    return -1;
}

/* ---- buffers ---- */

static PyObject *adapter; /* shoal/__init__.py's _adapt(obj) -> (buffer object, dtype name or None) */

static PyObject *set_adapter(PyObject *self, PyObject *fn)
{
    Py_XINCREF(fn);
    Py_XSETREF(adapter, fn);
    Py_RETURN_NONE;
}

/* The struct-module format of one element into a dtype; -1 when shoal has none. */
static int dtype_of_format(const char *f, Py_ssize_t itemsize)
{
    if (!f) return itemsize == 1 ? SHOAL_UINT8 : -1; /* no format: bytes */
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (!f[0] || f[1]) return -1;
    switch (f[0]) {
    case 'b': return itemsize == 1 ? SHOAL_INT8 : -1;
    case 'B': case 'c': return itemsize == 1 ? SHOAL_UINT8 : -1;
    case 'i': case 'l': case 'q':
        return itemsize == 4 ? SHOAL_INT32 : itemsize == 8 ? SHOAL_INT64 : -1;
    case 'e': return itemsize == 2 ? SHOAL_FLOAT16 : -1;
    case 'f': return itemsize == 4 ? SHOAL_FLOAT32 : -1;
    case 'd': return itemsize == 8 ? SHOAL_FLOAT64 : -1;
    default: return -1;
    }
}

static int view_of(PyObject *obj, int mode, int dt_override, const char *what, sh_py_buf *b)
{
    if (PyObject_GetBuffer(obj, &b->view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) return -1;
    b->held = 1;
    if (!PyBuffer_IsContiguous(&b->view, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s: the buffer is not C-contiguous (a slice or a transpose?); "
                     "shoal works in place on contiguous memory: pass numpy.ascontiguousarray(a) "
                     "or a.copy()", what);
        return -1;
    }
    if (mode == SH_PY_WRITE && b->view.readonly) {
        PyErr_Format(PyExc_ValueError, "%s: the buffer is read-only; shoal writes the result into it: "
                     "pass a writable array (a.copy(), or bytearray instead of bytes)", what);
        return -1;
    }
    int dt = dtype_of_format(b->view.format, b->view.itemsize);
    if (dt_override >= 0) {
        if ((size_t)b->view.itemsize != shoal_dtype_nbytes((shoal_dtype)dt_override) && !(dt == SHOAL_UINT8)) {
            PyErr_Format(PyExc_ValueError, "%s: dtype %s takes %zu-byte elements, the buffer has %zd-byte "
                         "ones", what, dtype_names[dt_override], shoal_dtype_nbytes((shoal_dtype)dt_override),
                         b->view.itemsize);
            return -1;
        }
        dt = dt_override;
    }
    if (dt < 0) {
        PyErr_Format(PyExc_ValueError, "%s: elements of format '%s' (%zd bytes) are not a type shoal "
                     "reduces: use int8, uint8, int32, int64, float16, float32 or float64 (bfloat16: "
                     "a 2-byte buffer with dtype=\"bfloat16\")", what,
                     b->view.format ? b->view.format : "B", b->view.itemsize);
        return -1;
    }
    size_t es = shoal_dtype_nbytes((shoal_dtype)dt);
    if ((size_t)b->view.len % es) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %s elements", what,
                     b->view.len, dtype_names[dt]);
        return -1;
    }
    b->dt = (shoal_dtype)dt;
    b->count = (size_t)b->view.len / es;
    return 0;
}

int sh_py_buf_get(PyObject *obj, int mode, int dt_override, const char *what, sh_py_buf *b)
{
    b->held = 0;
    if (PyObject_CheckBuffer(obj)) {
        if (view_of(obj, mode, dt_override, what, b) == 0) return 0;
        sh_py_buf_release(b);
        return -1;
    }
    if (!adapter || adapter == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: a %.100s has no buffer protocol; pass a numpy array, a torch "
                     "CPU tensor, a bytearray or a memoryview", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *r = PyObject_CallFunction(adapter, "Os", obj, what);
    if (!r) return -1;
    PyObject *inner = NULL, *dname = NULL;
    int dt = dt_override;
    if (!PyArg_ParseTuple(r, "OO", &inner, &dname) || (dt < 0 && sh_py_dtype_parse(dname, &dt) != 0)) {
        Py_DECREF(r);
        return -1;
    }
    int rc = view_of(inner, mode, dt, what, b);
    Py_DECREF(r); /* the view holds inner (its obj) */
    if (rc != 0) sh_py_buf_release(b);
    return rc;
}

void sh_py_buf_release(sh_py_buf *b)
{
    if (b->held) PyBuffer_Release(&b->view);
    b->held = 0;
}

/* ---- views of the library's memory ---- */

typedef struct {
    PyObject_HEAD
    PyObject *owner;
    void *ptr;
    Py_ssize_t count, itemsize;
    const char *fmt;
    int readonly;
} sh_py_view;

static int view_getbuffer(PyObject *self, Py_buffer *b, int flags)
{
    sh_py_view *v = (sh_py_view *)self;
    if (PyBuffer_FillInfo(b, self, v->ptr, v->count * v->itemsize, v->readonly, flags) != 0) return -1;
    b->itemsize = v->itemsize;
    if (flags & PyBUF_FORMAT) b->format = (char *)v->fmt;
    if (flags & PyBUF_ND) {
        b->ndim = 1;
        b->shape = &v->count;
        b->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? &b->itemsize : NULL;
    }
    return 0;
}

static void view_dealloc(PyObject *self)
{
    Py_XDECREF(((sh_py_view *)self)->owner);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs view_buffer = {view_getbuffer, NULL};

static PyTypeObject ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal._shoal.View",
    .tp_basicsize = sizeof(sh_py_view),
    .tp_dealloc = view_dealloc,
    .tp_as_buffer = &view_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "memory owned by the library, seen through the buffer protocol (numpy.asarray(view))",
};

PyObject *sh_py_view_new(PyObject *owner, void *ptr, Py_ssize_t count, const char *fmt, Py_ssize_t itemsize,
                         int readonly)
{
    sh_py_view *v = PyObject_New(sh_py_view, &ViewType);
    if (!v) return NULL;
    Py_INCREF(owner);
    v->owner = owner;
    v->ptr = ptr;
    v->count = count;
    v->itemsize = itemsize;
    v->fmt = fmt;
    v->readonly = readonly;
    return (PyObject *)v;
}

/* ---- the Ctrl-C watcher ---- */

/* The main thread publishes the communicator it waits in; the watcher, woken by Python's
 * signal handler through the wakeup fd, aborts it on SIGINT. Dekker's handshake (both sides
 * store, then load, sequentially consistent) keeps the watcher from touching a communicator
 * after the call left it: leave waits while an abort is under way. */
static _Atomic(shoal_comm *) watch_comm;
static atomic_int watch_busy, watch_hit, watch_on;
static pthread_t main_thread;
static int watch_rfd = -1, watch_wfd = -1;

static void *watch_main(void *arg)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        struct pollfd p = {watch_rfd, POLLIN, 0};
        if (poll(&p, 1, -1) < 0 && errno != EINTR) return NULL;
        unsigned char sig[64];
        ssize_t n = read(watch_rfd, sig, sizeof sig);
        if (n == 0) return NULL;
        for (ssize_t i = 0; i < n; i++) {
            if (sig[i] != SIGINT) continue;
            atomic_store(&watch_busy, 1);
            shoal_comm *c = atomic_load(&watch_comm);
            if (c) {
                atomic_store(&watch_hit, 1);
                char why[96];
                snprintf(why, sizeof why, "rank %d was interrupted (SIGINT, Ctrl-C)", shoal_comm_rank(c));
                (void)shoal_comm_abort(c, why);
            }
            atomic_store(&watch_busy, 0);
        }
    }
}

/* Python's signal.set_wakeup_fd(fd) (its C form is not exported by every build); returns
 * the fd it replaces, or -2 with no exception left set when it refused. */
static int set_wakeup_fd(int fd)
{
    PyObject *sig = PyImport_ImportModule("signal");
    PyObject *r = sig ? PyObject_CallMethod(sig, "set_wakeup_fd", "i", fd) : NULL;
    Py_XDECREF(sig);
    long old = r ? PyLong_AsLong(r) : -2;
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        old = -2;
    }
    return (int)old;
}

void sh_py_watch_start(void)
{
    if (atomic_load(&watch_on) || !pthread_equal(pthread_self(), main_thread)) return;
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return;
    int old = set_wakeup_fd(fds[1]);
    if (old != -1) { /* someone else's (asyncio's): leave it, and Ctrl-C waits for the call */
        if (old >= 0) set_wakeup_fd(old);
        close(fds[0]);
        close(fds[1]);
        return;
    }
    /* The watcher blocks on its end: only the write end must not block. */
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) & ~O_NONBLOCK);
    watch_rfd = fds[0];
    watch_wfd = fds[1];
    pthread_t th;
    if (pthread_create(&th, NULL, watch_main, NULL) != 0) {
        set_wakeup_fd(-1);
        close(fds[0]);
        close(fds[1]);
        watch_rfd = watch_wfd = -1;
        return;
    }
    pthread_detach(th);
    atomic_store(&watch_on, 1);
}

void sh_py_watch_enter(shoal_comm *c)
{
    if (atomic_load_explicit(&watch_on, memory_order_relaxed) && pthread_equal(pthread_self(), main_thread))
        atomic_store(&watch_comm, c);
}

int sh_py_watch_leave(void)
{
    if (!atomic_load_explicit(&watch_comm, memory_order_relaxed)) return 0;
    if (!pthread_equal(pthread_self(), main_thread)) return 0;
    atomic_store(&watch_comm, NULL);
    while (atomic_load(&watch_busy)) sched_yield();
    return atomic_exchange(&watch_hit, 0);
}

/* A forked child has no watcher thread: the fd would hand its signals to the parent's. */
static PyObject *watch_forget(PyObject *self, PyObject *unused)
{
    if (atomic_load(&watch_on)) {
        set_wakeup_fd(-1);
        atomic_store(&watch_on, 0);
        atomic_store(&watch_comm, NULL);
        watch_rfd = watch_wfd = -1; /* the parent's; its copies here are inherited, left open */
    }
    main_thread = pthread_self();
    Py_RETURN_NONE;
}

/* ---- OpenBLAS's kernels ----
 * Debian's OpenBLAS falls back to its slowest kernels on CPUs it does not recognise, unless
 * OPENBLAS_CORETYPE names them; src/nn/gemm.c sets it from the CPU's flags before it opens
 * the library. In Python numpy (or torch) usually opens the same library first, so the module
 * sets it at import, by the same rule, for whatever opens OpenBLAS after. */
static void openblas_coretype(void)
{
    if (getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    const char *ct = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        ct = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        ct = "Haswell";
    if (ct) setenv("OPENBLAS_CORETYPE", ct, 0);
}

/* The kernels the loaded OpenBLAS runs ("Prescott", "SkylakeX"), None when none is loaded,
 * and whether this CPU has AVX2 (slow kernels there are a mistake worth saying). */
static PyObject *blas_kernels(PyObject *self, PyObject *unused)
{
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
    char *(*corename)(void) = h ? (char *(*)(void))dlsym(h, "openblas_get_corename") : NULL;
    const char *name = corename ? corename() : NULL;
    __builtin_cpu_init();
    PyObject *r = Py_BuildValue("(zi)", name, __builtin_cpu_supports("avx2") ? 1 : 0);
    if (h) dlclose(h);
    return r;
}

/* ---- module ---- */

static PyObject *job_env(PyObject *self, PyObject *unused)
{
    shoal_job_env e;
    if (shoal_job_env_read(&e) != SHOAL_OK) return sh_py_raise(SHOAL_ERR_INVALID);
    return Py_BuildValue("{s:i,s:i,s:i,s:s}", "rank", e.rank, "world", e.world, "local_world", e.local_world,
                         "launcher", e.launcher);
}

static PyObject *dtype_nbytes(PyObject *self, PyObject *arg)
{
    int dt;
    if (sh_py_dtype_parse(arg, &dt) != 0) return NULL;
    if (dt < 0) return PyLong_FromLong(0);
    return PyLong_FromSize_t(shoal_dtype_nbytes((shoal_dtype)dt));
}

static PyMethodDef module_methods[] = {
    {"_set_adapter", set_adapter, METH_O, "register the function that turns a tensor into a buffer"},
    {"_forget_watcher", watch_forget, METH_NOARGS, "after fork, in the child: no Ctrl-C watcher"},
    {"job_env", job_env, METH_NOARGS,
     "job_env() -> dict: this process's place in a job as its launcher's environment says (rank, world,\n"
     "local_world, launcher), without joining it; alone: rank 0 of 1, launcher None."},
    {"dtype_nbytes", dtype_nbytes, METH_O, "dtype_nbytes(name) -> bytes per element"},
    {"_blas_kernels", blas_kernels, METH_NOARGS, "(OpenBLAS's kernel set or None, CPU has AVX2)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "shoal._shoal",
    "shoal's C library from Python: communicators, compressors, the network engine, the training job.\n"
    "Use it through the package: import shoal.",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

static int add_error(PyObject *m, const char *name, PyObject *bases, PyObject **out, const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "shoal.%s", name);
    *out = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    if (!*out) return -1;
    Py_INCREF(*out);
    return PyModule_AddObject(m, name, *out);
}

static int add_errors(PyObject *m)
{
    if (add_error(m, "Error", NULL, &sh_py_Error, "a shoal call failed; str() is shoal's message, .code its result name") != 0)
        return -1;
    PyObject *b;
    int rc = 0;
    b = Py_BuildValue("(O)", sh_py_Error);
    rc |= add_error(m, "PeerError", b, &sh_py_PeerError, "another rank died or hung up; the message names it");
    rc |= add_error(m, "MismatchError", b, &sh_py_MismatchError, "ranks disagree: count, dtype, op or call order");
    rc |= add_error(m, "BrokenError", b, &sh_py_BrokenError, "the communicator failed before; create a new one");
    Py_XDECREF(b);
    b = Py_BuildValue("(OO)", sh_py_Error, PyExc_TimeoutError);
    rc |= add_error(m, "TimeoutError", b, &sh_py_TimeoutError, "a deadline passed (SHOAL_TIMEOUT)");
    Py_XDECREF(b);
    b = Py_BuildValue("(OO)", sh_py_Error, PyExc_ValueError);
    rc |= add_error(m, "InvalidError", b, &sh_py_InvalidError, "an argument shoal cannot take");
    rc |= add_error(m, "FormatError", b, &sh_py_FormatError, "a bad cfg, data set or checkpoint file");
    Py_XDECREF(b);
    return rc ? -1 : 0;
}

PyMODINIT_FUNC PyInit__shoal(void)
{
    main_thread = pthread_self();
    openblas_coretype();
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    static const char *const ops[SHOAL_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
    for (int i = 0; i < SHOAL_OP_COUNT; i++) {
        if (!op_names[i]) op_names[i] = PyUnicode_InternFromString(ops[i]);
        if (!op_names[i]) goto fail;
    }
    if (PyType_Ready(&ViewType) < 0) goto fail;
    if (add_errors(m) != 0 || sh_py_comm_add(m) != 0 || sh_py_compress_add(m) != 0 || sh_py_net_add(m) != 0 ||
        sh_py_train_add(m) != 0 || sh_py_window_add(m) != 0)
        goto fail;
    PyObject *dts = PyTuple_New(SHOAL_DTYPE_COUNT);
    if (!dts) goto fail;
    for (int i = 0; i < SHOAL_DTYPE_COUNT; i++) PyTuple_SET_ITEM(dts, i, PyUnicode_FromString(dtype_names[i]));
    if (PyModule_AddObject(m, "DTYPES", dts) != 0) {
        Py_DECREF(dts);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
