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
 *   scalars: the ff_step_plan's address; the input tile's address (0: an input store); the
 *     labels' address (0: an int64 input store); valid predictions; the loss's total (float64);
 *     the update's kind (FF_UPDATE_*); the number of partial gradient rows; the update's
 *     seven hyperparameters (float32[7]).
 *   inputs: this device's flat weights, the input tile unless addressed, the labels unless
 *     addressed; with an update, every device's row of partial gradients, then the states.
 *   outputs: the (1, 2) loss row, this task's flat row of partial gradients; with an update,
 *     the flat weights (the same store as the first input) and the states.
 * A step that cannot run writes NaN and a negative code into its loss row instead (a label out
 * of range: -1, which the issuing thread's checks leave to labels passed as Legate stores; a
 * store not laid out row-major: -2); reading the batch's loss raises an error naming it.
 */
#include <legate.h>

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

class NativeStepTask : public legate::LegateTask<NativeStepTask> {
 public:
  static void cpu_variant(legate::TaskContext context) {
    bool ok = true;
    const auto* plan = address<const ff_step_plan>(context.scalar(0));
    ff_step_call call{};
    std::uint32_t input = 0;
    call.weights = contiguous<float>(context.input(input++).data(), ok);
    call.x = address<const float>(context.scalar(1));
    if (call.x == nullptr) call.x = contiguous<const float>(context.input(input++).data(), ok);
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
    if (!ok || step_function(plan, &call) != 0) {
      call.sums[0] = std::numeric_limits<double>::quiet_NaN();
      call.sums[1] = ok ? LABEL_OUT_OF_RANGE : NOT_CONTIGUOUS;
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

