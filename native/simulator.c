/* The event loop of Algorithm 1 and the replay of Algorithm 2 (paper §5), in C for speed.
 *
 * flexflow/simulator/reference.py is the specification: `reference_run` is the same loop in
 * Python, and tests/simulator/test_native.py checks both give bit-identical times. The floating
 * point operations are the Python code's, in the same order (max of ends, start + exe), so the
 * results are equal, not just close; keep it that way (no -ffast-math, no reassociation).
 *
 * Delta simulation (flexflow/simulator/schedule.py, DeltaSimulator) updates the task graph in
 * place, then calls ff_simulate with what changed. From that and the old schedule it finds T0,
 * the first moment the change can affect: the earliest start of a removed task, the earliest
 * time a new task (bounded by its old predecessors' ends) or a task that lost or gained a
 * predecessor can become ready. Tasks that started before T0 keep their times; every device and
 * link is free at T0 from the latest end of those tasks on it; the rest is simulated again.
 * A task's times are written only when the loop simulates it, after the old ones go to the
 * caller's log (ff_restore takes a rejected change back from it): most changes a search tries
 * stop at their cutoff after a few tasks, and a log of those is cheaper than copying the whole
 * schedule before every change.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simulator.h"

enum { FRESH = 1, NEIGHBOUR = 2, MEMBER = 4 };

typedef struct {
    uint64_t time;  /* the ready time as an integer of the same order, see time_key */
    uint64_t order; /* canonical key, unique among live tasks */
    int32_t task;
} entry;

/* A double as an unsigned integer with the same order, so heap comparisons are integer ones
 * (the usual trick: flip the sign bit of non-negative values, every bit of negative ones).
 * Only -0.0 and +0.0 would compare differently, and ready times are never -0.0: they are the
 * maximum of 0.0 and predecessors' ends. */
static uint64_t time_key(double ready) {
    uint64_t bits;
    memcpy(&bits, &ready, sizeof bits);
    return (bits >> 63) ? ~bits : bits | (UINT64_C(1) << 63);
}

/* Python's heap compares (ready_time, order, task id) tuples; the same order here. */
static int before(const entry *a, const entry *b) {
    if (a->time != b->time) return a->time < b->time;
    if (a->order != b->order) return a->order < b->order;
    return a->task < b->task;
}

