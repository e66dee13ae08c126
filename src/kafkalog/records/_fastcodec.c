/* kafkalog.records._fastcodec: the v2 record loop at compiled speed, columns in and out.
 *
 * Why: decoding or encoding a record in Python costs ~4 us, which caps a core near 0.25 M
 * records/s; Arrow consumers (Spark, to_arrow) take millions of rows/s. This module does only
 * the per-record work of Kafka's DefaultRecord -- varints, lengths, keys, values, headers -- into or
 * out of Arrow-layout buffers. Refuses: batch framing, CRCs and compression (done per batch in
 * Python with the crc32c/lz4/zstd libraries), any I/O, and accepting input the pure-Python
 * reference (kafkalog.records.record) would reject: both raise on the same inputs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_codec_state.h"
#include "_v2_format.h"
#include "_record_objects.h"

/* ---- ColumnBuilder: records -> Arrow buffers ---------------------------------------------- */

enum { C_OFFSET, C_TS, C_TSTYPE, C_KOFF, C_KDATA, C_KVALID, C_VOFF, C_VDATA, C_VVALID,
       C_HOFF, C_HVALID, C_HKOFF, C_HKDATA, C_HVOFF, C_HVDATA, C_HVVALID, C_COUNT };

typedef struct {
    PyObject_HEAD
    int with_headers, light, values;
    int64_t ts_scale;
    Py_ssize_t rows, headers;
    Buf b[C_COUNT];
} ColumnBuilder;

static int builder_reset(ColumnBuilder *self) {
    for (int i = 0; i < C_COUNT; i++) self->b[i].len = 0;
    self->rows = self->headers = 0;
    if (buf_i32(&self->b[C_KOFF], 0) || buf_i32(&self->b[C_VOFF], 0) ||
        buf_i32(&self->b[C_HOFF], 0) || buf_i32(&self->b[C_HKOFF], 0) ||
        buf_i32(&self->b[C_HVOFF], 0))
        return -1;
    return 0;
}

static int ColumnBuilder_init(ColumnBuilder *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"with_headers", "timestamp_scale", "light", "values", NULL};
    int with_headers = 0, light = 0, values = 1;
    long long scale = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pLpp", names, &with_headers, &scale, &light,
                                     &values))
        return -1;
    self->values = values; /* 0: value columns stay empty (the cleaner's key scan) */
    self->with_headers = with_headers && !light;
    self->light = light;
    self->ts_scale = scale;
    return builder_reset(self);
}

static void ColumnBuilder_dealloc(ColumnBuilder *self) {
    PyTypeObject *type = Py_TYPE(self);
    for (int i = 0; i < C_COUNT; i++) buf_free(&self->b[i]);
    type->tp_free((PyObject *)self);
    Py_DECREF(type); /* instances of a heap type own a reference to it */
}

/* Copy the headers of a record parse_record has already checked into the header columns. */
static int store_headers(ColumnBuilder *self, const uint8_t *d, const RecordSpan *r,
                         Damage *damage) {
    Py_ssize_t pos = r->headers_pos;
    for (int32_t h = 0; h < r->header_count; h++) {
        int32_t n;
        if (read_varint32(d, r->end, &pos, &n, damage) < 0) return -1;
        if (buf_put(&self->b[C_HKDATA], d + pos, n) ||
            buf_offset(&self->b[C_HKOFF], self->b[C_HKDATA].len))
            return -1;
        pos += n;
        if (read_varint32(d, r->end, &pos, &n, damage) < 0) return -1;
        if ((n >= 0 && buf_put(&self->b[C_HVDATA], d + pos, n)) ||
            buf_offset(&self->b[C_HVOFF], self->b[C_HVDATA].len) ||
            buf_u8(&self->b[C_HVVALID], n >= 0))
            return -1;
        self->headers++;
        if (n > 0) pos += n;
    }
    return 0;
}

