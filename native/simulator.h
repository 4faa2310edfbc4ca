/* The execution simulator's C parts (paper §5): the event loop of full and delta simulation
 * (native/simulator.c, Algorithms 1 and 2) and the tile overlaps of task-graph edges
 * (native/overlaps.c). Their interface, as the module flexflow._simulator.
 *
 * cffi reads this file as its cdef and the C files include it, so Python and C share one
 * declaration. It must stay plain declarations (no preprocessor lines): cffi parses it.
 * flexflow/simulator/native_loop.py and native_blocks.py fill these structs with views of a
 * TaskGraph's arrays.
 */

/* A task graph, read only. Task ids run 0 .. num_tasks - 1, free ids included (live 0). */
typedef struct {
    int32_t num_tasks;
    const double *exe;             /* exe_time of each task, seconds */
    const uint64_t *order;         /* canonical key (+ device-task flag): breaks ready-time ties */
    const int8_t *live;            /* 0 for a free id */
    const int32_t *resource_set;   /* the set of devices and links a task holds, see below */
    int32_t num_resources;         /* devices, then links */
    const int32_t *set_offsets;    /* set s holds set_members[set_offsets[s] .. set_offsets[s + 1]) */
    const int32_t *set_members;
    int32_t num_edges;
    const int32_t *edge_src;       /* edge e: edge_src[e] -> edge_dst[e]; edge_src -1: removed */
    const int32_t *edge_dst;
} ff_graph;

/* What changed since the schedule was computed (all empty for a full simulation). */
typedef struct {
    double t0;                     /* replay every task starting at or after t0 (-inf: all) */
    const int32_t *removed;        /* ids of removed tasks (some reused by added ones) */
    int32_t num_removed;
    const int32_t *added;          /* ids of new tasks */
    int32_t num_added;
    const int32_t *touched;        /* ids that lost a predecessor (free, new ids are skipped) */
    int32_t num_touched;
    int32_t first_new_edge;        /* every edge into an added task is at or after it (0: any) */
    double cutoff;                 /* stop once the iteration surely ends after it (+inf: never) */
} ff_change;

/* The schedule, one entry per task id; updated in place. */
typedef struct {
    double *ready;
    double *start;
    double *end;
    double iteration_s;            /* out: the latest end */
    /* Where a delta keeps the times it overwrites, so that ff_restore can take the change
     * back (NULL: no log, as for a full simulation; the times are then written as the loop
     * goes). Room for the change's removed and added tasks plus every task id. The replay
     * journals its new times here and writes them to the schedule only once it ends,
     * leaving the old ones in their place: a change stopped at its cutoff (most that a
     * search tries) leaves the schedule untouched and the log empty. */
    int32_t *log_task;
    double *log_ready;
    double *log_start;
    double *log_end;
    int64_t log_size;              /* out: entries logged (0 after a stopped replay) */
} ff_times;

/* An index of a task graph's edges, kept by its owner as the graph changes, and the scratch
 * memory of the simulations that read it, kept from call to call: with both, a delta costs
 * what it touches (its new edges, the tasks it simulates again) plus at most one pass over the
 * task ids, not several passes over every edge and task to build successor lists and zero
 * scratch. Its owner appends, removes, writes back and truncates edges through it. */
typedef struct ff_index ff_index;

/* A new, empty index (NULL when out of memory); ff_index_free releases it. */
ff_index *ff_index_new(void);
void ff_index_free(ff_index *index);

/* Indexes edges [indexed, num_edges) of edge_src/edge_dst, as appended since the last call,
 * and makes room for num_tasks task ids. Returns 0 or FF_NO_MEMORY. (An edge already removed
 * when indexed stays out of the lists, even if written back: index edges as they are made.) */
int32_t ff_index_edges(ff_index *index, const int32_t *edge_src, const int32_t *edge_dst,
                       int32_t num_edges, int32_t num_tasks);

/* Forgets the edges from num_edges on (an undo truncated them); 0 forgets every edge. */
void ff_index_truncate(ff_index *index, int32_t num_edges);

/* Removes the edges of `blocks` (block b's are [block_ranges[2b], block_ranges[2b + 1])):
 * their sources in edge_src become -1 and they leave the lists; writes the blocks' ranges to
 * `ranges` (2 x num_blocks) and each removed edge's target, in that order, to `touched` (room
 * for every edge: the tasks that lost a predecessor); returns how many edges it removed.
 * ff_index_restore_blocks takes it back (an undo): it writes the sources of `ranges` back (the
 * index keeps them), lists the edges again and writes each block's range back to
 * block_ranges. */
int32_t ff_index_remove_blocks(ff_index *index, int32_t *edge_src, const int32_t *edge_dst,
                               const int32_t *block_ranges, const int32_t *blocks,
                               int32_t num_blocks, int32_t *ranges, int32_t *touched);
void ff_index_restore_blocks(ff_index *index, int32_t *edge_src, const int32_t *ranges,
                             const int32_t *blocks, int32_t num_blocks, int32_t *block_ranges);

