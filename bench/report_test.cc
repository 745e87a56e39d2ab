#include "bench/report.h"

#include <stdio.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace relay {
namespace bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Captures what `print` writes to a FILE*.
template <typename Fn>
std::string Capture(Fn print) {
  char* data = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&data, &size);
  print(f);
  std::fclose(f);
  std::string out(data, size);
  std::free(data);
  return out;
}

Reporter::Options AllReduce4() {
  Reporter::Options opts;
  opts.collective = "all_reduce";
  opts.nranks = 4;
  opts.peer = "openmpi";
  return opts;
}

Row SampleRow() {
  Row row;
  row.bytes = 1048576;
  row.count = 262144;
  row.type = "float";
  row.redop = "sum";
  row.root = -1;
  row.oop_time_us = 128.0;
  row.oop_wrong = 0;
  row.ip_time_us = 32.5;
  row.ip_wrong = -1;
  return row;
}

TEST(BusBwFactorTest, MatchesNcclTests) {
  EXPECT_DOUBLE_EQ(BusBwFactor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBwFactor("all_reduce", 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor("all_reduce", 1), 0.0);
  for (const char* name :
       {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}) {
    EXPECT_DOUBLE_EQ(BusBwFactor(name, 4), 0.75) << name;
    EXPECT_DOUBLE_EQ(BusBwFactor(name, 8), 0.875) << name;
    EXPECT_DOUBLE_EQ(BusBwFactor(name, 1), 0.0) << name;
  }
  for (const char* name : {"broadcast", "reduce", "sendrecv"}) {
    EXPECT_DOUBLE_EQ(BusBwFactor(name, 4), 1.0) << name;
    EXPECT_DOUBLE_EQ(BusBwFactor(name, 1), 1.0) << name;
  }
  EXPECT_DOUBLE_EQ(BusBwFactor("barrier", 4), 0.0);
  EXPECT_DOUBLE_EQ(BusBwFactor("allreduce", 4), 0.0);
  EXPECT_DOUBLE_EQ(BusBwFactor("all_reduce", 0), 0.0);
}

TEST(BusBwFactorTest, EveryNamedCollectiveIsKnown) {
  EXPECT_EQ(CollectiveNames().size(), 10u);
  for (const std::string& name : CollectiveNames()) {
    EXPECT_TRUE(IsKnownCollective(name)) << name;
  }
  EXPECT_FALSE(IsKnownCollective("allreduce"));
  EXPECT_FALSE(IsKnownCollective(""));
}

TEST(MedianTest, MiddleValueOrMeanOfTheMiddleTwo) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({7.5}), 7.5);
  EXPECT_EQ(Median({9, 1, 4}), 4);          // Unsorted input.
  EXPECT_EQ(Median({10, -2, 3, 6}), 4.5);   // (3 + 6) / 2.
  EXPECT_EQ(Median({1, 1, 100, 2, 50}), 2);  // Outliers do not move it.
}

TEST(AlgBwTest, GigabytesPerSecond) {
  EXPECT_DOUBLE_EQ(AlgBw(1000000000, 1e6), 1.0);  // 1 GB in 1 s.
  EXPECT_DOUBLE_EQ(AlgBw(8000, 1.0), 8.0);        // 8 KB in 1 us.
  EXPECT_DOUBLE_EQ(AlgBw(8, 0.0), 0.0);
}

TEST(ParseSizeTest, AcceptsNcclTestsSizes) {
  EXPECT_EQ(*ParseSize("8"), 8u);
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("1K"), 1024u);
  EXPECT_EQ(*ParseSize("1k"), 1024u);
  EXPECT_EQ(*ParseSize("1KB"), 1024u);
  EXPECT_EQ(*ParseSize("64M"), size_t{64} << 20);
  EXPECT_EQ(*ParseSize("2mb"), size_t{2} << 20);
  EXPECT_EQ(*ParseSize("1G"), size_t{1} << 30);
  EXPECT_EQ(*ParseSize("16B"), 16u);
}

TEST(ParseSizeTest, RejectsOtherText) {
  for (const char* bad :
       {"", "K", "-1", "+8", "1.5K", "1T", " 8", "8 ", "1KBB", "1BK", "0x10",
        "99999999999999999999", "17179869184G"}) {
    absl::StatusOr<size_t> size = ParseSize(bad);
    ASSERT_FALSE(size.ok()) << "\"" << bad << "\" parsed as " << *size;
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(size.status().message(), HasSubstr("invalid size"));
  }
  EXPECT_THAT(ParseSize("1T").status().message(), HasSubstr("\"1T\""));
}

