// TLS, mutual TLS and bearer tokens, end to end: real agents and routers,
// certificates made with openssl at run time.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/capability_keys.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;
using ::testing::Not;

// A CA, a server certificate for 127.0.0.1 and a client certificate, in a
// temporary directory.
struct Pki {
  std::string dir, ca, server_cert, server_key, client_cert, client_key, tokens;
};

const Pki& Certificates() {
  static const Pki* pki = [] {
    auto* p = new Pki;
    p->dir = ::testing::TempDir() + "farcall-pki";
    p->ca = p->dir + "/ca.pem";
    p->server_cert = p->dir + "/server.pem";
    p->server_key = p->dir + "/server.key";
    p->client_cert = p->dir + "/client.pem";
    p->client_key = p->dir + "/client.key";
    p->tokens = p->dir + "/tokens";
    const std::string d = p->dir;
    const std::string script = absl::StrCat(
        "set -e; rm -rf ", d, "; mkdir -p ", d, "; cd ", d, ";",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=farcall-test-ca "
        "-keyout ca.key -out ca.pem;",
        "for who in server client; do "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=$who -keyout $who.key -out $who.csr;"
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > $who.ext;"
        "openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile $who.ext -out $who.pem; done;",
        // An agent certificate that names a service, not an address.
        "openssl req -newkey rsa:2048 -nodes -subj /CN=agents -keyout agents.key -out agents.csr;"
        "printf 'subjectAltName=DNS:farcall-agent.farcall.svc\\n' > agents.ext;"
        "openssl x509 -req -in agents.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile agents.ext -out agents.pem;",
        "printf '# test tokens\\nalpha-token-0123456789 axpy,copy\\nroot-token-0123456789 *\\n' > "
        "tokens;",
        "printf 'root-token-0123456789\\n' > router-token");
    ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(script);
    if (r.exit_code != 0) std::fprintf(stderr, "openssl failed:\n%s\n", r.output.c_str());
    // The router's capability key (the agents here trust none of it).
    ::farcall::testing::WriteCapabilityKeys(p->dir);
    return p;
  }();
  return *pki;
}

std::unique_ptr<ChildProcess> Start(const std::string& bin, std::vector<std::string> args) {
  args.insert(args.begin(), "--listen=127.0.0.1:0");
  auto p = ChildProcess::Start(bin, args);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// A copy of float32[4] through `target` with `options`.
absl::Status Copy(const std::string& target, const ClientOptions& options,
                  const std::string& handler = "copy") {
  auto client = Client::Connect(target, options);
  if (!client.ok()) return client.status();
  CallOptions opts;
  opts.timeout = absl::Seconds(10);
  absl::StatusOr<CallResult> r = ::farcall::testing::CallOnFour(**client, handler, opts);
  if (!r.ok()) return r.status();
  return r->results[0].as<float>()[3] == 4 ? absl::OkStatus() : absl::InternalError("wrong result");
}

ClientOptions Tls(bool with_client_cert = false, std::string token = "") {
  const Pki& p = Certificates();
  ClientOptions o;
  o.tls_ca = p.ca;
  if (with_client_cert) {
    o.tls_cert = p.client_cert;
    o.tls_key = p.client_key;
  }
  o.token = std::move(token);
  return o;
}

TEST(SecurityTest, TlsAgentRefusesPlaintextAndServesTls) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN, {"--tls_cert=" + p.server_cert, "--tls_key=" + p.server_key,
                                         "--metrics_listen=127.0.0.1:0"});
  ASSERT_NE(agent, nullptr);
  absl::Status plain = Copy(agent->address(), {});
  EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable) << plain;
  EXPECT_TRUE(Copy(agent->address(), Tls()).ok());
  // Its certificate's expiry, for the alert 14 days ahead (the test's
  // certificates last 2 days).
  const double expiry = ::farcall::testing::MetricValue(
      ::farcall::testing::HttpGet(agent->metrics_port(), "/metrics"),
      "farcall_tls_certificate_expiry_timestamp_seconds{certificate=\"tls_cert\"}");
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_GT(expiry, now + 86400);
  EXPECT_LT(expiry, now + 3 * 86400);
}