/* Copies the edges of each range [ranges[2i], ranges[2i + 1]) of src/dst, in turn, to the
 * start of new_src/new_dst (room for all) and rewrites the range to where they now are;
 * returns how many edges it copied (the edge arrays' compaction). */
int32_t ff_compact_ranges(const int32_t *src, const int32_t *dst, int32_t *ranges,
                          int32_t num_ranges, int32_t *new_src, int32_t *new_dst);

/* The last delta was undone (the graph and its times restored): the next starts from the
 * same schedule, so what the index kept of it (the last selection of the tasks to simulate
 * again) holds. Without this call every delta is taken to start from a new schedule. */
void ff_index_undone(ff_index *index);

/* Results of ff_simulate below zero. FF_ABOVE_CUTOFF is no error: a lower bound of the
 * iteration's end (a device's or link's end plus the work still queued for it) passed the
 * change's cutoff; the loop stopped there. With a log the times are as before the call;
 * without one they are left half updated (the caller restores them). */
enum { FF_CYCLE = -1, FF_NO_MEMORY = -2, FF_NOT_CLOSED = -3, FF_ABOVE_CUTOFF = -4,
       FF_KEY_OVERFLOW = -5, FF_STALE_INDEX = -6 };

/* Simulates again every task the change can affect; returns how many, or an FF_ result.
 * `index` must hold exactly the graph's edges (FF_STALE_INDEX if it holds another count);
 * NULL: a temporary one, built for this call. */
int64_t ff_simulate(const ff_graph *graph, const ff_change *change, ff_times *times,
                    ff_index *index);

/* Undo a delta: the logged times written back, the last entry first. */
void ff_restore(ff_times *times);

/* flags[ids[i]] = value for every i < n: a delta's removed or added tasks marked (not) live. */
void ff_set_flags(int8_t *flags, const int32_t *ids, int64_t n, int8_t value);

/* Each device's and link's load (num_resources entries): the summed exe_time of the live
 * tasks holding it. Each runs its tasks one at a time, so no iteration ends before its load. */
void ff_resource_load(const ff_graph *graph, double *load);

/* The highest load after a change, from ff_resource_load's `load` before it: less the
 * `removed` tasks' (one removed twice counts twice, which only lowers the bound), plus
 * `new_exe[i]` on resource `new_resource[i]`. A lower bound of the changed graph's makespan
 * when the change adds no other task (exe_times are never negative). `scratch`:
 * num_resources doubles. */
double ff_load_bound(const ff_graph *graph, const double *load, const int32_t *removed,
                     int32_t num_removed, const int32_t *new_resource, const double *new_exe,
                     int32_t num_new, double *scratch);

/* Every (consumer tile k, producer tile, overlap volume) between the region each consumer tile
 * reads, needs[k][d] = (lo, hi) (num_needs x ndim x 2), and a producer's grid of equal tiles
 * (grid[d] tiles of steps[d] elements along dimension d, row-major ids), in order of k, then
 * of producer tile. The outputs hold num_needs x (tiles of the grid) entries; returns how many
 * were written, or -1 for more dimensions than it handles. */
int32_t ff_grid_overlaps(int32_t ndim, int32_t num_needs, const int64_t *needs,
                         const int64_t *steps, const int64_t *grid, int32_t *consumer,
                         int32_t *producer, int64_t *volume);

/* The route of a transfer between every pair of devices, at [src * num_devices + dst]. */
typedef struct {
    int32_t num_devices;
    const int32_t *set;             /* the resource set id of the route */
    const double *latency;
    const double *bandwidth;
    const uint64_t *flag;           /* the order flag (device task) of a transfer on it */
} ff_routes;

/* Every op's current tasks, as the edge and sync builders read them: op o's task k has its
 * forward task id at ids[op_at[o] + 2k], its backward at ids[op_at[o] + 2k + 1], and its
 * device at the same places of `device`. The op builder appends each rebuilt op's tasks from
 * `size` on (the arrays have room) and points op_at at them. */
typedef struct {
    int32_t *op_at;
    int32_t *ids;
    int32_t *device;
    int32_t size;                   /* in/out: entries in use */
} ff_op_table;

/* Op blocks (`reference_op_block` specifies them): for each job (an op), a forward and a
 * backward task per task of its configuration, given interleaved (forward of task k at 2k,
 * its backward at 2k + 1), and the dependency of each backward task on its forward task. A
 * compute task holds its device alone (resource set `device`). */
typedef struct {
    int32_t num_jobs;
    const int32_t *op;              /* per job: the op */
    const int32_t *task_offsets;    /* job j's tasks: [task_offsets[j], [j + 1]), an even count */
    const int32_t *device;
    const double *exe;
    const uint64_t *order;
} ff_op_jobs;

/* Edge blocks (`reference_edge_block` specifies them): for each job, the dependencies and
 * transfers between a producer op's tasks and a consumer op's tasks along the tile overlaps of
 * one input. An overlap between tasks on one device is two dependencies (forward, and backward
 * the other way); otherwise a transfer task, and for a tensor with a gradient a transfer back
 * in the backward pass. A job names its edge, whose fixed facts are in the task graph's edge
 * table (`ff_edge_table`), and its overlaps, a set of the context's pool (`ff_overlap_pool`):
 * a delta of an unrolled layer rebuilds a hundred edge blocks, each then two numbers. */
