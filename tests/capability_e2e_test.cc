// Capabilities end to end (core/capability.h): a router that signs them
// (--capability_signing_key_file) and agents that trust its public key
// (--capability_verify_keys_file) keep callers' tokens off the agents.
// Agents here know only the digest of the router's token, as in the TLS
// overlay: a direct call can succeed only on the capability the router
// minted, and a proxied one carries the caller's principal, so that one
// caller's call_id never meets another's. Forged, expired and misdirected
// capabilities are refused, and so is whatever an agent holds.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/capability.h"
#include "farcall/client.h"
#include "farcall/v1/farcall.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/capability_keys.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::CallOnFour;
using ::farcall::testing::ChildProcess;
using ::farcall::testing::RequestOnFour;
using ::testing::HasSubstr;

constexpr char kAlpha[] = "alpha-token-0123456789";
constexpr char kRoot[] = "root-token-0123456789";

std::unique_ptr<ChildProcess> Start(const std::string& binary, std::vector<std::string> args) {
  args.insert(args.begin(), "--listen=127.0.0.1:0");
  auto p = ChildProcess::Start(binary, args);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// printf %s router-token-0123456789 | sha256sum
constexpr char kRouterTokenDigest[] =
    "sha256:9c8bcf1baa767b86f2f5c19a7db710abd1f73187f7a9204b2b1dcea9350274c9";

// An agent that takes only the router's token (by its digest) and trusts
// the router's public key, and a router in front of it that knows the
// callers' tokens and signs with the private key.
class CapabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/farcall-capability-XXXXXX";
    dir_ = mkdtemp(dir_template);
    testing::WriteCapabilityKeys(dir_);
    std::ofstream(dir_ + "/agent-tokens") << kRouterTokenDigest << " *\n";
    std::ofstream(dir_ + "/router-tokens") << kAlpha << " copy,scale\n" << kRoot << " *\n";
    std::ofstream(dir_ + "/router-token") << "router-token-0123456789\n";
    agent_ = Start(FARCALL_AGENT_BIN,
                   {"--tokens_file=" + dir_ + "/agent-tokens", "--metrics_listen=127.0.0.1:0",
                    "--capability_verify_keys_file=" + dir_ + "/capability-agents.pem"});
    ASSERT_TRUE(agent_);
    router_ = Start(FARCALL_ROUTER_BIN,
                    {"--agents=" + agent_->address(), "--tokens_file=" + dir_ + "/router-tokens",
                     "--agent_token_file=" + dir_ + "/router-token",
                     "--capability_signing_key_file=" + dir_ + "/capability-router.pem"});
    ASSERT_TRUE(router_);
  }

  // The router's key, as the test holds it to mint its own.
  CapabilitySigner RouterKey() const {
    return CapabilitySigner::Load(dir_ + "/capability-router.pem").value();
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Client> As(const std::string& token) {
    ClientOptions o;
    o.token = token;
    auto c = Client::Connect(router_->address(), o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A raw unary copy straight to the agent, presenting `capability`.
  grpc::Status RawCopy(const std::string& capability, const std::string& handler = "copy") {
    auto channel = grpc::CreateChannel(agent_->address(), grpc::InsecureChannelCredentials());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx.AddMetadata(kCapabilityMetadataKey, capability);
    v1::ExecuteRequest req;
    v1::CallHeader* h = req.mutable_header();
    h->set_handler(handler);
    h->add_platforms("cpu");
    v1::ExecuteResponse resp;
    return v1::Agent::NewStub(channel)->Call(&ctx, req, &resp);
  }

  std::string AgentId() {
    ClientOptions o;
    o.token = "router-token-0123456789";
    auto c = Client::Connect(agent_->address(), o);
    EXPECT_TRUE(c.ok());
    absl::StatusOr<AgentDescription> d = (*c)->Describe();
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? d->agent_id : "";
  }

  std::string dir_;
  std::unique_ptr<ChildProcess> agent_, router_;
};

// In the TLS overlay's arrangement every call went through the router (the
// agent refused the caller's token); with capabilities every call goes
// direct, and the agent never needed the caller's token.
TEST_F(CapabilityTest, CallsGoDirectOnTheRoutersCapabilityNotTheCallersToken) {
  std::unique_ptr<Client> alpha = As(kAlpha);
  ASSERT_TRUE(alpha);
  int direct = 0;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<CallResult> r = CallOnFour(*alpha);
    ASSERT_TRUE(r.ok()) << r.status();
    direct += !r->via_router;
  }
  EXPECT_EQ(direct, 20);
  // The router's checks still decide: a capability is minted only for what
  // the token may call.
  absl::Status sum = CallOnFour(*alpha, "sum").status();
  EXPECT_EQ(sum.code(), absl::StatusCode::kPermissionDenied) << sum;
  // The proxy path carries a capability too.
  CallOptions proxy;
  proxy.via_router = true;
  absl::StatusOr<CallResult> r = CallOnFour(*alpha, "copy", proxy);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->via_router);
}

