#include "cache_service/server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/strings.h"

namespace flashserve::cache {
namespace {

constexpr size_t kMaxRequestHeader = 16 << 10;

std::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away or timed out: nothing to do
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void SendResponse(int fd, const HttpResponse& r, bool head, std::string_view extra_headers = {}) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", r.status, " ", ToAbsl(Reason(r.status)),
                   "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                   "\r\nConnection: close\r\n", ToAbsl(extra_headers), "\r\n");
  if (!head) out += r.body;
  SendAll(fd, out);
}

}  // namespace

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start(const std::string& host, int port, HttpHandler handler) {
  if (listen_fd_ >= 0) return absl::FailedPreconditionError("HTTP server already started");
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, h.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    addr_len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, h.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    addr_len = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen host '", host, "' is not an IP address or localhost"));
  }
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("HTTP listen on ", host, ":", port, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  if (pipe2(wake_fds_, O_CLOEXEC) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  listen_fd_ = fd;
  handler_ = std::move(handler);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (listen_fd_ < 0) return;
  const char byte = 1;
  while (write(wake_fds_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  close(listen_fd_);
  close(wake_fds_[0]);
  close(wake_fds_[1]);
  listen_fd_ = -1;
  wake_fds_[0] = wake_fds_[1] = -1;
}

void HttpServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "HTTP server: poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the client gave up, or a transient error (EMFILE): retry later
    Serve(fd);
    // Lingering close: stop writing, then read what the client still sends (briefly), so that
    // closing with unread input does not reset the connection before the reply is read.
    shutdown(fd, SHUT_WR);
    timeval linger{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &linger, sizeof(linger));
    char sink[4096];
    for (size_t drained = 0; drained < (64u << 10);) {
      const ssize_t n = recv(fd, sink, sizeof(sink), 0);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    close(fd);
  }
}

void HttpServer::Serve(int fd) {
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string request;
  char buf[4096];
  size_t header_end;
  while ((header_end = request.find("\r\n\r\n")) == std::string::npos &&
         request.size() <= kMaxRequestHeader) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or timed out before a full request
    request.append(buf, static_cast<size_t>(n));
  }
  if (header_end == std::string::npos || header_end > kMaxRequestHeader) {
    SendResponse(fd, {431, "text/plain; charset=utf-8", "request header too large\n"}, false);
    return;
  }
  // Request line: METHOD SP TARGET SP HTTP/x.y
  const std::string_view line = std::string_view(request).substr(0, request.find("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    SendResponse(fd, {400, "text/plain; charset=utf-8", "malformed request line\n"}, false);
    return;
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    SendResponse(fd, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false,
                 "Allow: GET, HEAD\r\n");
    return;
  }
  SendResponse(fd, handler_(std::string(target)), head);
}

}  // namespace flashserve::cache
