// The GPU backend's tests, built once per runtime (cuda and rocm). Those
// that need a device skip without one, saying so; the signature test runs
// everywhere.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "device_agents/gpu/gpu_api.h"
#include "device_agents/gpu/gpu_backend.h"
#include "device_agents/gpu/graph_cache.h"
#include "gtest/gtest.h"

namespace farcall::agent::FARCALL_GPU_NS {
namespace {

// Opens the backend, or skips the test with the reason.
#define OPEN_OR_SKIP(backend)                                                             \
  absl::StatusOr<Backend> backend = OpenGpuBackend(BackendOptions{});                     \
  if (!backend.ok()) {                                                                    \
    GTEST_SKIP() << "SKIPPED: no " << api::kName << " device here: " << backend.status(); \
  }

// The buffer points to `dims`, which must outlive it.
FarcallBuffer Buf(int32_t dtype, const std::vector<int64_t>& dims, void* data, uint64_t bytes,
                  int64_t alias = -1) {
  return MakeBuffer(dtype, dims, data, bytes, alias);
}

FarcallAttribute F64Attr(const char* name, double v) { return MakeF64Attribute(name, v); }

TEST(GraphSignatureTest, DiffersExactlyWhenAGraphCouldNotReplay) {
  RegisteredHandler h{"scale", api::kName, FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE, nullptr,
                      "builtin"};
  std::vector<int64_t> d4 = {4}, d8 = {8};
  auto inv = [&](const std::vector<int64_t>& dims, double alpha, int64_t alias) {
    HandlerInvocation i;
    i.args = {Buf(FARCALL_DTYPE_F32, dims, reinterpret_cast<void*>(0x1000), 16)};
    i.results = {Buf(FARCALL_DTYPE_F32, dims, reinterpret_cast<void*>(0x2000), 16, alias)};
    i.attrs = {F64Attr("alpha", alpha)};
    return i;
  };
  const std::string base = GraphSignature(h, inv(d4, 2.0, -1));
  // Other buffers of the same specs replay the same graph...
  HandlerInvocation moved = inv(d4, 2.0, -1);
  moved.args[0].data = reinterpret_cast<void*>(0x9000);
  EXPECT_EQ(GraphSignature(h, moved), base);
  // ...other shapes, attributes or aliases do not.
  EXPECT_NE(GraphSignature(h, inv(d8, 2.0, -1)), base);
  EXPECT_NE(GraphSignature(h, inv(d4, 3.0, -1)), base);
  EXPECT_NE(GraphSignature(h, inv(d4, 2.0, 0)), base);
  // Attributes are keyed on their exact bits, not a rounded print.
  EXPECT_NE(GraphSignature(h, inv(d4, 1.0000001, -1)), GraphSignature(h, inv(d4, 1.0000002, -1)));
  // Attribute order on the wire does not matter.
  HandlerInvocation two = inv(d4, 2.0, -1);
  two.attrs.push_back(F64Attr("beta", 1.0));
  HandlerInvocation swapped = two;
  std::swap(swapped.attrs[0], swapped.attrs[1]);
  EXPECT_EQ(GraphSignature(h, two), GraphSignature(h, swapped));
}

const FarcallHandlerDef& Builtin(const char* name) {
  for (const FarcallHandlerDef& d : GpuBuiltinHandlers()) {
    if (std::string(d.name) == name) return d;
  }
  static FarcallHandlerDef none{};
  return none;
}

std::atomic<int> g_host_runs{0};
FarcallError* CountingScale(const FarcallCallFrame* frame) {
  ++g_host_runs;
  return Builtin("scale").fn(frame);
}

// Runs scale(x, alpha) through the device's stream and returns the result.
std::vector<float> ScaleOnDevice(Device& device, const RegisteredHandler& h,
                                 const std::vector<float>& x, double alpha) {
  const uint64_t bytes = x.size() * sizeof(float);
  auto in = device.Allocate(static_cast<int64_t>(bytes));
  auto out = device.Allocate(static_cast<int64_t>(bytes));
  auto stream = device.AcquireStream();
  EXPECT_TRUE(in.ok() && out.ok() && stream.ok());
  std::vector<int64_t> dims = {static_cast<int64_t>(x.size())};
  EXPECT_TRUE((*stream)->CopyToDevice(x.data(), **in, 0, static_cast<int64_t>(bytes)).ok());
  HandlerInvocation inv;
  inv.platform = api::kName;
  inv.stream_kind = (*stream)->kind();
  inv.stream = (*stream)->native();
  inv.args = {Buf(FARCALL_DTYPE_F32, dims, (*in)->device_ptr(), bytes)};
  inv.results = {Buf(FARCALL_DTYPE_F32, dims, (*out)->device_ptr(), bytes)};
  inv.attrs = {F64Attr("alpha", alpha)};
  absl::Status s = (*stream)->Invoke(h, inv);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> y(x.size());
  EXPECT_TRUE((*stream)->CopyToHost(**out, 0, static_cast<int64_t>(bytes), y.data()).ok());
  EXPECT_TRUE((*stream)->Synchronize().ok());
  return y;
}

TEST(GraphCacheTest, HostCodeRunsOncePerSignatureAndReplaysWithNewData) {
  OPEN_OR_SKIP(backend);
  Device& device = *backend->devices[0];
  RegisteredHandler h{"counting_scale", api::kName, FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE,
                      &CountingScale, "test"};
  g_host_runs = 0;
  for (int call = 0; call < 5; ++call) {
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(call * 1000 + i);
    std::vector<float> y = ScaleOnDevice(device, h, x, 2.0);
    for (size_t i = 0; i < x.size(); i += 111) ASSERT_EQ(y[i], 2 * x[i]) << "call " << call;
  }
  // Once as any handler, once under capture; replayed after that.
  EXPECT_EQ(g_host_runs.load(), 2) << "the handler's host code ran past its capture";
  ScaleOnDevice(device, h, std::vector<float>(7, 1.0f), 2.0);  // a new shape
  EXPECT_EQ(g_host_runs.load(), 3);
  std::vector<float> y = ScaleOnDevice(device, h, std::vector<float>(7, 1.0f), 3.0);
  EXPECT_EQ(g_host_runs.load(), 4);  // a new attribute
  EXPECT_EQ(y[6], 3.0f);
}

TEST(GraphCacheTest, TheLeastRecentlyUsedGraphIsDroppedToStayWithinItsBytes) {
  OPEN_OR_SKIP(backend);
  Device& device = *backend->devices[0];
  RegisteredHandler h{"counting_scale", api::kName, FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE,
                      &CountingScale, "test"};
  // Room for one graph of 1000 floats (an arg and a result: 8000 bytes).
  GraphCache cache(device, 8000 + GraphCache::kEntryOverheadBytes);
  auto run = [&](double alpha) {
    std::vector<float> x(1000, 1.0f);
    auto in = device.Allocate(4000);
    auto out = device.Allocate(4000);
    auto stream = device.AcquireStream();
    ASSERT_TRUE(in.ok() && out.ok() && stream.ok());
    ASSERT_TRUE((*stream)->CopyToDevice(x.data(), **in, 0, 4000).ok());
    HandlerInvocation inv;
    inv.platform = api::kName;
    inv.stream_kind = (*stream)->kind();
    inv.stream = (*stream)->native();
    const std::vector<int64_t> dims = {1000};  // outlives inv, which points to it
    inv.args = {Buf(FARCALL_DTYPE_F32, dims, (*in)->device_ptr(), 4000)};
    inv.results = {Buf(FARCALL_DTYPE_F32, dims, (*out)->device_ptr(), 4000)};
    inv.attrs = {F64Attr("alpha", alpha)};
    absl::Status ran = cache.Run(h, inv, **stream);
    ASSERT_TRUE(ran.ok()) << ran;
    std::vector<float> y(1000);
    ASSERT_TRUE((*stream)->CopyToHost(**out, 0, 4000, y.data()).ok());
    ASSERT_TRUE((*stream)->Synchronize().ok());
    EXPECT_EQ(y[999], static_cast<float>(alpha));
  };
  g_host_runs = 0;
  run(2.0);  // seen once: run as any handler
  run(2.0);  // captured
  run(2.0);
  EXPECT_EQ(g_host_runs.load(), 2);  // replayed
  run(3.0);
  run(3.0);  // a second graph: the first is dropped
  EXPECT_EQ(g_host_runs.load(), 4);
  run(2.0);  // captured again (its signature is remembered as seen)
  EXPECT_EQ(g_host_runs.load(), 5);
}

// A Device whose allocations fail from the `fail_from`th on.
class FailingDevice final : public Device {
 public:
  FailingDevice(Device& real, int fail_from) : real_(real), fail_from_(fail_from) {}
  Platform platform() const override { return real_.platform(); }
  int ordinal() const override { return real_.ordinal(); }
  std::string name() const override { return real_.name(); }
  int64_t memory_bytes() const override { return real_.memory_bytes(); }
  int64_t memory_used_bytes() const override { return real_.memory_used_bytes(); }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int64_t size) override {
    if (++allocations_ >= fail_from_) return absl::ResourceExhaustedError("out of memory (test)");
    return real_.Allocate(size);
  }
  absl::StatusOr<std::unique_ptr<Stream>> AcquireStream() override { return real_.AcquireStream(); }
  int allocations_ = 0;

