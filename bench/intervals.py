"""A 95% bootstrap interval of a median, for the bench scripts that pair
rounds (bench/paired_table.py, bench/ab_pingpong.sh).

Rounds on the 2-core build VMs swing 0.4-2.7x as the VM moves its cores,
so a median over paired rounds needs its uncertainty beside it: 5,000
resamples of the rounds, seeded, so the same input prints the same
interval.

    from intervals import median_interval
    low, high = median_interval([0.95, 1.02, 0.91, ...])
"""
import random
import statistics

RESAMPLES = 5000


def median_interval(values):
    """(low, high): the 2.5th and 97.5th percentiles of the median of
    `values` over bootstrap resamples."""
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(RESAMPLES))
    return medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]
