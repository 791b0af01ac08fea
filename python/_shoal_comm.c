/* _shoal_comm.c — shoal._shoal.Comm and Handle: a communicator's collectives and tagged
 * messages on buffers used in place, blocking (the GIL released, Ctrl-C watched) or started
 * (a Handle to wait on or test); creation from the launcher's environment, split, close.
 * Not here: buffers, errors and the watcher (_shoal.c), allocating results and the
 * mpi4py-style conveniences (python/shoal/__init__.py).
 * Proved by tests/python/test_collectives.py, test_errors.py and test_launchers.py. */
#include "_shoal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <structmember.h>
#include <sys/socket.h>
#include <unistd.h>

struct sh_py_comm {
    PyObject_HEAD
    shoal_comm *c;
    int rank, size, local_rank, local_size, nhosts;
    pthread_mutex_t mu;      /* one call at a time on c */
    char dead[256];          /* why calls are refused ("" while usable) */
    int pending;             /* started requests not yet waited: c lives until they are */
    int closing;             /* close() came while some were pending */
    PyObject *parent;        /* a split keeps its parent (the store) alive */
    struct sh_py_comm *next_child, *first_child; /* live splits, closed before their parent */
    PyObject *weakrefs;
};

/* ---- locking and the end of a call ---- */

shoal_comm *sh_py_comm_lock(PyObject *self, const char *what)
{
    sh_py_comm *p = (sh_py_comm *)self;
    if (pthread_mutex_trylock(&p->mu) != 0) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&p->mu);
        Py_END_ALLOW_THREADS
    }
    if (!p->c || p->dead[0]) {
        pthread_mutex_unlock(&p->mu);
        PyErr_Format(sh_py_BrokenError, "%s: %s", what, p->dead[0] ? p->dead : "the communicator is closed");
        return NULL;
    }
    return p->c;
}

void sh_py_comm_unlock(PyObject *self) { pthread_mutex_unlock(&((sh_py_comm *)self)->mu); }

shoal_comm *sh_py_comm_pin(PyObject *self, const char *what)
{
    if (!PyObject_TypeCheck(self, &sh_py_CommType)) {
        PyErr_Format(PyExc_TypeError, "%s: comm must be a shoal communicator, not %.100s", what,
                     Py_TYPE(self)->tp_name);
        return NULL;
    }
    shoal_comm *c = sh_py_comm_lock(self, what);
    if (c) {
        ((sh_py_comm *)self)->pending++;
        sh_py_comm_unlock(self);
    }
    return c;
}

void sh_py_comm_unpin(PyObject *self)
{
    sh_py_comm *p = (sh_py_comm *)self;
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0 && p->closing) {
        shoal_comm_destroy(p->c);
        p->c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
}

pthread_mutex_t *sh_py_comm_mutex(PyObject *self) { return &((sh_py_comm *)self)->mu; }

void sh_py_comm_mark_interrupted(PyObject *self, const char *what)
{
    sh_py_comm *p = (sh_py_comm *)self;
    snprintf(p->dead, sizeof p->dead, "the communicator was aborted when %s was interrupted (Ctrl-C); "
             "start the job again", what);
}

int sh_py_comm_finish(PyObject *self, const char *what, shoal_result rc, int interrupted, const char *msg)
{
    if (interrupted) {
        sh_py_comm_mark_interrupted(self, what);
        if (PyErr_CheckSignals() < 0) return -1; /* KeyboardInterrupt, or the user's handler's */
        PyErr_Format(sh_py_BrokenError, "%s: interrupted by SIGINT; the communicator is aborted", what);
        return -1;
    }
    if (rc == SHOAL_OK) return 0;
    if (msg) sh_py_raise_msg(rc, msg);
    else sh_py_raise(rc);
    return -1;
}

/* ---- arguments ---- */

/* Fill out[0..nnames) from positional args then keywords; the first nreq are required. */
static int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int nnames, int nreq, PyObject **out)
{
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, nnames, nargs);
        return -1;
    }
    for (int i = 0; i < nnames; i++) out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < nnames && found < 0; i++)
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) found = i;
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
            return -1;
        }
        if (out[found]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, names[found]);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
            return -1;
        }
    for (int i = 0; i < nnames; i++)
        if (out[i] == Py_None) out[i] = NULL;
    return 0;
}

