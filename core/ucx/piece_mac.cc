#include "core/ucx/piece_mac.h"

#include <cstdlib>
#include <cstring>

#include "openssl/crypto.h"
#include "openssl/evp.h"
#include "openssl/params.h"
#include "openssl/rand.h"

namespace farcall::ucx {

std::string NewMacKey() {
  std::string key(kMacKeyBytes, '\0');
  // Without randomness no call can be protected: that is not a state to
  // go on in.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    std::abort();
  }
  return key;
}

struct PieceMac::Ctx {
  EVP_CIPHER_CTX* aes = EVP_CIPHER_CTX_new();  // derives the one-time keys
  EVP_MAC* poly = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
  EVP_MAC_CTX* mac = poly != nullptr ? EVP_MAC_CTX_new(poly) : nullptr;
  ~Ctx() {
    EVP_MAC_CTX_free(mac);
    EVP_MAC_free(poly);
    EVP_CIPHER_CTX_free(aes);
  }
};

PieceMac::PieceMac(absl::string_view key) : ctx_(new Ctx) {
  if (ctx_->aes == nullptr || ctx_->mac == nullptr || key.size() != kMacKeyBytes ||
      EVP_EncryptInit_ex(ctx_->aes, EVP_aes_128_ecb(), nullptr,
                         reinterpret_cast<const unsigned char*>(key.data()), nullptr) != 1) {
    std::abort();  // out of memory, or a caller that did not check the key
  }
  EVP_CIPHER_CTX_set_padding(ctx_->aes, 0);
}

PieceMac::~PieceMac() = default;

Mac PieceMac::Of(Carries what, uint64_t number, const void* data, size_t size) {
  // The message's one-time key: AES of (what, number, half) for both halves.
  unsigned char in[32] = {}, one_time[32 + 16];
  for (int half = 0; half < 2; ++half) {
    unsigned char* b = in + 16 * half;
    b[0] = static_cast<unsigned char>(what);
    for (int i = 0; i < 8; ++i) b[1 + i] = static_cast<unsigned char>(number >> (8 * i));
    b[9] = static_cast<unsigned char>(half);
  }
  int n = 0;
  bool ok = EVP_EncryptUpdate(ctx_->aes, one_time, &n, in, sizeof(in)) == 1 && n == 32;
  ok = ok && EVP_MAC_init(ctx_->mac, one_time, 32, nullptr) == 1;
  OPENSSL_cleanse(one_time, sizeof(one_time));
  const auto* p = static_cast<const unsigned char*>(data);
  if (size > 0) ok = ok && EVP_MAC_update(ctx_->mac, p, size) == 1;
  // The length is the MAC's too: Poly1305 pads only the last block.
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t{size} >> (8 * i));
  ok = ok && EVP_MAC_update(ctx_->mac, len, sizeof(len)) == 1;
  Mac mac{};
  size_t out = 0;
  ok = ok && EVP_MAC_final(ctx_->mac, mac.data(), &out, mac.size()) == 1 && out == kMacBytes;
  if (!ok) std::abort();  // neither fails on valid arguments
  return mac;
}

bool PieceMac::Check(Carries what, uint64_t number, const void* data, size_t size,
                     const uint8_t* mac) {
  const Mac want = Of(what, number, data, size);
  return CRYPTO_memcmp(want.data(), mac, kMacBytes) == 0;
}

std::vector<uint8_t> PieceMac::ListOf(Carries what, const std::vector<Piece>& pieces,
                                      const std::vector<const uint8_t*>& data) {
  std::vector<uint8_t> out(pieces.size() * kMacBytes);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    const Mac m = Of(what, k, data[p.tensor] + p.offset, static_cast<size_t>(p.size));
    std::memcpy(out.data() + k * kMacBytes, m.data(), kMacBytes);
  }
  return out;
}

}  // namespace farcall::ucx