// Through the router, where the agent sees only the router's token, the
// capability carries each caller's principal: alpha's call_id never
// returns root's answer, direct or proxied.
TEST_F(CapabilityTest, TheLedgerKeepsCallersApartBehindTheRouter) {
  std::unique_ptr<Client> alpha = As(kAlpha), root = As(kRoot);
  ASSERT_TRUE(alpha && root);
  for (bool via_router : {true, false}) {
    SCOPED_TRACE(via_router);
    std::vector<float> x = {1, 2, 3, 4};
    CallRequest scale = RequestOnFour("scale", x);
    scale.attributes["alpha"] = 10.0;
    scale.has_side_effect = true;
    CallOptions o;
    o.call_id = absl::StrCat("shared-", via_router);
    o.via_router = via_router;
    o.transport = Transport::kGrpc;
    absl::StatusOr<CallResult> r = root->Call(scale, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->results[0].as<float>()[3], 40);
    // Alpha's copy under root's id is alpha's own call: not root's answer
    // (40), and not refused as root's id reused for other work either.
    CallRequest copy = RequestOnFour("copy", x);
    copy.has_side_effect = true;
    absl::StatusOr<CallResult> mine = alpha->Call(copy, o);
    ASSERT_TRUE(mine.ok()) << mine.status();
    EXPECT_EQ(mine->results[0].as<float>()[3], 4);
    EXPECT_EQ(mine->via_router, via_router);
  }
}

