"""Tests of relaybench on runs with known figures."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from relaybench import plot, rounds, rows, stats, tables  # noqa: E402


def report(sizes_times, wrong=0, busbw_scale=1.0):
    """A bench/report.h JSON document: size -> (out-of-place us, in-place us)."""
    def half(t, size):
        return {"time_us": t, "algbw": size / t / 1e3,
                "busbw": busbw_scale * size / t / 1e3, "wrong": wrong}
    return {"runs": [{"collective": "all_reduce", "rows": [
        {"size": s, "out_of_place": half(o, s), "in_place": half(i, s)}
        for s, (o, i) in sorted(sizes_times.items())]}]}


def file_with(text, suffix=".txt"):
    """The path of a new file holding `text`."""
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as f:
        f.write(text)
    return f.name


def writer(doc_by_round):
    """A side's command: writes {out}.json from a per-round document."""
    path = file_with(json.dumps(doc_by_round), ".json")
    return (f"{sys.executable} -c 'import json,sys; d=json.load(open(\"{path}\"));"
            f" json.dump(d[sys.argv[2]], open(sys.argv[1] + \".json\", \"w\"))' {{out}} {{round}}")


class RoundsAndTables(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.log = os.path.join(self.dir, "order.log")

    def test_alternates_and_pairs_by_round(self):
        # The reference takes 10, 20, 40 us in rounds 1-3 at 64 B; the side
        # takes half of that each round, so every paired ratio is 0.5 while
        # the unpaired medians alone would also say 0.5; at 1 KB the side is
        # 1.5x slower in every round.
        ref = {str(k): report({64: (10 * 2 ** (k - 1), 11 * 2 ** (k - 1)), 1024: (100, 100)})
               for k in (1, 2, 3)}
        side = {str(k): report({64: (5 * 2 ** (k - 1), 6 * 2 ** (k - 1)), 1024: (150, 160)})
                for k in (1, 2, 3)}
        sides = [("ref", writer(ref) + f"; echo ref >> {self.log}"),
                 ("fast", writer(side) + f"; echo fast >> {self.log}")]
        with open(os.devnull, "w") as quiet:
            self.assertEqual(rounds.run(sides, 3, self.dir, log=quiet), 0)
        with open(self.log) as f:
            self.assertEqual(f.read().split(), ["ref", "fast", "fast", "ref", "ref", "fast"])
        text, wrong = tables.sides_table(self.dir, intervals=True)
        self.assertEqual(wrong, 0)
        self.assertIn("| 64 | 20.00 | 10.00 | 0.500 (0.50-0.50) |", text)
        self.assertIn("| 1024 | 100.00 | 150.00 | 1.500", text)
        best, _ = tables.sides_table(self.dir, stat="best")
        self.assertIn("| 64 | 10.00 | 5.00 | 0.500 |", best)
        self.assertNotIn("host us", text)  # These runs report no issue_us.

    def test_host_time_per_call_where_runs_report_it(self):
        for k, issue in ((1, 3.0), (2, 5.0), (3, 4.0)):
            for side, t in (("ref", 10.0), ("queued", 6.0)):
                doc = report({8: (t, t)})
                if side == "queued":
                    for half in doc["runs"][0]["rows"][0].values():
                        if isinstance(half, dict):
                            half["issue_us"] = issue
                with open(os.path.join(self.dir, f"{side}.r{k}.json"), "w") as f:
                    json.dump(doc, f)
        text, _ = tables.sides_table(self.dir, reference="ref")
        self.assertIn("queued host us |", text)
        self.assertIn("| 8 | 10.00 | 6.00 | 0.600 | ", text)
        self.assertTrue(text.splitlines()[4].endswith(" 4.00 |"), text)

    def test_variants_take_the_fastest_and_text_stands_in_for_json(self):
        for k in (1, 2):
            for alg, t in (("alg0", 30.0), ("alg3", 12.0)):
                with open(os.path.join(self.dir, f"peer.r{k}.{alg}.json"), "w") as f:
                    json.dump(report({8: (t, t)}), f)
            # The side's run was cut off: only its text table is there.
            with open(os.path.join(self.dir, f"relay.r{k}.txt"), "w") as f:
                f.write("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n")
                f.write("     8     2 float sum -1  6.00 0.00 0.00 0  7.00 0.00 0.00 0\n")
        text, _ = tables.sides_table(self.dir, reference="peer")
        self.assertIn("| 8 | 12.00 (alg3) | 6.00 | 0.500 |", text)
        self.assertEqual(tables.sides_table(self.dir, side="relay")[0], text)

    def test_wrong_elements_fail_the_table(self):
        with open(os.path.join(self.dir, "a.r1.json"), "w") as f:
            json.dump(report({8: (1, 1)}), f)
        with open(os.path.join(self.dir, "b.r1.json"), "w") as f:
            json.dump(report({8: (1, 1)}, wrong=3), f)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        done = subprocess.run([sys.executable, "-m", "relaybench", "table", self.dir],
                              env=env, capture_output=True, text=True)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("wrong elements, all sides: 6", done.stdout)

    def test_a_failed_run_is_left_out_or_stops_the_rounds(self):
        sides = [("ok", writer({"1": report({8: (1, 1)}), "2": report({8: (1, 1)})})),
                 ("bad", "echo oops >&2; exit 3")]
        with open(os.devnull, "w") as quiet:
            with self.assertRaisesRegex(RuntimeError, "bad round 1 exited 3"):
                rounds.run(sides, 2, self.dir, log=quiet)
            self.assertEqual(rounds.run(sides, 2, self.dir, keep_going=True, log=quiet), 2)
        with open(os.path.join(self.dir, "failed_runs.txt")) as f:
            self.assertEqual(len(f.read().splitlines()), 2)
        self.assertNotIn("bad", tables.collect(self.dir))

    def test_bad_input_is_refused(self):
        for bad in ("noequals", "a.b=cmd", "=cmd", "a/b=cmd"):
            with self.assertRaises(ValueError):
                rounds.parse_side(bad)
        with self.assertRaisesRegex(ValueError, "holds no runs"):
            tables.sides_table(self.dir)


class Statistics(unittest.TestCase):
    def test_interval_brackets_the_median_and_is_repeatable(self):
        values = [0.9, 1.1, 1.0, 0.95, 1.3, 0.7, 1.05]
        low, high = stats.median_interval(values)
        self.assertLessEqual(low, 1.0)
        self.assertGreaterEqual(high, 1.0)
        self.assertEqual((low, high), stats.median_interval(values))
        self.assertEqual(stats.median_interval([2.0] * 5), (2.0, 2.0))

    def test_paired_ratios(self):
        p = stats.Paired([1, 2, 6], [2, 4, 3])
        self.assertEqual(p.ratios, [0.5, 0.5, 2.0])
        self.assertEqual(p.median(), 0.5)
        self.assertEqual(p.below_one(), 2)
        with self.assertRaises(ValueError):
            stats.Paired([1], [1, 2])


class ScriptOutputs(unittest.TestCase):
    def test_latency_table(self):
        path = file_with("=== all_reduce 8 B, 2 ranks\n"
                         "# bench/ab_latency.sh, 2 rounds x 100 calls\n"
                         "relay: median 0.5 us (all: 0.5 0.6 0.4 0.45)\n"
                         "mpi@3: median 1.0 us (all: 1.0 1.1 1.0 0.9)\n")
        text = tables.latency_table(path)
        # Round bests: relay 0.5, 0.4; MPI 1.0, 0.9 -> ratios 0.5, 0.444.
        self.assertIn("/ mpi@3: median 0.472", text)
        self.assertIn("below 1 in 2 of 2 rounds", text)

    def test_pooled_table(self):
        path = file_with("  new  median   5.00 us  min   4.00  rounds: 5.00 6.00 4.00\n"
                         "  old  median   6.00 us  min   5.00  context switches (median)"
                         "      12  rounds: 6.00 6.50 5.00\n"
                         "  new - old, paired by round: median -1.00 us (95%: -1.00 to"
                         " -0.50)  rounds: -1.00 -0.50 -1.00\n")
        text = tables.pooled_table([(path, "new", "old"), (path, "new", "old")])
        self.assertIn("pooled: 6 rounds, median -1.00 us", text)
        with self.assertRaisesRegex(ValueError, "no side gone"):
            tables.pooled_table([(path, "gone", "old")])


class Plot(unittest.TestCase):
    def test_one_line_per_side_in_each_panel(self):
        d = tempfile.mkdtemp()
        for side in ("a", "b", "c"):
            with open(os.path.join(d, f"{side}.r1.json"), "w") as f:
                json.dump(report({8: (2, 2), 1 << 20: (50, 50)}), f)
        text = plot.svg([d])
        self.assertEqual(text.count("<polyline"), 6)
        self.assertTrue(text.startswith("<svg"))

    def test_rows_read_a_missing_run_as_an_error(self):
        with self.assertRaises(FileNotFoundError):
            rows.load(os.path.join(tempfile.mkdtemp(), "nothing"))


if __name__ == "__main__":
    unittest.main()
