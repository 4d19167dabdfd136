#include "lib/pleg/pleg_mirror.h"

#include "lib/ipc/channel_limits.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"

namespace nodelet::pleg {
namespace {

using ipc::pleg::Body;
using ipc::pleg::PlegMessage;

}  // namespace

PlegMirror::PlegMirror(ipc::Context& ctx, const Clock& clock, std::string run_dir,
                       ipc::ServiceId self, std::chrono::milliseconds snapshot_timeout)
    : ctx_(ctx),
      clock_(clock),
      run_dir_(std::move(run_dir)),
      snapshot_timeout_(snapshot_timeout),
      envelope_(self, ipc::NewIncarnation(), clock) {}

Status PlegMirror::ConnectSockets() {
  sub_ = std::make_unique<ipc::Subscriber>(ctx_, ipc::kPlegEvents);
  if (Status s = sub_->Connect(ipc::kPlegEventsEndpoint.Uri(run_dir_)); !s.ok()) return s;
  snapshot_ = std::make_unique<ipc::DealerClient>(ctx_, ipc::kPlegSnapshots);
  if (Status s = snapshot_->Connect(ipc::kPlegSnapshotEndpoint.Uri(run_dir_)); !s.ok()) return s;
  RequestSnapshot();
  return Status::Ok();
}

Status PlegMirror::Connect(EventLoop& loop) {
  loop_ = &loop;
  retry_ = loop.AddTimer([this] {
    Tick();
    ArmRetry();
  });
  if (Status s = ConnectSockets(); !s.ok()) return s;
  sub_source_ = loop.AddSocket(sub_->raw(), [this] {
    OnReadable();
    ArmRetry();
    if (on_applied) on_applied();
  });
  WatchSnapshotSocket();
  return Status::Ok();
}

void PlegMirror::WatchSnapshotSocket() {
  snapshot_source_ = loop_->AddSocket(snapshot_->raw(), [this] {
    OnReadable();
    ArmRetry();
    if (on_applied) on_applied();
  });
  ArmRetry();
}

void PlegMirror::ArmRetry() {
  MonoTime next = NextTick();
  if (next == MonoTime::max()) {
    retry_.Cancel();
  } else {
    retry_.ArmAt(next);
  }
}

void PlegMirror::RequestSnapshot() {
  in_sync_ = false;
  if (outstanding_ != 0 && clock_.Now() - asked_at_ < snapshot_timeout_) return;  // still waiting
  if (outstanding_ != 0) {
    // The answer is overdue: plegd may have died with our request. Start on a fresh socket.
    (void)snapshot_->Reconnect();
    WatchSnapshotSocket();  // the socket was replaced
  }
  const uint64_t id = next_request_id_++;
  flatbuffers::FlatBufferBuilder fbb(128);
  auto req = ipc::pleg::CreateSnapshotRequest(fbb, id);
  // With ZMQ_IMMEDIATE the send fails while plegd is not there; Tick() tries again.
  const Status sent =
      ipc::SendMessage(*snapshot_, fbb, envelope_, Body::SnapshotRequest, req.Union());
  outstanding_ = sent.ok() ? id : 0;
  asked_at_ = clock_.Now();
}

Status PlegMirror::RequestRelist(const std::vector<std::string>& uids) {
  if (snapshot_ == nullptr) return Unavailable("not connected to plegd");
  flatbuffers::FlatBufferBuilder fbb(64 + 48 * uids.size());
  auto req = ipc::pleg::CreateRelistRequest(fbb, fbb.CreateVectorOfStrings(uids));
  Status sent = ipc::SendMessage(*snapshot_, fbb, envelope_, Body::RelistRequest, req.Union());
  if (sent.ok()) ++relist_requests_;
  return sent;
}

void PlegMirror::Tick() {
  if (!in_sync_) RequestSnapshot();
}

MonoTime PlegMirror::NextTick() const {
  if (in_sync_) return MonoTime::max();
  // Retry a failed send soon; an unanswered request after its timeout.
  return outstanding_ == 0 ? asked_at_ + std::chrono::milliseconds(100)
                           : asked_at_ + snapshot_timeout_;
}

void PlegMirror::HandleSnapshotReply() {
  for (int i = 0; i < 16 && snapshot_->Readable(); ++i) {
    auto frame = snapshot_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) return;
    auto m = ipc::DecodeMessage<PlegMessage>(frame->data(), frame->size(),
                                             ipc::pleg::PlegMessageIdentifier(),
                                             ipc::kPlegSnapshots.replies.max_message_bytes);
    if (!m.ok()) {
      (void)bad_messages_.Count();  // not logged here: the owner reports bad_messages()
      continue;
    }
    const ipc::pleg::Snapshot* snap = (*m)->body_as_Snapshot();
    if (snap == nullptr || snap->request_id() != outstanding_) continue;  // stale or refused
    outstanding_ = 0;
    pods_.clear();
    if (snap->pods()) {
      for (const auto* p : *snap->pods()) {
        ipc::pleg::PodRecordT rec;
        p->UnPackTo(&rec);
        // Not `pods_[rec.uid] = std::move(rec)`: the generated operator= takes its argument by
        // value, and that argument is built (moving rec.uid away) before the key is read.
        std::string uid = rec.uid;
        pods_[uid] = std::move(rec);
      }
    }
    incarnation_ = snap->incarnation();
    sequence_ = snap->sequence();
    relist_ = snap->relist();
    in_sync_ = true;
    last_heard_ = clock_.Now();
    ++snapshots_;
    if (on_resync) on_resync();
  }
}

