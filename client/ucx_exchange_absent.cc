// The client's UCX data plane in a build without UCX (CMake picks this file
// instead of ucx_exchange.cc): no call goes over UCX, and one that asks for
// it is refused before it is sent (target_channel.cc).
#include "client/ucx_exchange.h"

namespace farcall::client_internal {

bool UcxBuiltIn() { return false; }

absl::StatusOr<ucx::Worker*> ProcessUcxWorker(const std::string&) {
  return absl::FailedPreconditionError("this build of farcall has no UCX data plane.");
}

// Never reached: without a worker no call is planned over UCX.
std::shared_ptr<UcxExchange> UcxExchange::Start(ucx::Worker&, PreparedCall&, const std::string&,
                                                const std::vector<uint8_t*>&,
                                                std::function<void()>) {
  return nullptr;
}

absl::StatusOr<CallResult> UcxExchange::Conclude(absl::StatusOr<CallResult> rpc, absl::Time) {
  return rpc;
}

}  // namespace farcall::client_internal