/* add(data, count, base_offset, base_timestamp, has_log_append_time, log_append_time,
 *     timestamp_type, lo, hi):
 * decode exactly `count` records filling `data`; keep those with lo <= offset < hi. All or
 * nothing: on damage the builder is left as it was and CorruptRecords is raised. */
static PyObject *ColumnBuilder_add(ColumnBuilder *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, lat, lo, hi;
    int has_lat, ts_type;
    if (!PyArg_ParseTuple(args, "y*nLLpLiLL", &view, &count, &base_offset, &base_ts, &has_lat,
                          &lat, &ts_type, &lo, &hi))
        return NULL;
    Py_ssize_t saved[C_COUNT];
    for (int i = 0; i < C_COUNT; i++) saved[i] = self->b[i].len;
    Py_ssize_t saved_rows = self->rows, saved_headers = self->headers, kept = 0;
    const uint8_t *d = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    Damage damage = {0};
    if (count < 0) {
        damaged(&damage, "negative record count", 0);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        RecordSpan r;
        if (parse_record(d, end, &pos, &r, &damage) < 0) goto fail;
        int64_t tsd = r.ts_delta;
        int32_t od = r.offset_delta, kn = r.key_len, vn = r.value_len;
        Py_ssize_t start = r.start, kpos = r.key_pos, vpos = r.value_pos;
        int64_t offset = base_offset + od;
        int keep = offset >= lo && offset < hi;
        Py_ssize_t hstart = self->headers;
        if (keep && self->with_headers && r.header_count > 0 && store_headers(self, d, &r, &damage) < 0)
            goto fail;
        if (!keep) continue;
        int64_t ts;
        if (has_lat) {
            ts = lat;
        } else if (__builtin_add_overflow((int64_t)base_ts, tsd, &ts)) {
            damaged(&damage, "record timestamp does not fit in 64 bits", start);
            goto fail;
        }
        if (self->ts_scale != 1 && __builtin_mul_overflow(ts, self->ts_scale, &ts)) {
            damaged(&damage, "record timestamp does not fit in 64 bits", start);
            goto fail;
        }
        if (self->light) {
            self->rows++;
            kept++;
            continue;
        }
        Buf *b = self->b;
        if (buf_i64(&b[C_OFFSET], offset) || buf_i64(&b[C_TS], ts) ||
            buf_i32(&b[C_TSTYPE], ts_type) ||
            (kn > 0 && buf_put(&b[C_KDATA], d + kpos, kn)) ||
            buf_offset(&b[C_KOFF], b[C_KDATA].len) || buf_u8(&b[C_KVALID], kn >= 0) ||
            (vn > 0 && self->values && buf_put(&b[C_VDATA], d + vpos, vn)) ||
            buf_offset(&b[C_VOFF], b[C_VDATA].len) || buf_u8(&b[C_VVALID], vn >= 0))
            goto fail;
        if (self->with_headers) {
            if (buf_offset(&b[C_HOFF], self->headers) ||
                buf_u8(&b[C_HVALID], self->headers != hstart))
                goto fail;
        }
        self->rows++;
        kept++;
        continue;
    }
    if (pos != end) {
        damaged(&damage, "incorrect declared batch size: bytes remain after the last record", pos);
        goto fail;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(kept);
fail:
    for (int i = 0; i < C_COUNT; i++) self->b[i].len = saved[i];
    self->rows = saved_rows;
    self->headers = saved_headers;
    PyBuffer_Release(&view);
    return raise_damage(((CodecState *)PyType_GetModuleState(Py_TYPE(self)))->corrupt_records,
                        &damage);
}

/* Byte-per-row validity -> an Arrow bitmap, or None when nothing is null. */
static PyObject *bitmap(const Buf *valid, Py_ssize_t n, Py_ssize_t *nulls) {
    const uint8_t *v = (const uint8_t *)valid->p;
    Py_ssize_t zeros = 0;
    for (Py_ssize_t i = 0; i < n; i++) zeros += !v[i];
    *nulls = zeros;
    if (!zeros) Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (!out) return NULL;
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(out);
    memset(bits, 0, (size_t)((n + 7) / 8));
    for (Py_ssize_t i = 0; i < n; i++) bits[i >> 3] |= (uint8_t)(v[i] << (i & 7));
    return out;
}

static PyObject *as_bytes(const Buf *b) { return PyBytes_FromStringAndSize(b->p, b->len); }

static PyObject *binary_parts(const Buf *off, const Buf *data, const Buf *valid, Py_ssize_t n) {
    Py_ssize_t nulls = 0;
    PyObject *bits = bitmap(valid, n, &nulls);
    if (!bits) return NULL;
    return Py_BuildValue("(NnNN)", bits, nulls, as_bytes(off), as_bytes(data));
}

/* finish() -> (rows, offsets, timestamps, timestamp_types, key, value, headers) where key and
 * value are (validity | None, null_count, offsets, data) and headers is None or
 * (validity | None, null_count, list_offsets, count, header_key, header_value). Resets. */
static PyObject *ColumnBuilder_finish(ColumnBuilder *self, PyObject *Py_UNUSED(ignored)) {
    Buf *b = self->b;
    Py_ssize_t n = self->rows, nulls = 0;
    PyObject *headers;
    if (self->with_headers) {
        PyObject *bits = bitmap(&b[C_HVALID], n, &nulls);
        if (!bits) return NULL;
        headers = Py_BuildValue(
            "(NnNnNN)", bits, nulls, as_bytes(&b[C_HOFF]), self->headers,
            Py_BuildValue("(OnNN)", Py_None, (Py_ssize_t)0, as_bytes(&b[C_HKOFF]),
                          as_bytes(&b[C_HKDATA])),
            binary_parts(&b[C_HVOFF], &b[C_HVDATA], &b[C_HVVALID], self->headers));
    } else {
        headers = Py_NewRef(Py_None);
    }
    if (!headers) return NULL;
    PyObject *out = Py_BuildValue(
        "(nNNNNNN)", n, as_bytes(&b[C_OFFSET]), as_bytes(&b[C_TS]), as_bytes(&b[C_TSTYPE]),
        binary_parts(&b[C_KOFF], &b[C_KDATA], &b[C_KVALID], n),
        binary_parts(&b[C_VOFF], &b[C_VDATA], &b[C_VVALID], n), headers);
    if (!out) return NULL;
    if (builder_reset(self) < 0) { Py_DECREF(out); return NULL; }
    return out;
}

static PyObject *ColumnBuilder_rows(ColumnBuilder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->rows);
}

