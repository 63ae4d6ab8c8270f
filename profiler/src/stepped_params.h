// The wide (float32/float64) CPU parameters of an observed optimizer step, and whether the step
// left them finite.
//
// An observed optimizer step's own float32 arithmetic is not read op by op (observer.cpp,
// wide_optimizer_output); the parameters it wrote are checked for NaN/Inf once, when it ends.
// Read only then, a model's parameters come from memory (tens of MB: the largest single read at
// a recorded step's end). An optimizer that updates one parameter after the other (torch's
// for-loop implementations, libtorch's) is done with a parameter when its ops go on to the next
// one: that parameter is scanned then, while its values are still in cache, and the check at the
// end finds the scan in the read cache (read_cache.h: an op writing it again in place, or through
// an alias, drops it). Ops that write several parameters at once (foreach, fused) leave them to
// the check at the end.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace ampscope::detail {

class SteppedParams {
 public:
  /// The step begins: these parameters (wide, CPU) and their versions now. Their order is the
  /// order end() checks the ones no op was seen writing in.
  void begin(std::vector<at::Tensor> params);
  bool active() const { return !params_.empty(); }

  /// An op of the step wrote `x` (its in-place argument or an output): the parameters whose
  /// storage it is were written (also through an alias with a version counter of its own, as
  /// libtorch's optimizers update `p.data()` and old Python ones `p.data`, or through a view of
  /// part of one); what earlier reads of them found is dropped.
  void note_write(const at::Tensor& x);
  /// The op's writes are all noted: when it wrote one parameter and the one before it wrote
  /// another, that other one is scanned now (in `step`).
  void end_op(std::int64_t step);

  /// The step ends: the first parameter it wrote and left holding NaN/Inf (in the order its ops
  /// first wrote them; then those written unseen, whose version moved), or an undefined tensor.
  /// Forgets the step.
  at::Tensor end(std::int64_t step);
  /// The step ends unchecked.
  void forget();

 private:
  struct Param {
    at::Tensor t;
    std::uint32_t version_before = 0;  ///< when the step began
    int same_storage = -1;             ///< the next parameter in the same storage (-1: none)
    bool written = false;              ///< an op of the step was seen writing it
  };
  std::vector<Param> params_;
  std::unordered_map<const void*, int> by_storage_;  ///< storage -> its first parameter
  std::vector<int> order_;                           ///< parameters in the order first written
  int op_param_ = -1;    ///< the parameter the current op wrote (-1: none, -2: several)
  int last_param_ = -1;  ///< the parameter the ops before wrote, not scanned since
};

}  // namespace ampscope::detail
