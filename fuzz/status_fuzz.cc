// libFuzzer target: statusd's whole request path (envelope + StatusMessage decode, every field
// read, validation, the status rules and guards, the reply) as nodelet-statusd runs it on each
// received frame, plus the store's record blob decoder. The store is an in-memory stand-in.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/common/clock.h"
#include "lib/status/status_codec.h"
#include "svc-statusd/status_server.h"

namespace {

class MemoryStore : public nodelet::statusd::StatusStore {
 public:
  nodelet::Result<Contents> LoadAll() override { return Contents{}; }
  nodelet::Status Commit(const std::vector<nodelet::statusd::StatusChange>& changes) override {
    // Fail now and then, so the rollback path is fuzzed too.
    return (++commits_ % 7 == 0) ? nodelet::ResourceExhausted("disk full") : nodelet::Status::Ok();
  }

 private:
  int commits_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemoryStore store;
  static nodelet::statusd::StatusManager manager(nodelet::RealClock::Get());
  static nodelet::statusd::StatusServer server(manager, store, 1, 1 << 20);
  std::vector<nodelet::ipc::Incoming> batch(1);
  batch[0].peer = "fuzz";
  batch[0].payload = nodelet::ipc::Frame(data, size);
  auto result = server.HandleBatch(batch);
  // Every reply must itself be a valid message.
  for (const auto& [peer, bytes] : result.replies) {
    if (!nodelet::status::DecodeStatusMessage(bytes.data(), bytes.size(), 64 << 20).ok())
      __builtin_trap();
  }
  if (manager.size() > 10000) manager.RemoveOrphans({}, nullptr);
  (void)nodelet::status::DecodeRecordBlob(data, size);
  return 0;
}
