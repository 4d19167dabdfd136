// The manifest decoder's reading of documents (manifest_parser.h): the text checks, the split
// into documents, YAML loading within the depth, node and document limits, each document's kind
// and apiVersion (a Pod goes to the v1 schema, manifest_v1.cc), and the messages of the errors.
#include "lib/pod/manifest_parser.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <exception>
#include <optional>
#include <sstream>

#include "lib/common/fs.h"
#include "lib/pod/manifest_decode.h"

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

const char* NodeTypeName(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsScalar()) return "a scalar";
  return "empty";
}

// A string field of a mapping, or empty when absent or not a string.
std::string StringField(const YAML::Node& map, const char* key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key && it->second.IsScalar() &&
        manifest_internal::KindOf(it->second) == manifest_internal::ScalarKind::kString) {
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
  manifest_internal::FieldDecoder decoder(out.field_errors, &out.ignored);
  auto fields = decoder.Object(root, "");
  if (!fields || !out.field_errors.empty()) return;
  std::string kind;
  std::string api_version;
  if (const YAML::Node* k = manifest_internal::FieldDecoder::Get(*fields, "kind")) {
    decoder.StringValue(*k, "kind", kind);
  } else {
    out.field_errors.push_back(FieldError::Required("kind"));
  }
  if (const YAML::Node* a = manifest_internal::FieldDecoder::Get(*fields, "apiVersion")) {
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
    manifest_internal::DecodePodFields(*fields, out.field_errors, &out.ignored, pod);
    if (out.field_errors.empty()) out.pod = std::move(pod);
    return;
  }
  if (options.other_kinds.count(kind) > 0) {
    OtherDocument other;
    other.api_version = api_version;
    other.kind = kind;
    if (const YAML::Node* m = manifest_internal::FieldDecoder::Get(*fields, "metadata");
        m && m->IsMap()) {
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
