/* The Record type of _fastcodec and its loops (see _record_objects.c), declared for
 * _fastcodec.c, which owns the module state and the method table. */
#ifndef KAFKALOG_RECORD_OBJECTS_H
#define KAFKALOG_RECORD_OBJECTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* kafkalog.records.record.Record's fields, as its pure-Python definition names them */
typedef struct {
    PyObject_HEAD
    PyObject *value, *key, *headers, *timestamp, *offset;
} RecordObject;

#define R(obj) ((RecordObject *)(obj))

extern PyType_Spec record_type_spec;
extern PyMethodDef record_methods[]; /* decode_records, encode_records, record_facts */
extern PyMethodDef search_methods[]; /* search_offset, in _batch_search.c */

/* from _fastcodec.c, which owns the module state */
PyTypeObject *codec_record_type(PyObject *module);
PyObject *codec_corrupt_records(PyObject *module);

PyObject *records_encode(PyObject *module, PyObject *args);
PyObject *records_facts(PyObject *module, PyObject *records);

#endif