static int int_arg(PyObject *o, int dflt, const char *fn, const char *name, int *v)
{
    if (!o) {
        *v = dflt;
        return 0;
    }
    long x = PyLong_AsLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < -2147483647L || x > 2147483647L) {
        PyErr_Format(PyExc_ValueError, "%s: %s %ld is out of range", fn, name, x);
        return -1;
    }
    *v = (int)x;
    return 0;
}

/* The output buffer must hold `want` elements of the input's dtype. */
static int check_out(const sh_py_buf *in, const sh_py_buf *out, size_t want, const char *what)
{
    if (out->dt != in->dt) {
        PyErr_Format(PyExc_ValueError, "%s: out holds %s, the input %s", what, shoal_dtype_name(out->dt),
                     shoal_dtype_name(in->dt));
        return -1;
    }
    if (out->count != want) {
        PyErr_Format(PyExc_ValueError, "%s: out holds %zu elements, it must hold %zu", what, out->count, want);
        return -1;
    }
    return 0;
}

/* ---- one collective ---- */

typedef enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_SEND, K_RECV } kind;

typedef struct {
    kind k;
    const char *name;
    PyObject *a, *out;     /* out NULL: in place (or none) */
    shoal_op op;
    int root, peer, tag;
    int dt_override;
} call;

/* What the buffers' size allows for this call: 0, or -1 with ValueError. */
static int check_kind(const sh_py_comm *p, const call *k, const sh_py_buf *in)
{
    if (k->k == K_ALLTOALL && in->count % (size_t)p->size)
        return PyErr_Format(PyExc_ValueError, "alltoall: %zu elements do not split into %d equal blocks",
                            in->count, p->size), -1;
    return 0;
}

/* Buffers of a call, checked: 0 or -1 with the exception set (nothing held). */
static int call_buffers(sh_py_comm *p, const call *k, sh_py_buf *in, sh_py_buf *out)
{
    /* Argument names for messages, by kind: static strings (nothing formatted per call). */
    static const char *const what_in[] = {"allreduce: a", "broadcast: a", "reduce: a", "allgather: a",
                                          "reduce_scatter: a", "alltoall: a", "send: buf", "recv: buf"};
    static const char *const what_out[] = {"allreduce: out", "broadcast: out", "reduce: out", "allgather: out",
                                           "reduce_scatter: out", "alltoall: out", "send: out", "recv: out"};
    int in_writes = !k->out && k->k != K_SEND && !(k->k == K_REDUCE && k->root != p->rank);
    out->held = 0;
    if (sh_py_buf_get(k->a, in_writes ? SH_PY_WRITE : SH_PY_READ, k->dt_override, what_in[k->k], in) != 0)
        return -1;
    if (check_kind(p, k, in) != 0) {
        sh_py_buf_release(in);
        return -1;
    }
    if (!k->out) {
        if (k->k == K_ALLGATHER || k->k == K_REDUCE_SCATTER || k->k == K_ALLTOALL) {
            if (k->k == K_REDUCE_SCATTER && in->count % (size_t)p->size) {
                sh_py_buf_release(in);
                return PyErr_Format(PyExc_ValueError, "%s: %zu elements do not split into %d equal blocks",
                                    k->name, in->count, p->size), -1;
            }
            if (k->k == K_ALLGATHER) {
                sh_py_buf_release(in);
                return PyErr_Format(PyExc_ValueError, "allgather: out is required here"), -1;
            }
        }
        return 0;
    }
    if (sh_py_buf_get(k->out, SH_PY_WRITE, k->dt_override, what_out[k->k], out) != 0) {
        sh_py_buf_release(in);
        return -1;
    }
    size_t want = in->count;
    if (k->k == K_ALLGATHER) want = in->count * (size_t)p->size;
    if (k->k == K_REDUCE_SCATTER) {
        if (in->count % (size_t)p->size) {
            PyErr_Format(PyExc_ValueError, "reduce_scatter: %zu elements do not split into %d equal blocks",
                         in->count, p->size);
            goto bad;
        }
        want = in->count / (size_t)p->size;
    }
    if (check_out(in, out, want, k->name) != 0) goto bad;
    return 0;
bad:
    sh_py_buf_release(out);
    sh_py_buf_release(in);
    return -1;
}

