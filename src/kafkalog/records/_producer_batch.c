/* producer_batch: the leader's check of a producer's batch in one compiled walk, without the GIL.
 *
 * Why: every Produce request carries one v2 batch per partition, and the leader must frame it,
 * verify its CRC and walk its records (Kafka's LogValidator) before assigning offsets. Done in
 * Python objects that costs several passes per request; here it is one pass over the bytes, and
 * the CRC and the record walk run with the GIL released, so request handler threads check
 * batches in parallel. Refuses: to word an error. Anything but a sound batch of the shape a
 * producer sends answers None, and the caller's reference path (the scanner and the validator)
 * judges it and raises in its own words; the config's checks (sizes, codecs, timestamp bounds,
 * keys of compacted topics) are the caller's too, on the facts returned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_codec_state.h"
#include "_crc32c.h"
#include "_v2_format.h"

enum { CRC_AT = 17, CRC_START = 21, ATTRIBUTES_AT = 21, DELTA_AT = 23, MAX_TS_AT = 35,
       PRODUCER_ID_AT = 43, SEQUENCE_AT = 53, COUNT_AT = 57 };

typedef struct {
    Py_ssize_t null_keys;
    int64_t min_ts, max_ts, max_all_ts;
    int sequential;
} Stats;

/* Walk `count` records of d[0:end], as ColumnBuilder's light mode does; 0 when all are sound
 * and fill the region exactly. Runs without the GIL: it touches no object. */
static int walk_records(const uint8_t *d, Py_ssize_t end, int32_t count, int has_lat,
                        int64_t lat, int64_t base_ts, Stats *s) {
    Damage damage = {0};
    Py_ssize_t pos = 0;
    s->null_keys = 0;
    s->min_ts = INT64_MAX;
    s->max_ts = s->max_all_ts = INT64_MIN;
    s->sequential = 1;
    for (int32_t i = 0; i < count; i++) {
        RecordSpan r;
        if (parse_record(d, end, &pos, &r, &damage) < 0) return -1;
        int64_t ts = lat;
        if (!has_lat && __builtin_add_overflow(base_ts, r.ts_delta, &ts)) return -1;
        if (r.offset_delta != i) s->sequential = 0;
        if (r.key_len < 0) s->null_keys++;
        if (ts > s->max_all_ts) s->max_all_ts = ts;
        if (ts != -1) {
            if (ts < s->min_ts) s->min_ts = ts;
            if (ts > s->max_ts) s->max_ts = ts;
        }
    }
    return pos == end ? 0 : -1;
}

static PyObject *ts_or_none(int64_t v, int64_t none) {
    return v == none ? Py_NewRef(Py_None) : PyLong_FromLongLong(v);
}

/* producer_batch(data, header_type, inflate) -> (header, (records, null_keys, min_ts, max_ts,
 *                                                max_all_ts, sequential)) | None
 * `data` must be exactly one v2 batch with base offset 0, its CRC right, a record count equal
 * to its offset span, no control flag, a sequence wherever there is a producer id, and records
 * that parse and fill it (after inflate(codec id, payload) for a compressed one, called with
 * the GIL held; an exception from it answers None). */
static PyObject *producer_batch(PyObject *module, PyObject *args) {
    Py_buffer view;
    PyTypeObject *type;
    PyObject *inflate;
    if (!PyArg_ParseTuple(args, "y*O!O", &view, &PyType_Type, &type, &inflate)) return NULL;
    if (crc32c_hardware < 0) crc32c_init(); /* once, under the GIL */
    const uint8_t *d = view.buf;
    Py_ssize_t n = view.len;
    PyObject *out = NULL, *inflated = NULL;
    if (n < V2_HEADER_SIZE || d[16] != 2 || (int64_t)load_be(d + 8, 4) + LOG_OVERHEAD != n ||
        load_be(d, 8) != 0)
        goto not_ours;
    int attributes = (int)load_be(d + ATTRIBUTES_AT, 2);
    int codec = attributes & ATTR_COMPRESSION;
    int32_t count = (int32_t)load_be(d + COUNT_AT, 4);
    int64_t producer_id = (int64_t)load_be(d + PRODUCER_ID_AT, 8);
    if (count <= 0 || (int32_t)load_be(d + DELTA_AT, 4) != count - 1 ||
        attributes & ATTR_CONTROL || codec > 4 ||
        (producer_id >= 0 && (int32_t)load_be(d + SEQUENCE_AT, 4) < 0))
        goto not_ours;
    int crc_ok;
    Py_BEGIN_ALLOW_THREADS
    crc_ok = crc32c_of(d + CRC_START, (size_t)(n - CRC_START)) == load_be(d + CRC_AT, 4);
    Py_END_ALLOW_THREADS
    if (!crc_ok) goto not_ours;
    const uint8_t *records = d + V2_HEADER_SIZE;
    Py_ssize_t records_len = n - V2_HEADER_SIZE;
    Py_buffer inflated_view = {0};
    if (codec) {
        PyObject *payload = PyMemoryView_FromMemory((char *)records, records_len, PyBUF_READ);
        inflated = payload ? PyObject_CallFunction(inflate, "iO", codec, payload) : NULL;
        Py_XDECREF(payload);
        if (!inflated) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto done;
            PyErr_Clear(); /* damaged or unsupported: the reference path words it */
            goto not_ours;
        }
        if (PyObject_GetBuffer(inflated, &inflated_view, PyBUF_SIMPLE) < 0) goto done;
        records = inflated_view.buf;
        records_len = inflated_view.len;
    }
    Stats s;
    int walked;
    int has_lat = attributes & ATTR_LOG_APPEND_TIME;
    int64_t max_ts = (int64_t)load_be(d + MAX_TS_AT, 8), base_ts = (int64_t)load_be(d + 27, 8);
    Py_BEGIN_ALLOW_THREADS
    walked = walk_records(records, records_len, count, has_lat, max_ts, base_ts, &s);
    Py_END_ALLOW_THREADS
    if (codec) PyBuffer_Release(&inflated_view);
    if (walked < 0) goto not_ours;
    PyObject *header = v2_header(type, d);
    if (!header) goto done;
    out = Py_BuildValue("(N(inNNNO))", header, count, s.null_keys,
                        ts_or_none(s.min_ts, INT64_MAX), ts_or_none(s.max_ts, INT64_MIN),
                        ts_or_none(s.max_all_ts, INT64_MIN), s.sequential ? Py_True : Py_False);
    goto done;
not_ours:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(inflated);
    PyBuffer_Release(&view);
    return out;
}

PyMethodDef producer_batch_methods[] = {
    {"producer_batch", producer_batch, METH_VARARGS,
     "producer_batch(data, header_type, inflate) -> (header, stats) | None: a producer's one "
     "v2 batch checked and walked without the GIL (None: the reference path judges it)"},
    {NULL, NULL, 0, NULL},
};
