// In standalone mode under systemd (the supervisor's stderr is the journal), each service's
// output goes to the journal as well as to LOG-DIR/NAME.log: under its own identifier
// (`journalctl -t nodelet-plegd`), each line's level its entry's priority
// (docs/observability.md, "nodelet's own logs").
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace nodelet::supervisor {

class JournalTee {
 public:
  // A stream to the journal under `identifier`; null when journald does not take one (the
  // caller logs it once; the file still has everything).
  static std::unique_ptr<JournalTee> Open(const std::string& identifier);
  // The same over a stream already open (`fd`, which it owns): what tests use.
  static std::unique_ptr<JournalTee> OnFd(int fd);
  ~JournalTee();
  JournalTee(const JournalTee&) = delete;
  JournalTee& operator=(const JournalTee&) = delete;

  // Output as read from the service's pipe: complete lines go now, a partial one waits for its
  // end (or for 16 KiB). Never blocks: a line journald cannot take at once is dropped.
  void Write(const char* data, size_t len);

 private:
  explicit JournalTee(int fd) : fd_(fd) {}
  void Send(std::string_view line);
  int fd_;
  std::string partial_;
};

// One line of a service's output as the journal stream takes it: nodelet's text format
// ("2026-11-29T10:45:00.123Z warning [plegd.relist] message") as "<4>[plegd.relist] message",
// the level as a syslog priority and the time left to journald; any other line (JSON, or what a
// library printed) as "<6>" and the line.
std::string JournalLine(std::string_view line);

}  // namespace nodelet::supervisor
