// Bare-gRPC baselines, measured in the same run as farcall (bench/run.sh):
//
//   grpc_baseline server --listen=127.0.0.1:0 [--ready_fd=N]
//   grpc_baseline unary  --target=H:P --calls=N          64 B sync unary echo
//   grpc_baseline bidi   --target=H:P --bytes=N          1 MiB ByteBuffer echo
//   grpc_baseline store  --target=H:P --bytes=N          store-and-return
//
// Store-and-return is the least work any buffer-callback service can do:
// receive every chunk into one contiguous buffer, send the buffer back as
// slices that refer to it after the half-close, and copy each returned
// chunk into the caller's contiguous buffer. Every client mode ends with one
// JSON line.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/echo.grpc.pb.h"
#include "core/process.h"
#include "grpc/grpc.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "server: HOST:PORT");
ABSL_FLAG(int, ready_fd, -1, "server: write the port here once serving");
ABSL_FLAG(std::string, target, "", "client: server address");
ABSL_FLAG(int64_t, calls, 2000, "unary: calls");
ABSL_FLAG(int64_t, bytes, int64_t{256} << 20, "bidi/store: payload bytes");
ABSL_FLAG(int64_t, msg_bytes, 1 << 20, "bidi/store: bytes per message");

namespace {

using grpc::ByteBuffer;
using grpc::Slice;

constexpr char kTotalKey[] = "x-total-bytes";

using Keep = std::shared_ptr<uint8_t[]>;
void ReleaseKeep(void* k) { delete static_cast<Keep*>(k); }

// --- Server --------------------------------------------------------------

class BidiEcho final : public grpc::ServerBidiReactor<ByteBuffer, ByteBuffer> {
 public:
  BidiEcho() { StartRead(&buf_); }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);
    StartWrite(&buf_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    StartRead(&buf_);
  }
  void OnDone() override { delete this; }

 private:
  ByteBuffer buf_;
};

class StoreReturn final : public grpc::ServerBidiReactor<ByteBuffer, ByteBuffer> {
 public:
  StoreReturn(grpc::CallbackServerContext* ctx, int64_t msg_bytes) : msg_bytes_(msg_bytes) {
    auto it = ctx->client_metadata().find(kTotalKey);
    int64_t total = 0;
    if (it != ctx->client_metadata().end()) {
      (void)absl::SimpleAtoi(std::string(it->second.data(), it->second.size()), &total);
    }
    // Uninitialised: every byte is received.
    data_ = Keep(new uint8_t[std::max<int64_t>(total, 1)]);
    total_ = total;
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return WriteNext();
    std::vector<Slice> slices;
    (void)in_.Dump(&slices);
    for (const Slice& s : slices) {
      size_t n = std::min<size_t>(s.size(), total_ - received_);
      std::memcpy(data_.get() + received_, s.begin(), n);
      received_ += n;
    }
    in_.Clear();
    StartRead(&in_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (sent_ >= received_) return Finish(grpc::Status::OK);
    int64_t n = std::min(msg_bytes_, received_ - sent_);
    Slice s(data_.get() + sent_, n, &ReleaseKeep, new Keep(data_));
    out_ = ByteBuffer(&s, 1);
    sent_ += n;
    StartWrite(&out_);
  }
  int64_t msg_bytes_;
  Keep data_;
  int64_t total_ = 0, received_ = 0, sent_ = 0;
  ByteBuffer in_, out_;
};

class EchoService final : public farcall::bench::Echo::WithRawCallbackMethod_Unary<
                              farcall::bench::Echo::WithRawCallbackMethod_Bidi<
                                  farcall::bench::Echo::WithRawCallbackMethod_StoreReturn<
                                      farcall::bench::Echo::Service>>> {
 public:
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const ByteBuffer* req,
                                  ByteBuffer* resp) override {
    *resp = *req;
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>* Bidi(grpc::CallbackServerContext*) override {
    return new BidiEcho();
  }
  grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>* StoreReturn(
      grpc::CallbackServerContext* ctx) override {
    return new ::StoreReturn(ctx, absl::GetFlag(FLAGS_msg_bytes));
  }
};

int Serve() {
  farcall::BlockTerminationSignals();
  EchoService service;
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&service);
  b.SetMaxReceiveMessageSize(-1);
  b.SetMaxSendMessageSize(-1);
  auto server = b.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "grpc_baseline: cannot listen\n");
    return 1;
  }
  farcall::ReportReady(absl::GetFlag(FLAGS_ready_fd), port);
  farcall::WaitForTerminationSignal();
  server->Shutdown();
  return 0;
}

