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
 * batch at the upper bound and batches to rebuild. A walk stops in front of such a batch and
 * the caller's reference path takes it (damage is then reported in the scanner's words).
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

/* filter_region(buffer, segment, position, until, end, max_batch_size, upper_bound_offset,
 *               last_producer_ids, current_time)
 *   -> (position, read, kept, invalid, [(position, size, last_offset, max_timestamp), ...])
 * The recopy of the batches the walk takes, from `position`, for as long as their fate needs
 * no rebuild: none of their records stays (dropped), or all stay and no delete horizon must be
 * stamped (copied as they are; listed). It stops in front of a batch it does not take: one to
 * rebuild, the last batch of a producer in `last_producer_ids` (a set) or the batch ending at
 * `upper_bound_offset` (both kept even if empty), damage. Skipping the reference path for the
 * batches it takes loses nothing: they are neither transactional nor control batches, so the
 * transaction metadata has nothing to learn from them. */
PyObject *KeyOffsetMap_filter_region(KeyOffsetMap *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, until, end, max_size, read = 0, kept = 0, invalid = 0;
    long long segment, upper, now;
    PyObject *producers;
    if (!PyArg_ParseTuple(args, "y*LnnnnLO!L", &view, &segment, &pos, &until, &end, &max_size,
                          &upper, &PySet_Type, &producers, &now))
        return NULL;
    const uint8_t *d = view.buf;
    if (end > view.len) end = view.len;
    PyObject *batches = PyList_New(0);
    if (!batches) goto fail;
    BatchHead b;
    while (pos < until && simple_batch(d, pos, end, max_size, &b) && b.last_offset + 1 != upper) {
        if (b.producer_id > -1 && PySet_GET_SIZE(producers) > 0) {
            PyObject *pid = PyLong_FromLongLong(b.producer_id);
            int last = pid ? PySet_Contains(producers, pid) : -1;
            Py_XDECREF(pid);
            if (last < 0) goto fail;
            if (last) break;
        }
        int has_horizon = (b.attributes & ATTR_DELETE_HORIZON) != 0;
        int keep_tombstones = !has_horizon || now < b.base_timestamp;
        Verdicts v;
        const LoggedBatch *notes = logged(self, segment, pos, &b);
        if (notes) {
            decide_logged(self, notes, keep_tombstones, &v);
        } else {
            const uint8_t *records = d + pos + V2_HEADER_SIZE;
            int has_lat = (b.attributes & ATTR_LOG_APPEND_TIME) != 0;
            Damage damage = {0}; /* not raised: the scanner path reports it */
            int parsed = parse_all(self, records, b.size - V2_HEADER_SIZE, b.count,
                                   b.base_timestamp, has_lat, b.max_timestamp, &damage);
            if (parsed == -2) goto fail;
            if (parsed < 0) break;
            decide(self, records, b.count, b.base_offset, keep_tombstones, &v);
        }
        if (v.kept == b.count && v.kept > 0) {
            if (v.tombstone && !has_horizon) break; /* a horizon to stamp: a rebuild */
            PyObject *entry = Py_BuildValue("(nnLL)", pos, b.size, (long long)b.last_offset,
                                            (long long)b.max_timestamp);
            if (!entry || PyList_Append(batches, entry) < 0) { Py_XDECREF(entry); goto fail; }
            Py_DECREF(entry);
        } else if (v.kept > 0) {
            break; /* partly kept: a rebuild */
        }
        read += b.count;
        kept += v.kept;
        invalid += v.invalid;
        pos += b.size;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnnnN)", pos, read, kept, invalid, batches);
fail:
    Py_XDECREF(batches);
    PyBuffer_Release(&view);
    return NULL;
}
