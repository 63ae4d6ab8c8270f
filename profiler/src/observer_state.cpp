#include "observer_state.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <functional>

namespace ampscope {

std::string dtype_name(std::int8_t scalar_type) {
  if (scalar_type < 0) return "";
  switch (static_cast<c10::ScalarType>(scalar_type)) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
    case c10::ScalarType::Float8_e5m2: return "float8_e5m2";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    default: return std::string(c10::toString(static_cast<c10::ScalarType>(scalar_type)));
  }
}

bool OpKey::operator==(const OpKey& o) const {
  return layer == o.layer && op == o.op && phase == o.phase && input_dtype == o.input_dtype &&
         compute_dtype == o.compute_dtype && output_dtype == o.output_dtype &&
         autocast == o.autocast;
}

void OpAggregate::merge(const OpAggregate& o) {
  EntryStats::merge(o);
  shadow_step = std::max(shadow_step, o.shadow_step);
}

std::size_t OpKeyHash::operator()(const OpKey& k) const noexcept {
  std::uint64_t h = static_cast<std::uint32_t>(k.layer);
  h = h * 0x9E3779B97F4A7C15ull ^ k.op;
  h = h * 0x9E3779B97F4A7C15ull ^
      (static_cast<std::uint64_t>(k.phase) | (std::uint64_t(std::uint8_t(k.input_dtype)) << 8) |
       (std::uint64_t(std::uint8_t(k.compute_dtype)) << 16) |
       (std::uint64_t(std::uint8_t(k.output_dtype)) << 24) |
       (std::uint64_t(k.autocast) << 32));
  return std::hash<std::uint64_t>{}(h);
}

namespace detail {

std::uint32_t InternTable::intern(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(std::string(name));
  if (it != ids_.end()) return it->second;
  auto id = static_cast<std::uint32_t>(names_.size());
  names_.emplace_back(name);
  ids_.emplace(names_.back(), id);
  return id;
}

std::string InternTable::name(std::uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id < names_.size() ? names_[id] : std::string("?");
}

std::vector<std::string> InternTable::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_;
}

// Slot layout: sequence number + 1 in the high 40 bits, layer id + 1 in the low 24 bits.
void SeqRing::put(std::int64_t seq, LayerId layer) {
  if (seq < 0) return;
  auto packed = (static_cast<std::uint64_t>(seq + 1) << 24) |
                (static_cast<std::uint64_t>(layer + 1) & 0xFFFFFF);
  slots_[static_cast<std::size_t>(seq) & (kSize - 1)].store(packed, std::memory_order_relaxed);
}

LayerId SeqRing::get(std::int64_t seq) const {
  if (seq < 0) return -1;
  auto packed = slots_[static_cast<std::size_t>(seq) & (kSize - 1)].load(std::memory_order_relaxed);
  if ((packed >> 24) != static_cast<std::uint64_t>(seq + 1)) return -1;
  return static_cast<LayerId>(packed & 0xFFFFFF) - 1;
}

void append_loss_scale(std::vector<LossScaleRecord>& series, const LossScaleRecord& rec) {
  series.push_back(rec);
  if (series.size() <= kMaxLossScale) return;
  // Thin the older half: keep every update that found inf/NaN (the skipped steps the rules
  // and the charts need) and every other clean one; the newer half stays whole.
  const std::size_t old_end = series.size() / 2;
  std::vector<LossScaleRecord> kept;
  kept.reserve(series.size());
  for (std::size_t i = 0; i < old_end; ++i) {
    if (series[i].found_inf || i % 2 == 0) kept.push_back(series[i]);
  }
  if (kept.size() == old_end) {  // all found inf: keep every other one regardless
    kept.clear();
    for (std::size_t i = 0; i < old_end; i += 2) kept.push_back(series[i]);
  }
  kept.insert(kept.end(), series.begin() + static_cast<long>(old_end), series.end());
  series.swap(kept);
}

void LayerFilter::configure(const NameFilter& filter) {
  std::lock_guard<std::mutex> lock(mu_);
  filter_ = filter;
  active_.store(!filter.empty(), std::memory_order_release);
  for (std::size_t i = 0; i < kSlots; ++i) flags_[i].store(kUnknown, std::memory_order_relaxed);
}

void LayerFilter::name(LayerId id, std::string_view name) {
  if (id < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto i = static_cast<std::size_t>(id);
  if (names_.size() <= i) names_.resize(i + 1);
  names_[i] = std::string(name);
  if (i < kSlots) flags_[i].store(kUnknown, std::memory_order_relaxed);
}

bool LayerFilter::included_slow(LayerId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto i = static_cast<std::size_t>(id);
  const std::string name = i < names_.size() ? names_[i] : std::string();
  bool in = filter_.allows(id == kOutsideLayerId ? std::string_view("<outside>") : name);
  if (i < kSlots) flags_[i].store(in ? kIn : kOut, std::memory_order_relaxed);
  return in;
}

std::shared_ptr<ThreadTable> GlobalState::new_table() {
  auto table = std::make_shared<ThreadTable>();
  std::lock_guard<std::mutex> lock(tables_mu);
  tables.push_back(table);
  return table;
}

std::shared_ptr<SeqRing> GlobalState::ring(std::uint64_t thread_id) {
  std::lock_guard<std::mutex> lock(rings_mu);
  auto& slot = rings[thread_id];
  if (!slot) slot = std::make_shared<SeqRing>();
  return slot;
}

std::shared_ptr<SeqRing> GlobalState::find_ring(std::uint64_t thread_id) {
  std::lock_guard<std::mutex> lock(rings_mu);
  auto it = rings.find(thread_id);
  return it == rings.end() ? nullptr : it->second;
}

void GlobalState::reset() {
  {
    std::lock_guard<std::mutex> lock(tables_mu);
    for (auto& t : tables) {
      std::lock_guard<std::mutex> tl(t->mu);
      t->entries.clear();
    }
  }
  {
    std::lock_guard<std::mutex> lock(records_mu);
    first_nonfinite.reset();
    pending_gradient.reset();
    scaler_caught.reset();
    scaler_caught_steps = 0;
    loss_scale.clear();
    loss_scale_updates = 0;
    step_at_last_update = 0;
  }
  have_first_nonfinite.store(false);
  have_pending.store(false);
  armed_from.store(-1);
  scaler_seen.store(false);
  scaler_open.store(false);
  forward_seen.store(false);
  optimizer_stepped.store(false);
  after_backward.store(false);
  step.store(0);
}

GlobalState& global() {
  static GlobalState* state = new GlobalState();  // never destroyed: callbacks may outlive main
  return *state;
}

}  // namespace detail
}  // namespace ampscope
