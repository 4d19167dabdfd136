// FakeStatusStore: a StatusStore in memory that records every commit and fails on demand, for
// unit tests of statusd's batching and rollback.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "svc-statusd/status_store.h"

namespace nodelet::testing {

class FakeStatusStore : public statusd::StatusStore {
 public:
  Result<Contents> LoadAll() override {
    Contents c;
    for (const auto& [uid, rec] : rows) c.records.push_back(rec);
    return c;
  }
  Status Commit(const std::vector<statusd::StatusChange>& changes) override {
    ++commit_calls;
    batch_sizes.push_back(changes.size());
    if (!fail_with.ok()) return fail_with;
    for (const auto& c : changes) {
      if (c.kind == statusd::StatusChange::Kind::kUpdated) {
        rows[c.record.pod.uid] = c.record;
      } else {
        rows.erase(c.record.pod.uid);
      }
    }
    return Status::Ok();
  }

  std::map<std::string, status::PodStatusRecord> rows;
  // Non-OK: every Commit fails with it and keeps nothing.
  Status fail_with;
  int commit_calls = 0;
  std::vector<size_t> batch_sizes;
};

}  // namespace nodelet::testing
