// libampscope_preload.so: profiles an unmodified LibTorch program. Loaded with LD_PRELOAD (as
// `ampscope run` does), it starts a Session when the program loads and writes the reports into
// $AMPSCOPE_OUT when it exits normally. Without LayerScopes in the program, every op is
// attributed to "<outside>" (LibTorch modules have no hooks); dtypes, stats, the first
// non-finite op and its FP32 re-check are all still recorded.
#include <ampscope/hooks/session.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace {

struct PreloadedSession {
  std::unique_ptr<ampscope::Session> session;
  PreloadedSession() {
    const char* out = std::getenv("AMPSCOPE_OUT");
    if (!out || !*out) return;
    ampscope::SessionOptions o;
    o.out_dir = out;
    if (const char* every = std::getenv("AMPSCOPE_EVERY")) o.every = std::max(1, std::atoi(every));
    if (const char* cmd = std::getenv("AMPSCOPE_COMMAND")) o.command = cmd;
    if (const char* shadow = std::getenv("AMPSCOPE_SHADOW")) o.shadow = std::string(shadow) == "1";
    if (const char* in = std::getenv("AMPSCOPE_INPUT_STATS")) o.input_stats = std::string(in) == "1";
    auto patterns = [](const char* env) {
      const char* v = std::getenv(env);
      return v ? ampscope::split_patterns(v) : std::vector<std::string>{};
    };
    o.layers = {patterns("AMPSCOPE_INCLUDE"), patterns("AMPSCOPE_EXCLUDE"), true};
    o.ops = {patterns("AMPSCOPE_OPS"), patterns("AMPSCOPE_EXCLUDE_OPS"), false};
    try {
      session = std::make_unique<ampscope::Session>(o);
      session->start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ampscope: error: cannot start profiling: %s\n", e.what());
      session.reset();
    }
  }
  ~PreloadedSession() {
    if (!session) return;
    try {
      session->stop();
      std::fprintf(stderr, "ampscope: wrote %s/report.json\n", std::getenv("AMPSCOPE_OUT"));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ampscope: error: cannot write the report: %s\n", e.what());
    }
  }
};

PreloadedSession g_preloaded;

}  // namespace
