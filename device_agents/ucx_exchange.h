// The agent's half of a call over UCX (the exchange of
// core/ucx/transfer_set.h), and the agent's UCX worker. CMake builds
// ucx_exchange.cc with UCX and ucx_exchange_absent.cc without it; this
// header names no UCX type but by declaration, so AgentCall, the reactors
// and the server are the same in both builds.
#ifndef FARCALL_DEVICE_AGENTS_UCX_EXCHANGE_H_
#define FARCALL_DEVICE_AGENTS_UCX_EXCHANGE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "farcall/v1/farcall.pb.h"

namespace farcall::ucx {
class TransferSet;
class Worker;
}  // namespace farcall::ucx

namespace farcall::agent {

// Whether this agent build moves tensors over UCX at all.
bool UcxBuiltIn();

struct UcxWorkerOptions {
  std::string transports;    // UCX_TLS's syntax; empty: UCX's choice
  size_t max_endpoints = 0;  // --ucx_max_endpoints
};
// The agent's UCX worker. INVALID_ARGUMENT for transports UCX does not
// know; another error when UCX cannot start here (the agent then serves
// without it); FAILED_PRECONDITION in a build without UCX.
absl::StatusOr<std::shared_ptr<ucx::Worker>> StartUcxWorker(const UcxWorkerOptions& options);
// The worker's address, which Describe hands to clients.
std::string UcxWorkerAddress(const ucx::Worker& worker);
// Whether a UCX phase ended because a piece failed its check.
bool UcxIntegrityFailure(const absl::Status& s);

// One call's UCX transfers: its args in, then its results out, to and from
// the client the call's header names (v1::UcxTensors). The callbacks run on
// the worker's thread and must not block.
class UcxCallExchange {
 public:
  // `header` must outlive the exchange.
  UcxCallExchange(ucx::Worker& worker, const v1::UcxTensors& header);
  // Takes UCX off the call's memory first: cancels the transfers in flight
  // and waits for them, unless it runs on the worker's thread (inside a
  // phase's `done`, where every transfer ended already).
  ~UcxCallExchange();
  UcxCallExchange(const UcxCallExchange&) = delete;
  UcxCallExchange& operator=(const UcxCallExchange&) = delete;

  // A range of one tensor's bytes: which tensor, from where, how many.
  using Range = std::function<void(size_t tensor, int64_t offset, int64_t size)>;
  // Posts receives for the args (`sizes` bytes each, into `places`) under a
  // tag of the agent's choosing, then tells the client to send them.
  // `progress` runs as each piece lands; `checked`, if given, as each piece
  // passed its integrity check (its bytes may be used from then on); `done`
  // once all did, or with the first failure.
  void ReceiveArgs(const std::vector<int64_t>& sizes, const std::vector<uint8_t*>& places,
                   std::function<void(int64_t)> progress, Range checked,
                   std::function<void(const absl::Status&)> done);
  // Sends the results, each piece with its MAC; callbacks as above.
  void SendResults(const std::vector<int64_t>& sizes, const std::vector<const uint8_t*>& data,
                   std::function<void(int64_t)> progress,
                   std::function<void(const absl::Status&)> done);
  // Ends the transfers in flight (their phase's `done` runs, CANCELLED).
  void Cancel();

 private:
  ucx::Worker& worker_;
  const v1::UcxTensors& header_;
  std::shared_ptr<void> peer_hold_;        // the client's endpoint, kept open
  std::shared_ptr<ucx::TransferSet> set_;  // the transfers of now
  std::array<uint8_t, 24> ready_{};        // the ready message, while it is sent
};

}  // namespace farcall::agent

#endif  // FARCALL_DEVICE_AGENTS_UCX_EXCHANGE_H_
