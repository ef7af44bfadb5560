// The client's half of a call over UCX: the exchange of
// core/ucx/transfer_set.h, with the process's UCX worker. Internal to
// client/. CMake builds ucx_exchange.cc with UCX and ucx_exchange_absent.cc
// without it; this header names no UCX type but by declaration, so the rest
// of the client is the same in both builds.
#ifndef FARCALL_CLIENT_UCX_EXCHANGE_H_
#define FARCALL_CLIENT_UCX_EXCHANGE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/call_codec.h"

namespace farcall::ucx {
class TransferSet;
class Worker;
}  // namespace farcall::ucx

namespace farcall::client_internal {

// Whether this build moves tensors over UCX at all.
bool UcxBuiltIn();

// The process's UCX worker for `transports` (UCX_TLS's syntax; empty: UCX's
// choice, or the UCX_TLS environment variable), made on first use and kept
// for the life of the process. UNAVAILABLE when UCX cannot start here;
// FAILED_PRECONDITION in a build without UCX.
absl::StatusOr<ucx::Worker*> ProcessUcxWorker(const std::string& transports);

class UcxExchange {
 public:
  // Names `worker`, a fresh tag and a fresh MAC key in `call`'s header
  // (core/ucx/piece_transfers.h), computes the args' MACs, and posts the
  // receives for the results (at `result_data`, one per result) and for the
  // agent's ready, on which the args go to `agent_address`. When a transfer
  // fails, `on_failure` runs on the worker's thread (to cancel the RPC: the
  // agent then stops waiting for args that will not come).
  static std::shared_ptr<UcxExchange> Start(ucx::Worker& worker, PreparedCall& call,
                                            const std::string& agent_address,
                                            const std::vector<uint8_t*>& result_data,
                                            std::function<void()> on_failure);

  // The RPC's outcome with the transfers': after an answer, waits (up to
  // `deadline`) for the results to land; after a failure, ends every
  // transfer, and reports the UCX failure that made the RPC be cancelled.
  // Returns once UCX let go of the caller's memory.
  absl::StatusOr<CallResult> Conclude(absl::StatusOr<CallResult> rpc, absl::Time deadline);
  // Whether the agent asked for the args (its ready came): until then no
  // handler ran, and no result can have landed. Not whether they all went:
  // a send may end here after the agent already has its bytes.
  bool args_asked() const { return args_asked_; }
  // Whether an arg failed to go (then no handler ran).
  bool args_failed() const { return args_failed_; }

 private:
  std::shared_ptr<ucx::TransferSet> set_;
  std::array<uint8_t, 24> ready_{};       // ucx::ReadyBytes
  std::atomic<bool> args_failed_{false};  // an arg failed to go: nothing ran
  std::atomic<bool> args_asked_{false};   // the agent's ready came
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_UCX_EXCHANGE_H_
