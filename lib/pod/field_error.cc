#include "lib/pod/field_error.h"

namespace nodelet::pod {

FieldError FieldError::Required(std::string field, std::string detail) {
  return FieldError(Type::kRequired, std::move(field), {}, std::move(detail));
}

FieldError FieldError::Forbidden(std::string field, std::string detail) {
  return FieldError(Type::kForbidden, std::move(field), {}, std::move(detail));
}

FieldError FieldError::TooLong(std::string field, size_t max_bytes) {
  return FieldError(Type::kTooLong, std::move(field), {},
                    "must have at most " + std::to_string(max_bytes) + " bytes");
}

FieldError FieldError::NotFound(std::string field, std::string_view value) {
  return FieldError(Type::kNotFound, std::move(field), QuoteValue(value), {});
}

FieldError FieldError::Duplicate(std::string field, std::string_view value) {
  return FieldError(Type::kDuplicate, std::move(field), QuoteValue(value), {});
}

FieldError FieldError::Invalid(std::string field, std::string_view value, std::string detail) {
  return FieldError(Type::kInvalid, std::move(field), QuoteValue(value), std::move(detail));
}

FieldError FieldError::Invalid(std::string field, int64_t value, std::string detail) {
  return FieldError(Type::kInvalid, std::move(field), std::to_string(value), std::move(detail));
}

FieldError FieldError::InvalidRendered(std::string field, std::string rendered,
                                       std::string detail) {
  return FieldError(Type::kInvalid, std::move(field), std::move(rendered), std::move(detail));
}

FieldError FieldError::NotSupported(std::string field, std::string_view value,
                                    const std::vector<std::string_view>& supported) {
  std::string detail;
  if (!supported.empty()) {
    detail = "supported values: ";
    for (size_t i = 0; i < supported.size(); ++i) {
      if (i > 0) detail += ", ";
      detail += QuoteValue(supported[i]);
    }
  }
  return FieldError(Type::kNotSupported, std::move(field), QuoteValue(value), std::move(detail));
}

std::string FieldError::ToString() const {
  std::string out = field_.empty() ? std::string("(document root)") : field_;
  out += ": ";
  switch (type_) {
    case Type::kNotFound:
      out += "Not found";
      break;
    case Type::kRequired:
      out += "Required value";
      break;
    case Type::kDuplicate:
      out += "Duplicate value";
      break;
    case Type::kInvalid:
      out += "Invalid value";
      break;
    case Type::kNotSupported:
      out += "Unsupported value";
      break;
    case Type::kForbidden:
      out += "Forbidden";
      break;
    case Type::kTooLong:
      out += "Too long";
      break;
  }
  bool prints_value =
      type_ != Type::kRequired && type_ != Type::kForbidden && type_ != Type::kTooLong;
  if (prints_value) out += ": " + value_;
  if (!detail_.empty()) out += ": " + detail_;
  return out;
}

std::string QuoteValue(std::string_view s, size_t max_shown) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  size_t shown = 0;
  for (unsigned char c : s) {
    if (shown++ == max_shown) {
      out += "...";
      break;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);  // printable ASCII and UTF-8 bytes
        }
    }
  }
  out += "\"";
  return out;
}

std::string Child(std::string_view path, std::string_view name) {
  if (path.empty()) return std::string(name);
  std::string out(path);
  out += '.';
  out += name;
  return out;
}

std::string Index(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

std::string Key(std::string_view path, std::string_view key) {
  std::string shown;
  for (unsigned char c : key.substr(0, 256)) {
    shown += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  return std::string(path) + "[" + shown + "]";
}

}  // namespace nodelet::pod
