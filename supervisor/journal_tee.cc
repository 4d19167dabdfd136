#include "supervisor/journal_tee.h"

#include <fcntl.h>
#include <syslog.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <cctype>

namespace nodelet::supervisor {
namespace {

constexpr size_t kMaxLine = 16 * 1024;

// spdlog's level names and the priorities of sd-daemon(3).
int PriorityOf(std::string_view level) {
  if (level == "trace" || level == "debug") return 7;
  if (level == "info") return 6;
  if (level == "warning") return 4;
  if (level == "error") return 3;
  if (level == "critical") return 2;
  return -1;
}

}  // namespace

std::string JournalLine(std::string_view line) {
  // "TIME LEVEL REST", TIME starting with a digit and ending in Z.
  const size_t first = line.find(' ');
  if (first != std::string_view::npos && first > 0 &&
      std::isdigit(static_cast<unsigned char>(line[0])) && line[first - 1] == 'Z') {
    const size_t second = line.find(' ', first + 1);
    if (second != std::string_view::npos) {
      const int priority = PriorityOf(line.substr(first + 1, second - first - 1));
      if (priority >= 0) {
        return "<" + std::to_string(priority) + ">" + std::string(line.substr(second + 1));
      }
    }
  }
  return "<6>" + std::string(line);
}

std::unique_ptr<JournalTee> JournalTee::Open(const std::string& identifier) {
  // level_prefix: each line's "<N>" is its priority.
  int fd = sd_journal_stream_fd(identifier.c_str(), LOG_INFO, 1);
  if (fd < 0) return nullptr;
  return OnFd(fd);
}

std::unique_ptr<JournalTee> JournalTee::OnFd(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return std::unique_ptr<JournalTee>(new JournalTee(fd));
}

JournalTee::~JournalTee() {
  if (!partial_.empty()) Send(partial_);
  close(fd_);
}

void JournalTee::Write(const char* data, size_t len) {
  std::string_view in(data, len);
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(in);
      if (partial_.size() >= kMaxLine) {
        Send(partial_);
        partial_.clear();
      }
      return;
    }
    if (partial_.empty()) {
      Send(in.substr(0, nl));
    } else {
      partial_.append(in.substr(0, nl));
      Send(partial_);
      partial_.clear();
    }
    in.remove_prefix(nl + 1);
  }
}

void JournalTee::Send(std::string_view line) {
  std::string out = JournalLine(line);
  out += '\n';
  // Non-blocking: a journald that is behind loses the line here, never the supervisor's loop.
  (void)!write(fd_, out.data(), out.size());
}

}  // namespace nodelet::supervisor
