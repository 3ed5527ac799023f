"""What importing repeat_hooks costs a fresh process (every hook process of a coding CLI pays it), side by side.

Five commands, each run in a fresh subprocess of this interpreter (``sys.executable``) and timed by the wall
clock from start to exit: ``python -c "pass"`` (interpreter start-up: the floor), ``python -c "from pydantic
import BaseModel"`` (pydantic's own import: the core's models are pydantic, so what a decision cannot go under),
``ONE_MODEL`` (pydantic with one model: what any pydantic program pays, the fair floor),
``python -c "import repeat_hooks"`` (the front door alone: lazy, it loads a name's module when the name is first
asked for) and ``DECISION``, what a process that decides imports. They run interleaved (``interleave.py``: each
round rotates which goes first), ``RUNS`` rounds after one warm-up round (which also writes any missing bytecode,
so "cold" means a fresh interpreter, not a cold disk). Printed: the medians in ms, the import's own cost (median
minus start-up), and ratios (medians of per-round ratios).

Then, from one ``python -X importtime -c DECISION``: where the import's time goes (self time summed by top-level
package; ``-X importtime`` adds its own overhead), and from one more subprocess, what it adds to ``sys.modules``:
the package's submodules (and which are left unloaded), the third-party packages, and whether OpenTelemetry or an
offline tool (``OFFLINE``) got loaded: a decision should load neither. Target (issue 28): at most 100 ms for what a
hook process loads.

    .venv/bin/python bench/import_time.py
"""

from __future__ import annotations

import importlib.metadata
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from interleave import interleave, median_ratio

RUNS = 15
DECISION = "from repeat_hooks import StopRepeatedCalls, ToolCall"
"""What a process that decides imports (the front door itself is lazy: ``import repeat_hooks`` loads no model)."""
ONE_MODEL = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nM(x=1)"
"""A program with one pydantic model, validated once: what any pydantic code pays (pydantic loads most of itself when
the first model is built, not at ``from pydantic import BaseModel``)."""
COMMANDS = {
    "python": "pass",
    "pydantic": "from pydantic import BaseModel",
    "one model": ONE_MODEL,
    "repeat_hooks": "import repeat_hooks",
    "decision": DECISION,
}
OFFLINE = ("repeat_hooks.offline", "repeat_hooks.kit.conformance", "repeat_hooks.__main__")  # and what is below
LOADED = """
import json, sys
before = set(sys.modules)
from repeat_hooks import StopRepeatedCalls, ToolCall
import repeat_hooks
print(json.dumps({"added": sorted(set(sys.modules) - before), "path": list(repeat_hooks.__path__)}))
"""


def stdlib(top: str) -> bool:
    """Whether top-level module ``top`` is the standard library's (``_sysconfigdata_*`` is generated)."""
    return top in sys.stdlib_module_names or top.startswith("_sysconfigdata")


def run(code: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *options, "-c", code], capture_output=True, text=True, check=True)


def seconds(code: str) -> float:
    start = time.perf_counter()
    run(code)
    return time.perf_counter() - start


def timings() -> None:
    times = interleave({name: lambda code=code: seconds(code) for name, code in COMMANDS.items()}, RUNS)
    medians = {name: statistics.median(figures) * 1e3 for name, figures in times.items()}
    print(f"fresh-process wall time, median of {RUNS} interleaved rounds ({sys.executable}):")
    for name, code in COMMANDS.items():
        own = f"  (import alone {medians[name] - medians['python']:6.1f} ms)" if name != "python" else ""
        shown = f"python -c {code!r}" if "\n" not in code else "python -c <one pydantic model, validated once>"
        print(f"  {shown:66s} {medians[name]:6.1f} ms{own}")
    print(
        f"  a decision's imports / pydantic with one model {median_ratio(times['decision'], times['one model']):.2f}x,"
        f" / pydantic's import {median_ratio(times['decision'], times['pydantic']):.2f}x, "
        f"import repeat_hooks / python {median_ratio(times['repeat_hooks'], times['python']):.2f}x, "
        f"pydantic / python {median_ratio(times['pydantic'], times['python']):.2f}x"
    )


def import_times(code: str) -> dict[str, int]:
    """Self microseconds of each module ``code`` imports, from ``-X importtime`` (stderr)."""
    found: dict[str, int] = {}
    for line in run(code, "-X", "importtime").stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and fields[0].strip().isdigit():
            found[fields[2].strip()] = int(fields[0])
    return found


def self_times() -> None:
    """Self time of what a decision's imports load beyond start-up, by top-level package."""
    start_up = import_times("pass")
    by_package: dict[str, int] = defaultdict(int)
    for name, micros in import_times(DECISION).items():
        if name not in start_up:
            top = name.split(".")[0]
            by_package["(stdlib)" if stdlib(top) else top] += micros
    total = sum(by_package.values())
    print(f"where it goes (-X importtime, self time by package beyond start-up, {total / 1e3:.1f} ms in all):")
    for package, micros in sorted(by_package.items(), key=lambda item: -item[1]):
        if micros >= 500:
            print(f"  {package:24s} {micros / 1e3:6.1f} ms")


def loaded() -> None:
    """What a decision's imports add to ``sys.modules``."""
    report = json.loads(run(LOADED).stdout)
    added: list[str] = report["added"]
    ours = [name for name in added if name.split(".")[0] == "repeat_hooks"]
    root = Path(report["path"][0])
    every = {
        ".".join(("repeat_hooks", *file.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for file in root.rglob("*.py")
    }
    distributions = importlib.metadata.packages_distributions()
    third_party = sorted(
        {
            name.split(".")[0]
            for name in added
            if not stdlib(name.split(".")[0]) and name.split(".")[0] != "repeat_hooks"
        }
    )
    print(f"{DECISION} loads {len(added)} modules; of repeat_hooks, {len(ours)} of {len(every)}:")
    print("  loaded:    " + " ".join(sorted(ours)))
    print("  unloaded:  " + " ".join(sorted(every - set(ours))))
    print("  third-party: " + ", ".join(f"{top} ({'/'.join(distributions.get(top, ['?']))})" for top in third_party))
    otel = any(name.split(".")[0] == "opentelemetry" for name in added)
    offline = sorted(name for name in ours if name.startswith(OFFLINE))
    print(f"  OpenTelemetry loaded: {'YES' if otel else 'no'}; offline tools loaded: {', '.join(offline) or 'none'}")


def main() -> None:
    timings()
    self_times()
    loaded()


if __name__ == "__main__":
    main()
