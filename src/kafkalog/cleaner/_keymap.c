/* The cleaner's per-record work at compiled speed: the key -> latest offset map, and the recopy
 * filter that keeps a key's latest record (Kafka's SkimpyOffsetMap and Cleaner).
 *
 * Why: a cleaning round looks at every record twice (map, then recopy); in Python that is a
 * few microseconds a record, so compaction ran at tens of MB/s. Here a record costs a parse and
 * a hash probe. Keys are stored whole (an arena) and compared byte for byte: Kafka compares
 * MD5 digests, whose collisions it accepts; exact keys keep the same answers without them.
 * Refuses: every per-batch decision (control batches, aborted transactions, producers' last
 * batches, delete horizons) -- those stay in kafkalog.cleaner.policy -- and framing, CRCs and
 * compression. Records are validated exactly as the reference decoder does, before anything
 * is mapped or written.
 */
#include "_keymap.h"

/* ---- KeyOffsetMap ----------------------------------------------------------------------- */

static int map_alloc(KeyOffsetMap *self, Py_ssize_t capacity) {
    Slot *slots = PyMem_RawMalloc((size_t)capacity * sizeof(Slot));
    if (!slots) { no_memory(); return -1; }
    memset(slots, 0xFF, (size_t)capacity * sizeof(Slot)); /* key == -1 everywhere */
    PyMem_RawFree(self->slots);
    self->slots = slots;
    self->mask = capacity - 1;
    return 0;
}

static void map_reset(KeyOffsetMap *self) {
    self->size = 0;
    self->latest_offset = -1;
    self->arena.len = self->latest.len = 0;
    self->logged_batches.len = self->logged_records.len = 0;
    self->log_cursor = 0;
}

static int KeyOffsetMap_init(KeyOffsetMap *self, PyObject *args, PyObject *kw) {
    Py_ssize_t limit, log_limit = 0;
    if (!PyArg_ParseTuple(args, "n|n", &limit, &log_limit)) return -1;
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "an offset map must hold at least one key");
        return -1;
    }
    self->limit = limit;
    self->log_limit = log_limit;
    map_reset(self);
    return map_alloc(self, 1024);
}

static void KeyOffsetMap_dealloc(KeyOffsetMap *self) {
    PyMem_RawFree(self->slots);
    PyMem_RawFree(self->spans);
    PyMem_RawFree(self->stamps);
    PyMem_RawFree(self->keep);
    PyMem_RawFree(self->codes);
    buf_free(&self->arena);
    buf_free(&self->latest);
    buf_free(&self->logged_batches);
    buf_free(&self->logged_records);
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type); /* instances of a heap type own a reference to it */
}

/* Grow at half full: linear probing stays short. */
static int map_grow(KeyOffsetMap *self) {
    Slot *old = self->slots;
    Py_ssize_t old_cap = self->mask + 1;
    self->slots = NULL;
    if (map_alloc(self, old_cap * 2) < 0) { self->slots = old; self->mask = old_cap - 1; return -1; }
    for (Py_ssize_t i = 0; i < old_cap; i++) {
        if (old[i].key < 0) continue;
        Py_ssize_t j = (Py_ssize_t)old[i].hash & self->mask;
        while (self->slots[j].key >= 0) j = (j + 1) & self->mask;
        self->slots[j] = old[i];
    }
    PyMem_RawFree(old);
    return 0;
}

Py_ssize_t map_put(KeyOffsetMap *self, const uint8_t *key, Py_ssize_t n, int64_t offset) {
    uint32_t hash = murmur2(key, n);
    Slot *s = map_find(self, key, (uint32_t)n, hash);
    if (s->key < 0) {
        if ((self->size + 1) * 2 > self->mask + 1) {
            if (map_grow(self) < 0) return -1;
            s = map_find(self, key, (uint32_t)n, hash);
        }
        Py_ssize_t at = self->arena.len;
        if (buf_put(&self->arena, key, n) < 0 || buf_i64(&self->latest, offset) < 0) return -1;
        s->key = at;
        s->len = (uint32_t)n;
        s->hash = hash;
        s->id = self->size++;
    }
    ((int64_t *)self->latest.p)[s->id] = offset;
    self->latest_offset = offset;
    return (Py_ssize_t)s->id;
}

