/* Legate tasks whose bodies are C++, for step tasks that run as one C call
 * (flexflow.runtime.native_step): the pending optimizer update and the whole step, with no
 * Python in the task body.
 *
 * Why: Legate runs Python task bodies in the one Python process. A body holds the interpreter
 * lock while Legate converts its arguments and while it names its arrays, and the other
 * processors' tasks wait for that lock: on two CPUs the MLP's data-parallel step spent about
 * 0.2 ms of Python per task and lost more to waiting. This body reads the same arguments in
 * C++ and calls ff_native_step_f32 (native/step.c, the code the Python body calls through
 * cffi), whose address the registration hands over, so this library holds no kernel code.
 *
 * Arguments (flexflow.runtime.native_tasks issues them):
 *   scalars: the ff_step_plan's address; each model input's tile's address (int64[], in the
 *     plan's order; 0: an input store); the
 *     labels' address (0: an int64 input store); valid predictions; the loss's total (float64);
 *     the update's kind (FF_UPDATE_*); the number of partial gradient rows; the update's
 *     seven hyperparameters (float32[7]); the step's number (dropout's masks).
 *   inputs: this device's flat weights, the input tiles not addressed, the labels unless
 *     addressed; with an update, every device's row of partial gradients, then the states.
 *   outputs: the (1, 2) loss row, this task's flat row of partial gradients; with an update,
 *     the flat weights (the same store as the first input) and the states.
 * A step that cannot run writes NaN and a negative code into its loss row instead (a label out
 * of range: -1, which the issuing thread's checks leave to labels passed as Legate stores; a
 * store not laid out row-major: -2; a token id outside its embedding's table: -4); reading the
 * batch's loss raises an error naming it.
 */
#include <legate.h>
#include <legate/comm/coll.h>

#include <cstdint>
#include <limits>
#include <vector>

extern "C" {
#include "kernels.h"
}

namespace {

using StepFunction = int (*)(const ff_step_plan*, const ff_step_call*);

/* Set once per process by flexflow_register_native_step, before any task can run. */
StepFunction step_function = nullptr;

/* The store's memory, as the C step reads it: C-contiguous elements of T; `ok` turns false
 * otherwise (Legate lays out a task's stores row-major, so this only guards that assumption). */
template <typename T>
T* contiguous(const legate::PhysicalStore& store, bool& ok) {
  const auto allocation = store.get_inline_allocation();
  const auto domain = store.domain();
  if (store.type().size() != sizeof(T)) ok = false;
  std::size_t expected = sizeof(T);
  for (int d = domain.get_dim() - 1; d >= 0; --d) {
    const auto extent = domain.hi()[d] - domain.lo()[d] + 1;
    if (extent > 1 && allocation.strides[d] != expected) ok = false;
    expected *= extent > 0 ? static_cast<std::size_t>(extent) : 0;
  }
  return static_cast<T*>(allocation.ptr);
}

template <typename T>
T* address(const legate::Scalar& scalar) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(scalar.value<std::int64_t>()));
}

/* What the loss row's correct count says when the step did not run (BatchStats reads it). */
constexpr double LABEL_OUT_OF_RANGE = -1.0;
constexpr double NOT_CONTIGUOUS = -2.0;
constexpr double BAD_ID = -4.0;

/* The code a failed step writes for `status` (ff_train_step_f32's result). */
double failure_code(int status) { return status == FF_STEP_BAD_ID ? BAD_ID : LABEL_OUT_OF_RANGE; }

/* The scalars a launch of several batches begins with (NativeStepsTask, NativeEvalsTask): the
 * devices' plans (int64[D]); per batch and device (k * D + d) the model inputs' tiles'
 * addresses (int64[K * D * inputs]), the labels' addresses and the valid predictions
 * (int64[K * D] each); per batch the loss's total (float64[K]). */
struct LaunchBatches {
  explicit LaunchBatches(const legate::TaskContext& context)
      : point(static_cast<std::size_t>(context.get_task_index()[0])),
        plans(context.scalar(0).values<std::int64_t>()),
        xs(context.scalar(1).values<std::int64_t>()),
        labels(context.scalar(2).values<std::int64_t>()),
        valid(context.scalar(3).values<std::int64_t>()),
        totals(context.scalar(4).values<double>()),
        devices(plans.size()),
        batches(totals.size()),
        plan(reinterpret_cast<const ff_step_plan*>(plans[point])),
        inputs(static_cast<std::size_t>(plan->num_inputs)) {}

