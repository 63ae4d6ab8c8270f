// The HTML report writer: the embedded data block is read back out of the page and checked
// against the report model it came from; hostile model strings stay text; the page references
// nothing outside itself; a 1,000-layer report stays under 5 MB. (The page's behaviour in a real
// browser is tests/python/test_html_browser.py.)
#include <ampscope/reports/html.h>
#include <ampscope/reports/merge.h>
#include <ampscope/reports/report.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "html_detail.h"

using namespace ampscope;
using namespace ampscope::reports;
using nlohmann::json;

namespace {

// ----------------------------------------------------------------------------- fixtures

/// Stats with a histogram over [lo, lo + n) whose bin e holds (e - lo + 1) * mult values.
Stats stats_with_hist(int lo, int n, std::int64_t mult, std::int64_t nan = 0,
                      std::int64_t inf = 0) {
  Stats s;
  for (int k = 0; k < n; ++k) s.exp_hist.add(lo + k, (k + 1) * mult);
  s.zeros = 3;
  s.nan = nan;
  s.posinf = inf;
  s.count = s.exp_hist.total() + s.zeros + nan + inf;
  s.absmax = std::ldexp(1.5, lo + n - 1);
  s.absmin_nonzero = std::ldexp(1.0, lo);
  s.overflow = {lo + n > 16 ? mult : 0, 0, 2 * mult, mult};
  s.underflow = {lo < -24 ? mult : 0, 0, 3 * mult, mult};
  s.subnormal = {1, 0, 4, 5};
  return s;
}

OpRecord op(const std::string& name, ampscope::Phase phase, int lo, int n, std::int64_t calls) {
  OpRecord o;
  o.op = name;
  o.phase = phase;
  o.calls = calls;
  o.input_dtype = "float32";
  o.compute_dtype = phase == ampscope::Phase::kBackward ? "float16" : "float16";
  o.output_dtype = "float16";
  o.autocast = ampscope::AutocastClass::kLowerPrecision;
  o.casts = 2 * calls;
  o.first_step = 0;
  o.last_step = 11;
  o.stats = stats_with_hist(lo, n, calls);
  return o;
}

Layer layer(const std::string& name, const std::string& type, int seed) {
  Layer l;
  l.name = name;
  l.type = type;
  l.ops.push_back(op("aten::linear", ampscope::Phase::kForward, -8 + seed % 5, 12, 12 + seed));
  l.ops.push_back(op("AddmmBackward0", ampscope::Phase::kBackward, -30 + seed % 7, 14, 12));
  ParamRecord p;
  p.name = name + ".weight";
  p.dtype = "float32";
  p.updates = 12;
  p.grad = stats_with_hist(-34 + seed % 3, 10, 7);
  l.params.push_back(p);
  return l;
}

Report base_report() {
  Report r;
  r.run.torch_version = "2.11.0";
  r.run.device = "cpu";
  r.run.autocast_dtype = "float16";
  r.run.steps = 12;
  r.run.started = "2026-12-03T08:00:00Z";
  r.run.duration_s = 1.25;
  r.run.command = "ampscope demo --dtype float16";
  Layer root;
  root.name = "";
  root.type = "TinyLM";
  r.layers.push_back(root);
  r.layers.push_back(layer("blocks.0.ffn.wi", "Linear", 1));
  r.layers.push_back(layer("blocks.0.ffn.wo", "Linear", 2));
  r.layers.push_back(layer("head", "Linear", 3));
  Layer outside;
  outside.name = kOutsideLayer;
  outside.ops.push_back(op("aten::cross_entropy_loss", ampscope::Phase::kForward, -2, 3, 12));
  outside.ops.back().stats.overflow = {};  // fits every format: written as 0
  outside.ops.back().stats.underflow = {};
  r.layers.push_back(outside);
  r.loss_scale = {{0, 65536, false}, {1, 32768, true}, {2, 32768, false}, {3, 16384, true}};
  return r;
}

Report nan_report() {
  Report r = base_report();
  r.layers[2].ops[0].nonfinite_from_finite = 1;
  r.layers[2].ops[0].first_nonfinite_step = 7;
  r.layers[2].ops[0].stats.posinf = 5;
  r.layers[2].ops[0].stats.count += 5;
  NonFiniteEvent e;
  e.step = 7;
  e.phase = ampscope::Phase::kForward;
  e.layer = "blocks.0.ffn.wo";
  e.op = "aten::linear";
  e.kind = "inf";
  e.fp32_also_nonfinite = false;
  e.compute_dtype = "float16";
  r.first_nonfinite = e;
  Recommendation rec;
  rec.layer = e.layer;
  rec.action = Action::kPinFp32;
  rec.severity = Severity::kCritical;
  rec.reasons = {"nonfinite_origin", "overflow_float16"};
  rec.evidence = json{{"first_nonfinite", {{"op", "aten::linear"}, {"step", 7}, {"kind", "inf"}}}};
  r.recommendations.push_back(rec);
  return r;
}

/// The text of the embedded data block, exactly as it stands in the page.
std::string data_text(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"ampscope-data\">";
  const std::size_t a = html.find(open);
  EXPECT_NE(a, std::string::npos);
  if (a == std::string::npos) return "{}";
  const std::size_t b = html.find("</script>", a);
  return html.substr(a + open.size(), b - a - open.size());
}

json data_of(const std::string& html) { return json::parse(data_text(html)); }

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

/// The histogram of a STATS array of the data block as exponent -> count (zero bins dropped).
std::map<int, std::int64_t> bins(const json& stats) {
  std::map<int, std::int64_t> out;
  const int lo = stats.at(9).get<int>();
  const json& counts = stats.at(10);
  for (std::size_t k = 0; k < counts.size(); ++k)
    if (auto n = counts[k].get<std::int64_t>(); n != 0) out[lo + static_cast<int>(k)] = n;
  return out;
}

/// A per-format count of a STATS array (written as 0 when all four are 0).
std::int64_t per_format(const json& stats, int field, int format) {
  const json& v = stats.at(field);
  return v.is_array() ? v.at(format).get<std::int64_t>() : v.get<std::int64_t>();
}

std::map<int, std::int64_t> bins(const ExpHist& h) {
  std::map<int, std::int64_t> out;
  if (h.empty()) return out;
  for (int e = h.lo(); e < h.hi(); ++e)
    if (h.at(e) != 0) out[e] = h.at(e);
  return out;
}

void expect_stats_match(const json& j, const Stats& s, const std::string& where) {
  ASSERT_EQ(j.size(), 11u) << where;
  EXPECT_EQ(j[0].get<std::int64_t>(), s.count) << where;
  EXPECT_EQ(j[1].get<std::int64_t>(), s.nan) << where;
  EXPECT_EQ(j[2].get<std::int64_t>(), s.posinf) << where;
  EXPECT_EQ(j[3].get<std::int64_t>(), s.neginf) << where;
  EXPECT_EQ(j[4].get<std::int64_t>(), s.zeros) << where;
  EXPECT_NEAR(j[5].get<double>(), s.absmax, 1e-5 * s.absmax) << where;
  for (int f = 0; f < kNumFormats; ++f) {
    EXPECT_EQ(per_format(j, 6, f), s.overflow[f]) << where << " format " << f;
    EXPECT_EQ(per_format(j, 7, f), s.underflow[f]) << where << " format " << f;
    EXPECT_EQ(per_format(j, 8, f), s.subnormal[f]) << where << " format " << f;
  }
  EXPECT_EQ(bins(j), bins(s.exp_hist)) << where;
}

// ----------------------------------------------------------------------------- data block

TEST(HtmlData, MatchesTheReportItCameFrom) {
  Report r = nan_report();
  // silent-loss records: a cast that lost values, and one parameter's values
  CastLossRecord lost;
  lost.underflow = 5;
  lost.overflow = 2;
  for (Layer& l : r.layers)
    if (!l.ops.empty()) l.ops.front().cast_loss = {lost, lost};
  for (Layer& l : r.layers)
    for (ParamRecord& p : l.params) p.values = p.grad;
  const json d = data_of(render_html(r));
  auto str = [&](const json& i) { return d["strs"].at(i.get<std::size_t>()).get<std::string>(); };
  EXPECT_EQ(d["schema"], "ampscope.html-data/1");
  EXPECT_EQ(d["autocast_dtype"], "float16");
  ASSERT_EQ(d["layers"].size(), r.layers.size());
  for (std::size_t i = 0; i < r.layers.size(); ++i) {
    const Layer& l = r.layers[i];
    const json& jl = d["layers"][i];
    EXPECT_EQ(jl["name"], l.name);
    EXPECT_EQ(jl["type"], l.type);
    ASSERT_EQ(jl["ops"].size(), l.ops.size()) << l.name;
    for (std::size_t k = 0; k < l.ops.size(); ++k) {
      const OpRecord& o = l.ops[k];
      const json& jo = jl["ops"][k];
      ASSERT_EQ(jo.size(), 13u);
      EXPECT_EQ(str(jo[0]), o.op);
      EXPECT_EQ(str(jo[1]), ampscope::name_of(o.phase));
      EXPECT_EQ(jo[2], o.calls);
      EXPECT_EQ(str(jo[3]), o.input_dtype);
      EXPECT_EQ(str(jo[4]), o.compute_dtype);
      EXPECT_EQ(str(jo[5]), o.output_dtype);
      EXPECT_EQ(str(jo[6]), ampscope::name_of(o.autocast));
      EXPECT_EQ(jo[7], o.casts);
      EXPECT_EQ(jo[8], o.first_step);
      EXPECT_EQ(jo[9], o.last_step);
      EXPECT_EQ(jo[10], o.nonfinite_from_finite);
      expect_stats_match(jo[11], o.stats, l.name + "/" + o.op);
      std::int64_t cast_lost = 0;
      for (const auto& c : o.cast_loss) cast_lost += c.underflow + c.overflow;
      EXPECT_EQ(jo[12], cast_lost);
    }
    ASSERT_EQ(jl["params"].size(), l.params.size());
    for (std::size_t k = 0; k < l.params.size(); ++k) {
      const json& jp = jl["params"][k];
      EXPECT_EQ(jp[0], l.params[k].name);
      EXPECT_EQ(str(jp[1]), l.params[k].dtype);
      EXPECT_EQ(jp[2], l.params[k].updates);
      expect_stats_match(jp[3], l.params[k].grad, l.params[k].name);
      expect_stats_match(jp[4], *l.params[k].values, l.params[k].name + " values");
    }
  }
  ASSERT_TRUE(d["first_nonfinite"].is_object());
  EXPECT_EQ(d["first_nonfinite"]["layer"], "blocks.0.ffn.wo");
  EXPECT_EQ(d["first_nonfinite"]["step"], 7);
  EXPECT_EQ(d["first_nonfinite"]["fp32"], false);
  EXPECT_EQ(d["recs"]["blocks.0.ffn.wo"], json::array({"pin_fp32"}));
}

TEST(HtmlData, AggregatesAreTheSumsOfTheirParts) {
  const Report r = nan_report();
  const json d = data_of(render_html(r));
  // Oracle: bin-by-bin sums over the model, independent of ExpHist::merge.
  std::map<int, std::int64_t> grads, params, acts;
  std::int64_t act_nonfinite = 0;
  for (const Layer& l : r.layers) {
    for (const OpRecord& o : l.ops) {
      auto& into = o.phase == ampscope::Phase::kBackward ? grads : acts;
      for (auto [e, n] : bins(o.stats.exp_hist)) into[e] += n;
      if (o.phase != ampscope::Phase::kBackward) act_nonfinite += o.stats.nonfinite();
    }
    for (const ParamRecord& p : l.params)
      for (auto [e, n] : bins(p.grad.exp_hist)) params[e] += n;
  }
  EXPECT_EQ(bins(d["agg"]["act_grads"]), grads);
  EXPECT_EQ(bins(d["agg"]["param_grads"]), params);
  EXPECT_EQ(bins(d["agg"]["activations"]), acts);
  const json& a = d["agg"]["activations"];
  EXPECT_EQ(a[1].get<std::int64_t>() + a[2].get<std::int64_t>() + a[3].get<std::int64_t>(),
            act_nonfinite);
}

TEST(HtmlData, FormatRangesAreTheFormatsOwn) {
  const json d = detail::html_data(base_report());
  ASSERT_EQ(d["formats"].size(), 4u);
  for (const json& f : d["formats"]) {
    // The largest finite value lies in binade max_exp; the smallest subnormal is 2^min_sub.
    EXPECT_EQ(std::ilogb(f["max"].get<double>()), f["max_exp"].get<int>()) << f;
  }
  EXPECT_EQ(d["formats"][0]["min_sub"], -24);  // float16: 2^-24 = 5.96e-8
  EXPECT_EQ(d["formats"][0]["min_normal"], -14);
  EXPECT_EQ(d["formats"][1]["min_sub"], -133);  // bfloat16
  EXPECT_EQ(d["formats"][2]["min_sub"], -9);    // float8_e4m3fn: 2^-9
  EXPECT_EQ(d["formats"][3]["min_sub"], -16);   // float8_e5m2: 2^-16
}

TEST(HtmlData, ScriptSafeJsonCannotCloseItsElement) {
  const json j = {{"a", "</script><script>alert(1)</script>"},
                  {"b", "x\xE2\x80\xA8y\xE2\x80\xA9z"},
                  {"c", "<!-- & -->"},
                  {"d", "bad \xFF utf8"}};
  const std::string s = detail::script_safe_json(j);
  for (const char* bad : {"<", ">", "&", "\xE2\x80\xA8", "\xE2\x80\xA9"})
    EXPECT_EQ(s.find(bad), std::string::npos) << bad;
  const json back = json::parse(s);
  EXPECT_EQ(back["a"], j["a"]);
  EXPECT_EQ(back["b"], j["b"]);
  EXPECT_EQ(back["c"], j["c"]);
  EXPECT_TRUE(back["d"].is_string());  // invalid UTF-8 replaced, not thrown
}

// ----------------------------------------------------------------------------- safety

TEST(HtmlSafety, Escape) {
  EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(html_escape("plain.name_1"), "plain.name_1");
  EXPECT_EQ(html_escape(""), "");
  EXPECT_EQ(html_escape("</script>"), "&lt;/script&gt;");
}

const std::string kImg = "<img src=x onerror=document.title='pwned'>";
const std::string kScript = "</script><script>window.__pwned=1</script>";

Report hostile_report() {
  Report r = nan_report();
  r.run.command = "python " + kImg;
  r.run.device = kScript;
  r.run.notes = {kImg, "\"quoted\" 'single'"};
  r.layers[1].name = kImg;
  r.layers[1].type = kScript;
  r.layers[1].ops[0].op = kScript;
  r.layers[1].ops[0].input_dtype = "'\"><b>";
  r.layers[1].params[0].name = kImg + ".weight";
  r.layers[3].name = "a\"b'c</SCRIPT >\xE2\x80\xA8";
  r.first_nonfinite->layer = kImg;
  r.first_nonfinite->op = kScript;
  r.recommendations[0].layer = kImg;
  r.recommendations[0].reasons = {kScript};
  r.recommendations[0].evidence = json{{"op", kImg}, {"note", kScript}};
  return r;
}

TEST(HtmlSafety, HostileNamesStayText) {
  const Report r = hostile_report();
  const std::string html = render_html(r);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("'\"><b>"), std::string::npos);
  EXPECT_EQ(html.find("window.__pwned=1</"), std::string::npos);
  // Exactly the page's own two script elements, opened and closed once each.
  EXPECT_EQ(count(html, "<script"), 2u);
  EXPECT_EQ(count(html, "</script"), 2u);
  std::string lower = html;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(count(lower, "</script"), 2u);
  EXPECT_NE(html.find("&lt;img src=x onerror=document.title=&#39;pwned&#39;&gt;"),
            std::string::npos);
  // The data block holds the names exactly, yet no '<' at all.
  EXPECT_EQ(data_text(html).find('<'), std::string::npos);
  const json d = data_of(html);
  EXPECT_EQ(d["layers"][1]["name"], kImg);
  EXPECT_EQ(d["layers"][1]["type"], kScript);
  EXPECT_EQ(d["strs"][d["layers"][1]["ops"][0][0].get<std::size_t>()], kScript);
  EXPECT_EQ(d["layers"][3]["name"], r.layers[3].name);
  EXPECT_EQ(d["first_nonfinite"]["layer"], kImg);
}