static void heap_push(entry *heap, int32_t *size, entry item) {
    int32_t i = (*size)++;
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!before(&item, &heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
}

static entry heap_pop(entry *heap, int32_t *size) {
    entry top = heap[0], last = heap[--(*size)];
    int32_t i = 0, n = *size;
    for (;;) {
        int32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && before(&heap[child + 1], &heap[child])) child++;
        if (!before(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (n > 0) heap[i] = last;
    return top;
}

/* Scratch memory of one call. */
typedef struct {
    int32_t *succ_offsets; /* successors of t: succ[succ_offsets[t] .. succ_offsets[t + 1]) */
    int32_t *succ;
    uint8_t *flags;        /* FRESH, NEIGHBOUR, MEMBER */
    int32_t *remaining;    /* predecessors not yet ended, among the tasks being processed */
    double *bound;         /* new tasks: lower bound of the ready time; neighbours: ready time */
    double *ready;         /* members: the ready time so far (the schedule's is written only
                            * when the task is simulated, after its old times are logged) */
    int32_t *list;         /* a work list of task ids */
    entry *heap;
    double *free_at;       /* per device and link: when it is next free */
    double *load;          /* per device and link: exe_time of its members not yet simulated */
} scratch;

static void release(scratch *w) {
    free(w->succ_offsets);
    free(w->succ);
    free(w->flags);
    free(w->remaining);
    free(w->bound);
    free(w->ready);
    free(w->list);
    free(w->heap);
    free(w->free_at);
    free(w->load);
}

static int allocate(scratch *w, const ff_graph *g) {
    size_t n = (size_t)g->num_tasks + 1, e = (size_t)g->num_edges + 1;
    w->succ_offsets = calloc(n + 1, sizeof(int32_t));
    w->succ = malloc(e * sizeof(int32_t));
    w->flags = calloc(n, sizeof(uint8_t));
    w->remaining = calloc(n, sizeof(int32_t));
    w->bound = calloc(n, sizeof(double));
    w->ready = malloc(n * sizeof(double));
    w->list = malloc(n * sizeof(int32_t));
    w->heap = malloc(n * sizeof(entry));
    w->free_at = calloc((size_t)g->num_resources + 1, sizeof(double));
    w->load = calloc((size_t)g->num_resources + 1, sizeof(double));
    return w->succ_offsets && w->succ && w->flags && w->remaining && w->bound && w->ready &&
           w->list && w->heap && w->free_at && w->load;
}

/* Logs task t's times before they are overwritten (ff_restore writes them back). */
static void log_times(ff_times *s, int32_t t) {
    if (s->log_task == NULL) return;
    int64_t i = s->log_size++;
    s->log_task[i] = t;
    s->log_ready[i] = s->ready[t];
    s->log_start[i] = s->start[t];
    s->log_end[i] = s->end[t];
}

void ff_restore(ff_times *s) {
    for (int64_t i = s->log_size - 1; i >= 0; i--) {
        int32_t t = s->log_task[i];
        s->ready[t] = s->log_ready[i];
        s->start[t] = s->log_start[i];
        s->end[t] = s->log_end[i];
    }
    s->log_size = 0;
}

/* Successor lists of the edges not removed (kept in edge order; the order does not matter). */
static void build_successors(const ff_graph *g, scratch *w) {
    int32_t *offsets = w->succ_offsets;
    for (int32_t e = 0; e < g->num_edges; e++)
        if (g->edge_src[e] >= 0) offsets[g->edge_src[e] + 1]++;
    for (int32_t t = 0; t < g->num_tasks; t++) offsets[t + 1] += offsets[t];
    int32_t *fill = w->list; /* next free slot of each task, borrowed from the work list */
    memcpy(fill, offsets, (size_t)g->num_tasks * sizeof(int32_t));
    for (int32_t e = 0; e < g->num_edges; e++)
        if (g->edge_src[e] >= 0) w->succ[fill[g->edge_src[e]]++] = g->edge_dst[e];
}

/* A lower bound of each new task's ready time: old predecessors' ends, new ones' bounds plus
 * their exe_time (new tasks in topological order). Returns FF_CYCLE if they never all settle.
 * Only the rebuilt blocks' edges can lead into a new task: those from first_new_edge on. */
static int bound_fresh(const ff_graph *g, const ff_change *c, const double *end, scratch *w) {
    for (int32_t e = c->first_new_edge; e < g->num_edges; e++) {
        int32_t p = g->edge_src[e], t = g->edge_dst[e];
        if (p < 0 || !(w->flags[t] & FRESH)) continue;
        if (w->flags[p] & FRESH)
            w->remaining[t]++;
        else if (end[p] > w->bound[t])
            w->bound[t] = end[p];
    }
    int32_t head = 0, tail = 0;
    for (int32_t i = 0; i < c->num_added; i++)
        if (w->remaining[c->added[i]] == 0) w->list[tail++] = c->added[i];
    while (head < tail) {
        int32_t t = w->list[head++];
        double bound = w->bound[t] + g->exe[t];
        for (int32_t i = w->succ_offsets[t]; i < w->succ_offsets[t + 1]; i++) {
            int32_t u = w->succ[i];
            if (!(w->flags[u] & FRESH)) continue;
            if (bound > w->bound[u]) w->bound[u] = bound;
            if (--w->remaining[u] == 0) w->list[tail++] = u;
        }
    }
    return tail == c->num_added ? 0 : FF_CYCLE;
}

/* Marks the old tasks whose predecessors changed and lowers t0 to their start and ready time
 * (computed with the new tasks' bounds). Returns the lowered t0. */
static double mark_neighbours(const ff_graph *g, const ff_change *c, const ff_times *s,
                              scratch *w, double t0) {
    int32_t count = 0;
    for (int32_t i = 0; i < c->num_touched; i++) {
        int32_t u = c->touched[i];
        if (g->live[u] && !(w->flags[u] & (FRESH | NEIGHBOUR))) {
            w->flags[u] |= NEIGHBOUR;
            w->list[count++] = u;
        }
    }
    for (int32_t i = 0; i < c->num_added; i++) {
        int32_t t = c->added[i];
        for (int32_t k = w->succ_offsets[t]; k < w->succ_offsets[t + 1]; k++) {
            int32_t u = w->succ[k];
            if (!(w->flags[u] & (FRESH | NEIGHBOUR))) {
                w->flags[u] |= NEIGHBOUR;
                w->list[count++] = u;
            }
        }
    }
    for (int32_t e = 0; count > 0 && e < g->num_edges; e++) {
        int32_t p = g->edge_src[e], u = g->edge_dst[e];
        if (p < 0 || !(w->flags[u] & NEIGHBOUR)) continue;
        double ready = (w->flags[p] & FRESH) ? w->bound[p] + g->exe[p] : s->end[p];
        if (ready > w->bound[u]) w->bound[u] = ready;
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t u = w->list[i];
        if (s->start[u] < t0) t0 = s->start[u];
        if (w->bound[u] < t0) t0 = w->bound[u];
    }
    return t0;
}

/* Marks MEMBER the live tasks starting at or after t0 or forced by the change; the others keep
 * their times, and every device and link is free from the latest end of those on it. Returns
 * the number of members; *latest is the latest end of the others. */
static int32_t select_members(const ff_graph *g, ff_times *s, scratch *w, double t0,
                              double *latest) {
    int32_t members = 0;
    *latest = 0.0;
    for (int32_t t = 0; t < g->num_tasks; t++) {
        if (!g->live[t]) continue;
        if (s->start[t] >= t0 || (w->flags[t] & (FRESH | NEIGHBOUR))) {
            w->flags[t] |= MEMBER;
            w->ready[t] = 0.0;
            members++;
            continue;
        }
        const double end = s->end[t];
        if (end > *latest) *latest = end;
        for (int32_t k = g->set_offsets[g->resource_set[t]];
             k < g->set_offsets[g->resource_set[t] + 1]; k++) {
            int32_t x = g->set_members[k];
            if (end > w->free_at[x]) w->free_at[x] = end;
        }
    }
    return members;
}

/* The event loop of Algorithm 1 over the MEMBER tasks; raises *latest to their latest end.
 * With a finite cutoff, stops (FF_ABOVE_CUTOFF) once the iteration surely ends after it: a
 * device or link runs its tasks one at a time and every member still to come on it starts
 * after it is free, so the iteration ends no earlier than that plus their exe_times (w->load).
 * A good strategy's neighbours that load some device or link with more work show it at that
 * resource's first task after the change, long before the end of the replay. */
static int64_t run(const ff_graph *g, ff_times *s, scratch *w, int32_t members, double *latest,
                   double cutoff) {
    for (int32_t e = 0; e < g->num_edges; e++) {
        int32_t p = g->edge_src[e], t = g->edge_dst[e];
        if (p < 0 || !(w->flags[t] & MEMBER)) continue;
        if (w->flags[p] & MEMBER)
            w->remaining[t]++;
        else if (s->end[p] > w->ready[t])
            w->ready[t] = s->end[p];
    }
    const int cut = cutoff < HUGE_VAL;
    int32_t size = 0;
    for (int32_t t = 0; t < g->num_tasks; t++) {
        if (!(w->flags[t] & MEMBER)) continue;
        if (w->remaining[t] == 0)
            heap_push(w->heap, &size, (entry){time_key(w->ready[t]), g->order[t], t});
        if (cut)
            for (int32_t k = g->set_offsets[g->resource_set[t]];
                 k < g->set_offsets[g->resource_set[t] + 1]; k++)
                w->load[g->set_members[k]] += g->exe[t];
    }
    for (int32_t x = 0; cut && x < g->num_resources; x++)
        if (w->free_at[x] + w->load[x] > cutoff) return FF_ABOVE_CUTOFF;
    int32_t done = 0;
    while (size > 0) {
        entry item = heap_pop(w->heap, &size);
        int32_t t = item.task;
        const int32_t *first = g->set_members + g->set_offsets[g->resource_set[t]];
        const int32_t *last = g->set_members + g->set_offsets[g->resource_set[t] + 1];
        double start = w->ready[t]; /* final: every predecessor has ended */
        for (const int32_t *x = first; x < last; x++)
            if (w->free_at[*x] > start) start = w->free_at[*x];
        double end = start + g->exe[t];
        if (cut) {
            for (const int32_t *x = first; x < last; x++) {
                w->load[*x] -= g->exe[t];
                if (end + w->load[*x] > cutoff) return FF_ABOVE_CUTOFF;
            }
        }
        for (const int32_t *x = first; x < last; x++) w->free_at[*x] = end;
        log_times(s, t);
        s->ready[t] = w->ready[t];
        s->start[t] = start;
        s->end[t] = end;
        if (end > *latest) *latest = end;
        done++;
        for (int32_t k = w->succ_offsets[t]; k < w->succ_offsets[t + 1]; k++) {
            int32_t u = w->succ[k];
            if (!(w->flags[u] & MEMBER)) return FF_NOT_CLOSED;
            if (end > w->ready[u]) w->ready[u] = end;
            if (--w->remaining[u] == 0)
                heap_push(w->heap, &size, (entry){time_key(w->ready[u]), g->order[u], u});
        }
    }
    return done == members ? members : FF_CYCLE;
}

int64_t ff_simulate(const ff_graph *g, const ff_change *c, ff_times *s) {
    double t0 = c->t0;
    for (int32_t i = 0; i < c->num_removed; i++)
        if (s->start[c->removed[i]] < t0) t0 = s->start[c->removed[i]];
    s->log_size = 0;
    for (int32_t i = 0; i < c->num_removed; i++) {
        int32_t t = c->removed[i]; /* free ids and new tasks hold no time */
        log_times(s, t);
        s->ready[t] = s->start[t] = s->end[t] = 0.0;
    }
    for (int32_t i = 0; i < c->num_added; i++) {
        int32_t t = c->added[i];
        log_times(s, t);
        s->ready[t] = s->start[t] = s->end[t] = 0.0;
    }
    scratch w = {0};
    if (!allocate(&w, g)) {
        release(&w);
        return FF_NO_MEMORY;
    }
    build_successors(g, &w);
    int64_t result = 0;
    for (int32_t i = 0; i < c->num_added; i++) w.flags[c->added[i]] |= FRESH;
    if (c->num_added > 0) {
        result = bound_fresh(g, c, s->end, &w);
        for (int32_t i = 0; i < c->num_added; i++)
            if (w.bound[c->added[i]] < t0) t0 = w.bound[c->added[i]];
        memset(w.remaining, 0, (size_t)g->num_tasks * sizeof(int32_t));
    }
    if (result == 0) {
        t0 = mark_neighbours(g, c, s, &w, t0);
        double latest; /* free ids hold no time: the latest end of live tasks is the makespan */
        int32_t members = select_members(g, s, &w, t0, &latest);
        result = run(g, s, &w, members, &latest, c->cutoff);
        s->iteration_s = latest;
    }
    release(&w);
    return result;
}

void ff_set_flags(int8_t *flags, const int32_t *ids, int64_t n, int8_t value) {
    for (int64_t i = 0; i < n; i++) flags[ids[i]] = value;
}
