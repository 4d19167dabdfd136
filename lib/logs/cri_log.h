// Container logs as the runtime writes them (CRI's log format) and as a reader wants them: the
// parsing, tail/since/timestamps/limit, the choice of the file for a container instance, and
// following a file across rotations until its container ends. Used by `nodeletctl logs` and by
// the supervisor's /containerLogs handler (the kubelet's pkg/kubelet/kuberuntime/logs in spirit).
//
// A CRI log line is `TIMESTAMP STREAM TAG CONTENT\n`: an RFC3339Nano time, stdout or stderr, P
// (partial: the line goes on in the next one) or F (full). A container's instance N (its restart
// count) writes LOG-DIR/pods/NAMESPACE_NAME_UID/CONTAINER/N.log; rotation (the kubelet's naming)
// renames N.log to N.log.YYYYMMDD-HHMMSS and the runtime reopens a new N.log.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/rfc3339.h"
#include "lib/common/status.h"
#include "lib/common/unique_fd.h"
#include "lib/status/pod_status.h"

namespace nodelet::logs {

// One parsed line. The views point into the line given to ParseCriLogLine.
struct CriLogLine {
  std::string_view timestamp;
  int64_t time_unix_ns = 0;
  std::string_view stream;  // "stdout" or "stderr"
  bool partial = false;     // tag P
  std::string_view content;
};

// Parses one line without its '\n'; false when it is not in CRI's format.
bool ParseCriLogLine(std::string_view line, CriLogLine* out);

// A Go duration ("5s", "2m", "1h30m", "1.5h", "300ms", "0"), for --since: nodelet's one parser
// (lib/common/duration.h), negative refused.
Result<std::chrono::nanoseconds> ParseGoDuration(std::string_view text);

struct LogReadOptions {
  int64_t tail_lines = -1;    // the last N lines of what is there at the start; < 0: all
  bool timestamps = false;    // prefix each line with its time, as `kubectl logs --timestamps`
  int64_t since_unix_ns = 0;  // lines older than this are left out; 0: none
  int64_t limit_bytes = -1;   // stop after this many bytes of output; < 0: no limit
  // Pass each partial (P) piece on as it comes, without waiting for the end of its line (the
  // kubelet's way, and what following does): with timestamps only a line's first piece has
  // its time. Otherwise pieces are joined, up to kMaxJoinedLine bytes at a time.
  bool pass_partial = false;
};

// The most of a line the reader joins before it passes the piece on (a line that never ends
// costs no more memory than this).
inline constexpr size_t kMaxJoinedLine = 1 << 20;

// Where formatted text goes; false when the reader is gone (stop reading).
using LogSink = std::function<bool(std::string_view)>;

// Turns CRI log bytes, fed in pieces of any size, into the reader's text: the prefix stripped,
// partial lines joined (a joined line takes its first piece's time) or passed on piece by piece
// (pass_partial), lines not in CRI's format passed as they are. Memory is bounded whatever the
// log holds: a line is joined up to kMaxJoinedLine, then passed on and joined afresh, and
// bytes without a '\n' for longer than that are passed on as they are. Until EndTail() the lines
// are only kept (the last tail_lines of them); EndTail() writes those and from then on every
// complete line goes to the sink at once.
class CriLogFormatter {
 public:
  CriLogFormatter(LogReadOptions options, LogSink sink);
  // False once the sink refused or limit_bytes is reached: nothing more will be written.
  bool Feed(std::string_view bytes);
  bool EndTail();
  // The end of the log: a last line without '\n' (or a partial line never completed) is
  // written as it is, without a newline added.
  bool Finish();
  bool done() const { return done_; }

 private:
  void Line(std::string_view line);
  void Emit(std::string_view timestamp, int64_t time_ns, const std::string& text, bool newline);
  bool Write(std::string_view text);

