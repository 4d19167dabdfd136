#include "lib/pod/manifest_parser.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "lib/common/fs.h"
#include "lib/pod/rfc3339.h"

namespace nodelet::pod {
namespace {

// ---------------------------------------------------------------------------------------------
// Text checks and document splitting.

// Why `content` is not acceptable text, or empty. Allows tab, LF, CR and valid UTF-8.
std::string CheckText(std::string_view content) {
  static const char kHex[] = "0123456789abcdef";
  auto byte = [&](unsigned char c) { return std::string("0x") + kHex[c >> 4] + kHex[c & 15]; };
  size_t i = 0;
  while (i < content.size()) {
    unsigned char c = static_cast<unsigned char>(content[i]);
    if (c == 0) {
      return "not a text file: it contains a NUL byte at offset " + std::to_string(i);
    }
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      return "not a text file: control byte " + byte(c) + " at offset " + std::to_string(i);
    }
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return "not UTF-8 text: invalid byte " + byte(c) + " at offset " + std::to_string(i);
    }
    if (i + len > content.size()) {
      return "not UTF-8 text: truncated sequence at offset " + std::to_string(i);
    }
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(content[i + k]);
      if ((cc & 0xc0) != 0x80) {
        return "not UTF-8 text: invalid byte " + byte(cc) + " at offset " + std::to_string(i + k);
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return "not UTF-8 text: invalid sequence at offset " + std::to_string(i);
    }
    i += len;
  }
  return {};
}

struct Piece {
  std::string text;
  int first_line = 0;  // 0-based line of the piece's first line in the file
};

bool IsMarker(std::string_view line, std::string_view marker) {
  return line.size() >= 3 && line.substr(0, 3) == marker &&
         (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r' ||
          line[3] == '\n');
}

enum class LineKind { kContent, kBlankOrComment, kDirective, kDocumentEnd };

LineKind Classify(std::string_view line) {
  if (IsMarker(line, "...")) return LineKind::kDocumentEnd;
  if (!line.empty() && line[0] == '%') return LineKind::kDirective;
  size_t first = line.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || line[first] == '#') return LineKind::kBlankOrComment;
  return LineKind::kContent;
}

// Splits at document markers: a piece starts at a "---" line and ends after a "..." line
// (markers may not appear at column 0 inside any YAML scalar), so each piece holds at most one
// document and a syntax error in one document does not hide the others. A piece of only
// blank lines, comments, directives and "..." is dropped, or, when it holds a directive,
// joined to the next piece (with its "..." lines blanked, keeping line numbers).
std::vector<Piece> SplitDocuments(std::string_view content) {
  std::vector<Piece> raw;
  auto open_piece = [&](int line_no) { raw.push_back({std::string(), line_no}); };
  bool ended = true;  // the current piece is closed (or none is open)
  int line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t eol = content.find('\n', pos);
    size_t next = eol == std::string_view::npos ? content.size() : eol + 1;
    std::string_view line = content.substr(pos, next - pos);
    if (IsMarker(line, "---") || ended) {
      open_piece(line_no);
      ended = false;
    }
    raw.back().text.append(line);
    if (IsMarker(line, "...")) ended = true;
    pos = next;
    ++line_no;
  }
  std::vector<Piece> pieces;
  std::string carried;  // directives waiting for the next piece
  int carried_line = 0;
  for (Piece& piece : raw) {
    bool content_found = false;
    bool directive_found = false;
    std::string blanked;
    size_t p = 0;
    while (p < piece.text.size()) {
      size_t eol = piece.text.find('\n', p);
      size_t next = eol == std::string::npos ? piece.text.size() : eol + 1;
      std::string_view line = std::string_view(piece.text).substr(p, next - p);
      LineKind kind = Classify(line);
      if (kind == LineKind::kContent || IsMarker(line, "---")) content_found = true;
      if (kind == LineKind::kDirective) directive_found = true;
      blanked += kind == LineKind::kDocumentEnd ? std::string("\n") : std::string(line);
      p = next;
    }
    if (!content_found) {
      if (directive_found) {
        if (carried.empty()) carried_line = piece.first_line;
        carried += blanked;
      }
      continue;
    }
    if (!carried.empty()) {
      piece.text = carried + piece.text;
      piece.first_line = carried_line;
      carried.clear();
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

// Counts a piece's documents without building nodes.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { last_start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark last_start;
};

// Parses a piece (one document at most) into a node; throws yaml-cpp's exceptions, or returns
// the reason when content follows the document. The document count is bounded by hand:
// yaml-cpp 0.7's LoadAll loops forever, allocating, on input such as "{}\n,".
std::string LoadPiece(const Piece& piece, YAML::Node& out) {
  {
    std::istringstream stream(piece.text);
    YAML::Parser parser(stream);
    DocumentCounter counter;
    if (!parser.HandleNextDocument(counter)) return {};  // no document
    if (parser.HandleNextDocument(counter)) {
      return "line " + std::to_string(piece.first_line + counter.last_start.line + 1) +
             ", column " + std::to_string(counter.last_start.column + 1) +
             ": YAML syntax error: unexpected content after the end of the document";
    }
  }
  out = YAML::Load(piece.text);
  return {};
}

// ---------------------------------------------------------------------------------------------
// Limits.

// Why `root` exceeds the depth or node limits, or empty.
std::string CheckNodeLimits(const YAML::Node& root, const ManifestLimits& limits) {
  // Nodes are counted when they are pushed, so the stack itself stays within the budget even
  // when an alias fans out to thousands of nodes.
  std::vector<std::pair<YAML::Node, size_t>> stack;
  size_t counted = 0;
  auto push = [&](const YAML::Node& n, size_t depth) {
    if (++counted > limits.max_nodes) return false;
    stack.emplace_back(n, depth);
    return true;
  };
  const std::string too_many = "the document has more than " + std::to_string(limits.max_nodes) +
                               " nodes (aliases count each time they are used)";
  push(root, 1);
  while (!stack.empty()) {
    auto [node, depth] = std::move(stack.back());
    stack.pop_back();
    if (depth > limits.max_depth) {
      return "the document nests deeper than " + std::to_string(limits.max_depth) + " levels";
    }
    if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!push(it->first, depth + 1) || !push(it->second, depth + 1)) return too_many;
      }
    } else if (node.IsSequence()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!push(*it, depth + 1)) return too_many;
      }
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Scalars.

