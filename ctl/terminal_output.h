// nodeletctl's output to the operator's terminal. What it prints holds text that containers and
// manifests control (termination messages, event messages, names, annotations); a container must
// not drive the terminal through it (retitle it, clear it, fake lines: the class of kubectl's
// CVE-2021-25743). So every command's stdout and stderr goes through TerminalEscapingBuf, which
// writes valid UTF-8 with the control characters escaped (EscapeForTerminal, lib/common/utf8.h),
// JSON output included (it stays the same document). The exceptions are the commands whose
// output is the container's own stream: `logs`, `exec`, `attach` and `port-forward` pass its
// bytes raw, as `kubectl logs` and `kubectl exec` do.
#pragma once

#include <memory>
#include <streambuf>
#include <string>

namespace nodelet::ctl {

class TerminalEscapingBuf : public std::streambuf {
 public:
  explicit TerminalEscapingBuf(std::streambuf* target) : target_(target) {}
  ~TerminalEscapingBuf() override;
  TerminalEscapingBuf(const TerminalEscapingBuf&) = delete;
  TerminalEscapingBuf& operator=(const TerminalEscapingBuf&) = delete;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  // Writes the pending text up to its last line end (all of it when `all`, else up to a
  // character boundary), escaped.
  void Emit(bool all);

  std::streambuf* target_;
  std::string pending_;
};

// True when the command line's subcommand prints a container's own bytes (logs, exec, attach,
// port-forward), which go out raw.
bool PrintsContainerStream(int argc, const char* const* argv);

// Puts escaping buffers under std::cout and std::cerr for the life of the object (not for the
// commands of PrintsContainerStream); flushes and puts the originals back when it goes.
class TerminalOutputGuard {
 public:
  TerminalOutputGuard(int argc, const char* const* argv);
  ~TerminalOutputGuard();
  TerminalOutputGuard(const TerminalOutputGuard&) = delete;
  TerminalOutputGuard& operator=(const TerminalOutputGuard&) = delete;

 private:
  std::streambuf* out_ = nullptr;
  std::streambuf* err_ = nullptr;
  std::unique_ptr<TerminalEscapingBuf> escaped_out_, escaped_err_;
};

}  // namespace nodelet::ctl
