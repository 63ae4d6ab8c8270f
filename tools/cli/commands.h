// The ampscope subcommands. Each returns the process exit code and throws UsageError (exit 2)
// or reports::ReportError (exit 2) on bad input.
#pragma once

#include <string>
#include <vector>

namespace ampscope::cli {

using Argv = std::vector<std::string>;

/// Exit code for --fail-on-nonfinite when the report shows a non-finite value.
inline constexpr int kExitNonFinite = 3;

int cmd_demo(const Argv& args);
int cmd_summary(const Argv& args);
int cmd_map(const Argv& args);
int cmd_html(const Argv& args);
int cmd_autocast_ops(const Argv& args);
int cmd_merge(const Argv& args);
int cmd_run(const Argv& args);
int cmd_diff(const Argv& args);

}  // namespace ampscope::cli
