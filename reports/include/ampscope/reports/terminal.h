// Model-derived text made safe for a terminal: module, op and parameter names come from code
// nobody here wrote, and an ESC sequence, BEL, a newline or a bidi override in one of them must
// not clear the screen, retitle the window, fake a "Verdict" line or reverse the text after it.
#pragma once

#include <ampscope/reports/report.h>

#include <string>

namespace ampscope::reports {

/// `s` with every control character written as a visible escape: C0 controls (newline and tab
/// included) and DEL as \xNN, C1 controls and bidirectional controls (U+061C, U+200E/F,
/// U+202A-U+202E, U+2066-U+2069) as \uNNNN, bytes that are not UTF-8 as \xNN; a backslash
/// stays as it is. Printable text, non-ASCII letters included, is unchanged.
std::string terminal_safe(const std::string& s);

/// A copy of the report with terminal_safe applied to every string in it (names, types, dtypes,
/// notes, command, reasons, evidence): what summary, diff, verify and fix print from.
Report terminal_safe(const Report& r);

}  // namespace ampscope::reports
