// Private parts of the HTML writer (reports/src/html*.cpp), shared with tests/test_html.cpp.
//
// The document is split in two halves:
// - static, printable HTML rendered here in C++: run summary, verdict banner, recommendations,
//   gradient-range span bars and the loss-scale curve (inline SVG), the what-if table and the
//   per-rank first non-finite table;
// - the interactive parts drawn by one small inline script from an embedded data block: the layer
//   table (tree, sort, filter, details) and the exponent histograms.
//
// The embedded data (`<script type="application/json" id="ampscope-data">`) is a trimmed view of
// the report, schema "ampscope.html-data/1" (html_data below documents every field). It keeps what
// the page draws and drops what it does not (absmax series, shadow details, evidence — the
// evidence is rendered statically). Numbers that are only drawn (absmax) are rounded to 6
// significant digits; every count is exact.
#pragma once

#include <ampscope/reports/report.h>

#include <nlohmann/json.hpp>
#include <string>

namespace ampscope::reports::detail {

/// The trimmed data model the page's script reads. Ops and stats are arrays (positions below)
/// and repeated short strings are indices into "strs", so a 1,000-layer model stays small:
/// ```
/// { "schema": "ampscope.html-data/1", "autocast_dtype": "float16", "world_size": 1,
///   "formats": [ {"name","short","min_sub","min_normal","max_exp","max"} x4 ],  // exponents
///   "strs": ["aten::linear", "forward", "float32", ...],
///   "layers": [ {"name", "type", "ops": [OP, ...], "params": [PARAM, ...]} ],   // report order
///   "agg": {"activations": STATS, "act_grads": STATS, "param_grads": STATS},  // merged
///   "recs": {"<layer>": ["<action>", ...]},
///   "first_nonfinite": EVENT | null, "by_rank": [EVENT, ...] }
/// OP    = [op*, phase*, calls, input_dtype*, compute_dtype*, output_dtype*, autocast*, casts,
///          first_step, last_step, nonfinite_from_finite, STATS, cast_lost] (* index into strs)
///         cast_lost: values its arguments' narrowing casts turned into 0 or inf
/// PARAM = [name, dtype*, updates, STATS (gradients), STATS (values) | null]
/// STATS = [count, nan, posinf, neginf, zeros, absmax, overflow, underflow, subnormal, lo, bins]
///         overflow/underflow/subnormal: [n per format, in the order of "formats"], or 0 when all
///         are 0; bins: dense counts of floor(log2|x|) from exponent lo ([] when none)
/// EVENT = {"rank","step","phase","layer","op","kind","inputs_finite","fp32": true|false|null}
/// ```
nlohmann::json html_data(const Report& report);

/// JSON text that is safe inside a <script> element: `<`, `>`, `&`, U+2028 and U+2029 are
/// written as \u escapes (they only occur inside strings), so nothing can close the element or
/// start a comment; invalid UTF-8 is replaced.
std::string script_safe_json(const nlohmann::json& j);

/// A fresh random nonce (hex) for the page's Content-Security-Policy.
std::string make_nonce();

/// The page's stylesheet (an action's colours from kActionLooks) and its one script (plain
/// JavaScript, no "</script" inside).
const std::string& html_css();
const char* html_js();

// Static sections; each appends one <section> to `out`.
void summary_section(const Report& r, std::string& out);
void verdict_section(const Report& r, std::string& out);
void ranks_section(const Report& r, std::string& out);  ///< empty for single-process reports
void recommendations_section(const Report& r, std::string& out);
void layers_section(const Report& r, std::string& out);  ///< controls; rows come from the script
void histograms_section(const Report& r, std::string& out);  ///< drawn by the script
void gradients_section(const Report& r, std::string& out);   ///< span bars (SVG)
void loss_scale_section(const Report& r, std::string& out);  ///< the curve (SVG)
void what_if_section(const Report& r, std::string& out);

/// "2^e" for axis labels and spans.
std::string pow2_label(int e);

}  // namespace ampscope::reports::detail
