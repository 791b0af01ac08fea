/* _shoal_net.c — shoal._shoal.Net, the network engine: forward, backward, its blocks of
 * parameters, gradients, statistics and recurrent state as zero-copy views, what each layer
 * is, weight files.
 * Not here: names, shapes and numpy (python/shoal/_engine.py), the training job
 * (_shoal_train.c).
 * Proved by tests/python/test_net.py and test_to_torch.py. */
#include "_shoal.h"

#include <string.h>

#include "shoal/net.h"

typedef struct {
    PyObject_HEAD
    shoal_net *n;
    int batch, c, h, w, k;
    int last_nimg; /* images of the last forward */
    sh_py_buf x;   /* its input: a training forward's backward reads it again */
} sh_py_net;

static int net_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"cfg", "batch", "seed", "threads", NULL};
    sh_py_net *p = (sh_py_net *)self;
    PyObject *path = NULL;
    shoal_net_opts o;
    shoal_net_opts_default(&o);
    unsigned long long seed = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|iKi:Net", names, PyUnicode_FSConverter, &path, &o.batch, &seed,
                                     &o.threads))
        return -1;
    if (p->n) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_RuntimeError, "Net: already built");
        return -1;
    }
    o.seed = seed;
    shoal_result rc;
    const char *cpath = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS
    rc = shoal_net_load(cpath, &o, &p->n);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (rc != SHOAL_OK) return sh_py_raise(rc), -1;
    shoal_net_input_shape(p->n, &p->batch, &p->c, &p->h, &p->w);
    shoal_net_output_shape(p->n, NULL, &p->k);
    return 0;
}

static void net_dealloc(PyObject *self)
{
    sh_py_buf_release(&((sh_py_net *)self)->x);
    shoal_net_destroy(((sh_py_net *)self)->n);
    Py_TYPE(self)->tp_free(self);
}

static sh_py_net *live(PyObject *self)
{
    sh_py_net *p = (sh_py_net *)self;
    if (!p->n) PyErr_SetString(PyExc_RuntimeError, "Net: not built");
    return p->n ? p : NULL;
}

/* forward(x, nimg, training) -> view of the output, nimg x K floats, valid until the next forward */
static PyObject *n_forward(PyObject *self, PyObject *args)
{
    sh_py_net *p = live(self);
    PyObject *x;
    int nimg, training = 0;
    if (!p || !PyArg_ParseTuple(args, "Oi|p:forward", &x, &nimg, &training)) return NULL;
    sh_py_buf b;
    if (sh_py_buf_get(x, SH_PY_READ, -1, "forward: x", &b) != 0) return NULL;
    size_t per = (size_t)p->c * (size_t)p->h * (size_t)p->w;
    if (b.dt != SHOAL_FLOAT32 || nimg < 1 || b.count != (size_t)nimg * per) {
        PyErr_Format(PyExc_ValueError, "forward: x holds %zu %s; %d images of this net take %zu float32", b.count,
                     shoal_dtype_name(b.dt), nimg, (size_t)nimg * per);
        sh_py_buf_release(&b);
        return NULL;
    }
    const float *probs = NULL;
    shoal_result rc;
    Py_BEGIN_ALLOW_THREADS
    rc = shoal_net_forward(p->n, b.view.buf, nimg, training, &probs);
    Py_END_ALLOW_THREADS
    /* Held (and its owner kept from resizing) until the next forward: backward reads it. */
    sh_py_buf_release(&p->x);
    p->x = b;
    if (rc != SHOAL_OK) return sh_py_raise(rc);
    p->last_nimg = nimg;
    return sh_py_view_new(self, (void *)probs, (Py_ssize_t)nimg * p->k, "f", sizeof(float), 1);
}

static PyObject *n_backward(PyObject *self, PyObject *labels)
{
    sh_py_net *p = live(self);
    if (!p) return NULL;
    sh_py_buf b;
    if (sh_py_buf_get(labels, SH_PY_READ, -1, "backward: labels", &b) != 0) return NULL;
    if (b.dt != SHOAL_INT32 || b.count != (size_t)p->last_nimg) {
        PyErr_Format(PyExc_ValueError, "backward: labels holds %zu %s; the last forward's %d images take as "
                     "many int32 class indices", b.count, shoal_dtype_name(b.dt), p->last_nimg);
        sh_py_buf_release(&b);
        return NULL;
    }
    float loss = 0;
    shoal_result rc;
    Py_BEGIN_ALLOW_THREADS
    rc = shoal_net_backward(p->n, b.view.buf, &loss);
    Py_END_ALLOW_THREADS
    sh_py_buf_release(&b);
    if (rc != SHOAL_OK) return sh_py_raise(rc);
    return PyFloat_FromDouble(loss);
}

