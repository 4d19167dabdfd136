// libFuzzer target: the manifest URL source's response handling without a network. The input
// is a status selector, then body pieces (one length byte each) fed to UrlResponse under a small
// size limit and a deadline that passes half way; the snapshot that comes out is decoded the way
// the pod config decodes every manifest URL body.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lib/pod/static_pod.h"
#include "supervisor/sources/manifest_url_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::supervisor::UrlResponse;
  if (size < 2) return 0;
  static const int kStatuses[] = {200, 304, 404, 500, 200, 200, 301, 0};
  const int status = kStatuses[data[0] % 8];
  const bool transport_error = (data[0] & 0x80) != 0;
  const bool have_previous = (data[0] & 0x40) != 0;
  const size_t limit = 64 + static_cast<size_t>(data[1]) * 64;
  const auto start = std::chrono::steady_clock::time_point{};
  const auto deadline = start + std::chrono::seconds(100);
  UrlResponse response("http://127.0.0.1/pods", limit, deadline);
  size_t pos = 2, piece = 0;
  bool aborted = false;
  while (pos < size && !aborted) {
    size_t len = data[pos++];
    len = std::min(len, size - pos);
    // Every piece takes 10 s: the deadline passes after the tenth.
    aborted = !response.OnData(reinterpret_cast<const char*>(data + pos), len,
                               start + std::chrono::seconds(10 * ++piece));
    pos += len;
  }
  if (response.body_bytes() > limit) std::abort();
  auto out =
      response.Finish(transport_error ? "Connection reset" : "", status, "\"etag\"", have_previous);
  if (aborted && out.ok()) std::abort();  // an aborted transfer is never a snapshot
  if (!out.ok()) {
    if (out.status().message().find("http://127.0.0.1/pods") == std::string::npos) std::abort();
    return 0;
  }
  for (const auto& m : out->snapshot.manifests) {
    nodelet::pod::StaticPodOrigin origin;
    origin.kind = nodelet::pod::PodSourceKind::kHttp;
    origin.source = m.origin;
    origin.node_name = "node1";
    volatile size_t sink = nodelet::pod::LoadStaticPods(m.content, origin).pods.size();
    (void)sink;
  }
  return 0;
}
