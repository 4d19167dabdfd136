#include "ctl/terminal_output.h"

#include <iostream>
#include <set>
#include <string_view>

#include "lib/common/utf8.h"

namespace nodelet::ctl {
namespace {

// The length of `text` without a last character that is not complete yet (its lead byte and
// fewer continuation bytes than it announces): that one waits for the rest.
size_t CompleteLength(std::string_view text) {
  size_t i = text.size();
  for (int k = 0; k < 3 && i > 0; ++k) {
    const auto b = static_cast<unsigned char>(text[i - 1]);
    if ((b & 0xC0) == 0x80) {
      --i;
      continue;
    }
    if (b >= 0xC0) {
      const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      if (text.size() - (i - 1) < need) return i - 1;
    }
    break;
  }
  return text.size();
}

}  // namespace

TerminalEscapingBuf::~TerminalEscapingBuf() {
  Emit(true);
  target_->pubsync();
}

TerminalEscapingBuf::int_type TerminalEscapingBuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  pending_ += traits_type::to_char_type(c);
  if (traits_type::to_char_type(c) == '\n') Emit(false);
  return c;
}

std::streamsize TerminalEscapingBuf::xsputn(const char* s, std::streamsize n) {
  pending_.append(s, static_cast<size_t>(n));
  if (std::string_view(s, static_cast<size_t>(n)).find('\n') != std::string_view::npos) {
    Emit(false);
  }
  return n;
}

int TerminalEscapingBuf::sync() {
  Emit(false);
  // What has no line end yet goes too (a prompt, a flush), but not half a character.
  const size_t n = CompleteLength(pending_);
  if (n > 0) {
    const std::string text = EscapeForTerminal(std::string_view(pending_).substr(0, n));
    target_->sputn(text.data(), static_cast<std::streamsize>(text.size()));
    pending_.erase(0, n);
  }
  return target_->pubsync();
}

void TerminalEscapingBuf::Emit(bool all) {
  size_t n = all ? pending_.size() : pending_.rfind('\n');
  if (n == std::string::npos || n == 0) return;
  if (!all) ++n;  // the line end goes with its line
  const std::string text = EscapeForTerminal(std::string_view(pending_).substr(0, n));
  target_->sputn(text.data(), static_cast<std::streamsize>(text.size()));
  pending_.erase(0, n);
}

bool PrintsContainerStream(int argc, const char* const* argv) {
  static const std::set<std::string_view> kRaw = {"logs", "exec", "attach", "port-forward"};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--run-dir") {
      ++i;  // its value
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    return kRaw.count(arg) != 0;  // the first word is the subcommand
  }
  return false;
}

TerminalOutputGuard::TerminalOutputGuard(int argc, const char* const* argv) {
  if (PrintsContainerStream(argc, argv)) return;
  out_ = std::cout.rdbuf();
  err_ = std::cerr.rdbuf();
  escaped_out_ = std::make_unique<TerminalEscapingBuf>(out_);
  escaped_err_ = std::make_unique<TerminalEscapingBuf>(err_);
  std::cout.rdbuf(escaped_out_.get());
  std::cerr.rdbuf(escaped_err_.get());
}

TerminalOutputGuard::~TerminalOutputGuard() {
  if (escaped_out_ == nullptr) return;
  std::cout.flush();
  std::cerr.flush();
  std::cout.rdbuf(out_);
  std::cerr.rdbuf(err_);
}

}  // namespace nodelet::ctl