TEST(SecurityTest, MutualTlsNeedsAClientCertificate) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN, {"--tls_cert=" + p.server_cert, "--tls_key=" + p.server_key,
                                         "--tls_ca=" + p.ca, "--require_client_cert"});
  ASSERT_NE(agent, nullptr);
  absl::Status no_cert = Copy(agent->address(), Tls(/*with_client_cert=*/false));
  EXPECT_EQ(no_cert.code(), absl::StatusCode::kUnavailable) << no_cert;
  EXPECT_TRUE(Copy(agent->address(), Tls(/*with_client_cert=*/true)).ok());
}

TEST(SecurityTest, TokensOnAnAgent) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN, {"--tokens_file=" + p.tokens});
  ASSERT_NE(agent, nullptr);
  ClientOptions none, wrong, alpha, root;
  wrong.token = "alpha2";
  alpha.token = "alpha-token-0123456789";
  root.token = "root-token-0123456789";
  absl::Status s = Copy(agent->address(), none);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  s = Copy(agent->address(), wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(s.message(), "the bearer token is not known to this server.");
  s = Copy(agent->address(), alpha, "sum");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(s.message(), "this token may not call handler 'sum'.");
  EXPECT_TRUE(Copy(agent->address(), alpha).ok());
  // Describe needs a token; the health service stays open for probes.
  auto anonymous = Client::Connect(agent->address());
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ((*anonymous)->Describe().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE((*anonymous)->Health().ok());
  auto client = Client::Connect(agent->address(), root);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->Describe().ok());
}

TEST(SecurityTest, TlsAndTokensThroughTheRouter) {
  const Pki& p = Certificates();
  // The agent: mutual TLS and tokens. The router: TLS and tokens for its
  // callers, its own client certificate and token for the agent.
  auto agent = Start(FARCALL_AGENT_BIN,
                     {"--tls_cert=" + p.server_cert, "--tls_key=" + p.server_key,
                      "--tls_ca=" + p.ca, "--require_client_cert", "--tokens_file=" + p.tokens});
  ASSERT_NE(agent, nullptr);
  auto router = Start(
      FARCALL_ROUTER_BIN,
      {"--agents=" + agent->address(), "--tls_cert=" + p.server_cert, "--tls_key=" + p.server_key,
       "--tokens_file=" + p.tokens, "--agent_tls_ca=" + p.ca, "--agent_tls_cert=" + p.client_cert,
       "--agent_tls_key=" + p.client_key, "--agent_token_file=" + p.dir + "/router-token",
       "--capability_signing_key_file=" + p.dir + "/capability-router.pem"});
  ASSERT_NE(router, nullptr);
  // The caller has no client certificate, so it cannot call the agent the
  // router names itself: the call goes through the router.
  EXPECT_TRUE(Copy(router->address(), Tls(false, "alpha-token-0123456789")).ok());
  absl::Status s = Copy(router->address(), Tls(false, ""));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  s = Copy(router->address(), Tls(false, "alpha-token-0123456789"), "sum");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  s = Copy(router->address(), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;  // plaintext to a TLS router
  auto client = Client::Connect(router->address(), Tls(false, "alpha-token-0123456789"));
  ASSERT_TRUE(client.ok());
  auto agents = (*client)->ListAgents(/*refresh=*/true);
  ASSERT_TRUE(agents.ok()) << agents.status();
  ASSERT_EQ(agents->size(), 1u);
  EXPECT_EQ((*agents)[0].health, AgentStatus::Health::kServing);
}

// The name on the certificate that agents share (agents.pem).
constexpr char kAgentsName[] = "farcall-agent.farcall.svc";

// An agent serving TLS with the shared certificate, which names the agents'
// service, not the address it is dialled at (as with agents found through
// dns:///).
std::unique_ptr<ChildProcess> StartAgentWithSharedCertificate() {
  const Pki& p = Certificates();
  return Start(FARCALL_AGENT_BIN,
               {"--tls_cert=" + p.dir + "/agents.pem", "--tls_key=" + p.dir + "/agents.key"});
}

TEST(SecurityTest, AgentsSharingOneCertificateAreCheckedAgainstItsName) {
  const Pki& p = Certificates();
  auto agent = StartAgentWithSharedCertificate();
  ASSERT_NE(agent, nullptr);
  auto by_address =
      Start(FARCALL_ROUTER_BIN, {"--agents=" + agent->address(), "--agent_tls_ca=" + p.ca});
  ASSERT_NE(by_address, nullptr);
  EXPECT_EQ(Copy(by_address->address(), {}).code(), absl::StatusCode::kUnavailable);
  auto by_name =
      Start(FARCALL_ROUTER_BIN, {"--agents=" + agent->address(), "--agent_tls_ca=" + p.ca,
                                 std::string("--agent_tls_server_name=") + kAgentsName});
  ASSERT_NE(by_name, nullptr);
  EXPECT_TRUE(Copy(by_name->address(), {}).ok());
}

TEST(SecurityTest, ClientsCallAgentsSharingOneCertificateDirectlyWhenToldItsName) {
  const Pki& p = Certificates();
  auto agent = StartAgentWithSharedCertificate();
  ASSERT_NE(agent, nullptr);
  auto router =
      Start(FARCALL_ROUTER_BIN, {"--agents=" + agent->address(), "--tls_cert=" + p.server_cert,
                                 "--tls_key=" + p.server_key, "--agent_tls_ca=" + p.ca,
                                 std::string("--agent_tls_server_name=") + kAgentsName});
  ASSERT_NE(router, nullptr);
  // Checked against its address, the agent's certificate does not match:
  // the call goes through the router. Told the agents' name, the client
  // calls the agent itself.
  for (const bool named : {false, true}) {
    ClientOptions o = Tls();
    if (named) o.agent_tls_server_name = kAgentsName;
    auto client = Client::Connect(router->address(), o);
    ASSERT_TRUE(client.ok());
    // Unnamed, the client says why once (on stderr), however many calls go
    // through the router.
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<CallResult> r = testing::CallOnFour(**client);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->via_router, !named);
    }
    const std::string said = ::testing::internal::GetCapturedStderr();
    const std::string why =
        "could not be reached directly over TLS, so calls go through the router";
    if (named) {
      EXPECT_THAT(said, Not(HasSubstr(why)));
    } else {
      EXPECT_THAT(said, HasSubstr(why));
      EXPECT_THAT(said, HasSubstr("agent_tls_server_name"));
      EXPECT_EQ(said.find(why), said.rfind(why)) << said;
    }
  }
}

