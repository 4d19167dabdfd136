#include "lib/pod/names.h"

#include <arpa/inet.h>

namespace nodelet::pod {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

bool MatchesLabel(std::string_view s) {
  if (s.empty() || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool MatchesSubdomain(std::string_view s) {
  if (s.empty()) return false;
  size_t start = 0;
  for (;;) {
    size_t dot = s.find('.', start);
    if (!MatchesLabel(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool MatchesQualifiedNamePart(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

std::string MaxLenError(size_t n) {
  return "must be no more than " + std::to_string(n) + " characters";
}

constexpr char kLabelError[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
constexpr char kSubdomainError[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
constexpr char kQualifiedNamePartError[] =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

}  // namespace

std::vector<std::string> IsDns1123Label(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > kDns1123LabelMaxLength) errs.push_back(MaxLenError(kDns1123LabelMaxLength));
  if (!MatchesLabel(value)) errs.push_back(kLabelError);
  return errs;
}

std::vector<std::string> IsDns1123Subdomain(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > kDns1123SubdomainMaxLength) {
    errs.push_back(MaxLenError(kDns1123SubdomainMaxLength));
  }
  if (!MatchesSubdomain(value)) errs.push_back(kSubdomainError);
  return errs;
}

std::vector<std::string> IsQualifiedName(std::string_view value) {
  std::vector<std::string> errs;
  std::string_view name = value;
  size_t slash = value.find('/');
  if (slash != std::string_view::npos) {
    if (value.find('/', slash + 1) != std::string_view::npos) {
      errs.push_back(std::string("a qualified name ") + kQualifiedNamePartError +
                     " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
      return errs;
    }
    std::string_view prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty()) {
      errs.push_back("prefix part must be non-empty");
    } else {
      for (auto& e : IsDns1123Subdomain(prefix)) errs.push_back("prefix part " + e);
    }
  }
  if (name.empty()) {
    errs.push_back("name part must be non-empty");
  } else if (name.size() > kDns1123LabelMaxLength) {
    errs.push_back("name part " + MaxLenError(kDns1123LabelMaxLength));
  }
  if (!name.empty() && !MatchesQualifiedNamePart(name)) {
    errs.push_back(std::string("name part ") + kQualifiedNamePartError);
  }
  return errs;
}

std::vector<std::string> IsValidLabelValue(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > kDns1123LabelMaxLength) errs.push_back(MaxLenError(kDns1123LabelMaxLength));
  if (!value.empty() && !MatchesQualifiedNamePart(value)) {
    errs.push_back(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
        "'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
  }
  return errs;
}

std::vector<std::string> IsEnvVarName(std::string_view value) {
  bool ok = !value.empty() && !(value[0] >= '0' && value[0] <= '9');
  for (char c : value) {
    if (!IsAlnum(c) && c != '-' && c != '.' && c != '_') ok = false;
  }
  if (ok) return {};
  return {
      "a valid environment variable name must consist of alphabetic characters, digits, '_', "
      "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  "
      "or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"};
}

std::vector<std::string> IsConfigMapKey(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 253) errs.push_back(MaxLenError(253));
  bool ok = !value.empty();
  for (char c : value) {
    if (!IsAlnum(c) && c != '-' && c != '.' && c != '_') ok = false;
  }
  if (!ok) {
    errs.push_back(
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
        "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
        "'[-._a-zA-Z0-9]+')");
  }
  if (value == ".") {
    errs.push_back("must not be '.'");
  } else if (value == "..") {
    errs.push_back("must not be '..'");
  } else if (value.substr(0, 2) == "..") {
    errs.push_back("must not start with '..'");
  }
  return errs;
}

std::vector<std::string> IsValidPortName(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 15) errs.push_back(MaxLenError(15));
  bool chars_ok = true;
  bool has_letter = false;
  for (char c : value) {
    if (c >= 'a' && c <= 'z') has_letter = true;
    if (!IsLowerAlnum(c) && c != '-') chars_ok = false;
  }
  if (!chars_ok)
    errs.push_back("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
  if (value.find("--") != std::string_view::npos)
    errs.push_back("must not contain consecutive hyphens");
  if (!has_letter) errs.push_back("must contain at least one letter (a-z)");
  if (!value.empty() && (value.front() == '-' || value.back() == '-')) {
    errs.push_back("must not begin or end with a hyphen");
  }
  return errs;
}

std::vector<std::string> IsHttpHeaderName(std::string_view value) {
  bool ok = !value.empty();
  for (char c : value) {
    if (!IsAlnum(c) && c != '-') ok = false;
  }
  if (ok) return {};
  return {
      "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. "
      "'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')"};
}

std::vector<std::string> IsValidIp(std::string_view value) {
  std::string v(value);
  unsigned char buf[16];
  if (value.find('\0') == std::string_view::npos &&
      (inet_pton(AF_INET, v.c_str(), buf) == 1 || inet_pton(AF_INET6, v.c_str(), buf) == 1)) {
    return {};
  }
  return {"must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"};
}

}  // namespace nodelet::pod
