// libFuzzer target: JSON manifests (seeded with JSON documents). The bytes go through the same
// decode as every manifest (JSON is read by the YAML decoder); when they are also valid JSON and
// yield pods without errors, the same document re-serialised by a JSON library (other spacing,
// other escapes, other key order) must yield the same pods: the decoder reads JSON as JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "lib/pod/static_pod.h"

namespace {

nodelet::pod::ManifestParseResult Load(std::string_view text) {
  nodelet::pod::StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/fuzz.json";
  origin.node_name = "node1";
  return nodelet::pod::LoadStaticPods(text, origin);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto first = Load(text);
  if (first.pods.empty() || !first.errors.empty()) return 0;
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return 0;
  std::string again;
  try {
    again = json.dump(1, '\t');
  } catch (const nlohmann::json::exception&) {
    return 0;  // invalid UTF-8 inside a string
  }
  auto second = Load(again);
  if (second.pods.size() != first.pods.size()) std::abort();
  for (size_t i = 0; i < first.pods.size(); ++i) {
    if (!(second.pods[i].pod == first.pods[i].pod)) std::abort();
  }
  return 0;
}
