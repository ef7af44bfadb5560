#include "tests/process_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace farcall::testing {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(const std::string& binary,
                                                                  std::vector<std::string> args) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  // Tests leave calls in flight at teardown: drain for 2 s, not 30, unless
  // the test's own flag (later, so it wins) says otherwise.
  args.insert(args.begin(), "--drain_seconds=2");
  args.push_back(absl::StrCat("--ready_fd=", fds[1]));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Die with the test, even if it is killed: no server outlives its test.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fds[0]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  // Blocks until the child writes its port, or exits (EOF).
  std::string text;
  char buf[32];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int port = 0, metrics_port = 0;
  std::vector<std::string> words =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (words.size() > 1) (void)absl::SimpleAtoi(words[1], &metrics_port);
  if (words.empty() || !absl::SimpleAtoi(words[0], &port) || port <= 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    return absl::InternalError(
        absl::StrCat(binary, " exited before serving (status ", status, ")"));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, port, metrics_port));
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status;
  waitpid(pid_, &status, 0);
}

int ChildProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? out : out.substr(body + 4);
}

double MetricValue(const std::string& page, const std::string& name) {
  size_t at = page.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + name.size() + 2));
}

bool HoldsCalls(const ChildProcess& agent, double calls) {
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (absl::Now() < end) {
    if (MetricValue(HttpGet(agent.metrics_port(), "/metrics"), "farcall_agent_inflight_calls") ==
        calls) {
      return true;
    }
  }
  return false;
}

void ChildProcess::Signal(int sig) const { kill(pid_, sig); }

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::StatusOr<std::unique_ptr<AgentAndRouter>> StartAgentAndRouter(
    const std::string& agent_binary, const std::string& router_binary,
    std::vector<std::string> agent_args) {
  auto procs = std::make_unique<AgentAndRouter>();
  auto agent = ChildProcess::Start(agent_binary, std::move(agent_args));
  if (!agent.ok()) return agent.status();
  procs->agent = *std::move(agent);
  auto router = ChildProcess::Start(
      router_binary, {"--listen=127.0.0.1:0", absl::StrCat("--agents=", procs->agent->address())});
  if (!router.ok()) return router.status();
  procs->router = *std::move(router);
  return procs;
}

int64_t ChildProcess::ResidentBytes() const {
  FILE* f = std::fopen(absl::StrCat("/proc/", pid_, "/statm").c_str(), "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

std::string BinaryPath(const char* env_name, const char* built_path) {
  const char* e = std::getenv(env_name);
  return e != nullptr && *e != '\0' ? std::string(e) : std::string(built_path);
}

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* f = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.output.append(buf, n);
  const int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

absl::StatusOr<std::string> DeviceProblem(const std::string& agent_binary,
                                          const std::string& platform) {
  const std::string cmd = absl::StrCat(agent_binary, " --platform=", platform, " --list_devices");
  CommandResult r = RunCommand(cmd);
  if (r.exit_code == 0) return std::string();
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (out.find("no device found") != std::string::npos) return out;
  return absl::InternalError(absl::StrCat(cmd, " failed: ", out));
}

}  // namespace farcall::testing
