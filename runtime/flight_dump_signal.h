// File: runtime/flight_dump_signal.h
//
// Dumping every live communicator's flight record on a signal: `kill -USR1
// <pid>` on a hung job writes each rank's record to
// $RELAY_FLIGHT_RECORDER_DIR/relay_flight_rank<R>.json (one file per
// communicator rank in this process; a later communicator of the same rank
// overwrites an earlier one's), for tools/relay_analyze.
//
// The handler only writes a byte to a pipe (async-signal-safe); a thread
// started with the first registration does the dumping. Installed only when
// RELAY_FLIGHT_RECORDER_DIR is set, so a process that does not ask for it
// keeps SIGUSR1's default.
//
// Lifetime and ownership. Communicators register their recorder at creation
// and unregister at destruction; the registry holds weak references and
// lives for the whole process.
#ifndef RELAY_RUNTIME_FLIGHT_DUMP_SIGNAL_H_
#define RELAY_RUNTIME_FLIGHT_DUMP_SIGNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/flight_recorder.h"

namespace relay {

// Writes `recorder`'s record (with `reason`) to
// $RELAY_FLIGHT_RECORDER_DIR/relay_flight_rank<rank>.json; nothing when the
// variable is unset or `recorder` is null. A failure is reported on stderr
// (this runs on error paths that have a status of their own to return).
// Returns true if it wrote the file. Communicators call it when they abort.
bool WriteFlightRecordToDirectory(const FlightRecorder* recorder, int rank,
                                  int size, const std::string& reason);

// Returns a handle for UnregisterForSignalDump, or 0 when nothing was
// registered (no directory set, or the recorder is off).
uint64_t RegisterForSignalDump(std::weak_ptr<FlightRecorder> recorder, int rank,
                               int size);
void UnregisterForSignalDump(uint64_t handle);

// Dumps every registered record now, as the signal would; returns how many
// files were written. For tests.
int DumpAllFlightRecords(const char* reason);

}  // namespace relay

#endif  // RELAY_RUNTIME_FLIGHT_DUMP_SIGNAL_H_
