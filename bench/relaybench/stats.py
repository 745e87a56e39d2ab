"""Medians with their uncertainty.

The machines relay is measured on are noisy (a 2-core VM's rounds swing
several-fold as it moves its cores), so a median over rounds is reported
with a 95% bootstrap interval, and two sides are compared round by round.
"""
import random
import statistics

RESAMPLES = 5000


def median_interval(values):
    """(low, high): the 2.5th and 97.5th percentiles of the median of
    `values` over 5,000 bootstrap resamples, seeded so that the same input
    gives the same interval."""
    if not values:
        raise ValueError("median_interval of no values")
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(RESAMPLES))
    return medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


class Paired:
    """Round-by-round ratios side / reference of one figure (a time: below
    1 means the side is faster)."""

    def __init__(self, side, reference):
        if len(side) != len(reference):
            raise ValueError(f"{len(side)} rounds against {len(reference)}")
        self.ratios = [s / r for s, r in zip(side, reference) if r > 0]

    def median(self):
        return statistics.median(self.ratios) if self.ratios else float("nan")

    def interval(self):
        return median_interval(self.ratios) if self.ratios else (float("nan"),) * 2

    def below_one(self):
        """In how many rounds the side's figure was the smaller."""
        return sum(r < 1 for r in self.ratios)

    def describe(self):
        if not self.ratios:
            return "no rounds"
        low, high = self.interval()
        return (f"median {self.median():.3f} (95%: {low:.3f} to {high:.3f}), "
                f"below 1 in {self.below_one()} of {len(self.ratios)} rounds")


def pooled_differences(pairs):
    """Median and 95% interval of side - base over every (side, base) list
    pair given, pooled: runs of a noisy host differ by more than each run's
    own interval, so a claim rests on the rounds of several runs."""
    diffs = [a - b for side, base in pairs for a, b in zip(side, base)]
    low, high = median_interval(diffs)
    return statistics.median(diffs), low, high, len(diffs)