TEST(SizeSweepTest, MultipliesLikeNcclTests) {
  EXPECT_THAT(SizeSweep(8, 64, 2), ElementsAre(8, 16, 32, 64));
  // 64M is not a power of 8 times 8: the sweep stops at 16M, as nccl-tests'.
  EXPECT_THAT(SizeSweep(8, 64 << 20, 8),
              ElementsAre(8, 64, 512, 4096, 32768, 262144, 2097152, 16777216));
  EXPECT_THAT(SizeSweep(10, 20, 1.5), ElementsAre(10, 15));
  // A step always grows by at least one byte.
  EXPECT_THAT(SizeSweep(1, 4, 1.1), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(SizeSweep(0, 2, 2), ElementsAre(0, 1, 2));
}

TEST(SizeSweepTest, AlwaysHoldsTheMinimum) {
  EXPECT_THAT(SizeSweep(8, 8, 2), ElementsAre(8));
  EXPECT_THAT(SizeSweep(8, 8, 1), ElementsAre(8));
  EXPECT_THAT(SizeSweep(8, 4, 2), ElementsAre(8));
  EXPECT_THAT(SizeSweep(8, 64, 1), ElementsAre(8));
  EXPECT_THAT(SizeSweep(8, 64, 0.5), ElementsAre(8));
}

TEST(SizeSweepTest, CheckSweepExplainsBadArguments) {
  EXPECT_TRUE(CheckSweep(8, 64, 2).ok());
  EXPECT_TRUE(CheckSweep(8, 8, 1).ok());
  EXPECT_EQ(CheckSweep(64, 8, 2).code(), absl::StatusCode::kInvalidArgument);
  absl::Status flat = CheckSweep(8, 64, 1);
  EXPECT_EQ(flat.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(flat.message(), HasSubstr("factor"));
}

TEST(JsonQuoteTest, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("l1\nl2\r\t\b\f"), "\"l1\\nl2\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f\x00", 3)),
            "\"\\u0001\\u001f\\u0000\"");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 /"), "\"caf\xc3\xa9 /\"");
}

TEST(ReporterTest, HeaderMatchesNcclTests) {
  Reporter::Options opts = AllReduce4();
  opts.comments = {"Open MPI v4.1.4", "nranks 4"};
  Reporter rep(opts);
  std::vector<std::string> lines = absl::StrSplit(
      Capture([&](FILE* f) { rep.PrintHeader(f); }), '\n');
  ASSERT_EQ(lines.size(), 7u);  // The last one is empty.
  EXPECT_EQ(lines[0], "# Open MPI v4.1.4");
  EXPECT_EQ(lines[1], "# nranks 4");
  EXPECT_EQ(lines[2], "#");
  EXPECT_EQ(lines[3],
            "#                                                              "
            "out-of-place                       in-place          ");
  EXPECT_EQ(lines[4],
            "#       size         count      type   redop    root     time   "
            "algbw   busbw #wrong     time   algbw   busbw #wrong");
  EXPECT_EQ(lines[5],
            "#        (B)    (elements)                               (us)  "
            "(GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ");
  EXPECT_EQ(lines[6], "");
}

TEST(ReporterTest, RowMatchesNcclTestsLayout) {
  Reporter rep(AllReduce4());
  // algbw = 1048576 B / 128 us = 8.19 GB/s, busbw 1.5x; in-place 32.5 us.
  EXPECT_EQ(rep.FormatRow(SampleRow()),
            "     1048576        262144     float     sum      -1    128.0"
            "    8.19   12.29      0    32.50   32.26   48.40    N/A");

  // Every header column ends where the matching row field ends.
  std::vector<std::string> header = absl::StrSplit(
      Capture([&](FILE* f) { rep.PrintHeader(f); }), '\n');
  const std::string& names = header[2];
  Row row = SampleRow();
  row.oop_time_us = 123456.0;  // Wide times lose decimals, not alignment.
  row.ip_time_us = 1234.5;
  row.ip_wrong = 12345;
  const std::string line = rep.FormatRow(row);
  ASSERT_EQ(line.size(), names.size());
  int columns = 0;
  for (size_t i = 1; i < names.size(); ++i) {  // names[0] is the "#".
    const bool ends = names[i] != ' ' &&
                      (i + 1 == names.size() || names[i + 1] == ' ');
    if (!ends) continue;
    ++columns;
    EXPECT_NE(line[i], ' ') << "column ending at " << i << " in\n"
                            << names << "\n" << line;
    if (i + 1 < line.size()) {
      EXPECT_EQ(line[i + 1], ' ') << i;
    }
  }
  EXPECT_EQ(columns, 13);
  EXPECT_THAT(line, HasSubstr(" 123456 "));
  EXPECT_THAT(line, HasSubstr(" 1234.5 "));
}

TEST(ReporterTest, MissingInPlacePrintsNotAvailable) {
  Reporter::Options opts;
  opts.collective = "broadcast";
  opts.nranks = 2;
  Reporter rep(opts);
  Row row = SampleRow();
  row.redop = "none";
  row.root = 0;
  row.has_inplace = false;
  EXPECT_EQ(rep.FormatRow(row),
            "     1048576        262144     float    none       0    128.0"
            "    8.19    8.19      0      N/A     N/A     N/A    N/A");
}

