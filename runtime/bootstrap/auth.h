// File: runtime/bootstrap/auth.h
//
// The job token and the challenge-response that proves knowledge of it.
// Each side sends a fresh random nonce; each answers with
//   HMAC-SHA256(token, label | first_nonce | second_nonce)
// under its own label, so a proof cannot be replayed, reflected back, or
// turned into the token. Backed by OpenSSL's libcrypto (HMAC, RAND_bytes,
// CRYPTO_memcmp).
//
// An empty token is allowed and proves nothing: any process that can reach
// the store may join. Launchers (tools/relayrun) always generate one.
//
// Example:
//   std::string token = GenerateToken();  // hand to every rank, e.g. RELAY_TOKEN
//   std::string nonce = RandomBytes(store_protocol::kNonceBytes);
#ifndef RELAY_RUNTIME_BOOTSTRAP_AUTH_H_
#define RELAY_RUNTIME_BOOTSTRAP_AUTH_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace relay {

enum class ProofRole { kClient, kServer };

// Cryptographically random bytes (aborts the process if the system's random
// source fails: nothing sensible can go on without it).
std::string RandomBytes(size_t n);

// 32 random bytes as 64 lowercase hex digits.
std::string GenerateToken();

// The proof `role` sends: HMAC over its peer's nonce then its own.
std::string Proof(ProofRole role, absl::string_view token,
                  absl::string_view peer_nonce, absl::string_view own_nonce);

// Constant-time equality, so the comparison leaks nothing through timing.
bool ProofsEqual(absl::string_view a, absl::string_view b);

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_AUTH_H_
