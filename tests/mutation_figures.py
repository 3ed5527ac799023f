"""``make mutate``'s figures: the kill rate of each core module, and of all but the console script.

Reads ``mutmut results --all true`` on stdin (one ``<module path>.x<function>__mutmut_<n>: <status>`` a line).
"""

from __future__ import annotations

import re
import sys
from collections import Counter

CAUGHT = {"killed", "timeout", "segfault"}
NAME = re.compile(r"^\s*repeat_hooks\.(?P<module>[\w.]+?)\.x[_ǁ]")


def main() -> None:
    total: Counter[str] = Counter()
    caught: Counter[str] = Counter()
    for line in sys.stdin:
        found = NAME.match(line)
        if found is None or ":" not in line:
            continue
        module = found["module"].replace(".", "/") + ".py"
        status = line.rsplit(":", 1)[1].strip()
        if status == "skipped":
            continue
        total[module] += 1
        caught[module] += status in CAUGHT
    for module in sorted(total):
        print(f"  {module:22s} {total[module]:5d} mutants, {100 * caught[module] / total[module]:5.1f}% killed")
    rest = [module for module in total if module not in ("offline/cli.py", "offline/console.py")]
    tested, killed = sum(total[m] for m in rest), sum(caught[m] for m in rest)
    rate = 100 * killed / max(tested, 1)
    print(f"outside the console script (offline/cli.py, console.py): {killed} of {tested} killed, {rate:.1f}%")


if __name__ == "__main__":
    main()