TEST(ReporterTest, FooterSumsWrongAndAveragesBothColumns) {
  Reporter rep(AllReduce4());
  Row row = SampleRow();
  row.bytes = 1000;       // 1000 B in 1 us: algbw 1 GB/s, busbw 1.5.
  row.oop_time_us = 1.0;
  row.ip_time_us = 1.0;
  row.ip_wrong = 0;
  std::string printed = Capture([&](FILE* f) { rep.PrintRow(f, row); });
  EXPECT_EQ(printed, rep.FormatRow(row) + "\n");
  row.ip_time_us = 0.5;  // busbw 3.
  row.oop_wrong = 3;
  rep.AddRow(row);
  row.has_inplace = false;
  row.oop_wrong = -1;  // Not checked: not counted.
  row.oop_time_us = 0.25;  // busbw 6.
  rep.AddRow(row);
  EXPECT_EQ(rep.rows().size(), 3u);
  EXPECT_EQ(rep.TotalWrong(), 3);
  // (1.5 + 1.5 + 1.5 + 3 + 6) / 5.
  EXPECT_DOUBLE_EQ(rep.AvgBusBw(), 2.7);
  EXPECT_EQ(Capture([&](FILE* f) { rep.PrintFooter(f); }),
            "# Out of bounds values : 3 FAILED\n"
            "# Avg bus bandwidth    : 2.7 \n"
            "#\n");

  Reporter clean(AllReduce4());
  EXPECT_THAT(Capture([&](FILE* f) { clean.PrintFooter(f); }),
              HasSubstr("# Out of bounds values : 0 OK\n"));
}

TEST(ReporterTest, JsonHoldsEveryRow) {
  Reporter::Options opts = AllReduce4();
  opts.comments = {"say \"hi\"\n"};
  Reporter rep(opts);
  Row row = SampleRow();
  row.bytes = 1000;
  row.oop_time_us = 1.0;
  row.ip_time_us = 2.0;
  rep.AddRow(row);
  row.has_inplace = false;
  rep.AddRow(row);
  const std::string json = rep.ToJson();
  EXPECT_THAT(json, HasSubstr("\"collective\": \"all_reduce\""));
  EXPECT_THAT(json, HasSubstr("\"nranks\": 4"));
  EXPECT_THAT(json, HasSubstr("\"peer\": \"openmpi\""));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"transport\"")));
  EXPECT_THAT(json, HasSubstr("\"comments\": [\"say \\\"hi\\\"\\n\"]"));
  EXPECT_THAT(json, HasSubstr("{\"size\": 1000, \"count\": 262144, "
                              "\"type\": \"float\", \"redop\": \"sum\", "
                              "\"root\": -1,"));
  EXPECT_THAT(json, HasSubstr("\"out_of_place\": {\"time_us\": 1, "
                              "\"algbw\": 1, \"busbw\": 1.5, \"wrong\": 0}"));
  EXPECT_THAT(json, HasSubstr("\"in_place\": {\"time_us\": 2, "
                              "\"algbw\": 0.5, \"busbw\": 0.75, "
                              "\"wrong\": null}"));
  EXPECT_THAT(json, HasSubstr("\"in_place\": null}"));
  EXPECT_THAT(json, HasSubstr("\"out_of_bounds\": 0"));
  // Balanced and newline-terminated.
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.substr(json.size() - 2), "}\n");
}

TEST(ReporterTest, JsonHoldsIssueTimeWhereMeasured) {
  Reporter rep(AllReduce4());
  Row row = SampleRow();
  row.bytes = 1000;
  row.oop_time_us = 1.0;
  row.oop_issue_us = 0.25;  // Measured out of place only.
  row.ip_time_us = 2.0;
  rep.AddRow(row);
  const std::string json = rep.ToJson();
  EXPECT_THAT(json, HasSubstr("\"wrong\": 0, \"issue_us\": 0.25}"));
  EXPECT_THAT(json, HasSubstr("\"wrong\": null}"));  // In place: none.
  EXPECT_EQ(json.find("issue_us"), json.rfind("issue_us"));
}

TEST(ReporterTest, JsonWithoutRows) {
  Reporter::Options opts;
  opts.collective = "barrier";
  opts.nranks = 2;
  opts.transport = "loopback";
  const std::string json = Reporter(opts).ToJson();
  EXPECT_THAT(json, HasSubstr("\"transport\": \"loopback\""));
  EXPECT_THAT(json, HasSubstr("\"rows\": [],"));
  EXPECT_THAT(json, HasSubstr("\"avg_busbw\": 0\n}"));
}

TEST(ReporterTest, WriteJsonReportsUnwritablePaths) {
  Reporter rep(AllReduce4());
  absl::Status s = rep.WriteJson("/nonexistent-dir/x.json");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/x.json"));
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/report.json";
  ASSERT_TRUE(rep.WriteJson(path).ok());
}

}  // namespace
}  // namespace bench
}  // namespace relay
