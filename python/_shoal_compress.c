/* _shoal_compress.c — shoal._shoal.Compressor: one buffer's compressor (codec, error-feedback
 * residual) and its compressed allreduce, blocking or started on the module's worker thread
 * (shoal's compressed allreduce has no non-blocking form; the worker runs the started ones
 * in start order, so a framework's backward goes on meanwhile), and the residual as a
 * zero-copy view for checkpoints.
 * Not here: the codecs (src/comm/compress/), which buffers get one (python/shoal/torch.py).
 * Proved by tests/python/test_compress.py and test_torch.py. */
#include "_shoal.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    shoal_compressor *z;
    shoal_codec_opts o;
    size_t count;
    char spec[64];
} sh_py_compressor;

static PyTypeObject CompressorType, JobType;

/* ---- the worker: started compressed allreduces, in order ---- */

typedef struct job {
    struct job *next;
    shoal_comm *c;
    pthread_mutex_t *comm_mu;
    shoal_compressor *z;
    const float *send;
    float *recv;
    size_t count;
    shoal_op op;
    int done;
    shoal_result rc;
    char msg[512];
} job;

static pthread_mutex_t work_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static job *work_head, *work_tail;
static int worker_running;

static void *worker_main(void *arg)
{
    pthread_mutex_lock(&work_mu);
    for (;;) {
        while (!work_head) pthread_cond_wait(&work_cv, &work_mu);
        job *j = work_head;
        pthread_mutex_unlock(&work_mu);
        pthread_mutex_lock(j->comm_mu);
        shoal_result rc = shoal_allreduce_compressed(j->c, j->z, j->send, j->recv, j->count, j->op);
        pthread_mutex_unlock(j->comm_mu);
        pthread_mutex_lock(&work_mu);
        j->rc = rc;
        if (rc != SHOAL_OK) snprintf(j->msg, sizeof j->msg, "%s", shoal_last_error_message());
        j->done = 1;
        work_head = j->next;
        if (!work_head) work_tail = NULL;
        pthread_cond_broadcast(&done_cv);
    }
    return NULL;
}

static int worker_push(job *j)
{
    pthread_mutex_lock(&work_mu);
    if (!worker_running) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker_main, NULL) != 0) {
            pthread_mutex_unlock(&work_mu);
            PyErr_SetString(PyExc_RuntimeError, "cannot start the compressor's worker thread");
            return -1;
        }
        pthread_detach(th);
        worker_running = 1;
    }
    j->next = NULL;
    if (work_tail) work_tail->next = j;
    else work_head = j;
    work_tail = j;
    pthread_cond_signal(&work_cv);
    pthread_mutex_unlock(&work_mu);
    return 0;
}

/* A forked child has no worker: it starts its own when it needs one. */
static void after_fork_child(void)
{
    pthread_mutex_init(&work_mu, NULL);
    pthread_cond_init(&work_cv, NULL);
    pthread_cond_init(&done_cv, NULL);
    work_head = work_tail = NULL;
    worker_running = 0;
}

/* ---- started jobs: the handle ---- */

typedef struct {
    PyObject_HEAD
    job j;
    int queued;       /* pushed and not yet waited */
    PyObject *comm, *compressor, *result;
    sh_py_buf in, out;
} sh_py_job;

static int job_finish(sh_py_job *h)
{
    if (!h->queued) return 0;
    int hit;
    Py_BEGIN_ALLOW_THREADS
    sh_py_watch_enter(h->j.c);
    pthread_mutex_lock(&work_mu);
    while (!h->j.done) pthread_cond_wait(&done_cv, &work_mu);
    pthread_mutex_unlock(&work_mu);
    hit = sh_py_watch_leave();
    sh_py_comm_unpin(h->comm);
    Py_END_ALLOW_THREADS
    h->queued = 0;
    sh_py_buf_release(&h->out);
    sh_py_buf_release(&h->in);
    return sh_py_comm_finish(h->comm, "allreduce_compressed", h->j.rc, hit, h->j.msg);
}

