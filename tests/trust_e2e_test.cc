// The doors a router or an agent will not leave open, tried on the real
// binaries: capability key files of the wrong kind, the retired shared
// secret, a router that would lend its credentials for agents to anyone or
// show agents one principal for every caller, and two agents that claim one
// id (a capability names one agent).
#include <cstdlib>
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
using ::farcall::testing::CommandResult;
using ::farcall::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

class TrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/farcall-trust-XXXXXX";
    dir_ = mkdtemp(dir_template);
    testing::WriteCapabilityKeys(dir_);
    std::ofstream(dir_ + "/tokens") << "caller-token-0123456789 *\n";
    std::ofstream(dir_ + "/router-token") << "router-token-0123456789\n";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // The router's exit and output with these flags (it stops at its checks,
  // before it would serve).
  CommandResult Router(const std::string& flags) const {
    return RunCommand(
        absl::StrCat(FARCALL_ROUTER_BIN, " --listen=127.0.0.1:0 --agents=127.0.0.1:1 ", flags));
  }
  CommandResult Agent(const std::string& flags) const {
    return RunCommand(absl::StrCat(FARCALL_AGENT_BIN, " --listen=127.0.0.1:0 ", flags));
  }

  std::string dir_;
};

// Agents hold public keys only, routers the private key; a key file of the
// wrong kind, empty or missing stops the process, naming the file and never
// printing a key.
TEST_F(TrustTest, KeyFilesOfTheWrongKindStopTheProcess) {
  std::ofstream(dir_ + "/empty") << "\n";
  struct Case {
    bool router;
    std::string flag, file, says;
  } cases[] = {
      {false, "capability_verify_keys_file", "/capability-router.pem",
       "holds a private key; an agent must hold public keys only"},
      {false, "capability_verify_keys_file", "/empty", "holds no PEM public key"},
      {false, "capability_verify_keys_file", "/missing", "cannot read"},
      {true, "capability_signing_key_file", "/capability-agents.pem",
       "holds a public key only; the router signs with the private key"},
      {true, "capability_signing_key_file", "/empty", "holds no PEM private key"},
      {true, "capability_signing_key_file", "/missing", "cannot read"},
      // Each side's flag on the other side.
      {false, "capability_signing_key_file", "/capability-router.pem",
       "--capability_signing_key_file is the router's"},
      {true, "capability_verify_keys_file", "/capability-agents.pem",
       "--capability_verify_keys_file is the agents'"},
  };
  std::string private_pem;
  {
    std::ifstream f(dir_ + "/capability-router.pem");
    std::getline(f, private_pem);  // the BEGIN line
    std::getline(f, private_pem);  // the key's bytes
  }
  for (const Case& c : cases) {
    const std::string flags = absl::StrCat("--", c.flag, "=", dir_, c.file,
                                           c.router ? " --tokens_file=" + dir_ + "/tokens" : "");
    CommandResult r = c.router ? Router(flags) : Agent(flags);
    EXPECT_EQ(r.exit_code, 2) << flags << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.says)) << flags;
    EXPECT_THAT(r.output, Not(HasSubstr(private_pem))) << flags;
  }
}

// The shared secret every agent held is gone: given, it stops either
// binary, naming what replaced it.
TEST_F(TrustTest, TheRetiredSharedKeyFlagStopsBothBinaries) {
  std::ofstream(dir_ + "/secret") << std::string(48, 'k') << "\n";
  for (bool router : {false, true}) {
    CommandResult r = router ? Router("--capability_key_file=" + dir_ + "/secret")
                             : Agent("--capability_key_file=" + dir_ + "/secret");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--capability_key_file (a secret every agent shared"));
    EXPECT_THAT(r.output, HasSubstr("--capability_signing_key_file"));
    EXPECT_THAT(r.output, HasSubstr("--capability_verify_keys_file"));
  }
}

// A router that holds credentials for agents and authenticates no caller
// would serve anyone with them; one that calls agents as itself without
// capabilities would show them one principal for every caller.
TEST_F(TrustTest, ARouterWithAgentCredentialsMustKnowItsCallers) {
  const std::string token = " --agent_token_file=" + dir_ + "/router-token";
  const std::string key = " --capability_signing_key_file=" + dir_ + "/capability-router.pem";
  for (const std::string& credentials : {token + key, key}) {
    CommandResult r = Router(credentials);
    EXPECT_EQ(r.exit_code, 2) << credentials << r.output;
    EXPECT_THAT(r.output, HasSubstr("holds credentials for agents (--agent_token_file, "
                                    "--capability_signing_key_file or --agent_tls_cert) but "
                                    "authenticates no caller"));
  }
  CommandResult r = Router("--tokens_file=" + dir_ + "/tokens" + token);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("with --agent_token_file the router calls agents as itself"));
  // Client certificates alone name no caller a capability could carry.
  ASSERT_EQ(RunCommand("cd " + dir_ +
                       " && openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost "
                       "-keyout tls.key -out tls.pem -days 1 2>&1")
                .exit_code,
            0);
  r = Router(absl::StrCat("--tls_cert=", dir_, "/tls.pem --tls_key=", dir_,
                          "/tls.key --tls_ca=", dir_, "/tls.pem --require_client_cert", key));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("this router takes client certificates without tokens: every "
                                  "caller would be the same principal to the agents"));

  // Meant: it serves, and says so.
  auto agent = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN, {"--listen=127.0.0.1:0", "--agents=" + (*agent)->address(),
                           "--capability_signing_key_file=" + dir_ + "/capability-router.pem",
                           "--allow_unauthenticated_callers"});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(testing::CallOnFour(**client).ok());
  // With the credentials but without callers' tokens, an agent that
  // requires tokens is not opened by the router's capability, which names
  // no caller (the router's token lets its health checks in, no call).
  std::ofstream(dir_ + "/agent-tokens") << "router-token-0123456789 *\n";
  auto guarded = ChildProcess::Start(
      FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--tokens_file=" + dir_ + "/agent-tokens",
                          "--capability_verify_keys_file=" + dir_ + "/capability-agents.pem"});
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  auto open = ChildProcess::Start(
      FARCALL_ROUTER_BIN,
      {"--listen=127.0.0.1:0", "--agents=" + (*guarded)->address(),
       "--capability_signing_key_file=" + dir_ + "/capability-router.pem",
       "--agent_token_file=" + dir_ + "/router-token", "--allow_unauthenticated_callers"});
  ASSERT_TRUE(open.ok()) << open.status();
  auto anyone = Client::Connect((*open)->address());
  ASSERT_TRUE(anyone.ok());
  absl::Status s = testing::CallOnFour(**anyone).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
}

