/* kafkalog.records._fastcodec, part four: the walks over batch headers.
 *
 * Why: a fetch finds its start by walking batch headers from the offset index's position to
 * the first batch whose last offset reaches the target (Kafka's
 * FileRecords.searchForOffsetWithSize). In Python that walk was a third of Log.read's own
 * time per 1 MiB fetch. This is the same walk over the same header fields as
 * kafkalog.records.scanner.batch_extent, with the same stops. And every read of batches frames
 * each one (size, magic, CRC, offsets in a segment): in Python that was 2 us a batch, more
 * than decoding ten small records. Refuses: to decide anything the reference would say
 * differently. A last offset beyond int64 (a base offset near the top plus its delta) or a
 * target beyond int64 answers "ask the reference", which then words it; damage is reported as
 * facts (where, which offsets), and the caller words the error; the framing walk stops short
 * of anything but a whole, sound v2 batch and leaves it to the scanner.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_codec_state.h"
#include "_v2_format.h"
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

enum { CRC_AT = 17, CRC_START = 21 };

/* 1 when crc(batch bytes from CRC_START) equals the stored CRC, 0 when not, -1 on error. */
static int crc_matches(PyObject *crc, const uint8_t *b, Py_ssize_t total) {
    PyObject *region = PyMemoryView_FromMemory((char *)b + CRC_START, total - CRC_START,
                                               PyBUF_READ);
    PyObject *got = region ? PyObject_CallOneArg(crc, region) : NULL;
    Py_XDECREF(region);
    if (!got) return -1;
    unsigned long long value = PyLong_AsUnsignedLongLong(got);
    Py_DECREF(got);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    return value == load_be(b + CRC_AT, 4);
}

/* frame_v2(buffer, position, stop, limit, max_size, segment_base, next_offset, header_type,
 *          crc) -> (headers, more)
 * The headers of the whole, sound v2 batches laid from `position`, as the scanner would pass
 * them: each at least a v2 header long and within `stop` and `max_size` (-1: none), its CRC
 * equal to crc(bytes from the attributes) unless crc is None, and, with a segment_base, its
 * offsets rising from next_offset and within an index entry's reach of the base. It stops at
 * the first batch that is anything else, for the scanner to judge, and once `limit` bytes are
 * walked: `more` says it stopped for the limit alone. */
static PyObject *frame_v2(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop, limit, max_size;
    PyObject *segment_base_obj, *crc;
    long long next_offset;
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "y*nnnnOLO!O", &view, &pos, &stop, &limit, &max_size,
                          &segment_base_obj, &next_offset, &PyType_Type, &type, &crc))
        return NULL;
    PyObject *headers = PyList_New(0), *out = NULL;
    int more = 0;
    long long segment_base = 0;
    int in_segment = segment_base_obj != Py_None;
    if (!headers) goto done;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple type");
        goto done;
    }
    if (in_segment) {
        segment_base = PyLong_AsLongLong(segment_base_obj);
        if (segment_base == -1 && PyErr_Occurred()) goto done;
    }
    const uint8_t *d = view.buf;
    if (stop > view.len) stop = view.len;
    if (pos < 0) pos = 0;
    Py_ssize_t start = pos;
    while (stop - pos >= V2_HEADER_SIZE) {
        if (pos - start >= limit) {
            more = 1;
            break;
        }
        const uint8_t *b = d + pos;
        int64_t total = (int64_t)(int32_t)load_be(b + 8, 4) + LOG_OVERHEAD;
        if (b[16] != 2 || total < V2_HEADER_SIZE || total > stop - pos ||
            (max_size >= 0 && total > max_size))
            break;
        if (in_segment) {
            int64_t first = (int64_t)load_be(b, 8), last, relative;
            int32_t delta = (int32_t)load_be(b + LAST_OFFSET_DELTA_AT, 4);
            if (__builtin_add_overflow(first, (int64_t)delta, &last) || first < next_offset ||
                last < first || __builtin_sub_overflow(last, segment_base, &relative) ||
                relative < 0 || relative > 0x7FFFFFFF)
                break;
            next_offset = last + 1;
        }
        if (crc != Py_None) {
            int rc = crc_matches(crc, b, (Py_ssize_t)total);
            if (rc < 0) goto done;
            if (rc == 0) break;
        }
        PyObject *header = v2_header(type, b);
        if (!header || PyList_Append(headers, header) < 0) {
            Py_XDECREF(header);
            goto done;
        }
        Py_DECREF(header);
        pos += (Py_ssize_t)total;
    }
    out = Py_BuildValue("(OO)", headers, more ? Py_True : Py_False);
done:
    Py_XDECREF(headers);
    PyBuffer_Release(&view);
    return out;
}

PyMethodDef search_methods[] = {
    {"frame_v2", frame_v2, METH_VARARGS,
     "frame_v2(buffer, position, stop, limit, max_size, segment_base, next_offset, header_type, "
     "crc) -> (headers, more)"},
    {"search_offset", search_offset, METH_VARARGS,
     "search_offset(buffer, position, stop, target) -> None | (0, position, size, last) | "
     "(1, position, last, previous) | (2, 0, 0, 0)"},
    {NULL, NULL, 0, NULL},
};