static PyObject *job_wait(PyObject *self, PyObject *unused)
{
    sh_py_job *h = (sh_py_job *)self;
    if (job_finish(h) != 0) return NULL;
    Py_INCREF(h->result);
    return h->result;
}

static PyObject *job_test(PyObject *self, PyObject *unused)
{
    sh_py_job *h = (sh_py_job *)self;
    if (!h->queued) Py_RETURN_TRUE;
    pthread_mutex_lock(&work_mu);
    int done = h->j.done;
    pthread_mutex_unlock(&work_mu);
    if (!done) Py_RETURN_FALSE;
    if (job_finish(h) != 0) return NULL;
    Py_RETURN_TRUE;
}

static void job_dealloc(PyObject *self)
{
    sh_py_job *h = (sh_py_job *)self;
    if (h->queued && job_finish(h) != 0) PyErr_WriteUnraisable(self);
    sh_py_buf_release(&h->out);
    sh_py_buf_release(&h->in);
    Py_XDECREF(h->result);
    Py_XDECREF(h->compressor);
    Py_XDECREF(h->comm);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef job_methods[] = {
    {"wait", job_wait, METH_NOARGS, "wait() -> the result buffer once the compressed allreduce is done"},
    {"test", job_test, METH_NOARGS, "test() -> True when done; never blocks"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject JobType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.CompressedHandle",
    .tp_basicsize = sizeof(sh_py_job),
    .tp_dealloc = job_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A started compressed allreduce: wait(), test().",
    .tp_methods = job_methods,
};

/* ---- the compressor ---- */

static int compressor_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"codec", "count", "cols", "error_feedback", "seed", NULL};
    sh_py_compressor *p = (sh_py_compressor *)self;
    const char *spec = NULL;
    Py_ssize_t count = 0, cols = 0;
    int ef = -1;
    unsigned long long seed = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sn|npK:Compressor", names, &spec, &count, &cols, &ef, &seed))
        return -1;
    if (p->z) {
        PyErr_SetString(PyExc_RuntimeError, "Compressor: already initialised");
        return -1;
    }
    if (count <= 0 || cols < 0) {
        PyErr_Format(PyExc_ValueError, "Compressor: count %zd must be > 0 and cols %zd >= 0", count, cols);
        return -1;
    }
    shoal_codec_opts_default(&p->o);
    if (shoal_codec_parse(spec, &p->o) != SHOAL_OK) return sh_py_raise(SHOAL_ERR_INVALID), -1;
    p->o.cols = (size_t)cols;
    if (ef >= 0) p->o.error_feedback = ef;
    p->o.seed = seed;
    shoal_result rc = shoal_compressor_create(&p->o, (size_t)count, &p->z);
    if (rc != SHOAL_OK) return sh_py_raise(rc), -1;
    p->count = (size_t)count;
    shoal_codec_format(&p->o, p->spec, sizeof p->spec);
    return 0;
}

static void compressor_dealloc(PyObject *self)
{
    shoal_compressor_destroy(((sh_py_compressor *)self)->z);
    Py_TYPE(self)->tp_free(self);
}

static sh_py_compressor *live(PyObject *self)
{
    sh_py_compressor *p = (sh_py_compressor *)self;
    if (!p->z) PyErr_SetString(PyExc_RuntimeError, "Compressor: not initialised");
    return p->z ? p : NULL;
}