enum class ScalarKind { kNull, kString, kBool, kInt, kFloat, kMap, kSequence };

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

constexpr char kNotSupportedByNodelet[] = "not supported by nodelet";

// ---------------------------------------------------------------------------------------------
// The Pod decoder. Collects FieldErrors and keeps going, so one pass reports every problem.

// An object's fields by key, and the keys the decoder asked for (what is left was ignored).
struct Fields : std::map<std::string, YAML::Node, std::less<>> {
  mutable std::set<std::string, std::less<>> read;
};

class PodDecoder {
 public:
  explicit PodDecoder(FieldErrors& errors, std::vector<std::string>* ignored = nullptr)
      : errors_(errors), ignored_(ignored) {}

  // Records the fields of `f` that no decoder asked for (fields nodelet does not know, or v1
  // fields it accepts and ignores as the kubelet does for a static pod).
  void Ignored(const Fields& f, const std::string& path) {
    if (ignored_ == nullptr) return;
    for (const auto& [key, value] : f) {
      if (f.read.count(key) == 0) ignored_->push_back(Child(path, key));
    }
  }

  // A mapping's fields by key; nullopt (with an error unless null) when `n` is not a mapping.
  std::optional<Fields> Object(const YAML::Node& n, const std::string& path) {
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

  static const YAML::Node* Get(const Fields& f, std::string_view key) {
    f.read.emplace(key);
    auto it = f.find(key);
    if (it == f.end() || KindOf(it->second) == ScalarKind::kNull) return nullptr;
    return &it->second;
  }

  void Bad(const std::string& path, const YAML::Node& n, std::string detail) {
    errors_.push_back(FieldError::InvalidRendered(path, Render(n), std::move(detail)));
  }

  void Forbid(const Fields& f, std::string_view key, const std::string& path,
              std::string detail = kNotSupportedByNodelet) {
    if (Get(f, key)) errors_.push_back(FieldError::Forbidden(Child(path, key), std::move(detail)));
  }

  // Refuses `key` when it is set to anything but its zero value (false, 0, "", {} or []), which
  // would change what runs.
  void ForbidSet(const Fields& f, std::string_view key, const std::string& path,
                 std::string detail = kNotSupportedByNodelet) {
    const YAML::Node* n = Get(f, key);
    if (n == nullptr) return;
    ScalarKind k = KindOf(*n);
    bool zero = ((k == ScalarKind::kMap || k == ScalarKind::kSequence) && n->size() == 0) ||
                (k == ScalarKind::kBool && !*BoolValue(*n, path)) ||
                (k == ScalarKind::kString && n->Scalar().empty()) ||
                (k == ScalarKind::kInt && ParseYamlInt(n->Scalar()) == 0);
    if (!zero) errors_.push_back(FieldError::Forbidden(Child(path, key), std::move(detail)));
  }

  // Refuses a string field set to anything but its default (or empty).
  void ForbidUnlessDefault(const Fields& f, std::string_view key, std::string_view default_value,
                           const std::string& path) {
    const YAML::Node* n = Get(f, key);
    if (n == nullptr) return;
    if (KindOf(*n) == ScalarKind::kString &&
        (n->Scalar().empty() || n->Scalar() == default_value)) {
      return;
    }
    errors_.push_back(FieldError::Forbidden(
        Child(path, key),
        std::string(kNotSupportedByNodelet) + " (only " + std::string(default_value) + ")"));
  }

  bool StringValue(const YAML::Node& n, const std::string& path, std::string& out) {
    if (KindOf(n) != ScalarKind::kString) {
      Bad(path, n, "must be a string");
      return false;
    }
    out = n.Scalar();
    return true;
  }

  void Str(const Fields& f, std::string_view key, const std::string& path, std::string& out) {
    if (const YAML::Node* n = Get(f, key)) StringValue(*n, Child(path, key), out);
  }

  std::optional<__int128> IntValue(const YAML::Node& n, const std::string& path, __int128 lo,
                                   __int128 hi, const char* range) {
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

  void Int32(const Fields& f, std::string_view key, const std::string& path, int32_t& out) {
    if (const YAML::Node* n = Get(f, key)) {
      if (auto v = IntValue(*n, Child(path, key), std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max(), "32 bits")) {
        out = static_cast<int32_t>(*v);
      }
    }
  }

  void OptInt32(const Fields& f, std::string_view key, const std::string& path,
                std::optional<int32_t>& out) {
    if (Get(f, key)) {
      int32_t v = 0;
      size_t before = errors_.size();
      Int32(f, key, path, v);
      if (errors_.size() == before) out = v;
    }
  }

  void OptInt64(const Fields& f, std::string_view key, const std::string& path,
                std::optional<int64_t>& out) {
    if (const YAML::Node* n = Get(f, key)) {
      if (auto v = IntValue(*n, Child(path, key), std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), "64 bits")) {
        out = static_cast<int64_t>(*v);
      }
    }
  }

  std::optional<bool> BoolValue(const YAML::Node& n, const std::string& path) {
    if (KindOf(n) != ScalarKind::kBool) {
      Bad(path, n, "must be a boolean (true or false)");
      return std::nullopt;
    }
    char c = n.Scalar()[0];
    return c == 't' || c == 'T';
  }

  void Bool(const Fields& f, std::string_view key, const std::string& path, bool& out) {
    if (const YAML::Node* n = Get(f, key)) {
      if (auto v = BoolValue(*n, Child(path, key))) out = *v;
    }
  }

  void OptBool(const Fields& f, std::string_view key, const std::string& path,
               std::optional<bool>& out) {
    if (const YAML::Node* n = Get(f, key)) {
      if (auto v = BoolValue(*n, Child(path, key))) out = *v;
    }
  }

  // Calls `element(node, path)` for each element of a list.
  void List(const Fields& f, std::string_view key, const std::string& path,
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

  template <typename T>
  void ObjectList(const Fields& f, std::string_view key, const std::string& path,
                  std::vector<T>& out,
                  void (PodDecoder::*decode)(const Fields&, const std::string&, T&)) {
    List(f, key, path, [&](const YAML::Node& n, const std::string& p) {
      T item{};
      if (KindOf(n) == ScalarKind::kNull) {
        Bad(p, n, "must be an object");
      } else if (auto fields = Object(n, p)) {
        (this->*decode)(*fields, p, item);
        Ignored(*fields, p);
      }
      out.push_back(std::move(item));
    });
  }

  void StrList(const Fields& f, std::string_view key, const std::string& path,
               std::vector<std::string>& out) {
    List(f, key, path, [&](const YAML::Node& n, const std::string& p) {
      std::string s;
      StringValue(n, p, s);
      out.push_back(std::move(s));
    });
  }

  void StrMap(const Fields& f, std::string_view key, const std::string& path,
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

  std::optional<Quantity> QuantityValue(const YAML::Node& n, const std::string& path) {
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

  void OptQuantity(const Fields& f, std::string_view key, const std::string& path,
                   std::optional<Quantity>& out) {
    if (const YAML::Node* n = Get(f, key)) out = QuantityValue(*n, Child(path, key));
  }

  void Resources(const Fields& f, std::string_view key, const std::string& path,
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

  void PortRef(const Fields& f, std::string_view key, const std::string& path, IntOrString& out) {
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

  void Time(const Fields& f, std::string_view key, const std::string& path,
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

  template <typename T>
  void Sub(const Fields& f, std::string_view key, const std::string& path, std::optional<T>& out,
           void (PodDecoder::*decode)(const Fields&, const std::string&, T&)) {
    const YAML::Node* n = Get(f, key);
    if (!n) return;
    std::string p = Child(path, key);
    if (auto fields = Object(*n, p)) {
      T value{};
      (this->*decode)(*fields, p, value);
      Ignored(*fields, p);
      out = std::move(value);
    }
  }

  // --- v1 types ---

  void Meta(const Fields& f, const std::string& p, ObjectMeta& m) {
    Str(f, "name", p, m.name);
    Str(f, "namespace", p, m.namespace_name);
    Str(f, "uid", p, m.uid);
    StrMap(f, "labels", p, m.labels);
    StrMap(f, "annotations", p, m.annotations);
    Time(f, "creationTimestamp", p, m.creation_timestamp);
    Time(f, "deletionTimestamp", p, m.deletion_timestamp);
    OptInt64(f, "deletionGracePeriodSeconds", p, m.deletion_grace_period_seconds);
  }

  void KeyRef(const Fields& f, const std::string& p, KeySelector& k) {
    Str(f, "name", p, k.name);
    Str(f, "key", p, k.key);
    OptBool(f, "optional", p, k.optional);
  }

  void EnvSource(const Fields& f, const std::string& p, EnvVarSource& v) {
    Sub(f, "fieldRef", p, v.field_ref, &PodDecoder::FieldRef);
    Sub(f, "resourceFieldRef", p, v.resource_field_ref, &PodDecoder::ResourceFieldRef);
    Sub(f, "configMapKeyRef", p, v.config_map_key_ref, &PodDecoder::KeyRef);
    Sub(f, "secretKeyRef", p, v.secret_key_ref, &PodDecoder::KeyRef);
    Forbid(f, "fileKeyRef", p);
  }

  void Env(const Fields& f, const std::string& p, EnvVar& e) {
    Str(f, "name", p, e.name);
    Str(f, "value", p, e.value);
    Sub(f, "valueFrom", p, e.value_from, &PodDecoder::EnvSource);
  }

  void EnvFromRefFields(const Fields& f, const std::string& p, EnvFromRef& r) {
    Str(f, "name", p, r.name);
    OptBool(f, "optional", p, r.optional);
  }

  void EnvFrom(const Fields& f, const std::string& p, EnvFromSource& e) {
    Str(f, "prefix", p, e.prefix);
    Sub(f, "configMapRef", p, e.config_map_ref, &PodDecoder::EnvFromRefFields);
    Sub(f, "secretRef", p, e.secret_ref, &PodDecoder::EnvFromRefFields);
  }

  void Port(const Fields& f, const std::string& p, ContainerPort& port) {
    Str(f, "name", p, port.name);
    Int32(f, "containerPort", p, port.container_port);
    Str(f, "protocol", p, port.protocol);
    Int32(f, "hostPort", p, port.host_port);
    Str(f, "hostIP", p, port.host_ip);
  }

  void HostAliasFields(const Fields& f, const std::string& p, HostAlias& a) {
    Str(f, "ip", p, a.ip);
    StrList(f, "hostnames", p, a.hostnames);
  }

  // A LocalObjectReference: only its name.
  void ReferenceName(const Fields& f, const std::string& p, std::string& name) {
    Str(f, "name", p, name);
  }

  void DnsOption(const Fields& f, const std::string& p, PodDnsConfigOption& o) {
    Str(f, "name", p, o.name);
    if (const YAML::Node* n = Get(f, "value")) {
      std::string v;
      if (StringValue(*n, Child(p, "value"), v)) o.value = std::move(v);
    }
  }

  void DnsConfig(const Fields& f, const std::string& p, PodDnsConfig& d) {
    StrList(f, "nameservers", p, d.nameservers);
    StrList(f, "searches", p, d.searches);
    ObjectList(f, "options", p, d.options, &PodDecoder::DnsOption);
  }

  void Mount(const Fields& f, const std::string& p, VolumeMount& m) {
    Str(f, "name", p, m.name);
    Str(f, "mountPath", p, m.mount_path);
    Bool(f, "readOnly", p, m.read_only);
    Str(f, "subPath", p, m.sub_path);
    Forbid(f, "subPathExpr", p);
    ForbidUnlessDefault(f, "mountPropagation", "None", p);
    ForbidUnlessDefault(f, "recursiveReadOnly", "Disabled", p);
  }

  void Exec(const Fields& f, const std::string& p, ExecAction& e) {
    StrList(f, "command", p, e.command);
  }

  void Header(const Fields& f, const std::string& p, HttpHeader& h) {
    Str(f, "name", p, h.name);
    Str(f, "value", p, h.value);
  }

  void HttpGet(const Fields& f, const std::string& p, HttpGetAction& h) {
    Str(f, "host", p, h.host);
    PortRef(f, "port", p, h.port);
    Str(f, "path", p, h.path);
    Str(f, "scheme", p, h.scheme);
    ObjectList(f, "httpHeaders", p, h.http_headers, &PodDecoder::Header);
  }

  void TcpSocket(const Fields& f, const std::string& p, TcpSocketAction& t) {
    Str(f, "host", p, t.host);
    PortRef(f, "port", p, t.port);
  }

  void Grpc(const Fields& f, const std::string& p, GrpcAction& g) {
    Int32(f, "port", p, g.port);
    Str(f, "service", p, g.service);
  }

  void ProbeFields(const Fields& f, const std::string& p, Probe& probe) {
    Sub(f, "exec", p, probe.exec, &PodDecoder::Exec);
    Sub(f, "httpGet", p, probe.http_get, &PodDecoder::HttpGet);
    Sub(f, "tcpSocket", p, probe.tcp_socket, &PodDecoder::TcpSocket);
    Sub(f, "grpc", p, probe.grpc, &PodDecoder::Grpc);
    Int32(f, "initialDelaySeconds", p, probe.initial_delay_seconds);
    Int32(f, "periodSeconds", p, probe.period_seconds);
    Int32(f, "timeoutSeconds", p, probe.timeout_seconds);
    Int32(f, "successThreshold", p, probe.success_threshold);
    Int32(f, "failureThreshold", p, probe.failure_threshold);
    ForbidSet(f, "terminationGracePeriodSeconds", p);
  }

  void Sleep(const Fields& f, const std::string& p, SleepAction& s) {
    if (const YAML::Node* n = Get(f, "seconds")) {
      if (auto v = IntValue(*n, Child(p, "seconds"), std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), "64 bits")) {
        s.seconds = static_cast<int64_t>(*v);
      }
    }
  }

  void Handler(const Fields& f, const std::string& p, LifecycleHandler& h) {
    Sub(f, "exec", p, h.exec, &PodDecoder::Exec);
    Sub(f, "httpGet", p, h.http_get, &PodDecoder::HttpGet);
    Sub(f, "sleep", p, h.sleep, &PodDecoder::Sleep);
    Forbid(f, "tcpSocket", p,
           "not supported as a lifecycle handler (the kubelet keeps the field only for backward "
           "compatibility and fails the hook)");
  }

  void LifecycleFields(const Fields& f, const std::string& p, Lifecycle& l) {
    Sub(f, "postStart", p, l.post_start, &PodDecoder::Handler);
    Sub(f, "preStop", p, l.pre_stop, &PodDecoder::Handler);
    Forbid(f, "stopSignal", p);
  }

  void Caps(const Fields& f, const std::string& p, Capabilities& c) {
    StrList(f, "add", p, c.add);
    StrList(f, "drop", p, c.drop);
  }

  void Profile(const Fields& f, const std::string& p, SecurityProfile& s) {
    Str(f, "type", p, s.type);
    Str(f, "localhostProfile", p, s.localhost_profile);
  }

  void Security(const Fields& f, const std::string& p, SecurityContext& s) {
    OptInt64(f, "runAsUser", p, s.run_as_user);
    OptInt64(f, "runAsGroup", p, s.run_as_group);
    OptBool(f, "runAsNonRoot", p, s.run_as_non_root);
    OptBool(f, "privileged", p, s.privileged);
    OptBool(f, "readOnlyRootFilesystem", p, s.read_only_root_filesystem);
    OptBool(f, "allowPrivilegeEscalation", p, s.allow_privilege_escalation);
    Sub(f, "capabilities", p, s.capabilities, &PodDecoder::Caps);
    Sub(f, "seccompProfile", p, s.seccomp_profile, &PodDecoder::Profile);
    Sub(f, "appArmorProfile", p, s.app_armor_profile, &PodDecoder::Profile);
    Str(f, "procMount", p, s.proc_mount);
    ForbidSet(f, "seLinuxOptions", p, "not supported by nodelet (the node has no SELinux)");
    ForbidSet(f, "windowsOptions", p, "not supported by nodelet (a Linux node)");
  }

  void SysctlFields(const Fields& f, const std::string& p, Sysctl& s) {
    Str(f, "name", p, s.name);
    Str(f, "value", p, s.value);
  }

  void PodSecurity(const Fields& f, const std::string& p, PodSecurityContext& s) {
    OptInt64(f, "runAsUser", p, s.run_as_user);
    OptInt64(f, "runAsGroup", p, s.run_as_group);
    OptBool(f, "runAsNonRoot", p, s.run_as_non_root);
    OptInt64(f, "fsGroup", p, s.fs_group);
    Str(f, "fsGroupChangePolicy", p, s.fs_group_change_policy);
    List(f, "supplementalGroups", p, [&](const YAML::Node& n, const std::string& ip) {
      if (auto v = IntValue(n, ip, 0, std::numeric_limits<int64_t>::max(), "64 bits")) {
        s.supplemental_groups.push_back(static_cast<int64_t>(*v));
      }
    });
    ObjectList(f, "sysctls", p, s.sysctls, &PodDecoder::SysctlFields);
    Sub(f, "seccompProfile", p, s.seccomp_profile, &PodDecoder::Profile);
    Sub(f, "appArmorProfile", p, s.app_armor_profile, &PodDecoder::Profile);
    ForbidUnlessDefault(f, "supplementalGroupsPolicy", "Merge", p);
    ForbidSet(f, "seLinuxOptions", p, "not supported by nodelet (the node has no SELinux)");
    ForbidSet(f, "seLinuxChangePolicy", p, "not supported by nodelet (the node has no SELinux)");
    ForbidSet(f, "windowsOptions", p, "not supported by nodelet (a Linux node)");
  }

  void ContainerFields(const Fields& f, const std::string& p, Container& c) {
    Str(f, "name", p, c.name);
    Str(f, "image", p, c.image);
    Str(f, "imagePullPolicy", p, c.image_pull_policy);
    StrList(f, "command", p, c.command);
    StrList(f, "args", p, c.args);
    Str(f, "workingDir", p, c.working_dir);
    ObjectList(f, "env", p, c.env, &PodDecoder::Env);
    ObjectList(f, "envFrom", p, c.env_from, &PodDecoder::EnvFrom);
    ObjectList(f, "ports", p, c.ports, &PodDecoder::Port);
    if (const YAML::Node* r = Get(f, "resources")) {
      std::string rp = Child(p, "resources");
      if (auto rf = Object(*r, rp)) {
        Resources(*rf, "requests", rp, c.resources.requests);
        Resources(*rf, "limits", rp, c.resources.limits);
        Forbid(*rf, "claims", rp);
        Ignored(*rf, rp);
      }
    }
    ObjectList(f, "volumeMounts", p, c.volume_mounts, &PodDecoder::Mount);
    Sub(f, "livenessProbe", p, c.liveness_probe, &PodDecoder::ProbeFields);
    Sub(f, "readinessProbe", p, c.readiness_probe, &PodDecoder::ProbeFields);
    Sub(f, "startupProbe", p, c.startup_probe, &PodDecoder::ProbeFields);
    Sub(f, "securityContext", p, c.security_context, &PodDecoder::Security);
    Str(f, "terminationMessagePath", p, c.termination_message_path);
    Str(f, "terminationMessagePolicy", p, c.termination_message_policy);
    Sub(f, "lifecycle", p, c.lifecycle, &PodDecoder::LifecycleFields);
    Bool(f, "stdin", p, c.stdin);
    Bool(f, "stdinOnce", p, c.stdin_once);
    Bool(f, "tty", p, c.tty);
    for (const char* key : {"volumeDevices", "restartPolicy"}) {
      ForbidSet(f, key, p);
    }
  }

  void KeyPath(const Fields& f, const std::string& p, KeyToPath& k) {
    Str(f, "key", p, k.key);
    Str(f, "path", p, k.path);
    OptInt32(f, "mode", p, k.mode);
  }

  void EmptyDir(const Fields& f, const std::string& p, EmptyDirVolumeSource& e) {
    Str(f, "medium", p, e.medium);
    OptQuantity(f, "sizeLimit", p, e.size_limit);
  }

  void HostPath(const Fields& f, const std::string& p, HostPathVolumeSource& h) {
    Str(f, "path", p, h.path);
    Str(f, "type", p, h.type);
  }

  void ConfigMap(const Fields& f, const std::string& p, ConfigMapVolumeSource& c) {
    Str(f, "name", p, c.name);
    ObjectList(f, "items", p, c.items, &PodDecoder::KeyPath);
    OptInt32(f, "defaultMode", p, c.default_mode);
    OptBool(f, "optional", p, c.optional);
  }

  void Secret(const Fields& f, const std::string& p, SecretVolumeSource& s) {
    Str(f, "secretName", p, s.secret_name);
    ObjectList(f, "items", p, s.items, &PodDecoder::KeyPath);
    OptInt32(f, "defaultMode", p, s.default_mode);
    OptBool(f, "optional", p, s.optional);
  }

  void FieldRef(const Fields& f, const std::string& p, ObjectFieldSelector& s) {
    Str(f, "apiVersion", p, s.api_version);
    Str(f, "fieldPath", p, s.field_path);
  }

  void ResourceFieldRef(const Fields& f, const std::string& p, ResourceFieldSelector& s) {
    Str(f, "containerName", p, s.container_name);
    Str(f, "resource", p, s.resource);
    OptQuantity(f, "divisor", p, s.divisor);
  }

  void DownwardFile(const Fields& f, const std::string& p, DownwardApiVolumeFile& d) {
    Str(f, "path", p, d.path);
    Sub(f, "fieldRef", p, d.field_ref, &PodDecoder::FieldRef);
    Sub(f, "resourceFieldRef", p, d.resource_field_ref, &PodDecoder::ResourceFieldRef);
    OptInt32(f, "mode", p, d.mode);
  }

  void DownwardApi(const Fields& f, const std::string& p, DownwardApiVolumeSource& d) {
    ObjectList(f, "items", p, d.items, &PodDecoder::DownwardFile);
    OptInt32(f, "defaultMode", p, d.default_mode);
  }

  void VolumeFields(const Fields& f, const std::string& p, Volume& v) {
    Str(f, "name", p, v.name);
    Sub(f, "emptyDir", p, v.empty_dir, &PodDecoder::EmptyDir);
    Sub(f, "hostPath", p, v.host_path, &PodDecoder::HostPath);
    Sub(f, "configMap", p, v.config_map, &PodDecoder::ConfigMap);
    Sub(f, "secret", p, v.secret, &PodDecoder::Secret);
    Sub(f, "downwardAPI", p, v.downward_api, &PodDecoder::DownwardApi);
    static const char* const kUnsupportedSources[] = {"awsElasticBlockStore",
                                                      "azureDisk",
                                                      "azureFile",
                                                      "cephfs",
                                                      "cinder",
                                                      "csi",
                                                      "ephemeral",
                                                      "fc",
                                                      "flexVolume",
                                                      "flocker",
                                                      "gcePersistentDisk",
                                                      "gitRepo",
                                                      "glusterfs",
                                                      "image",
                                                      "iscsi",
                                                      "nfs",
                                                      "persistentVolumeClaim",
                                                      "photonPersistentDisk",
                                                      "portworxVolume",
                                                      "projected",
                                                      "quobyte",
                                                      "rbd",
                                                      "scaleIO",
                                                      "storageos",
                                                      "vsphereVolume"};
    for (const char* key : kUnsupportedSources) {
      Forbid(f, key, p,
             "volume type not supported by nodelet (supported: emptyDir, hostPath, configMap, "
             "secret, downwardAPI)");
    }
  }

  void Spec(const Fields& f, const std::string& p, PodSpec& s) {
    ObjectList(f, "initContainers", p, s.init_containers, &PodDecoder::ContainerFields);
    ObjectList(f, "containers", p, s.containers, &PodDecoder::ContainerFields);
    ObjectList(f, "volumes", p, s.volumes, &PodDecoder::VolumeFields);
    Str(f, "restartPolicy", p, s.restart_policy);
    OptInt64(f, "terminationGracePeriodSeconds", p, s.termination_grace_period_seconds);
    OptInt64(f, "activeDeadlineSeconds", p, s.active_deadline_seconds);
    Bool(f, "hostNetwork", p, s.host_network);
    Str(f, "nodeName", p, s.node_name);
    Str(f, "runtimeClassName", p, s.runtime_class_name);
    Str(f, "serviceAccountName", p, s.service_account_name);
    Bool(f, "hostPID", p, s.host_pid);
    Bool(f, "hostIPC", p, s.host_ipc);
    OptBool(f, "shareProcessNamespace", p, s.share_process_namespace);
    Sub(f, "securityContext", p, s.security_context, &PodDecoder::PodSecurity);
    Str(f, "hostname", p, s.hostname);
    Str(f, "subdomain", p, s.subdomain);
    OptBool(f, "setHostnameAsFQDN", p, s.set_hostname_as_fqdn);
    ObjectList(f, "hostAliases", p, s.host_aliases, &PodDecoder::HostAliasFields);
    Str(f, "dnsPolicy", p, s.dns_policy);
    Sub(f, "dnsConfig", p, s.dns_config, &PodDecoder::DnsConfig);
    Str(f, "priorityClassName", p, s.priority_class_name);
    ObjectList(f, "imagePullSecrets", p, s.image_pull_secrets, &PodDecoder::ReferenceName);
    for (const char* key : {"ephemeralContainers", "resourceClaims", "resources"}) {
      ForbidSet(f, key, p);
    }
    // hostUsers: true is the default (the node's user namespace); false asks for a user
    // namespace of the pod's own.
    if (const YAML::Node* h = Get(f, "hostUsers")) {
      if (auto v = BoolValue(*h, Child(p, "hostUsers")); v && !*v) {
        errors_.push_back(FieldError::Forbidden(Child(p, "hostUsers"),
                                                "false is not supported by nodelet (no user "
                                                "namespaces)"));
      }
    }
  }

  void PodFields(const Fields& f, Pod& pod) {
    if (const YAML::Node* m = Get(f, "metadata")) {
      if (auto mf = Object(*m, "metadata")) {
        Meta(*mf, "metadata", pod.metadata);
        Ignored(*mf, "metadata");
      }
    }
    if (const YAML::Node* s = Get(f, "spec")) {
      if (auto sf = Object(*s, "spec")) {
        Spec(*sf, "spec", pod.spec);
        Ignored(*sf, "spec");
      }
    } else {
      errors_.push_back(FieldError::Required("spec"));
    }
    // A pod's status is the node's to write: what a manifest says there is dropped, as the API
    // server drops it on create, without a warning.
    (void)Get(f, "status");
    Ignored(f, "");
  }

 private:
  FieldErrors& errors_;
  std::vector<std::string>* ignored_;
};

const char* NodeTypeName(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsScalar()) return "a scalar";
  return "empty";
}

// A string field of a mapping, or empty when absent or not a string.
std::string StringField(const YAML::Node& map, const char* key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key && it->second.IsScalar() &&
        KindOf(it->second) == ScalarKind::kString) {
      return it->second.Scalar();
    }
  }
  return {};
}

struct DocumentOutcome {
  int document = 0;
  std::optional<Pod> pod;
  std::vector<std::string> ignored;  // the pod's fields nodelet ignored
  std::optional<OtherDocument> other;
  std::string detail;  // a non-field problem
  FieldErrors field_errors;
};

void DecodeDocument(const YAML::Node& root, const ParseOptions& options, DocumentOutcome& out) {
  if (!root.IsMap()) {
    out.detail =
        std::string("the document must be a mapping (an object), not ") + NodeTypeName(root);
    return;
  }
  std::string limit = CheckNodeLimits(root, options.limits);
  if (!limit.empty()) {
    out.detail = limit;
    return;
  }
  PodDecoder decoder(out.field_errors, &out.ignored);
  auto fields = decoder.Object(root, "");
  if (!fields || !out.field_errors.empty()) return;
  std::string kind;
  std::string api_version;
  if (const YAML::Node* k = PodDecoder::Get(*fields, "kind")) {
    decoder.StringValue(*k, "kind", kind);
  } else {
    out.field_errors.push_back(FieldError::Required("kind"));
  }
  if (const YAML::Node* a = PodDecoder::Get(*fields, "apiVersion")) {
    decoder.StringValue(*a, "apiVersion", api_version);
  } else {
    out.field_errors.push_back(FieldError::Required("apiVersion"));
  }
  if (!out.field_errors.empty()) return;
  if (kind == "Pod") {
    if (api_version != "v1") {
      out.field_errors.push_back(FieldError::NotSupported("apiVersion", api_version, {"v1"}));
      return;
    }
    Pod pod;
    decoder.PodFields(*fields, pod);
    if (out.field_errors.empty()) out.pod = std::move(pod);
    return;
  }
  if (options.other_kinds.count(kind) > 0) {
    OtherDocument other;
    other.api_version = api_version;
    other.kind = kind;
    if (const YAML::Node* m = PodDecoder::Get(*fields, "metadata"); m && m->IsMap()) {
      other.name = StringField(*m, "name");
      other.namespace_name = StringField(*m, "namespace");
    }
    other.object = root;
    out.other = std::move(other);
    return;
  }
  std::vector<std::string_view> supported = {"Pod"};
  for (const auto& k : options.other_kinds) supported.push_back(k);
  out.field_errors.push_back(FieldError::NotSupported("kind", kind, supported));
}

}  // namespace

std::string ManifestMessage(std::string_view source, int document, bool multi_document,
                            std::string_view detail) {
  std::string m(source);
  if (document > 0 && multi_document) m += " (document " + std::to_string(document) + ")";
  m += ": ";
  m += detail;
  return m;
}

ManifestParseResult DecodeManifest(std::string_view content, std::string_view source,
                                   const ParseOptions& options) {
  ManifestParseResult result;
  auto file_error = [&](std::string detail) {
    result.errors.push_back({0, ManifestMessage(source, 0, false, detail), {}});
    return result;
  };
  if (content.size() > options.limits.max_file_bytes) {
    return file_error("the manifest is larger than the limit of " +
                      std::to_string(options.limits.max_file_bytes) + " bytes");
  }
  if (content.size() >= 3 && content.substr(0, 3) == "\xef\xbb\xbf") content.remove_prefix(3);
  if (std::string bad = CheckText(content); !bad.empty()) return file_error(bad);

  std::vector<DocumentOutcome> outcomes;
  for (const Piece& piece : SplitDocuments(content)) {
    if (outcomes.size() >= options.limits.max_documents) {
      return file_error("the manifest holds more than " +
                        std::to_string(options.limits.max_documents) + " documents");
    }
    YAML::Node node;
    std::string syntax;
    try {
      syntax = LoadPiece(piece, node);
    } catch (const YAML::DeepRecursion&) {
      syntax =
          "the document nests deeper than " + std::to_string(options.limits.max_depth) + " levels";
    } catch (const YAML::ParserException& e) {
      syntax = "line " + std::to_string(piece.first_line + e.mark.line + 1) + ", column " +
               std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg;
    } catch (const std::exception& e) {
      syntax = std::string("YAML syntax error: ") + e.what();
    }
    DocumentOutcome o;
    o.document = static_cast<int>(outcomes.size()) + 1;
    if (!syntax.empty()) {
      o.detail = std::move(syntax);
      outcomes.push_back(std::move(o));
      continue;
    }
    if (!node.IsDefined() || node.IsNull()) continue;  // an empty document
    try {
      DecodeDocument(node, options, o);
    } catch (const std::exception& e) {
      o.pod.reset();
      o.other.reset();
      o.detail = std::string("cannot decode the document: ") + e.what();
    }
    outcomes.push_back(std::move(o));
  }
  result.documents = static_cast<int>(outcomes.size());
  const bool multi = outcomes.size() > 1;
  for (DocumentOutcome& o : outcomes) {
    if (!o.detail.empty()) {
      result.errors.push_back(
          {o.document, ManifestMessage(source, o.document, multi, o.detail), {}});
    } else if (!o.field_errors.empty()) {
      std::string message =
          ManifestMessage(source, o.document, multi, o.field_errors.front().ToString());
      result.errors.push_back({o.document, std::move(message), std::move(o.field_errors)});
    } else if (o.pod) {
      result.pods.push_back({o.document, std::move(*o.pod), std::move(o.ignored)});
    } else if (o.other) {
      o.other->document = o.document;
      result.others.push_back(std::move(*o.other));
    }
  }
  return result;
}

ManifestParseResult DecodeManifestFile(const std::string& path, const ParseOptions& options) {
  auto content = ReadFileBounded(path, options.limits.max_file_bytes);
  if (!content.ok()) {
    ManifestParseResult result;
    std::string detail = content.status().code() == StatusCode::kResourceExhausted
                             ? "the manifest is larger than the limit of " +
                                   std::to_string(options.limits.max_file_bytes) + " bytes"
                             : content.status().message();
    result.errors.push_back({0, ManifestMessage(path, 0, false, detail), {}});
    return result;
  }
  return DecodeManifest(*content, path, options);
}

}  // namespace nodelet::pod
