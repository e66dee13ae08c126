/* kafkalog.records._fastcodec, part three: a list of Record objects to a v2 records region.
 *
 * Why: MemoryRecords.build and Log.append start from Record objects; reading their fields from
 * C and writing the region in one pass makes building a batch cost little more than the copy.
 * Refuses: any record it does not take exactly (see records_encode): it returns None and writes
 * nothing, and the caller runs the pure-Python reference, whose bytes and errors are the spec.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_codec_state.h"
#include "_v2_format.h"
#include "_record_objects.h"

/* ---- encode: list[Record] -> records region --------------------------------------------- */

typedef struct {
    int64_t ts_delta;
    int32_t offset_delta, body;
} Planned;

/* A value or key as the fast path takes it: None (n = -1) or exact bytes. */
static inline int plain_bytes(PyObject *o, const char **p, Py_ssize_t *n) {
    *p = NULL;
    *n = -1;
    if (o == Py_None) return 1;
    if (!PyBytes_CheckExact(o)) return 0;
    *p = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 1;
}

static inline Py_ssize_t field_size(Py_ssize_t n) {
    return n < 0 ? 1 : uvarint_size((uint64_t)n << 1) + n;
}

/* The encoded size of the headers, or -1 when the reference must take them (any header not an
 * exact (str, bytes | None) tuple, a key that is not valid UTF-8, a sequence not list/tuple). */
static Py_ssize_t headers_size(PyObject *headers) {
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers)) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    if (count == 0) return 1;
    Py_ssize_t size = uvarint_size((uint64_t)count << 1);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t h = 0; h < count; h++) {
        PyObject *pair = items[h];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)))
            return -1;
        Py_ssize_t kn, vn;
        const char *v;
        if (!PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &kn)) {
            PyErr_Clear();
            return -1;
        }
        if (!plain_bytes(PyTuple_GET_ITEM(pair, 1), &v, &vn)) return -1;
        size += field_size(kn) + field_size(vn);
    }
    return size;
}

static char *put_field(char *p, const char *src, Py_ssize_t n) {
    if (n < 0) {
        *p++ = 1; /* zig-zag -1: null */
        return p;
    }
    p = put_uvarint(p, (uint64_t)n << 1);
    memcpy(p, src, (size_t)n);
    return p + n;
}

static char *put_headers(char *p, PyObject *headers) {
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    p = put_uvarint(p, (uint64_t)count << 1);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t h = 0; h < count; h++) {
        Py_ssize_t kn, vn;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(items[h], 0), &kn), *v = NULL;
        plain_bytes(PyTuple_GET_ITEM(items[h], 1), &v, &vn);
        p = put_field(p, k, kn);
        p = put_field(p, v, vn);
    }
    return p;
}

/* Plan record i: its deltas and body size; 0 when the reference must take it. */
typedef struct {
    int64_t base_offset, null_ts;
    int keep_offsets;
} EncodeArgs;

static int plan_record(PyTypeObject *type, PyObject *rec, const EncodeArgs *a,
                       int32_t *last_delta, int has_base, int64_t *base_ts, int64_t *max_ts,
                       Planned *out) {
    if (!Py_IS_TYPE(rec, type)) return 0; /* a subclass may hold more than the record */
    PyObject *value = R(rec)->value, *key = R(rec)->key, *headers = R(rec)->headers;
    PyObject *ts_obj = R(rec)->timestamp, *offset_obj = R(rec)->offset;
    if (!value || !key || !headers || !ts_obj || !offset_obj) return 0;
    const char *p;
    Py_ssize_t kn, vn;
    if (!plain_bytes(key, &p, &kn) || !plain_bytes(value, &p, &vn)) return 0;
    Py_ssize_t hsize = headers_size(headers);
    if (hsize < 0) return 0;
    int overflow = 0;
    long long ts = a->null_ts, offset;
    if (ts_obj != Py_None) {
        if (!PyLong_CheckExact(ts_obj)) return 0;
        ts = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
        if (overflow || ts < -1) return 0; /* the reference refuses or writes it its own way */
    }
    int64_t delta = (int64_t)*last_delta + 1;
    if (a->keep_offsets) { /* else the reference never reads the record's offset either */
        if (!PyLong_CheckExact(offset_obj)) return 0;
        offset = PyLong_AsLongLongAndOverflow(offset_obj, &overflow);
        if (overflow) return 0;
        if (offset >= 0 && __builtin_sub_overflow(offset, a->base_offset, &delta)) return 0;
    }
    if (delta <= *last_delta || delta > INT32_MAX) return 0;
    if (!has_base) *base_ts = ts;
    int64_t tsd;
    if (__builtin_sub_overflow(ts, *base_ts, &tsd)) return 0;
    Py_ssize_t body = 1 + uvarint_size(zz64(tsd)) + uvarint_size(zz32(delta)) + field_size(kn) +
                      field_size(vn) + hsize;
    if (body > (INT32_MAX >> 1)) return 0;
    if (ts > *max_ts) *max_ts = ts;
    *last_delta = (int32_t)delta;
    out->ts_delta = tsd;
    out->offset_delta = (int32_t)delta;
    out->body = (int32_t)body;
    return 1;
}