/* Arguments of allreduce and allreduce_start: the buffers, checked (float32, count). */
static int parse_call(sh_py_compressor *p, PyObject *args, PyObject *kw, const char *fn, PyObject **comm,
                      PyObject **a, PyObject **out, shoal_op *op, sh_py_buf *in, sh_py_buf *ob)
{
    static char *names[] = {"comm", "a", "op", "out", NULL};
    PyObject *opo = NULL;
    *out = NULL;
    *op = SHOAL_AVG;
    in->held = ob->held = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO", names, comm, a, &opo, out)) return -1;
    if (*out == Py_None) *out = NULL;
    if (opo && sh_py_op_parse(opo, op) != 0) return -1;
    char what[64];
    snprintf(what, sizeof what, "%s: a", fn);
    if (sh_py_buf_get(*a, *out ? SH_PY_READ : SH_PY_WRITE, -1, what, in) != 0) return -1;
    if (*out) {
        snprintf(what, sizeof what, "%s: out", fn);
        if (sh_py_buf_get(*out, SH_PY_WRITE, -1, what, ob) != 0) goto bad;
    }
    const sh_py_buf *bs[2] = {in, ob};
    for (int i = 0; i < (*out ? 2 : 1); i++)
        if (bs[i]->dt != SHOAL_FLOAT32 || bs[i]->count != p->count) {
            PyErr_Format(PyExc_ValueError, "%s: %s holds %zu %s; this compressor takes %zu float32", fn,
                         i ? "out" : "a", bs[i]->count, shoal_dtype_name(bs[i]->dt), p->count);
            goto bad;
        }
    return 0;
bad:
    sh_py_buf_release(ob);
    sh_py_buf_release(in);
    return -1;
}

static PyObject *c_allreduce(PyObject *self, PyObject *args, PyObject *kw)
{
    sh_py_compressor *p = live(self);
    PyObject *comm, *a, *out;
    shoal_op op;
    sh_py_buf in, ob;
    if (!p || parse_call(p, args, kw, "allreduce", &comm, &a, &out, &op, &in, &ob) != 0) return NULL;
    shoal_comm *c = sh_py_comm_pin(comm, "allreduce_compressed");
    if (!c) {
        sh_py_buf_release(&ob);
        sh_py_buf_release(&in);
        return NULL;
    }
    pthread_mutex_t *mu = sh_py_comm_mutex(comm);
    shoal_result rc;
    int hit;
    char msg[512] = "";
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(mu);
    sh_py_watch_enter(c);
    rc = shoal_allreduce_compressed(c, p->z, in.view.buf, ob.held ? ob.view.buf : in.view.buf, p->count, op);
    hit = sh_py_watch_leave();
    if (rc != SHOAL_OK) snprintf(msg, sizeof msg, "%s", shoal_last_error_message());
    pthread_mutex_unlock(mu);
    sh_py_comm_unpin(comm);
    Py_END_ALLOW_THREADS
    sh_py_buf_release(&ob);
    sh_py_buf_release(&in);
    if (sh_py_comm_finish(comm, "allreduce_compressed", rc, hit, msg) != 0) return NULL;
    PyObject *r = out ? out : a;
    Py_INCREF(r);
    return r;
}

static PyObject *c_allreduce_start(PyObject *self, PyObject *args, PyObject *kw)
{
    sh_py_compressor *p = live(self);
    if (!p) return NULL;
    sh_py_job *h = PyObject_New(sh_py_job, &JobType);
    if (!h) return NULL;
    memset(&h->j, 0, sizeof h->j);
    h->queued = 0;
    h->comm = h->compressor = h->result = NULL;
    h->in.held = h->out.held = 0;
    PyObject *comm, *a, *out;
    shoal_op op;
    if (parse_call(p, args, kw, "allreduce_start", &comm, &a, &out, &op, &h->in, &h->out) != 0) {
        Py_DECREF(h);
        return NULL;
    }
    h->j.c = sh_py_comm_pin(comm, "allreduce_compressed");
    if (!h->j.c) {
        Py_DECREF(h);
        return NULL;
    }
    Py_INCREF(comm);
    h->comm = comm;
    Py_INCREF(self);
    h->compressor = self;
    h->result = out ? out : a;
    Py_INCREF(h->result);
    h->j.comm_mu = sh_py_comm_mutex(comm);
    h->j.z = p->z;
    h->j.send = h->in.view.buf;
    h->j.recv = h->out.held ? h->out.view.buf : h->in.view.buf;
    h->j.count = p->count;
    h->j.op = op;
    if (worker_push(&h->j) != 0) {
        sh_py_comm_unpin(comm);
        Py_DECREF(h);
        return NULL;
    }
    h->queued = 1;
    return (PyObject *)h;
}