static PyMethodDef ColumnBuilder_methods[] = {
    {"add", (PyCFunction)ColumnBuilder_add, METH_VARARGS,
     "add(data, count, base_offset, base_timestamp, has_log_append_time, log_append_time, "
     "timestamp_type, lo, hi) -> rows kept"},
    {"finish", (PyCFunction)ColumnBuilder_finish, METH_NOARGS, "the columns so far; resets"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ColumnBuilder_getset[] = {
    {"rows", (getter)ColumnBuilder_rows, NULL, "rows since the last finish()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot ColumnBuilder_slots[] = {
    {Py_tp_doc, "Decodes v2 records into Arrow-layout column buffers."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, ColumnBuilder_init},
    {Py_tp_dealloc, ColumnBuilder_dealloc},
    {Py_tp_methods, ColumnBuilder_methods},
    {Py_tp_getset, ColumnBuilder_getset},
    {0, NULL},
};

static PyType_Spec ColumnBuilder_spec = {
    .name = "kafkalog.records._fastcodec.ColumnBuilder",
    .basicsize = sizeof(ColumnBuilder),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ColumnBuilder_slots,
};

/* ---- encode: Arrow buffers -> the records region of v2 batches ---------------------------- */

typedef struct {
    Py_buffer valid, offsets, data;
    int has_valid, present;
    Py_ssize_t off;
} BinCol;

typedef struct {
    Py_buffer valid, values;
    int has_valid, present;
    Py_ssize_t off;
} I64Col;

static void bincol_release(BinCol *c) {
    if (!c->present) return;
    if (c->has_valid) PyBuffer_Release(&c->valid);
    PyBuffer_Release(&c->offsets);
    PyBuffer_Release(&c->data);
    c->present = 0;
}

/* (validity | None, offsets int32, data, array offset) or None for an all-null column. */
static int bincol_parse(PyObject *spec, BinCol *c) {
    memset(c, 0, sizeof(*c));
    if (spec == Py_None) return 0;
    PyObject *valid;
    if (!PyArg_ParseTuple(spec, "Oy*y*n", &valid, &c->offsets, &c->data, &c->off)) return -1;
    c->present = 1;
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &c->valid, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->offsets);
            PyBuffer_Release(&c->data);
            c->present = 0;
            return -1;
        }
        c->has_valid = 1;
    }
    return 0;
}

