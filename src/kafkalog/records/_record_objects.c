/* kafkalog.records._fastcodec, part two: v2 records to and from kafkalog's Record objects.
 *
 * Why: most users never see Arrow; they iterate a batch for Record objects and build batches
 * from lists of them. Calling Record's __init__ from a Python loop costs more than decoding the
 * record, so this file fills and reads Record's five __slots__ directly, at the offsets its member
 * descriptors give. Refuses: anything but the exact Record class (a subclass could add its own
 * invariants), any input the pure-Python reference would word differently: decode raises
 * CorruptRecords where the reference raises CorruptRecordError; encode returns None for any
 * record it does not take exactly (a bytearray value, a bool timestamp, a bad offset or type),
 * so the caller runs the reference, which then writes the same bytes or raises its own error.
 * Freed records of the exact type wait on a bounded freelist for the next decode, as aiokafka's
 * Cython records and CPython's tuples do: a decode of 1,000 records otherwise paid a thousand
 * allocations and frees and ran the young-generation collector about twice. So do their header
 * lists that nothing else holds (emptied, each keeping its item array): a list, its item array
 * and its collector link were a third of what a header cost. The encode loop is in
 * _record_encode.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_codec_state.h"
#include "_v2_format.h"
#include "_record_objects.h"

/* ---- the Record type --------------------------------------------------------------------- */

static int Record_init(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"value", "key", "headers", "timestamp", "offset", NULL};
    PyObject *value, *key = Py_None, *headers = NULL, *timestamp = Py_None, *offset = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOO:Record", names, &value, &key, &headers,
                                     &timestamp, &offset))
        return -1;
    headers = headers ? Py_NewRef(headers) : PyTuple_New(0);
    offset = offset ? Py_NewRef(offset) : PyLong_FromLong(-1);
    if (!headers || !offset) {
        Py_XDECREF(headers);
        Py_XDECREF(offset);
        return -1;
    }
    Py_XSETREF(R(self)->value, Py_NewRef(value));
    Py_XSETREF(R(self)->key, Py_NewRef(key));
    Py_XSETREF(R(self)->headers, headers);
    Py_XSETREF(R(self)->timestamp, Py_NewRef(timestamp));
    Py_XSETREF(R(self)->offset, offset);
    return 0;
}

static int Record_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self)); /* instances of a heap type keep it alive */
    Py_VISIT(R(self)->value);
    Py_VISIT(R(self)->key);
    Py_VISIT(R(self)->headers);
    Py_VISIT(R(self)->timestamp);
    Py_VISIT(R(self)->offset);
    return 0;
}

static int Record_clear(PyObject *self) {
    Py_CLEAR(R(self)->value);
    Py_CLEAR(R(self)->key);
    Py_CLEAR(R(self)->headers);
    Py_CLEAR(R(self)->timestamp);
    Py_CLEAR(R(self)->offset);
    return 0;
}

/* Empty ``list``, the headers of a record being freed, onto the freelist when nothing else holds
 * it, or release it. Its items go first: whatever their release runs cannot reach the list,
 * which no one else refers to and the collector does not see. */
static void keep_header_list(RecordFreelist *freelist, PyObject *list) {
    if (!freelist || freelist->list_count >= HEADER_LIST_FREELIST_MAX || !PyList_CheckExact(list) ||
        Py_REFCNT(list) != 1) {
        Py_DECREF(list);
        return;
    }
    PyListObject *l = (PyListObject *)list;
    if (l->allocated < 1 || l->allocated > HEADER_LIST_KEEP_ALLOCATED) {
        Py_DECREF(list);
        return;
    }
    PyObject_GC_UnTrack(list); /* a list a caller made is tracked; ours never were */
    Py_ssize_t n = Py_SIZE(l);
    Py_SET_SIZE(l, 0);
    for (Py_ssize_t i = 0; i < n; i++) Py_CLEAR(l->ob_item[i]);
    if (freelist->list_count < HEADER_LIST_FREELIST_MAX) /* again: a release may have decoded */
        freelist->lists[freelist->list_count++] = list;
    else
        Py_DECREF(list);
}

static void Record_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    /* a subclass's instances (another size, other deallocs) are freed as usual */
    RecordFreelist *freelist =
        type->tp_dealloc == Record_dealloc ? codec_record_freelist(PyType_GetModule(type)) : NULL;
    PyObject *headers = R(self)->headers;
    R(self)->headers = NULL;
    Record_clear(self);
    if (headers) keep_header_list(freelist, headers);
    if (freelist && freelist->count < RECORD_FREELIST_MAX)
        freelist->items[freelist->count++] = self;
    else
        type->tp_free(self);
    Py_DECREF(type);
}

void record_freelist_clear(RecordFreelist *freelist) {
    while (freelist->count > 0) PyObject_GC_Del(freelist->items[--freelist->count]);
    while (freelist->list_count > 0) Py_DECREF(freelist->lists[--freelist->list_count]);
}

