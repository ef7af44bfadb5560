// Certificate rotation without restarts: agents and routers follow their
// --tls_cert and --tls_key when a mounted Secret changes (Kubernetes swaps
// the Secret's `..data` link to a new directory) and on SIGHUP; new
// connections get the new certificate within 10 s, calls in flight and new
// connections meanwhile never fail, and files that do not belong together
// keep the certificate there was, counted in
// farcall_config_reload_failures_total{file="tls"}. Certificates are made
// with openssl at run time.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farcall/client.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/test_calls.h"

namespace farcall {
namespace {

using ::farcall::testing::ChildProcess;
using ::farcall::testing::HttpGet;
using ::farcall::testing::MetricValue;
using ::farcall::testing::RunCommand;

// Two CAs, each with a certificate for 127.0.0.1 (`old` lasts 2 days, `new`
// 3), and a file trusting both; the served files are `dir`/tls.crt and
// tls.key, links into `..data` as in a mounted Secret.
class TlsReloadTest : public ::testing::TestWithParam<bool /*router*/> {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "farcall-tls-reload-", getpid(), "-", GetParam());
    const std::string script = absl::StrCat(
        "set -e; rm -rf ", dir_, "; mkdir -p ", dir_, "; cd ", dir_, ";",
        "for gen in old:2 new:3; do name=${gen%:*}; days=${gen#*:}; mkdir $name;",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 9 -subj /CN=ca-$name "
        "-keyout $name/ca.key -out $name-ca.pem 2>/dev/null;",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=server -keyout $name/tls.key "
        "-out $name/tls.csr 2>/dev/null;",
        "printf 'subjectAltName=IP:127.0.0.1\\n' > $name/ext;",
        "openssl x509 -req -in $name/tls.csr -CA $name-ca.pem -CAkey $name/ca.key "
        "-CAcreateserial -days $days -extfile $name/ext -out $name/tls.crt 2>/dev/null; done;",
        "cat old-ca.pem new-ca.pem > both-ca.pem;",
        // The new certificate with the old key: files that do not belong
        // together.
        "mkdir mismatched; cp new/tls.crt mismatched/; cp old/tls.key mismatched/;",
        // Hostile or broken files: a certificate over the 1 MiB bound (the
        // real one, padded), an empty key, and a key that is missing.
        "mkdir oversize empty missing;",
        "cp new/tls.crt oversize/; head -c 1100000 /dev/zero | tr '\\0' x >> oversize/tls.crt;",
        "cp new/tls.key oversize/; cp new/tls.crt empty/; : > empty/tls.key;",
        "cp new/tls.crt missing/;",
        "ln -s old ..data; ln -s ..data/tls.crt tls.crt; ln -s ..data/tls.key tls.key");
    testing::CommandResult r = RunCommand(script);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> tls = {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                    "--tls_cert=" + dir_ + "/tls.crt",
                                    "--tls_key=" + dir_ + "/tls.key"};
    if (GetParam()) {
      auto a = ChildProcess::Start(FARCALL_AGENT_BIN, {"--listen=127.0.0.1:0"});
      ASSERT_TRUE(a.ok()) << a.status();
      agent_ = *std::move(a);
      tls.push_back("--agents=" + agent_->address());
      auto s = ChildProcess::Start(FARCALL_ROUTER_BIN, tls);
      ASSERT_TRUE(s.ok()) << s.status();
      server_ = *std::move(s);
    } else {
      auto s = ChildProcess::Start(FARCALL_AGENT_BIN, tls);
      ASSERT_TRUE(s.ok()) << s.status();
      server_ = *std::move(s);
    }
  }
  void TearDown() override { RunCommand("rm -rf " + dir_); }

