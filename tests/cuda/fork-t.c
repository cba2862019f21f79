/* The double under fork, as CUDA behaves (issue 44): a child forked while
 * another thread holds the double's lock can use the double's controls, its
 * CUDA calls fail as CUDA's do in a forked child (and caibridge says so),
 * and it exits without waiting for stream workers it does not have; any
 * exit leaves work queued behind a closed gate unrun, without waiting.
 * Each child has an alarm: a hang fails its assertion instead of the
 * test. */
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda-test.h"

/* Longer than any child needs; a child killed by it hung. */
#define CHILD_ALARM 60

static const struct cudart_double *cuda;
static void (*hold_lock_us)(long);
static int (*lock_held)(void);

static void *symbol(const char *name)
{
    void *handle = dlopen(CUDART_DOUBLE_PATH, RTLD_NOW | RTLD_LOCAL);
    void *s = handle != NULL ? dlsym(handle, name) : NULL;

    if (s == NULL)
        bail("the double has no %s", name);
    return s;
}

static void *holder(void *unused)
{
    (void)unused;
    hold_lock_us(300000);
    return NULL;
}

/* The child's exit status, or 100 + the signal that ended it. */
static int reap(pid_t pid)
{
    int status;

    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        bail("fork or waitpid failed");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Forked while another thread holds the double's lock, after the parent
 * used CUDA and started a stream worker. */
static void fork_with_the_lock_held(void)
{
    cai_desc_t desc = producer(PRODUCER_STREAM, kDLCUDA, 0);
    unsigned char buf[16];
    cai_error_t err;
    pthread_t thread;
    pid_t pid;
    int rc;

    reset_with_streams(cuda);
    cuda->timeline_on();
    cuda->add_allocation(buf, sizeof buf, DOUBLE_DEVICE, 0, NULL);
    cuda->launch_fill(1, buf, sizeof buf, 7, 0); /* a worker for stream 1 */
    cuda->drain();
    rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
    ok(rc == 0, "the parent's hand-over works (%s)", err.message);

    if (pthread_create(&thread, NULL, holder, NULL) != 0)
        bail("cannot start a thread");
    while (!lock_held())
        ;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        long calls;

        alarm(CHILD_ALARM);
        calls = cuda->calls(); /* the first thing that takes the lock */
        rc = cai_cuda_order(&desc, CONSUMER_STREAM, &err);
        if (calls < 0)
            _exit(2);
        if (rc != CAI_ENOCUDA || strstr(err.message, "forked") == NULL ||
            strstr(cuda->log(), "-> error 3\n") == NULL)
            _exit(3);
        exit(0); /* the destructor runs: no worker to wait for here */
    }
    pthread_join(thread, NULL);
    rc = reap(pid);
    is_int(0, rc,
           "fork with the lock held: the child takes the lock, its hand-over "
           "fails with CUDA's 3 and caibridge names the fork, and it exits "
           "(2: lock, 3: error, 114: hung)");
    cuda->reset();
}

/* A child whose exit finds a kernel behind a closed gate on stream 1, and a
 * fill after it into memory the parent sees. */
static void exit_with_a_gate_closed(void)
{
    unsigned char *shared = mmap(NULL, 16, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pid;
    int rc;

    if (shared == MAP_FAILED)
        bail("mmap failed");
    memset(shared, 0, 16);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        unsigned char buf[16];
        int gate;

        alarm(CHILD_ALARM);
        cuda->reset();
        cuda->timeline_on();
        cuda->add_allocation(buf, sizeof buf, DOUBLE_DEVICE, 0, NULL);
        cuda->add_allocation(shared, 16, DOUBLE_DEVICE, 0, NULL);
        gate = cuda->gate_new();
        cuda->launch_fill(1, buf, sizeof buf, 1, gate);
        cuda->launch_fill(1, shared, 16, 9, 0);
        exit(0);
    }
    rc = reap(pid);
    is_int(0, rc, "exit with a gate closed: no hang (114: hung)");
    is_int(0, shared[0], "and the work queued behind the gate never ran");
    munmap(shared, 16);
}

int main(void)
{
    if (!cai_cuda_built())
        skip_all("built without CUDA support: the double is not built");
    cuda = use_double();
    hold_lock_us = (void (*)(long))symbol("double_hold_lock_us");
    lock_held = (int (*)(void))symbol("double_lock_held");
    plan(4);
    exit_with_a_gate_closed(); /* first: no stream worker yet */
    fork_with_the_lock_held();
    return 0;
}
