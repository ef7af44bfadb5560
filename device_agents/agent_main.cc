// farcall-agent: serves one platform's devices and handlers over gRPC.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/platform.h"
#include "core/process.h"
#include "device_agents/agent_service.h"

ABSL_FLAG(std::string, platform, "cpu", "cpu, cuda, rocm or oneapi");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "HOST:PORT to serve on; port 0 picks a free one");
ABSL_FLAG(std::vector<std::string>, plugins, {},
          "comma-separated handler plugins (.so) to load");
ABSL_FLAG(std::string, agent_id, "", "id reported to clients (default: PLATFORM-agent-PORT)");
ABSL_FLAG(int64_t, max_call_bytes, int64_t{4} << 30,
          "largest call, args plus non-aliased results, in bytes");
ABSL_FLAG(int64_t, max_inflight_bytes, 0,
          "tensor bytes all calls in flight may hold (0: 3/4 of physical memory)");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20,
          "largest single gRPC message (bounds unary Call)");
ABSL_FLAG(int64_t, response_chunk_bytes, 1 << 20,
          "result bytes per streamed response message");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus /metrics on (empty: off)");
ABSL_FLAG(std::string, shm_socket, "auto",
          "same-host shared memory: auto, @abstract-name, a socket path, or empty for none");
ABSL_FLAG(int, workers, 0, "handler threads (0: one per core)");
ABSL_FLAG(std::vector<std::string>, devices, {},
          "device ordinals to serve, e.g. 0,1 (default: every device found)");
ABSL_FLAG(int64_t, staging_bytes, int64_t{256} << 20,
          "pinned host memory per device for staging copies, in bytes");
ABSL_FLAG(int64_t, staging_block_bytes, int64_t{4} << 20,
          "size of one staging block (one copy to or from the device)");
ABSL_FLAG(bool, list_devices, false,
          "print the platform's devices and exit: 0 when there is one, 1 when none");
ABSL_FLAG(int, ready_fd, -1,
          "write the bound port to this file descriptor once serving");

int main(int argc, char** argv) {
  farcall::InitFarcallProcess();
  farcall::BlockTerminationSignals();
  absl::SetProgramUsageMessage(
      "farcall-agent --platform=cpu|cuda|rocm|oneapi --listen=HOST:PORT "
      "[--plugins=A.so,B.so]");
  absl::ParseCommandLine(argc, argv);

  const std::string platform_name = absl::GetFlag(FLAGS_platform);
  std::optional<farcall::Platform> platform = farcall::ParsePlatform(platform_name);
  if (!platform) {
    std::fprintf(stderr,
                 "farcall-agent: INVALID_ARGUMENT: `buffer_callback` not "
                 "supported on %s backend.\n",
                 platform_name.c_str());
    return 2;
  }
  std::vector<int> devices;
  for (const std::string& d : absl::GetFlag(FLAGS_devices)) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(d, &ordinal) || ordinal < 0) {
      std::fprintf(stderr,
                   "farcall-agent: INVALID_ARGUMENT: --devices takes device "
                   "ordinals such as 0,1; got '%s'.\n",
                   d.c_str());
      return 2;
    }
    devices.push_back(ordinal);
  }
  farcall::agent::AgentServer::Options options;
  options.config.backend.devices = devices;
  options.config.backend.staging_bytes = absl::GetFlag(FLAGS_staging_bytes);
  options.config.backend.staging_block_bytes = absl::GetFlag(FLAGS_staging_block_bytes);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.plugins = absl::GetFlag(FLAGS_plugins);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.shm_socket = absl::GetFlag(FLAGS_shm_socket);
  options.config.platform = *platform;
  options.config.agent_id = absl::GetFlag(FLAGS_agent_id);
  options.config.max_call_bytes = absl::GetFlag(FLAGS_max_call_bytes);
  options.config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.config.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  options.config.response_chunk_bytes = absl::GetFlag(FLAGS_response_chunk_bytes);

  if (absl::GetFlag(FLAGS_list_devices)) {
    auto backend = farcall::agent::OpenBackend(*platform, options.config.backend);
    if (!backend.ok()) {
      std::fprintf(stderr, "farcall-agent: %s\n", backend.status().ToString().c_str());
      return 1;
    }
    for (const auto& d : backend->devices) {
      std::printf("%s device %d: %s, %lld bytes\n", platform_name.c_str(), d->ordinal(),
                  d->name().c_str(), static_cast<long long>(d->memory_bytes()));
    }
    std::fflush(nullptr);
    std::_Exit(0);
  }
  auto server = farcall::agent::AgentServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "farcall-agent: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const auto& state = (*server)->state();
  std::vector<std::string> names;
  for (const auto* h : state.registry.List(farcall::PlatformName(*platform))) {
    names.push_back(h->name);
  }
  std::fprintf(stderr,
               "farcall-agent: %s serving platform %s on port %d with %zu "
               "device(s); handlers: %s\n",
               state.agent_id().c_str(), platform_name.c_str(),
               (*server)->port(), state.backend.devices.size(),
               absl::StrJoin(names, ", ").c_str());
  if ((*server)->metrics_port() > 0) {
    std::fprintf(stderr, "farcall-agent: metrics on port %d (/metrics)\n",
                 (*server)->metrics_port());
  }
  farcall::ReportReady(absl::GetFlag(FLAGS_ready_fd), (*server)->port(),
                       (*server)->metrics_port());

  std::string sig = farcall::WaitForTerminationSignal();
  std::fprintf(stderr, "farcall-agent: %s received, shutting down\n", sig.c_str());
  (*server)->Shutdown();
  // Everything is stopped and flushed; skip gRPC's library teardown at exit,
  // which waits over a second for its internal threads.
  std::fflush(nullptr);
  std::_Exit(0);
}