static PyObject *KeyOffsetMap_put(KeyOffsetMap *self, PyObject *args) {
    Py_buffer key;
    long long offset;
    if (!PyArg_ParseTuple(args, "y*L", &key, &offset)) return NULL;
    if (key.len > UINT32_MAX) {
        PyBuffer_Release(&key);
        PyErr_SetString(PyExc_OverflowError, "key too long");
        return NULL;
    }
    Py_ssize_t id = map_put(self, key.buf, key.len, offset);
    PyBuffer_Release(&key);
    if (id < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *KeyOffsetMap_get(KeyOffsetMap *self, PyObject *args) {
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "y*", &key)) return NULL;
    int64_t found = map_get(self, key.buf, key.len);
    PyBuffer_Release(&key);
    return PyLong_FromLongLong(found);
}

static PyObject *KeyOffsetMap_clear(KeyOffsetMap *self, PyObject *Py_UNUSED(ignored)) {
    /* a map that grew large for one log shrinks back rather than be wiped whole every round */
    if (map_alloc(self, 1024) < 0) return NULL;
    map_reset(self);
    Py_RETURN_NONE;
}

static inline KeymapState *keymap_state(PyObject *module) {
    return (KeymapState *)PyModule_GetState(module);
}

static inline KeymapState *state_of(KeyOffsetMap *self) {
    return (KeymapState *)PyType_GetModuleState(Py_TYPE(self));
}

/* Record timestamps as the reference reads them: the batch's for LogAppendTime, else
 * base + delta, which must fit in 64 bits. */
static int record_timestamp(const RecordSpan *r, int64_t base_ts, int has_lat, int64_t lat,
                            int64_t *ts, Damage *damage) {
    if (has_lat) { *ts = lat; return 0; }
    if (__builtin_add_overflow(base_ts, r->ts_delta, ts))
        return damaged(damage, "record timestamp does not fit in 64 bits", r->start);
    return 0;
}

int scratch_reserve(KeyOffsetMap *self, Py_ssize_t count) {
    if (count <= self->scratch) return 0;
    Py_ssize_t n = self->scratch ? self->scratch : 256;
    while (n < count) n *= 2;
    RecordSpan *spans = PyMem_RawRealloc(self->spans, (size_t)n * sizeof(RecordSpan));
    if (spans) self->spans = spans;
    int64_t *stamps = spans ? PyMem_RawRealloc(self->stamps, (size_t)n * sizeof(int64_t)) : NULL;
    if (stamps) self->stamps = stamps;
    uint8_t *keep = stamps ? PyMem_RawRealloc(self->keep, (size_t)n) : NULL;
    if (keep) self->keep = keep;
    int32_t *codes = keep ? PyMem_RawRealloc(self->codes, (size_t)n * sizeof(int32_t)) : NULL;
    if (!codes) { no_memory(); return -1; }
    self->codes = codes;
    self->scratch = n;
    return 0;
}

/* Parse all `count` records of a region up front, timestamps included, into the map's scratch
 * (spans, stamps), as the reference decodes a whole batch before looking at any record.
 * -1: damage; -2: out of memory. A record takes at least 7 bytes, so a count the region
 * cannot hold fails on parsing, as in the reference, before it can exhaust memory. */
