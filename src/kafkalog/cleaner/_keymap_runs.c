/* The cleaner's two passes over runs of plain batches, with no Python between batches, and a
 * recopy that does not parse again what the key scan parsed.
 *
 * Why: walking a segment one batch per call costs microseconds of Python a batch, and parsing
 * a record costs a cache miss or two when values are long (its header count sits after the
 * value). The key scan therefore notes, for each batch it maps, every record's offset delta,
 * key id and tombstone flag (8 bytes a record, up to the map's log limit); the recopy decides
 * such a batch from those notes and reads only its header -- and its bytes if it stays.
 * Refuses: every batch that needs a decision of its own -- compressed, transactional, control,
 * too large for the read buffer, damaged; in the recopy also producers' last batches, the
 * batch at the upper bound and rebuilds the reference builder refuses. A walk stops in front
 * of such a batch and the caller's reference path takes it (damage is then reported in the
 * scanner's words). A batch partly kept is rebuilt here, as the reference rebuilds it: a
 * Python rebuild cost some 80 us a batch, most of a round over keys that interleave.
 */
#include "_keymap.h"

/* The parsed batch at `position` of `segment`, remembered if the log has room for it. */
static int log_batch(KeyOffsetMap *self, int64_t segment, Py_ssize_t position,
                     const BatchHead *b) {
    Py_ssize_t bytes = (Py_ssize_t)b->count * (Py_ssize_t)sizeof(LoggedRecord);
    /* the batch notes count too: with one record a batch they would outweigh the records */
    if (self->logged_records.len + self->logged_batches.len + bytes +
            (Py_ssize_t)sizeof(LoggedBatch) > self->log_limit)
        return 0;
    LoggedBatch entry = {segment, position, b->base_offset,
                         self->logged_records.len / (Py_ssize_t)sizeof(LoggedRecord), b->count};
    if (buf_reserve(&self->logged_records, bytes) < 0 ||
        buf_put(&self->logged_batches, &entry, sizeof entry) < 0)
        return -1;
    LoggedRecord *out = (LoggedRecord *)(self->logged_records.p + self->logged_records.len);
    for (int32_t i = 0; i < b->count; i++) {
        out[i].offset_delta = self->spans[i].offset_delta;
        out[i].code = self->codes[i];
    }
    self->logged_records.len += bytes;
    return 0;
}

/* map_region(buffer, segment, position, until, end, start, max_batch_size)
 *   -> (position, read, full)
 * map_records over the batches the walk takes, laid back to back from `position` and starting
 * before `until`, within buffer[:end] (the data of the segment whose base offset is
 * `segment`); each batch's last offset at or above `start` becomes the latest offset. It
 * returns where it stopped: at `until` or beyond, in front of a batch it does not take
 * (nothing of a damaged batch is mapped), or at the batch during which the map filled up. */
