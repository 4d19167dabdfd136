// Name syntax checks, worded like apimachinery's validation package. Each returns the reasons a
// name is invalid (empty when it is valid), so callers can wrap them in FieldErrors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nodelet::pod {

inline constexpr size_t kDns1123LabelMaxLength = 63;
inline constexpr size_t kDns1123SubdomainMaxLength = 253;

// [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters (container names, namespaces, volumes).
std::vector<std::string> IsDns1123Label(std::string_view value);
// DNS-1123 labels joined by '.', at most 253 characters (pod names, node names).
std::vector<std::string> IsDns1123Subdomain(std::string_view value);
// An optional DNS subdomain prefix and '/', then a name of at most 63 characters (label and
// annotation keys).
std::vector<std::string> IsQualifiedName(std::string_view value);
// Empty, or at most 63 characters of [A-Za-z0-9_.-] starting and ending alphanumeric.
std::vector<std::string> IsValidLabelValue(std::string_view value);
// [-._a-zA-Z][-._a-zA-Z0-9]*.
std::vector<std::string> IsEnvVarName(std::string_view value);
// A ConfigMap or Secret key: at most 253 characters of [-._a-zA-Z0-9], not "." or "..", not
// starting with "..".
std::vector<std::string> IsConfigMapKey(std::string_view value);
// An IANA service name (port names): at most 15 characters of [a-z0-9-], at least one letter,
// no leading, trailing or doubled hyphen.
std::vector<std::string> IsValidPortName(std::string_view value);
// An IPv4 or IPv6 address (the API server's IsValidIP).
std::vector<std::string> IsValidIp(std::string_view value);
// [-A-Za-z0-9]+.
std::vector<std::string> IsHttpHeaderName(std::string_view value);

}  // namespace nodelet::pod
