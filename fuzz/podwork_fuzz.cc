// libFuzzer target: the pod work decode path (envelope + PodWorkMessage), as podworkerd and
// volumed run it on the desired pods the supervisor sends: each embedded Pod also goes through
// the lib/pod conversion the receivers use, and what converts must convert back identically.
#include <cstdlib>

#include "fuzz/message_fuzz.h"
#include "lib/pod/pod_flatbuffers.h"
#include "podwork_generated.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::ipc::podwork::PodWorkMessage;
  const PodWorkMessage* m = nodelet::fuzz::DecodeAndReadAll<PodWorkMessage>(
      data, size, nodelet::ipc::podwork::PodWorkMessageIdentifier());
  if (m == nullptr) return 0;
  const auto* desired = m->body_as_DesiredPods();
  if (desired == nullptr || desired->pods() == nullptr) return 0;
  for (const auto* d : *desired->pods()) {
    if (d->pod() == nullptr) continue;
    auto pod = nodelet::pod::PodFromFlatBuffer(d->pod());
    if (!pod.ok()) continue;
    auto buf = nodelet::pod::EncodePod(*pod);
    auto back = nodelet::pod::DecodePod(buf.data(), buf.size());
    if (!back.ok() || !(*back == *pod)) std::abort();
  }
  return 0;
}
