// libFuzzer target: the Pod FlatBuffers decode path (verifier + conversion), as podworkerd and
// volumed run it on pods the supervisor sends.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "lib/pod/pod_flatbuffers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet::pod;
  auto pod = DecodePod(data, size);
  if (!pod.ok()) return 0;
  // What decodes once must re-encode and decode to the same model.
  auto buf = EncodePod(*pod);
  auto again = DecodePod(buf.data(), buf.size());
  if (!again.ok() || !(*again == *pod)) std::abort();
  return 0;
}
