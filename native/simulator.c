/* The event loop of Algorithm 1 and the replay of Algorithm 2 (paper §5), in C for speed.
 *
 * flexflow/simulator/reference.py is the specification: `reference_run` is the same loop in
 * Python, and tests/simulator/test_native.py checks both give bit-identical times. The floating
 * point operations are the Python code's, in the same order (max of ends, start + exe), so the
 * results are equal, not just close; keep it that way (no -ffast-math, no reassociation).
 *
 * Delta simulation (flexflow/simulator/schedule.py, DeltaSimulator) updates the task graph in
 * place, then calls ff_simulate with what changed. From that and the old schedule it finds T0,
 * the first moment the change can affect: the earliest start of a removed task (or ready time,
 * for one holding several links: moved_from), the earliest time a new task (bounded by its old
 * predecessors' ends) or a task that lost or gained a predecessor can become ready. Tasks that started before T0 keep their times; every device and
 * link is free at T0 from the latest end of those tasks on it; the rest is simulated again.
 * A delta with a log journals the new times of the tasks it simulates in it and writes them to
 * the schedule only once the replay ends, swapping the old ones into the log (ff_restore takes
 * a rejected change back from it): most changes a search tries stop at their cutoff, and those
 * leave the schedule as it was, with nothing to restore.
 *
 * The edges are read from an index the graph's owner keeps up to date (ff_index: each task's
 * outgoing and incoming edges as lists, and this file's scratch memory, kept from call to
 * call), so a delta costs the tasks it touches plus at most one pass over the task ids
 * (which start before T0; only for tasks without predecessors while deltas from one schedule
 * are undone in turn), not passes over every edge. The replay takes a member's count of
 * predecessors from the index (each task's in-degree) when it may first become ready, so a
 * change stopped at its cutoff never looks at the members it did not reach, and each edge is
 * visited once, from its source.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simulator.h"

enum { FRESH = 1, NEIGHBOUR = 2, COUNTED = 4, DONE = 8 };

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

/* The edge index and the scratch of the simulations (see simulator.h). Between calls every
 * task's flags, remaining and bound are 0: a call resets those it set (`dirty`). */
struct ff_index {
    int32_t task_capacity;
    int32_t edge_capacity;
    int32_t num_edges;     /* edges indexed */
    int32_t *src;          /* per indexed edge: its source and target when indexed */
    int32_t *dst;
    int8_t *linked;        /* 1 while the edge is in the lists below (not removed) */
    int32_t *succ_next;    /* the lists of edges by source: next and previous (-1: none) */
    int32_t *succ_prev;
    int32_t *pred_next;    /* the lists of edges by target */
    int32_t *pred_prev;
    int32_t *succ_head;    /* per task id: the first of its outgoing edges (-1: none) */
    int32_t *pred_head;    /* the first of its incoming edges */
    int32_t *indegree;     /* per task id: its incoming edges in the lists */
    uint8_t *flags;        /* FRESH, NEIGHBOUR, COUNTED, DONE */
    int32_t *remaining;    /* predecessors not yet ended, among the tasks being processed */
    double *bound;         /* new tasks: lower bound of the ready time; neighbours: ready time */
    double *ready;         /* members: the ready time so far (the schedule's is written once
                            * the task is simulated, or the replay ends, see apply_journal) */
    int32_t *list;         /* a work list of task ids */
    int32_t *outside;      /* the live tasks that are not members */
    int32_t *sources;      /* the members without predecessors */
    int32_t *dirty;        /* the tasks whose flags this call set */
    int32_t num_dirty;
    entry *heap;
    int32_t resource_capacity;
    double *free_at;       /* per device and link: when it is next free */
    double *load;          /* per device and link: exe_time of its members not yet simulated */
    /* The last selection of members from the base schedule (the one every delta since the
     * last kept change starts from), reused while the base and t0 stay: the tasks kept and
     * the devices' and links' states at t0 are then the same whatever the change (its removed
     * tasks start at or after t0, its new ones are members), and a scan of one op's
     * configurations, every one undone, changes the same tasks from the same t0 each time. */
    int pending;           /* a delta ran and was not undone (ff_index_undone) */
    int base_valid;
    double base_t0;
    int32_t base_members;  /* the base's members at base_t0; x->outside holds the others */
    int32_t base_outside;
    double base_latest;
    double *base_free_at;  /* per device and link */
    double *base_load;
    /* The base's whole load per device and link (select_members), and scratch for this
     * graph's. */
    int base_total_valid;
    double *base_total;
    double *total;
};