  /* Whether the scalars hold what the plan reads. */
  bool consistent() const {
    return inputs <= FF_STEP_MAX_INPUTS && xs.size() == batches * devices * inputs;
  }

  /* Batch k's call on this point, its loss row `sums`: the model inputs, labels, valid
   * predictions and the loss's total (the rest zero). */
  ff_step_call call(std::size_t k, double* sums) const {
    ff_step_call made{};
    const std::size_t at = k * devices + point;
    for (std::size_t i = 0; i < inputs; ++i)
      made.xs[i] = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(xs[at * inputs + i]));
    made.labels = reinterpret_cast<const long long*>(labels[at]);
    made.valid = static_cast<long>(valid[at]);
    made.total = totals[k];
    made.sums = sums;
    return made;
  }

  std::size_t point;
  legate::Span<const std::int64_t> plans, xs, labels, valid;
  legate::Span<const double> totals;
  std::size_t devices, batches;
  const ff_step_plan* plan;
  std::size_t inputs;
};

class NativeStepTask : public legate::LegateTask<NativeStepTask> {
 public:
  static void cpu_variant(legate::TaskContext context) {
    bool ok = true;
    const auto* plan = address<const ff_step_plan>(context.scalar(0));
    ff_step_call call{};
    std::uint32_t input = 0;
    call.weights = contiguous<float>(context.input(input++).data(), ok);
    const auto xs = context.scalar(1).values<std::int64_t>();  // each model input's tile
    if (static_cast<long>(xs.size()) != plan->num_inputs || xs.size() > FF_STEP_MAX_INPUTS)
      ok = false;
    for (std::size_t i = 0; i < xs.size() && i < FF_STEP_MAX_INPUTS; ++i) {
      call.xs[i] = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(xs[i]));
      if (call.xs[i] == nullptr)
        call.xs[i] = contiguous<const float>(context.input(input++).data(), ok);
    }
    call.labels = address<const long long>(context.scalar(2));
    if (call.labels == nullptr)
      call.labels = contiguous<const long long>(context.input(input++).data(), ok);
    call.valid = static_cast<long>(context.scalar(3).value<std::int64_t>());
    call.total = context.scalar(4).value<double>();
    call.sums = contiguous<double>(context.output(0).data(), ok);
    call.grads = contiguous<float>(context.output(1).data(), ok);

    ff_update& update = call.update;
    update.kind = static_cast<int>(context.scalar(5).value<std::int64_t>());
    std::vector<const float*> partials;
    if (update.kind != FF_UPDATE_NONE) {
      const auto copies = context.scalar(6).value<std::int64_t>();
      for (std::int64_t c = 0; c < copies; ++c)
        partials.push_back(contiguous<const float>(context.input(input++).data(), ok));
      auto weight = context.output(2).data();
      update.weight = contiguous<float>(weight, ok);
      update.n = static_cast<long>(weight.domain().get_volume());
      update.partials = partials.data();
      update.copies = static_cast<long>(copies);
      if (context.num_outputs() > 3) update.state0 = contiguous<float>(context.output(3).data(), ok);
      if (context.num_outputs() > 4) update.state1 = contiguous<float>(context.output(4).data(), ok);
      const auto h = context.scalar(7).values<float>();
      for (std::size_t i = 0; i < h.size() && i < 7; ++i) update.h[i] = h[i];
    }
    call.iteration = static_cast<long>(context.scalar(8).value<std::int64_t>());
    const int status = ok ? step_function(plan, &call) : 0;
    if (!ok || status != 0) {
      call.sums[0] = std::numeric_limits<double>::quiet_NaN();
      call.sums[1] = ok ? failure_code(status) : NOT_CONTIGUOUS;
    }
  }
};


using UpdateFunction = int (*)(const ff_step_plan*, const ff_update*);

/* Set once per process by flexflow_register_native_steps. */
UpdateFunction update_function = nullptr;

