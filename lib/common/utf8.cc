#include "lib/common/utf8.h"

#include <cstdint>

namespace nodelet {
namespace {

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The length of the character at text[i] when it is well-formed (*valid true), otherwise the
// length of the maximal subpart of an ill-formed sequence there (at least 1, *valid false).
// The ranges are those of the Unicode standard's table of well-formed byte sequences.
size_t SequenceAt(std::string_view text, size_t i, bool* valid) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  *valid = true;
  if (b0 < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *valid = false;  // a continuation byte, C0, C1 or F5..FF: never a lead byte
    return 1;
  }
  size_t len = 1;
  for (size_t k = 0; k < need; ++k) {
    if (i + len >= text.size()) break;
    const auto b = static_cast<unsigned char>(text[i + len]);
    const unsigned char min = k == 0 ? lo : 0x80;
    const unsigned char max = k == 0 ? hi : 0xBF;
    if (b < min || b > max) break;
    ++len;
  }
  if (len != need + 1) *valid = false;
  return len;
}

void AppendEscape(std::string& out, unsigned value) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u00";
  out += kHex[(value >> 4) & 0xF];
  out += kHex[value & 0xF];
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    bool valid = false;
    i += SequenceAt(text, i, &valid);
    if (!valid) return false;
  }
  return true;
}

std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    bool valid = false;
    const size_t len = SequenceAt(text, i, &valid);
    if (valid) {
      out.append(text.substr(i, len));
    } else {
      out.append(kReplacementCharacter);
    }
    i += len;
  }
  return out;
}

std::string_view CutUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  // Back from the cut to the lead byte of the character it splits (a character has at most
  // three continuation bytes; more are invalid anyway and the cut stays).
  size_t cut = max_bytes;
  for (int k = 0; k < 3 && cut > 0 && IsContinuation(static_cast<unsigned char>(text[cut])); ++k) {
    --cut;
  }
  if (IsContinuation(static_cast<unsigned char>(text[cut]))) cut = max_bytes;
  return text.substr(0, cut);
}

std::string_view CutUtf8Tail(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t start = text.size() - max_bytes;
  // Past the continuation bytes of a character that began before the cut.
  for (int k = 0;
       k < 3 && start < text.size() && IsContinuation(static_cast<unsigned char>(text[start]));
       ++k) {
    ++start;
  }
  return text.substr(start);
}

std::string EscapeForTerminal(std::string_view text) {
  const std::string valid = ValidUtf8(text);
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto b = static_cast<unsigned char>(valid[i]);
    if (b == '\n' || b == '\t') {
      out += static_cast<char>(b);
    } else if (b == 0x1B) {
      out += "^[";
    } else if (b == '\r') {
      out += "\\r";
    } else if (b < 0x20 || b == 0x7F) {
      AppendEscape(out, b);
    } else if (b == 0xC2 && i + 1 < valid.size() &&
               static_cast<unsigned char>(valid[i + 1]) <= 0x9F) {
      // U+0080..U+009F, the C1 controls (CSI, OSC, ST, ... in one character).
      AppendEscape(out, static_cast<unsigned char>(valid[i + 1]));
      ++i;
    } else {
      out += static_cast<char>(b);
    }
  }
  return out;
}

}  // namespace nodelet
