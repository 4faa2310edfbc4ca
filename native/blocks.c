/* The blocks of a task graph that hold most of its tasks (paper §5.1): the transfers between
 * ops (edge blocks) and the parameter synchronization (sync blocks). Every task graph a search
 * builds, in full or by a delta, creates them here. flexflow/simulator/reference.py
 * (`reference_edge_block`, `reference_sync_block`) is the specification;
 * tests/simulator/test_native.py compares the two.
 */

#include <stdint.h>

#include "simulator.h"

/* Task key fields (flexflow/simulator/keys.py): the kind, and the field c (a consumer task, a
 * ring step or a device); the producer task is the low field. */
enum { KIND_SHIFT = 60, C_SHIFT = 14 };
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

int32_t ff_build_edges(const ff_edge_jobs *jobs, const ff_routes *routes, ff_block_out *out) {
    int32_t edges = 0, tasks = 0;
    int32_t *from = out->edge_src, *to = out->edge_dst;
    for (int32_t j = 0; j < jobs->num_jobs; j++) {
        out->task_offsets[j] = tasks;
        out->edge_offsets[j] = edges;
        const int32_t p = jobs->producer_row[j], c = jobs->consumer_row[j];
        for (int32_t i = jobs->overlap_offsets[j]; i < jobs->overlap_offsets[j + 1]; i++) {
            const int32_t kc = jobs->overlap_consumer[i], kp = jobs->overlap_producer[i];
            const int32_t p_dev = jobs->task_device[p + kp], c_dev = jobs->task_device[c + kc];
            const int32_t p_fwd = jobs->task_forward[p + kp], p_bwd = jobs->task_backward[p + kp];
            const int32_t c_fwd = jobs->task_forward[c + kc], c_bwd = jobs->task_backward[c + kc];
            if (p_dev == c_dev) {
                from[edges] = p_fwd, to[edges++] = c_fwd;
                from[edges] = c_bwd, to[edges++] = p_bwd;
                continue;
            }
            const int64_t size = jobs->overlap_volume[i] * jobs->itemsize[j];
            const uint64_t fields = (uint64_t)kc << C_SHIFT | (uint64_t)kp;
            int32_t x = transfer(routes, out, p_dev, c_dev, size, jobs->transfer_key[j] | fields);
            out->new_ids[tasks++] = x;
            from[edges] = p_fwd, to[edges++] = x;
            from[edges] = x, to[edges++] = c_fwd;
            if (jobs->grads[j]) {
                int32_t y = transfer(routes, out, c_dev, p_dev, size, jobs->grad_key[j] | fields);
                out->new_ids[tasks++] = y;
                from[edges] = c_bwd, to[edges++] = y;
                from[edges] = y, to[edges++] = p_bwd;
            } else {
                from[edges] = c_bwd, to[edges++] = p_bwd;
            }
        }
    }
    out->task_offsets[jobs->num_jobs] = tasks;
    out->edge_offsets[jobs->num_jobs] = edges;
    return edges;
}

int32_t ff_build_syncs(const ff_sync_jobs *jobs, const ff_routes *routes, ff_block_out *out) {
    int32_t edges = 0, tasks = 0;
    int32_t *from = out->edge_src, *to = out->edge_dst;
    for (int32_t j = 0; j < jobs->num_jobs; j++) {
        out->task_offsets[j] = tasks;
        out->edge_offsets[j] = edges;
        for (int32_t g = jobs->group_offsets[j]; g < jobs->group_offsets[j + 1]; g++) {
            const int32_t *holder = jobs->holder + jobs->holder_offsets[g];
            const double *update_s = jobs->update_s + jobs->holder_offsets[g];
            const int32_t r = jobs->holder_offsets[g + 1] - jobs->holder_offsets[g];
            const int32_t *backward = jobs->task + jobs->task_offsets[g];
            const int32_t num_backward = jobs->task_offsets[g + 1] - jobs->task_offsets[g];
            const uint64_t group = jobs->group_key[g];
            int32_t done = -1;
            if (r > 1) {
                const uint64_t gather_key = (uint64_t)GATHER_KEY << KIND_SHIFT | group;
                const uint64_t done_key = (uint64_t)REDUCED_KEY << KIND_SHIFT | group;
                int32_t gather = new_task(out, 0.0, gather_key, jobs->empty_set, 0, -1, -1);
                done = new_task(out, 0.0, done_key, jobs->empty_set, 0, -1, -1);
                out->new_ids[tasks++] = gather;
                out->new_ids[tasks++] = done;
                for (int32_t i = 0; i < num_backward; i++) from[edges] = backward[i], to[edges++] = gather;
                const uint64_t ring = (uint64_t)RING_KEY << KIND_SHIFT | group;
                for (int32_t i = 0; i < r; i++) {
                    const uint64_t key = ring | (uint64_t)i << C_SHIFT;
                    int32_t x = transfer(routes, out, holder[i], holder[(i + 1) % r],
                                         jobs->ring_bytes[g], key);
                    out->new_ids[tasks++] = x;
                    from[edges] = gather, to[edges++] = x;
                    from[edges] = x, to[edges++] = done;
                }
            }
            const uint64_t update = (uint64_t)UPDATE_KEY << KIND_SHIFT | group | DEVICE_TASK;
            for (int32_t i = 0; i < r; i++) {
                const uint64_t key = update | (uint64_t)holder[i] << C_SHIFT;
                /* resource set `device` is the device alone */
                int32_t u = new_task(out, update_s[i], key, holder[i], 0, -1, -1);
                out->new_ids[tasks++] = u;
                if (done >= 0) {
                    from[edges] = done, to[edges++] = u;
                } else {
                    for (int32_t k = 0; k < num_backward; k++) from[edges] = backward[k], to[edges++] = u;
                }
            }
        }
    }
    out->task_offsets[jobs->num_jobs] = tasks;
    out->edge_offsets[jobs->num_jobs] = edges;
    return edges;
}
