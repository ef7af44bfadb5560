#include "core/wire/grpc_server.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/error_reason.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace farcall {

absl::StatusOr<RunningServer> StartGrpcServer(
    const std::string& listen, grpc::Service* service, const GrpcServerLimits& limits,
    absl::string_view who, std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  RunningServer r;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      listen, credentials != nullptr ? credentials : grpc::InsecureServerCredentials(), &r.port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(limits.max_message_bytes);
  builder.SetMaxSendMessageSize(limits.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  auto millis = [](absl::Duration d) {
    return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(d), INT_MAX));
  };
  if (limits.max_connection_age > absl::ZeroDuration()) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, millis(limits.max_connection_age));
    if (limits.max_connection_age_grace > absl::ZeroDuration()) {
      builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                 millis(limits.max_connection_age_grace));
    }
  }
  if (limits.memory_bytes > 0) {
    grpc::ResourceQuota quota{std::string(who)};
    quota.Resize(static_cast<size_t>(limits.memory_bytes));
    builder.SetResourceQuota(quota);
  }
  r.server = builder.BuildAndStart();
  if (r.server == nullptr || r.port == 0) {
    return absl::UnavailableError(absl::StrCat(who, " could not listen on ", listen,
                                               " (address in use, or not a HOST:PORT)."));
  }
  r.server->GetHealthCheckService()->SetServingStatus(true);
  return r;
}

int StopGrpcServer(grpc::Server* server, DrainGate& gate, absl::Duration drain,
                   absl::Duration goaway_after, const std::function<bool()>& held,
                   const std::function<void()>& cut_calls) {
  if (server == nullptr) return 0;
  server->GetHealthCheckService()->SetServingStatus(false);
  const absl::Time end = absl::Now() + drain;
  if (goaway_after < drain && !gate.DrainFor(goaway_after, held)) {
    // GOAWAY now; gRPC's shutdown waits for the calls in flight until `end`,
    // then cancels them.
    int cut = 0;
    // What is still in flight at `end` is cut: counted then, and answered
    // (cut_calls), while gRPC's shutdown waits a second more for their
    // answers to go before it cancels what is left.
    std::thread cut_counter([&gate, &cut, &held, &cut_calls, end] {
      if (gate.DrainFor(end - absl::Now(), held)) return;
      cut = gate.in_flight();
      if (cut_calls != nullptr) cut_calls();
    });
    server->Shutdown(
        absl::ToChronoTime(end + (cut_calls != nullptr ? absl::Seconds(1) : absl::ZeroDuration())));
    server->Wait();
    cut_counter.join();
    return cut;
  }
  const int cut = gate.DrainFor(end - absl::Now(), held) ? 0 : gate.in_flight();
  if (cut > 0 && cut_calls != nullptr) {
    cut_calls();
    // Their answers go out before gRPC cancels what is left.
    gate.DrainFor(absl::Seconds(1));
  }
  // gRPC's own shutdown would also wait for idle client connections to
  // close; the calls are done (or out of time), so stop now.
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  return cut;
}

std::string DrainCutLine(int cut, absl::Duration drain) {
  if (cut <= 0) return "";
  return absl::StrCat(
      "the drain ended after --drain_seconds=", absl::ToDoubleSeconds(drain), " with ", cut,
      cut == 1 ? " call" : " calls",
      " still running: cut, its callers get UNAVAILABLE, reason DRAIN_CUT where the "
      "handler may have run (a call without side effects may be sent again from its "
      "start), the draining reason where it had not; make --drain_seconds at least "
      "the handlers' longest run (--max_call_seconds)");
}

LiveCalls::Answers DrainCutAnswers(absl::string_view who, absl::Duration drain) {
  const std::string ran_out = absl::StrCat(
      "this ", who, "'s drain for shutdown ran out (--drain_seconds=", absl::ToDoubleSeconds(drain),
      ")");
  const bool agent = who == "agent";
  return {WithReason(absl::UnavailableError(absl::StrCat(
                         ran_out,
                         " while the call ran: it was cut, and its handler may have run "
                         "in part.")),
                     ErrorReason::kDrainCut),
          WithReason(absl::UnavailableError(absl::StrCat(
                         ran_out,
                         agent ? " before the call ran: its handler did not run"
                               : " before the call reached an agent: no handler ran it",
                         ", and it may go elsewhere.")),
                     agent ? ErrorReason::kAgentDraining : ErrorReason::kRouterDraining)};
}

}  // namespace farcall
