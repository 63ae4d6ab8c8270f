// Value checks on a parsed report: ranges, relations and enums that types alone do not catch
// (negative counts, absmin_nonzero > absmax, rank >= world_size, every 0, duplicate layer
// names, unknown phases/actions/dtypes...). Run by report_from_json after parsing.
#pragma once

#include <ampscope/reports/report.h>

#include <string>

namespace ampscope::reports {

/// Throws ReportError "report.value" with the JSON path of the first bad value
/// ("layers[3].ops[0].stats: absmin_nonzero 5 > absmax 2").
void validate_report(const Report& r);

/// True for the dtype names reports use: "" (none), float32/float16/bfloat16/float64/float8_*,
/// int*/uint8/bool/complex*, their "torch." spellings, and c10's CamelCase names of other
/// scalar types ("ComplexHalf", "QInt8").
bool known_dtype_name(const std::string& d);

}  // namespace ampscope::reports