static shoal_result run_call(shoal_comm *c, const call *k, const sh_py_buf *in, const sh_py_buf *out)
{
    void *a = in->view.buf, *o = out->held ? out->view.buf : a;
    size_t n = in->count;
    switch (k->k) {
    case K_ALLREDUCE: return shoal_allreduce(c, a, o, n, in->dt, k->op);
    case K_BROADCAST: return shoal_broadcast(c, a, o, n, in->dt, k->root);
    case K_REDUCE: return shoal_reduce(c, a, out->held || k->root == shoal_comm_rank(c) ? o : NULL, n, in->dt, k->op, k->root);
    case K_ALLGATHER: return shoal_allgather(c, a, o, n, in->dt);
    case K_REDUCE_SCATTER: return shoal_reduce_scatter(c, a, o, n / (size_t)shoal_comm_world(c), in->dt, k->op);
    case K_ALLTOALL: return shoal_alltoall(c, a, o, n / (size_t)shoal_comm_world(c), in->dt);
    case K_SEND: return shoal_send(c, a, n, in->dt, k->peer, k->tag);
    case K_RECV: return shoal_recv(c, a, n, in->dt, k->peer, k->tag);
    }
    return SHOAL_ERR_INTERNAL;
}

static PyObject *blocking(PyObject *self, const call *k)
{
    sh_py_comm *p = (sh_py_comm *)self;
    sh_py_buf in, out;
    if (call_buffers(p, k, &in, &out) != 0) return NULL;
    shoal_comm *c = sh_py_comm_lock(self, k->name);
    if (!c) {
        sh_py_buf_release(&out);
        sh_py_buf_release(&in);
        return NULL;
    }
    shoal_result rc;
    int hit;
    Py_BEGIN_ALLOW_THREADS
    sh_py_watch_enter(c);
    rc = run_call(c, k, &in, &out);
    hit = sh_py_watch_leave();
    Py_END_ALLOW_THREADS
    sh_py_comm_unlock(self);
    sh_py_buf_release(&out);
    sh_py_buf_release(&in);
    if (sh_py_comm_finish(self, k->name, rc, hit, NULL) != 0) return NULL;
    PyObject *r = k->out ? k->out : k->a;
    Py_INCREF(r);
    return r;
}

/* ---- the methods ---- */

#define FASTCALL_ARGS PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames

static PyObject *m_allreduce(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "op", "out", "dtype"};
    PyObject *v[4];
    call k = {.k = K_ALLREDUCE, .name = "allreduce", .op = SHOAL_SUM};
    if (parse_args("allreduce", args, nargs, kwnames, names, 4, 1, v) != 0) return NULL;
    if (v[1] && sh_py_op_parse(v[1], &k.op) != 0) return NULL;
    if (sh_py_dtype_parse(v[3], &k.dt_override) != 0) return NULL;
    k.a = v[0];
    k.out = v[2];
    return blocking(self, &k);
}

static PyObject *m_broadcast(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "root", "dtype"};
    PyObject *v[3];
    call k = {.k = K_BROADCAST, .name = "broadcast"};
    if (parse_args("broadcast", args, nargs, kwnames, names, 3, 1, v) != 0) return NULL;
    if (int_arg(v[1], 0, "broadcast", "root", &k.root) != 0 || sh_py_dtype_parse(v[2], &k.dt_override) != 0)
        return NULL;
    k.a = v[0];
    return blocking(self, &k);
}

static PyObject *m_reduce(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "root", "op", "out", "dtype"};
    PyObject *v[5];
    call k = {.k = K_REDUCE, .name = "reduce", .op = SHOAL_SUM};
    if (parse_args("reduce", args, nargs, kwnames, names, 5, 1, v) != 0) return NULL;
    if (int_arg(v[1], 0, "reduce", "root", &k.root) != 0 || (v[2] && sh_py_op_parse(v[2], &k.op) != 0) ||
        sh_py_dtype_parse(v[4], &k.dt_override) != 0)
        return NULL;
    k.a = v[0];
    k.out = v[3];
    return blocking(self, &k);
}

static PyObject *m_allgather(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "out", "dtype"};
    PyObject *v[3];
    call k = {.k = K_ALLGATHER, .name = "allgather"};
    if (parse_args("allgather", args, nargs, kwnames, names, 3, 1, v) != 0) return NULL;
    if (sh_py_dtype_parse(v[2], &k.dt_override) != 0) return NULL;
    k.a = v[0];
    k.out = v[1];
    return blocking(self, &k);
}

