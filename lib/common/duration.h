// Durations in Go's time.ParseDuration grammar, the one the kubelet's flags and config take:
// an optional sign, then one or more decimal numbers, each with an optional fraction and a unit
// (ns, us, µs, ms, s, m, h): "300ms", "1m30s", "1h2m3.5s", "1.5h". "0" alone needs no unit;
// any other number does.
#pragma once

#include <chrono>
#include <string>

#include "lib/common/status.h"

namespace nodelet {

// Exactly Go's time.ParseDuration: negative durations included; out of int64 nanoseconds is an
// error.
Result<std::chrono::nanoseconds> ParseGoDuration(const std::string& text);

// What every nodelet flag and config key takes: ParseGoDuration, refusing a negative duration,
// rounded up to whole milliseconds (nodelet's timers count milliseconds; "300us" is 1 ms, not
// 0, which several flags read as "never").
Result<std::chrono::milliseconds> ParseDuration(const std::string& text);

}  // namespace nodelet
