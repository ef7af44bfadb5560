// The baseline for device copies through the agent: cudaMemcpy between
// pinned host memory and the device, in each direction, on one GPU.
//
//   cuda_memcpy --bytes=268435456 --runs=5   # prints one JSON line
//
// Medians of --runs timed copies after one untimed copy each way.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int64_t Flag(int argc, char** argv, const char* name, int64_t def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::strtoll(argv[i] + prefix.size(), nullptr, 10);
    }
  }
  return def;
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cuda_memcpy: %s failed: %s (%s)\n", what, cudaGetErrorName(e),
               cudaGetErrorString(e));
  return false;
}

// Seconds for one copy, timed on the host around a synchronous cudaMemcpy.
double Time(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  const auto start = std::chrono::steady_clock::now();
  if (!Check(cudaMemcpy(dst, src, n, kind), "cudaMemcpy")) std::exit(1);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t bytes = Flag(argc, argv, "bytes", int64_t{256} << 20);
  const int64_t runs = std::max<int64_t>(1, Flag(argc, argv, "runs", 5));
  int count = 0;
  if (!Check(cudaGetDeviceCount(&count), "cudaGetDeviceCount") || count == 0) {
    std::fprintf(stderr, "cuda_memcpy: no cuda device found\n");
    return 2;
  }
  void* host = nullptr;
  void* dev = nullptr;
  if (!Check(cudaMallocHost(&host, bytes), "cudaMallocHost") ||
      !Check(cudaMalloc(&dev, bytes), "cudaMalloc")) {
    return 1;
  }
  std::memset(host, 7, bytes);
  std::vector<double> h2d, d2h;
  Time(dev, host, bytes, cudaMemcpyHostToDevice);
  Time(host, dev, bytes, cudaMemcpyDeviceToHost);
  for (int64_t r = 0; r < runs; ++r) {
    h2d.push_back(Time(dev, host, bytes, cudaMemcpyHostToDevice));
    d2h.push_back(Time(host, dev, bytes, cudaMemcpyDeviceToHost));
  }
  std::printf("{\"bytes\": %lld, \"h2d_gbps\": %.3f, \"d2h_gbps\": %.3f}\n",
              static_cast<long long>(bytes), bytes / Median(h2d) / 1e9, bytes / Median(d2h) / 1e9);
  cudaFree(dev);
  cudaFreeHost(host);
  return 0;
}
