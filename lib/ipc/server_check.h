// What a client checks of the server side before it connects to an ipc:// endpoint, so that
// nothing it sends (the desired set with its Secrets, an operator's exec request) can reach a
// socket another user put in place. ZeroMQ gives a client no credentials of its server, so the
// check is the file system's: the socket's directory and every ancestor can be changed only by
// root and this process's euid (CheckTrustedPath, lib/common/trusted_path.h), and the socket file,
// when it is there, is a socket owned by one of them. ZeroMQ's later reconnects go to the same
// path, in a directory only those users can write.
#pragma once

#include <string>

#include "lib/common/status.h"

namespace nodelet::ipc {

// OK for an endpoint that is not ipc://. For ipc://PATH: PermissionDenied naming the path, the
// component at fault, its owner and mode, and why. PATH's directory may be missing when only
// trusted users can make it (not in a sticky directory such as /tmp, where anyone could).
Status CheckIpcServer(const std::string& uri);

}  // namespace nodelet::ipc
