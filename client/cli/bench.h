// `farcall bench`: drives calls at a target and reports throughput and
// latency, checking every result.
#ifndef FARCALL_CLIENT_CLI_BENCH_H_
#define FARCALL_CLIENT_CLI_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "farcall/client.h"

namespace farcall::cli {

struct BenchOptions {
  std::string platform = "cpu";
  std::string handler = "copy";  // copy, crc32c or sum: results that can be checked
  int64_t bytes = 1 << 20;       // arg bytes per call
  int64_t calls = 100;
  int concurrency = 1;
  int warmup = 1;         // calls per worker before timing starts
  bool alias = false;     // copy in place ({0: 0})
  bool shm = false;       // same-host shared memory; fails if not offered
  bool progress = false;  // redraw a progress line on stderr
  // With concurrency C: worker i starts i/C of a (warm-up) call after the
  // first, so that one call's upload overlaps another's download on a link
  // (workers that start together stay in step, all uploading, then all
  // downloading). Throughput still counts time inside calls.
  bool stagger = false;
  CallOptions call;
};

struct BenchReport {
  int64_t calls = 0;
  int64_t bytes_per_call = 0;
  double seconds = 0;
  // One way: arg bytes per second of time inside calls (results are checked
  // between calls, outside that time), / 1e9.
  double gbps = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  std::string Json() const;
  std::string Table() const;
};

// Runs the benchmark. Fails on the first call error, or with DATA_LOSS on
// the first result that is not what the handler must return.
absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& options);

}  // namespace farcall::cli

#endif  // FARCALL_CLIENT_CLI_BENCH_H_
