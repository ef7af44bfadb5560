#include "client/cli/bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace farcall::cli {
namespace {

// CRC-32C, bitwise: the bench checks the agent's answer with an independent
// implementation rather than the agent's own code.
uint32_t Crc32cReference(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(q * (sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

struct Shared {
  absl::Mutex mu;
  std::vector<double> latencies_us ABSL_GUARDED_BY(mu);
  double busy_us ABSL_GUARDED_BY(mu) = 0;  // time spent inside calls
  absl::Status error ABSL_GUARDED_BY(mu);
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

// One worker: its own buffers, calls until the shared counter runs out.
void Worker(Client& client, const BenchOptions& o, int id, bool timed, int64_t limit,
            Shared& shared) {
  TensorSpec spec{DType::kU8, {o.bytes}};
  // With --shm the input lives in memory shared with the agent, as a
  // same-host caller would keep it, so that it goes without a copy.
  std::vector<uint8_t> owned;
  SharedBuffer shared_buffer;
  uint8_t* in = nullptr;
  if (o.shm) {
    absl::StatusOr<SharedBuffer> b = client.AllocateShared(o.bytes);
    if (!b.ok()) {
      absl::MutexLock l(&shared.mu);
      if (shared.error.ok()) shared.error = b.status();
      shared.next.store(limit);
      return;
    }
    shared_buffer = *b;
    in = shared_buffer.data();
  } else {
    owned.resize(o.bytes);
    in = owned.data();
  }
  for (int64_t i = 0; i < o.bytes; ++i) in[i] = static_cast<uint8_t>(i * 7 + id * 13);
  const uint32_t expected_crc = o.handler == "crc32c" ? Crc32cReference(in, o.bytes) : 0;
  // sum: the uint8 sum wraps, as the built-in's does.
  uint8_t expected_sum = 0;
  if (o.handler == "sum") {
    for (int64_t i = 0; i < o.bytes; ++i) expected_sum = static_cast<uint8_t>(expected_sum + in[i]);
  }
  std::vector<uint8_t> expected =
      o.alias ? std::vector<uint8_t>(in, in + o.bytes) : std::vector<uint8_t>();

  CallRequest req;
  req.handler = o.handler;
  req.platform = o.platform;
  req.args = {o.alias ? Arg::InOut(spec, in) : Arg::In(spec, in)};
  if (o.handler == "crc32c") {
    req.results = {TensorSpec{DType::kU32, {}}};
  } else if (o.handler == "sum") {
    req.results = {TensorSpec{DType::kU8, {}}};
  } else {
    req.results = {spec};
    if (o.alias) req.aliases = {{0, 0}};
  }
  for (;;) {
    int64_t n = timed ? shared.next.fetch_add(1) : 0;
    if (timed && n >= limit) return;
    absl::Time start = absl::Now();
    absl::StatusOr<CallResult> r = client.Call(req, o.call);
    double us = absl::ToDoubleMicroseconds(absl::Now() - start);
    absl::Status bad;
    if (!r.ok()) {
      bad = r.status();
    } else if (o.shm && r->transport != Transport::kShm) {
      bad = absl::FailedPreconditionError(
          "--shm: the target offers no shared memory (it must be an agent on this host).");
    } else if (o.call.transport != Transport::kAuto && r->transport != o.call.transport) {
      bad = absl::InternalError(absl::StrCat("--transport=", TransportName(o.call.transport),
                                             ": the call went over ", TransportName(r->transport),
                                             "."));
    } else if (o.handler == "crc32c") {
      if (*r->results[0].as<uint32_t>() != expected_crc) {
        bad = absl::DataLossError(absl::StrFormat("crc32c returned %08x, expected %08x",
                                                  *r->results[0].as<uint32_t>(), expected_crc));
      }
    } else if (o.handler == "sum") {
      if (*r->results[0].as<uint8_t>() != expected_sum) {
        bad = absl::DataLossError(absl::StrFormat("sum returned %d, expected %d",
                                                  *r->results[0].as<uint8_t>(), expected_sum));
      }
    } else {
      const uint8_t* want = o.alias ? expected.data() : in;
      if (r->results[0].size != o.bytes || std::memcmp(r->results[0].data, want, o.bytes) != 0) {
        bad = absl::DataLossError("copy returned bytes that differ from its input");
      }
    }
    absl::MutexLock l(&shared.mu);
    if (!bad.ok()) {
      if (shared.error.ok()) shared.error = bad;
      shared.next.store(limit);  // stop everyone
      return;
    }
    if (!timed) return;
    shared.latencies_us.push_back(us);
    shared.busy_us += us;
    shared.done.fetch_add(1);
  }
}

}  // namespace

std::string BenchReport::Json() const {
  return absl::StrFormat(
      "{\"calls\": %d, \"bytes_per_call\": %d, \"seconds\": %.6f, \"gbps\": %.6f, "
      "\"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f}",
      calls, bytes_per_call, seconds, gbps, p50_us, p90_us, p99_us, max_us);
}

std::string BenchReport::Table() const {
  return absl::StrFormat(
      "calls %d x %d bytes in %.3f s\n"
      "throughput  %.3f GB/s (one way)  %.1f calls/s\n"
      "latency     p50 %.1f us   p90 %.1f us   p99 %.1f us   max %.1f us\n",
      calls, bytes_per_call, seconds, gbps, seconds > 0 ? calls / seconds : 0, p50_us, p90_us,
      p99_us, max_us);
}

absl::StatusOr<BenchReport> RunBenchWith(Client& client, const BenchOptions& o);

absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& o) {
  if (o.handler != "copy" && o.handler != "crc32c" && o.handler != "sum") {
    return absl::InvalidArgumentError(
        "bench checks every result, so it runs --handler=copy, crc32c or sum.");
  }
  if (o.alias && o.handler != "copy") {
    return absl::InvalidArgumentError("--alias applies to --handler=copy.");
  }
  if (o.bytes < 0 || o.calls < 1 || o.concurrency < 1) {
    return absl::InvalidArgumentError("--bytes >= 0, --calls >= 1 and --concurrency >= 1.");
  }
  BenchOptions opts = o;
  // The gRPC path unless another transport is asked for, so that each
  // figure measures one path (--transport=auto is gRPC here).
  if (opts.call.transport == Transport::kAuto) {
    opts.call.transport = o.shm ? Transport::kShm : Transport::kGrpc;
  }
  return RunBenchWith(client, opts);
}

absl::StatusOr<BenchReport> RunBenchWith(Client& client, const BenchOptions& o) {
  Shared shared;
  // Warm-up: connections, the agent's pages, the allocator.
  absl::Duration warm_call = absl::ZeroDuration();
  for (int w = 0; w < o.warmup; ++w) {
    const absl::Time t = absl::Now();
    Worker(client, o, 0, /*timed=*/false, 0, shared);
    warm_call = absl::Now() - t;
    absl::MutexLock l(&shared.mu);
    if (!shared.error.ok()) return shared.error;
  }
  absl::Notification finished;
  std::thread progress;
  if (o.progress) {
    progress = std::thread([&] {
      while (!finished.WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
        std::fprintf(stderr, "\r  %lld / %lld calls", static_cast<long long>(shared.done.load()),
                     static_cast<long long>(o.calls));
      }
      std::fprintf(stderr, "\r%*s\r", 40, "");
    });
  }
  absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int i = 0; i < o.concurrency; ++i) {
    workers.emplace_back([&, i] {
      if (o.stagger) absl::SleepFor(warm_call * i / o.concurrency);
      Worker(client, o, i, /*timed=*/true, o.calls, shared);
    });
  }
  for (std::thread& t : workers) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  finished.Notify();
  if (progress.joinable()) progress.join();

  absl::MutexLock l(&shared.mu);
  if (!shared.error.ok()) return shared.error;
  BenchReport r;
  std::vector<double>& lat = shared.latencies_us;
  std::sort(lat.begin(), lat.end());
  r.calls = static_cast<int64_t>(lat.size());
  r.bytes_per_call = o.bytes;
  r.seconds = seconds;
  // Throughput counts the time spent inside calls, spread over the workers,
  // so that checking results between calls does not count against farcall.
  const double call_seconds = shared.busy_us / 1e6 / o.concurrency;
  const double basis = std::min(seconds, call_seconds > 0 ? call_seconds : seconds);
  r.gbps = basis > 0 ? static_cast<double>(o.bytes) * r.calls / basis / 1e9 : 0;
  r.p50_us = Percentile(lat, 0.50);
  r.p90_us = Percentile(lat, 0.90);
  r.p99_us = Percentile(lat, 0.99);
  r.max_us = lat.empty() ? 0 : lat.back();
  return r;
}

}  // namespace farcall::cli