static inline int is_valid(const Py_buffer *bits, int has, Py_ssize_t i) {
    if (!has) return 1;
    return (((const uint8_t *)bits->buf)[i >> 3] >> (i & 7)) & 1;
}

/* The bytes of row i, or NULL with *len = -1 when null. */
static inline const char *bincol_get(const BinCol *c, Py_ssize_t i, Py_ssize_t *len) {
    if (!c->present || !is_valid(&c->valid, c->has_valid, c->off + i)) {
        *len = -1;
        return NULL;
    }
    const int32_t *o = c->offsets.buf;
    *len = o[c->off + i + 1] - o[c->off + i];
    return (const char *)c->data.buf + o[c->off + i];
}


/* encode(row_start, row_end, max_bytes, keys, values, timestamps, headers)
 *   -> (records_region, rows_taken, base_timestamp, max_timestamp)
 * Rows from row_start while the region stays within max_bytes (at least one row). Offset
 * deltas are 0, 1, ...; the base timestamp is the first row's, as Kafka's builder does. */
static PyObject *encode(PyObject *module, PyObject *args) {
    PyObject *invalid_records = codec_state(module)->invalid_records;
    Py_ssize_t row_start, row_end, max_bytes;
    PyObject *kspec, *vspec, *tspec, *hspec;
    if (!PyArg_ParseTuple(args, "nnnOOOO", &row_start, &row_end, &max_bytes, &kspec, &vspec,
                          &tspec, &hspec))
        return NULL;
    BinCol keys, values, hkeys, hvalues;
    I64Col ts;
    Py_buffer hvalid, hoffs;
    Py_ssize_t hoff = 0;
    int has_headers = 0, has_hvalid = 0;
    PyObject *result = NULL;
    Buf out = {0};
    memset(&ts, 0, sizeof(ts));
    memset(&hkeys, 0, sizeof(hkeys));
    memset(&hvalues, 0, sizeof(hvalues));
    if (bincol_parse(kspec, &keys) < 0) return NULL;
    if (bincol_parse(vspec, &values) < 0) { bincol_release(&keys); return NULL; }
    if (tspec != Py_None) {
        PyObject *tv;
        if (!PyArg_ParseTuple(tspec, "Oy*n", &tv, &ts.values, &ts.off)) goto done;
        ts.present = 1;
        if (tv != Py_None) {
            if (PyObject_GetBuffer(tv, &ts.valid, PyBUF_SIMPLE) < 0) goto done;
            ts.has_valid = 1;
        }
    }
    if (hspec != Py_None) {
        PyObject *hv, *hk, *hval;
        if (!PyArg_ParseTuple(hspec, "Oy*nOO", &hv, &hoffs, &hoff, &hk, &hval)) goto done;
        has_headers = 1;
        if (hv != Py_None) {
            if (PyObject_GetBuffer(hv, &hvalid, PyBUF_SIMPLE) < 0) goto done;
            has_hvalid = 1;
        }
        if (bincol_parse(hk, &hkeys) < 0 || bincol_parse(hval, &hvalues) < 0) goto done;
    }
    int64_t base_ts = -1, max_ts = -1;
    Py_ssize_t i = row_start;
    for (; i < row_end; i++) {
        int64_t t = -1;
        if (ts.present && is_valid(&ts.valid, ts.has_valid, ts.off + i))
            t = ((const int64_t *)ts.values.buf)[ts.off + i];
        if (t < 0 && t != -1) {
            PyErr_Format(invalid_records, "invalid negative timestamp %lld (row %zd)",
                         (long long)t, i);
            goto done;
        }
        if (i == row_start) base_ts = t;
        Py_ssize_t klen, vlen;
        const char *k = bincol_get(&keys, i, &klen);
        const char *v = bincol_get(&values, i, &vlen);
        int64_t delta = i - row_start;
        uint64_t tsz = zz64(t - base_ts);
        Py_ssize_t body = 1 + uvarint_size(tsz) + uvarint_size(zz32(delta)) +
                          uvarint_size(zz32(klen)) + (klen > 0 ? klen : 0) +
                          uvarint_size(zz32(vlen)) + (vlen > 0 ? vlen : 0);
        Py_ssize_t h0 = 0, h1 = 0;
        if (has_headers && is_valid(&hvalid, has_hvalid, hoff + i)) {
            const int32_t *lo = hoffs.buf;
            h0 = lo[hoff + i];
            h1 = lo[hoff + i + 1];
        }
        body += uvarint_size(zz32(h1 - h0));
        for (Py_ssize_t h = h0; h < h1; h++) {
            Py_ssize_t hkl, hvl;
            bincol_get(&hkeys, h, &hkl);
            bincol_get(&hvalues, h, &hvl);
            if (hkl < 0) {
                PyErr_Format(invalid_records, "header %zd of row %zd has a null key", h - h0, i);
                goto done;
            }
            body += uvarint_size(zz32(hkl)) + hkl + uvarint_size(zz32(hvl)) + (hvl > 0 ? hvl : 0);
        }
        if (body > INT32_MAX / 2) {
            PyErr_Format(invalid_records, "row %zd is too large for a record", i);
            goto done;
        }
        Py_ssize_t size = uvarint_size(zz32(body)) + body;
        if (i > row_start && out.len + size > max_bytes) break;
        if (buf_reserve(&out, size) < 0) goto done;
        char *p = out.p + out.len;
        p = put_uvarint(p, zz32(body));
        *p++ = 0;
        p = put_uvarint(p, tsz);
        p = put_uvarint(p, zz32(delta));
        p = put_uvarint(p, zz32(klen));
        if (klen > 0) { memcpy(p, k, (size_t)klen); p += klen; }
        p = put_uvarint(p, zz32(vlen));
        if (vlen > 0) { memcpy(p, v, (size_t)vlen); p += vlen; }
        p = put_uvarint(p, zz32(h1 - h0));
        for (Py_ssize_t h = h0; h < h1; h++) {
            Py_ssize_t hkl, hvl;
            const char *hkp = bincol_get(&hkeys, h, &hkl);
            const char *hvp = bincol_get(&hvalues, h, &hvl);
            p = put_uvarint(p, zz32(hkl));
            if (hkl > 0) { memcpy(p, hkp, (size_t)hkl); p += hkl; }
            p = put_uvarint(p, zz32(hvl));
            if (hvl > 0) { memcpy(p, hvp, (size_t)hvl); p += hvl; }
        }
        out.len = p - out.p;
        if (t > max_ts) max_ts = t;
    }
    result = Py_BuildValue("(NnLL)", as_bytes(&out), i - row_start, (long long)base_ts,
                           (long long)max_ts);
done:
    buf_free(&out);
    bincol_release(&keys);
    bincol_release(&values);
    bincol_release(&hkeys);
    bincol_release(&hvalues);
    if (ts.present) {
        PyBuffer_Release(&ts.values);
        if (ts.has_valid) PyBuffer_Release(&ts.valid);
    }
    if (has_headers) {
        PyBuffer_Release(&hoffs);
        if (has_hvalid) PyBuffer_Release(&hvalid);
    }
    return result;
}

