"""The simulator's error against this host's Linux on whole transfers, for the advisor's
band on Linux (docs/advisor.md): the fidelity matrix's volume runs (docs/validation/
fidelity.md, column "completion (s)", simulator / kernel), as the ratios kernel ÷ simulator
of every case, with their 5th, 50th and 95th percentiles. Writes
python/xferlab/data/model_error.json; rerun it after `benches/fidelity.py` rewrites the
table.

    .venv/bin/python benches/advise_error.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xferlab.advisor.error import DATA, ratios_of
from xferlab.fidelity import validation_md

COMMAND = ".venv/bin/python benches/advise_error.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="say whether the stored file is the table's (exit 1 if not)")
    args = ap.parse_args()
    ratios = ratios_of(validation_md.read("fidelity"))
    data = {
        "source": "docs/validation/fidelity.md (the fidelity matrix, VALIDATION.md §3.2): completion (s), kernel / simulator",
        "command": COMMAND,
        "cases": len(ratios),
        "ratios": ratios,
    }
    text = json.dumps(data, indent=1) + "\n"
    path = Path(DATA)
    if args.check:
        same = path.read_text() == text
        print("the stored ratios are the table's" if same else f"{path} differs from the table: run {COMMAND}")
        return 0 if same else 1
    path.write_text(text)
    print(f"{len(ratios)} cases → {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
