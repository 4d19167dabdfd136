// The request head's parsing for the supervisor's HTTP endpoint (http_request.h).
#include "supervisor/http_request.h"

namespace nodelet::supervisor {
namespace {

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string UnescapeQueryPart(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && HexDigitValue(s[i + 1]) >= 0 &&
               HexDigitValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexDigitValue(s[i + 1]) * 16 + HexDigitValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

size_t RequestHeadLength(std::string_view received) {
  size_t end = received.find("\r\n\r\n");
  if (end == std::string_view::npos) end = received.find("\n\n");
  return end;
}

RequestLine ParseRequestLine(std::string_view head) {
  RequestLine out;
  std::string_view line = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return out;
  const size_t sp2 = line.find(' ', sp1 + 1);
  out.method = std::string(line.substr(0, sp1));
  std::string_view target =
      line.substr(sp1 + 1, sp2 == std::string_view::npos ? std::string_view::npos : sp2 - sp1 - 1);
  if (size_t q = target.find('?'); q != std::string_view::npos) {
    out.query = std::string(target.substr(q + 1));
    target = target.substr(0, q);
  }
  out.path = std::string(target);
  out.http10 = sp2 != std::string_view::npos && line.substr(sp2 + 1, 8) == "HTTP/1.0";
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string key = UnescapeQueryPart(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : UnescapeQueryPart(pair.substr(eq + 1));
    out.emplace(std::move(key), std::move(value));  // the first of repeated keys wins
  }
  return out;
}

}  // namespace nodelet::supervisor
