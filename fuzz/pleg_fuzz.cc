// libFuzzer target: the PLEG events decode path (envelope + PlegMessage), as every PlegMirror
// (supervisor, podworkerd, statusd) runs it on updates and snapshots and plegd on snapshot
// requests.
#include "fuzz/message_fuzz.h"
#include "pleg_generated.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::ipc::pleg::PlegMessage;
  const PlegMessage* m = nodelet::fuzz::DecodeAndReadAll<PlegMessage>(
      data, size, nodelet::ipc::pleg::PlegMessageIdentifier());
  if (m == nullptr) return 0;
  // PlegMirror keys pods by uid: a snapshot's records must be readable one by one.
  if (const auto* snap = m->body_as_Snapshot(); snap && snap->pods()) {
    for (const auto* p : *snap->pods()) {
      nodelet::ipc::pleg::PodRecordT rec;
      p->UnPackTo(&rec);
    }
  }
  return 0;
}