// A hostile tenant on a shared agent: token alpha may call only axpy and
// copy; root runs a scale with side effects under call_id X. Alpha's copy
// under the same X runs as its own call (the ledger is per caller), never
// answered with root's scaled tensor; root reusing X for other work is
// refused. Direct and through the router.
// Two tenants of one agent: alpha (axpy, copy) and root (every handler).
struct TwoTenants {
  std::unique_ptr<Client> alpha, root;
};
TwoTenants ConnectTenants(const std::string& address) {
  ClientOptions alpha, root;
  alpha.token = "alpha-token-0123456789";
  root.token = "root-token-0123456789";
  auto a = Client::Connect(address, alpha);
  auto r = Client::Connect(address, root);
  EXPECT_TRUE(a.ok() && r.ok());
  if (!a.ok() || !r.ok()) return {};
  return {*std::move(a), *std::move(r)};
}

// A caller that fills its share of the exactly-once ledger with ids of
// calls with side effects is refused past it, naming the flag, while
// another caller's calls with side effects still run and are replayed.
TEST(SecurityTest, ACallerFillingTheLedgerLeavesTheOthersRunning) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN,
                     {"--tokens_file=" + p.tokens, "--call_id_cache_bytes_per_tenant=8192"});
  ASSERT_NE(agent, nullptr);
  TwoTenants t = ConnectTenants(agent->address());
  ASSERT_TRUE(t.alpha && t.root);
  Client* a = t.alpha.get();
  Client* r = t.root.get();
  std::vector<float> x = {1, 2, 3, 4};
  CallRequest copy = ::farcall::testing::RequestOnFour("copy", x);
  copy.has_side_effect = true;
  CallOptions o;
  o.transport = Transport::kGrpc;
  absl::Status refused;
  int ran = 0;
  for (int i = 0; i < 1000 && refused.ok(); ++i) {
    o.call_id = absl::StrCat("alpha-", i);
    absl::StatusOr<CallResult> c = a->Call(copy, o);
    if (c.ok()) {
      ++ran;
    } else {
      refused = c.status();
    }
  }
  EXPECT_GT(ran, 0);
  EXPECT_LT(ran, 1000);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("this caller's share of the agent's exactly-once "
                                           "ledger is full"));
  EXPECT_THAT(refused.message(), HasSubstr("--call_id_cache_bytes_per_tenant=8192"));
  // Root's calls with side effects run, and a repeat gets its answer.
  CallRequest scale = copy;
  scale.handler = "scale";
  scale.attributes["alpha"] = 10.0;
  o.call_id = "root-1";
  absl::StatusOr<CallResult> first = r->Call(scale, o);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->results[0].as<float>()[3], 40);
  absl::StatusOr<CallResult> repeat = r->Call(scale, o);
  ASSERT_TRUE(repeat.ok()) << repeat.status();
  EXPECT_EQ(repeat->results[0].as<float>()[3], 40);
  // Alpha's own calls without side effects still run.
  copy.has_side_effect = false;
  o.call_id.clear();
  EXPECT_TRUE(a->Call(copy, o).ok());
}