/* partitions_for_keys(keys, rows, partitions) -> int32 buffer: toPositive(murmur2(key)) %
 * partitions per row, -1 for a null key (the caller places those). */
static PyObject *partitions_for_keys(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *kspec;
    Py_ssize_t rows;
    int partitions;
    if (!PyArg_ParseTuple(args, "Oni", &kspec, &rows, &partitions)) return NULL;
    if (partitions < 1) {
        PyErr_SetString(PyExc_ValueError, "a topic needs at least one partition");
        return NULL;
    }
    BinCol keys;
    if (bincol_parse(kspec, &keys) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, rows * 4);
    if (out) {
        int32_t *p = (int32_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < rows; i++) {
            Py_ssize_t n;
            const char *k = bincol_get(&keys, i, &n);
            p[i] = n < 0 ? -1 : (int32_t)((murmur2((const uint8_t *)k, n) & 0x7fffffff) %
                                          (uint32_t)partitions);
        }
    }
    bincol_release(&keys);
    return out;
}

static PyMethodDef module_methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(row_start, row_end, max_bytes, keys, values, timestamps, headers) -> "
     "(records, rows, base_timestamp, max_timestamp)"},
    {"partitions_for_keys", partitions_for_keys, METH_VARARGS,
     "partitions_for_keys(keys, rows, partitions) -> int32 partition per row, -1 if keyless"},
    {NULL, NULL, 0, NULL},
};

