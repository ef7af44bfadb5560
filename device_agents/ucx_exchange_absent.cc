// The agent's UCX data plane in a build without UCX (CMake picks this file
// instead of ucx_exchange.cc): the agent offers no UCX address, so no call
// comes over UCX (AgentCall refuses a header that asks for it).
#include "device_agents/ucx_exchange.h"

namespace farcall::agent {

bool UcxBuiltIn() { return false; }

absl::StatusOr<std::shared_ptr<ucx::Worker>> StartUcxWorker(const UcxWorkerOptions&) {
  return absl::FailedPreconditionError("UCX: this agent was built without UCX.");
}

// Never reached: without a worker there is nothing to name or exchange with.
std::string UcxWorkerAddress(const ucx::Worker&) { return ""; }

bool UcxIntegrityFailure(const absl::Status&) { return false; }

UcxCallExchange::UcxCallExchange(ucx::Worker& worker, const v1::UcxTensors& header)
    : worker_(worker), header_(header) {}

UcxCallExchange::~UcxCallExchange() = default;

void UcxCallExchange::ReceiveArgs(const std::vector<int64_t>&, const std::vector<uint8_t*>&,
                                  std::function<void(int64_t)>, Range,
                                  std::function<void(const absl::Status&)> done) {
  done(absl::UnimplementedError("this agent was built without UCX."));
}

void UcxCallExchange::SendResults(const std::vector<int64_t>&, const std::vector<const uint8_t*>&,
                                  std::function<void(int64_t)>,
                                  std::function<void(const absl::Status&)> done) {
  done(absl::UnimplementedError("this agent was built without UCX."));
}

void UcxCallExchange::Cancel() {}

}  // namespace farcall::agent
