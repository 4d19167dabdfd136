// The containers whose StartContainer the runtime cut off, kept on disk.
//
// A StartContainer that failed with UNAVAILABLE, DEADLINE_EXCEEDED or CANCELLED (containerd
// restarted in the middle of the call), or whose retry found the task the cut call had made
// (ALREADY_EXISTS), leaves a container that exits without ever running, with a reason that is
// not "context canceled". Such an exit is not a run of the container: it is started again, also
// under restartPolicy Never (docs/chaos.md, "A start cut off by containerd's restart"). The note
// must outlive podworkerd: a podworkerd restart between the cut start and the container's exit
// would otherwise fail a Never pod for two faults of nodelet's own making.
//
// The ledger is ROOT/podworkerd/cut-starts, one container id per line, appended to as starts
// are cut and rewritten (temporary file and rename) when it holds more than kMaxEntries; the
// newest kMaxEntries are kept. A line that is not a container id (64 lowercase hex digits) is
// ignored, so a torn last line after a crash costs one entry, nothing else.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <set>
#include <string>

#include "lib/common/status.h"

namespace nodelet::podworkerd {

class CutStartLedger {
 public:
  static constexpr size_t kMaxEntries = 1024;

  // Without a path (unit tests of other parts) the ledger lives in memory only.
  CutStartLedger() = default;

  // Reads `path` (a missing file is an empty ledger) and keeps appending to it. An unreadable
  // or unwritable file is reported; the ledger then goes on in memory.
  Status Open(const std::string& path);

  // Records a cut start; an error when the line could not be written (it is kept in memory).
  Status Note(const std::string& container_id);

  std::set<std::string> Ids() const;

 private:
  void AddLocked(const std::string& id);
  Status RewriteLocked();

  mutable std::mutex mu_;
  std::string path_;
  std::set<std::string> ids_;
  std::deque<std::string> order_;  // oldest first
};

// Whether `id` has the form of a container id the ledger keeps (64 lowercase hex digits).
bool IsContainerId(const std::string& id);

}  // namespace nodelet::podworkerd
