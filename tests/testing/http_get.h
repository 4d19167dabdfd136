// One plain HTTP/1.0 GET over TCP/IPv4 from the test process, for servers inside pods (a pod IP,
// a hostPort on the bridge's address). Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace nodelet::testing {

// The whole answer (status line, headers, body) of GET `path` at ip:port; "" when nothing
// answered. Each socket operation waits at most 2 s.
inline std::string HttpGetOnce(const std::string& ip, int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string answer;
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return answer;
  }
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[1024];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) answer.append(buf, n);
    }
  }
  close(fd);
  return answer;
}

// The body of a 200 answer to GET `path` at ip:port; "" for any other answer or none.
inline std::string HttpGetBody(const std::string& ip, int port, const std::string& path) {
  std::string answer = HttpGetOnce(ip, port, path);
  auto end = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.1 200", 0) != 0 || end == std::string::npos) return "";
  return answer.substr(end + 4);
}

}  // namespace nodelet::testing
