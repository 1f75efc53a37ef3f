// `wt serve` request handling: the fuzzer's bytes are sent as a raw HTTP request to an in-process
// server over loopback (write side shut down, so a partial request ends at once), and the answer
// is read to the end. The server must answer or close, never crash.
#include <wt/services/http_server.hpp>
#include <wt/log.hpp>
#include <wt/services/receiver.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace {
std::unique_ptr<wt::Receiver> receiver;
std::unique_ptr<wt::HttpServer> server;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  receiver = std::make_unique<wt::Receiver>("ipc");
  wt::HttpServer::Options o;
  o.max_body_bytes = 1 << 20;
  server = std::make_unique<wt::HttpServer>(*receiver, o);
  server->start();
  // Stop the server's threads at exit before static destructors run (the logger's registry
  // among them): registered after the logger exists, so it runs before that registry goes.
  (void)wt::logger();
  std::atexit([] {
    server.reset();
    receiver.reset();
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    for (size_t done = 0; done < size;) {
      ssize_t n = send(fd, data + done, size - done, MSG_NOSIGNAL);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, 5000) > 0 && recv(fd, buf, sizeof buf, 0) > 0) {
    }
  }
  close(fd);
  return 0;
}
