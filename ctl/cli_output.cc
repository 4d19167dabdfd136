#include "ctl/cli_output.h"

#include <cctype>
#include <cstdio>

#include "lib/common/json_text.h"
#include "lib/common/utf8.h"

namespace nodelet::ctl {
namespace {

// YAML 1.1 and 1.2 read these plain scalars as something other than a string.
bool ReadsAsNonString(std::string_view s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view word : {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n",
                                ".inf", "-.inf", "+.inf", ".nan"}) {
    if (lower == word) return true;
  }
  // Numbers, dates and times (2026-01-02, 1:30) all start with a digit, a sign or a dot.
  const char first = s.front();
  return std::isdigit(static_cast<unsigned char>(first)) || first == '-' || first == '+' ||
         first == '.';
}

// A plain scalar of only these characters, not starting or ending with a space, is read back as
// the same string (no indicator, no ": " or " #").
bool IsPlainSafe(std::string_view s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ' || ReadsAsNonString(s)) return false;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                    c == '/' || c == '-' || c == ' ' || c == '(' || c == ')' || c == '+' ||
                    c == ';';
    if (!ok) return false;
  }
  return true;
}

// Decodes one code point of valid UTF-8 at `i` and advances it.
uint32_t NextCodePoint(const std::string& s, size_t* i) {
  const auto b = static_cast<unsigned char>(s[*i]);
  int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += static_cast<size_t>(len);
  return cp;
}

std::string Quoted(std::string_view raw) {
  const std::string s = ValidUtf8(raw);
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodePoint(s, &i);
    char buf[16];
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\t':
        out += "\\t";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) {
      std::snprintf(buf, sizeof buf, "\\x%02X", cp);
      out += buf;
    } else if (cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF) {
      std::snprintf(buf, sizeof buf, "\\u%04X", cp);
      out += buf;
    } else {
      out.append(s, start, i - start);
    }
  }
  return out + "\"";
}

std::string Scalar(const nlohmann::json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return IsPlainSafe(s) ? s : Quoted(s);
  }
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  return JsonText(v);  // null, true, false, numbers
}

bool IsBlock(const nlohmann::json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

void Emit(const nlohmann::json& v, size_t indent, std::string* out);

// The text of `v` at `indent`, with its first line's indentation replaced by "- " at
// `indent - 2` (an item of a sequence).
void EmitItem(const nlohmann::json& v, size_t indent, std::string* out) {
  std::string body;
  Emit(v, indent, &body);
  *out += std::string(indent - 2, ' ') + "- " + body.substr(indent);
}

void Emit(const nlohmann::json& v, size_t indent, std::string* out) {
  const std::string pad(indent, ' ');
  if (v.is_object() && !v.empty()) {
    for (const auto& [key, value] : v.items()) {
      *out += pad + Scalar(nlohmann::json(key)) + ":";
      if (value.is_object() && !value.empty()) {
        *out += "\n";
        Emit(value, indent + 2, out);
      } else if (value.is_array() && !value.empty()) {
        *out += "\n";
        Emit(value, indent, out);  // a sequence under a key at the key's indentation
      } else {
        *out += " " + Scalar(value) + "\n";
      }
    }
  } else if (v.is_array() && !v.empty()) {
    for (const auto& item : v) {
      if (IsBlock(item)) {
        EmitItem(item, indent + 2, out);
      } else {
        *out += pad + "- " + Scalar(item) + "\n";
      }
    }
  } else {
    *out += pad + Scalar(v) + "\n";
  }
}

}  // namespace

std::ostream& Error(std::ostream& err) { return err << kErrorPrefix; }

Result<OutputFormat> ParseOutputFormat(std::string_view value) {
  if (value.empty()) return OutputFormat::kTable;
  if (value == "wide") return OutputFormat::kWide;
  if (value == "json") return OutputFormat::kJson;
  if (value == "yaml") return OutputFormat::kYaml;
  if (value == "name") return OutputFormat::kName;
  return InvalidArgument("unknown output format '" + std::string(value) +
                         "' (known: json, yaml, wide, name)");
}

bool ParseOutputOrExplain(std::string_view value, OutputFormat* format, std::ostream& err) {
  auto parsed = ParseOutputFormat(value);
  if (!parsed.ok()) {
    Error(err) << parsed.status().message() << "\n";
    return false;
  }
  *format = *parsed;
  return true;
}

std::string YamlText(const nlohmann::json& doc) {
  std::string out;
  Emit(doc, 0, &out);
  return out;
}

bool PrintDocument(OutputFormat format, const nlohmann::json& doc, std::ostream& out,
                   int json_indent) {
  if (format == OutputFormat::kJson) {
    out << JsonText(doc, json_indent) << "\n";
    return true;
  }
  if (format == OutputFormat::kYaml) {
    out << YamlText(doc);
    return true;
  }
  return false;
}

void PrintNames(const std::vector<std::string>& names, std::ostream& out) {
  for (const auto& n : names) out << n << "\n";
}

}  // namespace nodelet::ctl