/* Several training steps of a data-parallel model in one concurrent launch, one point per
 * device (flexflow.runtime.step_launches): each step's update is applied inside the launch,
 * after the devices have exchanged where their partial gradients are.
 *
 * Why: every launch of a step task costs Legate and Legion work and the processors an idle
 * gap (about 0.3-1 ms per iteration on the runtime benchmark's MLP); K steps per launch pay it
 * once. The points of one launch run in one process at the same time (a concurrent launch),
 * so each reads the others' partial gradients where they were written: an allgather over the
 * launch's CPU communicator passes their addresses (and each step's status), and each point
 * sums the D rows in device order, the C update the one-step tasks run, so every device's
 * replica of the weights gets the same bits as with one step per launch. Partial gradients
 * alternate between two scratch buffers per device: a device writes buffer k % 2 in step k
 * only after every device has passed step k - 1's exchange, which each does after applying
 * step k - 2's update, the last reader of that buffer.
 *
 * Scalars: the devices' ff_step_plan addresses (int64[D]); per step and device (k * D + d) the
 * model inputs' tiles' addresses (int64[K * D * inputs], the plan's inputs in order), the
 * labels' addresses and the valid predictions (int64[K * D] each); per
 * step the loss's total (float64[K]); the update's kind; per step the hyperparameters of the
 * update of its gradients (float32[K * 7]); per device its scratch (int64[D], 2 n floats); the
 * first step's number (step k is that plus k: dropout's masks).
 * Stores of point d: inputs its weights row and its states' rows, outputs the same rows, then
 * its (1, K, 2) loss rows, one per step. A step that fails (or every step after a failure on any
 * device) writes NaN and its code into its loss row, and no update follows it.
 */
class NativeStepsTask : public legate::LegateTask<NativeStepsTask> {
 public:
  static void cpu_variant(legate::TaskContext context) {
    const LaunchBatches launch(context);
    bool ok = launch.consistent();
    const auto kind = static_cast<int>(context.scalar(5).value<std::int64_t>());
    const auto hyper = context.scalar(6).values<float>();
    const auto scratch = context.scalar(7).values<std::int64_t>();
    const auto first_iteration = static_cast<long>(context.scalar(8).value<std::int64_t>());
    const std::size_t point = launch.point, devices = launch.devices, steps = launch.batches;
    const auto* plan = launch.plan;

    auto weight = context.output(0).data();
    float* weights = contiguous<float>(weight, ok);
    const auto n = static_cast<std::size_t>(weight.domain().get_volume());
    const std::size_t states = context.num_outputs() - 2;
    std::vector<float*> state(2, nullptr);
    for (std::size_t s = 0; s < states && s < 2; ++s)
      state[s] = contiguous<float>(context.output(1 + s).data(), ok);
    auto rows = context.output(1 + states).data();
    double* sums_base = contiguous<double>(rows, ok);
    // a loss row per step (the launch makes them so); a step without one writes into scratch
    const auto rows_held = static_cast<std::size_t>(rows.domain().get_volume()) / 2;
    if (rows_held != steps) ok = false;
    double unheld[2];
    std::vector<double*> sums(steps);
    for (std::size_t k = 0; k < steps; ++k) sums[k] = k < rows_held ? sums_base + 2 * k : unheld;

    float* buffers[2] = {reinterpret_cast<float*>(scratch[point]),
                         reinterpret_cast<float*>(scratch[point]) + n};
    const auto communicators = context.communicators();
    std::vector<std::int64_t> gathered(2 * devices);
    std::vector<const float*> partials(devices);
    double failure = ok ? 0.0 : NOT_CONTIGUOUS;

    ff_update update{};
    update.kind = kind;
    update.weight = weights;
    update.n = static_cast<long>(n);
    update.partials = partials.data();
    update.copies = static_cast<long>(devices);
    update.state0 = state[0];
    update.state1 = state[1];
    auto set_hyper = [&](std::size_t k) {
      for (std::size_t i = 0; i < 7; ++i) update.h[i] = hyper[7 * k + i];
    };

    for (std::size_t k = 0; k < steps; ++k) {
      if (failure == 0.0) {
        ff_step_call call = launch.call(k, sums[k]);
        call.weights = weights;
        call.grads = buffers[k % 2];
        call.iteration = first_iteration + static_cast<long>(k);
        if (k > 0) set_hyper(k - 1);  // the update of step k - 1's gradients first
        call.update = update;
        if (k == 0) call.update.kind = FF_UPDATE_NONE;  // none pending: the launch applied it
        const int status = step_function(plan, &call);
        if (status != 0) failure = failure_code(status);
      }
      if (failure != 0.0) {
        sums[k][0] = std::numeric_limits<double>::quiet_NaN();
        sums[k][1] = failure;
      }
      // every point takes part in every exchange, failed or not, so none waits forever
      const std::int64_t mine[2] = {reinterpret_cast<std::int64_t>(buffers[k % 2]),
                                    static_cast<std::int64_t>(failure)};
      if (communicators.empty()) {
        gathered[0] = mine[0], gathered[1] = mine[1];
      } else {
        legate::comm::coll::collAllgather(mine, gathered.data(), 2,
                                          legate::comm::coll::CollDataType::CollInt64,
                                          communicators[0].get<legate::comm::coll::CollComm>());
      }
      for (std::size_t d = 0; d < devices; ++d) {
        partials[d] = reinterpret_cast<const float*>(gathered[2 * d]);
        if (failure == 0.0 && gathered[2 * d + 1] != 0) failure = double(gathered[2 * d + 1]);
      }
    }
    if (failure == 0.0) {
      set_hyper(steps - 1);
      update_function(plan, &update);
    }
  }
};

