// The client's half of a call over UCX: the exchange of
// core/ucx/transfer_set.h, with the process's UCX worker. Internal to
// client/; built only with UCX.
#ifndef FARCALL_CLIENT_UCX_EXCHANGE_H_
#define FARCALL_CLIENT_UCX_EXCHANGE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/call_codec.h"
#include "core/ucx/piece_transfers.h"
#include "core/ucx/transfer_set.h"
#include "core/ucx/ucx_worker.h"

namespace farcall::client_internal {

// The process's UCX worker for `transports` (UCX_TLS's syntax; empty: UCX's
// choice, or the UCX_TLS environment variable), made on first use and kept
// for the life of the process. UNAVAILABLE when UCX cannot start here.
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

 private:
  std::shared_ptr<ucx::TransferSet> set_;
  ucx::ReadyBytes ready_{};
  std::atomic<bool> args_failed_{false};  // an arg failed to go: nothing ran
};

}  // namespace farcall::client_internal

#endif  // FARCALL_CLIENT_UCX_EXCHANGE_H_
