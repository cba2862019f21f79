/* The CUDA export example of docs/guide/c.rst (its second C block, taken
 * from the page by make as guide-gpu-example.h), run on the timeline
 * double: the consumer's copy runs after the producer's write, the owner
 * is kept while the copy is held back and goes at the first poll after
 * it, and a failed export releases the owner once. */
#include "cuda-test.h"

#include "guide-gpu-example.h"

#define N 16

static const struct cudart_double *cuda;
static float src[N], out[N], init[N];
static int released;

static void count_release(void *owner)
{
    (void)owner;
    released++;
}

int main(void)
{
    DLManagedTensorVersioned *t;
    cai_error_t err;
    long a, b;
    int i, ready, gate, fine = 1;
    float host[4];

    cuda = use_double();
    plan(11);
    cuda->reset();
    cuda->timeline_on();
    a = cuda->stream_create(0);
    b = cuda->stream_create(0);
    cuda->add_allocation(src, sizeof src, DOUBLE_DEVICE, 0, NULL);
    cuda->add_allocation(out, sizeof out, DOUBLE_DEVICE, 0, NULL);
    for (i = 0; i < N; i++)
        init[i] = (float)i;
    /* The producer's write is queued on a and held back. */
    ready = cuda->gate_new();
    cuda->launch_copy(a, src, init, sizeof src, ready);
    t = export_cuda(src, N, a, b, NULL, count_release);
    ok(t != NULL, "exported");
    if (t == NULL)
        bail("nothing to test");
    is_int(kDLCUDA, t->dl_tensor.device.device_type, "a kDLCUDA tensor");
    is_int(0, t->dl_tensor.device.device_id, "on device 0");
    /* The consumer queues its read on b, then lets go of the tensor. */
    gate = cuda->gate_new();
    cuda->launch_copy(b, out, t->dl_tensor.data, sizeof out, gate);
    t->deleter(t);
    is_int(0, released, "the owner is kept while the read is queued");
    is_int(CAI_OK, cai_release_poll(0, &err), "a poll");
    is_int(0, released, "still kept: the read has not run");
    cuda->gate_open(ready);
    cuda->gate_open(gate);
    cuda->drain();
    is_int(CAI_OK, cai_release_poll(0, &err), "a poll after the read");
    is_int(1, released, "the owner went once, after the read");
    for (i = 0; i < N; i++)
        fine &= out[i] == (float)i;
    ok(fine, "the consumer read what the producer wrote");
    is_int(0, cuda->violations(), "no race %s", cuda->violation_log());
    /* Host memory is not CUDA memory: refused, the owner released. */
    released = 0;
    t = export_cuda(host, 4, a, b, NULL, count_release);
    ok(t == NULL && released == 1, "a failed export releases the owner once");
    return 0;
}
