// libFuzzer target: the control API decode path (envelope + ControlMessage), as the
// supervisor and every service run it on each received frame.
#include <cstddef>
#include <cstdint>

#include "control_generated.h"
#include "lib/ipc/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::ipc::control::Body;
  using nodelet::ipc::control::ControlMessage;
  auto msg = nodelet::ipc::DecodeMessage<ControlMessage>(
      data, size, nodelet::ipc::control::ControlMessageIdentifier());
  if (!msg.ok()) return 0;
  // A verified message must be safe to read in full: touch every field the receivers read.
  const ControlMessage* m = *msg;
  volatile uint64_t sink = m->header()->sequence() + m->header()->incarnation();
  switch (m->body_type()) {
    case Body::Hello:
      if (auto h = m->body_as_Hello(); h && h->service()) sink = sink + h->service()->size();
      break;
    case Body::Heartbeat:
      if (auto hb = m->body_as_Heartbeat(); hb && hb->counters()) {
        for (auto c : *hb->counters()) {
          if (c->name()) sink = sink + c->name()->size() + c->value();
        }
      }
      break;
    case Body::Reply:
      if (auto r = m->body_as_Reply(); r && r->error()) sink = sink + r->error()->size();
      break;
    default:
      break;
  }
  (void)sink;
  return 0;
}
