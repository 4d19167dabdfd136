// RFC 3339 timestamps as the Kubernetes API writes them ("2024-05-01T12:00:00Z",
// "2024-05-01T12:00:00.123456789+02:00"), to and from Unix time: nodelet's one parser and
// formatter of them (the pod model, statuses, the Summary API, CRI log lines, the CLI).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nodelet {

struct UnixTime {
  int64_t seconds = 0;
  int32_t nanos = 0;  // 0..999999999
};

// Parses an RFC 3339 date-time (a zone is required: "Z" or "±hh:mm"; any number of fraction
// digits); nullopt when malformed or out of the years 0001..9999.
std::optional<UnixTime> ParseRfc3339(std::string_view text);
// The same, in Unix nanoseconds; nullopt also outside what 64-bit nanoseconds since 1970 hold
// (the years 1678..2262).
std::optional<int64_t> ParseRfc3339Nanos(std::string_view text);
// "2024-05-01T12:00:00Z" (UTC, whole seconds: Go's time.RFC3339, as metav1.Time serializes).
std::string FormatRfc3339(int64_t unix_seconds);
// "2024-05-01T12:00:00.5Z" (UTC, trailing zeros of the fraction dropped: Go's RFC3339Nano).
std::string FormatRfc3339Nano(UnixTime t);

}  // namespace nodelet
