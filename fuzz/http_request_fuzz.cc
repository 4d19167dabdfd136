// libFuzzer target: the supervisor's HTTP request head (supervisor/http_request.h), the bytes a
// peer of the HTTP endpoint sends before the server answers. Invariants: the head's end lies
// inside the input, the request line's parts hold no line break, the path no '?', and the
// method no space (an empty method, as from " /x", is answered 400 by the server); the query
// parser takes any bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "supervisor/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet::supervisor;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t end = RequestHeadLength(in);
  if (end != std::string_view::npos && end >= size) std::abort();
  const RequestLine line = ParseRequestLine(in);
  for (const std::string* part : {&line.method, &line.path, &line.query}) {
    if (part->find_first_of("\r\n") != std::string::npos) std::abort();
  }
  if (line.method.find(' ') != std::string::npos) std::abort();
  if (line.path.find('?') != std::string::npos) std::abort();
  // Each decoded key and value is at most as long as its encoded text.
  for (const auto& [key, value] : ParseQuery(line.query)) {
    if (key.size() + value.size() > line.query.size()) std::abort();
  }
  (void)ParseQuery(in);
  return 0;
}
