#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (testing/fuzz/corpus/).

Usage: testing/fuzz/make_seeds.py   (from the repository root)

Seeds are valid inputs of every shape each decoder accepts, plus a few
near misses, so libFuzzer starts from inputs that reach deep into the
decoders. The wire layouts are those documented in
runtime/bootstrap/store_protocol.h and runtime/fingerprint.cc; inputs that
crashed a target later are added to its corpus by hand, never by this
script, and so are the files named by a hash: inputs libFuzzer found that
reach code the seeds did not (`FUZZER -merge=1` of a long run's corpus).
Deterministic: running it again rewrites the same files.
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def b(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<I", len(s)) + s


def frame(body):
    return struct.pack("<I", len(body)) + body


SET, GET, ADD, DELETE = 1, 2, 3, 4

# store_request: a client's stream of request frames.
set_ = frame(bytes([SET]) + b("rank/0/address") + b(b"\x00\x01\xfe\xff" * 8))
get1 = frame(bytes([GET]) + struct.pack("<QI", 30000, 1) + b("rank/1/address"))
get3 = frame(bytes([GET]) + struct.pack("<QI", 0, 3) + b("a") + b("bb") + b(""))
add = frame(bytes([ADD]) + b("barrier/0") + struct.pack("<q", -1))
delete = frame(bytes([DELETE]) + b("check/7/0"))
write("store_request", "set", set_)
write("store_request", "get_one", get1)
write("store_request", "get_three", get3)
write("store_request", "add", add)
write("store_request", "delete", delete)
write("store_request", "session", set_ + get1 + add + delete + get3)
write("store_request", "trailing_byte", frame(bytes([DELETE]) + b("k") + b"x"))
write("store_request", "partial_frame", set_ + get1[:9])
write("store_request", "huge_size", struct.pack("<I", 0xFFFFFFFF) + b"\x01")

# store_response: first byte picks the request (op = 1 + byte % 4).
write("store_response", "set_ok", bytes([SET - 1, 0]))
write("store_response", "get_ok", bytes([GET - 1, 0]) + struct.pack("<I", 2) + b("v0") + b(b"\x00" * 16))
write("store_response", "get_ok_empty", bytes([GET - 1, 0]) + struct.pack("<I", 0))
write("store_response", "add_ok", bytes([ADD - 1, 0]) + struct.pack("<q", 42))
write("store_response", "delete_ok", bytes([DELETE - 1, 0]))
write("store_response", "deadline", bytes([GET - 1, 4]) + b("key 'rank/3' not set within 30s"))
write("store_response", "bad_code", bytes([SET - 1, 17]) + b("x"))


# fingerprint: kind u8 | dtype u8 | count u64 | op u8 | root i32 | seq u64.
def fingerprint(kind, dtype, count, op, root, seq):
    return struct.pack("<BBQBiQ", kind, dtype, count, op, root, seq)


write("fingerprint", "all_reduce", fingerprint(2, 8, 1 << 20, 0, 0, 7))
write("fingerprint", "broadcast_root3", fingerprint(0, 0, 5, 0, 3, 1234))
write("fingerprint", "barrier", fingerprint(8, 0, 0, 0, 0, 0))
write("fingerprint", "bad_kind", fingerprint(200, 8, 1, 0, 0, 1))
write("fingerprint", "short", fingerprint(2, 8, 1, 0, 0, 1)[:-1])

# launch_environment: NAME=VALUE lines.
write("launch_environment", "relayrun",
      b"RELAY_RANK=1\nRELAY_WORLD_SIZE=4\nRELAY_LOCAL_RANK=1\n"
      b"RELAY_LOCAL_WORLD_SIZE=4\nRELAY_STORE_ADDR=127.0.0.1\n"
      b"RELAY_STORE_PORT=29501\nRELAY_TOKEN=abc\nRELAY_TRANSPORT=ucx\n")
write("launch_environment", "torchrun",
      b"RANK=0\nWORLD_SIZE=2\nLOCAL_RANK=0\nLOCAL_WORLD_SIZE=2\n"
      b"MASTER_ADDR=localhost\nMASTER_PORT=29500\n")
write("launch_environment", "openmpi",
      b"OMPI_COMM_WORLD_RANK=3\nOMPI_COMM_WORLD_SIZE=8\n"
      b"OMPI_COMM_WORLD_LOCAL_RANK=3\nOMPI_COMM_WORLD_LOCAL_SIZE=4\n"
      b"MASTER_ADDR=node0\n")
write("launch_environment", "slurm",
      b"SLURM_PROCID=5\nSLURM_NTASKS=6\nSLURM_LOCALID=1\nRELAY_STORE_ADDR=n1\n")
write("launch_environment", "contradiction",
      b"RELAY_RANK=1\nRELAY_WORLD_SIZE=2\nRANK=0\nWORLD_SIZE=2\n")
write("launch_environment", "bad_port",
      b"RANK=0\nWORLD_SIZE=1\nMASTER_PORT=70000\n")

# http_request: what a scraper (or anyone) sends the metrics endpoint.
write("http_request", "scrape", b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9400\r\n"
      b"Accept: text/plain;version=0.0.4\r\n\r\n")
write("http_request", "head_query", b"HEAD /metrics?name[]=x HTTP/1.0\n\n")
write("http_request", "post", b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
write("http_request", "http2", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