  // Points `..data` at `generation` in one step, as the kubelet does.
  void Swap(const std::string& generation) {
    testing::CommandResult r = RunCommand(absl::StrCat("cd ", dir_, " && ln -sfn ", generation,
                                                       " ..data.tmp && mv -T ..data.tmp ..data"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // Whether a new connection trusting the CA(s) in `ca_file` completes its
  // TLS handshake (a channel of its own: the client library shares one per
  // target and files, and a connection already open keeps its certificate).
  bool Handshakes(const std::string& ca_file) {
    std::ifstream f(dir_ + "/" + ca_file);
    std::stringstream pem;
    pem << f.rdbuf();
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pem.str();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(server_->address(), grpc::SslCredentials(o), args);
    const auto deadline = absl::ToChronoTime(absl::Now() + absl::Seconds(5));
    for (grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
         state != GRPC_CHANNEL_READY; state = channel->GetState(false)) {
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) return false;  // refused
      if (!channel->WaitForStateChange(state, deadline)) return false;
    }
    return true;
  }
  // Tries new connections trusting `ca_file` until one completes, for at
  // most `limit`; how long it took, or nullopt.
  std::optional<absl::Duration> AcceptedWithin(const std::string& ca_file, absl::Duration limit) {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < limit) {
      if (Handshakes(ca_file)) return absl::Now() - start;
    }
    return std::nullopt;
  }
  double Metric(const std::string& name) {
    return MetricValue(HttpGet(server_->metrics_port(), "/metrics"), name);
  }
  double Failures() { return Metric("farcall_config_reload_failures_total{file=\"tls\"}"); }
  double Expiry() {
    return Metric("farcall_tls_certificate_expiry_timestamp_seconds{certificate=\"tls_cert\"}");
  }

  std::string dir_;
  std::unique_ptr<ChildProcess> agent_;
  std::unique_ptr<ChildProcess> server_;
};

TEST_P(TlsReloadTest, ANewCertificateServesWithin10sWithoutAFailedCall) {
  ASSERT_TRUE(Handshakes("old-ca.pem"));
  EXPECT_FALSE(Handshakes("new-ca.pem"));
  const double old_expiry = Expiry();
  EXPECT_EQ(Failures(), 0);
  // Load: calls on one connection, and new connections, trusting both CAs;
  // a connection open before keeps the old certificate.
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0}, failed{0}, connections{0}, refused{0};
  std::thread kept([&] {
    ClientOptions co;
    co.tls_ca = dir_ + "/both-ca.pem";
    auto client = Client::Connect(server_->address(), co);
    CallOptions o;
    o.via_router = true;
    while (!stop) {
      ++calls;
      if (!testing::CallOnFour(**client, "copy", o).ok()) ++failed;
    }
  });
  std::thread fresh([&] {
    while (!stop) {
      ++connections;
      if (!Handshakes("both-ca.pem")) ++refused;
    }
  });
  Swap("new");
  std::optional<absl::Duration> took = AcceptedWithin("new-ca.pem", absl::Seconds(10));
  stop = true;
  kept.join();
  fresh.join();
  ASSERT_TRUE(took.has_value()) << "the new certificate did not serve within 10 s";
  EXPECT_FALSE(Handshakes("old-ca.pem"));
  EXPECT_EQ(failed.load(), 0) << "of " << calls.load() << " calls on one connection";
  EXPECT_EQ(refused.load(), 0) << "of " << connections.load() << " new connections";
  EXPECT_NEAR(Expiry() - old_expiry, 86400, 120);  // 3 days against 2
  EXPECT_EQ(Failures(), 0);
  std::printf(
      "tls reload: the new certificate served after %s; %d calls on one connection and %d new "
      "connections meanwhile, %d and %d failed\n",
      absl::FormatDuration(*took).c_str(), calls.load(), connections.load(), failed.load(),
      refused.load());
}

TEST_P(TlsReloadTest, FilesThatDoNotBelongTogetherKeepTheCertificateThereWas) {
  Swap("mismatched");
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (Failures() < 1 && absl::Now() < end) {
  }
  EXPECT_EQ(Failures(), 1);
  ASSERT_TRUE(Handshakes("old-ca.pem"));  // the certificate there was
  // Not retried at every check while unchanged; SIGHUP tries again.
  server_->Signal(SIGHUP);
  while (Failures() < 2 && absl::Now() < end + absl::Seconds(10)) {
  }
  EXPECT_EQ(Failures(), 2);
  // Mended by SIGHUP as well as by the change.
  Swap("new");
  server_->Signal(SIGHUP);
  EXPECT_TRUE(AcceptedWithin("new-ca.pem", absl::Seconds(10)).has_value());
  EXPECT_EQ(Failures(), 2);
  EXPECT_EQ(server_->Terminate(), 0);
}

TEST_P(TlsReloadTest, OversizeEmptyOrMissingFilesAreRefusedAndCounted) {
  double expected = 0;
  for (const char* bad : {"oversize", "empty", "missing"}) {
    Swap(bad);
    ++expected;
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (Failures() < expected && absl::Now() < end) {
    }
    EXPECT_EQ(Failures(), expected) << bad;
    EXPECT_TRUE(Handshakes("old-ca.pem")) << bad;  // the certificate there was
    EXPECT_FALSE(Handshakes("new-ca.pem")) << bad;
  }
  Swap("new");
  EXPECT_TRUE(AcceptedWithin("new-ca.pem", absl::Seconds(10)).has_value());
  EXPECT_EQ(Failures(), expected);
  EXPECT_EQ(server_->Terminate(), 0);
}

INSTANTIATE_TEST_SUITE_P(Servers, TlsReloadTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Router" : "Agent"; });

}  // namespace
}  // namespace farcall
