// Quantity: a Kubernetes resource quantity ("100m", "0.5", "64Mi", "1G", "1e3"), parsed exactly
// as the API server's apimachinery parser does, held as an exact count of nano-units.
//
// Grammar (apimachinery's):
//   quantity  ::= signedNumber suffix
//   number    ::= digits | digits "." digits | digits "." | "." digits
//   suffix    ::= "" | binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (n u m k M G T P E)
//               | ("e" | "E") signed integer
// Precision below 1n is rounded away from zero to 1n, as apimachinery does. Unlike apimachinery
// (which uses arbitrary precision), values whose magnitude reaches 2^63 are rejected as too
// large: no pod resource can use them and every accessor stays exact.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lib/common/status.h"

namespace nodelet::pod {

class Quantity {
 public:
  // The regular expression the API server names in its error message.
  static constexpr std::string_view kFormatRegex = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

  Quantity() = default;  // zero, written "0"

  // Parses `text`; the error's message is the reason only (the caller names the field).
  static Result<Quantity> Parse(std::string_view text);
  // An exact integer quantity (e.g. bytes), written in decimal.
  static Quantity FromValue(int64_t value);
  static Quantity FromMilli(int64_t milli_value);

  // The text as written in the manifest (kept so conversions round-trip byte for byte).
  const std::string& text() const { return text_; }

  // The value in thousandths, rounded up (away from zero); saturates at the int64 range.
  int64_t MilliValue() const;
  // The value as an integer (e.g. bytes for memory), rounded up (away from zero).
  int64_t Value() const;
  // The exact value in units of 10^-9.
  __int128 Nanos() const { return nanos_; }
  // The exact value in units of 10^-9, as a decimal string (for canonical encodings).
  std::string NanosString() const;

  bool IsZero() const { return nanos_ == 0; }
  bool IsNegative() const { return nanos_ < 0; }
  // <0, 0, >0 as this value is below, equal to or above `other` (by value, not text).
  int Compare(const Quantity& other) const;

  // Equal text and value (what a round trip must preserve).
  bool operator==(const Quantity& other) const = default;

 private:
  Quantity(std::string text, __int128 nanos) : text_(std::move(text)), nanos_(nanos) {}

  std::string text_ = "0";
  __int128 nanos_ = 0;
};

}  // namespace nodelet::pod
