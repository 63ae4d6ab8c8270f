// The observer's two hooks into silent-loss recording (profiler/src/silent_loss.cpp).
#pragma once

#include <ATen/core/ivalue.h>
#include <ampscope/profiler/silent_loss.h>

#include <vector>

namespace at {
struct RecordFunction;
}

namespace ampscope::detail {

/// A cast nested at depth 1 inside an autocast call `tag` (its top-level Call), seen at the
/// cast's start: counts what the cast destroys in its source, pending until the call ends.
void on_autocast_cast(const void* tag, c10::ArrayRef<c10::IValue> cast_inputs,
                      const std::vector<c10::IValue>& outer_inputs, std::int64_t step);

/// A recorded top-level call `tag` ended with entry `key`: files its pending cast losses under
/// the key (argument names from the op's schema), counts an explicit narrowing cast, and
/// re-runs a low-precision call whose output is (almost) all zeros in float32.
void on_top_finished(const at::RecordFunction& fn, const void* tag, const OpKey& key,
                     const std::vector<c10::IValue>& inputs, const Stats& out_stats, bool is_cast,
                     bool inplace, std::int64_t step);

}  // namespace ampscope::detail
