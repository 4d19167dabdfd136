#include "ctl/stream_protocol.h"

#include <nlohmann/json.hpp>

namespace nodelet::ctl {
namespace {

// The string `key` of the object `j`, or `fallback` when it is missing or not a string: the
// server's JSON is not trusted to have the types of a v1 Status.
std::string StringField(const nlohmann::json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

Result<StreamUrl> ParseStreamUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    return InvalidArgument("streaming URL " + url + ": only http:// is supported");
  }
  std::string rest = url.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  StreamUrl out;
  out.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string::npos) return InvalidArgument("streaming URL " + url + ": bad host");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      out.port = authority.substr(close + 2);
  } else {
    size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) out.port = authority.substr(colon + 1);
  }
  if (out.port.empty()) out.port = "80";
  if (out.host.empty() || out.port.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("streaming URL " + url + ": bad host or port");
  }
  return out;
}

CommandOutcome OutcomeFromStatus(const std::string& status_json) {
  CommandOutcome out;
  auto j = nlohmann::json::parse(status_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    out.exit_code = 1;
    out.message = "unreadable status from the streaming server: " + status_json.substr(0, 200);
    return out;
  }
  if (StringField(j, "status", "") == "Success") return out;
  out.message = StringField(j, "message", "the command failed");
  if (StringField(j, "reason", "") == "NonZeroExitCode" && j.contains("details") &&
      j["details"].is_object() && j["details"].contains("causes") &&
      j["details"]["causes"].is_array()) {
    for (const auto& cause : j["details"]["causes"]) {
      if (!cause.is_object() || StringField(cause, "reason", "") != "ExitCode") continue;
      try {
        out.exit_code = std::stoi(StringField(cause, "message", ""));
        out.message.clear();
        return out;
      } catch (const std::exception&) {
      }
    }
  }
  // The command did not run: the codes a shell gives.
  if (out.message.find("executable file not found") != std::string::npos ||
      out.message.find("no such file or directory") != std::string::npos) {
    out.exit_code = 127;
  } else if (out.message.find("permission denied") != std::string::npos) {
    out.exit_code = 126;
  } else {
    out.exit_code = 1;
  }
  return out;
}

std::string Frame(uint8_t channel, const std::string& data) {
  std::string frame(1, static_cast<char>(channel));
  frame += data;
  return frame;
}

Result<PortPair> ParsePortPair(const std::string& text) {
  auto port = [&](const std::string& s, bool zero_ok) -> Result<uint16_t> {
    if (s.empty() && zero_ok) return uint16_t{0};
    if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgument("port mapping " + text + ": '" + s + "' is not a port");
    }
    int v = std::stoi(s);
    if (v > 65535 || (v == 0 && !zero_ok)) {
      return InvalidArgument("port mapping " + text + ": " + s + " is not in 1-65535");
    }
    return static_cast<uint16_t>(v);
  };
  size_t colon = text.find(':');
  PortPair pair;
  if (colon == std::string::npos) {
    auto p = port(text, false);
    if (!p.ok()) return p.status();
    pair.local = pair.remote = *p;
    return pair;
  }
  auto local = port(text.substr(0, colon), true);
  if (!local.ok()) return local.status();
  auto remote = port(text.substr(colon + 1), false);
  if (!remote.ok()) return remote.status();
  pair.local = *local;
  pair.remote = *remote;
  return pair;
}

}  // namespace nodelet::ctl
