// The manifest decoder's field layer, shared by its files (manifest_parser.cc reads documents,
// manifest_decode.cc holds these typed getters, manifest_v1.cc the v1 Pod schema): how a YAML
// node reads as a scalar, an object's fields, and FieldDecoder, which reads typed fields (strings,
// integers, booleans, quantities, maps, lists, times), refuses the ones nodelet must not drop
// silently and records the ones nobody asked for. Not part of lib/pod's API: manifest_parser.h is.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lib/pod/field_error.h"
#include "lib/pod/pod.h"

namespace nodelet::pod::manifest_internal {

enum class ScalarKind { kNull, kString, kBool, kInt, kFloat, kMap, kSequence };

// What `n` holds, by the YAML 1.2 core schema (with YAML 1.1 octal for integers); a quoted or
// tagged string is always a string.
ScalarKind KindOf(const YAML::Node& n);

inline constexpr char kNotSupportedByNodelet[] = "not supported by nodelet";

// An object's fields by key, and the keys the decoder asked for (what is left was ignored).
struct Fields : std::map<std::string, YAML::Node, std::less<>> {
  mutable std::set<std::string, std::less<>> read;
};

// Reads typed fields into the model. Collects FieldErrors and keeps going, so one pass reports
// every problem. The schema's decoders derive from it and hand their member functions to
// ObjectList and Sub.
class FieldDecoder {
 public:
  explicit FieldDecoder(FieldErrors& errors, std::vector<std::string>* ignored = nullptr)
      : errors_(errors), ignored_(ignored) {}

  // Records the fields of `f` that no decoder asked for (fields nodelet does not know, or v1
  // fields it accepts and ignores as the kubelet does for a static pod).
  void Ignored(const Fields& f, const std::string& path);

  // A mapping's fields by key; nullopt (with an error unless null) when `n` is not a mapping.
  std::optional<Fields> Object(const YAML::Node& n, const std::string& path);

  // The field `key` (marked as read), or nullptr when absent or null.
  static const YAML::Node* Get(const Fields& f, std::string_view key);

  void Bad(const std::string& path, const YAML::Node& n, std::string detail);

  void Forbid(const Fields& f, std::string_view key, const std::string& path,
              std::string detail = kNotSupportedByNodelet);

  // Refuses `key` when it is set to anything but its zero value (false, 0, "", {} or []), which
  // would change what runs.
  void ForbidSet(const Fields& f, std::string_view key, const std::string& path,
                 std::string detail = kNotSupportedByNodelet);

  // Refuses a string field set to anything but its default (or empty).
  void ForbidUnlessDefault(const Fields& f, std::string_view key, std::string_view default_value,
                           const std::string& path);

  bool StringValue(const YAML::Node& n, const std::string& path, std::string& out);
  void Str(const Fields& f, std::string_view key, const std::string& path, std::string& out);

  std::optional<__int128> IntValue(const YAML::Node& n, const std::string& path, __int128 lo,
                                   __int128 hi, const char* range);
  void Int32(const Fields& f, std::string_view key, const std::string& path, int32_t& out);
  void OptInt32(const Fields& f, std::string_view key, const std::string& path,
                std::optional<int32_t>& out);
  void OptInt64(const Fields& f, std::string_view key, const std::string& path,
                std::optional<int64_t>& out);

  std::optional<bool> BoolValue(const YAML::Node& n, const std::string& path);
  void Bool(const Fields& f, std::string_view key, const std::string& path, bool& out);
  void OptBool(const Fields& f, std::string_view key, const std::string& path,
               std::optional<bool>& out);

  // Calls `element(node, path)` for each element of a list.
  void List(const Fields& f, std::string_view key, const std::string& path,
            const std::function<void(const YAML::Node&, const std::string&)>& element);

  // A list of objects, each decoded by the member function `decode` of the derived decoder D.
  template <typename D, typename T>
  void ObjectList(const Fields& f, std::string_view key, const std::string& path,
                  std::vector<T>& out, void (D::*decode)(const Fields&, const std::string&, T&)) {
    List(f, key, path, [&](const YAML::Node& n, const std::string& p) {
      T item{};
      if (KindOf(n) == ScalarKind::kNull) {
        Bad(p, n, "must be an object");
      } else if (auto fields = Object(n, p)) {
        (static_cast<D*>(this)->*decode)(*fields, p, item);
        Ignored(*fields, p);
      }
      out.push_back(std::move(item));
    });
  }

  void StrList(const Fields& f, std::string_view key, const std::string& path,
               std::vector<std::string>& out);
  void StrMap(const Fields& f, std::string_view key, const std::string& path,
              std::map<std::string, std::string>& out);

  std::optional<Quantity> QuantityValue(const YAML::Node& n, const std::string& path);
  void OptQuantity(const Fields& f, std::string_view key, const std::string& path,
                   std::optional<Quantity>& out);
  void Resources(const Fields& f, std::string_view key, const std::string& path, ResourceList& out);

  // A port: a number or a port name.
  void PortRef(const Fields& f, std::string_view key, const std::string& path, IntOrString& out);

  // An RFC 3339 time, as Unix seconds.
  void Time(const Fields& f, std::string_view key, const std::string& path,
            std::optional<int64_t>& out);

  // An object, decoded by the member function `decode` of the derived decoder D.
  template <typename D, typename T>
  void Sub(const Fields& f, std::string_view key, const std::string& path, std::optional<T>& out,
           void (D::*decode)(const Fields&, const std::string&, T&)) {
    const YAML::Node* n = Get(f, key);
    if (!n) return;
    std::string p = Child(path, key);
    if (auto fields = Object(*n, p)) {
      T value{};
      (static_cast<D*>(this)->*decode)(*fields, p, value);
      Ignored(*fields, p);
      out = std::move(value);
    }
  }

 protected:
  FieldErrors& errors_;

 private:
  std::vector<std::string>* ignored_;
};

// Decodes the fields of a `kind: Pod`, `apiVersion: v1` document into `pod` (manifest_v1.cc),
// adding to `errors` and, when not null, to `ignored`.
void DecodePodFields(const Fields& f, FieldErrors& errors, std::vector<std::string>* ignored,
                     Pod& pod);

}  // namespace nodelet::pod::manifest_internal