static PyObject *m_reduce_scatter(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "out", "op", "dtype"};
    PyObject *v[4];
    call k = {.k = K_REDUCE_SCATTER, .name = "reduce_scatter", .op = SHOAL_SUM};
    if (parse_args("reduce_scatter", args, nargs, kwnames, names, 4, 2, v) != 0) return NULL;
    if ((v[2] && sh_py_op_parse(v[2], &k.op) != 0) || sh_py_dtype_parse(v[3], &k.dt_override) != 0) return NULL;
    k.a = v[0];
    k.out = v[1];
    return blocking(self, &k);
}

static PyObject *m_alltoall(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "out", "dtype"};
    PyObject *v[3];
    call k = {.k = K_ALLTOALL, .name = "alltoall"};
    if (parse_args("alltoall", args, nargs, kwnames, names, 3, 2, v) != 0) return NULL;
    if (sh_py_dtype_parse(v[2], &k.dt_override) != 0) return NULL;
    k.a = v[0];
    k.out = v[1];
    return blocking(self, &k);
}

static PyObject *p2p(FASTCALL_ARGS, kind kk, const char *name)
{
    static const char *const names[] = {"buf", "peer", "tag", "dtype"};
    PyObject *v[4];
    call k = {.k = kk, .name = name};
    if (parse_args(name, args, nargs, kwnames, names, 4, 2, v) != 0) return NULL;
    if (int_arg(v[1], 0, name, "peer", &k.peer) != 0 || int_arg(v[2], 0, name, "tag", &k.tag) != 0 ||
        sh_py_dtype_parse(v[3], &k.dt_override) != 0)
        return NULL;
    k.a = v[0];
    return blocking(self, &k);
}
static PyObject *m_send(FASTCALL_ARGS) { return p2p(self, args, nargs, kwnames, K_SEND, "send"); }
static PyObject *m_recv(FASTCALL_ARGS) { return p2p(self, args, nargs, kwnames, K_RECV, "recv"); }

static PyObject *m_barrier(PyObject *self, PyObject *unused)
{
    shoal_comm *c = sh_py_comm_lock(self, "barrier");
    if (!c) return NULL;
    shoal_result rc;
    int hit;
    Py_BEGIN_ALLOW_THREADS
    sh_py_watch_enter(c);
    rc = shoal_barrier(c);
    hit = sh_py_watch_leave();
    Py_END_ALLOW_THREADS
    sh_py_comm_unlock(self);
    if (sh_py_comm_finish(self, "barrier", rc, hit, NULL) != 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- creation, split, close ---- */

static PyObject *comm_wrap(PyTypeObject *type, shoal_comm *c, PyObject *parent)
{
    sh_py_comm *p = (sh_py_comm *)type->tp_alloc(type, 0);
    if (!p) {
        shoal_comm_destroy(c);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->c = c;
    p->rank = shoal_comm_rank(c);
    p->size = shoal_comm_world(c);
    p->local_rank = shoal_comm_local_rank(c);
    p->local_size = shoal_comm_local_world(c);
    p->nhosts = shoal_comm_nhosts(c);
    if (parent) {
        sh_py_comm *pp = (sh_py_comm *)parent;
        Py_INCREF(parent);
        p->parent = parent;
        p->next_child = pp->first_child;
        pp->first_child = p;
    }
    return (PyObject *)p;
}

static void comm_close(sh_py_comm *p)
{
    while (p->first_child) comm_close(p->first_child);
    if (p->parent) { /* out of the parent's list */
        sh_py_comm **q = &((sh_py_comm *)p->parent)->first_child;
        while (*q && *q != p) q = &(*q)->next_child;
        if (*q) *q = p->next_child;
        p->next_child = NULL;
    }
    if (!p->c) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&p->mu);
    Py_END_ALLOW_THREADS
    if (!p->dead[0]) snprintf(p->dead, sizeof p->dead, "the communicator is closed");
    if (p->pending) { /* the last Handle to finish destroys it */
        p->closing = 1;
        pthread_mutex_unlock(&p->mu);
        return;
    }
    shoal_comm *c = p->c;
    p->c = NULL;
    Py_BEGIN_ALLOW_THREADS
    shoal_comm_destroy(c);
    Py_END_ALLOW_THREADS
    pthread_mutex_unlock(&p->mu);
}

static PyObject *m_close(PyObject *self, PyObject *unused)
{
    comm_close((sh_py_comm *)self);
    Py_RETURN_NONE;
}

static void comm_dealloc(PyObject *self)
{
    sh_py_comm *p = (sh_py_comm *)self;
    PyObject_GC_UnTrack(self);
    if (p->weakrefs) PyObject_ClearWeakRefs(self);
    comm_close(p);
    Py_CLEAR(p->parent);
    pthread_mutex_destroy(&p->mu);
    Py_TYPE(self)->tp_free(self);
}

static int comm_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((sh_py_comm *)self)->parent);
    return 0;
}

