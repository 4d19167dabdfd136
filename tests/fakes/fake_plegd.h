// FakePlegd: plegd's two sockets (events PUB, snapshots ROUTER) bound on the real PLEG endpoints
// in the test's run dir, in the test's own process, for a PlegMirror to follow. The test decides
// what a relist found: PublishRelist() sends a PodUpdate per pod, a `removed` update per pod gone
// since the last relist, then a RelistDone; AnswerSnapshots() serves the current records.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/ipc/channel_limits.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "pleg_generated.h"

namespace nodelet::testing {

class FakePlegd {
 public:
  FakePlegd(ipc::Context& ctx, std::string run_dir)
      : pub_(ctx, ipc::kPlegEvents),
        snapshots_(ctx, ipc::kPlegSnapshots),
        run_dir_(std::move(run_dir)) {}

  Status Bind() {
    if (Status s = pub_.Bind(ipc::kPlegEventsEndpoint.Uri(run_dir_)); !s.ok()) return s;
    return snapshots_.Bind(ipc::kPlegSnapshotEndpoint.Uri(run_dir_));
  }

  // The next relist found `now` (by pod uid); it started at `mono_ns`, reported on the wall clock
  // as `wall_ns`. A message lost here shows as a gap to the subscriber.
  void PublishRelist(std::map<std::string, ipc::pleg::PodRecordT> now, int64_t wall_ns,
                     int64_t mono_ns) {
    ++relist_;
    for (auto& [uid, rec] : now) {
      rec.relist = relist_;
      (void)PublishUpdate(rec);
    }
    for (const auto& [uid, _] : records_) {
      if (now.count(uid)) continue;
      ipc::pleg::PodRecordT gone;
      gone.uid = uid;
      gone.removed = true;
      gone.relist = relist_;
      (void)PublishUpdate(gone);
    }
    records_ = std::move(now);
    (void)PublishRelistDone(relist_, wall_ns, mono_ns);
  }

  // A RelistDone for `relist` alone (nothing else changes); the snapshots report it from now on.
  Status PublishRelistDone(uint64_t relist, int64_t wall_ns, int64_t mono_ns) {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto done = ipc::pleg::CreateRelistDoneDirect(fbb, relist, 1000, records_.size(), 0, wall_ns,
                                                  "", mono_ns);
    auto header = events_.Write(fbb);
    fbb.Finish(ipc::pleg::CreatePlegMessage(fbb, header, ipc::pleg::Body::RelistDone, done.Union()),
               ipc::pleg::PlegMessageIdentifier());
    Status sent = pub_.Publish(fbb.GetBufferPointer(), fbb.GetSize());
    if (sent.ok()) relist_ = relist;
    return sent;
  }

  // Answers every waiting SnapshotRequest with the current records, at the last message sent.
  // An answer that cannot be sent is asked for again by the mirror.
  void AnswerSnapshots() {
    while (snapshots_.Readable()) {
      auto in = snapshots_.Receive(std::chrono::milliseconds(0));
      if (!in.ok()) return;
      auto m = ipc::DecodeMessage<ipc::pleg::PlegMessage>(in->payload.data(), in->payload.size(),
                                                          ipc::pleg::PlegMessageIdentifier());
      if (!m.ok() || (*m)->body_as_SnapshotRequest() == nullptr) continue;
      flatbuffers::FlatBufferBuilder fbb(1024);
      std::vector<flatbuffers::Offset<ipc::pleg::PodRecord>> pods;
      for (const auto& [_, rec] : records_) pods.push_back(ipc::pleg::PodRecord::Pack(fbb, &rec));
      auto snap = ipc::pleg::CreateSnapshotDirect(
          fbb, (*m)->body_as_SnapshotRequest()->request_id(), events_.last_sequence(),
          events_.incarnation(), relist_, &pods);
      auto header = replies_.Write(fbb);
      fbb.Finish(ipc::pleg::CreatePlegMessage(fbb, header, ipc::pleg::Body::Snapshot, snap.Union()),
                 ipc::pleg::PlegMessageIdentifier());
      (void)snapshots_.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize());
    }
  }

 private:
  Status PublishUpdate(const ipc::pleg::PodRecordT& rec) {
    flatbuffers::FlatBufferBuilder fbb(1024);
    auto packed = ipc::pleg::PodRecord::Pack(fbb, &rec);
    auto update = ipc::pleg::CreatePodUpdate(fbb, packed);
    auto header = events_.Write(fbb);
    fbb.Finish(
        ipc::pleg::CreatePlegMessage(fbb, header, ipc::pleg::Body::PodUpdate, update.Union()),
        ipc::pleg::PlegMessageIdentifier());
    return pub_.Publish(fbb.GetBufferPointer(), fbb.GetSize());
  }

  ipc::Publisher pub_;
  ipc::RouterServer snapshots_;
  std::string run_dir_;
  ipc::EnvelopeWriter events_{ipc::ServiceId::Plegd, 0x5eed};
  ipc::EnvelopeWriter replies_{ipc::ServiceId::Plegd, 0x5eed};
  uint64_t relist_ = 0;
  std::map<std::string, ipc::pleg::PodRecordT> records_;
};

}  // namespace nodelet::testing
