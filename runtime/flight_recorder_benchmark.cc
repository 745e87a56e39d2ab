// What the flight recorder and the metrics add to one collective call:
// Queued, the OnDone callback that records completion, Done, Record.
//   bazel run -c opt //runtime:flight_recorder_benchmark
#include <memory>

#include "benchmark/benchmark.h"
#include "runtime/flight_recorder.h"
#include "runtime/metrics.h"
#include "runtime/request.h"

namespace relay {
namespace {

CollectiveArgs OneMegabyteAllReduce() {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.send = {reinterpret_cast<const void*>(0x10), 1 << 18, DataType::kFloat32,
               Device::Host()};
  args.recv = {reinterpret_cast<void*>(0x20), 1 << 18, DataType::kFloat32,
               Device::Host()};
  return args;
}

void BM_RecordOneCollective(benchmark::State& state) {
  auto recorder = std::make_shared<FlightRecorder>(1024);
  CollectiveArgs args = OneMegabyteAllReduce();
  for (auto _ : state) {
    auto request = std::make_shared<RequestState>();
    const uint64_t token = recorder->Queued(args, 4);
    request->OnDone([recorder, token](absl::Status s) { recorder->Done(token, s); });
    request->Complete(absl::OkStatus());
    ++args.sequence;
  }
}
BENCHMARK(BM_RecordOneCollective);

// What the communicator does per collective: the recorder and the metrics
// in one completion callback.
void BM_RecordAndCount(benchmark::State& state) {
  auto recorder = std::make_shared<FlightRecorder>(1024);
  auto metrics = std::make_shared<CollectiveMetrics>();
  CollectiveArgs args = OneMegabyteAllReduce();
  for (auto _ : state) {
    auto request = std::make_shared<RequestState>();
    const uint64_t token = recorder->Queued(args, 4);
    const absl::Time start = FastNow();
    request->OnDone([recorder, metrics, token, start](absl::Status s) {
      recorder->Done(token, s);
      metrics->Record(CollectiveKind::kAllReduce, 1 << 20, FastNow() - start, s.ok());
    });
    request->Complete(absl::OkStatus());
    ++args.sequence;
  }
}
BENCHMARK(BM_RecordAndCount);

// The same request life without the recorder, for the difference.
void BM_RequestAlone(benchmark::State& state) {
  for (auto _ : state) {
    auto request = std::make_shared<RequestState>();
    request->Complete(absl::OkStatus());
    benchmark::DoNotOptimize(request);
  }
}
BENCHMARK(BM_RequestAlone);

}  // namespace
}  // namespace relay