int parse_all(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t end, Py_ssize_t count,
              int64_t base_ts, int has_lat, int64_t lat, Damage *damage) {
    if (count < 0) return damaged(damage, "negative record count", 0);
    Py_ssize_t room = end / 7 + 1;
    if (scratch_reserve(self, count < room ? count : room) < 0) return -2;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (parse_record(d, end, &pos, &self->spans[i], damage) < 0 ||
            record_timestamp(&self->spans[i], base_ts, has_lat, lat, &self->stamps[i], damage) < 0)
            return -1;
    }
    if (pos != end)
        return damaged(damage, "incorrect declared batch size: bytes remain after the last record",
                       pos);
    return 0;
}

/* Put the keys of the parsed records at or above `start`; stops before a new key once the map
 * holds `limit` keys (*full). Each record's code goes to the scratch (see LoggedRecord);
 * *loggable says whether every record has one (no keyed record below `start`). Returns the
 * records read, or -1. */
Py_ssize_t map_parsed(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t count,
                      int64_t base_offset, int64_t start, int *full, int *loggable) {
    Py_ssize_t read = 0;
    *full = 0;
    *loggable = 1;
    for (; read < count; read++) {
        const RecordSpan *r = &self->spans[read];
        int64_t offset = base_offset + r->offset_delta;
        int tombstone = r->value_len < 0;
        if (r->key_len < 0) {
            self->codes[read] = -1 - tombstone;
        } else if (offset >= start) {
            if (self->size >= self->limit) { *full = 1; break; }
            Py_ssize_t id = map_put(self, d + r->key_pos, r->key_len, offset);
            if (id < 0) return -1;
            if (id > INT32_MAX >> 1) *loggable = 0;
            self->codes[read] = (int32_t)(id << 1 | tombstone);
        } else {
            *loggable = 0;
        }
    }
    return read;
}

static PyObject *KeyOffsetMap_map_records(KeyOffsetMap *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, lat, start;
    int has_lat, full, loggable;
    if (!PyArg_ParseTuple(args, "y*nLLpLL", &view, &count, &base_offset, &base_ts, &has_lat,
                          &lat, &start))
        return NULL;
    const uint8_t *d = view.buf;
    PyObject *result = NULL;
    Damage damage = {0};
    if (parse_all(self, d, view.len, count, base_ts, has_lat, lat, &damage) == 0) {
        Py_ssize_t read = map_parsed(self, d, count, base_offset, start, &full, &loggable);
        if (read >= 0) result = Py_BuildValue("(nO)", read, full ? Py_True : Py_False);
    } else {
        raise_damage(state_of(self)->corrupt_records, &damage);
    }
    PyBuffer_Release(&view);
    return result;
}

/* ---- the recopy filter ------------------------------------------------------------------ */

static inline Py_ssize_t zz_size32(int32_t v) { return uvarint_size(zz32(v)); }

/* A kept record re-encoded as the reference's builder writes it: attributes 0, the timestamp
 * delta against the new base, canonical varints, headers copied field by field. The record was
 * parsed whole before, so its varints read without damage. */