/* Set once per process by flexflow_register_native_evals. */
StepFunction eval_function = nullptr;

/* Several evaluation batches of a data-parallel model in one launch, one point per device
 * (flexflow.runtime.step_launches.issue_evaluations): each batch's forward pass and loss as
 * ff_native_eval_f32 (native/step.c), nothing exchanged between the points.
 *
 * Why: as for NativeStepsTask, every launch costs Legate and Legion work; an evaluation batch
 * is a third of a step's kernels, so one launch per batch cost the runtime benchmark's MLP
 * more than the batch itself.
 *
 * Scalars: the devices' ff_step_plan addresses (int64[D]); per batch and device (k * D + d)
 * the model inputs' tiles' addresses (int64[K * D * inputs]), the labels' addresses and the
 * valid predictions (int64[K * D] each); per batch the loss's total (float64[K]).
 * Stores of point d: input its weights row; output its (1, K, 2) loss rows, one per batch. A
 * batch that fails writes NaN and its code into its loss row (as NativeStepTask's). */
class NativeEvalsTask : public legate::LegateTask<NativeEvalsTask> {
 public:
  static void cpu_variant(legate::TaskContext context) {
    const LaunchBatches launch(context);
    bool ok = launch.consistent();
    const std::size_t batches = launch.batches;
    float* weights = contiguous<float>(context.input(0).data(), ok);
    auto rows = context.output(0).data();
    double* sums = contiguous<double>(rows, ok);
    // a loss row per batch (the launch makes them so); past the rows held, nothing is written
    const auto rows_held = static_cast<std::size_t>(rows.domain().get_volume()) / 2;
    if (rows_held != batches) ok = false;
    for (std::size_t k = 0; k < batches && k < rows_held; ++k) {
      int status = 0;
      if (ok) {
        ff_step_call call = launch.call(k, sums + 2 * k);
        call.weights = weights;
        status = eval_function(launch.plan, &call);
      }
      if (!ok || status != 0) {
        sums[2 * k] = std::numeric_limits<double>::quiet_NaN();
        sums[2 * k + 1] = ok ? failure_code(status) : NOT_CONTIGUOUS;
      }
    }
  }
};

}  // namespace

/* Registers the step task under `task_id` of the Legate library named `library` (which the
 * Python side created), its body calling `run` (ff_native_step_f32's address). 0 on success. */
extern "C" int flexflow_register_native_step(const char* library, std::int64_t task_id,
                                             void* run) {
  if (run == nullptr) return 1;
  step_function = reinterpret_cast<StepFunction>(run);
  auto found = legate::Runtime::get_runtime()->find_library(library);
  NativeStepTask::register_variants(found, legate::LocalTaskID{task_id});
  return 0;
}


/* Registers the task of several steps per launch (NativeStepsTask) under `task_id` of the
 * library named `library`, its body calling `run` (ff_native_step_f32's address) for each step
 * and `update` (ff_native_update_f32's) after the last. 0 on success. */
extern "C" int flexflow_register_native_steps(const char* library, std::int64_t task_id,
                                              void* run, void* update) {
  if (run == nullptr || update == nullptr) return 1;
  step_function = reinterpret_cast<StepFunction>(run);
  update_function = reinterpret_cast<UpdateFunction>(update);
  auto found = legate::Runtime::get_runtime()->find_library(library);
  NativeStepsTask::register_variants(found, legate::LocalTaskID{task_id});
  return 0;
}


/* Registers the task of several evaluation batches per launch (NativeEvalsTask) under
 * `task_id` of the library named `library`, its body calling `run` (ff_native_eval_f32's
 * address) for each batch. 0 on success. */
extern "C" int flexflow_register_native_evals(const char* library, std::int64_t task_id,
                                              void* run) {
  if (run == nullptr) return 1;
  eval_function = reinterpret_cast<StepFunction>(run);
  auto found = legate::Runtime::get_runtime()->find_library(library);
  NativeEvalsTask::register_variants(found, legate::LocalTaskID{task_id});
  return 0;
}