ff_index *ff_index_new(void) { return calloc(1, sizeof(ff_index)); }

void ff_index_free(ff_index *x) {
    if (x == NULL) return;
    free(x->src);
    free(x->dst);
    free(x->linked);
    free(x->succ_next);
    free(x->succ_prev);
    free(x->pred_next);
    free(x->pred_prev);
    free(x->succ_head);
    free(x->pred_head);
    free(x->indegree);
    free(x->flags);
    free(x->remaining);
    free(x->bound);
    free(x->ready);
    free(x->list);
    free(x->outside);
    free(x->sources);
    free(x->dirty);
    free(x->heap);
    free(x->free_at);
    free(x->load);
    free(x->base_free_at);
    free(x->base_load);
    free(x->base_total);
    free(x->total);
    free(x);
}

/* Resizes *p to n items of `size` bytes, the items from `old` on filled with `fill` bytes. */
static int resize(void *p, size_t old, size_t n, size_t size, int fill) {
    void *grown = realloc(*(void **)p, n * size);
    if (grown == NULL) return 0;
    memset((char *)grown + old * size, fill, (n - old) * size);
    *(void **)p = grown;
    return 1;
}

/* Room for task ids below n: heads -1, flags, remaining and bound 0. */
static int reserve_tasks(ff_index *x, int32_t n) {
    if (n <= x->task_capacity) return 1;
    size_t old = (size_t)x->task_capacity, want = (size_t)n + (size_t)n / 2 + 16;
    int ok = resize(&x->succ_head, old, want, sizeof(int32_t), 0xff) &&
             resize(&x->pred_head, old, want, sizeof(int32_t), 0xff) &&
             resize(&x->indegree, old, want, sizeof(int32_t), 0) &&
             resize(&x->flags, old, want, sizeof(uint8_t), 0) &&
             resize(&x->remaining, old, want, sizeof(int32_t), 0) &&
             resize(&x->bound, old, want, sizeof(double), 0) &&
             resize(&x->ready, old, want, sizeof(double), 0) &&
             resize(&x->list, old, want, sizeof(int32_t), 0) &&
             resize(&x->outside, old, want, sizeof(int32_t), 0) &&
             resize(&x->sources, old, want, sizeof(int32_t), 0) &&
             resize(&x->dirty, old, want, sizeof(int32_t), 0) &&
             resize(&x->heap, old, want, sizeof(entry), 0);
    if (ok) x->task_capacity = (int32_t)want;
    return ok;
}

static int reserve_edges(ff_index *x, int32_t n) {
    if (n <= x->edge_capacity) return 1;
    size_t old = (size_t)x->edge_capacity, want = (size_t)n + (size_t)n / 2 + 16;
    int ok = resize(&x->src, old, want, sizeof(int32_t), 0) &&
             resize(&x->dst, old, want, sizeof(int32_t), 0) &&
             resize(&x->linked, old, want, sizeof(int8_t), 0) &&
             resize(&x->succ_next, old, want, sizeof(int32_t), 0) &&
             resize(&x->succ_prev, old, want, sizeof(int32_t), 0) &&
             resize(&x->pred_next, old, want, sizeof(int32_t), 0) &&
             resize(&x->pred_prev, old, want, sizeof(int32_t), 0);
    if (ok) x->edge_capacity = (int32_t)want;
    return ok;
}

static int reserve_resources(ff_index *x, int32_t n) {
    if (n <= x->resource_capacity) return 1;
    size_t old = (size_t)x->resource_capacity;
    int ok = resize(&x->free_at, old, (size_t)n, sizeof(double), 0) &&
             resize(&x->load, old, (size_t)n, sizeof(double), 0) &&
             resize(&x->base_free_at, old, (size_t)n, sizeof(double), 0) &&
             resize(&x->base_load, old, (size_t)n, sizeof(double), 0) &&
             resize(&x->base_total, old, (size_t)n, sizeof(double), 0) &&
             resize(&x->total, old, (size_t)n, sizeof(double), 0);
    if (ok) x->resource_capacity = n;
    return ok;
}

/* Puts edge e at the front of its source's and its target's lists. */
static void link(ff_index *x, int32_t e) {
    int32_t p = x->src[e], t = x->dst[e];
    x->succ_prev[e] = -1;
    x->succ_next[e] = x->succ_head[p];
    if (x->succ_head[p] >= 0) x->succ_prev[x->succ_head[p]] = e;
    x->succ_head[p] = e;
    x->pred_prev[e] = -1;
    x->pred_next[e] = x->pred_head[t];
    if (x->pred_head[t] >= 0) x->pred_prev[x->pred_head[t]] = e;
    x->pred_head[t] = e;
    x->indegree[t]++;
    x->linked[e] = 1;
}

