// The client side of the runtime's streaming server (CRI Exec, Attach, PortForward sessions):
// the Kubernetes channel protocol over WebSocket, with Boost.Beast for the WebSocket itself.
//
// One WebSocket message is one frame: a channel byte, then the channel's bytes. Remote commands
// (exec, attach) use 0 stdin, 1 stdout, 2 stderr, 3 error (a v1 Status as JSON when the command
// ended), 4 resize ({"Width":W,"Height":H}); v5.channel.k8s.io adds 255 close ([255, CHANNEL]:
// no more data on CHANNEL), which is how the end of stdin is passed on. containerd 1.6 speaks
// v4.channel.k8s.io, where the end of stdin cannot be sent: the command keeps its stdin open.
// Port forwarding uses, per port, channel 2i for data and 2i+1 for errors, each starting with
// the port number (two bytes, little-endian).
#pragma once

#include <cstdint>
#include <string>

#include "lib/common/status.h"

namespace nodelet::ctl {

// The protocols nodeletctl offers, the newest first.
inline constexpr char kV5ChannelProtocol[] = "v5.channel.k8s.io";
inline constexpr char kV4ChannelProtocol[] = "v4.channel.k8s.io";

// Channel numbers of remote commands.
enum RemoteChannel : uint8_t {
  kStdin = 0,
  kStdout = 1,
  kStderr = 2,
  kErrorChannel = 3,
  kResize = 4,
  kCloseChannel = 255,
};

// "http://HOST:PORT/PATH?QUERY" as the streaming server answers it. https is refused: nodelet's
// runtimes serve their streams on 127.0.0.1 without TLS.
struct StreamUrl {
  std::string host;
  std::string port;
  std::string target;  // "/exec/TOKEN"
};
Result<StreamUrl> ParseStreamUrl(const std::string& url);

// What the error channel's Status says: the command's exit code (0 on Success, the ExitCode
// cause on NonZeroExitCode) and, for any other failure, its message and the exit code a shell
// gives for it (127 when the executable was not found, 126 when it could not be run, else 1).
struct CommandOutcome {
  int exit_code = 0;
  std::string message;  // empty unless the runtime reported a failure other than an exit code
};
CommandOutcome OutcomeFromStatus(const std::string& status_json);

// One frame of the channel protocol.
std::string Frame(uint8_t channel, const std::string& data);

// "8080", "8080:80", ":80" (a free local port) → the pair; errors name the text.
struct PortPair {
  uint16_t local = 0;
  uint16_t remote = 0;
};
Result<PortPair> ParsePortPair(const std::string& text);

}  // namespace nodelet::ctl
