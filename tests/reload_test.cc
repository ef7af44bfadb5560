// Rotation without restarts: agents and routers reload --tokens_file when it
// changes on disk (as Kubernetes updates a mounted Secret) and on SIGHUP,
// under load, without failing a call; a reload that fails keeps the tokens
// there were and is counted; SIGHUP never stops them.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "farcall/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::farcall::testing::HttpGet;
using ::farcall::testing::MetricValue;

const std::string kA(32, 'a'), kB(32, 'b'), kC(32, 'c'), kD(32, 'd');

// Replaces `path` whole, as a Secret update does (a rename: readers see the
// old file or the new one, never half of one).
void WriteTokens(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  std::ofstream(tmp) << text;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
}

enum class Server { kAgent, kRouter };

class ReloadTest : public ::testing::TestWithParam<Server> {
 protected:
  void SetUp() override {
    path_ =
        absl::StrCat(::testing::TempDir(), "/tokens-", getpid(), "-", static_cast<int>(GetParam()));
    WriteTokens(path_, absl::StrCat(kA, " *\n", kC, " *\n"));
    if (GetParam() == Server::kAgent) {
      auto a = ChildProcess::Start(FARCALL_AGENT_BIN,
                                   {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                    absl::StrCat("--tokens_file=", path_)});
      ASSERT_TRUE(a.ok()) << a.status();
      server_ = *std::move(a);
    } else {
      auto a = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
      ASSERT_TRUE(a.ok()) << a.status();
      agent_ = *std::move(a);
      auto r = ChildProcess::Start(
          FARCALL_ROUTER_BIN,
          {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
           absl::StrCat("--agents=", agent_->address()), absl::StrCat("--tokens_file=", path_)});
      ASSERT_TRUE(r.ok()) << r.status();
      server_ = *std::move(r);
    }
  }
  void TearDown() override { std::remove(path_.c_str()); }

  absl::StatusOr<CallResult> CallWith(const std::string& token) {
    ClientOptions co;
    co.token = token;
    auto client = Client::Connect(server_->address(), co);
    if (!client.ok()) return client.status();
    CallOptions o;
    o.via_router = true;  // through the router's own check
    o.timeout = absl::Seconds(10);
    return testing::CallOnFour(**client, "copy", o);
  }
  // Calls with `token` until one succeeds, for at most `limit`; how long it
  // took, or nullopt.
  std::optional<absl::Duration> AcceptedWithin(const std::string& token, absl::Duration limit) {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < limit) {
      if (CallWith(token).ok()) return absl::Now() - start;
    }
    return std::nullopt;
  }
  double ReloadFailures() {
    return MetricValue(HttpGet(server_->metrics_port(), "/metrics"),
                       "farcall_config_reload_failures_total{file=\"tokens\"}");
  }

  std::string path_;
  std::unique_ptr<ChildProcess> agent_;
  std::unique_ptr<ChildProcess> server_;
};

TEST_P(ReloadTest, ANewTokenWorksAndTheOldIsRefusedWithin10sUnderLoad) {
  EXPECT_EQ(ReloadFailures(), 0);
  ASSERT_TRUE(CallWith(kA).ok());
  EXPECT_EQ(CallWith(kB).status().code(), absl::StatusCode::kUnauthenticated);
  // Load with a token that stays.
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0}, failed{0};
  std::thread load([&] {
    ClientOptions co;
    co.token = kC;
    auto client = Client::Connect(server_->address(), co);
    CallOptions o;
    o.via_router = true;
    while (!stop) {
      absl::StatusOr<CallResult> r = testing::CallOnFour(**client, "copy", o);
      ++calls;
      if (!r.ok()) ++failed;
    }
  });
  WriteTokens(path_, absl::StrCat(kB, " *\n", kC, " *\n"));
  std::optional<absl::Duration> took = AcceptedWithin(kB, absl::Seconds(10));
  ASSERT_TRUE(took.has_value()) << "the new token was not accepted within 10 s";
  EXPECT_EQ(CallWith(kA).status().code(), absl::StatusCode::kUnauthenticated);
  stop = true;
  load.join();
  EXPECT_GT(calls.load(), 0);
  EXPECT_EQ(failed.load(), 0) << "of " << calls.load();
  std::printf("reload: the new token worked after %s; %d calls during it, %d failed\n",
              absl::FormatDuration(*took).c_str(), calls.load(), failed.load());
}

TEST_P(ReloadTest, SighupReloadsAndABadFileKeepsTheTokensThereWere) {
  WriteTokens(path_, absl::StrCat(kD, " *\n"));
  server_->Signal(SIGHUP);
  ASSERT_TRUE(AcceptedWithin(kD, absl::Seconds(10)).has_value());
  EXPECT_EQ(CallWith(kA).status().code(), absl::StatusCode::kUnauthenticated);
  // A file without tokens would leave the server open: refused, counted.
  WriteTokens(path_, "# nothing here\n");
  server_->Signal(SIGHUP);
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (ReloadFailures() < 1 && absl::Now() < end) {
  }
  EXPECT_EQ(ReloadFailures(), 1);
  EXPECT_TRUE(CallWith(kD).ok());  // the tokens there were
  EXPECT_EQ(CallWith("").status().code(), absl::StatusCode::kUnauthenticated);
  // An unreadable file: the same.
  std::remove(path_.c_str());
  server_->Signal(SIGHUP);
  while (ReloadFailures() < 2 && absl::Now() < end + absl::Seconds(10)) {
  }
  EXPECT_EQ(ReloadFailures(), 2);
  EXPECT_TRUE(CallWith(kD).ok());
  // Still serving, and stops cleanly.
  EXPECT_EQ(server_->Terminate(), 0);
}

INSTANTIATE_TEST_SUITE_P(Servers, ReloadTest, ::testing::Values(Server::kAgent, Server::kRouter),
                         [](const auto& info) {
                           return info.param == Server::kAgent ? "Agent" : "Router";
                         });

}  // namespace
}  // namespace farcall