static PyMemberDef Record_members[] = {
    {"value", T_OBJECT_EX, offsetof(RecordObject, value), 0, "bytes, or None for a tombstone"},
    {"key", T_OBJECT_EX, offsetof(RecordObject, key), 0, "bytes or None"},
    {"headers", T_OBJECT_EX, offsetof(RecordObject, headers), 0,
     "a sequence of (str, bytes | None)"},
    {"timestamp", T_OBJECT_EX, offsetof(RecordObject, timestamp), 0,
     "ms since the epoch, or None"},
    {"offset", T_OBJECT_EX, offsetof(RecordObject, offset), 0, "-1 until the record is in a log"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Record_slots[] = {
    {Py_tp_init, Record_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Record_dealloc},
    {Py_tp_traverse, Record_traverse},
    {Py_tp_clear, Record_clear},
    {Py_tp_members, Record_members},
    /* the first line, up to "--", is the signature inspect.signature reports */
    {Py_tp_doc, "Record(value, key=None, headers=(), timestamp=None, offset=-1)\n--\n\n"
                "One record (kafkalog.records.record.Record, made in C). Records read from a "
                "batch are left out of the cycle collector, as their fields cannot form a "
                "cycle; one made to refer to itself, through its headers list or a field, is "
                "never freed."},
    {0, NULL},
};

PyType_Spec record_type_spec = {
    .name = "kafkalog.records.record.Record",
    .basicsize = sizeof(RecordObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Record_slots,
};

/* ---- decode: records region -> list[Record] ---------------------------------------------- */

static PyObject *bytes_or_none(const uint8_t *d, Py_ssize_t pos, int32_t n) {
    if (n < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)d + pos, n);
}

/* base + delta as a Python int, exact even where int64 would overflow (the reference's ints
 * are unbounded). */
static PyObject *int_sum(int64_t base, int64_t delta) {
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum)) return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base), *b = a ? PyLong_FromLongLong(delta) : NULL;
    PyObject *out = b ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

/* What consecutive records usually share, made once: producers stamp many records of a batch
 * with one timestamp and give them the same header keys. Borrowed references into records
 * that the output list keeps alive. */
enum { SHARED_KEYS = 8 };
typedef struct {
    PyObject *ts;
    int64_t ts_value;
    PyObject *header_keys[SHARED_KEYS]; /* the previous record's keys, by position */
} Shared;

static PyObject *header_key(const uint8_t *d, Py_ssize_t pos, int32_t n, int32_t h,
                            Shared *shared) {
    PyObject *last = h < SHARED_KEYS ? shared->header_keys[h] : NULL;
    if (last) {
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(last, &len); /* cached: no encoding */
        if (utf8 && len == n && memcmp(utf8, d + pos, (size_t)n) == 0) return Py_NewRef(last);
    }
    PyObject *key = PyUnicode_DecodeUTF8((const char *)d + pos, n, NULL);
    if (key && h < SHARED_KEYS) shared->header_keys[h] = key;
    return key;
}

/* An untracked list of ``n`` NULL items (held by an untracked record: see make_record), from
 * the freelist when its top one has room. */
static PyObject *new_header_list(RecordFreelist *freelist, Py_ssize_t n) {
    if (freelist && freelist->list_count > 0) {
        PyListObject *l = (PyListObject *)freelist->lists[freelist->list_count - 1];
        if (l->allocated >= n) {
            freelist->list_count--;
            memset(l->ob_item, 0, (size_t)n * sizeof(PyObject *));
            Py_SET_SIZE(l, n);
            return (PyObject *)l;
        }
    }
    PyObject *list = PyList_New(n);
    if (list) PyObject_GC_UnTrack(list);
    return list;
}