 private:
  Device& real_;
  const int fail_from_;
};

// Runs scale through `cache` on new buffers of `device`: the result's last
// element, or the failure.
absl::StatusOr<float> ScaleThrough(GraphCache& cache, Device& device, const RegisteredHandler& h,
                                   int n, double alpha) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  std::vector<float> x(n, 1.0f);
  FARCALL_ASSIGN_OR_RETURN(auto in, device.Allocate(bytes));
  FARCALL_ASSIGN_OR_RETURN(auto out, device.Allocate(bytes));
  FARCALL_ASSIGN_OR_RETURN(auto stream, device.AcquireStream());
  FARCALL_RETURN_IF_ERROR(stream->CopyToDevice(x.data(), *in, 0, bytes));
  HandlerInvocation inv;
  inv.platform = api::kName;
  inv.stream_kind = stream->kind();
  inv.stream = stream->native();
  const std::vector<int64_t> dims = {n};
  inv.args = {Buf(FARCALL_DTYPE_F32, dims, in->device_ptr(), static_cast<uint64_t>(bytes))};
  inv.results = {Buf(FARCALL_DTYPE_F32, dims, out->device_ptr(), static_cast<uint64_t>(bytes))};
  inv.attrs = {F64Attr("alpha", alpha)};
  FARCALL_RETURN_IF_ERROR(cache.Run(h, inv, *stream));
  std::vector<float> y(n);
  FARCALL_RETURN_IF_ERROR(stream->CopyToHost(*out, 0, bytes, y.data()));
  FARCALL_RETURN_IF_ERROR(stream->Synchronize());
  return y.back();
}