static int encode_kept(Buf *out, const uint8_t *d, const RecordSpan *r, int64_t ts, int64_t base) {
    Damage damage = {0};
    __int128 delta = (__int128)ts - base;
    uint64_t zts = (uint64_t)(((unsigned __int128)delta << 1) ^ (unsigned __int128)(delta >> 63));
    Py_ssize_t body = 1 + uvarint_size(zts) + zz_size32(r->offset_delta) + zz_size32(r->key_len) +
                      (r->key_len > 0 ? r->key_len : 0) + zz_size32(r->value_len) +
                      (r->value_len > 0 ? r->value_len : 0) + zz_size32(r->header_count);
    Py_ssize_t pos = r->headers_pos;
    for (int32_t h = 0; h < r->header_count; h++) {
        int32_t n;
        if (read_varint32(d, r->end, &pos, &n, &damage) < 0) return -1;
        body += zz_size32(n) + n;
        pos += n;
        if (read_varint32(d, r->end, &pos, &n, &damage) < 0) return -1;
        body += zz_size32(n) + (n > 0 ? n : 0);
        if (n > 0) pos += n;
    }
    if (body > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "record too large"); return -1; }
    if (buf_reserve(out, body + 5) < 0) return -1;
    char *p = out->p + out->len;
    p = put_uvarint(p, zz32((int32_t)body));
    *p++ = 0;
    p = put_uvarint(p, zts);
    p = put_uvarint(p, zz32(r->offset_delta));
    p = put_uvarint(p, zz32(r->key_len));
    if (r->key_len > 0) { memcpy(p, d + r->key_pos, (size_t)r->key_len); p += r->key_len; }
    p = put_uvarint(p, zz32(r->value_len));
    if (r->value_len > 0) { memcpy(p, d + r->value_pos, (size_t)r->value_len); p += r->value_len; }
    p = put_uvarint(p, zz32(r->header_count));
    pos = r->headers_pos;
    for (int32_t h = 0; h < r->header_count; h++) {
        int32_t n = 0; /* the first pass above read these same varints without error */
        if (read_varint32(d, r->end, &pos, &n, &damage) < 0) return -1;
        p = put_uvarint(p, zz32(n));
        memcpy(p, d + pos, (size_t)n);
        p += n;
        pos += n;
        if (read_varint32(d, r->end, &pos, &n, &damage) < 0) return -1;
        p = put_uvarint(p, zz32(n));
        if (n > 0) { memcpy(p, d + pos, (size_t)n); p += n; pos += n; }
    }
    out->len = p - out->p;
    return 0;
}

/* retain_record over the parsed records: fills keep[]. */
void decide(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t count, int64_t base_offset,
            int keep_tombstones, Verdicts *v) {
    v->kept = v->invalid = 0;
    v->first = -1;
    v->tombstone = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const RecordSpan *r = &self->spans[i];
        int64_t offset = base_offset + r->offset_delta;
        int k;
        if (offset > self->latest_offset) k = 1;
        else if (r->key_len < 0) { v->invalid++; k = 0; }
        else if (offset < map_get(self, d + r->key_pos, r->key_len)) k = 0;
        else if (r->value_len >= 0) k = 1;
        else k = keep_tombstones;
        self->keep[i] = (uint8_t)k;
        if (k) {
            v->kept++;
            if (v->first < 0) v->first = i;
            if (r->value_len < 0) v->tombstone = 1;
        }
    }
}

static void invalid_records(KeyOffsetMap *self, PyObject *msg) {
    if (msg) { PyErr_SetObject(state_of(self)->invalid_records, msg); Py_DECREF(msg); }
}

int encode_retained(KeyOffsetMap *self, const uint8_t *d, Py_ssize_t count, int64_t base_offset,
                    int64_t base, Buf *out, int64_t *max_ts, int64_t *last_delta) {
    const int64_t *stamps = self->stamps;
    *max_ts = *last_delta = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!self->keep[i]) continue;
        int64_t ts = stamps[i], delta = self->spans[i].offset_delta;
        if (delta <= *last_delta) {
            invalid_records(self, PyUnicode_FromFormat(
                "offset %lld is not above the last offset %lld",
                (long long)(base_offset + delta), (long long)(base_offset + *last_delta)));
            return -2;
        }
        *last_delta = delta;
        if (ts < 0 && ts != -1) {
            invalid_records(
                self, PyUnicode_FromFormat("invalid negative timestamp %lld", (long long)ts));
            return -2;
        }
        if (ts > *max_ts) *max_ts = ts;
        if (encode_kept(out, d, &self->spans[i], ts, base) < 0) return -1;
    }
    return 0;
}

