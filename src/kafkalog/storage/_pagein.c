/* Paging in a stretch of a mapped segment without holding the GIL.
 *
 * Why: the cleaner's key scan walks a segment's mapping in compiled code that releases the GIL,
 * while a worker asks the kernel to map the next stretch's pages (MADV_POPULATE_READ). On this
 * kind of machine populating page tables costs as much as copying the bytes, and Python's
 * mmap.madvise holds the GIL throughout, so the walk could not even start its next call until
 * the worker was done: the two ran one after the other. Here the worker lets go of the GIL.
 * Refuses: anything but a read-only hint on a buffer it holds for the whole call (the mapping
 * cannot be closed under it), and deciding what to do when the kernel says no: it raises
 * OSError with the errno and the caller decides.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* madvise(buffer, start, end, advice) -> None
 * madvise(2) with `advice` over the pages holding buffer[start:end] (clipped to the buffer;
 * an empty range does nothing), the GIL released for the call. */
static PyObject *pagein_madvise(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    int advice, rc = 0, err = 0;
    if (!PyArg_ParseTuple(args, "y*nni", &view, &start, &end, &advice)) return NULL;
    if (start < 0) start = 0;
    if (end > view.len) end = view.len;
    if (start < end) {
        long page = sysconf(_SC_PAGESIZE);
        uintptr_t first = (uintptr_t)view.buf + (uintptr_t)start;
        uintptr_t aligned = first - first % (uintptr_t)(page > 0 ? page : 4096);
        size_t length = (size_t)((uintptr_t)view.buf + (uintptr_t)end - aligned);
        Py_BEGIN_ALLOW_THREADS
        rc = madvise((void *)aligned, length, advice);
        err = errno;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (rc != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef pagein_methods[] = {
    {"madvise", pagein_madvise, METH_VARARGS,
     "madvise(buffer, start, end, advice): madvise(2) over buffer[start:end], GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pagein_module = {
    PyModuleDef_HEAD_INIT, "_pagein", "madvise(2) on a mapped buffer without the GIL.", -1,
    pagein_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pagein(void) { return PyModule_Create(&pagein_module); }