// --- Clients ---------------------------------------------------------------

std::shared_ptr<grpc::Channel> Channel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(),
                                   args);
}

int RunUnary() {
  auto stub = farcall::bench::Echo::NewStub(Channel());
  farcall::bench::Blob req, resp;
  req.set_data(std::string(64, 'x'));
  const int64_t n = absl::GetFlag(FLAGS_calls);
  std::vector<double> us;
  for (int64_t i = 0; i < n + 50; ++i) {  // the first 50 warm up
    grpc::ClientContext ctx;
    absl::Time t = absl::Now();
    grpc::Status s = stub->Unary(&ctx, req, &resp);
    if (!s.ok() || resp.data() != req.data()) {
      std::fprintf(stderr, "unary echo failed: %s\n", s.error_message().c_str());
      return 1;
    }
    if (i >= 50) us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t));
  }
  std::sort(us.begin(), us.end());
  std::printf("{\"calls\": %lld, \"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f}\n",
              static_cast<long long>(n), us[us.size() / 2], us[us.size() * 9 / 10],
              us[us.size() * 99 / 100]);
  return 0;
}

// Sends `total` bytes in messages referring to `src`, reading replies as they
// come. For store-and-return, copies every reply into `dst`.
class StreamClient final : public grpc::ClientBidiReactor<ByteBuffer, ByteBuffer> {
 public:
  StreamClient(const uint8_t* src, uint8_t* dst, int64_t total, int64_t msg)
      : src_(src), dst_(dst), total_(total), msg_(msg) {}
  void Start(grpc::GenericStub& stub, const char* method) {
    ctx_.AddMetadata(kTotalKey, std::to_string(total_));
    stub.PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    StartRead(&in_);
    WriteNext();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    std::vector<Slice> slices;
    (void)in_.Dump(&slices);
    for (const Slice& s : slices) {
      size_t n = std::min<size_t>(s.size(), total_ - received_);
      if (dst_ != nullptr) std::memcpy(dst_ + received_, s.begin(), n);
      received_ += n;
    }
    in_.Clear();
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override {
    status_ = s;
    done_.Notify();
  }
  grpc::Status Wait() {
    done_.WaitForNotification();
    return status_;
  }
  int64_t received() const { return received_; }

 private:
  void WriteNext() {
    if (sent_ >= total_) return StartWritesDone();
    int64_t n = std::min(msg_, total_ - sent_);
    Slice s(src_ + sent_, n, Slice::STATIC_SLICE);
    out_ = ByteBuffer(&s, 1);
    sent_ += n;
    StartWrite(&out_);
  }
  const uint8_t* src_;
  uint8_t* dst_;
  int64_t total_, msg_;
  int64_t sent_ = 0, received_ = 0;
  grpc::ClientContext ctx_;
  ByteBuffer in_, out_;
  grpc::Status status_;
  absl::Notification done_;
};

int RunStream(bool store) {
  grpc::GenericStub stub(Channel());
  const int64_t total = absl::GetFlag(FLAGS_bytes);
  const int64_t msg = absl::GetFlag(FLAGS_msg_bytes);
  std::unique_ptr<uint8_t[]> src(new uint8_t[total]);
  for (int64_t i = 0; i < total; ++i) src[i] = static_cast<uint8_t>(i * 31);
  std::unique_ptr<uint8_t[]> dst(store ? new uint8_t[total] : nullptr);
  const char* method = store ? "/farcall.bench.Echo/StoreReturn" : "/farcall.bench.Echo/Bidi";
  absl::Time t = absl::Now();
  StreamClient c(src.get(), dst.get(), total, msg);
  c.Start(stub, method);
  grpc::Status s = c.Wait();
  double sec = absl::ToDoubleSeconds(absl::Now() - t);
  if (!s.ok() || c.received() != total ||
      (store && std::memcmp(src.get(), dst.get(), total) != 0)) {
    std::fprintf(stderr, "%s failed: %s\n", method, s.error_message().c_str());
    return 1;
  }
  std::printf("{\"bytes\": %lld, \"seconds\": %.6f, \"gbps\": %.6f}\n",
              static_cast<long long>(total), sec, total / sec / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> pos = absl::ParseCommandLine(argc, argv);
  grpc_init();
  const std::string mode = pos.size() > 1 ? pos[1] : "";
  if (mode == "server") return Serve();
  if (mode == "unary") return RunUnary();
  if (mode == "bidi") return RunStream(false);
  if (mode == "store") return RunStream(true);
  std::fprintf(stderr, "usage: grpc_baseline server|unary|bidi|store [flags]\n");
  return 2;
}
