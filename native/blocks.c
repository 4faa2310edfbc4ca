/* The blocks of a task graph (paper §5.1): the ops' compute tasks (op blocks), the transfers
 * between ops (edge blocks) and the parameter synchronization (sync blocks). Every task graph a
 * search builds, in full or by a delta, creates them here. flexflow/simulator/reference.py
 * (`reference_op_block`, `reference_edge_block`, `reference_sync_block`) is the specification;
 * tests/simulator/test_native.py compares the two.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simulator.h"

/* Task key fields (flexflow/simulator/keys.py): the kind, the field b (a group), the field c (a
 * consumer task, a ring step or a device) and their limit; the producer task is the low field. */
enum { KIND_SHIFT = 60, B_SHIFT = 28, C_SHIFT = 14, FIELD_LIMIT = 1 << 14 };
enum { GATHER_KEY = 4, RING_KEY = 5, REDUCED_KEY = 6, UPDATE_KEY = 7 };
static const uint64_t DEVICE_TASK = (uint64_t)1 << 63;

static int32_t take_id(ff_block_out *out) {
    if (out->free_used < out->num_free) return out->free_ids[out->num_free - 1 - out->free_used++];
    return out->next_id++;
}

static int32_t new_task(ff_block_out *out, double exe, uint64_t order, int32_t resource_set,
                        int64_t size, int32_t src, int32_t dst) {
    int32_t t = take_id(out);
    out->exe[t] = exe;
    out->order[t] = order;
    out->live[t] = 1;
    out->resource_set[t] = resource_set;
    out->size_bytes[t] = size;
    out->src[t] = src;
    out->dst[t] = dst;
    return t;
}

static int32_t transfer(const ff_routes *routes, ff_block_out *out, int32_t src, int32_t dst,
                        int64_t size, uint64_t key) {
    int64_t route = (int64_t)src * routes->num_devices + dst;
    double exe = routes->latency[route] + (double)size / routes->bandwidth[route];
    return new_task(out, exe, key | routes->flag[route], routes->set[route], size, src, dst);
}

/* Running counts of one build: the tasks and edges written so far, the next job's index. */
typedef struct {
    int32_t tasks, edges, job;
} progress;

static void begin_job(ff_block_out *out, progress *at) {
    out->task_offsets[at->job] = at->tasks;
    out->edge_offsets[at->job] = at->edges;
    at->job++;
}

static void build_ops(const ff_op_jobs *jobs, ff_op_table *table, ff_block_out *out,
                      progress *at) {
    int32_t *from = out->edge_src, *to = out->edge_dst;
    for (int32_t j = 0; j < jobs->num_jobs; j++) {
        begin_job(out, at);
        table->op_at[jobs->op[j]] = table->size;
        for (int32_t i = jobs->task_offsets[j]; i < jobs->task_offsets[j + 1]; i += 2) {
            int32_t f = new_task(out, jobs->exe[i], jobs->order[i], jobs->device[i], 0, -1, -1);
            int32_t b = new_task(out, jobs->exe[i + 1], jobs->order[i + 1], jobs->device[i + 1],
                                 0, -1, -1);
            out->new_ids[at->tasks++] = f;
            out->new_ids[at->tasks++] = b;
            table->ids[table->size] = f, table->device[table->size++] = jobs->device[i];
            table->ids[table->size] = b, table->device[table->size++] = jobs->device[i + 1];
            from[at->edges] = f, to[at->edges++] = b;
        }
    }
}

static void build_edges(const ff_edge_jobs *jobs, const ff_op_table *table,
                        const ff_routes *routes, ff_block_out *out, progress *at) {
    int32_t *from = out->edge_src, *to = out->edge_dst;
    const ff_edge_table *info = jobs->table;
    const ff_overlap_pool *pool = jobs->pool;
    for (int32_t j = 0; j < jobs->num_jobs; j++) {
        begin_job(out, at);
        int32_t edges = at->edges;
        const int32_t set = jobs->overlaps[j], e = jobs->edge[j];
        if (set < 0) continue; /* a model input: no producer */
        const int32_t p = table->op_at[info->producer[e]], c = table->op_at[info->consumer[e]];
        const int32_t first = pool->at[set], last = first + pool->count[set];
        for (int32_t i = first; i < last; i++) {
            const int32_t kc = c + 2 * pool->consumer[i];
            const int32_t kp = p + 2 * pool->producer[i];
            const int32_t p_dev = table->device[kp], c_dev = table->device[kc];
            const int32_t p_fwd = table->ids[kp], p_bwd = table->ids[kp + 1];
            const int32_t c_fwd = table->ids[kc], c_bwd = table->ids[kc + 1];
            if (p_dev == c_dev) {
                from[edges] = p_fwd, to[edges++] = c_fwd;
                from[edges] = c_bwd, to[edges++] = p_bwd;
                continue;
            }
            const int64_t size = pool->volume[i] * info->itemsize[e];
            const uint64_t fields =
                (uint64_t)pool->consumer[i] << C_SHIFT | (uint64_t)pool->producer[i];
            int32_t x = transfer(routes, out, p_dev, c_dev, size, info->transfer_key[e] | fields);
            out->new_ids[at->tasks++] = x;
            from[edges] = p_fwd, to[edges++] = x;
            from[edges] = x, to[edges++] = c_fwd;
            if (info->grads[e]) {
                int32_t y = transfer(routes, out, c_dev, p_dev, size, info->grad_key[e] | fields);
                out->new_ids[at->tasks++] = y;
                from[edges] = c_bwd, to[edges++] = y;
                from[edges] = y, to[edges++] = p_bwd;
            } else {
                from[edges] = c_bwd, to[edges++] = p_bwd;
            }
        }
        at->edges = edges;
    }
}

