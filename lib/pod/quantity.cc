#include "lib/pod/quantity.h"

#include <algorithm>
#include <limits>

namespace nodelet::pod {
namespace {

constexpr __int128 kNanosPerUnit = 1000000000;
// Magnitudes must stay below 2^63 units, i.e. 2^63 * 10^9 nano-units.
constexpr __int128 kMaxNanosExclusive = (static_cast<__int128>(1) << 63) * kNanosPerUnit;
// Exponents beyond this make every non-zero value too large or round it to 1n.
constexpr int64_t kExponentClamp = 1000000;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

Status FormatError(std::string_view detail) {
  std::string m = "quantities must match the regular expression '";
  m += Quantity::kFormatRegex;
  m += "'";
  if (!detail.empty()) m += " (" + std::string(detail) + ")";
  return InvalidArgument(m);
}

std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// True when `s` matches [eEinumkKMGTP]*[-+]?[0-9]* (the suffix part of the API's regex).
bool MatchesSuffixPattern(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && std::string_view("eEinumkKMGTP").find(s[i]) != std::string_view::npos) ++i;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  while (i < s.size() && IsDigit(s[i])) ++i;
  return i == s.size();
}

struct Scale {
  int64_t exp10 = 0;
  int exp2 = 0;
};

Result<Scale> ParseSuffix(std::string_view suffix) {
  if (suffix.empty()) return Scale{};
  if (suffix.size() == 1) {
    switch (suffix[0]) {
      case 'n':
        return Scale{-9, 0};
      case 'u':
        return Scale{-6, 0};
      case 'm':
        return Scale{-3, 0};
      case 'k':
        return Scale{3, 0};
      case 'M':
        return Scale{6, 0};
      case 'G':
        return Scale{9, 0};
      case 'T':
        return Scale{12, 0};
      case 'P':
        return Scale{15, 0};
      case 'E':
        return Scale{18, 0};
      default:
        break;
    }
  }
  if (suffix.size() == 2 && suffix[1] == 'i') {
    switch (suffix[0]) {
      case 'K':
        return Scale{0, 10};
      case 'M':
        return Scale{0, 20};
      case 'G':
        return Scale{0, 30};
      case 'T':
        return Scale{0, 40};
      case 'P':
        return Scale{0, 50};
      case 'E':
        return Scale{0, 60};
      default:
        break;
    }
  }
  if (suffix[0] == 'e' || suffix[0] == 'E') {
    size_t i = 1;
    bool negative = false;
    if (i < suffix.size() && (suffix[i] == '+' || suffix[i] == '-')) {
      negative = suffix[i] == '-';
      ++i;
    }
    if (i < suffix.size()) {
      int64_t exp = 0;
      size_t j = i;
      for (; j < suffix.size() && IsDigit(suffix[j]); ++j) {
        exp = std::min<int64_t>(exp * 10 + (suffix[j] - '0'), kExponentClamp);
      }
      if (j == suffix.size()) return Scale{negative ? -exp : exp, 0};
    }
  }
  if (!MatchesSuffixPattern(suffix)) {
    return FormatError("cannot parse \"" + Printable(suffix) + "\" after the number");
  }
  return InvalidArgument("unable to parse quantity's suffix \"" + Printable(suffix) + "\"");
}

// digits (decimal, most significant first) *= factor, factor <= 2^60.
void MultiplyDecimal(std::string& digits, uint64_t factor) {
  unsigned __int128 carry = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    unsigned __int128 v = static_cast<unsigned __int128>(digits[i] - '0') * factor + carry;
    digits[i] = static_cast<char>('0' + static_cast<int>(v % 10));
    carry = v / 10;
  }
  std::string prefix;
  while (carry > 0) {
    prefix.push_back(static_cast<char>('0' + static_cast<int>(carry % 10)));
    carry /= 10;
  }
  std::reverse(prefix.begin(), prefix.end());
  digits.insert(0, prefix);
}