void PlegMirror::DrainUpdates() {
  // Updates wait in the SUB queue while a snapshot is outstanding (Clone pattern).
  for (int i = 0; i < 10000 && in_sync_ && sub_->Readable(); ++i) {
    auto frame = sub_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto m = ipc::DecodeMessage<PlegMessage>(frame->data(), frame->size(),
                                             ipc::pleg::PlegMessageIdentifier(),
                                             ipc::kPlegEvents.max_message_bytes);
    if (!m.ok()) {
      (void)bad_messages_.Count();  // not logged here: the owner reports bad_messages()
      continue;
    }
    const auto* h = (*m)->header();
    last_heard_ = clock_.Now();
    if (h->incarnation() != incarnation_) {
      RequestSnapshot();  // plegd restarted: everything we hold may be stale
      return;
    }
    if (h->sequence() <= sequence_) continue;  // already in the snapshot
    if (h->sequence() != sequence_ + 1) {
      ++gaps_;
      RequestSnapshot();
      return;
    }
    sequence_ = h->sequence();
    Apply(**m);
  }
}

void PlegMirror::OnReadable() {
  HandleSnapshotReply();
  DrainUpdates();
}

void PlegMirror::Apply(const PlegMessage& msg) {
  if (auto done = msg.body_as_RelistDone()) {
    if (done->error() == nullptr || done->error()->size() == 0) {
      relist_ = done->relist();
      relist_started_mono_ns_ = done->started_at_mono_ns();
      relist_error_.clear();
    } else {
      relist_error_ = done->error()->str();
    }
    return;
  }
  const auto* update = msg.body_as_PodUpdate();
  if (update == nullptr || update->pod() == nullptr || update->pod()->uid() == nullptr) return;
  ipc::pleg::PodRecordT rec;
  update->pod()->UnPackTo(&rec);
  const bool removed = rec.removed;
  ipc::pleg::PodRecordT removed_rec;
  const ipc::pleg::PodRecordT* current = nullptr;
  if (removed) {
    pods_.erase(rec.uid);
    removed_rec = std::move(rec);
    current = &removed_rec;
  } else {
    auto& slot = pods_[rec.uid];
    slot = std::move(rec);
    current = &slot;
  }
  if (on_event && update->events()) {
    for (const auto* e : *update->events()) on_event(*e, *current);
  }
}

}  // namespace nodelet::pleg
