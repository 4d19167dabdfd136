#include "lib/common/node_ip.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <fstream>
#include <sstream>

namespace nodelet {
namespace {

// Not an IP literal, or not an address other hosts (or pods) can reach this node at.
bool Unusable(const std::string& ip) {
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    const uint32_t a = ntohl(v4.s_addr);
    return a == 0 || (a >> 24) == 127 || (a >> 16) == 0xA9FE || (a >> 28) == 0xE;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_UNSPECIFIED(&v6) || IN6_IS_ADDR_LOOPBACK(&v6) ||
           IN6_IS_ADDR_LINKLOCAL(&v6) || IN6_IS_ADDR_MULTICAST(&v6);
  }
  return true;
}

}  // namespace

std::vector<InterfaceAddress> HostAddresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    if (inet_ntop(family, raw, buf, sizeof(buf)) == nullptr) continue;
    out.push_back({i->ifa_name, buf, family == AF_INET6, (i->ifa_flags & IFF_UP) != 0,
                   (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

std::string DefaultRouteInterface(const std::string& route_file) {
  std::ifstream in(route_file);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iface, destination, gateway, flags, refcnt, use, metric, mask;
    if (!(fields >> iface >> destination >> gateway >> flags >> refcnt >> use >> metric >> mask))
      continue;
    // RTF_UP is 0x1; the default route has destination and mask 0.
    const unsigned long f = std::strtoul(flags.c_str(), nullptr, 16);
    if (destination == "00000000" && mask == "00000000" && (f & 0x1) != 0) return iface;
  }
  return "";
}

Result<std::string> ChooseNodeIP(const std::string& requested,
                                 const std::vector<InterfaceAddress>& addresses,
                                 const std::string& default_interface) {
  if (!requested.empty()) {
    in6_addr any{};
    if (inet_pton(AF_INET, requested.c_str(), &any) != 1 &&
        inet_pton(AF_INET6, requested.c_str(), &any) != 1) {
      return InvalidArgument("--node-ip " + requested + ": not an IP address");
    }
    if (Unusable(requested)) {
      return InvalidArgument("--node-ip " + requested +
                             ": an unspecified, loopback, link-local or multicast address");
    }
    for (const auto& a : addresses) {
      if (a.address == requested) return requested;
    }
    return InvalidArgument("--node-ip " + requested +
                           ": no interface of this host has this address");
  }
  auto usable = [](const InterfaceAddress& a) {
    return a.up && !a.loopback && !Unusable(a.address);
  };
  // IPv4 before IPv6, the default route's interface before any other.
  for (bool v6 : {false, true}) {
    for (const auto& a : addresses) {
      if (a.ipv6 == v6 && a.interface == default_interface && usable(a)) return a.address;
    }
  }
  for (bool v6 : {false, true}) {
    for (const auto& a : addresses) {
      if (a.ipv6 == v6 && usable(a)) return a.address;
    }
  }
  return std::string("127.0.0.1");
}

Result<std::string> NodeIP(const std::string& requested) {
  return ChooseNodeIP(requested, HostAddresses(), DefaultRouteInterface());
}

}  // namespace nodelet