/* The headers parse_record checked, as the reference's list of (str, bytes | None). */
static PyObject *header_list(RecordFreelist *freelist, const uint8_t *d, const RecordSpan *r,
                             Shared *shared, Damage *damage) {
    PyObject *list = new_header_list(freelist, r->header_count);
    if (!list) return NULL;
    Py_ssize_t pos = r->headers_pos;
    for (int32_t h = 0; h < r->header_count; h++) {
        int32_t n;
        if (read_varint32(d, r->end, &pos, &n, damage) < 0) goto fail;
        PyObject *key = header_key(d, pos, n, h, shared);
        if (!key) { /* check_headers agreed it was UTF-8; if Python does not, say it alike */
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                damaged(damage, "record has a header key that is not UTF-8", r->start);
            }
            goto fail; /* anything else (no memory) is raised as it is */
        }
        pos += n;
        if (read_varint32(d, r->end, &pos, &n, damage) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *value = bytes_or_none(d, pos, n);
        PyObject *pair = value ? PyTuple_New(2) : NULL;
        if (!pair) {
            Py_DECREF(key);
            Py_XDECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyObject_GC_UnTrack(pair); /* str and bytes: as the collector's own first pass would */
        PyList_SET_ITEM(list, h, pair);
        if (n > 0) pos += n;
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

/* One Record from a parsed span; NULL with an exception or with damage recorded. */
static PyObject *make_record(PyTypeObject *type, RecordFreelist *freelist, const uint8_t *d,
                             const RecordSpan *r, int64_t base_offset, int64_t base_ts,
                             PyObject *log_append_time, PyObject *no_headers, Shared *shared,
                             Damage *damage) {
    PyObject *key = bytes_or_none(d, r->key_pos, r->key_len);
    PyObject *value = key ? bytes_or_none(d, r->value_pos, r->value_len) : NULL;
    PyObject *headers = NULL, *ts = NULL, *offset = NULL, *rec = NULL;
    int64_t want;
    if (!value) goto fail;
    headers =
        r->header_count ? header_list(freelist, d, r, shared, damage) : Py_NewRef(no_headers);
    if (!headers) goto fail;
    if (log_append_time != Py_None) {
        ts = Py_NewRef(log_append_time);
    } else if (__builtin_add_overflow(base_ts, r->ts_delta, &want)) {
        ts = int_sum(base_ts, r->ts_delta); /* beyond int64: never shared */
    } else if (shared->ts && want == shared->ts_value) {
        ts = Py_NewRef(shared->ts);
    } else if ((ts = PyLong_FromLongLong(want))) {
        shared->ts_value = want;
        shared->ts = ts;
    }
    offset = ts ? int_sum(base_offset, r->offset_delta) : NULL;
    /* Never tracked by the cycle collector (PyObject_GC_New leaves it untracked), like its
     * header list: what decoding puts in them (bytes, ints, None, tuples of str and bytes) can
     * form no cycle, and walking a million young records at every collection was a third of
     * the read. A record a caller makes point back at itself is never freed; the type's doc
     * says so. Allocated last, so nothing sees it half filled; a freed one is taken first
     * (PyObject_Init: the type's reference and a new reference count, still untracked). */
    if (!offset) goto fail;
    if (freelist && freelist->count > 0)
        rec = PyObject_Init(freelist->items[--freelist->count], type);
    else
        rec = (PyObject *)PyObject_GC_New(RecordObject, type);
    if (!rec) goto fail;
    R(rec)->value = value;
    R(rec)->key = key;
    R(rec)->headers = headers;
    R(rec)->timestamp = ts;
    R(rec)->offset = offset;
    return rec;
fail:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_XDECREF(ts);
    Py_XDECREF(offset);
    return NULL;
}

/* decode_records(data, count, base_offset, base_timestamp, log_append_time | None) -> list */
static PyObject *records_decode(PyObject *module, PyObject *args) {
    PyTypeObject *type = codec_record_type(module);
    RecordFreelist *freelist = codec_record_freelist(module);
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts;
    PyObject *lat;
    if (!PyArg_ParseTuple(args, "y*nLLO", &view, &count, &base_offset, &base_ts, &lat))
        return NULL;
    const uint8_t *d = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    Damage damage = {0};
    PyObject *out = NULL, *no_headers = PyTuple_New(0);
    if (!no_headers) goto done;
    if (lat != Py_None && !PyLong_Check(lat)) {
        PyErr_SetString(PyExc_TypeError, "log_append_time must be an int or None");
        goto done;
    }
    if (count < 0) {
        damaged(&damage, "negative record count", 0);
        goto done;
    }
    if (count > end / 7) { /* a record takes at least 7 bytes: refuse before allocating */
        damaged(&damage, "record runs past the end of the batch", end);
        goto done;
    }
    out = PyList_New(count);
    if (!out) goto done;
    /* Each record made counts toward the next young-generation collection, which would walk
     * this half-filled list over and over: it is shown to the collector once it is whole. */
    PyObject_GC_UnTrack(out);
    Shared shared = {0};
    for (Py_ssize_t i = 0; i < count; i++) {
        RecordSpan r;
        PyObject *rec = NULL;
        if (parse_record(d, end, &pos, &r, &damage) == 0)
            rec = make_record(type, freelist, d, &r, base_offset, base_ts, lat, no_headers,
                              &shared, &damage);
        if (!rec) { /* the list's unfilled items are NULL, which its dealloc skips */
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, rec);
    }
    if (pos != end) {
        damaged(&damage, "incorrect declared batch size: bytes remain after the records", pos);
        Py_CLEAR(out);
    }
    if (out) PyObject_GC_Track(out);
done:
    Py_XDECREF(no_headers);
    PyBuffer_Release(&view);
    if (!out) return raise_damage(codec_corrupt_records(module), &damage);
    return out;
}

PyMethodDef record_methods[] = {
    {"decode_records", records_decode, METH_VARARGS,
     "decode_records(data, count, base_offset, base_timestamp, log_append_time) -> list[Record]"},
    {"encode_records", records_encode, METH_VARARGS,
     "encode_records(records, base_offset, last_offset_delta, base_timestamp, max_timestamp, "
     "null_timestamp, keep_offsets) -> (records_region, count, base_timestamp, max_timestamp, "
     "last_offset_delta) or None"},
    {"record_facts", records_facts, METH_O,
     "record_facts(records) -> (null_keys, min_timestamp, max_timestamp) or None"},
    {NULL, NULL, 0, NULL},
};
