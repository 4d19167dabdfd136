// The node's address: what the kubelet reports as the Node's InternalIP, the pods' hostIP, and
// the podIP of host-network pods. --node-ip chooses it; without it, the address of the
// interface that holds the default route is used (the kubelet's fallback when the node's name
// does not resolve; nodelet does not ask DNS, whose answer may take seconds on an offline
// node), then any global address of an up interface, then 127.0.0.1.
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet {

// One address of one interface, as getifaddrs reports it.
struct InterfaceAddress {
  std::string interface;
  std::string address;  // textual, IPv4 or IPv6
  bool ipv6 = false;
  bool up = false;
  bool loopback = false;
};

// Every IPv4 and IPv6 address of the host's interfaces.
std::vector<InterfaceAddress> HostAddresses();

// The name of the interface that holds the IPv4 default route (/proc/net/route; `route_file`
// for tests), "" when there is none.
std::string DefaultRouteInterface(const std::string& route_file = "/proc/net/route");

// Chooses the node's IP from `addresses` (see above). `requested` is --node-ip: when not empty
// it must be an IP literal that is neither unspecified, loopback, link-local nor multicast, and
// held by one of `addresses` (the kubelet's validateNodeIP); an error names what is wrong.
Result<std::string> ChooseNodeIP(const std::string& requested,
                                 const std::vector<InterfaceAddress>& addresses,
                                 const std::string& default_interface);

// ChooseNodeIP on this host.
Result<std::string> NodeIP(const std::string& requested);

}  // namespace nodelet
