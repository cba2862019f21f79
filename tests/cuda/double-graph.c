/*
 * The runtime double's graph captures: work queued on a capturing stream
 * becomes a node of its capture; instantiate and replay run the nodes on a
 * stream later, and a node naming an event destroyed since is a violation,
 * as it is undefined behaviour in CUDA.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "double-internal.h"

enum {
    NODE_KERNEL,
    NODE_RECORD,
    NODE_WAIT
};

struct node {
    int capture, kind;
    struct event *event;
    int event_number; /* the event's, to tell a slot reused */
    struct work work;
};

static struct node *nodes;
static size_t node_count, node_room;

static struct node *add_node(int capture, int kind)
{
    struct node *n;

    if (node_count == node_room) {
        node_room = node_room ? 2 * node_room : 16;
        nodes = realloc(nodes, node_room * sizeof *nodes);
        if (nodes == NULL)
            abort();
    }
    n = &nodes[node_count++];
    memset(n, 0, sizeof *n);
    n->capture = capture;
    n->kind = kind;
    return n;
}

static int event_node(const struct stream *s, const struct event *e, int kind)
{
    struct node *n;

    if (s == NULL || s->capture == 0)
        return 0;
    n = add_node(s->capture, kind);
    n->event = (struct event *)(uintptr_t)e;
    n->event_number = e->number;
    return 1;
}

int graph_record(struct stream *s, struct event *e)
{
    return event_node(s, e, NODE_RECORD);
}

int graph_wait(struct stream *s, const struct event *e)
{
    if (s == NULL || s->capture == 0)
        return 0;
    /* A wait inside one capture is an edge of the graph; only a wait on
     * an event from outside names the event at replay. */
    return e->captured == s->capture ? 1 : event_node(s, e, NODE_WAIT);
}

int graph_launch(struct stream *s, const struct work *work)
{
    if (s == NULL || s->capture == 0)
        return 0;
    add_node(s->capture, NODE_KERNEL)->work = *work;
    return 1;
}

void graph_reset(void)
{
    free(nodes);
    nodes = NULL;
    node_count = node_room = 0;
}

long instantiate(long handle)
{
    struct stream *s;
    long graph = 0;

    pthread_mutex_lock(&lock);
    s = find_stream((cudaStream_t)(intptr_t)handle);
    if (s != NULL)
        graph = s->ended;
    pthread_mutex_unlock(&lock);
    return graph;
}

int replay(long graph, long stream)
{
    cudaStream_t handle = (cudaStream_t)(intptr_t)stream;
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&lock);
    for (i = 0; i < node_count; i++) {
        struct node n = nodes[i];

        if (n.capture != graph)
            continue;
        if (n.kind != NODE_KERNEL &&
            (!n.event->live || n.event->number != n.event_number)) {
            violation("graph %ld replayed a node whose event ev%d was "
                      "destroyed",
                      graph, n.event_number);
            rc = cudaErrorInvalidResourceHandle;
        } else if (n.kind == NODE_RECORD) {
            tl_record(n.event, handle);
        } else if (n.kind == NODE_WAIT) {
            tl_wait(handle, n.event);
        } else {
            tl_launch(handle, &n.work);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