// An entry whose buffers could not all be allocated is not kept half made:
// the next call of its signature allocates afresh and runs correctly
// (it used to read past the entry's empty result list).
TEST(GraphCacheTest, AFailedAllocationLeavesNoHalfMadeEntry) {
  OPEN_OR_SKIP(backend);
  Device& real = *backend->devices[0];
  RegisteredHandler h{"counting_scale", api::kName, FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE,
                      &CountingScale, "test"};
  // The entry's arg allocation succeeds and its result's fails.
  FailingDevice failing(real, 2);
  GraphCache cache(failing, int64_t{1} << 30);
  ASSERT_TRUE(ScaleThrough(cache, real, h, 100, 2.0).ok());  // seen once
  absl::StatusOr<float> failed = ScaleThrough(cache, real, h, 100, 2.0);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted) << failed.status();
  failing.allocations_ = -100;  // memory again
  absl::StatusOr<float> y = ScaleThrough(cache, real, h, 100, 2.0);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(*y, 2.0f);
}

// A schedule that changes an attribute every step neither fills the cache
// nor captures: signatures seen once run as any handler; the cache holds
// at most --graph_cache_entries graphs.
TEST(GraphCacheTest, SignaturesSeenOnceAreNotCapturedAndEntriesAreBounded) {
  OPEN_OR_SKIP(backend);
  Device& device = *backend->devices[0];
  RegisteredHandler h{"counting_scale", api::kName, FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE,
                      &CountingScale, "test"};
  GraphCache cache(device, int64_t{1} << 30, /*max_entries=*/2);
  g_host_runs = 0;
  for (int step = 0; step < 50; ++step) {
    absl::StatusOr<float> y = ScaleThrough(cache, device, h, 10, 1.0 + step);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(*y, 1.0f + step);
  }
  EXPECT_EQ(g_host_runs.load(), 50);
  // Three signatures used twice each: at most two graphs stay.
  for (double alpha : {7.0, 8.0, 9.0, 7.0, 8.0, 9.0})
    ASSERT_TRUE(ScaleThrough(cache, device, h, 10, alpha).ok());
  g_host_runs = 0;
  ASSERT_TRUE(ScaleThrough(cache, device, h, 10, 9.0).ok());
  EXPECT_EQ(g_host_runs.load(), 0);  // the most recent graph replays
}

TEST(GraphCacheTest, WithoutTheTraitHostCodeRunsEveryCall) {
  OPEN_OR_SKIP(backend);
  RegisteredHandler h{"counting_scale", api::kName, 0, &CountingScale, "test"};
  g_host_runs = 0;
  for (int call = 0; call < 3; ++call) {
    ScaleOnDevice(*backend->devices[0], h, std::vector<float>(10, 1.0f), 2.0);
  }
  EXPECT_EQ(g_host_runs.load(), 3);
}

TEST(GpuBackendTest, OutOfMemoryIsResourceExhaustedAndTheDeviceStaysHealthy) {
  OPEN_OR_SKIP(backend);
  Device& device = *backend->devices[0];
  auto m = device.Allocate(device.memory_bytes() * 4);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  EXPECT_TRUE(device.health().ok());
  EXPECT_TRUE(device.Allocate(1 << 20).ok());
}

TEST(GpuBackendTest, DevicesFlagPicksAndChecksOrdinals) {
  OPEN_OR_SKIP(all);
  BackendOptions one;
  one.devices = {static_cast<int>(all->devices.size()) - 1};
  auto picked = OpenGpuBackend(one);
  ASSERT_TRUE(picked.ok()) << picked.status();
  ASSERT_EQ(picked->devices.size(), 1u);
  EXPECT_EQ(picked->devices[0]->ordinal(), one.devices[0]);
  BackendOptions bad;
  bad.devices = {static_cast<int>(all->devices.size())};
  EXPECT_EQ(OpenGpuBackend(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace farcall::agent::FARCALL_GPU_NS