  LogReadOptions options_;
  LogSink sink_;
  bool tailing_ = true;
  bool done_ = false;
  int64_t written_ = 0;
  std::string pending_;  // bytes after the last '\n'
  // The P pieces of the line under way: partial_ holds what is joined and not written yet.
  void Partial(const CriLogLine& l);
  bool LineUnderWay() const { return !partial_time_.empty() || line_started_; }
  // Writes what is joined of the line under way (without a newline) and keeps the line going.
  void FlushPartial();
  std::string partial_;       // joined P pieces
  std::string partial_time_;  // the first P piece's timestamp
  int64_t partial_time_ns_ = 0;
  bool line_started_ = false;  // a piece of the line under way was written (or kept)
  std::deque<std::string> kept_;
};

// The whole text of `content` (a CRI log file) for a reader: tail, since, timestamps, limit.
std::string FormatCriLog(std::string_view content, const LogReadOptions& options);

// Which log file a request names, resolved against statusd's records, with kubectl's wording
// in the errors: kNotFound for a pod or container that does not exist (HTTP 404),
// kFailedPrecondition for an instance that is not there (no previous one, waiting to start:
// the kubelet's BadRequest, 400), kInvalidArgument for a request that must say more.
struct LogTarget {
  std::string pod_dir;    // NAMESPACE_NAME_UID, beneath LOG-DIR/pods
  std::string container;  // the container's directory beneath pod_dir
  std::string file;       // N.log
  std::string pod_uid;
  // Following ends when this instance is no longer running: its container id while it runs,
  // "" when it does not run (a terminated or previous instance: read what is there and end).
  std::string running_container_id;
};

// `name` is a pod's name (NAME, or NAMESPACE/NAME when `namespace_` is ""); `container` ""
// means the pod's only container. `attempts`: the N of the N.log files in the container's
// directory (ListLogAttempts). The current instance is the highest N; --previous the one below.
Result<LogTarget> ResolveLogTarget(
    const std::vector<status::PodStatusRecord>& pods, const std::string& namespace_,
    const std::string& name, const std::string& container, bool previous,
    const std::function<std::vector<int>(const LogTarget&)>& attempts);

// The pod `name` (NAME, or NAMESPACE/NAME when `namespace_` is ""; NAME alone matches in any
// namespace, if only one).
Result<const status::PodStatusRecord*> FindPod(const std::vector<status::PodStatusRecord>& pods,
                                               const std::string& namespace_,
                                               const std::string& name);

// The containers of a pod, init containers first (statusd keeps them in the pod's order).
std::vector<std::string> ContainerNames(const status::PodStatusRecord& pod);

// The record of `uid` in `pods`, or null.
const status::PodStatusRecord* FindPodByUid(const std::vector<status::PodStatusRecord>& pods,
                                            const std::string& uid);

// True when the instance `target` follows has ended: the pod is gone, or its container no
// longer runs with that container id.
bool InstanceEnded(const std::vector<status::PodStatusRecord>& pods, const LogTarget& target);
// The same from statusd's answer for the target's pod (StatusClient::GetPodStatus): NotFound
// means the pod is gone (ended); nullopt when statusd could not answer (ask again later).
std::optional<bool> InstanceEnded(const Result<status::PodStatusRecord>& pod,
                                  const LogTarget& target);

// Opens LOG-DIR/pods/POD_DIR/CONTAINER beneath `pods_dir_fd` (never out of it, whatever links
// are there) as an O_PATH directory fd.
Result<UniqueFd> OpenContainerLogDir(int pods_dir_fd, const LogTarget& target);

// The N of every N.log in the directory `dir_fd`, ascending.
std::vector<int> ListLogAttempts(int dir_fd);

// Writes the current `file` in `dir_fd` (rotated files are not read, as the kubelet does).
Status ReadCriLog(int dir_fd, const std::string& file, const LogReadOptions& options,
                  const LogSink& sink);

struct FollowOptions {
  // Whether the followed instance has ended; asked at least every `check_interval` (and
  // never more often). Once it says yes, what remains is read and FollowCriLog returns.
  std::function<bool()> ended;
  std::chrono::milliseconds check_interval{1000};
  // A reader's socket: any event on it (the peer closed, or sent more) stops the follow. -1: none.
  int cancel_fd = -1;
  const Clock* clock = nullptr;  // measures check_interval; null: RealClock
};

// What is there (tail applied), then what is appended, across rotations: after N.log is
// renamed, the open file is read to its end and the new N.log is opened (an inotify watch on
// the directory wakes the wait). Partial lines are passed on as they come (pass_partial), so
// memory stays bounded whatever the container writes. Returns Ok when the instance ended and
// all was read, or the reader stopped; an error when the file cannot be opened or read.
Status FollowCriLog(int dir_fd, const std::string& file, const LogReadOptions& options,
                    const FollowOptions& follow, const LogSink& sink);

}  // namespace nodelet::logs
