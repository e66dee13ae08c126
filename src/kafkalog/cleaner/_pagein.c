/* Paging in a stretch of a mapped segment without holding the GIL.
 *
 * Why: the cleaner's key scan walks a segment's mapping in compiled code that releases the GIL,
 * while a worker gets the next stretch into the page tables by reading a byte of every
 * fault-around window (kafkalog.cleaner.page_in says why that, rather than MADV_POPULATE_READ).
 * In Python that loop would hold the GIL, so the walk could not start its next call meanwhile.
 * Refuses: writing, and reading outside the buffer it holds for the whole call (the mapping
 * cannot be closed under it); whether the file still reaches `end` is the caller's to ensure.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* touch(buffer, start, end, stride) -> None
 * Read one byte of buffer[start:end] at its start and at every address that is a multiple of
 * `stride` after it, the GIL released. Each read that faults has the kernel map the whole
 * fault-around window (64 KiB by default) in one go, which costs less than half of what
 * MADV_POPULATE_READ pays a page here. The caller keeps `end` within the mapped file: a read
 * past the file's end is SIGBUS, where madvise would only have failed. */
static PyObject *pagein_touch(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, stride;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &end, &stride)) return NULL;
    if (stride < 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "stride must be positive");
        return NULL;
    }
    if (start < 0) start = 0;
    if (end > view.len) end = view.len;
    if (start < end) {
        uintptr_t at = (uintptr_t)view.buf + (uintptr_t)start;
        uintptr_t stop = (uintptr_t)view.buf + (uintptr_t)end, step = (uintptr_t)stride;
        Py_BEGIN_ALLOW_THREADS
        while (at < stop) {
            (void)*(const volatile uint8_t *)at;
            at = (at / step + 1) * step;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef pagein_methods[] = {
    {"touch", pagein_touch, METH_VARARGS,
     "touch(buffer, start, end, stride): read a byte every stride bytes, GIL released."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot pagein_slots[] = {{0, NULL}};

/* No state at all, and multi-phase init (PEP 489), so every interpreter may import it. */
static struct PyModuleDef pagein_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafkalog.cleaner._pagein",
    .m_doc = "Page a mapped buffer in without the GIL (see kafkalog.cleaner.page_in).",
    .m_size = 0,
    .m_methods = pagein_methods,
    .m_slots = pagein_slots,
};

PyMODINIT_FUNC PyInit__pagein(void) { return PyModuleDef_Init(&pagein_module); }
