#include "server/client_connection.h"

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace mlaserve {

namespace {

// The numeric host and port of a socket address, formatted as cpp-httplib formats them.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;  // not a socket
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;    // not connected
  std::string local_host, peer_host;
  int local_port = 0, peer_port = 0;
  return host_and_port(local, local_len, local_host, local_port) && local_port == req.local_port &&
         host_and_port(peer, peer_len, peer_host, peer_port) && peer_port == req.remote_port &&
         peer_host == req.remote_addr;
}

int socket_of(const httplib::Request& req) {
  if (req.remote_port <= 0 || req.local_port <= 0) return -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char* end = nullptr;
    const std::string name = entry.path().filename().string();
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0') continue;
    if (is_connection_of(int(fd), req)) return int(fd);
  }
  return -1;
}

}  // namespace

bool ClientConnection::closed() const {
  if (!searched_) {
    fd_ = socket_of(req_);
    searched_ = true;
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  // Readable but not hung up: a pipelined request waits there, or the FIN came without RDHUP.
  char byte;
  return (p.revents & POLLIN) && recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace mlaserve
