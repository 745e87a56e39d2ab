#!/usr/bin/python3
"""Fuzzes tools/relay_analyze's reader: flight records from other processes.

Usage: relay_analyze_fuzz.py [--runs N] [--seconds S] [--seed K]
                             [--crashes DIR] CORPUS_DIR...

Each corpus file is a JSON array of one job's records (one per rank, as
FlightRecorder::ToJson writes them, or as a crash mangled them: files named
regress-* are inputs that once crashed the reader). Every run mutates one seed, either as
bytes (of one rank's file text: flips, inserts, deletions, splices) or as
structure (a field replaced by a value of another type or range, a key
dropped, an entry duplicated, a rank renumbered), then feeds the texts to
the analyzer's own parse/collect/verdict. The property: the analyzer
either names a verdict (lines of text) or refuses the input with BadRecord
(its exit status 2), within a second; any other exception, or a run that
takes longer (a record claiming 2^40 ranks once hung it), is a crash. A crash's input is
written to --crashes (default: the current directory) as a JSON array of
the rank texts, and the exit status is 1.

Why not libFuzzer: the reader is Python, and atheris (libFuzzer for Python)
is not in Debian; this is a mutation fuzzer without coverage feedback, so
its seeds (records of real stalls and kills) carry the depth.
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import random
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def load_analyzer():
    path = os.path.join(HERE, "relay_analyze")
    loader = importlib.machinery.SourceFileLoader("relay_analyze", path)
    spec = importlib.util.spec_from_loader("relay_analyze", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ODD_VALUES = [None, True, False, 0, -1, 1, 2**31, -2**63, 2**64, 10**400,
              1.5, float("nan"), "", "x", "queued", "completed", "failed",
              "rank 99 lost", "rank -1", [], {}, [1, 2], {"a": 1}]


def mutate_structure(rng, docs):
    docs = json.loads(json.dumps(docs))  # A deep copy.
    if not docs:
        return docs
    doc = rng.choice(docs)
    choice = rng.randrange(6)
    if choice == 0 and isinstance(doc, dict) and doc:
        doc[rng.choice(list(doc))] = rng.choice(ODD_VALUES)
    elif choice == 1 and isinstance(doc, dict) and doc:
        del doc[rng.choice(list(doc))]
    elif choice == 2 and isinstance(doc, dict) and doc.get("entries"):
        entries = doc["entries"]
        if isinstance(entries, list) and entries:
            e = rng.choice(entries)
            if isinstance(e, dict) and e:
                key = rng.choice(list(e))
                if rng.random() < 0.5:
                    e[key] = rng.choice(ODD_VALUES)
                else:
                    del e[key]
    elif choice == 3 and isinstance(doc, dict) and isinstance(doc.get("entries"), list):
        entries = doc["entries"]
        if entries:
            i = rng.randrange(len(entries))
            entries.insert(rng.randrange(len(entries) + 1), json.loads(json.dumps(entries[i])))
            if rng.random() < 0.5:
                del entries[rng.randrange(len(entries))]
    elif choice == 4 and isinstance(doc, dict):
        doc["rank"] = rng.choice([0, 1, 2, 3, 4, -1, doc.get("rank")])
        if rng.random() < 0.3:
            doc["size"] = rng.choice([1, 2, 3, 4, 5, 0, 2**40])
    else:
        if rng.random() < 0.5 and len(docs) > 1:
            del docs[rng.randrange(len(docs))]
        else:
            docs.append(json.loads(json.dumps(rng.choice(docs))))
    return docs


def mutate_bytes(rng, text):
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(5)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos:pos] = bytes([rng.randrange(256)])
        elif op == 2 and data:
            del data[pos:pos + rng.randint(1, 16)]
        elif op == 3 and data:
            a = rng.randrange(len(data))
            data[pos:pos] = data[a:a + rng.randint(1, 32)]
        else:
            data[pos:pos] = rng.choice([b"{", b"}", b"[", b"]", b'"', b"\\",
                                        b"null", b"-0", b"1e999", b"\xff",
                                        b"\\ud800", b",", b":"])
    return data.decode("utf-8", "replace")


class Hang(Exception):
    pass


def on_alarm(signum, frame):
    raise Hang("one run took over a second")


def run_one(analyzer, texts):
    """Raises anything but BadRecord; returns the verdict or None."""
    try:
        docs = [(f"rank file {i}", analyzer.parse(t)) for i, t in enumerate(texts)]
        if not docs:
            return None
        lines = analyzer.verdict(analyzer.collect(docs))
    except analyzer.BadRecord:
        return None
    assert lines and all(isinstance(line, str) for line in lines), lines
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="+", help="directories of seed files")
    parser.add_argument("--runs", type=int, default=0,
                        help="stop after this many runs (0: no limit)")
    parser.add_argument("--seconds", type=float, default=0,
                        help="stop after this long (0: no limit)")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--crashes", default=".",
                        help="where a crashing input is written")
    args = parser.parse_args(argv[1:])
    if args.runs <= 0 and args.seconds <= 0:
        parser.error("give --runs or --seconds")

    analyzer = load_analyzer()
    seeds = []
    for d in args.corpus:
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                seeds.append(json.load(f))
    if not seeds:
        print("relay_analyze_fuzz: no seeds", file=sys.stderr)
        return 2
    # Seeds are replayed first: real records that must get a verdict, and
    # inputs that once crashed the reader (refused now, never a crash).
    if not any([run_one(analyzer, [json.dumps(d) for d in docs]) is not None
                for docs in seeds]):
        print("relay_analyze_fuzz: no seed gets a verdict", file=sys.stderr)
        return 2

    signal.signal(signal.SIGALRM, on_alarm)
    rng = random.Random(args.seed)
    start = time.monotonic()
    runs = verdicts = 0
    next_report = start + 10
    while True:
        if args.runs and runs >= args.runs:
            break
        now = time.monotonic()
        if args.seconds and now - start >= args.seconds:
            break
        if now >= next_report:
            print(f"relay_analyze_fuzz: {runs} runs, {verdicts} verdicts, "
                  f"{now - start:.0f} s", file=sys.stderr, flush=True)
            next_report = now + 10
        docs = rng.choice(seeds)
        if rng.random() < 0.5:
            docs = mutate_structure(rng, docs)
            for _ in range(rng.randrange(3)):
                docs = mutate_structure(rng, docs)
        texts = [json.dumps(d) for d in docs]
        if texts and rng.random() < 0.5:
            i = rng.randrange(len(texts))
            texts[i] = mutate_bytes(rng, texts[i])
        runs += 1
        try:
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            if run_one(analyzer, texts) is not None:
                verdicts += 1
            signal.setitimer(signal.ITIMER_REAL, 0)
        except Exception:  # The property: nothing but BadRecord escapes.
            signal.setitimer(signal.ITIMER_REAL, 0)
            path = os.path.join(args.crashes, f"crash-relay_analyze-{args.seed}-{runs}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(texts, f)
            traceback.print_exc()
            print(f"relay_analyze_fuzz: crash after {runs} runs; input in {path}",
                  file=sys.stderr)
            return 1
    elapsed = time.monotonic() - start
    print(f"relay_analyze_fuzz: {runs} runs in {elapsed:.0f} s, {verdicts} verdicts, "
          "no crash")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
