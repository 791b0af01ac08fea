/* _shoal_window.c — shoal._shoal.window(comm, nbytes): this rank's block of a new shared window
 * (shoal_window_create) as a writable buffer, so collectives on it copy to and from the peers'
 * blocks in user space instead of through the kernel; None where the ranks share no memory.
 * The buffer pins its communicator: close() waits for the last buffer to go before unmapping.
 * Not here: windows (src/comm/transport/window.c), shoal.torch's buckets in one (torch.py).
 * Proved by tests/python/test_window.py. */
#include "_shoal.h"

typedef struct {
    PyObject_HEAD
    PyObject *comm; /* pinned while this lives: its windows stay mapped */
    void *base;
    Py_ssize_t nbytes;
} sh_py_window;

static int window_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    sh_py_window *w = (sh_py_window *)self;
    return PyBuffer_FillInfo(view, self, w->base, w->nbytes, 0, flags);
}

static PyBufferProcs window_as_buffer = {.bf_getbuffer = window_getbuffer};

static void window_dealloc(PyObject *self)
{
    sh_py_window *w = (sh_py_window *)self;
    if (w->comm) {
        sh_py_comm_unpin(w->comm);
        Py_DECREF(w->comm);
    }
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject WindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal._shoal.SharedBuffer",
    .tp_basicsize = sizeof(sh_py_window),
    .tp_dealloc = window_dealloc,
    .tp_as_buffer = &window_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "This rank's block of a shared window: a writable buffer (numpy.frombuffer, memoryview).",
};

/* Collective: every rank calls it with the same nbytes. */
static PyObject *f_window(PyObject *mod, PyObject *args)
{
    PyObject *comm;
    Py_ssize_t nbytes;
    if (!PyArg_ParseTuple(args, "On:window", &comm, &nbytes)) return NULL;
    if (!PyObject_TypeCheck(comm, &sh_py_CommType))
        return PyErr_Format(PyExc_TypeError, "window: comm must be a shoal communicator, not %.100s",
                            Py_TYPE(comm)->tp_name);
    if (nbytes <= 0) return PyErr_Format(PyExc_ValueError, "window: nbytes %zd must be positive", nbytes);
    shoal_comm *c = sh_py_comm_lock(comm, "window");
    if (!c) return NULL;
    shoal_window *win = NULL;
    shoal_result rc;
    int hit;
    Py_BEGIN_ALLOW_THREADS
    sh_py_watch_enter(c);
    rc = shoal_window_create(c, 0, (size_t)nbytes, &win);
    hit = sh_py_watch_leave();
    Py_END_ALLOW_THREADS
    void *base = rc == SHOAL_OK ? shoal_window_block(win, shoal_comm_rank(c)) : NULL;
    sh_py_comm_unlock(comm);
    if (!hit && (rc == SHOAL_ERR_UNSUPPORTED || rc == SHOAL_ERR_NOMEM)) Py_RETURN_NONE; /* alike on every rank */
    if (sh_py_comm_finish(comm, "window", rc, hit, NULL) != 0) return NULL;
    sh_py_window *w = PyObject_New(sh_py_window, &WindowType);
    if (!w) return NULL;
    w->comm = NULL;
    w->base = base;
    w->nbytes = nbytes;
    if (!sh_py_comm_pin(comm, "window")) { /* closed meanwhile by another thread */
        Py_DECREF(w);
        return NULL;
    }
    Py_INCREF(comm);
    w->comm = comm;
    return (PyObject *)w;
}

static PyMethodDef window_functions[] = {
    {"window", f_window, METH_VARARGS,
     "window(comm, nbytes) -> SharedBuffer (zeroed), or None where the ranks share no memory\n"
     "(several hosts, a small /dev/shm). Collective, same nbytes everywhere; the window stays\n"
     "until comm is closed and the last buffer is gone."},
    {NULL, NULL, 0, NULL},
};

int sh_py_window_add(PyObject *m)
{
    if (PyType_Ready(&WindowType) < 0) return -1;
    Py_INCREF(&WindowType);
    if (PyModule_AddObject(m, "SharedBuffer", (PyObject *)&WindowType) != 0) return -1;
    return PyModule_AddFunctions(m, window_functions);
}
