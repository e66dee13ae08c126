/* kafkalog.records._fastcodec, part four: the offset search every fetch makes.
 *
 * Why: a fetch finds its start by walking batch headers from the offset index's position to
 * the first batch whose last offset reaches the target (Kafka's
 * FileRecords.searchForOffsetWithSize). In Python that walk was a third of Log.read's own
 * time per 1 MiB fetch. This is the same walk over the same header fields as
 * kafkalog.records.scanner.batch_extent, with the same stops. Refuses: to decide anything the
 * reference would say differently. A last offset beyond int64 (a base offset near the top plus
 * its delta) or a target beyond int64 answers "ask the reference", which then words it; damage
 * is reported as facts (where, which offsets), and the caller words the error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_fastcodec.h"
#include "_record_objects.h"

enum {
    UP_TO_MAGIC = 17,    /* base offset, size, leader epoch or CRC, magic */
    MIN_ENTRY_SIZE = 14, /* the smallest legal v0 message */
    LAST_OFFSET_DELTA_AT = 23,
};

/* batch_extent: 1 with *size and *last for a whole batch at pos; 0 where the walk stops (a
 * partial or malformed batch); -1 when its last offset does not fit int64. */
static int extent(const uint8_t *d, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t *size,
                  int64_t *last) {
    if (stop - pos < UP_TO_MAGIC) return 0;
    int64_t base = (int64_t)load_be(d + pos, 8);
    int64_t total = (int64_t)(int32_t)load_be(d + pos + 8, 4) + LOG_OVERHEAD;
    int8_t magic = (int8_t)d[pos + 16];
    if (total < MIN_ENTRY_SIZE + LOG_OVERHEAD || total > stop - pos || magic > 2 || magic < 0)
        return 0;
    *size = (Py_ssize_t)total;
    if (magic != 2) {
        *last = base;
        return 1;
    }
    if (total < V2_HEADER_SIZE) return 0;
    int32_t delta = (int32_t)load_be(d + pos + LAST_OFFSET_DELTA_AT, 4);
    if (__builtin_add_overflow(base, (int64_t)delta, last))
        return -1;
    return 1;
}

/* search_offset(buffer, position, stop, target)
 *   -> None | (0, position, size, last) | (1, position, last, previous) | (2, 0, 0, 0)
 * From `position`, the first whole batch whose last offset is >= target (0), unless a batch's
 * last offset does not rise above the one before it, first (1, where, which, after what); the
 * batch after the one found is checked too. None: the walk stopped first. 2: ask the
 * reference (an offset beyond int64). */
static PyObject *search_offset(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop;
    PyObject *target_obj;
    if (!PyArg_ParseTuple(args, "y*nnO!", &view, &pos, &stop, &PyLong_Type, &target_obj))
        return NULL;
    int overflow;
    long long target = PyLong_AsLongLongAndOverflow(target_obj, &overflow);
    PyObject *out = NULL;
    if (target == -1 && PyErr_Occurred()) goto done;
    if (overflow) {
        out = Py_BuildValue("(innn)", 2, (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0);
        goto done;
    }
    const uint8_t *d = view.buf;
    if (stop > view.len) stop = view.len;
    if (pos < 0) pos = 0;
    int64_t previous = -1;
    for (;;) {
        Py_ssize_t size;
        int64_t last;
        int rc = extent(d, pos, stop, &size, &last);
        if (rc == 0) {
            out = Py_NewRef(Py_None);
            break;
        }
        if (rc < 0) goto ask_reference;
        if (last <= previous) {
            out = Py_BuildValue("(inLL)", 1, pos, (long long)last, (long long)previous);
            break;
        }
        if (last >= target) {
            Py_ssize_t after_size;
            int64_t after;
            int next = extent(d, pos + size, stop, &after_size, &after);
            if (next < 0) goto ask_reference;
            if (next && after <= last)
                out = Py_BuildValue("(inLL)", 1, pos + size, (long long)after, (long long)last);
            else
                out = Py_BuildValue("(innL)", 0, pos, size, (long long)last);
            break;
        }
        previous = last;
        pos += size;
    }
    goto done;
ask_reference:
    out = Py_BuildValue("(innn)", 2, (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0);
done:
    PyBuffer_Release(&view);
    return out;
}

PyMethodDef search_methods[] = {
    {"search_offset", search_offset, METH_VARARGS,
     "search_offset(buffer, position, stop, target) -> None | (0, position, size, last) | "
     "(1, position, last, previous) | (2, 0, 0, 0)"},
    {NULL, NULL, 0, NULL},
};
