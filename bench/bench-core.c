/*
 * The C core alone: descriptor -> versioned tensor -> deleter, and a
 * versioned tensor -> descriptor, in ns per conversion.
 *
 * Each case runs BATCHES batches of ITERS conversions timed with
 * clock_gettime; the median batch is reported, with the spread (min and max
 * batch) so a noisy machine shows as noise rather than as a result.
 *
 * With "-q" the output is one line per case for bench.py:
 * name, median, first quartile, third quartile, min and max, in ns, by TABs.
 *
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "caibridge.h"

#define BATCHES 51
#define ITERS 20000

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The release callback a real owner would have; counts so it is not elided. */
static unsigned long released;

static void release_owner(void *owner)
{
    (void)owner;
    released++;
}

static float storage[4096];

/* A float32 host descriptor of ndim dims; strided ones skip every other
 * element of the last axis, so their strides are not C-contiguous. */
static void make_desc(cai_desc_t *d, int ndim, int strided)
{
    static const int64_t shapes[4][4] = {{1024}, {32, 32}, {4, 8, 4, 8}, {0}};
    const int64_t *shape = shapes[ndim == 1 ? 0 : ndim == 2 ? 1 : 2];
    int64_t step = strided ? 8 : 4;
    int i;

    memset(d, 0, sizeof *d);
    d->data = storage;
    d->ndim = ndim;
    d->version = 3;
    d->dtype.code = kDLFloat;
    d->dtype.bits = 32;
    d->dtype.lanes = 1;
    d->device.device_type = kDLCPU;
    d->device.device_id = 0;
    d->has_strides = strided;
    for (i = ndim - 1; i >= 0; i--) {
        d->shape[i] = shape[i] / (strided && i == ndim - 1 ? 2 : 1);
        d->strides[i] = step;
        step *= shape[i];
    }
}

/* One case: a descriptor and the direction it is converted in. */
typedef struct {
    int ndim, strided;
    int from;   /* tensor -> descriptor instead */
    int legacy; /* DLManagedTensor instead of the versioned struct */
    cai_desc_t desc;
    DLManagedTensorVersioned *tensor; /* the source when from */
    char name[48];                    /* made from the fields above */
    double ns[BATCHES];
} bench_case;

/* Times one batch of ITERS conversions; returns ns per conversion, or a
 * negative value when a conversion fails. */
static double run_batch(bench_case *c)
{
    double t0 = now_ns();
    int i;

    if (c->from) {
        cai_desc_t back;

        for (i = 0; i < ITERS; i++) {
            if (cai_desc_from_dlpack_versioned(c->tensor, &back, NULL) != 0)
                return -1;
            /* Keep the stores: the result must look used. */
            __asm__ volatile("" : : "r"(&back) : "memory");
        }
    } else if (c->legacy) {
        for (i = 0; i < ITERS; i++) {
            DLManagedTensor *t;

            if (cai_desc_to_dlpack(&c->desc, 0, &c->desc, release_owner, &t,
                                   NULL) != 0)
                return -1;
            t->deleter(t);
        }
    } else {
        for (i = 0; i < ITERS; i++) {
            DLManagedTensorVersioned *t;

            if (cai_desc_to_dlpack_versioned(&c->desc, 0, &c->desc,
                                             release_owner, &t, NULL) != 0)
                return -1;
            t->deleter(t);
        }
    }
    return (now_ns() - t0) / ITERS;
}

static bench_case cases[] = {
    {.ndim = 1},
    {.ndim = 1, .strided = 1},
    {.ndim = 2},
    {.ndim = 2, .strided = 1},
    {.ndim = 4},
    {.ndim = 4, .strided = 1},
    {.ndim = 2, .legacy = 1},
    {.ndim = 2, .from = 1},
    {.ndim = 4, .strided = 1, .from = 1},
};

#define NCASES (sizeof cases / sizeof cases[0])

int main(int argc, char **argv)
{
    int quiet = argc > 1 && strcmp(argv[1], "-q") == 0;
    size_t k;
    int b;

    for (k = 0; k < NCASES; k++) {
        bench_case *c = &cases[k];

        snprintf(c->name, sizeof c->name, "core %s %dd%s",
                 c->from     ? "from_versioned"
                 : c->legacy ? "to_legacy+deleter"
                             : "to_versioned+deleter",
                 c->ndim, c->strided ? " strided" : "");
        make_desc(&c->desc, c->ndim, c->strided);
        if (c->from && cai_desc_to_dlpack_versioned(&c->desc, 0, NULL, NULL,
                                                    &c->tensor, NULL) != 0) {
            fprintf(stderr, "bench-core: %s: setup failed\n", c->name);
            return 1;
        }
    }
    /* Round-robin over the cases, so a burst of noise from the rest of the
     * machine is spread over all of them instead of landing on one. */
    for (b = 0; b < BATCHES; b++) {
        for (k = 0; k < NCASES; k++) {
            cases[k].ns[b] = run_batch(&cases[k]);
            if (cases[k].ns[b] < 0) {
                fprintf(stderr, "bench-core: %s: conversion failed\n",
                        cases[k].name);
                return 1;
            }
        }
    }
    if (released == 0)
        return 1;
    if (!quiet)
        printf("C core, ns per conversion (median of %d batches of %d; "
               "[min .. max]):\n",
               BATCHES, ITERS);
    for (k = 0; k < NCASES; k++) {
        bench_case *c = &cases[k];

        qsort(c->ns, BATCHES, sizeof c->ns[0], cmp_double);
        if (quiet) /* name, median, first and third quartiles, min, max */
            printf("%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", c->name,
                   c->ns[BATCHES / 2], c->ns[BATCHES / 4],
                   c->ns[3 * BATCHES / 4], c->ns[0], c->ns[BATCHES - 1]);
        else
            printf("  %-38s %8.2f ns   [%.2f .. %.2f]\n", c->name,
                   c->ns[BATCHES / 2], c->ns[0], c->ns[BATCHES - 1]);
        if (c->tensor != NULL)
            c->tensor->deleter(c->tensor);
    }
    return 0;
}