typedef struct {
    int32_t num_edges;
    const int32_t *producer;        /* per edge: the producer op (-1 for a model input) */
    const int32_t *consumer;        /* per edge: the consumer op */
    const int64_t *itemsize;        /* per edge: bytes per element of the tensor */
    const int8_t *grads;            /* per edge: 1 if the tensor has a gradient */
    const uint64_t *transfer_key;   /* per edge: its transfers' key with both task fields 0 */
    const uint64_t *grad_key;
} ff_edge_table;

/* Every overlap set a context computed (`SimContext.overlap_set`): set s is the overlaps
 * [at[s], at[s] + count[s]), each a consumer task index, a producer task index, elements. */
typedef struct {
    int32_t num_sets;
    const int32_t *at;
    const int32_t *count;
    const int32_t *consumer;
    const int32_t *producer;
    const int64_t *volume;
} ff_overlap_pool;

typedef struct {
    int32_t num_jobs;
    const int32_t *edge;            /* per job: its edge in `table` */
    const int32_t *overlaps;        /* per job: its overlap set in `pool` (-1: none) */
    const ff_edge_table *table;
    const ff_overlap_pool *pool;
} ff_edge_jobs;

/* The parts of the tasks of one op under one configuration that read one parameter (a
 * template, `SimContext.op_sync_parts`), every template a context made, by id: template t's
 * parts are [template_first[t], + template_parts[t]); each part, the tasks reading one weight
 * region (`SimContext.op_sync_groups`), has the region's bounds (lo, hi per dimension) and
 * elements, the devices the tasks run on with each one's update time for the region, and the
 * tasks' indices into the op's tasks. `*_at` are where a part's entries start. */
typedef struct {
    const int32_t *template_first;
    const int32_t *template_parts;
    const int32_t *part_dims;
    const int32_t *bounds_at;
    const int64_t *bounds;
    const int64_t *elements;
    const int32_t *part_devices;
    const int32_t *device_at;
    const int32_t *device;
    const double *update_s;
    const int32_t *part_tasks;
    const int32_t *task_at;
    const int32_t *task;
} ff_sync_table;

/* Synchronization blocks (`reference_sync_block` specifies them): for each job (a
 * parameter), the ops using it (users), each with its template now. The builder merges the
 * users' parts reading one region into a group; groups are numbered in the order of their
 * regions' bounds (compared in turn), and a group's backward tasks are its parts' in user
 * order. A group held by several devices gets a gather barrier after its backward tasks, a
 * ring of transfers, one from each holder (ascending) to the next, and a done barrier after
 * them; then every holder's update, after the done barrier (or the backward tasks, with one
 * holder). */
typedef struct {
    int32_t num_jobs;
    const int32_t *param;           /* per job: the parameter */
    const uint64_t *key;            /* per job: its keys' parameter field */
    const int32_t *users_at;        /* per parameter: its users [users_at[p], [p + 1]) */
    const int32_t *user_op;         /* every parameter's users (ops) */
    const int32_t *user_template;   /* each one's template in `templates` now */
    const ff_sync_table *templates;
    int32_t empty_set;              /* the resource set of the barriers (none) */
} ff_sync_jobs;

/* The blocks of one build or delta: every op block first (the others read their tasks from
 * `table`), then every edge block, then every sync block; job j of the whole is op job j, then
 * edge job j - ops, then sync job j - ops - edges. */
typedef struct {
    const ff_op_jobs *ops;
    const ff_edge_jobs *edges;
    const ff_sync_jobs *syncs;
    ff_op_table *table;
} ff_block_jobs;

/* Where the new tasks and edges go. Ids come from free_ids (the last first), then next_id
 * upward: the per-task arrays have room for every id the jobs may take. */
typedef struct {
    double *exe;
    uint64_t *order;
    int8_t *live;
    int32_t *resource_set;
    int64_t *size_bytes;
    int32_t *src;
    int32_t *dst;
    const int32_t *free_ids;
    int32_t num_free;
    int32_t free_used;              /* out: ids taken from the end of free_ids */
    int32_t next_id;                /* in/out */
    int32_t *new_ids;               /* out: job j's tasks new_ids[task_offsets[j] .. [j + 1]) */
    int32_t *task_offsets;          /* num_jobs + 1 */
    int32_t *edge_src;              /* out: job j's edges [edge_offsets[j], [j + 1]), with */
    int32_t *edge_dst;              /* room for all */
    int32_t *edge_offsets;          /* num_jobs + 1 */
} ff_block_out;

/* Build every job's block; return the number of edges written, or FF_NO_MEMORY (the sync
 * builder's scratch) or FF_KEY_OVERFLOW (a parameter with 2^14 groups or more). Op blocks take
 * their tasks and an edge per forward task; edge blocks take up to 2 tasks and 4 edges per
 * overlap; sync blocks up to 2 + 2 x devices tasks and tasks + 3 x devices edges per part of
 * a user's template. */
int32_t ff_build_blocks(const ff_block_jobs *jobs, const ff_routes *routes, ff_block_out *out);
