#include "ctl/ctl_client.h"

#include <unistd.h>

#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/peer_access.h"
#include "lib/ipc/sockets.h"

namespace nodelet::ctl {

Status ProbeCtlSocket(const std::string& run_dir) {
  return ipc::ProbeIpcSocket(ipc::kCtlEndpoint.Path(run_dir));
}

namespace {

// The handshake was refused by nodelet's check of this process's credentials.
Status RefusedByNodelet(const std::string& run_dir) {
  return PermissionDenied("permission denied: " + ipc::kCtlEndpoint.Path(run_dir) + " (" +
                          ipc::DescribeWhoMayConnect(run_dir) + "; nodelet refused uid " +
                          std::to_string(geteuid()) + " gid " + std::to_string(getegid()) + ")");
}

}  // namespace

Result<ipc::ctl::CtlReplyT> CtlRequest(const Clock& clock, const std::string& run_dir,
                                       ipc::ctl::RequestKind kind,
                                       const std::vector<std::string>& services,
                                       std::chrono::milliseconds deadline) {
  ipc::ctl::CtlRequestT request;
  request.kind = kind;
  request.services = services;
  return CtlCall(clock, run_dir, request, deadline);
}

Result<ipc::ctl::CtlReplyT> CtlCall(const Clock& clock, const std::string& run_dir,
                                    const ipc::ctl::CtlRequestT& request,
                                    std::chrono::milliseconds deadline) {
  if (Status s = ProbeCtlSocket(run_dir); !s.ok()) return s;
  ipc::Context ctx;
  // Replies may be large (`runtime` with hundreds of pods): ipc::kCtlChannel.
  ipc::DealerClient dealer(ctx, ipc::kCtlChannel);
  if (Status s = dealer.Connect(ipc::kCtlEndpoint.Uri(run_dir)); !s.ok()) return s;
  ipc::EnvelopeWriter envelope(ipc::ServiceId::Ctl, ipc::NewIncarnation(), clock);
  flatbuffers::FlatBufferBuilder fbb(512);
  auto req = ipc::ctl::CtlRequest::Pack(fbb, &request);
  ipc::FinishMessage(fbb, envelope, ipc::ctl::Body::CtlRequest, req.Union());
  // One request per connection: no retries (start/stop/restart are not idempotent in effect),
  // so wait for the connection before sending (ZMQ_IMMEDIATE refuses to queue until then).
  // A refusal of nodelet's credential check (lib/ipc/peer_access.h) ends the wait at once.
  const MonoTime end = clock.Now() + deadline;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - clock.Now());
    if (left.count() <= 0) return DeadlineExceeded("could not connect within the deadline");
    if (dealer.WaitWritable(left)) break;
    if (!dealer.Refused().ok()) return RefusedByNodelet(run_dir);
  }
  if (Status s = dealer.Send(fbb.GetBufferPointer(), fbb.GetSize()); !s.ok()) return s;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - clock.Now());
  auto frame = dealer.Receive(std::max(left, std::chrono::milliseconds(1)));
  if (!frame.ok()) {
    if (frame.status().code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceeded("no answer within " + std::to_string(deadline.count()) + " ms");
    }
    return frame.status();
  }
  auto msg = ipc::DecodeMessage<ipc::ctl::CtlMessage>(frame->data(), frame->size(),
                                                      ipc::ctl::CtlMessageIdentifier(),
                                                      ipc::kCtlChannel.replies.max_message_bytes);
  if (!msg.ok()) return InvalidArgument("bad reply: " + msg.status().message());
  const auto* reply = (*msg)->body_as_CtlReply();
  if (reply == nullptr) return InvalidArgument("bad reply: not a CtlReply");
  ipc::ctl::CtlReplyT out_reply;
  reply->UnPackTo(&out_reply);
  if (!out_reply.ok) return InvalidArgument("nodelet refused the request: " + out_reply.error);
  return out_reply;
}

}  // namespace nodelet::ctl
