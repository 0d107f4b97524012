// The operational HTTP endpoint speaks real HTTP/1.1 over a socket.
#include "cache_service/server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::cache {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` to 127.0.0.1:port and returns everything the server wrote before closing.
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_
                    .Start("127.0.0.1", 0,
                           [this](const std::string& path) {
                             ++calls_;
                             if (path == "/hello") return HttpResponse{200, "text/plain", "hi\n"};
                             return HttpResponse{404, "text/plain", "no\n"};
                           })
                    .ok());
    ASSERT_GT(server_.port(), 0);
  }
  HttpServer server_;
  std::atomic<int> calls_{0};
};

TEST_F(HttpServerTest, GetHeadAndErrors) {
  std::string r = Exchange(server_.port(), "GET /hello?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(r,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
            "Connection: close\r\n\r\nhi\n");
  r = Exchange(server_.port(), "HEAD /hello HTTP/1.0\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("Content-Length: 3\r\n"));
  EXPECT_FALSE(r.ends_with("hi\n"));  // no body for HEAD
  r = Exchange(server_.port(), "GET /other HTTP/1.1\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 404 Not Found\r\n"));
  r = Exchange(server_.port(), "POST /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(r, HasSubstr("Allow: GET, HEAD\r\n"));
  r = Exchange(server_.port(), "garbage\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  r = Exchange(server_.port(), "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 431 "));
  EXPECT_EQ(calls_.load(), 3);  // only well-formed GET/HEAD reach the handler
}

TEST_F(HttpServerTest, StopIsPromptAndIdempotent) {
  server_.Stop();
  server_.Stop();
  HttpServer other;
  EXPECT_FALSE(other.Start("not-an-ip", 0, nullptr).ok());
}

}  // namespace
}  // namespace flashserve::cache
