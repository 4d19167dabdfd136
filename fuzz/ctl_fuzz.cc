// libFuzzer target: the operator API decode path (envelope + CtlMessage), as the supervisor's
// ctl server runs it on each request and nodeletctl on each reply.
#include <cstddef>
#include <cstdint>

#include "ctl_generated.h"
#include "lib/ipc/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::ipc::ctl::CtlMessage;
  auto msg = nodelet::ipc::DecodeMessage<CtlMessage>(data, size,
                                                     nodelet::ipc::ctl::CtlMessageIdentifier());
  if (!msg.ok()) return 0;
  const CtlMessage* m = *msg;
  volatile size_t sink = 0;
  if (auto req = m->body_as_CtlRequest(); req && req->services()) {
    for (auto s : *req->services()) sink = sink + (s ? s->size() : 0);
  }
  if (auto rep = m->body_as_CtlReply(); rep) {
    if (rep->services()) {
      for (auto s : *rep->services()) {
        if (s->name()) sink = sink + s->name()->size();
        if (s->description()) sink = sink + s->description()->size();
      }
    }
    if (rep->results()) {
      for (auto r : *rep->results()) {
        if (r->message()) sink = sink + r->message()->size();
      }
    }
    // `manifests`: nested tables and string vectors, as nodeletctl unpacks them.
    if (rep->manifests()) {
      for (auto m : *rep->manifests()) {
        if (m->errors()) {
          for (auto e : *m->errors()) sink = sink + (e ? e->size() : 0);
        }
        if (m->pods()) {
          for (auto p : *m->pods()) sink = sink + (p->uid() ? p->uid()->size() : 0);
        }
      }
    }
  }
  (void)sink;
  return 0;
}