// --tenant_max_calls: a caller with that many calls in flight is refused
// another, naming the flag, while another caller's calls run.
TEST(SecurityTest, ACallersCallsInFlightAreCappedAndTheOthersRun) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN, {"--tokens_file=" + p.tokens, "--tenant_max_calls=2"});
  ASSERT_NE(agent, nullptr);
  TwoTenants t = ConnectTenants(agent->address());
  ASSERT_TRUE(t.alpha && t.root);
  Client* a = t.alpha.get();
  Client* r = t.root.get();
  CallRequest sleep;
  sleep.handler = "sleep";
  sleep.attributes["ms"] = int64_t{2000};
  auto first = r->CallFuture(sleep);
  auto second = r->CallFuture(sleep);
  bool holding = false;
  for (absl::Time end = absl::Now() + absl::Seconds(20); !holding && absl::Now() < end;) {
    absl::StatusOr<AgentDescription> d = r->Describe();
    holding = d.ok() && d->inflight_calls >= 2;
  }
  ASSERT_TRUE(holding);
  absl::Status third = r->Call(sleep).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_THAT(third.message(), HasSubstr("this caller has 2 calls in flight on this agent, its "
                                         "most (--tenant_max_calls=2)"));
  std::vector<float> x = {1, 2, 3, 4};
  absl::StatusOr<CallResult> other =
      a->Call(::farcall::testing::RequestOnFour("copy", x), CallOptions());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->results[0].as<float>()[3], 4);
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  // Their slots are back.
  sleep.attributes["ms"] = int64_t{1};
  EXPECT_TRUE(r->Call(sleep).ok());
}

TEST(SecurityTest, OneCallersCallIdNeverAnswersAnother) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN, {"--tokens_file=" + p.tokens});
  ASSERT_NE(agent, nullptr);
  for (const std::string& target : {agent->address()}) {
    SCOPED_TRACE(target);
    TwoTenants t = ConnectTenants(target);
    ASSERT_TRUE(t.alpha && t.root);
    std::unique_ptr<Client>* a = &t.alpha;
    std::unique_ptr<Client>* r = &t.root;
    const std::string id = "shared-id-" + target;
    std::vector<float> x = {1, 2, 3, 4};
    CallRequest scale = ::farcall::testing::RequestOnFour("scale", x);
    scale.attributes["alpha"] = 10.0;
    scale.has_side_effect = true;
    CallOptions o;
    o.call_id = id;
    o.via_router = true;
    o.transport = Transport::kGrpc;  // answers over shared memory are never kept
    absl::StatusOr<CallResult> scaled = (*r)->Call(scale, o);
    ASSERT_TRUE(scaled.ok()) << scaled.status();
    ASSERT_EQ(scaled->results[0].as<float>()[3], 40);
    CallRequest copy = scale;
    copy.handler = "copy";
    copy.attributes.clear();
    absl::StatusOr<CallResult> mine = (*a)->Call(copy, o);
    ASSERT_TRUE(mine.ok()) << mine.status();
    EXPECT_EQ(mine->results[0].as<float>()[3], 4) << "alpha got root's answer";
    // Root's own repeat still gets its answer; other work under its id is
    // refused.
    scaled = (*r)->Call(scale, o);
    ASSERT_TRUE(scaled.ok()) << scaled.status();
    EXPECT_EQ(scaled->results[0].as<float>()[3], 40);
    scale.attributes["alpha"] = 2.0;
    absl::Status reused = (*r)->Call(scale, o).status();
    EXPECT_EQ(reused.code(), absl::StatusCode::kInvalidArgument) << reused;
    EXPECT_THAT(reused.message(), HasSubstr("was already used for another call"));
    // A call_id is bounded before anything is kept of it.
    o.call_id = std::string(129, 'k');
    absl::Status long_id = (*r)->Call(scale, o).status();
    EXPECT_EQ(long_id.code(), absl::StatusCode::kResourceExhausted) << long_id;
    EXPECT_THAT(long_id.message(), HasSubstr("(--max_call_id_bytes)"));
  }
}

