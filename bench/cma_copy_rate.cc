// bench/cma_copy_rate: how fast this machine copies out of another
// process's memory with process_vm_readv (CMA, the single copy Open MPI's
// vader and UCX's cma transport use between processes) against memcpy
// within one process, for the same sizes. Decides whether a single-copy
// shared-memory all_reduce can beat copying twice through a shared
// segment (collectives/shm.h): on a machine where CMA runs at less than
// half of memcpy's rate, it cannot.
//
//   bazel run //bench:cma_copy_rate -- [BYTES [CHUNK [ROUNDS]]]
//     BYTES   bytes copied per round (default 32 MiB)
//     CHUNK   bytes per process_vm_readv call (default 96 KiB)
//     ROUNDS  rounds, each printed (default 5; the first pays for the
//             kernel's first look at the pages)
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

bool ParseSize(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v == 0) return false;
  *out = static_cast<size_t>(v);
  return true;
}

double Seconds(std::chrono::steady_clock::time_point from) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - from)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{32} << 20, chunk = size_t{96} << 10, rounds = 5;
  if (argc > 4 || (argc > 1 && !ParseSize(argv[1], &bytes)) ||
      (argc > 2 && !ParseSize(argv[2], &chunk)) ||
      (argc > 3 && !ParseSize(argv[3], &rounds))) {
    std::fprintf(stderr,
                 "usage: cma_copy_rate [BYTES [CHUNK [ROUNDS]]] (positive "
                 "integers)\n");
    return 2;
  }
  std::vector<char> source(bytes, 1), destination(bytes, 0);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    std::perror("pipe");
    return 1;
  }
  // The child keeps a copy of `source` at the same address until told to
  // go; the parent reads it from there.
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    char go;
    close(pipe_fds[1]);
    (void)!read(pipe_fds[0], &go, 1);
    _exit(0);
  }
  close(pipe_fds[0]);
  int status = 0;
  std::printf("# %zu bytes per round, %zu bytes per process_vm_readv\n",
              bytes, chunk);
  std::printf("%6s %16s %16s %14s\n", "round", "cma (GB/s)", "memcpy (GB/s)",
              "cma/memcpy");
  for (size_t round = 0; round < rounds && status == 0; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t offset = 0; offset < bytes; offset += chunk) {
      const size_t n = std::min(chunk, bytes - offset);
      iovec local{destination.data() + offset, n};
      iovec remote{source.data() + offset, n};
      if (process_vm_readv(child, &local, 1, &remote, 1, 0) !=
          static_cast<ssize_t>(n)) {
        std::fprintf(stderr, "process_vm_readv: %s (not allowed here?)\n",
                     std::strerror(errno));
        status = 1;
        break;
      }
    }
    const double cma = Seconds(start);
    const auto copy_start = std::chrono::steady_clock::now();
    std::memcpy(destination.data(), source.data(), bytes);
    const double copy = Seconds(copy_start);
    if (status == 0) {
      std::printf("%6zu %16.2f %16.2f %14.2f\n", round, bytes / cma / 1e9,
                  bytes / copy / 1e9, copy / cma);
    }
  }
  (void)!write(pipe_fds[1], "x", 1);
  waitpid(child, nullptr, 0);
  return status;
}
