// Pieces of the Prometheus text exposition format, version 0.0.4: name rules, escaping and number
// formatting. Used by the registry; public so that tests and other exporters agree with it.
#pragma once

#include <string>
#include <string_view>

namespace flashserve::metrics {

// Content-Type of Registry::Expose() output, for the /metrics HTTP handler.
inline constexpr std::string_view kExpositionContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);

// [a-zA-Z_][a-zA-Z0-9_]*, and not starting with "__" (reserved for Prometheus itself).
bool IsValidLabelName(std::string_view name);

// HELP text: backslash -> \\, newline -> \n.
std::string EscapeHelp(std::string_view help);

// Label value: backslash -> \\, double quote -> \", newline -> \n.
std::string EscapeLabelValue(std::string_view value);

// A sample value or `le` bound: shortest text that reads back to the same double ("0.25", "1",
// "1e-05"), and "+Inf", "-Inf", "NaN" for the special values.
std::string FormatValue(double value);

}  // namespace flashserve::metrics
