// libFuzzer target: lib/logs' reading of CRI log files (what a container writes reaches the
// parser as CONTENT; the prefix is the runtime's, but a file may be cut anywhere). The first
// byte picks the reader's options; the rest is the file. Invariants: any split of the input
// gives the same text, tail and limit bound the output, the duration and time parsers never
// crash on the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "lib/common/rfc3339.h"
#include "lib/logs/cri_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet::logs;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::string_view content(reinterpret_cast<const char*>(data + 1), size - 1);
  LogReadOptions o;
  o.timestamps = flags & 1;
  o.tail_lines = (flags & 2) ? (flags >> 4) : -1;
  o.limit_bytes = (flags & 4) ? (flags >> 2) * 3 : -1;
  o.since_unix_ns = (flags & 8) ? 1714564800000000000 : 0;
  const std::string whole = FormatCriLog(content, o);
  if (o.limit_bytes >= 0 && whole.size() > static_cast<size_t>(o.limit_bytes)) std::abort();
  // Fed in pieces of 3 bytes, the text is the same.
  std::string pieces;
  CriLogFormatter f(o, [&](std::string_view s) {
    pieces.append(s);
    return true;
  });
  for (size_t i = 0; i < content.size(); i += 3) f.Feed(content.substr(i, 3));
  f.Finish();
  if (pieces != whole) std::abort();
  (void)ParseGoDuration(content);
  (void)nodelet::ParseRfc3339Nanos(content);
  CriLogLine line;
  (void)ParseCriLogLine(content, &line);
  return 0;
}
