// File: runtime/tag.h
//
// Tag: the 64-bit message tag transports match on, and its layout. Each
// communicator has its own transport wiring, so tags need not name the
// communicator; they separate user point-to-point traffic from collectives,
// and one collective from another, so concurrent operations never mix.
//
//   bit 63      1 = collective traffic, 0 = user point-to-point
//   collective  bits 16..62: the communicator's collective sequence number
//               bits 0..15:  the lane (an independent pipeline of one schedule)
//   user        bits 0..62:  the caller's tag (0 <= tag <= kMaxUserTag)
//
// Example:
//   Tag t = CollectiveTag(/*sequence=*/42, /*lane=*/3);
#ifndef RELAY_RUNTIME_TAG_H_
#define RELAY_RUNTIME_TAG_H_

#include <cstdint>

namespace relay {

using Tag = uint64_t;

inline constexpr uint64_t kCollectiveTagBit = uint64_t{1} << 63;
inline constexpr int kLaneBits = 16;
inline constexpr int kMaxLanes = 1 << kLaneBits;
// The largest point-to-point tag a caller may pass, on every transport: the
// smallest that any transport carries (UCX packs the tag beside the source
// rank into its 64-bit tag), so a program that runs on one runs on all.
inline constexpr int64_t kMaxUserTag = (int64_t{1} << 43) - 1;

inline constexpr Tag CollectiveTag(uint64_t sequence, int lane) {
  return kCollectiveTagBit |
         ((sequence << kLaneBits) & ~kCollectiveTagBit) |
         static_cast<uint64_t>(lane & (kMaxLanes - 1));
}

inline constexpr Tag UserTag(int64_t tag) { return static_cast<Tag>(tag); }

}  // namespace relay

#endif  // RELAY_RUNTIME_TAG_H_
