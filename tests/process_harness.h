// Starts farcall binaries as real child processes for integration tests.
// Each child binds port 0 and reports the port it got on a pipe
// (--ready_fd), so tests never sleep or poll to wait for it.
#ifndef FARCALL_TESTS_PROCESS_HARNESS_H_
#define FARCALL_TESTS_PROCESS_HARNESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace farcall::testing {

class ChildProcess {
 public:
  // Runs `binary args... --ready_fd=N` and waits until it reports its port.
  // Fails with the child's exit status if it exits first.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& binary,
                                                             std::vector<std::string> args);
  // Sends SIGTERM and reaps the child.
  ~ChildProcess();

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Resident memory now (/proc/PID/statm), in bytes; -1 if unreadable.
  int64_t ResidentBytes() const;
  // The /metrics port it reported, or 0.
  int metrics_port() const { return metrics_port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // SIGKILL, as if the host died; reaps the child.
  void Kill();
  // Sends `sig` (SIGHUP: reload) and returns at once.
  void Signal(int sig) const;
  // SIGTERM, then waits for the child to exit; its exit code (128 + the
  // signal if a signal ended it).
  int Terminate();

 private:
  ChildProcess(pid_t pid, int port, int metrics_port)
      : pid_(pid), port_(port), metrics_port_(metrics_port) {}
  pid_t pid_;
  int port_;
  int metrics_port_;
};

// An agent and a router in front of it, both on loopback ports.
struct AgentAndRouter {
  std::unique_ptr<ChildProcess> agent;
  std::unique_ptr<ChildProcess> router;
};
absl::StatusOr<std::unique_ptr<AgentAndRouter>> StartAgentAndRouter(
    const std::string& agent_binary, const std::string& router_binary,
    std::vector<std::string> agent_args = {"--listen=127.0.0.1:0"});

// `built_path`, unless the environment variable `env_name` names another
// path (to run the tests from a bundle of the binaries).
std::string BinaryPath(const char* env_name, const char* built_path);

// The binaries an integration test starts (tests/CMakeLists.txt passes the
// built paths); each environment variable of the same name overrides one.
#ifdef FARCALL_BUILT_AGENT_BIN
#define FARCALL_AGENT_BIN \
  ::farcall::testing::BinaryPath("FARCALL_AGENT_BIN", FARCALL_BUILT_AGENT_BIN)
#define FARCALL_ROUTER_BIN \
  ::farcall::testing::BinaryPath("FARCALL_ROUTER_BIN", FARCALL_BUILT_ROUTER_BIN)
#define FARCALL_CLI_BIN ::farcall::testing::BinaryPath("FARCALL_CLI_BIN", FARCALL_BUILT_CLI_BIN)
#define FARCALL_EXAMPLE_PLUGIN \
  ::farcall::testing::BinaryPath("FARCALL_EXAMPLE_PLUGIN", FARCALL_BUILT_EXAMPLE_PLUGIN)
#endif

// What a shell command printed (stdout and stderr together) and its exit
// status (-1 if it did not exit normally or could not be run).
// The body of http://127.0.0.1:PORT/PATH ("" when nothing answers), and
// one unlabelled sample of a Prometheus text page (-1 when absent).
std::string HttpGet(int port, const std::string& path);
double MetricValue(const std::string& page, const std::string& name);
// Waits, bounded (20 s), until the agent `agent` (started with
// --metrics_listen) holds `calls` calls (its farcall_agent_inflight_calls).
bool HoldsCalls(const ChildProcess& agent, double calls);

struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command);

// Asks `agent_binary --platform=PLATFORM --list_devices` whether this host
// has a device for the platform: "" when it has, or the agent's "no device
// found" message. Any other failure is an error.
absl::StatusOr<std::string> DeviceProblem(const std::string& agent_binary,
                                          const std::string& platform);

}  // namespace farcall::testing

#endif  // FARCALL_TESTS_PROCESS_HARNESS_H_
