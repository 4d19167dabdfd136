#include "supervisor/stream_relay.h"

#include <algorithm>

#include "lib/common/logging.h"
#include "lib/ipc/channel_limits.h"
#include "lib/ipc/codec.h"

namespace nodelet::supervisor {
namespace {

using ipc::podwork::Body;
using ipc::podwork::PodWorkMessage;

ipc::podwork::StreamReplyT Failure(StatusCode code, std::string error) {
  ipc::podwork::StreamReplyT reply;
  reply.error = std::move(error);
  reply.code = static_cast<uint8_t>(code);
  return reply;
}

}  // namespace

StreamRelay::StreamRelay(ipc::Context& ctx, EventLoop& loop, StreamRelayOptions options)
    : loop_(loop),
      options_(std::move(options)),
      dealer_(ctx, ipc::kPodWorkChannel),
      envelope_(ipc::ServiceId::Supervisor, ipc::NewIncarnation()),
      timer_(loop.AddTimer([this] { OnTimer(); })) {}

StreamRelay::~StreamRelay() { *alive_ = false; }

Status StreamRelay::Start() {
  if (Status s = dealer_.Connect(options_.endpoint); !s.ok()) return s;
  watch_ = loop_.AddSocket(dealer_.raw(), [this] { OnReadable(); });
  return Status::Ok();
}

void StreamRelay::Answer(Done done, ipc::podwork::StreamReplyT reply) {
  loop_.Post(
      [alive = std::weak_ptr<bool>(alive_), done = std::move(done), reply = std::move(reply)] {
        if (auto a = alive.lock(); a && *a) done(reply);
      });
}

void StreamRelay::Open(const ipc::podwork::StreamRequestT& request, Done done) {
  const uint64_t id = next_id_++;
  ipc::podwork::StreamRequestT ask = request;
  ask.request_id = id;
  flatbuffers::FlatBufferBuilder fbb(512);
  auto body = ipc::podwork::StreamRequest::Pack(fbb, &ask);
  // ZMQ_IMMEDIATE: nothing is queued while podworkerd is not there (not running, restarting).
  if (Status s = ipc::SendMessage(dealer_, fbb, envelope_, Body::StreamRequest, body.Union());
      !s.ok()) {
    Answer(std::move(done),
           Failure(StatusCode::kUnavailable, "podworkerd cannot be reached: " + s.message()));
    return;
  }
  pending_[id] = Pending{loop_.clock().Now() + options_.deadline, std::move(done)};
  ArmTimer();
}

void StreamRelay::OnReadable() {
  for (int i = 0; i < 64 && dealer_.Readable(); ++i) {
    auto frame = dealer_.Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto msg = ipc::DecodeMessage<PodWorkMessage>(frame->data(), frame->size(),
                                                  ipc::podwork::PodWorkMessageIdentifier(),
                                                  ipc::kPodWorkChannel.replies.max_message_bytes);
    const ipc::podwork::StreamReply* reply = msg.ok() ? (*msg)->body_as_StreamReply() : nullptr;
    auto it = reply ? pending_.find(reply->request_id()) : pending_.end();
    if (it == pending_.end()) {
      // Late (answered with DeadlineExceeded already) or not a StreamReply: nobody waits for it.
      if (stray_.Count()) {
        GetLogger("streams")->info(
            "Dropping a reply of podworkerd nobody waits for: {}",
            msg.ok() ? "late or unknown request id" : msg.status().message());
      }
      continue;
    }
    Done done = std::move(it->second.done);
    pending_.erase(it);
    ipc::podwork::StreamReplyT out;
    reply->UnPackTo(&out);
    done(out);
  }
  ArmTimer();
}

void StreamRelay::OnTimer() {
  const MonoTime now = loop_.clock().Now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(options_.deadline).count();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    Done done = std::move(it->second.done);
    it = pending_.erase(it);
    ++timed_out_;
    GetLogger("streams")->warn("podworkerd did not answer a stream request within {} ms", ms);
    done(Failure(StatusCode::kDeadlineExceeded,
                 "podworkerd did not answer within " + std::to_string(ms) + " ms"));
  }
  ArmTimer();
}

void StreamRelay::ArmTimer() {
  if (pending_.empty()) {
    timer_.Cancel();
    return;
  }
  MonoTime first = MonoTime::max();
  for (const auto& [id, p] : pending_) first = std::min(first, p.deadline);
  timer_.ArmAt(first);
}

}  // namespace nodelet::supervisor
