#!/bin/bash
# alternating rounds: base vs new, loopback 2 ranks all_reduce
for round in $(seq 1 10); do
  for side in base new; do
    for alg in auto shm; do
      for api in async blocking; do
        /tmp/collectives_$side --ranks 2 --collective all_reduce -b 8 -e 1024 -f 16 -n 100000 -w 5000 --algorithm $alg --api $api -c 0 2>/dev/null \
          | awk -v s=$side -v a=$alg -v p=$api -v r=$round '/^ +[0-9]/{print r, s, a, p, $1, $6}'
      done
    done
  done
done
