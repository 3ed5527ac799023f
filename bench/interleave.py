"""Side by side: the loop every bench script runs to compare variants of one workload on a noisy machine.

Each variant's ``sample`` (one measurement: seconds, or a tuple of figures) is taken once per round, the
variants rotating which goes first (for two: alternating), so that whatever the machine does meanwhile
falls on every side alike; before the rounds, each is sampled ``warmup`` times and the figures dropped.
The figures of a side are then compared through the median of per-round ratios (``median_ratio``).

    times = interleave({"plain": lambda: cpu_seconds(plain), "guarded": lambda: cpu_seconds(guarded)}, 31)
    print(median_ratio(times["guarded"], times["plain"]))

``ainterleave`` does the same with coroutine functions, inside a running event loop.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")


def rounds(names: Sequence[str], count: int) -> Iterator[list[str]]:
    """The order of ``names`` in each of ``count`` rounds: round ``n`` starts ``n`` places further on."""
    for number in range(count):
        shift = number % len(names)
        yield [*names[shift:], *names[:shift]]


def interleave(samples: Mapping[str, Callable[[], T]], count: int, *, warmup: int = 1) -> dict[str, list[T]]:
    """Each sample's figures over ``count`` interleaved rounds (after ``warmup`` unrecorded rounds), by name."""
    for _ in range(warmup):
        for sample in samples.values():
            sample()
    figures: dict[str, list[T]] = {name: [] for name in samples}
    for order in rounds(list(samples), count):
        for name in order:
            figures[name].append(samples[name]())
    return figures


async def ainterleave(
    samples: Mapping[str, Callable[[], Awaitable[T]]], count: int, *, warmup: int = 1
) -> dict[str, list[T]]:
    """``interleave`` for samples that are coroutine functions."""
    for _ in range(warmup):
        for sample in samples.values():
            await sample()
    figures: dict[str, list[T]] = {name: [] for name in samples}
    for order in rounds(list(samples), count):
        for name in order:
            figures[name].append(await samples[name]())
    return figures


def cpu_seconds(run: Callable[[], object], times: int = 1) -> float:
    """This process's CPU seconds for ``times`` calls of ``run``, after a garbage collection."""
    gc.collect()
    started = time.process_time()
    for _ in range(times):
        run()
    return time.process_time() - started


def median_ratio(over: Sequence[float], base: Sequence[float]) -> float:
    """The median of the per-round ratios ``over[n] / base[n]``."""
    return statistics.median(a / b for a, b in zip(over, base, strict=True))


def loop_overhead(title: str, sample: Callable[[str], float], kinds: Sequence[str], rounds: int) -> None:
    """Print an SDK loop's CPU time per tool call for each of ``kinds`` (the SDK alone, its empty hooks of the guard's
    shape, the guard: in that order), sampled side by side (``sample(kind)``: seconds per tool call), and the guard's
    own cost over the empty hooks, as the median of per-round ratios (and over the SDK alone)."""
    alone, empty, guarded = kinds
    times = interleave({kind: (lambda kind=kind: sample(kind)) for kind in kinds}, rounds)
    median = {kind: statistics.median(values) * 1e6 for kind, values in times.items()}
    print(f"{title}, {rounds} rounds")
    print("CPU time per tool call (one model call + one tool run each), median:")
    width = max(len(kind) for kind in kinds)
    for kind in kinds:
        print(f"  {kind:<{width}} {median[kind]:8.1f} us")
    print(
        f"the guard's own cost: {median[guarded] - median[empty]:.1f} us per tool call "
        f"({median_ratio(times[guarded], times[empty]):.3f}x the loop with {empty}, "
        f"{median_ratio(times[guarded], times[alone]):.3f}x with {alone})"
    )