/* encode_records(records, base_offset, last_offset_delta, base_timestamp | None, max_timestamp,
 *                null_timestamp, keep_offsets)
 *   -> (records_region, count, base_timestamp, max_timestamp, last_offset_delta) or None
 * Continues a builder in the given state as RecordBatchBuilder.append_records would, record by
 * record; None (nothing written) when any record needs the reference. */
PyObject *records_encode(PyObject *module, PyObject *args) {
    PyTypeObject *type = codec_record_type(module);
    PyObject *seq, *base_obj;
    long long base_offset, max_ts, null_ts;
    int last_delta, keep_offsets;
    if (!PyArg_ParseTuple(args, "OLiOLLp", &seq, &base_offset, &last_delta, &base_obj, &max_ts,
                          &null_ts, &keep_offsets))
        return NULL;
    EncodeArgs a = {base_offset, null_ts, keep_offsets};
    if (null_ts < -1) Py_RETURN_NONE;
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) Py_RETURN_NONE;
    int has_base = base_obj != Py_None;
    long long base_ts = 0;
    if (has_base) {
        int overflow = 0;
        base_ts = PyLong_AsLongLongAndOverflow(base_obj, &overflow);
        if (overflow || (base_ts == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Planned *plan = PyMem_Malloc(sizeof(Planned) * (size_t)(n ? n : 1));
    if (!plan) return PyErr_NoMemory();
    PyObject **items = PySequence_Fast_ITEMS(seq), *out = NULL;
    int32_t delta = last_delta;
    int64_t base = base_ts, max = max_ts;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!plan_record(type, items[i], &a, &delta, has_base || i > 0, &base, &max,
                         &plan[i])) {
            PyMem_Free(plan);
            Py_RETURN_NONE;
        }
        total += uvarint_size(zz32(plan[i].body)) + plan[i].body;
    }
    PyObject *region = PyBytes_FromStringAndSize(NULL, total);
    if (!region) goto done;
    char *p = PyBytes_AS_STRING(region);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = items[i];
        const char *k = NULL, *v = NULL;
        Py_ssize_t kn, vn;
        plain_bytes(R(rec)->key, &k, &kn);
        plain_bytes(R(rec)->value, &v, &vn);
        p = put_uvarint(p, zz32(plan[i].body));
        *p++ = 0; /* attributes */
        p = put_uvarint(p, zz64(plan[i].ts_delta));
        p = put_uvarint(p, zz32(plan[i].offset_delta));
        p = put_field(p, k, kn);
        p = put_field(p, v, vn);
        PyObject *headers = R(rec)->headers;
        if (PySequence_Fast_GET_SIZE(headers) == 0)
            *p++ = 0;
        else
            p = put_headers(p, headers);
    }
    PyObject *base_out = n || has_base ? PyLong_FromLongLong(base) : Py_NewRef(Py_None);
    if (!base_out) {
        Py_DECREF(region);
        goto done;
    }
    out = Py_BuildValue("(NnNLi)", region, n, base_out, (long long)max, (int)delta);
done:
    PyMem_Free(plan);
    return out;
}

/* record_facts(records) -> (null keys, min timestamp | None, max timestamp | None) or None
 * What the leader checks before an append (Kafka's LogValidator: keys on compacted topics,
 * CreateTime bounds), over timestamps given (not None, not -1); None when any item is not an
 * exact Record or holds a timestamp that is not a plain int, so the caller's loop decides. */
PyObject *records_facts(PyObject *module, PyObject *seq) {
    PyTypeObject *type = codec_record_type(module);
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), null_keys = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = items[i];
        if (!Py_IS_TYPE(rec, type) || !R(rec)->key || !R(rec)->timestamp) Py_RETURN_NONE;
        null_keys += R(rec)->key == Py_None;
        PyObject *ts_obj = R(rec)->timestamp;
        if (ts_obj == Py_None) continue;
        if (!PyLong_CheckExact(ts_obj)) Py_RETURN_NONE;
        int overflow;
        long long ts = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
        if (overflow) Py_RETURN_NONE;
        if (ts == -1) continue;
        if (ts < lo) lo = ts;
        if (ts > hi) hi = ts;
    }
    if (lo > hi) return Py_BuildValue("(nOO)", null_keys, Py_None, Py_None);
    return Py_BuildValue("(nLL)", null_keys, (long long)lo, (long long)hi);
}