static void unlink(ff_index *x, int32_t e) {
    int32_t next = x->succ_next[e], prev = x->succ_prev[e];
    if (prev >= 0) x->succ_next[prev] = next; else x->succ_head[x->src[e]] = next;
    if (next >= 0) x->succ_prev[next] = prev;
    next = x->pred_next[e], prev = x->pred_prev[e];
    if (prev >= 0) x->pred_next[prev] = next; else x->pred_head[x->dst[e]] = next;
    if (next >= 0) x->pred_prev[next] = prev;
    x->indegree[x->dst[e]]--;
    x->linked[e] = 0;
}

int32_t ff_index_edges(ff_index *x, const int32_t *edge_src, const int32_t *edge_dst,
                       int32_t num_edges, int32_t num_tasks) {
    if (!reserve_tasks(x, num_tasks) || !reserve_edges(x, num_edges)) return FF_NO_MEMORY;
    for (int32_t e = x->num_edges; e < num_edges; e++) {
        x->src[e] = edge_src[e];
        x->dst[e] = edge_dst[e];
        x->linked[e] = 0;
        if (edge_src[e] >= 0) link(x, e); /* one removed before it was indexed stays out */
    }
    if (num_edges > x->num_edges) x->num_edges = num_edges;
    return 0;
}

void ff_index_truncate(ff_index *x, int32_t num_edges) {
    if (num_edges < 0) num_edges = 0;
    for (int32_t e = x->num_edges - 1; e >= num_edges; e--)
        if (x->linked[e]) unlink(x, e);
    if (num_edges < x->num_edges) x->num_edges = num_edges;
}

int32_t ff_index_remove_blocks(ff_index *x, int32_t *edge_src, const int32_t *edge_dst,
                               const int32_t *block_ranges, const int32_t *blocks,
                               int32_t num_blocks, int32_t *ranges, int32_t *touched) {
    int32_t n = 0;
    for (int32_t i = 0; i < num_blocks; i++) {
        const int32_t lo = block_ranges[2 * blocks[i]], hi = block_ranges[2 * blocks[i] + 1];
        ranges[2 * i] = lo;
        ranges[2 * i + 1] = hi;
        for (int32_t e = lo; e < hi; e++) {
            touched[n++] = edge_dst[e];
            edge_src[e] = -1;
            if (x->linked[e]) unlink(x, e);
        }
    }
    return n;
}

int32_t ff_compact_ranges(const int32_t *src, const int32_t *dst, int32_t *ranges,
                          int32_t num_ranges, int32_t *new_src, int32_t *new_dst) {
    int32_t n = 0;
    for (int32_t i = 0; i < num_ranges; i++) {
        const int32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        ranges[2 * i] = n;
        memcpy(new_src + n, src + lo, (size_t)(hi - lo) * sizeof(int32_t));
        memcpy(new_dst + n, dst + lo, (size_t)(hi - lo) * sizeof(int32_t));
        n += hi - lo;
        ranges[2 * i + 1] = n;
    }
    return n;
}

void ff_index_restore_blocks(ff_index *x, int32_t *edge_src, const int32_t *ranges,
                             const int32_t *blocks, int32_t num_blocks, int32_t *block_ranges) {
    for (int32_t i = 0; i < num_blocks; i++) {
        block_ranges[2 * blocks[i]] = ranges[2 * i];
        block_ranges[2 * blocks[i] + 1] = ranges[2 * i + 1];
        for (int32_t e = ranges[2 * i]; e < ranges[2 * i + 1]; e++) {
            edge_src[e] = x->src[e];
            if (!x->linked[e] && x->src[e] >= 0) link(x, e);
        }
    }
}

/* Zeroes the times of `ids` (removed ids and new tasks hold no time). */
static void clear_times(ff_times *s, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) s->ready[ids[i]] = s->start[ids[i]] = s->end[ids[i]] = 0.0;
}

/* Logs task t's times in entry i and zeroes them (a removed id or a new task holds no time). */
static void log_and_clear(ff_times *s, int64_t i, int32_t t) {
    s->log_task[i] = t;
    s->log_ready[i] = s->ready[t];
    s->log_start[i] = s->start[t];
    s->log_end[i] = s->end[t];
    s->ready[t] = s->start[t] = s->end[t] = 0.0;
}

