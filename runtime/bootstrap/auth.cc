#include "runtime/bootstrap/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace relay {

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                          static_cast<int>(n)) != 1) {
    std::fprintf(stderr, "relay: RAND_bytes failed; no random source\n");
    std::abort();
  }
  return out;
}

std::string GenerateToken() { return absl::BytesToHexString(RandomBytes(32)); }

std::string Proof(ProofRole role, absl::string_view token,
                  absl::string_view peer_nonce, absl::string_view own_nonce) {
  const absl::string_view label =
      role == ProofRole::kClient ? "relay-store-client" : "relay-store-server";
  const std::string message = absl::StrCat(label, peer_nonce, own_nonce);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  // HMAC with an empty key is well defined (RFC 2104 pads the key with
  // zeros); OpenSSL wants a non-null pointer for it.
  static const char kEmpty[1] = {0};
  HMAC(EVP_sha256(), token.empty() ? kEmpty : token.data(),
       static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       mac, &mac_size);
  return std::string(reinterpret_cast<const char*>(mac), mac_size);
}

bool ProofsEqual(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace relay