PyObject *KeyOffsetMap_map_region(KeyOffsetMap *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, until, end, max_size, read = 0;
    long long segment, start;
    int full = 0, loggable, no_memory = 0;
    if (!PyArg_ParseTuple(args, "y*LnnnLn", &view, &segment, &pos, &until, &end, &start,
                          &max_size))
        return NULL;
    const uint8_t *d = view.buf;
    if (end > view.len) end = view.len;
    BatchHead b;
    /* Nothing below touches a Python object: other threads run meanwhile (one may be paging in
     * the rest of this buffer). Damage just stops the walk; the scanner path reports it. */
    Py_BEGIN_ALLOW_THREADS
    while (pos < until && simple_batch(d, pos, end, max_size, &b)) {
        const uint8_t *records = d + pos + V2_HEADER_SIZE;
        int has_lat = (b.attributes & ATTR_LOG_APPEND_TIME) != 0;
        Damage damage = {0}; /* not raised: the scanner path reports it */
        int parsed = parse_all(self, records, b.size - V2_HEADER_SIZE, b.count, b.base_timestamp,
                               has_lat, b.max_timestamp, &damage);
        if (parsed < 0) {
            no_memory = parsed == -2;
            break;
        }
        Py_ssize_t n = map_parsed(self, records, b.count, b.base_offset, start, &full, &loggable);
        if (n < 0 || (!full && loggable && log_batch(self, segment, pos, &b) < 0)) {
            no_memory = 1;
            break;
        }
        read += n;
        if (full) break;
        if (b.last_offset >= start) self->latest_offset = b.last_offset;
        pos += b.size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (no_memory) return PyErr_NoMemory();
    return Py_BuildValue("(nnO)", pos, read, full ? Py_True : Py_False);
}

/* The key scan's notes on the batch at `position` of `segment`, if it took them. The recopy
 * walks the same segments in the same order, so a cursor moving forward finds them. */
static const LoggedBatch *logged(KeyOffsetMap *self, int64_t segment, Py_ssize_t position,
                                 const BatchHead *b) {
    const LoggedBatch *all = (const LoggedBatch *)self->logged_batches.p;
    Py_ssize_t n = self->logged_batches.len / (Py_ssize_t)sizeof(LoggedBatch);
    while (self->log_cursor < n) {
        const LoggedBatch *e = &all[self->log_cursor];
        if (e->segment > segment || (e->segment == segment && e->position > position)) break;
        if (e->segment == segment && e->position == position) {
            if (e->base_offset == b->base_offset && e->count == b->count) return e;
            break;
        }
        self->log_cursor++;
    }
    return NULL;
}

/* decide() from the key scan's notes: the same rule, on the same records. */
static void decide_logged(KeyOffsetMap *self, const LoggedBatch *e, int keep_tombstones,
                          Verdicts *v) {
    const LoggedRecord *r = (const LoggedRecord *)self->logged_records.p + e->first;
    const int64_t *latest = (const int64_t *)self->latest.p;
    v->kept = v->invalid = 0;
    v->first = -1;
    v->tombstone = 0;
    for (int32_t i = 0; i < e->count; i++) {
        int64_t offset = e->base_offset + r[i].offset_delta;
        int32_t code = r[i].code;
        int k;
        if (offset > self->latest_offset) k = 1;
        else if (code < 0) { v->invalid++; k = 0; }
        else if (offset < latest[code >> 1]) k = 0;
        else if (!(code & 1)) k = 1;
        else k = keep_tombstones;
        if (k) {
            v->kept++;
            if (code < 0 ? code == -2 : (code & 1)) v->tombstone = 1;
        }
    }
}

static inline void store_be(uint8_t *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* The batch at `h`, parsed and decided (keep[], v), rebuilt into out as the reference does
 * (kafkalog.records.filter._emit_retained): its header fields, the kept records re-encoded,
 * its offset range, and `new_horizon` stamped as its delete horizon if `stamp` (a kept
 * tombstone in a batch that has none). `crc` is the
 * CRC-32C function the records layer uses. 0 with *max_ts set; -1 with an exception; -2 with
 * the reference builder's InvalidRecords (out is left as it was either way). */
static int rebuild_batch(KeyOffsetMap *self, const uint8_t *h, const BatchHead *b,
                         const Verdicts *v, int stamp, int64_t new_horizon, PyObject *crc,
                         Buf *out, int64_t *max_ts) {
    int has_horizon = (b->attributes & ATTR_DELETE_HORIZON) != 0;
    int with_horizon = has_horizon || stamp;
    int64_t base = has_horizon ? b->base_timestamp
                   : stamp     ? new_horizon
                               : self->stamps[v->first];
    Py_ssize_t start = out->len;
    if (buf_reserve(out, V2_HEADER_SIZE) < 0) return -1;
    out->len += V2_HEADER_SIZE;
    int64_t last_delta;
    int rc = encode_retained(self, h + V2_HEADER_SIZE, b->count, b->base_offset, base, out,
                             max_ts, &last_delta);
    if (rc < 0) {
        out->len = start;
        return rc;
    }
    /* under LogAppendTime every stamp, and so *max_ts, is the batch's append time */
    uint8_t *p = (uint8_t *)out->p + start;
    Py_ssize_t size = out->len - start;
    store_be(p, (uint64_t)b->base_offset, 8);
    store_be(p + 8, (uint64_t)(size - LOG_OVERHEAD), 4);
    memcpy(p + 12, h + 12, 4); /* partition leader epoch */
    p[16] = 2;
    int attributes = (b->attributes & ATTR_LOG_APPEND_TIME) | (with_horizon ? ATTR_DELETE_HORIZON : 0);
    store_be(p + 21, (uint64_t)attributes, 2);
    store_be(p + 23, (uint64_t)(b->last_offset - b->base_offset), 4);
    store_be(p + 27, (uint64_t)base, 8);
    store_be(p + 35, (uint64_t)*max_ts, 8);
    memcpy(p + 43, h + 43, 14); /* producer id, epoch and base sequence */
    store_be(p + 57, (uint64_t)v->kept, 4);
    PyObject *region = PyMemoryView_FromMemory((char *)p + 21, size - 21, PyBUF_READ);
    PyObject *sum = region ? PyObject_CallOneArg(crc, region) : NULL;
    Py_XDECREF(region);
    unsigned long value = sum ? PyLong_AsUnsignedLong(sum) : 0;
    Py_XDECREF(sum);
    if (!sum || PyErr_Occurred()) {
        out->len = start;
        return -1;
    }
    store_be(p + 17, value, 4);
    return 0;
}

/* filter_region(buffer, segment, position, until, end, max_batch_size, upper_bound_offset,
 *               last_producer_ids, current_time, new_horizon, crc32c)
 *   -> (position, read, kept, invalid, [(position, size, last_offset, max_timestamp, rebuilt),
 *       ...], rebuilt_batches)
 * The recopy of the batches the walk takes, from `position`: dropped when none of their
 * records stays; listed as they are (rebuilt false, a position in `buffer`) when all stay and
 * no delete horizon must be stamped; else rebuilt into `rebuilt_batches` (rebuilt true, a
 * position there) as the reference rebuilds them, a kept tombstone stamping `new_horizon`. It
 * stops in front of a batch it does not take: the last batch of a producer in
 * `last_producer_ids` (a set) or the batch ending at `upper_bound_offset` (both kept even if
 * empty), one whose rebuild the reference builder refuses, damage. Skipping the reference path
 * for the batches it takes loses nothing: they are neither transactional nor control batches,
 * so the transaction metadata has nothing to learn from them. */
PyObject *KeyOffsetMap_filter_region(KeyOffsetMap *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, until, end, max_size, read = 0, kept = 0, invalid = 0;
    long long segment, upper, now, new_horizon;
    PyObject *producers, *crc, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*LnnnnLO!LLO", &view, &segment, &pos, &until, &end, &max_size,
                          &upper, &PySet_Type, &producers, &now, &new_horizon, &crc))
        return NULL;
    const uint8_t *d = view.buf;
    if (end > view.len) end = view.len;
    Buf out = {0};
    PyObject *batches = PyList_New(0);
    if (!batches) goto done;
    BatchHead b;
    while (pos < until && simple_batch(d, pos, end, max_size, &b) && b.last_offset + 1 != upper) {
        if (b.producer_id > -1 && PySet_GET_SIZE(producers) > 0) {
            PyObject *pid = PyLong_FromLongLong(b.producer_id);
            int last = pid ? PySet_Contains(producers, pid) : -1;
            Py_XDECREF(pid);
            if (last < 0) goto done;
            if (last) break;
        }
        int has_horizon = (b.attributes & ATTR_DELETE_HORIZON) != 0;
        int keep_tombstones = !has_horizon || now < b.base_timestamp;
        const uint8_t *records = d + pos + V2_HEADER_SIZE;
        int has_lat = (b.attributes & ATTR_LOG_APPEND_TIME) != 0;
        Damage damage = {0}; /* not raised: the scanner path reports it */
        Verdicts v;
        const LoggedBatch *notes = logged(self, segment, pos, &b);
        int parsed = 0;
        if (notes) {
            decide_logged(self, notes, keep_tombstones, &v);
        } else {
            parsed = parse_all(self, records, b.size - V2_HEADER_SIZE, b.count, b.base_timestamp,
                               has_lat, b.max_timestamp, &damage);
            if (parsed == -2) goto done;
            if (parsed < 0) break;
            parsed = 1;
            decide(self, records, b.count, b.base_offset, keep_tombstones, &v);
        }
        int stamp = v.tombstone && !has_horizon;
        PyObject *entry = NULL;
        if (v.kept == b.count && v.kept > 0 && !stamp) {
            entry = Py_BuildValue("(nnLLO)", pos, b.size, (long long)b.last_offset,
                                  (long long)b.max_timestamp, Py_False);
        } else if (v.kept > 0) {
            if (!parsed) { /* the notes decide; a rebuild needs the records themselves */
                int rc = parse_all(self, records, b.size - V2_HEADER_SIZE, b.count,
                                   b.base_timestamp, has_lat, b.max_timestamp, &damage);
                if (rc == -2) goto done;
                if (rc < 0) break;
                decide(self, records, b.count, b.base_offset, keep_tombstones, &v);
            }
            Py_ssize_t at = out.len;
            int64_t max_ts;
            int rc = rebuild_batch(self, d + pos, &b, &v, stamp, new_horizon, crc, &out,
                                   &max_ts);
            if (rc == -2) { /* the reference path raises it, in its words */
                PyErr_Clear();
                break;
            }
            if (rc < 0) goto done;
            entry = Py_BuildValue("(nnLLO)", at, out.len - at, (long long)b.last_offset,
                                  (long long)max_ts, Py_True);
        }
        if (v.kept > 0 && (!entry || PyList_Append(batches, entry) < 0)) {
            Py_XDECREF(entry);
            goto done;
        }
        Py_XDECREF(entry);
        read += b.count;
        kept += v.kept;
        invalid += v.invalid;
        pos += b.size;
    }
    PyObject *rebuilt = PyBytes_FromStringAndSize(out.p, out.len);
    if (rebuilt) { /* N: Py_BuildValue takes both references, also when it fails */
        result = Py_BuildValue("(nnnnNN)", pos, read, kept, invalid, batches, rebuilt);
        batches = NULL;
    }
done:
    Py_XDECREF(batches);
    buf_free(&out);
    PyBuffer_Release(&view);
    return result;
}
