"""Agreement of ``migrate.optim.dmlc_float.mx_float32`` (dmlc's float parser replayed in Python) with MXNet 1.9.1.

Run: OMP_NUM_THREADS=1 PYTHONPATH=. python bench/bench_dmlc_float.py [--count 100000]

Draws ``count`` values log-uniform over each decade range below (and the values of
``tests/migrate/optim/test_dmlc_float.py``), asks MXNet for each one's parsed float32 (``gluon_lr._fused.base.param_float32``:
one operator call per value, ~0.3 ms), and prints one table: per range, how many values ``mx_float32`` and
``np.float32`` get wrong, and the time per value of each.
"""
import argparse
import time

import numpy as np

RANGES = [(-12, -8), (-8, -4), (-4, 0), (0, 3), (3, 6)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100000)
    count = parser.parse_args().count
    from gluon_lr._fused.base import param_float32
    from migrate.optim.dmlc_float import mx_float32
    rng = np.random.RandomState(0)
    print(f"{'range':>14} {'values':>8} {'mx_float32 wrong':>17} {'np.float32 wrong':>17} {'us/value ours':>14} "
          f"{'us/value MXNet':>15}")
    total_wrong = 0
    for low, high in RANGES:
        values = [float(v) for v in 10.0 ** rng.uniform(low, high, count // len(RANGES))]
        if low == -8:
            values.append(2.0201059743896793e-05)
        start = time.perf_counter()
        ours = [mx_float32(v) for v in values]
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        theirs = [param_float32(v) for v in values]
        theirs_s = time.perf_counter() - start
        wrong = sum(a.view(np.int32) != b.view(np.int32) for a, b in zip(ours, theirs))
        numpy_wrong = sum(np.float32(v).view(np.int32) != b.view(np.int32) for v, b in zip(values, theirs))
        total_wrong += wrong
        print(f"{f'1e{low}..1e{high}':>14} {len(values):>8} {wrong:>17} {numpy_wrong:>17} "
              f"{1e6 * ours_s / len(values):>14.1f} {1e6 * theirs_s / len(values):>15.1f}")
    print("agree on every value" if total_wrong == 0 else f"DISAGREE on {total_wrong} values")


if __name__ == "__main__":
    main()
