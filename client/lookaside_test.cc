#include "client/lookaside.h"

#include "gtest/gtest.h"

namespace farcall::client_internal {
namespace {

// Only plain HOST:PORT addresses are taken from a router's answer: a router
// (or whoever answers in its place) must not point a client at a unix
// socket, another resolver, or a path.
TEST(LookasideAddressTest, OnlyHostPortAddressesAreTaken) {
  for (const char* ok : {"10.0.0.7:50051", "agent-0.farcall.svc:50051", "[fd00::7]:50051",
                         "localhost:1", "127.0.0.1:65535"}) {
    EXPECT_TRUE(IsHostPort(ok)) << ok;
  }
  for (const char* bad :
       {"unix:/run/farcall.sock", "unix-abstract:x", "dns:///agents:50051", "ipv4:10.0.0.7:50051",
        "10.0.0.7", "10.0.0.7:", "10.0.0.7:0", "10.0.0.7:65536", "10.0.0.7:+80", "10.0.0.7:8x",
        "a/b:50051", ":50051", "[fd00::7]", "[]:1", "[fd00::zz]:1", "vsock:3:50051", ""}) {
    EXPECT_FALSE(IsHostPort(bad)) << bad;
  }
}

TEST(LookasideAddressTest, TokensTravelInClearOnlyOnThisHostUnlessAllowed) {
  ClientOptions o;
  o.token = "token-0123456789abcdef";
  EXPECT_TRUE(TokenMayGo("127.0.0.1:50050", o));
  EXPECT_TRUE(TokenMayGo("localhost:50050", o));
  EXPECT_TRUE(TokenMayGo("[::1]:50050", o));
  EXPECT_FALSE(TokenMayGo("10.0.0.7:50050", o));
  EXPECT_FALSE(TokenMayGo("127.example.com:50050", o));  // a name, not 127.0.0.0/8
  EXPECT_TRUE(TokenMayGo("127.3.4.5:1", o));
  EXPECT_TRUE(TokenMayGo("ipv4:127.0.0.1:1", o));
  o.allow_insecure_tokens = true;
  EXPECT_TRUE(TokenMayGo("10.0.0.7:50050", o));
  o.allow_insecure_tokens = false;
  o.tls_ca = "/etc/ca.pem";
  EXPECT_TRUE(TokenMayGo("10.0.0.7:50050", o));
}

// Connect keeps the promise: a token without TLS to a target beyond this
// host is refused before anything is sent, unless allowed.
TEST(LookasideAddressTest, ConnectRefusesATokenInClearToAnotherHost) {
  ClientOptions o;
  o.token = "token-0123456789abcdef";
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect("192.0.2.7:50051", o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "the token would travel in clear to 192.0.2.7:50051, which is not this host: use TLS "
            "(tls_ca), or allow_insecure_tokens (CLI --allow_insecure_tokens) where the network "
            "is trusted.");
  EXPECT_EQ(std::string(c.status().message()).find("token-0123"), std::string::npos);
  EXPECT_TRUE(Client::Connect("127.0.0.1:50051", o).ok());
  o.allow_insecure_tokens = true;
  EXPECT_TRUE(Client::Connect("192.0.2.7:50051", o).ok());
  o.token.clear();
  o.allow_insecure_tokens = false;
  EXPECT_TRUE(Client::Connect("192.0.2.7:50051", o).ok());
}

}  // namespace
}  // namespace farcall::client_internal