// Replicas of a Deployment share a port; their default ids differ all the
// same. Two agents that report one id (set by hand) are not both routed
// to: the later one is left out, logged and counted.
TEST_F(TrustTest, EachAgentHasItsOwnIdAndTheRouterRefusesATwin) {
  auto a = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
  ASSERT_TRUE(a.ok()) << a.status();
  auto b =
      ChildProcess::Start(FARCALL_AGENT_BIN, {absl::StrCat("--listen=127.0.0.2:", (*a)->port())});
  if (!b.ok()) GTEST_SKIP() << "SKIPPED: cannot listen on 127.0.0.2: " << b.status();
  const std::string b_address = absl::StrCat("127.0.0.2:", (*a)->port());
  std::vector<std::string> ids;
  for (const std::string& address : {(*a)->address(), b_address}) {
    auto c = Client::Connect(address);
    ASSERT_TRUE(c.ok());
    absl::StatusOr<AgentDescription> d = (*c)->Describe();
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_THAT(d->agent_id, ::testing::StartsWith(absl::StrCat("cpu-agent-", (*a)->port(), "-")));
    ids.push_back(d->agent_id);
  }
  EXPECT_NE(ids[0], ids[1]);
  // An id no capability could name is refused at start.
  CommandResult long_id = Agent("--agent_id=" + std::string(1025, 'i'));
  EXPECT_EQ(long_id.exit_code, 2) << long_id.output;
  EXPECT_THAT(
      long_id.output,
      HasSubstr("--agent_id is 1025 bytes, over the 1024 a capability can name an agent in."));

  auto twin1 = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--agent_id=twin"});
  auto twin2 = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0", "--agent_id=twin"});
  ASSERT_TRUE(twin1.ok() && twin2.ok());
  auto router = ChildProcess::Start(
      FARCALL_ROUTER_BIN, {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                           "--agents=" + (*twin1)->address() + "," + (*twin2)->address()});
  ASSERT_TRUE(router.ok()) << router.status();
  auto client = Client::Connect((*router)->address());
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::vector<AgentStatus>> list = (*client)->ListAgents();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  int serving = 0;
  std::string why, served_by;
  for (const AgentStatus& s : *list) {
    if (s.health == AgentStatus::Health::kServing) {
      ++serving;
      served_by = s.address;
    } else {
      why = s.last_error;
    }
  }
  EXPECT_EQ(serving, 1);
  EXPECT_THAT(why, HasSubstr("it reports agent id 'twin', which the agent at 127.0.0.1:"));
  EXPECT_GE(testing::MetricValue(testing::HttpGet((*router)->metrics_port(), "/metrics"),
                                 "farcall_router_duplicate_agent_ids_total"),
            1);
  // Every call lands on the one agent routed to; the twin left out runs
  // none (each agent counts its own calls, however they came).
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<CallResult> r = testing::CallOnFour(**client);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  for (const auto* twin : {&*twin1, &*twin2}) {
    auto c = Client::Connect((*twin)->address());
    ASSERT_TRUE(c.ok());
    absl::StatusOr<AgentDescription> d = (*c)->Describe();
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->calls_total, (*twin)->address() == served_by ? 5u : 0u) << (*twin)->address();
  }
}

}  // namespace
}  // namespace farcall
