/* Edge blocks of a task graph (paper §5.1, the communication between ops): every task graph
 * a search builds, in full or by a delta, creates most of its tasks here, one transfer per
 * overlapping pair of tiles on different devices, so this loop is in C.
 * flexflow/simulator/reference.py (`reference_edge_block`) is the specification;
 * tests/simulator/test_native.py compares the two.
 */

#include <stdint.h>

#include "simulator.h"

enum { C_SHIFT = 14 }; /* the key's consumer task field; the producer task is the low field */

static int32_t take_id(ff_edge_out *out) {
    if (out->free_used < out->num_free) return out->free_ids[out->num_free - 1 - out->free_used++];
    return out->next_id++;
}

static int32_t transfer(const ff_edge_jobs *jobs, ff_edge_out *out, int32_t src, int32_t dst,
                        int64_t size, uint64_t key) {
    int32_t t = take_id(out);
    int64_t route = (int64_t)src * jobs->num_devices + dst;
    out->exe[t] = jobs->route_latency[route] + (double)size / jobs->route_bandwidth[route];
    out->order[t] = key | jobs->route_flag[route];
    out->live[t] = 1;
    out->resource_set[t] = jobs->route_set[route];
    out->size_bytes[t] = size;
    out->src[t] = src;
    out->dst[t] = dst;
    return t;
}

int32_t ff_build_edges(const ff_edge_jobs *jobs, ff_edge_out *out) {
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
            int32_t x = transfer(jobs, out, p_dev, c_dev, size, jobs->transfer_key[j] | fields);
            out->new_ids[tasks++] = x;
            from[edges] = p_fwd, to[edges++] = x;
            from[edges] = x, to[edges++] = c_fwd;
            if (jobs->grads[j]) {
                int32_t y = transfer(jobs, out, c_dev, p_dev, size, jobs->grad_key[j] | fields);
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
