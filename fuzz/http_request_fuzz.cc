// libFuzzer target: the supervisor's HTTP request head (supervisor/http_request.h), the bytes a
// peer of the HTTP endpoint sends before the server answers, read by Beast's parser behind
// RequestHeadParser. The input is fed whole, and again in two steps as a connection receives
// it: a complete head is complete both ways, with the same request line. Invariants of a complete
// head: the request line's parts hold no line break, the method is not empty and holds no space,
// the path no '?'; the query parser takes any bytes, and each decoded key and value is at most as
// long as its text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "supervisor/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet::supervisor;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  RequestLine line;
  const HeadStatus whole = ParseRequestHead(in, &line);
  RequestHeadParser stepwise;
  HeadStatus step = stepwise.Feed(in.substr(0, size / 2));
  step = stepwise.Feed(in);
  // A complete head is complete in steps too, with the same line; any other answer may come
  // sooner in steps (an error in the first half), but never a complete head.
  if ((step == HeadStatus::kComplete) != (whole == HeadStatus::kComplete)) std::abort();
  if (whole == HeadStatus::kComplete) {
    const RequestLine& other = stepwise.line();
    if (other.method != line.method || other.path != line.path || other.query != line.query ||
        other.http10 != line.http10) {
      std::abort();
    }
    for (const std::string* part : {&line.method, &line.path, &line.query}) {
      if (part->find_first_of("\r\n") != std::string::npos) std::abort();
    }
    if (line.method.empty() || line.method.find(' ') != std::string::npos) std::abort();
    if (line.path.find('?') != std::string::npos) std::abort();
    for (const auto& [key, value] : ParseQuery(line.query)) {
      if (key.size() + value.size() > line.query.size()) std::abort();
    }
  }
  (void)ParseQuery(in);
  return 0;
}
