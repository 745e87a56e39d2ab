// bench/pingpong: point-to-point latency and bandwidth between two ranks
// through the Communicator's Send/Recv (the Transport underneath), in the
// style of osu_latency / ucx_perftest tag_lat: half the round-trip time of a
// ping-pong, and the one-way bandwidth of a window of back-to-back sends.
//
//   bazel run //bench:pingpong -- -b 8 -e 4M -f 4 -n 10000
//
// Under a launcher (tools/relayrun -n 2, mpirun -np 2, ...) each of the two
// processes is one rank and the transport defaults to the job's or ucx:
//   UCX_TLS=shm,self tools/relayrun -n 2 -- bazel-bin/bench/pingpong
//
// --takeover times something else: how soon a transport's own progress
// (UCX's progress thread) moves a message that both callers left behind
// to compute, after a phase in which they polled:
//   tools/relayrun -n 2 -- bazel-bin/bench/pingpong --takeover 8 -e 1M
//
// Exit status: 0 on success, 1 if an operation failed, 2 for bad flags.
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/flags.h"
#include "bench/raw_ucx.h"
#include "bench/report.h"
#include "relay.h"
#include "runtime/bootstrap/environment.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: pingpong [flags]
  -b SIZE            smallest message in bytes (default 8)
  -e SIZE            largest message in bytes (default 4M)
  -f FACTOR          size multiplication factor (default 4)
  -n ITERS           round trips per size (default 10000; fewer for large)
  -w ITERS           warm-up round trips per size (default 100)
  --window N         messages in flight for the bandwidth test (default 16)
  --pattern P        the loops, blocking (default) or perftest.
                     Latency: blocking waits for each send before posting
                     the receive (osu_latency's MPI_Send/MPI_Recv);
                     perftest posts each receive before waiting for the
                     send before it, as ucx_perftest tag_lat does, so a
                     reply always meets a posted receive (no difference the
                     2-core VM could resolve at 8 B, 32 KB or 256 KB over
                     UCX shm).
                     Bandwidth: blocking sends windows of --window messages
                     in one batch, each window acknowledged (osu_bw);
                     perftest keeps --window sends in flight, posting the
                     next as the oldest completes, and --window receives
                     posted, with one acknowledgement at the end
                     (ucx_perftest tag_bw, whose -O defaults to 32)
  --takeover TRIALS  instead of the sweep: TRIALS times, 8 B round trips for
                     --poll-ms (both callers polling), then one message of
                     -e bytes that neither caller waits for while it
                     computes (spins without calling relay); prints how
                     long after its post each side's request completed,
                     i.e. how soon the transport's own progress moved it
  --poll-ms MS       --takeover's polling phase (default 20)
  --memory M         the message buffers: heap (default; page-aligned
                     heap memory, filled) or sysv (a System V shared-memory
                     segment each, filled: what ucx_perftest gets from
                     ucp_mem_map with Debian's UCX_ALLOC_PRIO, so a
                     comparison with it can hold the kind of memory equal;
                     a CMA rendezvous pins every page, and the kernel pins
                     the two kinds at different costs)
  --raw-ucx BLOCK    latency only, relay's path against UCX's own: every
                     size's round trips go once through relay and once
                     through raw UCP calls on a worker of its own (tag
                     matching, UCX_TLS as set; bench/raw_ucx.h), in
                     alternating blocks of BLOCK round trips on the same
                     buffers, and rank 0 prints both half round trips and
                     their difference. Needs --pattern perftest and
                     ranks launched as processes on ucx
  --transport NAME   registered transport (default loopback; under a
                     launcher RELAY_TRANSPORT, else ucx)
  -h, --help         this text
)";

struct Flags {
  size_t min_bytes = 8, max_bytes = 4 << 20;
  double factor = 4;
  int iters = 10000, warmup = 100, window = 16;
  int takeover_trials = 0;  // --takeover; 0: the sweep.
  int poll_ms = 20;
  int raw_block = 0;     // --raw-ucx; 0: relay alone.
  bool blocking = true;  // --pattern: blocking unless perftest.
  bool sysv = false;     // --memory sysv.
  std::string transport = "loopback";
  bool transport_given = false;
};