static PyObject *c_state(PyObject *self, PyObject *unused)
{
    sh_py_compressor *p = live(self);
    if (!p) return NULL;
    size_t n = 0;
    float *s = shoal_compressor_state(p->z, &n);
    return sh_py_view_new(self, s, (Py_ssize_t)n, "f", sizeof(float), 0);
}

static PyObject *c_reset(PyObject *self, PyObject *unused)
{
    sh_py_compressor *p = live(self);
    if (!p) return NULL;
    shoal_compressor_reset(p->z);
    Py_RETURN_NONE;
}

static PyObject *c_wire_nbytes(PyObject *self, PyObject *arg)
{
    sh_py_compressor *p = live(self);
    long world = PyLong_AsLong(arg);
    if (!p || (world == -1 && PyErr_Occurred())) return NULL;
    return PyFloat_FromDouble(shoal_compressor_wire_nbytes(p->z, (int)world));
}

static PyObject *c_residual_norm(PyObject *self, PyObject *unused)
{
    sh_py_compressor *p = live(self);
    return p ? PyFloat_FromDouble(shoal_compressor_residual_norm(p->z)) : NULL;
}

static PyObject *c_get_spec(PyObject *self, void *unused) { return PyUnicode_FromString(((sh_py_compressor *)self)->spec); }
static PyObject *c_get_count(PyObject *self, void *unused) { return PyLong_FromSize_t(((sh_py_compressor *)self)->count); }

static PyMethodDef compressor_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))c_allreduce, METH_VARARGS | METH_KEYWORDS,
     "allreduce(comm, a, op=\"avg\", out=None) -> out or a: the compressed allreduce of float32 a\n"
     "(this rank's contribution encoded with its residual). Blocking; collective."},
    {"allreduce_start", (PyCFunction)(void (*)(void))c_allreduce_start, METH_VARARGS | METH_KEYWORDS,
     "allreduce_start(comm, a, op=\"avg\", out=None) -> handle: the same on the worker thread, in start order"},
    {"state", c_state, METH_NOARGS, "state() -> view of the compressor's state (residual, then lowrank's Q):\n"
     "numpy.asarray(c.state()) reads and writes it in place"},
    {"reset", c_reset, METH_NOARGS, "reset(): back to a new compressor's state"},
    {"wire_nbytes", c_wire_nbytes, METH_O, "wire_nbytes(world) -> bytes this rank sends a call"},
    {"residual_norm", c_residual_norm, METH_NOARGS, "residual_norm() -> norm of the residual"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef compressor_getset[] = {
    {"spec", c_get_spec, NULL, "the codec, as shoal_codec_format writes it (\"topk:0.01\")", NULL},
    {"count", c_get_count, NULL, "elements of the buffers it compresses", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CompressorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.Compressor",
    .tp_basicsize = sizeof(sh_py_compressor),
    .tp_dealloc = compressor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Compressor(codec, count, cols=0, error_feedback=None, seed=1): one float32 buffer's\n"
              "compressor: codec \"fp16\", \"bf16\", \"1bit\", \"topk:F\", \"lowrank:R\" (docs/comm.md).",
    .tp_methods = compressor_methods,
    .tp_getset = compressor_getset,
    .tp_init = compressor_init,
    .tp_new = PyType_GenericNew,
};

int sh_py_compress_add(PyObject *m)
{
    if (PyType_Ready(&CompressorType) < 0 || PyType_Ready(&JobType) < 0) return -1;
    pthread_atfork(NULL, NULL, after_fork_child);
    Py_INCREF(&CompressorType);
    return PyModule_AddObject(m, "Compressor", (PyObject *)&CompressorType);
}
