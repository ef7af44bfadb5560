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

}  // namespace
}  // namespace farcall::client_internal
