// ClientConnection: whether the client of a request still holds its connection. A non-streaming
// request whose client went away (a timeout, a retry) is aborted, as SGLang does, so that it stops
// taking batch slots and KV. The packaged cpp-httplib (0.11) gives a handler no access to its
// socket, so the socket is found among this process's own by the request's two addresses, once,
// at the first check (a request that ends before it never looks).
#pragma once

namespace httplib {
struct Request;
}  // namespace httplib

namespace mlaserve {

class ClientConnection {
 public:
  explicit ClientConnection(const httplib::Request& req) : req_(req) {}
  // True once the peer has closed or reset the connection. False while it is open, and always
  // where the socket was not found (the request then runs to its end, as before).
  bool closed() const;

 private:
  const httplib::Request& req_;  // lives as long as its handler, which holds this
  mutable int fd_ = -1;
  mutable bool searched_ = false;
};

}  // namespace mlaserve