/* A delta's replay that ended: its removed and new tasks' times logged and cleared (entries
 * 0 .. removed + added, kept free for them), then each journal entry's new times swapped with
 * the schedule's, so that the log holds what ff_restore writes back, the last entry first. */
static void apply_journal(const ff_change *c, ff_times *s) {
    int64_t i = 0;
    for (int32_t k = 0; k < c->num_removed; k++) log_and_clear(s, i++, c->removed[k]);
    for (int32_t k = 0; k < c->num_added; k++) log_and_clear(s, i++, c->added[k]);
    for (; i < s->log_size; i++) {
        const int32_t t = s->log_task[i];
        double v = s->ready[t];
        s->ready[t] = s->log_ready[i];
        s->log_ready[i] = v;
        v = s->start[t];
        s->start[t] = s->log_start[i];
        s->log_start[i] = v;
        v = s->end[t];
        s->end[t] = s->log_end[i];
        s->log_end[i] = v;
    }
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

/* Sets flags on task t, noting it for the reset at the end of the call. */
static void mark(ff_index *x, int32_t t, uint8_t flag) {
    if (x->flags[t] == 0) x->dirty[x->num_dirty++] = t;
    x->flags[t] |= flag;
}

/* A lower bound of each new task's ready time: old predecessors' ends, new ones' bounds plus
 * their exe_time (new tasks in topological order). Returns FF_CYCLE if they never all settle.
 * Only the rebuilt blocks' edges can lead into a new task: those from first_new_edge on. */
static int bound_fresh(const ff_graph *g, const ff_change *c, const double *end, ff_index *x) {
    for (int32_t e = c->first_new_edge; e < g->num_edges; e++) {
        int32_t p = g->edge_src[e], t = g->edge_dst[e];
        if (p < 0 || !(x->flags[t] & FRESH)) continue;
        if (x->flags[p] & FRESH)
            x->remaining[t]++;
        else if (end[p] > x->bound[t])
            x->bound[t] = end[p];
    }
    int32_t head = 0, tail = 0;
    for (int32_t i = 0; i < c->num_added; i++)
        if (x->remaining[c->added[i]] == 0) x->list[tail++] = c->added[i];
    while (head < tail) {
        int32_t t = x->list[head++];
        double bound = x->bound[t] + g->exe[t];
        for (int32_t e = x->succ_head[t]; e >= 0; e = x->succ_next[e]) {
            int32_t u = x->dst[e];
            if (!(x->flags[u] & FRESH)) continue;
            if (bound > x->bound[u]) x->bound[u] = bound;
            if (--x->remaining[u] == 0) x->list[tail++] = u;
        }
    }
    for (int32_t i = 0; i < c->num_added; i++) x->remaining[c->added[i]] = 0;
    return tail == c->num_added ? 0 : FF_CYCLE;
}

/* T0 lowered for an old task that the change removes or moves (a neighbour): to its start
 * and, if it holds several devices or links, to its ready time.
 * Why: the replay is exact when no member starts before t0. Tasks then leave a device or link
 * in the order of their ready times, so a member whose ready time stayed before t0 (its
 * predecessors kept their times) still comes after the kept tasks on its devices, and one
 * whose predecessors changed is ready at t0 or later. A member M that was ready before t0 but
 * started at or after it waited for some resource r: for the task before it on r, which ended
 * at or after t0. Kept, or simulated again before M (same ready time), that task still holds r
 * until then. Removed or moved, it no longer does; if it held r alone it had started when r
 * was free after the task before it, to which the same applies, but if it held several it may
 * have waited for another while r stood idle, and M, ready no earlier than it, could now start
 * before t0. Its ready time as t0 makes M's ready time at least t0.
 * tests/simulator/test_native.py's test_a_random_change_equals_a_full_simulation checks it. */
static double moved_from(const ff_graph *g, const ff_times *s, const ff_index *x, int32_t t,
                         double t0) {
    if (s->start[t] < t0) t0 = s->start[t];
    const int32_t set = g->resource_set[t];
    const int several = g->set_offsets[set + 1] - g->set_offsets[set] > 1;
    /* a removed id that a new task takes holds the new task's resources: the old are unknown */
    if ((several || (x->flags[t] & FRESH)) && s->ready[t] < t0) t0 = s->ready[t];
    return t0;
}

/* Marks the old tasks whose predecessors changed and lowers t0 as for a moved task
 * (moved_from) and to their new ready time (computed with the new tasks' bounds). Returns the
 * lowered t0. */
static double mark_neighbours(const ff_graph *g, const ff_change *c, const ff_times *s,
                              ff_index *x, double t0) {
    int32_t count = 0;
    for (int32_t i = 0; i < c->num_touched; i++) {
        int32_t u = c->touched[i];
        if (g->live[u] && !(x->flags[u] & (FRESH | NEIGHBOUR))) {
            mark(x, u, NEIGHBOUR);
            x->list[count++] = u;
        }
    }
    for (int32_t i = 0; i < c->num_added; i++) {
        int32_t t = c->added[i];
        for (int32_t e = x->succ_head[t]; e >= 0; e = x->succ_next[e]) {
            int32_t u = x->dst[e];
            if (x->flags[u] & (FRESH | NEIGHBOUR)) continue;
            mark(x, u, NEIGHBOUR);
            x->list[count++] = u;
        }
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t u = x->list[i];
        for (int32_t e = x->pred_head[u]; e >= 0; e = x->pred_next[e]) {
            int32_t p = x->src[e];
            double ready = (x->flags[p] & FRESH) ? x->bound[p] + g->exe[p] : s->end[p];
            if (ready > x->bound[u]) x->bound[u] = ready;
        }
        t0 = moved_from(g, s, x, u, t0);
        if (x->bound[u] < t0) t0 = x->bound[u];
    }
    return t0;
}

/* The members of a replay: the live tasks starting at or after t0 in the old schedule, and
 * those the change forces (new tasks and neighbours). Membership is read off the times and
 * flags (`member`), not marked: most changes a search tries stop at their cutoff after a few
 * tasks, and marking every member costs a pass over them to set and one to reset. */
typedef struct {
    int32_t members;  /* how many */
    int32_t outside;  /* x->outside[0 .. outside): live tasks that keep their times */
    int32_t sources;  /* x->sources[0 .. sources): members without predecessors */
} selection;

/* Whether task t (live: an end of an indexed edge) is a member. Its start is the old one
 * until it is simulated (DONE); a member's new start may be before t0 (the change freed its
 * device earlier), so it is written only once the task is DONE or the replay ends. */
static int member(const ff_times *s, const ff_index *x, int32_t t, double t0) {
    return (x->flags[t] & (FRESH | NEIGHBOUR | DONE)) || s->start[t] >= t0;
}

/* Adds sign x exe_time of each of `ids` to its devices' and links' entries of `load`. */
static void add_load(const ff_graph *g, double *load, const int32_t *ids, int32_t n,
                     double sign) {
    for (int32_t i = 0; i < n; i++) {
        const int32_t t = ids[i];
        for (int32_t k = g->set_offsets[g->resource_set[t]];
             k < g->set_offsets[g->resource_set[t] + 1]; k++)
            load[g->set_members[k]] += sign * g->exe[t];
    }
}

/* Whether the change both removes and adds one id: then its tasks' times and costs are not
 * the base's, and the last selection is neither reused nor kept. */
static int reuses_an_id(const ff_change *c, const ff_index *x) {
    for (int32_t i = 0; i < c->num_removed; i++)
        if (x->flags[c->removed[i]] & FRESH) return 1;
    return 0;
}

/* Counts the members and lists the other live tasks, which keep their times; every device and
 * link is free from the latest end of those on it. With `cut`, also gives each device's and
 * link's members' summed exe_times (x->load) as its whole load less the other tasks': the whole
 * (x->total) is summed here once per base schedule (the one every delta since the last kept
 * change starts from: x->base_total) and otherwise taken from the base's, less the change's
 * removed tasks plus its new ones; the members, nearly every task after most changes, are then
 * only counted. Only a bound reads the loads, and it cuts at the search's cutoff with a margin
 * far above their rounding. *latest is the latest end of the others. */
static selection select_members(const ff_graph *g, const ff_change *c, ff_times *s, ff_index *x,
                                double t0, int cut, double *latest) {
    selection n = {0, 0, 0};
    const size_t bytes = (size_t)g->num_resources * sizeof(double);
    const int sum = cut && (!x->base_total_valid || reuses_an_id(c, x));
    *latest = 0.0;
    if (sum) memset(x->total, 0, bytes);
    for (int32_t t = 0; t < g->num_tasks; t++) {
        if (!g->live[t]) continue;
        if (s->start[t] >= t0 || (x->flags[t] & (FRESH | NEIGHBOUR))) {
            n.members++;
            if (x->pred_head[t] < 0) x->sources[n.sources++] = t;
            if (sum) add_load(g, x->total, &t, 1, 1.0);
            continue;
        }
        const int32_t *first = g->set_members + g->set_offsets[g->resource_set[t]];
        const int32_t *last = g->set_members + g->set_offsets[g->resource_set[t] + 1];
        x->outside[n.outside++] = t;
        const double end = s->end[t];
        if (end > *latest) *latest = end;
        for (const int32_t *r = first; r < last; r++) {
            if (end > x->free_at[*r]) x->free_at[*r] = end;
            if (cut) x->load[*r] += g->exe[t]; /* the others' load, for now */
        }
        if (sum) add_load(g, x->total, &t, 1, 1.0);
    }
    if (!cut) return n;
    if (sum) { /* the base's whole load: this graph's, less the change's new tasks, plus its
                * removed ones */
        memcpy(x->base_total, x->total, bytes);
        add_load(g, x->base_total, c->added, c->num_added, -1.0);
        add_load(g, x->base_total, c->removed, c->num_removed, 1.0);
        x->base_total_valid = !reuses_an_id(c, x);
    } else {
        memcpy(x->total, x->base_total, bytes);
        add_load(g, x->total, c->removed, c->num_removed, -1.0);
        add_load(g, x->total, c->added, c->num_added, 1.0);
    }
    for (int32_t r = 0; r < g->num_resources; r++) x->load[r] = x->total[r] - x->load[r];
    return n;
}

/* A member's first touch: every predecessor still to end (x->remaining) and its ready time so
 * far 0. A member is first touched by its first predecessor to end, before that one counts as
 * ended: a kept task (the loop over them comes first) or a simulated member (whose successors
 * are all touched when it ends, so no other has ended yet). Each edge is then visited once,
 * from its source, to count it down. */
static void first_touch(ff_index *x, int32_t t) {
    x->remaining[t] = x->indegree[t];
    x->ready[t] = 0.0;
    mark(x, t, COUNTED);
}

/* The event loop of Algorithm 1 over the members; raises *latest to their latest end.
 * A member is first touched (first_touch) when it may first become ready: at the start for
 * members without predecessors and successors of kept tasks (the kept ones counted down and
 * their ends taken first), otherwise when its first predecessor is simulated. So a replay
 * stopped at its cutoff never looks at the members it did not reach.
 * With a finite cutoff, stops (FF_ABOVE_CUTOFF) once the iteration surely ends after it: a
 * device or link runs its tasks one at a time and every member still to come on it starts
 * after it is free, so the iteration ends no earlier than that plus their exe_times (x->load).
 * A good strategy's neighbours that load some device or link with more work show it before
 * the loop starts or at that resource's first task after the change, long before the end of
 * the replay. */
static int64_t run(const ff_graph *g, ff_times *s, ff_index *x, selection n, double t0,
                   double *latest, double cutoff) {
    const int cut = cutoff < HUGE_VAL;
    for (int32_t r = 0; cut && r < g->num_resources; r++)
        if (x->free_at[r] + x->load[r] > cutoff) return FF_ABOVE_CUTOFF;
    int32_t size = 0;
    for (int32_t i = 0; i < n.sources; i++) {
        int32_t t = x->sources[i];
        first_touch(x, t);
        heap_push(x->heap, &size, (entry){time_key(x->ready[t]), g->order[t], t});
    }
    for (int32_t i = 0; i < n.outside; i++) {
        const int32_t p = x->outside[i];
        const double end = s->end[p];
        for (int32_t e = x->succ_head[p]; e >= 0; e = x->succ_next[e]) {
            int32_t u = x->dst[e];
            if (!(x->flags[u] & COUNTED)) {
                if (!member(s, x, u, t0)) continue;
                first_touch(x, u);
            }
            if (end > x->ready[u]) x->ready[u] = end;
            if (--x->remaining[u] == 0)
                heap_push(x->heap, &size, (entry){time_key(x->ready[u]), g->order[u], u});
        }
    }
    /* The loop's arrays as locals: its flag stores (bytes) may alias anything, so the compiler
     * would otherwise read every one of these pointers again after each. */
    const double *exe = g->exe;
    const uint64_t *order = g->order;
    const int32_t *resource_set = g->resource_set, *offsets = g->set_offsets;
    const int32_t *set_members = g->set_members;
    const int32_t *succ_head = x->succ_head, *succ_next = x->succ_next, *dst = x->dst;
    double *ready = x->ready, *free_at = x->free_at, *load = x->load;
    uint8_t *flags = x->flags;
    int32_t *remaining = x->remaining;
    entry *heap = x->heap;
    int32_t *log_task = s->log_task;
    double *log_ready = s->log_ready, *log_start = s->log_start, *log_end = s->log_end;
    int64_t logged = s->log_size;
    double last_end = *latest;
    int64_t result = 0;
    int32_t done = 0;
    while (size > 0) {
        entry item = heap_pop(heap, &size);
        int32_t t = item.task;
        const int32_t *first = set_members + offsets[resource_set[t]];
        const int32_t *last = set_members + offsets[resource_set[t] + 1];
        double start = ready[t]; /* final: every predecessor has ended */
        for (const int32_t *r = first; r < last; r++)
            if (free_at[*r] > start) start = free_at[*r];
        const double end = start + exe[t];
        if (cut) {
            for (const int32_t *r = first; r < last; r++) {
                load[*r] -= exe[t];
                if (end + load[*r] > cutoff) result = FF_ABOVE_CUTOFF;
            }
            if (result < 0) break;
        }
        for (const int32_t *r = first; r < last; r++) free_at[*r] = end;
        if (end > last_end) last_end = end;
        done++;
        for (int32_t e = succ_head[t]; e >= 0; e = succ_next[e]) {
            const int32_t u = dst[e];
            if (!(flags[u] & COUNTED)) { /* touched: a member, counted */
                if (!member(s, x, u, t0)) {
                    result = FF_NOT_CLOSED;
                    break;
                }
                first_touch(x, u);
            }
            if (end > ready[u]) ready[u] = end;
            if (--remaining[u] == 0)
                heap_push(heap, &size, (entry){time_key(ready[u]), order[u], u});
        }
        if (result < 0) break;
        if (log_task != NULL) { /* journaled: written to the schedule if the replay ends */
            log_task[logged] = t;
            log_ready[logged] = ready[t];
            log_start[logged] = start;
            log_end[logged] = end;
            logged++;
        } else {
            s->ready[t] = ready[t];
            s->start[t] = start;
            s->end[t] = end;
        }
        flags[t] |= DONE;
    }
    *latest = last_end;
    s->log_size = logged;
    if (result < 0) return result;
    return done == n.members ? n.members : FF_CYCLE;
}

/* Keeps the selection select_members just made as the base's (its members without the
 * change's new tasks, with its removed ones). */
static void keep_selection(const ff_graph *g, const ff_change *c, ff_index *x, double t0,
                           selection n, double latest) {
    size_t bytes = (size_t)g->num_resources * sizeof(double);
    x->base_valid = !reuses_an_id(c, x);
    x->base_t0 = t0;
    x->base_members = n.members + c->num_removed - c->num_added;
    x->base_outside = n.outside;
    x->base_latest = latest;
    memcpy(x->base_free_at, x->free_at, bytes);
    memcpy(x->base_load, x->load, bytes);
    add_load(g, x->base_load, c->removed, c->num_removed, 1.0);
    add_load(g, x->base_load, c->added, c->num_added, -1.0);
}

/* select_members from the kept selection of the base at the same t0: the kept tasks, the
 * devices' and links' states and the latest kept end as they were, the members' load less
 * the removed tasks' plus the new ones'; members without predecessors found again (few
 * tasks have none; a change's new tasks and neighbours may be among them). */
static selection reuse_selection(const ff_graph *g, const ff_change *c, ff_times *s,
                                 ff_index *x, double t0, double *latest) {
    size_t bytes = (size_t)g->num_resources * sizeof(double);
    selection n = {x->base_members - c->num_removed + c->num_added, x->base_outside, 0};
    *latest = x->base_latest;
    memcpy(x->free_at, x->base_free_at, bytes);
    memcpy(x->load, x->base_load, bytes);
    add_load(g, x->load, c->removed, c->num_removed, -1.0);
    add_load(g, x->load, c->added, c->num_added, 1.0);
    for (int32_t t = 0; t < g->num_tasks; t++)
        if (x->pred_head[t] < 0 && g->live[t] && member(s, x, t, t0)) x->sources[n.sources++] = t;
    return n;
}

/* The delta (or full simulation) proper, on an index of the graph's edges. */
static int64_t simulate(const ff_graph *g, const ff_change *c, ff_times *s, ff_index *x) {
    double t0 = c->t0;
    x->num_dirty = 0;
    for (int32_t i = 0; i < c->num_added; i++) mark(x, c->added[i], FRESH);
    for (int32_t i = 0; i < c->num_removed; i++) t0 = moved_from(g, s, x, c->removed[i], t0);
    if (x->pending || c->t0 == -HUGE_VAL) /* a kept change: a new base */
        x->base_valid = x->base_total_valid = 0;
    x->pending = 1;
    const int journaled = s->log_task != NULL;
    /* Journaled, the replay writes its tasks' new times after the entries the removed and new
     * tasks take (apply_journal); otherwise to the schedule, those tasks' times cleared first. */
    s->log_size = journaled ? (int64_t)c->num_removed + c->num_added : 0;
    if (!journaled) { /* free ids and new tasks hold no time */
        clear_times(s, c->removed, c->num_removed);
        clear_times(s, c->added, c->num_added);
    }
    memset(x->free_at, 0, (size_t)g->num_resources * sizeof(double));
    memset(x->load, 0, (size_t)g->num_resources * sizeof(double));
    int64_t result = 0;
    selection members = {0, 0, 0};
    if (c->num_added > 0) {
        result = bound_fresh(g, c, s->end, x);
        for (int32_t i = 0; i < c->num_added; i++)
            if (x->bound[c->added[i]] < t0) t0 = x->bound[c->added[i]];
    }
    if (result == 0) {
        t0 = mark_neighbours(g, c, s, x, t0);
        double latest; /* free ids hold no time: the latest end of live tasks is the makespan */
        const int delta = c->t0 != -HUGE_VAL;
        if (delta && x->base_valid && x->base_t0 == t0 && !reuses_an_id(c, x)) {
            members = reuse_selection(g, c, s, x, t0, &latest);
        } else {
            members = select_members(g, c, s, x, t0, delta || c->cutoff < HUGE_VAL, &latest);
            if (delta) keep_selection(g, c, x, t0, members, latest);
        }
        result = run(g, s, x, members, t0, &latest, c->cutoff);
        s->iteration_s = latest;
    }
    if (journaled) {
        if (result >= 0)
            apply_journal(c, s);
        else
            s->log_size = 0; /* stopped: the schedule was never written */
    }
    for (int32_t i = 0; i < x->num_dirty; i++) {
        int32_t t = x->dirty[i];
        x->flags[t] = 0;
        x->remaining[t] = 0;
        x->bound[t] = 0.0;
    }
    x->num_dirty = 0;
    return result;
}

int64_t ff_simulate(const ff_graph *g, const ff_change *c, ff_times *s, ff_index *index) {
    ff_index *x = index;
    if (x == NULL) {
        x = ff_index_new();
        if (x == NULL ||
            ff_index_edges(x, g->edge_src, g->edge_dst, g->num_edges, g->num_tasks) != 0) {
            ff_index_free(x);
            return FF_NO_MEMORY;
        }
    } else if (x->num_edges != g->num_edges) {
        return FF_STALE_INDEX;
    }
    int64_t result = FF_NO_MEMORY;
    if (reserve_tasks(x, g->num_tasks) && reserve_resources(x, g->num_resources))
        result = simulate(g, c, s, x);
    if (index == NULL) ff_index_free(x);
    return result;
}

void ff_index_undone(ff_index *x) { x->pending = 0; }

void ff_set_flags(int8_t *flags, const int32_t *ids, int64_t n, int8_t value) {
    for (int64_t i = 0; i < n; i++) flags[ids[i]] = value;
}

void ff_resource_load(const ff_graph *g, double *load) {
    memset(load, 0, (size_t)g->num_resources * sizeof(double));
    for (int32_t t = 0; t < g->num_tasks; t++) {
        if (!g->live[t]) continue;
        const int32_t set = g->resource_set[t];
        for (int32_t k = g->set_offsets[set]; k < g->set_offsets[set + 1]; k++)
            load[g->set_members[k]] += g->exe[t];
    }
}

double ff_load_bound(const ff_graph *g, const double *load, const int32_t *removed,
                     int32_t num_removed, const int32_t *new_resource, const double *new_exe,
                     int32_t num_new, double *scratch) {
    memcpy(scratch, load, (size_t)g->num_resources * sizeof(double));
    add_load(g, scratch, removed, num_removed, -1.0);
    for (int32_t i = 0; i < num_new; i++) scratch[new_resource[i]] += new_exe[i];
    double bound = 0.0;
    for (int32_t r = 0; r < g->num_resources; r++)
        if (scratch[r] > bound) bound = scratch[r];
    return bound;
}