TEST(HtmlSafety, NothingOutsideTheFileAndAPolicyThatSaysSo) {
  const std::string html = render_html(hostile_report());
  // Every src/href attribute points inside the page (#anchor) or is inline data.
  const std::regex attr(R"re(\s(src|href)\s*=\s*"([^"]*)")re", std::regex::icase);
  int refs = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), attr); it != std::sregex_iterator();
       ++it) {
    const std::string v = (*it)[2];
    EXPECT_TRUE(v.rfind("#", 0) == 0 || v.rfind("data:", 0) == 0) << v;
    ++refs;
  }
  EXPECT_GT(refs, 0);
  const std::smatch m = [&] {
    std::smatch s;
    std::regex_search(html, s, std::regex(R"(script-src 'nonce-([0-9a-f]{32})')"));
    return s;
  }();
  ASSERT_FALSE(m.empty());
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(html.find("<script nonce=\"" + m[1].str() + "\">"), std::string::npos);
  const std::string again = render_html(hostile_report());
  EXPECT_EQ(again.find("'nonce-" + m[1].str() + "'"), std::string::npos)
      << "a fresh nonce per file";
}

TEST(HtmlSafety, TheScriptCannotEndItsOwnElement) {
  std::string js = detail::html_js();
  for (char& c : js) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(js.find("</script"), std::string::npos);
  EXPECT_EQ(js.find("<!--"), std::string::npos);
  EXPECT_EQ(js.find("innerhtml"), std::string::npos);  // model strings go in as text only
  EXPECT_EQ(js.find("eval("), std::string::npos);
}

