/* The native half of the runtime_extension_reads_solution hostile submission: a CPython
 * extension (stable ABI, so any CPython 3.8+ on x86-64 Linux loads it) whose one function reads
 * a file with the C library. No audit event fires: only the operating system can refuse.
 * Built by build_blob.sh into the base64 blob inside a1_ledger/ledger.py. */
#define Py_LIMITED_API 0x03080000
#include <Python.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static PyObject *slurp(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && len < cap && (got = read(fd, buf + len, cap - len)) > 0) len += (size_t)got;
    close(fd);
    if (!buf) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return out;
}

static PyMethodDef methods[] = {{"slurp", slurp, METH_VARARGS, "the bytes of a file"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "slurp", NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_slurp(void) { return PyModule_Create(&module); }