static int codec_exec(PyObject *m) {
    CodecState *st = codec_state(m);
    st->corrupt_records = PyErr_NewException("kafkalog.records._fastcodec.CorruptRecords",
                                             PyExc_ValueError, NULL);
    st->invalid_records = PyErr_NewException("kafkalog.records._fastcodec.InvalidRecords",
                                             PyExc_ValueError, NULL);
    st->column_builder = PyType_FromModuleAndSpec(m, &ColumnBuilder_spec, NULL);
    st->record = PyType_FromModuleAndSpec(m, &record_type_spec, NULL);
    if (!st->corrupt_records || !st->invalid_records || !st->column_builder || !st->record ||
        PyModule_AddObjectRef(m, "Record", st->record) < 0 ||
        PyModule_AddFunctions(m, record_methods) < 0 ||
        PyModule_AddFunctions(m, search_methods) < 0 ||
        PyModule_AddFunctions(m, producer_batch_methods) < 0 ||
        PyModule_AddObjectRef(m, "CorruptRecords", st->corrupt_records) < 0 ||
        PyModule_AddObjectRef(m, "InvalidRecords", st->invalid_records) < 0 ||
        PyModule_AddObjectRef(m, "ColumnBuilder", st->column_builder) < 0)
        return -1;
    return 0;
}

static int codec_traverse(PyObject *m, visitproc visit, void *arg) {
    CodecState *st = codec_state(m);
    Py_VISIT(st->corrupt_records);
    Py_VISIT(st->invalid_records);
    Py_VISIT(st->column_builder);
    Py_VISIT(st->record);
    return 0;
}

static int codec_clear(PyObject *m) {
    CodecState *st = codec_state(m);
    Py_CLEAR(st->corrupt_records);
    Py_CLEAR(st->invalid_records);
    Py_CLEAR(st->column_builder);
    Py_CLEAR(st->record);
    record_freelist_clear(&st->free_records);
    return 0;
}

static void codec_free(void *m) { codec_clear((PyObject *)m); }

static PyModuleDef_Slot codec_slots[] = {
    {Py_mod_exec, codec_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafkalog.records._fastcodec",
    .m_doc = "The v2 record loop at compiled speed (see kafkalog.records.columnar).",
    .m_size = sizeof(CodecState),
    .m_methods = module_methods,
    .m_slots = codec_slots,
    .m_traverse = codec_traverse,
    .m_clear = codec_clear,
    .m_free = codec_free,
};

PyMODINIT_FUNC PyInit__fastcodec(void) { return PyModuleDef_Init(&module_def); }