// ----------------------------------------------------------------------------- sections

TEST(HtmlSections, EverySectionOfTheContract) {
  const std::string html = render_html(nan_report());
  for (const char* id : {"summary", "verdict", "recommendations", "layers", "histograms",
                         "gradients", "loss-scale", "what-if"})
    EXPECT_NE(html.find(std::string("<section id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_EQ(html.find("id=\"ranks\""), std::string::npos);  // one process: no rank selector
  EXPECT_NE(html.find("id=\"layer-table\""), std::string::npos);
  EXPECT_NE(html.find("id=\"layer-filter\""), std::string::npos);
}

TEST(HtmlSections, VerdictSaysPrecisionProblemOrModelBug) {
  Report r = nan_report();
  std::string html = render_html(r);
  EXPECT_NE(html.find("banner bad"), std::string::npos);
  EXPECT_NE(html.find("First harmful non-finite value (inf) at step 7"), std::string::npos);
  EXPECT_NE(html.find("Precision problem"), std::string::npos);
  r.first_nonfinite->fp32_also_nonfinite = true;
  html = render_html(r);
  EXPECT_NE(html.find("Fix the model.</b> Re-run in float32 on the same inputs"), std::string::npos);
  EXPECT_EQ(html.find("Precision problem"), std::string::npos);
  Report clean = base_report();
  html = render_html(clean);
  EXPECT_NE(html.find("banner clean"), std::string::npos);
  EXPECT_NE(html.find("Clean: no harmful NaN or Inf in 12 step(s)"), std::string::npos);
  EXPECT_NE(html.find("None: nothing in this run needs a precision change"), std::string::npos);
}

TEST(HtmlSections, RecommendationsInRankOrderWithEvidence) {
  Report r = nan_report();
  Recommendation second;
  second.layer = "";
  second.action = Action::kLossScaling;
  second.severity = Severity::kHigh;
  second.reasons = {"grad_underflow_float16"};
  second.evidence =
      json{{"gradients", {{"share_lost", 0.25}, {"format", "float16"}, {"suggested_scale", 1024}}}};
  r.recommendations.push_back(second);
  const std::string html = render_html(r);
  const std::size_t body = html.find("<body");  // (the stylesheet names every action)
  const std::size_t a = html.find("act-pin_fp32", body), b = html.find("act-loss_scaling", body);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_NE(
      html.find("25% of gradient values underflow/subnormal in float16, suggested loss scale 1024"),
      std::string::npos);
  EXPECT_NE(html.find("grad_underflow_float16"), std::string::npos);
}

TEST(HtmlSections, PowersOfTwoReadAsSuperscripts) {
  EXPECT_EQ(detail::pow2_label(-24), "2⁻²⁴");
  EXPECT_EQ(detail::pow2_label(0), "2⁰");
  EXPECT_EQ(detail::pow2_label(15), "2¹⁵");
  EXPECT_EQ(detail::pow2_label(-130), "2⁻¹³⁰");
}

TEST(HtmlSections, LossScaleCurveMarksEverySkippedStep) {
  const Report r = base_report();
  const std::string html = render_html(r);
  std::size_t found_inf = 0;
  for (const LossScalePoint& p : r.loss_scale) found_inf += p.found_inf ? 1 : 0;
  EXPECT_EQ(count(html, "<g class=\"skip\">"), found_inf);
  EXPECT_NE(html.find("<b>2 skipped step(s)</b>"), std::string::npos);
  EXPECT_NE(html.find("Skipped at step 1, 3."), std::string::npos);
  Report none = base_report();
  none.loss_scale.clear();
  EXPECT_NE(render_html(none).find("No loss scaler seen"), std::string::npos);
}

TEST(HtmlSections, GradientSpansComeFromTheHistograms) {
  const Report r = base_report();
  const std::string html = render_html(r);
  // head: backward op bins [-30+3%7, +14) merged with its weight grad bins [-34+0, +10).
  const Layer& head = r.layers[3];
  ExpHist g = head.ops[1].stats.exp_hist;
  g.merge(head.params[0].grad.exp_hist);
  const std::string want =
      "gradients: " + detail::pow2_label(g.lo()) + " … " + detail::pow2_label(g.hi());
  EXPECT_NE(html.find(want), std::string::npos) << want;
  // One row per layer with data (the root has none): 4 labels.
  EXPECT_EQ(count(html, "<text class=\"label\""), 4u);
}

TEST(HtmlSections, RankSelectorForMergedReports) {
  Report r = nan_report();
  r.run.world_size = 4;
  NonFiniteEvent e1 = *r.first_nonfinite, e3 = *r.first_nonfinite;
  e1.rank = 1;
  e3.rank = 3;
  e3.step = 9;
  e3.layer = "head";
  r.first_nonfinite_by_rank = {e1, e3};
  r.run.notes.push_back(std::string(kMergedNote) + "4 rank reports");
  const std::string html = render_html(r);
  EXPECT_NE(html.find("<section id=\"ranks\">"), std::string::npos);
  EXPECT_NE(html.find("id=\"rank-select\""), std::string::npos);
  EXPECT_EQ(count(html, "<option value=\"") - 8, 5u);  // "all" + ranks 0..3 (8: two format selects)
  EXPECT_NE(html.find("<tr data-rank=\"3\">"), std::string::npos);
  EXPECT_NE(html.find("2 of 4 rank(s) saw no non-finite value"), std::string::npos);
  const json d = data_of(html);
  ASSERT_EQ(d["by_rank"].size(), 2u);
  EXPECT_EQ(d["by_rank"][1]["rank"], 3);
  EXPECT_EQ(d["by_rank"][1]["layer"], "head");
}

TEST(HtmlSections, ARanksOwnReportSpeaksForItselfOnly) {
  // Rank 1's report of a 2-rank run that went NaN: not "2 of 2 ranks saw no non-finite value".
  Report r = nan_report();
  r.run.world_size = 2;
  r.run.rank = 1;
  std::string html = render_html(r);
  EXPECT_EQ(html.find("rank(s) saw no non-finite value"), std::string::npos);
  EXPECT_NE(html.find("This is the report of rank 1 of 2: it saw a non-finite value"), std::string::npos);
  r.first_nonfinite.reset();
  html = render_html(r);
  EXPECT_NE(html.find("This is the report of rank 1 of 2: it saw no non-finite value"), std::string::npos);
}

TEST(HtmlSections, WhatIfListsRiskyLayersFirst) {
  const std::string html = render_html(nan_report());
  const std::size_t table = html.find("<section id=\"what-if\"");
  ASSERT_NE(table, std::string::npos);
  // Every layer's float8_e4m3fn counts overflow in this fixture (overflow[2] > 0).
  EXPECT_NE(html.find("wv-overflow", table), std::string::npos);
}

// ----------------------------------------------------------------------------- scale

TEST(HtmlScale, ThousandLayersUnderFiveMegabytes) {
  Report r = base_report();
  r.layers.clear();
  Layer root;
  root.type = "Big";
  r.layers.push_back(root);
  for (int b = 0; b < 250; ++b) {
    for (const char* leaf : {"attn.qkv", "attn.out", "ffn.wi", "ffn.wo"}) {
      Layer l = layer("blocks." + std::to_string(b) + "." + leaf, "Linear", b);
      l.ops.push_back(op("aten::gelu", ampscope::Phase::kForward, -12, 20, 12));
      l.ops.push_back(op("GeluBackward0", ampscope::Phase::kBackward, -40, 26, 12));
      ParamRecord bias = l.params[0];
      bias.name = l.name + ".bias";
      l.params.push_back(bias);
      r.layers.push_back(std::move(l));
    }
  }
  ASSERT_GE(r.layers.size(), 1000u);
  const std::string html = render_html(r);
  EXPECT_LT(html.size(), 5u * 1024 * 1024) << html.size();
  const json d = data_of(html);
  EXPECT_EQ(d["layers"].size(), r.layers.size());
  EXPECT_EQ(d["layers"][1000]["ops"].size(), 4u);
  // The static span chart is capped; the page says so.
  EXPECT_NE(html.find("Showing the 150 of 1000 layers"), std::string::npos);
  std::printf("1,000-layer report: %zu bytes, data block %zu\n", html.size(),
              data_text(html).size());
}

}  // namespace

TEST(HtmlSections, EveryActionHasItsColourAndChip) {
  const std::string& css = detail::html_css();
  for (std::string_view name : kActionNames) {
    EXPECT_NE(css.find(".act-" + std::string(name) + "{color:"), std::string::npos) << name;
    EXPECT_NE(css.find(".chip." + std::string(name) + "{background:"), std::string::npos) << name;
  }
}
