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
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::testing::HasSubstr;

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
        "printf '# test tokens\\nalpha axpy,copy\\nroot *\\n' > tokens;",
        "printf 'root\\n' > router-token");
    ::farcall::testing::CommandResult r = ::farcall::testing::RunCommand(script);
    if (r.exit_code != 0) std::fprintf(stderr, "openssl failed:\n%s\n", r.output.c_str());
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
  auto agent =
      Start(FARCALL_AGENT_BIN, {"--tls_cert=" + p.server_cert, "--tls_key=" + p.server_key});
  ASSERT_NE(agent, nullptr);
  absl::Status plain = Copy(agent->address(), {});
  EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable) << plain;
  EXPECT_TRUE(Copy(agent->address(), Tls()).ok());
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
  alpha.token = "alpha";
  root.token = "root";
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
       "--agent_tls_key=" + p.client_key, "--agent_token_file=" + p.dir + "/router-token"});
  ASSERT_NE(router, nullptr);
  // The caller has no client certificate, so it cannot call the agent the
  // router names itself: the call goes through the router.
  EXPECT_TRUE(Copy(router->address(), Tls(false, "alpha")).ok());
  absl::Status s = Copy(router->address(), Tls(false, ""));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  s = Copy(router->address(), Tls(false, "alpha"), "sum");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  s = Copy(router->address(), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;  // plaintext to a TLS router
  auto client = Client::Connect(router->address(), Tls(false, "alpha"));
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
    absl::StatusOr<CallResult> r = testing::CallOnFour(**client);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->via_router, !named);
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

}  // namespace
}  // namespace farcall