/* filter_records(data, count, base_offset, base_timestamp, has_lat, lat, keep_tombstones,
 *                has_horizon, horizon, new_horizon)
 *   -> (read, kept, invalid, region | None, base_timestamp, max_timestamp, horizon | None,
 *       last_kept_delta)
 * The cleaner's per-record rule (kafkalog.cleaner.policy.retain_record) over one v2 batch:
 * above the map's latest offset -> keep; keyless -> drop (invalid); older than its key's
 * latest -> drop; a tombstone -> keep_tombstones. `horizon` is the batch's delete horizon if
 * it has one; a kept tombstone in a batch without one stamps `new_horizon`. Rebuilding refuses
 * what the reference builder refuses, with its words: offsets not increasing, negative
 * timestamps. region is None when every record stays and no horizon is stamped (the batch is
 * copied as it is) or none stays. */
static PyObject *KeyOffsetMap_filter_records(KeyOffsetMap *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, lat, horizon, new_horizon;
    int has_lat, keep_tombstones, has_horizon;
    if (!PyArg_ParseTuple(args, "y*nLLpLppLL", &view, &count, &base_offset, &base_ts, &has_lat,
                          &lat, &keep_tombstones, &has_horizon, &horizon, &new_horizon))
        return NULL;
    const uint8_t *d = view.buf;
    PyObject *result = NULL;
    Buf out = {0};
    Damage damage = {0};
    if (parse_all(self, d, view.len, count, base_ts, has_lat, lat, &damage) < 0) {
        raise_damage(state_of(self)->corrupt_records, &damage);
        goto done;
    }
    Verdicts v;
    decide(self, d, count, base_offset, keep_tombstones, &v);
    const int64_t *stamps = self->stamps;
    int stamp = v.tombstone && !has_horizon;
    if (stamp) { horizon = new_horizon; has_horizon = 1; }
    int64_t base = has_horizon ? horizon : (v.kept ? stamps[v.first] : -1), max_ts = -1;
    int64_t last_delta = -1;
    PyObject *region;
    if (v.kept == 0 || (v.kept == count && !stamp)) {
        region = Py_NewRef(Py_None);
        for (Py_ssize_t i = 0; i < count; i++)
            if (self->keep[i] && stamps[i] > max_ts) max_ts = stamps[i];
    } else {
        if (encode_retained(self, d, count, base_offset, base, &out, &max_ts, &last_delta) < 0)
            goto done;
        region = PyBytes_FromStringAndSize(out.p, out.len);
        if (!region) goto done;
    }
    PyObject *h = has_horizon ? PyLong_FromLongLong(horizon) : Py_NewRef(Py_None);
    if (!h) { Py_DECREF(region); goto done; }
    result = Py_BuildValue("(nnnNLLNL)", count, v.kept, v.invalid, region, (long long)base,
                           (long long)max_ts, h, (long long)last_delta);
done:
    buf_free(&out);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *get_size(KeyOffsetMap *self, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(self->size);
}

static PyObject *get_log_size(KeyOffsetMap *self, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(self->logged_batches.len + self->logged_records.len);
}

static PyObject *get_latest(KeyOffsetMap *self, void *Py_UNUSED(c)) {
    return PyLong_FromLongLong(self->latest_offset);
}

static int set_latest(KeyOffsetMap *self, PyObject *value, void *Py_UNUSED(c)) {
    if (!value) { PyErr_SetString(PyExc_TypeError, "cannot delete latest_offset"); return -1; }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    self->latest_offset = v;
    return 0;
}

static PyGetSetDef KeyOffsetMap_getset[] = {
    {"size", (getter)get_size, NULL, "keys in the map", NULL},
    {"log_size", (getter)get_log_size, NULL, "bytes of notes kept for the recopy", NULL},
    {"latest_offset", (getter)get_latest, (setter)set_latest, "the last offset mapped", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef KeyOffsetMap_methods[] = {
    {"put", (PyCFunction)KeyOffsetMap_put, METH_VARARGS, "put(key, offset)"},
    {"get", (PyCFunction)KeyOffsetMap_get, METH_VARARGS, "get(key) -> latest offset or -1"},
    {"clear", (PyCFunction)KeyOffsetMap_clear, METH_NOARGS, "forget every key"},
    {"map_records", (PyCFunction)KeyOffsetMap_map_records, METH_VARARGS,
     "map_records(data, count, base_offset, base_timestamp, has_lat, lat, start) -> "
     "(read, full)"},
    {"filter_records", (PyCFunction)KeyOffsetMap_filter_records, METH_VARARGS,
     "filter_records(data, count, base_offset, base_timestamp, has_lat, lat, keep_tombstones, "
     "has_horizon, horizon, new_horizon) -> (read, kept, invalid, region, base_timestamp, "
     "max_timestamp, horizon, last_kept_delta)"},
    {"map_region", (PyCFunction)KeyOffsetMap_map_region, METH_VARARGS,
     "map_region(buffer, segment, position, until, end, start, max_batch_size) -> "
     "(position, read, full)"},
    {"filter_region", (PyCFunction)KeyOffsetMap_filter_region, METH_VARARGS,
     "filter_region(buffer, segment, position, until, end, max_batch_size, "
     "upper_bound_offset, "
     "last_producer_ids, current_time) -> (position, read, kept, invalid, batches)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot KeyOffsetMap_slots[] = {
    {Py_tp_doc, "KeyOffsetMap(limit, log_limit=0): key -> latest offset for one cleaning round; "
                "the key scan keeps up to log_limit bytes of notes (batches and records) for "
                "the recopy"},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, KeyOffsetMap_init},
    {Py_tp_dealloc, KeyOffsetMap_dealloc},
    {Py_tp_methods, KeyOffsetMap_methods},
    {Py_tp_getset, KeyOffsetMap_getset},
    {0, NULL},
};

static PyType_Spec KeyOffsetMap_spec = {
    .name = "kafkalog.cleaner._keymap.KeyOffsetMap",
    .basicsize = sizeof(KeyOffsetMap),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = KeyOffsetMap_slots,
};

static int keymap_exec(PyObject *m) {
    KeymapState *st = keymap_state(m);
    PyObject *codec = PyImport_ImportModule("kafkalog.records._fastcodec");
    if (!codec) return -1;
    st->corrupt_records = PyObject_GetAttrString(codec, "CorruptRecords");
    st->invalid_records = PyObject_GetAttrString(codec, "InvalidRecords");
    Py_DECREF(codec);
    if (!st->corrupt_records || !st->invalid_records) return -1;
    st->key_offset_map = PyType_FromModuleAndSpec(m, &KeyOffsetMap_spec, NULL);
    if (!st->key_offset_map) return -1;
    return PyModule_AddObjectRef(m, "KeyOffsetMap", st->key_offset_map);
}

static int keymap_traverse(PyObject *m, visitproc visit, void *arg) {
    KeymapState *st = keymap_state(m);
    Py_VISIT(st->corrupt_records);
    Py_VISIT(st->invalid_records);
    Py_VISIT(st->key_offset_map);
    return 0;
}

static int keymap_clear(PyObject *m) {
    KeymapState *st = keymap_state(m);
    Py_CLEAR(st->corrupt_records);
    Py_CLEAR(st->invalid_records);
    Py_CLEAR(st->key_offset_map);
    return 0;
}

static void keymap_free(void *m) { keymap_clear((PyObject *)m); }

static PyModuleDef_Slot keymap_slots[] = {
    {Py_mod_exec, keymap_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kafkalog.cleaner._keymap",
    .m_doc = "The cleaner's key -> latest offset map at compiled speed "
             "(see kafkalog.cleaner.keymap).",
    .m_size = sizeof(KeymapState),
    .m_slots = keymap_slots,
    .m_traverse = keymap_traverse,
    .m_clear = keymap_clear,
    .m_free = keymap_free,
};

PyMODINIT_FUNC PyInit__keymap(void) { return PyModuleDef_Init(&module_def); }