// A token learns nothing about a handler it may not call: not whether it
// exists, nor what the call's other checks would say.
TEST(SecurityTest, AuthorizationComesBeforeAnythingAboutTheCall) {
  const Pki& p = Certificates();
  auto agent = Start(FARCALL_AGENT_BIN, {"--tokens_file=" + p.tokens});
  ASSERT_NE(agent, nullptr);
  auto router = Start(FARCALL_ROUTER_BIN,
                      {"--agents=" + agent->address(), "--tokens_file=" + p.tokens,
                       "--agent_token_file=" + p.dir + "/router-token",
                       "--capability_signing_key_file=" + p.dir + "/capability-router.pem"});
  ASSERT_NE(router, nullptr);
  ClientOptions alpha;
  alpha.token = "alpha-token-0123456789";
  for (const std::string& target : {agent->address(), router->address()}) {
    auto a = Client::Connect(target, alpha);
    ASSERT_TRUE(a.ok());
    CallOptions o;
    o.via_router = true;
    for (const char* handler : {"sum", "no.such.handler"}) {
      absl::Status s = ::farcall::testing::CallOnFour(**a, handler, o).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << target << handler << s;
      EXPECT_EQ(s.message(), absl::StrCat("this token may not call handler '", handler, "'."));
    }
    // Even on a platform this agent does not serve, and no agent does.
    absl::Status s = ::farcall::testing::CallOnFour(**a, "no.such.handler", o, "rocm").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << target << s;
  }
}

TEST(SecurityTest, BadSecurityFlagsFailAtStartWithoutShowingSecrets) {
  const Pki& p = Certificates();
  ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
      absl::StrCat(FARCALL_AGENT_BIN, " --listen=127.0.0.1:0 --tls_cert=", p.server_cert));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("TLS needs both --tls_cert and --tls_key."));
  std::ofstream(p.dir + "/bad-tokens") << "only-a-token\n";
  r = ::farcall::testing::RunCommand(absl::StrCat(
      FARCALL_AGENT_BIN, " --listen=127.0.0.1:0 --tokens_file=", p.dir, "/bad-tokens"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("bad-tokens line 1: expected"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("only-a-token")));
}

// A tokens file that lists no token (a comment, an empty Secret) must stop
// the process, never serve calls without tokens: exit status 2, naming the
// file, for the agent and the router alike. Unreadable files too.
TEST(SecurityTest, ATokensFileWithoutTokensStopsTheProcess) {
  const Pki& p = Certificates();
  std::ofstream(p.dir + "/empty-tokens") << "# nobody may call yet\n\n";
  std::ofstream(p.dir + "/weak-tokens") << "root-token-0123456789 *\nshort copy\n";
  for (const std::string& bin : {std::string(FARCALL_AGENT_BIN),
                                 absl::StrCat(FARCALL_ROUTER_BIN, " --agents=127.0.0.1:1")}) {
    for (const std::string file : {"/empty-tokens", "/weak-tokens", "/no-such-tokens"}) {
      ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(
          absl::StrCat(bin, " --listen=127.0.0.1:0 --tokens_file=", p.dir, file));
      EXPECT_EQ(r.exit_code, 2) << bin << file << r.output;
      EXPECT_THAT(r.output, HasSubstr(p.dir + file)) << bin;
      EXPECT_THAT(r.output, ::testing::Not(HasSubstr("root-token"))) << bin;
      EXPECT_THAT(r.output, ::testing::Not(HasSubstr("serving"))) << bin;
    }
  }
}

}  // namespace
}  // namespace farcall