/* A part of a sync job (see ff_sync_jobs), located in the jobs' arrays. */
typedef struct {
    const int64_t *bounds;
    int32_t dims2;          /* 2 x its dimensions */
    int64_t elements;
    const int32_t *device;
    const double *update_s;
    int32_t num_devices;
    const int32_t *backward; /* its user's backward task ids, at every other entry */
    const int32_t *task;     /* indices into its user's tasks */
    int32_t num_tasks;
} sync_part;

/* Lexicographic order of two parts' bounds; shorter first where one is a prefix. */
static int compare_bounds(const sync_part *a, const sync_part *b) {
    const int32_t n = a->dims2 < b->dims2 ? a->dims2 : b->dims2;
    for (int32_t i = 0; i < n; i++) {
        if (a->bounds[i] != b->bounds[i]) return a->bounds[i] < b->bounds[i] ? -1 : 1;
    }
    return (a->dims2 > b->dims2) - (a->dims2 < b->dims2);
}

/* Stable merge sort of parts[order[0..n)] by bounds, `scratch` as long as `order`. */
static void sort_parts(const sync_part *parts, int32_t *order, int32_t *scratch, int32_t n) {
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = lo + width < n ? lo + width : n;
            int32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int32_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi) {
                scratch[k++] = compare_bounds(&parts[order[b]], &parts[order[a]]) < 0
                                   ? order[b++] : order[a++];
            }
            while (a < mid) scratch[k++] = order[a++];
            while (b < hi) scratch[k++] = order[b++];
        }
        memcpy(order, scratch, sizeof(int32_t) * (size_t)n);
    }
}

/* One group: the parts order[lo..hi) read one region. Its holders are the union of their
 * devices, ascending (`seen` marks devices, one int per device, all -1 on entry and exit). */
static void build_group(const sync_part *parts, const int32_t *order, int32_t lo, int32_t hi,
                        uint64_t group, int32_t empty_set, const ff_routes *routes,
                        ff_block_out *out, int32_t *seen, int32_t *holder, double *update_s,
                        int32_t *tasks, int32_t *edges) {
    int32_t *from = out->edge_src, *to = out->edge_dst;
    int32_t r = 0;
    for (int32_t p = lo; p < hi; p++) {
        const sync_part *part = &parts[order[p]];
        for (int32_t i = 0; i < part->num_devices; i++) {
            int32_t d = part->device[i];
            if (seen[d] >= 0) continue;
            seen[d] = 1;
            int32_t at = r++; /* insertion into the ascending holders */
            while (at > 0 && holder[at - 1] > d) {
                holder[at] = holder[at - 1];
                update_s[at] = update_s[at - 1];
                at--;
            }
            holder[at] = d;
            update_s[at] = part->update_s[i];
        }
    }
    for (int32_t i = 0; i < r; i++) seen[holder[i]] = -1;
    const int64_t elements = parts[order[lo]].elements;
    int32_t done = -1;
    if (r > 1) {
        const int64_t ring_bytes = (int64_t)((double)(2 * (r - 1)) / r * (double)elements * 4.0);
        const uint64_t gather_key = (uint64_t)GATHER_KEY << KIND_SHIFT | group;
        const uint64_t done_key = (uint64_t)REDUCED_KEY << KIND_SHIFT | group;
        int32_t gather = new_task(out, 0.0, gather_key, empty_set, 0, -1, -1);
        done = new_task(out, 0.0, done_key, empty_set, 0, -1, -1);
        out->new_ids[(*tasks)++] = gather;
        out->new_ids[(*tasks)++] = done;
        for (int32_t p = lo; p < hi; p++) {
            const sync_part *part = &parts[order[p]];
            for (int32_t i = 0; i < part->num_tasks; i++) {
                from[*edges] = part->backward[2 * part->task[i]], to[(*edges)++] = gather;
            }
        }
        const uint64_t ring = (uint64_t)RING_KEY << KIND_SHIFT | group;
        for (int32_t i = 0; i < r; i++) {
            const uint64_t key = ring | (uint64_t)i << C_SHIFT;
            int32_t x = transfer(routes, out, holder[i], holder[(i + 1) % r], ring_bytes, key);
            out->new_ids[(*tasks)++] = x;
            from[*edges] = gather, to[(*edges)++] = x;
            from[*edges] = x, to[(*edges)++] = done;
        }
    }
    const uint64_t update = (uint64_t)UPDATE_KEY << KIND_SHIFT | group | DEVICE_TASK;
    for (int32_t i = 0; i < r; i++) {
        const uint64_t key = update | (uint64_t)holder[i] << C_SHIFT;
        /* resource set `device` is the device alone */
        int32_t u = new_task(out, update_s[i], key, holder[i], 0, -1, -1);
        out->new_ids[(*tasks)++] = u;
        if (done >= 0) {
            from[*edges] = done, to[(*edges)++] = u;
            continue;
        }
        for (int32_t p = lo; p < hi; p++) {
            const sync_part *part = &parts[order[p]];
            for (int32_t k = 0; k < part->num_tasks; k++) {
                from[*edges] = part->backward[2 * part->task[k]], to[(*edges)++] = u;
            }
        }
    }
}

