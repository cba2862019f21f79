/*
 * Streams: the consumer-stream rules of __dlpack__ and the ordering of the
 * consumer's stream after the producer's (CAI v3, "Synchronization"),
 * which the core does with an event and no host block.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include "caibridge_module.h"

/*
 * The consumer-stream rules of __dlpack__ (DLPack Python spec, "stream") for
 * a stream already read (given = 0: None): host memory takes no stream at
 * all; CUDA memory takes None (the legacy default stream), -1 (no
 * ordering) or a stream handle, never 0.  Writes the stream the consumer
 * will use (CAI_STREAM_NO_SYNC for none) to *consumer.
 */
int check_stream_value(const cai_desc_t *d, int given, intptr_t s,
                       intptr_t *consumer)
{
    if (d->device.device_type == kDLCPU) {
        if (given) {
            PyErr_Format(PyExc_BufferError,
                         "stream = %zd was given for host memory (kDLCPU); "
                         "only None is valid there", (Py_ssize_t)s);
            return -1;
        }
        *consumer = CAI_STREAM_NO_SYNC;
        return 0;
    }
    if (!given)
        s = CAI_STREAM_LEGACY;
    if (s == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stream = 0 is disallowed by the DLPack and CAI "
                        "specs (ambiguous); use 1 for the legacy default "
                        "stream, 2 for the per-thread one, or -1 for none");
        return -1;
    }
    if (s < CAI_STREAM_NO_SYNC) {
        PyErr_Format(PyExc_ValueError,
                     "stream = %zd is not a stream: use None, -1, 1, 2 or a "
                     "stream handle", (Py_ssize_t)s);
        return -1;
    }
    *consumer = s;
    return 0;
}

/* check_stream_value for a stream argument not read yet. */
int check_stream(cai_state *st, const cai_desc_t *d, PyObject *arg,
                 intptr_t *consumer)
{
    int given = 0;
    intptr_t s = 0;

    if (arg != NULL && arg != Py_None &&
        read_stream(st, arg, &given, &s) != 0)
        return -1;
    return check_stream_value(d, given, s, consumer);
}

/* Makes the consumer's stream wait for the producer's unless ordering is
 * off or there is nothing to order. */
int order_streams(cai_state *st, const cai_desc_t *d, intptr_t consumer,
                  int sync)
{
    cai_error_t err;

    if (!sync || !st->sync_enabled || consumer == CAI_STREAM_NO_SYNC ||
        !d->has_stream || !is_cuda_device(d->device.device_type))
        return 0;
    if (cai_cuda_order(d, consumer, &err) != 0) {
        raise_status(st, &err);
        return -1;
    }
    return 0;
}

/* The CAI stream to report for data made ready on consumer stream s. */
PyObject *reported_stream(int given, intptr_t s)
{
    if (!given)
        s = CAI_STREAM_LEGACY;
    if (s == CAI_STREAM_NO_SYNC)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t((Py_ssize_t)s);
}
