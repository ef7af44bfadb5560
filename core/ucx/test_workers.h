// For core/ucx's tests: workers that talk over TCP, as between hosts, and
// throw away what arrives unasked, as farcall's agents and clients do.
#ifndef FARCALL_CORE_UCX_TEST_WORKERS_H_
#define FARCALL_CORE_UCX_TEST_WORKERS_H_

#include <memory>

#include "absl/time/time.h"
#include "core/ucx/ucx_worker.h"
#include "gtest/gtest.h"

namespace farcall::ucx {

inline std::unique_ptr<Worker> TcpWorker() {
  Worker::Options o;
  o.transports = "tcp";
  o.discard_unexpected = true;
  auto w = Worker::Create(o);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : nullptr;
}

// A deadline no healthy transfer comes near.
inline absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

}  // namespace farcall::ucx

#endif  // FARCALL_CORE_UCX_TEST_WORKERS_H_