/* The blocks: "params", "grads", "stats", "state" -> a writable view (empty when none). */
static PyObject *n_block(PyObject *self, PyObject *arg)
{
    sh_py_net *p = live(self);
    const char *which = p ? PyUnicode_AsUTF8(arg) : NULL;
    if (!which) return NULL;
    size_t count = 0;
    float *f = NULL;
    if (!strcmp(which, "params")) f = shoal_net_params(p->n, &count);
    else if (!strcmp(which, "grads")) f = shoal_net_grads(p->n, &count);
    else if (!strcmp(which, "stats")) f = shoal_net_stats(p->n, &count);
    else if (!strcmp(which, "state")) f = shoal_net_state(p->n, &count);
    else return PyErr_Format(PyExc_ValueError, "block %R: params, grads, stats or state", arg);
    return sh_py_view_new(self, f, (Py_ssize_t)count, "f", sizeof(float), 0);
}

static PyObject *n_layer(PyObject *self, PyObject *arg)
{
    sh_py_net *p = live(self);
    long i = p ? PyLong_AsLong(arg) : -1;
    if (!p || (i == -1 && PyErr_Occurred())) return NULL;
    shoal_layer_info l;
    if (shoal_net_layer(p->n, (int)i, &l) != SHOAL_OK) return sh_py_raise(SHOAL_ERR_INVALID);
    PyObject *src = PyTuple_New(l.nsrc);
    if (!src) return NULL;
    for (int k = 0; k < l.nsrc; k++) PyTuple_SET_ITEM(src, k, PyLong_FromLong(l.src[k]));
    return Py_BuildValue(
        "{s:s,s:z,s:z,s:i,s:(iii),s:(iii),s:N,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:d,s:d,"
        "s:(nn),s:(nn),s:(nn),s:(nn),s:(nn)}",
        "type", l.type, "form", l.form, "activation", l.activation, "line", l.line, "out", l.c, l.h, l.w, "in",
        l.in_c, l.in_h, l.in_w, "src", src, "filters", l.filters, "size", l.size, "stride", l.stride, "pad", l.pad,
        "groups", l.groups, "batch_normalize", l.batch_normalize, "hidden", l.hidden, "steps", l.steps,
        "probability", (double)l.probability, "temperature", (double)l.temperature, "params",
        (Py_ssize_t)l.params_offset, (Py_ssize_t)l.params_count, "weights", (Py_ssize_t)l.weights_offset,
        (Py_ssize_t)l.weights_count, "biases", (Py_ssize_t)l.biases_offset, (Py_ssize_t)l.biases_count, "scales",
        (Py_ssize_t)l.scales_offset, (Py_ssize_t)l.scales_count, "stats", (Py_ssize_t)l.stats_offset,
        (Py_ssize_t)l.stats_count);
}

static PyObject *weights_file(PyObject *self, PyObject *arg, int save)
{
    sh_py_net *p = live(self);
    PyObject *path = NULL;
    if (!p || !PyUnicode_FSConverter(arg, &path)) return NULL;
    shoal_result rc;
    const char *c = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS
    rc = save ? shoal_net_save_weights(p->n, c) : shoal_net_load_weights(p->n, c);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (rc != SHOAL_OK) return sh_py_raise(rc);
    Py_RETURN_NONE;
}
static PyObject *n_load(PyObject *self, PyObject *arg) { return weights_file(self, arg, 0); }
static PyObject *n_save(PyObject *self, PyObject *arg) { return weights_file(self, arg, 1); }

static PyObject *n_reset_state(PyObject *self, PyObject *unused)
{
    sh_py_net *p = live(self);
    if (!p) return NULL;
    shoal_net_reset_state(p->n);
    Py_RETURN_NONE;
}

static PyObject *n_shape(PyObject *self, void *unused)
{
    sh_py_net *p = (sh_py_net *)self;
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i}", "batch", p->batch, "c", p->c, "h", p->h, "w", p->w, "k",
                         p->k, "nlayers", p->n ? shoal_net_nlayers(p->n) : 0);
}

static PyMethodDef net_methods[] = {
    {"forward", n_forward, METH_VARARGS, "forward(x, nimg, training=False) -> view of the output"},
    {"backward", n_backward, METH_O, "backward(labels int32) -> loss; gradients overwritten"},
    {"block", n_block, METH_O, "block(\"params\"|\"grads\"|\"stats\"|\"state\") -> view"},
    {"layer", n_layer, METH_O, "layer(i) -> dict: what layer i is"},
    {"load", n_load, METH_O, "load(path): weights from a shoal checkpoint or a Darknet .weights"},
    {"save", n_save, METH_O, "save(path): weights to a shoal checkpoint, or .weights for Darknet"},
    {"reset_state", n_reset_state, METH_NOARGS, "reset_state(): zero the recurrent state"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef net_getset[] = {
    {"shape", n_shape, NULL, "batch, c, h, w of the input; k of the output; nlayers", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal._shoal.Net",
    .tp_basicsize = sizeof(sh_py_net),
    .tp_dealloc = net_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Net(cfg, batch=0, seed=1, threads=0): use shoal.Net",
    .tp_methods = net_methods,
    .tp_getset = net_getset,
    .tp_init = net_init,
    .tp_new = PyType_GenericNew,
};

int sh_py_net_add(PyObject *m)
{
    if (PyType_Ready(&NetType) < 0) return -1;
    Py_INCREF(&NetType);
    return PyModule_AddObject(m, "Net", (PyObject *)&NetType);
}
