#include "lib/logs/cri_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "lib/common/beneath.h"
#include "lib/common/duration.h"

namespace nodelet::logs {

Result<std::chrono::nanoseconds> ParseGoDuration(std::string_view text) {
  auto d = ::nodelet::ParseGoDuration(std::string(text));
  if (!d.ok()) return d.status();
  if (d->count() < 0) {
    return InvalidArgument("'" + std::string(text) + "' is negative: --since takes 0 or more");
  }
  return *d;
}

bool ParseCriLogLine(std::string_view line, CriLogLine* out) {
  const size_t a = line.find(' ');
  if (a == std::string_view::npos) return false;
  const size_t b = line.find(' ', a + 1);
  if (b == std::string_view::npos) return false;
  // The tag may be the line's end (an empty full line: "TIME stdout F").
  size_t c = line.find(' ', b + 1);
  const std::string_view tag = line.substr(b + 1, c == std::string_view::npos ? c : c - b - 1);
  const std::string_view stream = line.substr(a + 1, b - a - 1);
  if (stream != "stdout" && stream != "stderr") return false;
  // The kubelet's tags: P or F, possibly followed by ":" and more (reserved).
  const std::string_view kind = tag.substr(0, tag.find(':'));
  if (kind != "P" && kind != "F") return false;
  auto time = ParseRfc3339Nanos(line.substr(0, a));
  if (!time) return false;
  out->timestamp = line.substr(0, a);
  out->time_unix_ns = *time;
  out->stream = stream;
  out->partial = kind == "P";
  out->content = c == std::string_view::npos ? std::string_view() : line.substr(c + 1);
  return true;
}

CriLogFormatter::CriLogFormatter(LogReadOptions options, LogSink sink)
    : options_(options), sink_(std::move(sink)), tailing_(options.tail_lines >= 0) {
  if (options_.limit_bytes == 0) done_ = true;
}

bool CriLogFormatter::Feed(std::string_view bytes) {
  if (done_) return false;
  pending_.append(bytes);
  size_t start = 0;
  for (size_t nl; !done_ && (nl = pending_.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    Line(std::string_view(pending_).substr(start, nl - start));
  }
  pending_.erase(0, std::min(start, pending_.size()));
  if (!done_ && pending_.size() > kMaxJoinedLine) {
    // No runtime writes a CRI line this long: bytes that are not in its format, passed on as
    // they are rather than kept until a '\n' that may never come.
    Emit("", 0, pending_, false);
    pending_.clear();
  }
  return !done_;
}

void CriLogFormatter::Partial(const CriLogLine& l) {
  if (!LineUnderWay()) {
    partial_time_ = std::string(l.timestamp);
    partial_time_ns_ = l.time_unix_ns;
  }
  partial_.append(l.content);
  if ((options_.pass_partial && !tailing_) || partial_.size() >= kMaxJoinedLine) FlushPartial();
}

void CriLogFormatter::FlushPartial() {
  if (partial_.empty()) return;
  // Only the line's first piece carries its time; the next ones go on from it.
  Emit(line_started_ ? std::string_view() : std::string_view(partial_time_), partial_time_ns_,
       partial_, false);
  line_started_ = true;
  partial_.clear();
}

void CriLogFormatter::Line(std::string_view line) {
  CriLogLine l;
  if (!ParseCriLogLine(line, &l)) {
    Emit("", 0, std::string(line), true);  // not CRI's format: as it is
    return;
  }
  if (l.partial) {
    Partial(l);
    return;
  }
  if (!LineUnderWay()) {
    Emit(l.timestamp, l.time_unix_ns, std::string(l.content), true);
    return;
  }
  partial_.append(l.content);
  Emit(line_started_ ? std::string_view() : std::string_view(partial_time_), partial_time_ns_,
       partial_, true);
  partial_.clear();
  partial_time_.clear();
  line_started_ = false;
}

void CriLogFormatter::Emit(std::string_view timestamp, int64_t time_ns, const std::string& text,
                           bool newline) {
  if (options_.since_unix_ns != 0 && time_ns != 0 && time_ns < options_.since_unix_ns) return;
  std::string out;
  if (options_.timestamps && !timestamp.empty()) {
    out.append(timestamp);
    out.push_back(' ');
  }
  out.append(text);
  if (newline) out.push_back('\n');
  if (!tailing_) {
    Write(out);
    return;
  }
  if (options_.tail_lines == 0) return;
  kept_.push_back(std::move(out));
  if (static_cast<int64_t>(kept_.size()) > options_.tail_lines) kept_.pop_front();
}

bool CriLogFormatter::Write(std::string_view text) {
  if (done_) return false;
  if (options_.limit_bytes >= 0 &&
      written_ + static_cast<int64_t>(text.size()) >= options_.limit_bytes) {
    text = text.substr(0, static_cast<size_t>(options_.limit_bytes - written_));
    done_ = true;
  }
  written_ += static_cast<int64_t>(text.size());
  if (!text.empty() && !sink_(text)) done_ = true;
  return !done_;
}

bool CriLogFormatter::EndTail() {
  if (!tailing_) return !done_;
  tailing_ = false;
  while (!kept_.empty() && !done_) {
    Write(kept_.front());
    kept_.pop_front();
  }
  kept_.clear();
  return !done_;
}

bool CriLogFormatter::Finish() {
  if (!pending_.empty() && !done_) {
    // A last line without its '\n' (the runtime is still writing it).
    std::string last = std::move(pending_);
    pending_.clear();
    CriLogLine l;
    if (ParseCriLogLine(last, &l)) {
      if (!LineUnderWay()) {
        partial_time_ = std::string(l.timestamp);
        partial_time_ns_ = l.time_unix_ns;
      }
      partial_.append(l.content);
    } else {
      Emit("", 0, last, false);
    }
  }
  if (LineUnderWay()) {
    FlushPartial();
    partial_time_.clear();
    line_started_ = false;
  }
  return EndTail();
}

std::string FormatCriLog(std::string_view content, const LogReadOptions& options) {
  std::string out;
  CriLogFormatter f(options, [&out](std::string_view s) {
    out.append(s);
    return true;
  });
  f.Feed(content);
  f.Finish();
  return out;
}

std::vector<std::string> ContainerNames(const status::PodStatusRecord& pod) {
  std::vector<std::string> names;
  for (const auto& c : pod.status.init_container_statuses) names.push_back(c.name);
  for (const auto& c : pod.status.container_statuses) names.push_back(c.name);
  return names;
}

const status::PodStatusRecord* FindPodByUid(const std::vector<status::PodStatusRecord>& pods,
                                            const std::string& uid) {
  for (const auto& r : pods) {
    if (r.pod.uid == uid) return &r;
  }
  return nullptr;
}

namespace {

const status::ContainerStatus* FindContainer(const status::PodStatusRecord& pod,
                                             const std::string& name) {
  for (const auto* list : {&pod.status.init_container_statuses, &pod.status.container_statuses}) {
    for (const auto& c : *list) {
      if (c.name == name) return &c;
    }
  }
  return nullptr;
}

// A name that is one path component ("a", not "", ".", "..", "a/b").
bool OneComponent(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

}  // namespace

Result<const status::PodStatusRecord*> FindPod(const std::vector<status::PodStatusRecord>& pods,
                                               const std::string& namespace_,
                                               const std::string& name) {
  std::string ns = namespace_, pod_name = name;
  if (ns.empty()) {
    if (auto slash = name.find('/'); slash != std::string::npos) {
      ns = name.substr(0, slash);
      pod_name = name.substr(slash + 1);
    }
  }
  std::vector<const status::PodStatusRecord*> matches;
  for (const auto& r : pods) {
    if (r.pod.name == pod_name && (ns.empty() || r.pod.namespace_ == ns)) matches.push_back(&r);
  }
  if (matches.empty()) return NotFound("pods \"" + pod_name + "\" not found");
  if (matches.size() > 1) {
    std::string m = "pod name \"" + pod_name + "\" is in several namespaces, give one of:";
    for (const auto* r : matches) m += " " + r->pod.namespace_ + "/" + r->pod.name;
    return InvalidArgument(m);
  }
  return matches[0];
}

Result<LogTarget> ResolveLogTarget(
    const std::vector<status::PodStatusRecord>& pods, const std::string& namespace_,
    const std::string& name, const std::string& container, bool previous,
    const std::function<std::vector<int>(const LogTarget&)>& attempts) {
  auto found = FindPod(pods, namespace_, name);
  if (!found.ok()) return found.status();
  const status::PodStatusRecord& pod = **found;
  const std::string& pod_name = pod.pod.name;
  const std::vector<std::string> names = ContainerNames(pod);
  std::string chosen = container;
  if (chosen.empty()) {
    if (names.size() != 1) {
      std::string m =
          "a container name must be specified for pod " + pod_name + ", choose one of: [";
      for (size_t i = 0; i < names.size(); ++i) m += (i ? " " : "") + names[i];
      return InvalidArgument(m + "]");
    }
    chosen = names[0];
  }
  const status::ContainerStatus* cs = FindContainer(pod, chosen);
  if (cs == nullptr) {
    return NotFound("container " + chosen + " is not valid for pod " + pod_name);
  }
  LogTarget t;
  t.pod_dir = pod.pod.namespace_ + "_" + pod.pod.name + "_" + pod.pod.uid;
  t.container = chosen;
  t.pod_uid = pod.pod.uid;
  if (!OneComponent(t.pod_dir) || !OneComponent(t.container)) {
    return InvalidArgument("pod " + pod_name + " or container " + chosen +
                           " does not name a log directory");
  }
  const std::vector<int> have = attempts(t);
  if (have.empty()) {
    if (cs->state.waiting && !cs->state.waiting->reason.empty()) {
      return FailedPrecondition("container \"" + chosen + "\" in pod \"" + pod_name +
                                "\" is waiting to start: " + cs->state.waiting->reason);
    }
    if (previous) {
      return FailedPrecondition("previous terminated container \"" + chosen + "\" in pod \"" +
                                pod_name + "\" not found");
    }
    return FailedPrecondition("container \"" + chosen + "\" in pod \"" + pod_name +
                              "\" has no log yet");
  }
  // The current instance: the one that runs (restart_count), else the newest file.
  int current = have.back();
  if (cs->state.running && std::find(have.begin(), have.end(), cs->restart_count) != have.end()) {
    current = cs->restart_count;
  }
  int attempt = current;
  if (previous) {
    if (!cs->state.running && cs->state.waiting && cs->last_state.terminated) {
      // Waiting to restart: the previous instance is the one that ended last (kubelet's
      // lastState), which is also the newest file.
      attempt = current;
    } else {
      auto below = std::lower_bound(have.begin(), have.end(), current);
      if (below == have.begin()) {
        return FailedPrecondition("previous terminated container \"" + chosen + "\" in pod \"" +
                                  pod_name + "\" not found");
      }
      attempt = *(below - 1);
    }
  }
  t.file = std::to_string(attempt) + ".log";
  if (!previous && cs->state.running && cs->restart_count == attempt) {
    t.running_container_id = cs->container_id.empty() ? "-" : cs->container_id;
  }
  return t;
}

bool InstanceEnded(const std::vector<status::PodStatusRecord>& pods, const LogTarget& target) {
  if (target.running_container_id.empty()) return true;
  const status::PodStatusRecord* pod = FindPodByUid(pods, target.pod_uid);
  if (pod == nullptr) return true;
  const status::ContainerStatus* cs = FindContainer(*pod, target.container);
  if (cs == nullptr || !cs->state.running) return true;
  const std::string id = cs->container_id.empty() ? "-" : cs->container_id;
  return id != target.running_container_id;
}

std::optional<bool> InstanceEnded(const Result<status::PodStatusRecord>& pod,
                                  const LogTarget& target) {
  if (pod.ok()) return InstanceEnded(std::vector<status::PodStatusRecord>{*pod}, target);
  if (pod.status().code() == StatusCode::kNotFound) return true;
  return std::nullopt;
}

Result<UniqueFd> OpenContainerLogDir(int pods_dir_fd, const LogTarget& target) {
  if (!OneComponent(target.pod_dir) || !OneComponent(target.container)) {
    return InvalidArgument("bad log directory " + target.pod_dir + "/" + target.container);
  }
  return OpenBeneath(pods_dir_fd, target.pod_dir + "/" + target.container, O_DIRECTORY,
                     "log directory " + target.pod_dir + "/" + target.container);
}

std::vector<int> ListLogAttempts(int dir_fd) {
  std::vector<int> out;
  int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return out;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return out;
  }
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    if (n.size() < 5 || n.substr(n.size() - 4) != ".log") continue;
    n.remove_suffix(4);
    int v = 0;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec != std::errc() || p != n.data() + n.size() || v < 0) continue;
    if (std::to_string(v) != n) continue;  // "01.log" is not an attempt's file
    out.push_back(v);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Opens a regular file `name` in `dir_fd` for reading, never through a link nor a FIFO.
Result<UniqueFd> OpenLogFile(int dir_fd, const std::string& name) {
  UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open log file " + name, errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat log file " + name, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument("log file " + name + " is not a regular file");
  return fd;
}

// Feeds everything from the file's offset to its end.
Status Drain(int fd, CriLogFormatter& f) {
  char buf[64 * 1024];
  while (!f.done()) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read log file", errno);
    if (n == 0) break;
    f.Feed(std::string_view(buf, static_cast<size_t>(n)));
  }
  return Status::Ok();
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

Status ReadCriLog(int dir_fd, const std::string& file, const LogReadOptions& options,
                  const LogSink& sink) {
  auto fd = OpenLogFile(dir_fd, file);
  if (!fd.ok()) return fd.status();
  CriLogFormatter f(options, sink);
  if (Status s = Drain(fd->get(), f); !s.ok()) return s;
  f.Finish();
  return Status::Ok();
}

Status FollowCriLog(int dir_fd, const std::string& file, const LogReadOptions& options,
                    const FollowOptions& follow, const LogSink& sink) {
  const Clock& clock = follow.clock != nullptr ? *follow.clock : RealClock::Get();
  auto opened = OpenLogFile(dir_fd, file);
  if (!opened.ok()) return opened.status();
  UniqueFd fd = std::move(*opened);
  // The directory's events wake the wait: appends (IN_MODIFY), the rename of a rotation and the
  // new file. Without inotify the wait is a short poll.
  UniqueFd watch(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (watch.valid()) {
    const std::string self = "/proc/self/fd/" + std::to_string(dir_fd);
    if (inotify_add_watch(
            watch.get(), self.c_str(),
            IN_MODIFY | IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE) < 0) {
      watch.reset();
    }
  }
  // Following streams: a partial line is passed on as it comes (the kubelet's way).
  LogReadOptions streaming = options;
  streaming.pass_partial = true;
  CriLogFormatter f(streaming, sink);
  if (Status s = Drain(fd.get(), f); !s.ok()) return s;
  f.EndTail();
  // Switches to a new `file` when the one open is no longer it (rotated): reads the old one to
  // its end first. False when nothing changed.
  auto rotate = [&]() -> Result<bool> {
    struct stat open_st {
    }, named_st{};
    if (fstat(fd.get(), &open_st) != 0) return ErrnoStatus("stat log file", errno);
    if (fstatat(dir_fd, file.c_str(), &named_st, AT_SYMLINK_NOFOLLOW) != 0) {
      return false;  // renamed, the new one not there yet
    }
    if (SameFile(open_st, named_st)) return false;
    if (Status s = Drain(fd.get(), f); !s.ok()) return s;
    auto next = OpenLogFile(dir_fd, file);
    if (!next.ok()) return false;  // replaced by something we do not read; keep waiting
    fd = std::move(*next);
    if (Status s = Drain(fd.get(), f); !s.ok()) return s;
    return true;
  };
  MonoTime next_check = clock.Now();
  while (!f.done()) {
    auto rotated = rotate();
    if (!rotated.ok()) return rotated.status();
    if (*rotated) continue;
    if (clock.Now() >= next_check) {
      next_check = clock.Now() + follow.check_interval;
      if (follow.ended && follow.ended()) {
        // The instance wrote its last line before it ended: read to the end (and into a file
        // a rotation just opened).
        if (Status s = Drain(fd.get(), f); !s.ok()) return s;
        auto last = rotate();
        if (!last.ok()) return last.status();
        f.Finish();
        return Status::Ok();
      }
    }
    pollfd p[2] = {{watch.get(), POLLIN, 0}, {follow.cancel_fd, POLLIN | POLLRDHUP, 0}};
    const long max_wait = watch.valid() ? follow.check_interval.count() : 100;
    const int wait_ms = static_cast<int>(MillisUntil(clock, next_check, max_wait));
    int n = poll(p, 2, wait_ms);
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (follow.cancel_fd >= 0 && p[1].revents != 0) return Status::Ok();  // the reader went away
    if (p[0].revents & POLLIN) {
      char events[4096];
      while (read(watch.get(), events, sizeof events) > 0) {
      }
    }
    if (Status s = Drain(fd.get(), f); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace nodelet::logs
