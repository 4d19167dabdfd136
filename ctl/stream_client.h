// Sessions on the runtime's streaming server (exec, attach, port-forward), with Boost.Beast for
// the WebSocket; the protocol's pieces are in ctl/stream_protocol.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ctl/stream_protocol.h"
#include "lib/common/status.h"

namespace nodelet::ctl {

// A remote command session (exec or attach): copies stdin (when `stdin`) to the session and its
// output to stdout and stderr until the session ends. With `tty`, the terminal on stdin is put in
// raw mode and its size is sent at the start and on every SIGWINCH. Returns the command's
// outcome; UNAVAILABLE when the server cannot be reached or refuses the session, and when the
// session ends without the command's status (the server went away).
struct RemoteCommandOptions {
  bool stdin = false;
  bool tty = false;
  int in_fd = 0, out_fd = 1, err_fd = 2;
  // Called once the session is open, with the negotiated protocol.
  std::function<void(const std::string&)> on_open;
};
Result<CommandOutcome> RunRemoteCommand(const std::string& url,
                                        const RemoteCommandOptions& options);

// Port forwarding: listens on `address` at each local port, and for each accepted connection asks
// `open_url(remote_port)` for a new session URL (a session carries one connection), then copies
// both ways until either side closes. Runs until `stop` returns true (checked every 200 ms) or
// a listener fails. `on_listen(local, remote)` reports each port as it is bound (local 0 in the
// request: a free port).
struct PortForwardOptions {
  std::vector<std::string> addresses{"127.0.0.1"};
  std::vector<PortPair> ports;
  std::function<Result<std::string>(uint16_t remote)> open_url;
  std::function<void(const std::string& address, uint16_t local, uint16_t remote)> on_listen;
  std::function<void(const std::string& message)> on_error;
  std::function<bool()> stop;
};
Status RunPortForward(const PortForwardOptions& options);

}  // namespace nodelet::ctl
