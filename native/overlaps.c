/* Which producer tiles each consumer tile reads, and how much (paper §5.1, the task graph's
 * communication): the one loop of building a task graph that runs on every new pair of
 * configurations, so it is in C. flexflow/simulator/reference.py (`reference_grid_overlaps`)
 * is the specification; tests/simulator/test_native.py compares the two.
 */

#include <stdint.h>

#include "simulator.h"

enum { MAX_DIMS = 16 };

/* Python's floor division (hi - 1 is -1 for an empty region at 0). */
static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int32_t ff_grid_overlaps(int32_t ndim, int32_t num_needs, const int64_t *needs,
                         const int64_t *steps, const int64_t *grid, int32_t *consumer,
                         int32_t *producer, int64_t *volume) {
    if (ndim < 0 || ndim > MAX_DIMS) return -1;
    int64_t strides[MAX_DIMS], first[MAX_DIMS], last[MAX_DIMS], c[MAX_DIMS];
    int64_t stride = 1; /* producer tile ids are row-major over the grid */
    for (int32_t d = ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= grid[d];
    }
    int32_t count = 0;
    for (int32_t k = 0; k < num_needs; k++) {
        const int64_t *need = needs + (int64_t)k * ndim * 2; /* (lo, hi) per dimension */
        int empty = 0;
        for (int32_t d = 0; d < ndim && !empty; d++) {
            int64_t lo = need[2 * d], hi = need[2 * d + 1];
            if (hi <= lo) empty = 1;
            /* tiles outside the grid do not exist (regions lie inside the tensor anyway);
             * clamping also keeps the writes within num_needs x tiles */
            first[d] = lo > 0 ? floordiv(lo, steps[d]) : 0;
            last[d] = floordiv(hi - 1, steps[d]);
            if (last[d] > grid[d] - 1) last[d] = grid[d] - 1;
            if (last[d] < first[d]) empty = 1;
            c[d] = first[d];
        }
        if (empty) continue;
        for (;;) { /* every tile in the box, first dimension outermost */
            int64_t index = 0, size = 1;
            for (int32_t d = 0; d < ndim && size > 0; d++) {
                int64_t lo = need[2 * d], hi = need[2 * d + 1];
                int64_t a = c[d] * steps[d], b = (c[d] + 1) * steps[d];
                int64_t extent = (hi < b ? hi : b) - (lo > a ? lo : a);
                size = extent > 0 ? size * extent : 0;
                index += c[d] * strides[d];
            }
            if (size > 0) {
                consumer[count] = k;
                producer[count] = (int32_t)index;
                volume[count] = size;
                count++;
            }
            int32_t d = ndim - 1; /* next tile: odometer over the box */
            while (d >= 0 && c[d] == last[d]) {
                c[d] = first[d];
                d--;
            }
            if (d < 0) break;
            c[d]++;
        }
    }
    return count;
}