static PyObject *m_split(FASTCALL_ARGS)
{
    static const char *const names[] = {"color", "key"};
    PyObject *v[2];
    int color, key;
    if (parse_args("split", args, nargs, kwnames, names, 2, 1, v) != 0) return NULL;
    if (int_arg(v[0], 0, "split", "color", &color) != 0 || int_arg(v[1], 0, "split", "key", &key) != 0) return NULL;
    shoal_comm *c = sh_py_comm_lock(self, "split");
    if (!c) return NULL;
    shoal_comm *child = NULL;
    shoal_result rc;
    int hit;
    Py_BEGIN_ALLOW_THREADS
    sh_py_watch_enter(c);
    rc = shoal_comm_split(c, color, key, &child);
    hit = sh_py_watch_leave();
    Py_END_ALLOW_THREADS
    sh_py_comm_unlock(self);
    if (sh_py_comm_finish(self, "split", rc, hit, NULL) != 0) {
        shoal_comm_destroy(child);
        return NULL;
    }
    if (!child) Py_RETURN_NONE;
    return comm_wrap(Py_TYPE(self), child, self);
}

static PyObject *m_host(PyObject *self, PyObject *arg)
{
    sh_py_comm *p = (sh_py_comm *)self;
    long r = PyLong_AsLong(arg);
    if (r == -1 && PyErr_Occurred()) return NULL;
    const char *h = p->c && r >= 0 && r < p->size ? shoal_comm_host(p->c, (int)r) : NULL;
    if (!h) return PyErr_Format(PyExc_ValueError, "host: %ld is not a rank of this communicator", r);
    return PyUnicode_FromString(h);
}

static PyObject *m_is_broken(PyObject *self, PyObject *unused)
{
    sh_py_comm *p = (sh_py_comm *)self;
    return PyBool_FromLong(!p->c || p->dead[0] || shoal_comm_is_broken(p->c));
}

/* A free TCP port on the loopback for a process alone (its own store). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* _create(timeout_ms=0, transport=None, algo=None) -> Comm of every rank the launcher
 * started; a process no launcher started is rank 0 of 1. */
static PyObject *m_create(PyObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout_ms", "transport", "algo", NULL};
    int timeout_ms = 0;
    const char *transport = NULL, *algo = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|izz:_create", names, &timeout_ms, &transport, &algo)) return NULL;
    shoal_comm_opts o;
    shoal_comm_opts_default(&o);
    o.timeout_ms = timeout_ms;
    o.transport = transport;
    o.algo = algo;
    shoal_job_env e;
    char key[40];
    if (shoal_job_env_read(&e) == SHOAL_OK && !e.launcher) {
        o.rank = 0;
        o.world = 1;
        o.master_addr = "127.0.0.1";
        o.master_port = free_port();
        snprintf(key, sizeof key, "alone-%d-%d", (int)getpid(), o.master_port);
        o.job_key = key; /* nobody else joins a job of one */
    }
    shoal_comm *c = NULL;
    shoal_result rc;
    Py_BEGIN_ALLOW_THREADS
    rc = shoal_comm_create(&o, &c);
    Py_END_ALLOW_THREADS
    if (rc != SHOAL_OK) return sh_py_raise(rc);
    sh_py_watch_start();
    return comm_wrap((PyTypeObject *)type, c, NULL);
}

/* ---- non-blocking: Handle ---- */

typedef struct {
    PyObject_HEAD
    PyObject *comm;
    shoal_request *req;
    sh_py_buf in, out;
    PyObject *result;
    const char *name;
} sh_py_handle;

static PyTypeObject HandleType;