TEST_F(CapabilityTest, ForgedExpiredAndMisdirectedCapabilitiesAreRefused) {
  const std::string id = AgentId();
  ASSERT_FALSE(id.empty());
  CapabilitySigner key = RouterKey();
  CapabilitySigner other =
      CapabilitySigner::FromPem(NewCapabilitySigningKeyPem(), "another").value();
  const absl::Time soon = absl::Now() + absl::Minutes(1);
  // The right key, this agent, this handler: served.
  grpc::Status s = RawCopy(key.Mint({"token:aaaaaaaaaaaa", "copy", id, soon}));
  EXPECT_TRUE(s.ok()) << s.error_message();
  // Forged: another key, or bytes changed.
  s = RawCopy(other.Mint({"token:aaaaaaaaaaaa", "copy", id, soon}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(),
            absl::StrCat("the call's capability was signed by a key this agent does not trust "
                         "(key id ",
                         other.key_id(),
                         "); add the router's public key to --capability_verify_keys_file."));
  std::string tampered = key.Mint({"token:aaaaaaaaaaaa", "copy", id, soon});
  tampered[12] ^= 1;
  EXPECT_EQ(RawCopy(tampered).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RawCopy("not a capability").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Replayed after its expiry.
  s = RawCopy(key.Mint({"token:aaaaaaaaaaaa", "copy", id, absl::Now() - absl::Seconds(1)}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("expired"));
  // Another handler, another agent.
  s = RawCopy(key.Mint({"token:aaaaaaaaaaaa", "copy", id, soon}), "sum");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "the call's capability does not allow handler 'sum'.");
  s = RawCopy(key.Mint({"token:aaaaaaaaaaaa", "copy", id + "-elsewhere", soon}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // An agent that requires tokens refuses a capability that names no
  // caller (from a router that authenticates none).
  s = RawCopy(key.Mint({"", "copy", id, soon}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(),
            "the call's capability names no caller (its router authenticates none), and this "
            "agent requires tokens.");
  // Each refusal is counted by why (what FarcallAgentsRefuseCapabilities
  // watches).
  const std::string page = testing::HttpGet(agent_->metrics_port(), "/metrics");
  auto count = [&page](const char* result) {
    return testing::MetricValue(
        page, absl::StrCat("farcall_agent_capability_checks_total{result=\"", result, "\"}"));
  };
  EXPECT_EQ(count("unknown_key"), 1);
  EXPECT_EQ(count("bad_signature"), 1);
  EXPECT_EQ(count("malformed"), 1);
  EXPECT_EQ(count("expired"), 1);
  EXPECT_EQ(count("no_principal"), 1);
  EXPECT_GE(count("verified"), 1);
}

// What a compromised agent holds is no use anywhere else: its verify keys
// cannot mint (tested in core/capability_test.cc), and its tokens file
// holds only the digest of the router's token, which no agent takes as a
// token.
TEST_F(CapabilityTest, WhatAnAgentHoldsOpensNoOtherAgent) {
  std::string held;
  {
    std::ifstream f(dir_ + "/agent-tokens");
    std::getline(f, held);
  }
  const std::string digest = held.substr(0, held.find(' '));
  ASSERT_EQ(digest, kRouterTokenDigest);
  for (const std::string& presented : {digest, digest.substr(7)}) {
    ClientOptions o;
    o.token = presented;
    auto c = Client::Connect(agent_->address(), o);
    ASSERT_TRUE(c.ok());
    absl::Status s = CallOnFour(**c).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  }
  // The router's real token still works, under the router's principal.
  ClientOptions o;
  o.token = "router-token-0123456789";
  auto c = Client::Connect(agent_->address(), o);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(CallOnFour(**c).ok());
}

// A capability names its handler in at most 1 KiB; cut short, it would
// grant the prefix. Resolve bounds the name as a call header does, and a
// router that could forward a longer name with a capability will not start.
TEST_F(CapabilityTest, HandlerNamesLongerThanACapabilityHoldsAreRefused) {
  auto channel = grpc::CreateChannel(router_->address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  ctx.AddMetadata("authorization", std::string("Bearer ") + kRoot);
  v1::ResolveRequest req;
  req.set_platform("cpu");
  req.set_handler(std::string(1024, 'c') + std::string(1024, 'x'));
  v1::ResolveResponse resp;
  grpc::Status s = v1::Router::NewStub(channel)->Resolve(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "the handler name is 2048 bytes, over the limit of 1024 (--max_name_bytes).");
  EXPECT_EQ(resp.agents_size(), 0);
  ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(absl::StrCat(
      FARCALL_ROUTER_BIN, " --listen=127.0.0.1:0 --agents=127.0.0.1:1 --max_name_bytes=2048",
      " --capability_signing_key_file=", dir_, "/capability-router.pem", " --tokens_file=", dir_,
      "/router-tokens"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--max_name_bytes=2048 is over 1024, the longest handler name "
                                  "a capability can name (--capability_signing_key_file)."));
}

// An agent with several principals reports its last failed call to
// Describe by code and handler only: the message may hold a tenant's data.
TEST_F(CapabilityTest, DescribeGivesAnotherTenantsFailureByCodeAndHandlerOnly) {
  ClientOptions o;
  o.token = "router-token-0123456789";
  auto c = Client::Connect(agent_->address(), o);
  ASSERT_TRUE(c.ok()) << c.status();
  CallRequest fail;
  fail.platform = "cpu";
  fail.handler = "fail";
  fail.attributes = {{"code", int64_t{9}}, {"message", std::string("tenant A's secret")}};
  EXPECT_EQ((*c)->Call(fail).status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<AgentDescription> d = (*c)->Describe();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->last_failed_call, "FAILED_PRECONDITION from handler 'fail'");
  EXPECT_THAT(d->last_failed_call, ::testing::Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace farcall
