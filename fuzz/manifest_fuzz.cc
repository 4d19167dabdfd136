// libFuzzer target: manifest bytes (YAML or JSON) -> decode, defaults, validation and static pod
// naming, as the supervisor's manifest sources run them on every file and URL body; each pod
// that comes out is then checked to survive the FlatBuffers round trip and to hash, and each
// ConfigMap and Secret beside them is read as the supervisor reads it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "lib/pod/canonical.h"
#include "lib/pod/config_documents.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet::pod;
  StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/fuzz.yaml";
  origin.node_name = "node1";
  ParseOptions options;
  options.other_kinds = {"ConfigMap", "Secret"};
  auto result =
      LoadStaticPods(std::string_view(reinterpret_cast<const char*>(data), size), origin, options);
  volatile size_t sink = result.errors.size() + result.others.size();
  for (const ManifestError& e : result.errors) sink = sink + e.message.size();
  // The ConfigMaps and Secrets beside the pods, as the supervisor reads them.
  for (const OtherDocument& other : result.others) {
    auto object = ParseConfigObject(other);
    if (!object.ok()) {
      sink = sink + object.status().message().size();
      continue;
    }
    // A Secret always has a type, a ConfigMap none; a registry credentials Secret its key.
    if ((object->kind == "Secret") == object->type.empty()) std::abort();
    if (object->type == "kubernetes.io/dockerconfigjson" &&
        object->data.count(".dockerconfigjson") == 0) {
      std::abort();
    }
  }
  for (const PodDocument& doc : result.pods) {
    // A valid pod must round-trip exactly through the IPC encoding.
    auto buf = EncodePod(doc.pod);
    auto back = DecodePod(buf.data(), buf.size());
    if (!back.ok() || !(*back == doc.pod)) std::abort();
    for (const Container& c : doc.pod.spec.containers) sink = sink + ContainerSpecHash(c);
  }
  (void)sink;
  return 0;
}