static void handle_release(sh_py_handle *h)
{
    sh_py_buf_release(&h->out);
    sh_py_buf_release(&h->in);
}

/* Wait with the GIL released; 0 or -1 with the exception set. The request is gone after,
 * and the communicator too when it was closed meanwhile and this was its last request. */
static int handle_finish(sh_py_handle *h)
{
    if (!h->req) return 0;
    sh_py_comm *p = (sh_py_comm *)h->comm;
    shoal_request *r = h->req;
    h->req = NULL;
    shoal_result rc;
    int hit;
    char msg[512];
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&p->mu);
    sh_py_watch_enter(p->c);
    rc = shoal_wait(r);
    hit = sh_py_watch_leave();
    snprintf(msg, sizeof msg, "%s", rc != SHOAL_OK ? shoal_last_error_message() : "");
    if (--p->pending == 0 && p->closing) {
        shoal_comm_destroy(p->c);
        p->c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    Py_END_ALLOW_THREADS
    handle_release(h);
    return sh_py_comm_finish(h->comm, h->name, rc, hit, msg);
}

static PyObject *h_wait(PyObject *self, PyObject *unused)
{
    sh_py_handle *h = (sh_py_handle *)self;
    if (handle_finish(h) != 0) return NULL;
    Py_INCREF(h->result);
    return h->result;
}

static PyObject *h_test(PyObject *self, PyObject *unused)
{
    sh_py_handle *h = (sh_py_handle *)self;
    if (!h->req) Py_RETURN_TRUE;
    int done = 0;
    shoal_result rc = shoal_test(h->req, &done);
    if (rc != SHOAL_OK) return sh_py_raise(rc);
    if (!done) Py_RETURN_FALSE;
    if (handle_finish(h) != 0) return NULL;
    Py_RETURN_TRUE;
}

