#include "lib/common/duration.h"

#include <cstdint>
#include <string_view>

namespace nodelet {
namespace {

constexpr uint64_t kMaxMagnitude = uint64_t{1} << 63;  // |INT64_MIN|

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The nanoseconds in one `unit`, 0 when it is not one.
uint64_t UnitNanos(std::string_view unit) {
  if (unit == "ns") return 1;
  if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") return 1'000;  // µ, μ
  if (unit == "ms") return 1'000'000;
  if (unit == "s") return 1'000'000'000;
  if (unit == "m") return 60 * uint64_t{1'000'000'000};
  if (unit == "h") return 3600 * uint64_t{1'000'000'000};
  return 0;
}

Status Invalid(const std::string& text, const std::string& why) {
  return InvalidArgument("'" + text + "' is not a duration: " + why +
                         " (Go's grammar: e.g. 300ms, 2s, 1m30s, 1h2m3.5s; units ns, us, ms, s, "
                         "m, h)");
}

}  // namespace

Result<std::chrono::nanoseconds> ParseGoDuration(const std::string& text) {
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return std::chrono::nanoseconds(0);
  if (s.empty()) return Invalid(text, "it is empty");
  uint64_t total = 0;
  while (!s.empty()) {
    if (!(s[0] == '.' || IsDigit(s[0]))) return Invalid(text, "a number must come first");
    // The integer part; overflow is an error.
    uint64_t whole = 0;
    size_t i = 0;
    for (; i < s.size() && IsDigit(s[i]); ++i) {
      if (whole > (kMaxMagnitude - 1) / 10) return Invalid(text, "it is too large");
      whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
      if (whole > kMaxMagnitude) return Invalid(text, "it is too large");
    }
    bool has_whole = i > 0;
    s.remove_prefix(i);
    // The fraction: digits past what fits are read and dropped, as Go does.
    uint64_t fraction = 0;
    double scale = 1;
    bool has_fraction = false;
    if (!s.empty() && s[0] == '.') {
      s.remove_prefix(1);
      bool overflowed = false;
      for (i = 0; i < s.size() && IsDigit(s[i]); ++i) {
        if (overflowed) continue;
        if (fraction > (kMaxMagnitude - 1) / 10) {
          overflowed = true;
          continue;
        }
        uint64_t next = fraction * 10 + static_cast<uint64_t>(s[i] - '0');
        if (next > kMaxMagnitude) {
          overflowed = true;
          continue;
        }
        fraction = next;
        scale *= 10;
      }
      has_fraction = i > 0;
      s.remove_prefix(i);
    }
    if (!has_whole && !has_fraction) return Invalid(text, "a '.' needs digits");
    size_t unit_len = 0;
    while (unit_len < s.size() && s[unit_len] != '.' && !IsDigit(s[unit_len])) ++unit_len;
    if (unit_len == 0) {
      return Invalid(text,
                     "a unit is missing (only 0 may go without one; the bare number of "
                     "milliseconds of older nodelets is no longer taken)");
    }
    std::string_view unit = s.substr(0, unit_len);
    s.remove_prefix(unit_len);
    uint64_t nanos = UnitNanos(unit);
    if (nanos == 0) return Invalid(text, "unknown unit '" + std::string(unit) + "'");
    if (whole > kMaxMagnitude / nanos) return Invalid(text, "it is too large");
    uint64_t value = whole * nanos;
    if (fraction > 0) {
      value += static_cast<uint64_t>(static_cast<double>(fraction) *
                                     (static_cast<double>(nanos) / scale));
      if (value > kMaxMagnitude) return Invalid(text, "it is too large");
    }
    total += value;
    if (total > kMaxMagnitude) return Invalid(text, "it is too large");
  }
  if (negative) {
    // -2^63 fits; its magnitude does not fit as a positive int64.
    return std::chrono::nanoseconds(total == kMaxMagnitude ? INT64_MIN
                                                           : -static_cast<int64_t>(total));
  }
  if (total > kMaxMagnitude - 1) return Invalid(text, "it is too large");
  return std::chrono::nanoseconds(static_cast<int64_t>(total));
}

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  auto d = ParseGoDuration(text);
  if (!d.ok()) return d.status();
  if (d->count() < 0) {
    return InvalidArgument("'" + text + "' is negative: a duration here must be 0 or more");
  }
  return std::chrono::ceil<std::chrono::milliseconds>(*d);
}

}  // namespace nodelet
