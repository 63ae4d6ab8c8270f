// The target formats: every fact about float16, bfloat16 and the float8 formats that the stats
// kernels, the silent-loss counts and the reports use, in one table. Adding a format is a row
// here (plus its torch dtype check in silent_loss.cpp); the static_asserts below hold the table
// to what the kernels rely on. Plain C++ (no torch), usable from CUDA host code.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ampscope {

/// Target formats whose overflow/underflow/subnormal counts every stats block carries.
enum class Format : std::uint8_t { kFloat16 = 0, kBFloat16, kFloat8E4M3FN, kFloat8E5M2 };
inline constexpr int kNumFormats = 4;

struct FormatTraits {
  Format format;
  std::string_view name;        ///< SPEC name, as in the report ("float16")
  std::string_view short_name;  ///< table columns ("fp16")
  std::string_view label;       ///< chart captions ("fp8 e4m3")
  int exponent_bits;
  int mantissa_bits;
  double max;          ///< largest finite value
  int max_exp;         ///< floor(log2(max))
  int min_normal_exp;  ///< floor(log2) of the smallest normal value
  /// floor(log2) of the largest magnitude that rounds to 0 (a power of two): values of lower
  /// binades all become 0.
  int underflow_exp;
  /// The stats kernels' thresholds on |float32 bits|, counted as "|x| < T":
  ///   [0] Tu + 1: 0 < |x| <= Tu rounds (to nearest even) to 0;
  ///   [1] Ts: Tu < |x| < Ts rounds to a subnormal (Ts: smallest magnitude rounding up to the
  ///       smallest normal);
  ///   [2] To: |x| >= To rounds past max (float8_e4m3fn, whose exponent is unbounded: |x| > 464).
  /// Checked against torch's casts for every non-negative float32 bit pattern (test_stats.cpp).
  std::array<std::uint32_t, 3> thresholds;
  std::int8_t torch_dtype;  ///< its c10::ScalarType value (checked in silent_loss.cpp)
};

// clang-format off
inline constexpr std::array<FormatTraits, kNumFormats> kFormats{{
  // Tu = 2^-25, Ts = 2^-14 * (1 - 2^-11), To = 65520
  {Format::kFloat16, "float16", "fp16", "fp16", 5, 10, 65504.0, 15, -14, -25,
   {0x33000001u, 0x387FE000u, 0x477FF000u}, 5},
  // Tu = 2^-134, Ts = 2^-126 * (1 - 2^-8), To = (2 - 2^-8) * 2^127
  {Format::kBFloat16, "bfloat16", "bf16", "bf16", 8, 7, 3.3895313892515355e38, 127, -126, -134,
   {0x00008001u, 0x007F8000u, 0x7F7F8000u}, 15},
  // Tu = 2^-10, Ts = 0.9375 * 2^-6, |x| > 464
  {Format::kFloat8E4M3FN, "float8_e4m3fn", "fp8e4m3", "fp8 e4m3", 4, 3, 448.0, 8, -6, -10,
   {0x3A800001u, 0x3C700000u, 0x43E80001u}, 24},
  // Tu = 2^-17, Ts = 0.875 * 2^-14, To = 61440
  {Format::kFloat8E5M2, "float8_e5m2", "fp8e5m2", "fp8 e5m2", 5, 2, 57344.0, 15, -14, -17,
   {0x37000001u, 0x38600000u, 0x47700000u}, 23},
}};
// clang-format on

/// The traits of format `f`.
constexpr const FormatTraits& traits(Format f) { return kFormats[static_cast<int>(f)]; }

/// The SPEC name of a format: "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2".
constexpr std::string_view format_name(Format f) { return traits(f).name; }

/// The format whose SPEC name is `name`; false when there is none.
constexpr bool format_from_name(std::string_view name, Format* out) {
  for (const FormatTraits& t : kFormats) {
    if (t.name == name) {
      if (out != nullptr) *out = t.format;
      return true;
    }
  }
  return false;
}

/// Largest finite value of a format (65504, ~3.39e38, 448, 57344).
constexpr double format_max(Format f) { return traits(f).max; }

/// floor(log2) of the smallest subnormal value of a format.
constexpr int min_subnormal_exp(Format f) { return traits(f).min_normal_exp - traits(f).mantissa_bits; }

/// Number of stats-kernel thresholds (three per format), in table order.
inline constexpr int kNumThresholds = 3 * kNumFormats;

/// All thresholds, format after format (index 3 * format + {0, 1, 2}).
struct ThresholdTable {
  std::uint32_t v[kNumThresholds];
};
constexpr ThresholdTable make_threshold_table() {
  ThresholdTable t{};
  for (int k = 0; k < kNumThresholds; ++k) t.v[k] = kFormats[k / 3].thresholds[k % 3];
  return t;
}
inline constexpr ThresholdTable kFormatThresholds = make_threshold_table();

namespace formats_detail {

/// floor(log2) of the float32 whose bits are `b` (positive, finite, nonzero).
constexpr int floor_log2_f32(std::uint32_t b) {
  const int e = static_cast<int>(b >> 23);
  if (e != 0) return e - 127;
  int m = -1;
  for (std::uint32_t x = b; x != 0; x >>= 1) ++m;
  return m - 149;
}

constexpr bool table_consistent() {
  for (int i = 0; i < kNumFormats; ++i) {
    const FormatTraits& t = kFormats[i];
    if (static_cast<int>(t.format) != i) return false;  // rows in enum order
    const auto& th = t.thresholds;
    if (!(th[0] < th[1] && th[1] < th[2] && th[2] < 0x7F800000u)) return false;
    const std::uint32_t tu = th[0] - 1;
    if (floor_log2_f32(tu) != t.underflow_exp) return false;
    // Tu is a power of two
    if ((tu >> 23) != 0 ? (tu & 0x7FFFFFu) != 0 : (tu & (tu - 1)) != 0) return false;
    if (floor_log2_f32(th[1]) != t.min_normal_exp - 1) return false;  // Ts just below min normal
    if (floor_log2_f32(th[2]) != t.max_exp) return false;             // To in max's binade
    double p = 1.0;  // 2^max_exp <= max < 2^(max_exp + 1)
    for (int e = 0; e < t.max_exp; ++e) p *= 2.0;
    if (!(p <= t.max && t.max < 2.0 * p)) return false;
    if (t.min_normal_exp - t.mantissa_bits - 1 != t.underflow_exp) return false;
  }
  return true;
}

/// Most thresholds inside one float32 binade that are not its lower edge.
constexpr int max_thresholds_per_binade() {
  int most = 0;
  for (int b = 0; b < 256; ++b) {
    int n = 0;
    for (std::uint32_t th : kFormatThresholds.v) n += (th >> 23) == static_cast<std::uint32_t>(b) && (th & 0x7FFFFFu) != 0;
    most = n > most ? n : most;
  }
  return most;
}

}  // namespace formats_detail

static_assert(formats_detail::table_consistent(),
              "kFormats: thresholds, exponents and max disagree (see FormatTraits)");
// The float64 block counts four thresholds per pass (stats_block64.h).
static_assert(kNumThresholds % 4 == 0, "pad the thresholds to a multiple of 4");
// The AVX2 and AVX-512 kernels keep at most two inner thresholds per binade (BinadeThresholds).
static_assert(formats_detail::max_thresholds_per_binade() <= 2,
              "three thresholds in one float32 binade: widen BinadeThresholds");

}  // namespace ampscope
