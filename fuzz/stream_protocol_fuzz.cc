// libFuzzer target: nodeletctl's side of the streaming protocol (ctl/stream_protocol.h), where a
// runtime's streaming server and the user's command line supply the bytes: the stream URL, the
// error channel's Status JSON and port pairs. The first byte picks the parser. Invariants: a
// parsed URL is http with a host, a port of digits and a target starting with '/'; an outcome
// with a message never has exit code 0; a frame is the channel byte then the data.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ctl/stream_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet::ctl;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto url = ParseStreamUrl(text);
      if (url.ok()) {
        if (url->host.empty() || url->port.empty()) std::abort();
        if (url->port.find_first_not_of("0123456789") != std::string::npos) std::abort();
        if (url->target.empty() || url->target[0] != '/') std::abort();
      }
      break;
    }
    case 1: {
      CommandOutcome outcome = OutcomeFromStatus(text);
      if (!outcome.message.empty() && outcome.exit_code == 0) std::abort();
      break;
    }
    case 2: {
      auto pair = ParsePortPair(text);
      if (pair.ok() && pair->remote == 0) std::abort();
      break;
    }
    case 3: {
      const std::string frame = Frame(data[0], text);
      if (frame.size() != text.size() + 1 || static_cast<uint8_t>(frame[0]) != data[0] ||
          frame.compare(1, std::string::npos, text) != 0) {
        std::abort();
      }
      break;
    }
  }
  return 0;
}
