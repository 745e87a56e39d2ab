"""Running sides in alternating rounds.

A side is a named shell command that writes one run of a benchmark. On a
noisy machine two sides timed minutes apart compare the host, not the code,
so every round runs every side once, in reverse order every other round,
and the tables pair the sides' figures by round.

Each run's files share the prefix DIR/<side>.r<k>: the command gets it as
{out} (and the round as {round}); its standard output goes to {out}.txt and
its standard error to {out}.err. A harness that writes JSON is given
`--json {out}.json`; one that writes several runs per call (Open MPI's
algorithms) may name them {out}.<variant>.json.
"""
import datetime
import os
import platform
import shlex
import subprocess
import sys


def parse_side(text):
    """NAME=COMMAND -> (NAME, COMMAND)."""
    name, sep, command = text.partition("=")
    if not sep or not name or not command or "/" in name or "." in name:
        raise ValueError(f"a side is NAME=COMMAND with no '/' or '.' in NAME, "
                         f"got {text!r}")
    return name, command


def _describe_host():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f
                        if l.startswith("model name")), "")
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    if not commit:
        # A copy outside the repository (bench/gpu/build.sh's folder on a
        # GPU host) carries the commit it was built from.
        try:
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                   "COMMIT")) as f:
                commit = f.read().strip()
        except OSError:
            pass
    return (f"host: {platform.node()}, {os.cpu_count()} cores, {cpu or 'cpu unknown'}\n"
            f"commit: {commit or 'unknown'}\n")


def run(sides, rounds, out_dir, keep_going=False, log=sys.stderr):
    """Runs every side once a round for `rounds` rounds; returns the number
    of runs that failed (with keep_going) or raises on the first."""
    os.makedirs(out_dir, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    with open(os.path.join(out_dir, "rounds.txt"), "w") as f:
        f.write(f"date: {started:%Y-%m-%dT%H:%M:%SZ}\n{_describe_host()}"
                f"rounds: {rounds} (every other one in reverse order)\n")
        for name, command in sides:
            f.write(f"side {name}: {command}\n")
    failed = 0
    for k in range(1, rounds + 1):
        order = sides if k % 2 else list(reversed(sides))
        for name, command in order:
            prefix = os.path.join(out_dir, f"{name}.r{k}")
            line = command.replace("{out}", shlex.quote(prefix)).replace("{round}", str(k))
            now = datetime.datetime.now(datetime.timezone.utc)
            print(f"== {now:%H:%M:%S} round {k}/{rounds}: {name}", file=log, flush=True)
            with open(prefix + ".txt", "w") as out, open(prefix + ".err", "w") as err:
                rc = subprocess.run(["bash", "-c", line], stdout=out, stderr=err).returncode
            if rc == 0:
                if os.path.getsize(prefix + ".err") == 0:
                    os.remove(prefix + ".err")
                continue
            message = f"{name} round {k} exited {rc} (see {prefix}.err)"
            if not keep_going:
                raise RuntimeError(message)
            failed += 1
            print(f"   {message}; left out", file=log, flush=True)
            with open(os.path.join(out_dir, "failed_runs.txt"), "a") as f:
                f.write(message + "\n")
            for leftover in os.listdir(out_dir):
                if leftover.startswith(f"{name}.r{k}.") and leftover.endswith(".json"):
                    os.remove(os.path.join(out_dir, leftover))
            for ext in (".json", ".txt"):
                if os.path.exists(prefix + ext):
                    os.rename(prefix + ext, prefix + ext + ".failed")
    return failed