static int32_t build_syncs(const ff_sync_jobs *jobs, const ff_op_table *table,
                           const ff_routes *routes, ff_block_out *out, progress *at) {
    if (jobs->num_jobs == 0) return 0;
    const ff_sync_table *templates = jobs->templates;
    const int32_t num_devices = routes->num_devices;
    int32_t most = 1; /* the most parts of one job */
    for (int32_t j = 0; j < jobs->num_jobs; j++) {
        int32_t count = 0;
        const int32_t p = jobs->param[j];
        for (int32_t u = jobs->users_at[p]; u < jobs->users_at[p + 1]; u++) {
            count += templates->template_parts[jobs->user_template[u]];
        }
        if (count > most) most = count;
    }
    sync_part *parts = malloc(sizeof(sync_part) * (size_t)most);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)(2 * most + 2 * num_devices + 1));
    double *update_s = malloc(sizeof(double) * (size_t)(num_devices + 1));
    if (parts == NULL || order == NULL || update_s == NULL) {
        free(parts), free(order), free(update_s);
        return FF_NO_MEMORY;
    }
    int32_t *scratch = order + most, *seen = order + 2 * most, *holder = seen + num_devices;
    for (int32_t d = 0; d < num_devices; d++) seen[d] = -1;
    int32_t result = 0;
    for (int32_t j = 0; j < jobs->num_jobs; j++) {
        begin_job(out, at);
        int32_t count = 0; /* this job's parts, user by user */
        const int32_t param = jobs->param[j];
        for (int32_t u = jobs->users_at[param]; u < jobs->users_at[param + 1]; u++) {
            const int32_t t = jobs->user_template[u];
            const int32_t first = templates->template_first[t];
            const int32_t *backward = table->ids + table->op_at[jobs->user_op[u]] + 1;
            for (int32_t q = first; q < first + templates->template_parts[t]; q++, count++) {
                sync_part *p = &parts[count];
                p->dims2 = 2 * templates->part_dims[q];
                p->bounds = templates->bounds + templates->bounds_at[q];
                p->elements = templates->elements[q];
                p->num_devices = templates->part_devices[q];
                p->device = templates->device + templates->device_at[q];
                p->update_s = templates->update_s + templates->device_at[q];
                p->num_tasks = templates->part_tasks[q];
                p->task = templates->task + templates->task_at[q];
                p->backward = backward;
                order[count] = count;
            }
        }
        sort_parts(parts, order, scratch, count);
        int32_t g = 0;
        for (int32_t lo = 0; lo < count; g++) {
            int32_t hi = lo + 1;
            while (hi < count && compare_bounds(&parts[order[lo]], &parts[order[hi]]) == 0) hi++;
            if (g >= FIELD_LIMIT) {
                result = FF_KEY_OVERFLOW;
                goto done;
            }
            const uint64_t group = jobs->key[j] | (uint64_t)g << B_SHIFT;
            build_group(parts, order, lo, hi, group, jobs->empty_set, routes, out, seen, holder,
                        update_s, &at->tasks, &at->edges);
            lo = hi;
        }
    }
done:
    free(parts), free(order), free(update_s);
    return result;
}

int32_t ff_build_blocks(const ff_block_jobs *jobs, const ff_routes *routes, ff_block_out *out) {
    progress at = {0, 0, 0};
    build_ops(jobs->ops, jobs->table, out, &at);
    build_edges(jobs->edges, jobs->table, routes, out, &at);
    int32_t result = build_syncs(jobs->syncs, jobs->table, routes, out, &at);
    if (result < 0) return result;
    out->task_offsets[at.job] = at.tasks;
    out->edge_offsets[at.job] = at.edges;
    return at.edges;
}
