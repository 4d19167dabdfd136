// The manifest decoder's typed getters (FieldDecoder, manifest_decode.h): how a YAML scalar
// reads (null, string, boolean, integer, float), and strings, integers, booleans, quantities,
// ports, times, maps and lists read from an object's fields, with the field errors they raise.
#include "lib/pod/manifest_decode.h"

#include <limits>
#include <utility>

#include "lib/common/rfc3339.h"

namespace nodelet::pod::manifest_internal {
namespace {

bool IsDigitChar(char c) { return c >= '0' && c <= '9'; }

// Parses a YAML integer (decimal, 0x hex, 0o octal, YAML 1.1 0-prefixed octal).
std::optional<__int128> ParseYamlInt(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 40) return std::nullopt;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 2 && s[0] == '0' && s[1] == 'o') {
    base = 8;
    s.remove_prefix(2);
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
  }
  __int128 v = 0;
  for (char c : s) {
    int d;
    if (IsDigitChar(c)) {
      d = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > (static_cast<__int128>(1) << 100)) return std::nullopt;
  }
  return negative ? -v : v;
}

bool LooksLikeFloat(std::string_view s) {
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "-.inf" || s == "+.inf" || s == ".nan" ||
      s == ".NaN" || s == ".NAN" || s == "-.Inf" || s == "+.Inf" || s == "-.INF" || s == "+.INF") {
    return true;
  }
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && IsDigitChar(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigitChar(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && IsDigitChar(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

// How a node is shown in an error: strings quoted, other scalars as written.
std::string Render(const YAML::Node& n) {
  switch (KindOf(n)) {
    case ScalarKind::kNull:
      return "null";
    case ScalarKind::kMap:
      return "{...}";
    case ScalarKind::kSequence:
      return "[...]";
    case ScalarKind::kString:
      return QuoteValue(n.Scalar());
    default: {
      std::string s = n.Scalar().substr(0, 64);
      return s;
    }
  }
}

}  // namespace

ScalarKind KindOf(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return ScalarKind::kNull;
  if (n.IsMap()) return ScalarKind::kMap;
  if (n.IsSequence()) return ScalarKind::kSequence;
  const std::string& tag = n.Tag();
  const std::string& s = n.Scalar();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return ScalarKind::kString;
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE") {
    return ScalarKind::kBool;
  }
  if (ParseYamlInt(s)) return ScalarKind::kInt;
  if (LooksLikeFloat(s)) return ScalarKind::kFloat;
  return ScalarKind::kString;
}

void FieldDecoder::Ignored(const Fields& f, const std::string& path) {
  if (ignored_ == nullptr) return;
  for (const auto& [key, value] : f) {
    if (f.read.count(key) == 0) ignored_->push_back(Child(path, key));
  }
}

std::optional<Fields> FieldDecoder::Object(const YAML::Node& n, const std::string& path) {
  ScalarKind k = KindOf(n);
  if (k == ScalarKind::kNull) return std::nullopt;
  if (k != ScalarKind::kMap) {
    Bad(path, n, "must be an object");
    return std::nullopt;
  }
  Fields fields;
  for (auto it = n.begin(); it != n.end(); ++it) {
    // Copies: the iterator's pair is a temporary proxy.
    YAML::Node key = it->first;
    YAML::Node value = it->second;
    if (!key.IsScalar()) {
      errors_.push_back(FieldError::InvalidRendered(path, Render(key), "keys must be strings"));
      continue;
    }
    if (!fields.emplace(key.Scalar(), value).second) {
      Bad(Child(path, key.Scalar()), value, "duplicate key");
    }
  }
  return fields;
}

const YAML::Node* FieldDecoder::Get(const Fields& f, std::string_view key) {
  f.read.emplace(key);
  auto it = f.find(key);
  if (it == f.end() || KindOf(it->second) == ScalarKind::kNull) return nullptr;
  return &it->second;
}

void FieldDecoder::Bad(const std::string& path, const YAML::Node& n, std::string detail) {
  errors_.push_back(FieldError::InvalidRendered(path, Render(n), std::move(detail)));
}

void FieldDecoder::Forbid(const Fields& f, std::string_view key, const std::string& path,
                          std::string detail) {
  if (Get(f, key)) errors_.push_back(FieldError::Forbidden(Child(path, key), std::move(detail)));
}

void FieldDecoder::ForbidSet(const Fields& f, std::string_view key, const std::string& path,
                             std::string detail) {
  const YAML::Node* n = Get(f, key);
  if (n == nullptr) return;
  ScalarKind k = KindOf(*n);
  bool zero = ((k == ScalarKind::kMap || k == ScalarKind::kSequence) && n->size() == 0) ||
              (k == ScalarKind::kBool && !*BoolValue(*n, path)) ||
              (k == ScalarKind::kString && n->Scalar().empty()) ||
              (k == ScalarKind::kInt && ParseYamlInt(n->Scalar()) == 0);
  if (!zero) errors_.push_back(FieldError::Forbidden(Child(path, key), std::move(detail)));
}

void FieldDecoder::ForbidUnlessDefault(const Fields& f, std::string_view key,
                                       std::string_view default_value, const std::string& path) {
  const YAML::Node* n = Get(f, key);
  if (n == nullptr) return;
  if (KindOf(*n) == ScalarKind::kString && (n->Scalar().empty() || n->Scalar() == default_value)) {
    return;
  }
  errors_.push_back(FieldError::Forbidden(
      Child(path, key),
      std::string(kNotSupportedByNodelet) + " (only " + std::string(default_value) + ")"));
}

bool FieldDecoder::StringValue(const YAML::Node& n, const std::string& path, std::string& out) {
  if (KindOf(n) != ScalarKind::kString) {
    Bad(path, n, "must be a string");
    return false;
  }
  out = n.Scalar();
  return true;
}

void FieldDecoder::Str(const Fields& f, std::string_view key, const std::string& path,
                       std::string& out) {
  if (const YAML::Node* n = Get(f, key)) StringValue(*n, Child(path, key), out);
}

std::optional<__int128> FieldDecoder::IntValue(const YAML::Node& n, const std::string& path,
                                               __int128 lo, __int128 hi, const char* range) {
  ScalarKind k = KindOf(n);
  if (k != ScalarKind::kInt) {
    Bad(path, n, "must be an integer");
    return std::nullopt;
  }
  auto v = ParseYamlInt(n.Scalar());
  if (!v || *v < lo || *v > hi) {
    Bad(path, n, std::string("must fit in ") + range);
    return std::nullopt;
  }
  return v;
}

void FieldDecoder::Int32(const Fields& f, std::string_view key, const std::string& path,
                         int32_t& out) {
  if (const YAML::Node* n = Get(f, key)) {
    if (auto v = IntValue(*n, Child(path, key), std::numeric_limits<int32_t>::min(),
                          std::numeric_limits<int32_t>::max(), "32 bits")) {
      out = static_cast<int32_t>(*v);
    }
  }
}

void FieldDecoder::OptInt32(const Fields& f, std::string_view key, const std::string& path,
                            std::optional<int32_t>& out) {
  if (Get(f, key)) {
    int32_t v = 0;
    size_t before = errors_.size();
    Int32(f, key, path, v);
    if (errors_.size() == before) out = v;
  }
}

void FieldDecoder::OptInt64(const Fields& f, std::string_view key, const std::string& path,
                            std::optional<int64_t>& out) {
  if (const YAML::Node* n = Get(f, key)) {
    if (auto v = IntValue(*n, Child(path, key), std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max(), "64 bits")) {
      out = static_cast<int64_t>(*v);
    }
  }
}

std::optional<bool> FieldDecoder::BoolValue(const YAML::Node& n, const std::string& path) {
  if (KindOf(n) != ScalarKind::kBool) {
    Bad(path, n, "must be a boolean (true or false)");
    return std::nullopt;
  }
  char c = n.Scalar()[0];
  return c == 't' || c == 'T';
}

void FieldDecoder::Bool(const Fields& f, std::string_view key, const std::string& path, bool& out) {
  if (const YAML::Node* n = Get(f, key)) {
    if (auto v = BoolValue(*n, Child(path, key))) out = *v;
  }
}

void FieldDecoder::OptBool(const Fields& f, std::string_view key, const std::string& path,
                           std::optional<bool>& out) {
  if (const YAML::Node* n = Get(f, key)) {
    if (auto v = BoolValue(*n, Child(path, key))) out = *v;
  }
}

void FieldDecoder::List(const Fields& f, std::string_view key, const std::string& path,
                        const std::function<void(const YAML::Node&, const std::string&)>& element) {
  const YAML::Node* n = Get(f, key);
  if (!n) return;
  std::string p = Child(path, key);
  if (KindOf(*n) != ScalarKind::kSequence) {
    Bad(p, *n, "must be a list");
    return;
  }
  size_t i = 0;
  for (auto it = n->begin(); it != n->end(); ++it, ++i) element(*it, Index(p, i));
}

void FieldDecoder::StrList(const Fields& f, std::string_view key, const std::string& path,
                           std::vector<std::string>& out) {
  List(f, key, path, [&](const YAML::Node& n, const std::string& p) {
    std::string s;
    StringValue(n, p, s);
    out.push_back(std::move(s));
  });
}

void FieldDecoder::StrMap(const Fields& f, std::string_view key, const std::string& path,
                          std::map<std::string, std::string>& out) {
  const YAML::Node* n = Get(f, key);
  if (!n) return;
  std::string p = Child(path, key);
  if (auto fields = Object(*n, p)) {
    for (auto& [k, v] : *fields) {
      std::string s;
      if (KindOf(v) != ScalarKind::kNull) StringValue(v, Key(p, k), s);
      out[k] = std::move(s);
    }
  }
}

std::optional<Quantity> FieldDecoder::QuantityValue(const YAML::Node& n, const std::string& path) {
  ScalarKind k = KindOf(n);
  if (k != ScalarKind::kString && k != ScalarKind::kInt && k != ScalarKind::kFloat) {
    Bad(path, n, "must be a quantity (a string or a number)");
    return std::nullopt;
  }
  auto q = Quantity::Parse(n.Scalar());
  if (!q.ok()) {
    errors_.push_back(FieldError::Invalid(path, n.Scalar(), q.status().message()));
    return std::nullopt;
  }
  return *q;
}

void FieldDecoder::OptQuantity(const Fields& f, std::string_view key, const std::string& path,
                               std::optional<Quantity>& out) {
  if (const YAML::Node* n = Get(f, key)) out = QuantityValue(*n, Child(path, key));
}

void FieldDecoder::Resources(const Fields& f, std::string_view key, const std::string& path,
                             ResourceList& out) {
  const YAML::Node* n = Get(f, key);
  if (!n) return;
  std::string p = Child(path, key);
  if (auto fields = Object(*n, p)) {
    for (auto& [name, v] : *fields) {
      if (auto q = QuantityValue(v, Key(p, name))) out[name] = *q;
    }
  }
}

void FieldDecoder::PortRef(const Fields& f, std::string_view key, const std::string& path,
                           IntOrString& out) {
  const YAML::Node* n = Get(f, key);
  if (!n) return;
  std::string p = Child(path, key);
  ScalarKind k = KindOf(*n);
  if (k == ScalarKind::kString) {
    out = IntOrString::String(n->Scalar());
  } else if (auto v = IntValue(*n, p, std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max(), "32 bits")) {
    out = IntOrString::Int(static_cast<int32_t>(*v));
  }
}

void FieldDecoder::Time(const Fields& f, std::string_view key, const std::string& path,
                        std::optional<int64_t>& out) {
  const YAML::Node* n = Get(f, key);
  if (!n) return;
  std::string p = Child(path, key);
  auto t = n->IsScalar() ? ParseRfc3339(n->Scalar()) : std::nullopt;
  if (!t) {
    Bad(p, *n, "must be an RFC 3339 time (e.g. 2006-01-02T15:04:05Z)");
    return;
  }
  out = t->seconds;
}

}  // namespace nodelet::pod::manifest_internal
