// RouterServer::Receive with the sender's kernel credentials: for a server that decides by who
// sent a message (lib/ipc/supervisor_peer.h), not only by who may connect (peer_access.h).
#pragma once

#include <chrono>
#include <optional>

#include "lib/ipc/peer_access.h"
#include "lib/ipc/sockets.h"

namespace nodelet::ipc {

// As server.Receive(timeout); `credentials` (when not null) gets the sender's SO_PEERCRED (uid,
// gid, pid at its connect()), which libzmq hands with each message of an ipc:// connection as
// its "Peer-Address"; nullopt on other transports.
Result<Incoming> ReceiveWithCredentials(RouterServer& server, std::chrono::milliseconds timeout,
                                        std::optional<PeerCredentials>* credentials);

}  // namespace nodelet::ipc
