// FieldError: one problem with one field of an object, worded like the API server's
// (k8s.io/apimachinery/pkg/util/validation/field): "spec.containers[1].name: Duplicate value:
// \"app\"". Used by the manifest decoder and by ValidatePod.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nodelet::pod {

class FieldError {
 public:
  enum class Type {
    kNotFound,      // "Not found"
    kRequired,      // "Required value"
    kDuplicate,     // "Duplicate value"
    kInvalid,       // "Invalid value"
    kNotSupported,  // "Unsupported value"
    kForbidden,     // "Forbidden"
    kTooLong,       // "Too long"
  };

  static FieldError Required(std::string field, std::string detail = {});
  static FieldError Forbidden(std::string field, std::string detail);
  static FieldError TooLong(std::string field, size_t max_bytes);
  static FieldError NotFound(std::string field, std::string_view value);
  static FieldError Duplicate(std::string field, std::string_view value);
  static FieldError Invalid(std::string field, std::string_view value, std::string detail);
  static FieldError Invalid(std::string field, int64_t value, std::string detail);
  // For a value rendered by the caller (e.g. `true`, or `0644` in octal).
  static FieldError InvalidRendered(std::string field, std::string rendered, std::string detail);
  // "Unsupported value: \"X\": supported values: \"A\", \"B\"".
  static FieldError NotSupported(std::string field, std::string_view value,
                                 const std::vector<std::string_view>& supported);

  Type type() const { return type_; }
  const std::string& field() const { return field_; }
  // The offending value as printed (strings quoted), empty for types that print none.
  const std::string& value() const { return value_; }
  const std::string& detail() const { return detail_; }

  // "field: Type: value: detail", as the API server prints it.
  std::string ToString() const;

 private:
  FieldError(Type type, std::string field, std::string value, std::string detail)
      : type_(type),
        field_(std::move(field)),
        value_(std::move(value)),
        detail_(std::move(detail)) {}

  Type type_;
  std::string field_;
  std::string value_;
  std::string detail_;
};

using FieldErrors = std::vector<FieldError>;

// Quotes a string the way Go's %q does for printable ASCII: "a\"b", with \n, \t, \\ and \xNN
// escapes for the rest, so hostile bytes never reach a log line raw. Strings longer than
// `max_shown` bytes are cut there ("...").
std::string QuoteValue(std::string_view s, size_t max_shown = 256);

// Field paths: "spec", Child(p, "containers") = "spec.containers", Index(p, 1) =
// "spec.containers[1]", Key(p, "cpu") = "...limits[cpu]".
std::string Child(std::string_view path, std::string_view name);
std::string Index(std::string_view path, size_t i);
std::string Key(std::string_view path, std::string_view key);

}  // namespace nodelet::pod