[[noreturn]] void BadFlag(const std::string& message) {
  std::fprintf(stderr, "pingpong: %s (see --help)\n", message.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("pingpong", kUsage, argc, argv);
  while (p.Next()) {
    if (bench::SweepFlag(p, f)) {
      continue;
    } else if (p.name() == "--window") {
      f.window = p.Int(1);
    } else if (p.name() == "--takeover") {
      f.takeover_trials = p.Int(1);
    } else if (p.name() == "--poll-ms") {
      f.poll_ms = p.Int(0);
    } else if (p.name() == "--pattern") {
      f.blocking = p.OneOf({"perftest", "blocking"}) == "blocking";
    } else if (p.name() == "--memory") {
      f.sysv = p.OneOf({"heap", "sysv"}) == "sysv";
    } else if (p.name() == "--raw-ucx") {
      f.raw_block = p.Int(1);
    } else if (p.name() == "--transport") {
      f.transport = p.value();
      f.transport_given = true;
    } else {
      p.Unknown();
    }
  }
  if (f.raw_block > 0 && (f.blocking || f.takeover_trials > 0)) {
    p.Fail("--raw-ucx needs --pattern perftest and no --takeover");
  }
  if (absl::Status s = bench::CheckSweep(f.min_bytes, f.max_bytes, f.factor);
      !s.ok()) {
    p.Fail(std::string(s.message()));
  }
  return f;
}

absl::Status Wait(absl::StatusOr<Request> r) {
  if (!r.ok()) return r.status();
  return r->Wait(absl::Seconds(60));
}

// A message buffer that starts on a page boundary, as osu_latency's and
// ucx_perftest's do, filled with `fill` (so its pages are real, not the
// kernel's shared zero page). Alignment matters for the comparison: a
// rendezvous over CMA pins every page a message touches, and an unaligned
// 32 KB buffer spans 9 pages instead of 8, which cost relay about 0.2 us a
// message against perftest's aligned ones.
class PageBuffer {
 public:
  // `sysv`: in a System V shared-memory segment of its own (--memory sysv),
  // marked for removal at once, so it goes when the process detaches it or
  // exits.
  PageBuffer(size_t bytes, char fill, bool sysv) : sysv_(sysv) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t rounded = std::max(page, (bytes + page - 1) / page * page);
    if (!sysv_) {
      data_ = static_cast<char*>(std::aligned_alloc(page, rounded));
    } else if (const int id = shmget(IPC_PRIVATE, rounded, IPC_CREAT | 0600);
               id >= 0) {
      void* at = shmat(id, nullptr, 0);
      shmctl(id, IPC_RMID, nullptr);
      if (at != reinterpret_cast<void*>(-1)) data_ = static_cast<char*>(at);
    }
    if (data_ == nullptr) {
      std::fprintf(stderr, "pingpong: cannot allocate %zu bytes%s: %s\n",
                   bytes, sysv_ ? " of System V shared memory" : "",
                   std::strerror(errno));
      std::exit(1);
    }
    std::memset(data_, fill, rounded);
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  ~PageBuffer() {
    if (sysv_) {
      shmdt(data_);
    } else {
      std::free(data_);
    }
  }
  char* data() const { return data_; }

 private:
  const bool sysv_;
  char* data_ = nullptr;
};

// --raw-ucx: `iters` round trips each through relay (`relay_round_trip`)
// and through raw UCX (`raw`), in alternating blocks of f.raw_block, the
// side that goes first alternating too, so both see the same minutes of
// the host. Rank 0 prints both half round trips and their difference.
template <class RelayRoundTrip>
absl::Status RelayAgainstRawUcx(const Flags& f, size_t bytes, int iters,
                                RelayRoundTrip& relay_round_trip,
                                const PageBuffer& out, const PageBuffer& in,
                                bench::RawUcxPair& raw) {
  for (int i = 0; i < f.warmup; ++i) {
    RELAY_RETURN_IF_ERROR(
        raw.RoundTrip(out.data(), in.data(), bytes, i + 1 < f.warmup));
  }
  absl::Duration spent[2];  // [0] relay, [1] raw UCX.
  for (int first = 0, block = 0; first < iters; first += f.raw_block, ++block) {
    const int n = std::min(f.raw_block, iters - first);
    for (int turn = 0; turn < 2; ++turn) {
      const int side = (block + turn) % 2;
      const absl::Time start = absl::Now();
      for (int i = 0; i < n; ++i) {
        RELAY_RETURN_IF_ERROR(
            side == 0 ? relay_round_trip(i + 1 < n)
                      : raw.RoundTrip(out.data(), in.data(), bytes, i + 1 < n));
      }
      spent[side] += absl::Now() - start;
    }
  }
  const double relay_us = absl::ToDoubleMicroseconds(spent[0]) / iters / 2;
  const double raw_us = absl::ToDoubleMicroseconds(spent[1]) / iters / 2;
  if (raw.rank() == 0) {
    std::printf("%12zu  %12.2f  %12.2f  %+12.3f\n", bytes, relay_us, raw_us,
                relay_us - raw_us);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status RunRank(Communicator& comm, const Flags& f,
                     bench::RawUcxPair* raw) {
  const int me = comm.rank(), peer = 1 - me;
  for (size_t bytes : bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor)) {
    const PageBuffer out(bytes, static_cast<char>(me), f.sysv),
        in(bytes, 0, f.sysv);
    const ConstBuffer send{out.data(), bytes, DataType::kUint8, Device::Host()};
    const Buffer recv{in.data(), bytes, DataType::kUint8, Device::Host()};
    // Fewer round trips for large messages: about 1 GB moved per size.
    const int iters = static_cast<int>(std::max<size_t>(
        10, std::min<size_t>(f.iters, (size_t{1} << 30) / (bytes + 1))));
    // perftest's pattern: rank 0 posts its receive right after its send,
    // and rank 1 posts the next receive right after its reply, each before
    // waiting for the send (ucx_perftest's run_pingpong). With a rendezvous
    // protocol the reply's request-to-send then always meets a posted
    // receive.
    absl::StatusOr<Request> next_recv;  // Rank 1's, posted ahead.
    bool recv_ahead = false;
    // `post_next`: rank 1 posts the next round trip's receive before
    // waiting for its reply; false for the last, so nothing is left posted
    // (a block of --raw-ucx's ends that way).
    auto round_trip = [&](bool post_next) -> absl::Status {
      if (f.blocking) {
        if (me == 0) {
          RELAY_RETURN_IF_ERROR(Wait(comm.Send(send, peer)));
          return Wait(comm.Recv(recv, peer));
        }
        RELAY_RETURN_IF_ERROR(Wait(comm.Recv(recv, peer)));
        return Wait(comm.Send(send, peer));
      }
      if (me == 0) {
        absl::StatusOr<Request> sent = comm.Send(send, peer);
        absl::StatusOr<Request> got = comm.Recv(recv, peer);
        RELAY_RETURN_IF_ERROR(Wait(std::move(sent)));
        return Wait(std::move(got));
      }
      if (!recv_ahead) next_recv = comm.Recv(recv, peer);
      recv_ahead = false;
      RELAY_RETURN_IF_ERROR(Wait(std::move(next_recv)));
      absl::StatusOr<Request> sent = comm.Send(send, peer);
      if (post_next) {
        next_recv = comm.Recv(recv, peer);
        recv_ahead = true;
      }
      return Wait(std::move(sent));
    };
    for (int i = 0; i < f.warmup; ++i) {
      RELAY_RETURN_IF_ERROR(round_trip(raw == nullptr || i + 1 < f.warmup));
    }
    if (raw != nullptr) {
      RELAY_RETURN_IF_ERROR(
          RelayAgainstRawUcx(f, bytes, iters, round_trip, out, in, *raw));
      continue;
    }
    absl::Time start = absl::Now();
    for (int i = 0; i < iters; ++i) {
      RELAY_RETURN_IF_ERROR(round_trip(i + 1 < iters));
    }
    const double latency_us =
        absl::ToDoubleMicroseconds(absl::Now() - start) / iters / 2;

    // Bandwidth, one-way: every receive lands in the same buffer, as in
    // osu_bw and ucx_perftest tag_bw, so the figure is the transport's, not
    // the cache's.
    const PageBuffer sink(bytes, 0, f.sysv);
    const Buffer sink_buf{sink.data(), bytes, DataType::kUint8, Device::Host()};
    char ack = 0;
    const Buffer ack_buf{&ack, 1, DataType::kUint8, Device::Host()};
    const int messages = std::max(f.window, iters / 4);
    double bytes_moved = 0;
    start = absl::Now();
    if (f.blocking) {
      // Windows of --window sends in one batch, each window acknowledged
      // (osu_bw's loop).
      std::vector<P2POp> ops;
      for (int w = 0; w < f.window; ++w) {
        ops.push_back(me == 0 ? P2POp::Send(send, peer, 1)
                              : P2POp::Recv(sink_buf, peer, 1));
      }
      const int windows = std::max(1, messages / f.window);
      for (int i = 0; i < windows; ++i) {
        RELAY_RETURN_IF_ERROR(Wait(comm.BatchSendRecv(ops)));
        RELAY_RETURN_IF_ERROR(Wait(me == 0 ? comm.Recv(ack_buf, peer, 2)
                                           : comm.Send(ack_buf, peer, 2)));
      }
      bytes_moved = static_cast<double>(bytes) * f.window * windows;
    } else {
      // ucx_perftest tag_bw's loop: a sliding window of --window requests
      // on each side (the sender posts the next send as soon as its oldest
      // completes, the receiver keeps --window receives posted), and one
      // acknowledgement at the end.
      std::deque<Request> in_flight;
      for (int i = 0; i < messages; ++i) {
        if (static_cast<int>(in_flight.size()) == f.window) {
          RELAY_RETURN_IF_ERROR(in_flight.front().Wait(absl::Seconds(60)));
          in_flight.pop_front();
        }
        absl::StatusOr<Request> posted = me == 0 ? comm.Send(send, peer, 1)
                                                 : comm.Recv(sink_buf, peer, 1);
        if (!posted.ok()) return posted.status();
        in_flight.push_back(*std::move(posted));
      }
      for (Request& r : in_flight) {
        RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
      }
      RELAY_RETURN_IF_ERROR(Wait(me == 0 ? comm.Recv(ack_buf, peer, 2)
                                         : comm.Send(ack_buf, peer, 2)));
      bytes_moved = static_cast<double>(bytes) * messages;
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const double gbps = bytes_moved / seconds / 1e9;
    if (me == 0) {
      std::printf("%12zu  %12.2f  %12.2f\n", bytes, latency_us, gbps);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

// --takeover (see kUsage). A progress thread that stands aside while
// callers poll must notice when they stop and move what they left behind;
// this times that on its own, one message at a time.
absl::Status RunTakeover(Communicator& comm, const Flags& f) {
  const int me = comm.rank(), peer = 1 - me;
  const size_t bytes = f.max_bytes;
  const PageBuffer message(bytes, static_cast<char>(me), f.sysv);
  char token = 1;
  const Buffer token_buf{&token, 1, DataType::kUint8, Device::Host()};
  double theirs_us = 0;
  const Buffer theirs_buf{&theirs_us, sizeof(double), DataType::kUint8,
                          Device::Host()};
  const ConstBuffer send{message.data(), bytes, DataType::kUint8,
                         Device::Host()};
  const Buffer recv{message.data(), bytes, DataType::kUint8, Device::Host()};
  // One message waited for first, so no trial pays first-use costs.
  RELAY_RETURN_IF_ERROR(
      Wait(me == 0 ? comm.Send(send, peer, 3) : comm.Recv(recv, peer, 3)));
  if (me == 0) {
    std::printf("# %6s  %16s  %16s  (%zu B message, %d ms polling)\n",
                "trial", "send done (us)", "recv done (us)", bytes,
                f.poll_ms);
  }
  for (int trial = 1; trial <= f.takeover_trials; ++trial) {
    // Both callers poll for poll_ms: rank 0's token says go on (1) or stop
    // (0), so both ranks run the same number of round trips.
    const absl::Time until = absl::Now() + absl::Milliseconds(f.poll_ms);
    do {
      if (me == 0) {
        token = absl::Now() < until ? 1 : 0;
        RELAY_RETURN_IF_ERROR(Wait(comm.Send(token_buf, peer)));
        RELAY_RETURN_IF_ERROR(Wait(comm.Recv(token_buf, peer)));
      } else {
        RELAY_RETURN_IF_ERROR(Wait(comm.Recv(token_buf, peer)));
        RELAY_RETURN_IF_ERROR(Wait(comm.Send(token_buf, peer)));
      }
    } while (token != 0);

    struct Outcome {
      std::atomic<bool> done{false};
      absl::Time at;
      absl::Status status;
    };
    auto outcome = std::make_shared<Outcome>();
    const absl::Time posted = absl::Now();
    absl::StatusOr<Request> r =
        me == 0 ? comm.Send(send, peer, 3) : comm.Recv(recv, peer, 3);
    if (!r.ok()) return r.status();
    r->OnDone([outcome](absl::Status s) {
      outcome->at = absl::Now();
      outcome->status = std::move(s);
      outcome->done.store(true, std::memory_order_release);
    });
    // Computing: no relay call until the request is done, 2 s at most.
    const absl::Time give_up = posted + absl::Seconds(2);
    while (!outcome->done.load(std::memory_order_acquire) &&
           absl::Now() < give_up) {
    }
    RELAY_RETURN_IF_ERROR(Wait(*std::move(r)));
    // Past the 2 s, Wait finished it; its OnDone may still be running.
    while (!outcome->done.load(std::memory_order_acquire)) {
    }
    RELAY_RETURN_IF_ERROR(outcome->status);
    double mine_us = absl::ToDoubleMicroseconds(outcome->at - posted);
    if (me == 1) {
      theirs_us = mine_us;
      RELAY_RETURN_IF_ERROR(Wait(comm.Send(theirs_buf, peer, 4)));
    } else {
      RELAY_RETURN_IF_ERROR(Wait(comm.Recv(theirs_buf, peer, 4)));
      std::printf("%8d  %16.1f  %16.1f\n", trial, mine_us, theirs_us);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status Run(Communicator& comm, const Flags& f) {
  if (f.takeover_trials > 0) return RunTakeover(comm, f);
  std::unique_ptr<bench::RawUcxPair> raw;
  if (f.raw_block > 0) {
    absl::StatusOr<std::unique_ptr<bench::RawUcxPair>> connected =
        bench::RawUcxPair::Connect(comm);
    if (!connected.ok()) return connected.status();
    raw = *std::move(connected);
  }
  return RunRank(comm, f, raw.get());
}

// This process is one of the two ranks of a launched job.
int RunLaunchedRank(Flags f) {
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  if (!env.ok()) BadFlag(std::string(env.status().message()));
  if (env->size != 2) BadFlag(absl::StrCat("needs 2 ranks, the job has ", env->size));
  if (!f.transport_given) f.transport = env->transport.empty() ? "ucx" : env->transport;
  if (f.raw_block > 0 && f.transport != "ucx") {
    BadFlag(absl::StrCat("--raw-ucx needs the ucx transport, not ", f.transport));
  }
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicatorFromEnvironment({}, absl::Minutes(2), f.transport);
  if (!comm.ok()) {
    std::fprintf(stderr, "pingpong: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  if ((*comm)->rank() == 0) {
    std::printf("# relay pingpong: 2 processes, transport %s\n",
                f.transport.c_str());
    if (f.raw_block > 0) {
      std::printf("# half round trips, alternating blocks of %d\n",
                  f.raw_block);
      std::printf("# %10s  %12s  %12s  %12s\n", "size (B)", "relay (us)",
                  "raw ucx (us)", "relay - raw");
    } else if (f.takeover_trials == 0) {
      std::printf("# %10s  %12s  %12s\n", "size (B)", "latency (us)",
                  "bw (GB/s)");
    }
  }
  absl::Status s = Run(**comm, f);
  if (!s.ok()) {
    std::fprintf(stderr, "pingpong: rank %d: %s\n", (*comm)->rank(),
                 s.ToString().c_str());
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  if (HasLaunchEnvironment()) return RunLaunchedRank(f);
  if (f.raw_block > 0) {
    BadFlag("--raw-ucx needs 2 ranks launched as processes on ucx "
            "(tools/relayrun -n 2 -- pingpong ...)");
  }
  if (!Transports().Get(f.transport).ok()) {
    BadFlag(absl::StrCat("unknown transport ", f.transport));
  }
  std::printf("# relay pingpong: 2 ranks, transport %s\n", f.transport.c_str());
  if (f.takeover_trials == 0) {
    std::printf("# %10s  %12s  %12s\n", "size (B)", "latency (us)",
                "bw (GB/s)");
  }
  auto store = std::make_shared<InMemoryStore>();
  absl::Status results[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorConfig config;
      config.rank = r;
      config.size = 2;
      config.store = store;
      config.transport = f.transport;
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          CreateCommunicator(config);
      results[r] = comm.ok() ? Run(**comm, f) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    if (!results[r].ok()) {
      std::fprintf(stderr, "pingpong: rank %d: %s\n", r,
                   results[r].ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