int64_t SaturateDivRoundUp(__int128 nanos, __int128 divisor) {
  __int128 mag = nanos < 0 ? -nanos : nanos;
  __int128 q = mag / divisor + (mag % divisor != 0 ? 1 : 0);
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  if (q > kMax) q = nanos < 0 ? kMax + 1 : kMax;
  return static_cast<int64_t>(nanos < 0 ? -q : q);
}

std::string Int128ToString(__int128 v) {
  if (v == 0) return "0";
  bool negative = v < 0;
  unsigned __int128 mag =
      negative ? static_cast<unsigned __int128>(-(v + 1)) + 1 : static_cast<unsigned __int128>(v);
  std::string out;
  while (mag > 0) {
    out.push_back(static_cast<char>('0' + static_cast<int>(mag % 10)));
    mag /= 10;
  }
  if (negative) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

Result<Quantity> Quantity::Parse(std::string_view text) {
  if (text.empty()) return FormatError("empty quantity");
  size_t pos = 0;
  bool negative = false;
  if (text[0] == '+' || text[0] == '-') {
    negative = text[0] == '-';
    ++pos;
  }
  size_t int_start = pos;
  while (pos < text.size() && IsDigit(text[pos])) ++pos;
  std::string_view int_digits = text.substr(int_start, pos - int_start);
  std::string_view frac_digits;
  if (pos < text.size() && text[pos] == '.') {
    size_t frac_start = ++pos;
    while (pos < text.size() && IsDigit(text[pos])) ++pos;
    frac_digits = text.substr(frac_start, pos - frac_start);
  }
  if (int_digits.empty() && frac_digits.empty()) {
    return FormatError(pos < text.size()
                           ? "no digits before \"" + Printable(text.substr(pos)) + "\""
                           : "no digits");
  }
  auto scale = ParseSuffix(text.substr(pos));
  if (!scale.ok()) return scale.status();

  std::string digits;
  digits.reserve(int_digits.size() + frac_digits.size());
  digits.append(int_digits);
  digits.append(frac_digits);
  int64_t exp10 = scale->exp10 - static_cast<int64_t>(frac_digits.size()) + 9;
  size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return Quantity(std::string(text), 0);
  digits.erase(0, first);
  while (digits.back() == '0') {
    digits.pop_back();
    ++exp10;
  }
  if (scale->exp2 > 0) MultiplyDecimal(digits, uint64_t{1} << scale->exp2);

  // nanos = digits * 10^exp10, rounded away from zero to an integer.
  const int64_t int_len = static_cast<int64_t>(digits.size()) + exp10;
  Status too_large = InvalidArgument("quantity is too large (its magnitude must be below 2^63)");
  if (int_len > 28) return too_large;
  __int128 nanos = 0;
  for (int64_t i = 0; i < int_len; ++i) {
    nanos = nanos * 10 + (i < static_cast<int64_t>(digits.size()) ? digits[i] - '0' : 0);
  }
  if (int_len < static_cast<int64_t>(digits.size())) nanos += 1;  // non-zero digits remain
  if (nanos >= kMaxNanosExclusive) return too_large;
  return Quantity(std::string(text), negative ? -nanos : nanos);
}

Quantity Quantity::FromValue(int64_t value) {
  return Quantity(std::to_string(value), static_cast<__int128>(value) * kNanosPerUnit);
}

Quantity Quantity::FromMilli(int64_t milli_value) {
  std::string text = milli_value % 1000 == 0 ? std::to_string(milli_value / 1000)
                                             : std::to_string(milli_value) + "m";
  return Quantity(std::move(text), static_cast<__int128>(milli_value) * 1000000);
}

int64_t Quantity::MilliValue() const { return SaturateDivRoundUp(nanos_, 1000000); }

int64_t Quantity::Value() const { return SaturateDivRoundUp(nanos_, kNanosPerUnit); }

std::string Quantity::NanosString() const { return Int128ToString(nanos_); }

int Quantity::Compare(const Quantity& other) const {
  return nanos_ < other.nanos_ ? -1 : (nanos_ > other.nanos_ ? 1 : 0);
}

}  // namespace nodelet::pod
