/* _shoal_train.c — shoal._shoal.train_run: the training job of shoal/train.h in this
 * process, every option set by its command-line name (shoal_train_opts_set) and the report
 * as the CLI's --json object (shoal_train_report_json). Built when include/shoal/train.h
 * declares those (and shoal_train_opts_fini; the Makefile sets SH_PY_TRAIN_API); until then train_run raises
 * NotImplementedError and shoal.train runs the shoal binary instead (python/shoal/_train.py).
 * Not here: choosing between the two, ranks, the dict (python/shoal/_train.py).
 * Proved by tests/python/test_train.py. */
#include "_shoal.h"

#include <stdlib.h>
#include <string.h>

#include "shoal/train.h"

#ifndef SH_PY_TRAIN_API
#define SH_PY_TRAIN_API 0
#endif

#if SH_PY_TRAIN_API

/* Bytes that always hold the report's JSON (its history bounded by the library). */
#ifdef SHOAL_TRAIN_REPORT_JSON_NBYTES
#define REPORT_NBYTES SHOAL_TRAIN_REPORT_JSON_NBYTES
#else
#define REPORT_NBYTES (4u << 20)
#endif

/* train_run(cfg, [(name, value or None), ...]) -> the report's JSON text */
static PyObject *train_run(PyObject *self, PyObject *args)
{
    PyObject *cfg = NULL, *opts = NULL;
    if (!PyArg_ParseTuple(args, "O&O!:train_run", PyUnicode_FSConverter, &cfg, &PyList_Type, &opts)) return NULL;
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    o.cfg_path = PyBytes_AS_STRING(cfg);
    PyObject *keep = PyList_New(0); /* the strings o borrows, alive until the run ends */
    char *buf = NULL;
    PyObject *result = NULL;
    if (!keep) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(opts); i++) {
        PyObject *item = PyList_GET_ITEM(opts, i);
        const char *name = NULL, *value = NULL;
        PyObject *nb = NULL, *vb = NULL;
        if (!PyArg_ParseTuple(item, "O&O&", PyUnicode_FSConverter, &nb, PyUnicode_FSConverter, &vb)) goto done;
        int bad = PyList_Append(keep, nb) | PyList_Append(keep, vb);
        Py_DECREF(nb);
        Py_DECREF(vb);
        if (bad) goto done;
        name = PyBytes_AS_STRING(nb);
        value = PyBytes_AS_STRING(vb); /* switches: "1" turns them on */
        shoal_result rc = shoal_train_opts_set(&o, name, value);
        if (rc != SHOAL_OK) {
            sh_py_raise(rc);
            goto done;
        }
    }
    shoal_train_report r;
    shoal_result rc;
    Py_BEGIN_ALLOW_THREADS
    rc = shoal_train_run(&o, &r);
    Py_END_ALLOW_THREADS
    if (rc != SHOAL_OK) {
        sh_py_raise(rc);
        goto done;
    }
    buf = malloc(REPORT_NBYTES);
    if (!buf) {
        PyErr_NoMemory();
        goto done;
    }
    rc = shoal_train_report_json(&r, buf, REPORT_NBYTES);
    if (rc != SHOAL_OK) {
        sh_py_raise(rc);
        goto done;
    }
    result = PyUnicode_FromString(buf);
done:
    shoal_train_opts_fini(&o); /* the strings opts_set copied */
    free(buf);
    Py_XDECREF(keep);
    Py_DECREF(cfg);
    return result;
}

#else

static PyObject *train_run(PyObject *self, PyObject *args)
{
    PyErr_SetString(PyExc_NotImplementedError,
                    "shoal._shoal.train_run: this libshoal has no shoal_train_opts_set / "
                    "shoal_train_report_json (include/shoal/train.h); shoal.train runs the shoal binary");
    return NULL;
}

#endif

static PyMethodDef train_methods[] = {
    {"train_run", train_run, METH_VARARGS,
     "train_run(cfg, [(option, value), ...]) -> the report as JSON text; options by the CLI's long\n"
     "names without dashes (shoal train --help). Use shoal.train."},
    {NULL, NULL, 0, NULL},
};

int sh_py_train_add(PyObject *m)
{
    if (PyModule_AddIntConstant(m, "HAVE_TRAIN_API", SH_PY_TRAIN_API) != 0) return -1;
    return PyModule_AddFunctions(m, train_methods);
}