static void handle_dealloc(PyObject *self)
{
    sh_py_handle *h = (sh_py_handle *)self;
    if (h->req && handle_finish(h) != 0) /* dropped unwaited: the buffers stay borrowed until it ends */
        PyErr_WriteUnraisable(self);
    handle_release(h);
    Py_XDECREF(h->result);
    Py_XDECREF(h->comm);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef handle_methods[] = {
    {"wait", h_wait, METH_NOARGS, "wait() -> the result buffer, once the operation is done (raises its error)"},
    {"test", h_test, METH_NOARGS, "test() -> True when done (then wait() returns at once); never blocks"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.Handle",
    .tp_basicsize = sizeof(sh_py_handle),
    .tp_dealloc = handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A started operation: wait() for its result, test() whether it is done. The buffers stay\n"
              "borrowed (and must not be touched) until it is done.",
    .tp_methods = handle_methods,
};

static PyObject *m_allreduce_start(FASTCALL_ARGS)
{
    static const char *const names[] = {"a", "op", "out", "dtype"};
    PyObject *v[4];
    call k = {.k = K_ALLREDUCE, .name = "allreduce_start", .op = SHOAL_SUM};
    if (parse_args("allreduce_start", args, nargs, kwnames, names, 4, 1, v) != 0) return NULL;
    if ((v[1] && sh_py_op_parse(v[1], &k.op) != 0) || sh_py_dtype_parse(v[3], &k.dt_override) != 0) return NULL;
    k.a = v[0];
    k.out = v[2];
    sh_py_handle *h = PyObject_New(sh_py_handle, &HandleType);
    if (!h) return NULL;
    h->comm = NULL;
    h->req = NULL;
    h->in.held = h->out.held = 0;
    h->result = NULL;
    h->name = "allreduce_start";
    if (call_buffers((sh_py_comm *)self, &k, &h->in, &h->out) != 0) {
        Py_DECREF(h);
        return NULL;
    }
    Py_INCREF(self);
    h->comm = self;
    h->result = k.out ? k.out : k.a;
    Py_INCREF(h->result);
    shoal_comm *c = sh_py_comm_lock(self, "allreduce_start");
    if (!c) {
        Py_DECREF(h);
        return NULL;
    }
    void *out = h->out.held ? h->out.view.buf : h->in.view.buf;
    shoal_result rc = shoal_allreduce_start(c, h->in.view.buf, out, h->in.count, h->in.dt, k.op, &h->req);
    if (rc == SHOAL_OK) ((sh_py_comm *)self)->pending++;
    sh_py_comm_unlock(self);
    if (rc != SHOAL_OK) {
        sh_py_raise(rc);
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

/* ---- the type ---- */

static PyMethodDef comm_methods[] = {
    {"_create", (PyCFunction)(void (*)(void))m_create, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "_create(timeout_ms=0, transport=None, algo=None): use shoal.init()"},
    {"allreduce", (PyCFunction)(void (*)(void))m_allreduce, METH_FASTCALL | METH_KEYWORDS,
     "allreduce(a, op=\"sum\", out=None, dtype=None) -> out, or a (in place)\n"
     "op: \"sum\", \"avg\", \"min\", \"max\", \"prod\". Every rank calls it with the same count and dtype."},
    {"allreduce_start", (PyCFunction)(void (*)(void))m_allreduce_start, METH_FASTCALL | METH_KEYWORDS,
     "allreduce_start(a, op=\"sum\", out=None, dtype=None) -> Handle (wait() returns out or a)"},
    {"broadcast", (PyCFunction)(void (*)(void))m_broadcast, METH_FASTCALL | METH_KEYWORDS,
     "broadcast(a, root=0, dtype=None) -> a: root's values into a on every rank"},
    {"reduce", (PyCFunction)(void (*)(void))m_reduce, METH_FASTCALL | METH_KEYWORDS,
     "reduce(a, root=0, op=\"sum\", out=None, dtype=None): the reduction at root (into out, or a in place)"},
    {"_allgather", (PyCFunction)(void (*)(void))m_allgather, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"_reduce_scatter", (PyCFunction)(void (*)(void))m_reduce_scatter, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"_alltoall", (PyCFunction)(void (*)(void))m_alltoall, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"send", (PyCFunction)(void (*)(void))m_send, METH_FASTCALL | METH_KEYWORDS,
     "send(buf, peer, tag=0, dtype=None): to rank peer; a recv(buf, peer=this rank, tag) there matches it"},
    {"recv", (PyCFunction)(void (*)(void))m_recv, METH_FASTCALL | METH_KEYWORDS,
     "recv(buf, peer, tag=0, dtype=None) -> buf, filled by peer's matching send (same count)"},
    {"barrier", m_barrier, METH_NOARGS, "barrier(): returns once every rank has called it"},
    {"split", (PyCFunction)(void (*)(void))m_split, METH_FASTCALL | METH_KEYWORDS,
     "split(color, key=0) -> Comm of the ranks with the same color, ordered by key then rank;\n"
     "None where color < 0. Collective."},
    {"host", m_host, METH_O, "host(rank) -> the host name of a rank"},
    {"is_broken", m_is_broken, METH_NOARGS, "is_broken() -> True once a call failed on a peer or was interrupted"},
    {"close", m_close, METH_NOARGS, "close(): release sockets and shared memory now (not collective)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef comm_members[] = {
    {"rank", T_INT, offsetof(sh_py_comm, rank), READONLY, "this rank, 0..size-1"},
    {"size", T_INT, offsetof(sh_py_comm, size), READONLY, "ranks in the communicator"},
    {"local_rank", T_INT, offsetof(sh_py_comm, local_rank), READONLY, "rank among the ranks on this host"},
    {"local_size", T_INT, offsetof(sh_py_comm, local_size), READONLY, "ranks on this host"},
    {"nhosts", T_INT, offsetof(sh_py_comm, nhosts), READONLY, "hosts the ranks run on"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject sh_py_CommType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal._shoal.Comm",
    .tp_basicsize = sizeof(sh_py_comm),
    .tp_dealloc = comm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = comm_traverse,
    .tp_weaklistoffset = offsetof(sh_py_comm, weakrefs),
    .tp_doc = "A communicator over the ranks of a job (shoal.init() gives the job's).",
    .tp_methods = comm_methods,
    .tp_members = comm_members,
};

int sh_py_comm_add(PyObject *m)
{
    if (PyType_Ready(&sh_py_CommType) < 0 || PyType_Ready(&HandleType) < 0) return -1;
    Py_INCREF(&sh_py_CommType);
    if (PyModule_AddObject(m, "Comm", (PyObject *)&sh_py_CommType) != 0) return -1;
    Py_INCREF(&HandleType);
    return PyModule_AddObject(m, "Handle", (PyObject *)&HandleType);
}
